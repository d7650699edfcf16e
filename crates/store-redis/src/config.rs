//! Configuration of the Redis store.

use std::{path::PathBuf, time::Duration};

use crate::RedisStoreError;

/// How to reach Redis and lay out presa's keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisConfig {
    /// `redis://[user:pass@]host:port[/db]`, or `rediss://` for TLS (rustls;
    /// the server certificate is checked against the system's roots, or
    /// against [`tls_ca_file`](Self::tls_ca_file) when set). In cluster mode,
    /// one or more seed node URLs separated by commas.
    pub url: String,
    /// PEM file of the CA certificate(s) that sign the server's certificate,
    /// trusted instead of the system's roots. Needs `rediss://` URLs.
    pub tls_ca_file: Option<PathBuf>,
    /// Prefix of every key and channel (no `{` or `}`). Default `presa`.
    pub prefix: String,
    /// Number of work partitions (streams). Default 16. Ids name their
    /// partition, so this must never shrink while tasks exist.
    pub partitions: u16,
    /// Upper bound of every single Redis command (connect, read, script).
    /// Default 2 s ([`presa_store::DEFAULT_OP_TIMEOUT`]).
    pub op_timeout: Duration,
    /// Use the Redis Cluster client (sharded pub/sub, per-slot reads).
    pub cluster: bool,
    /// Longest lease a claim or renewal can grant (longer ones are capped):
    /// the recovery horizon of the work streams (see `work.rs`). Default
    /// 10 minutes.
    pub max_lease: Duration,
    /// Most connections held at once by blocking work reads (one per
    /// concurrent `claim` that waits). Default 8.
    pub blocking_connections: usize,
    /// Capacity of each local watcher's queue; a watcher that falls further
    /// behind misses snapshots (pub/sub is only a wake-up). Default 256.
    pub watch_buffer: usize,
}

impl RedisConfig {
    /// Defaults for `url`.
    pub fn new(url: impl Into<String>) -> Self {
        RedisConfig {
            url: url.into(),
            tls_ca_file: None,
            prefix: "presa".into(),
            partitions: 16,
            op_timeout: presa_store::DEFAULT_OP_TIMEOUT,
            cluster: false,
            max_lease: Duration::from_secs(600),
            blocking_connections: 8,
            watch_buffer: 256,
        }
    }

    /// Set the key prefix.
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Set the number of partitions.
    pub fn with_partitions(mut self, partitions: u16) -> Self {
        self.partitions = partitions;
        self
    }

    /// Set the per-command timeout.
    pub fn with_op_timeout(mut self, op_timeout: Duration) -> Self {
        self.op_timeout = op_timeout;
        self
    }

    /// Use the Redis Cluster client.
    pub fn with_cluster(mut self, cluster: bool) -> Self {
        self.cluster = cluster;
        self
    }

    /// Trust the CA certificate(s) in this PEM file for `rediss://` (`None`:
    /// the system's roots).
    pub fn with_tls_ca_file(mut self, path: Option<PathBuf>) -> Self {
        self.tls_ca_file = path;
        self
    }

    /// The seed URLs (one unless in cluster mode).
    pub(crate) fn urls(&self) -> Vec<String> {
        self.url.split(',').map(str::trim).filter(|u| !u.is_empty()).map(str::to_string).collect()
    }

    pub(crate) fn validate(&self) -> Result<(), RedisStoreError> {
        let bad = |m: &str| Err(RedisStoreError::Config(m.to_string()));
        if self.prefix.is_empty() || self.prefix.contains(['{', '}']) {
            return bad("prefix must be non-empty and contain no braces");
        }
        if self.partitions == 0 {
            return bad("partitions must be at least 1");
        }
        if self.op_timeout.is_zero() {
            return bad("op_timeout must be positive");
        }
        if self.max_lease < Duration::from_secs(1) {
            return bad("max_lease must be at least a second");
        }
        if self.blocking_connections == 0 || self.watch_buffer == 0 {
            return bad("blocking_connections and watch_buffer must be positive");
        }
        if self.tls_ca_file.is_some() && !self.urls().iter().all(|u| u.starts_with("rediss://")) {
            return bad("tls_ca_file needs rediss:// URLs");
        }
        match self.urls().len() {
            0 => bad("no Redis URL"),
            1 => Ok(()),
            _ if self.cluster => Ok(()),
            _ => bad("several URLs need cluster mode"),
        }
    }
}
