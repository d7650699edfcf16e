//! Configuration of the Redis store.

use std::{path::PathBuf, time::Duration};

use crate::error::RedisStoreError;

/// How to reach Redis and lay out presa's keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisConfig {
    /// `redis://[user:pass@]host:port[/db]`, or `rediss://` for TLS (rustls;
    /// the server certificate is checked against the system's roots, or
    /// against [`tls_ca_file`](Self::tls_ca_file) when set). In cluster mode,
    /// one or more seed node URLs separated by commas. Empty with
    /// [`sentinel`](Self::sentinel).
    pub url: String,
    /// Find the primary through Redis Sentinel instead of `url` (see
    /// [`SentinelConfig`]); `url` is then empty and `cluster` false.
    pub sentinel: Option<SentinelConfig>,
    /// PEM file of the CA certificate(s) that sign the server's certificate,
    /// trusted instead of the system's roots. Needs `rediss://` URLs (or
    /// [`SentinelConfig::tls`]).
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
    /// the recovery horizon of the work streams (see `work/`). Default
    /// 10 minutes.
    pub max_lease: Duration,
    /// Most connections held at once by blocking work reads (one per
    /// concurrent `claim` that waits). Default 8.
    pub blocking_connections: usize,
    /// Capacity of each local watcher's queue; a watcher that falls further
    /// behind misses snapshots (pub/sub is only a wake-up). Default 256.
    pub watch_buffer: usize,
    /// How long a dead letter is kept after its task died (see `dead.rs`).
    /// Default 7 days ([`presa_store::dead::DEFAULT_DEAD_LETTER_TTL`]).
    pub dead_letter_ttl: Duration,
    /// What a create and a task's last write must reach before they are
    /// acknowledged. Default [`Durability::Primary`].
    pub durability: Durability,
    /// With [`Durability::Replicated`]: most connections held at once by
    /// writes waiting for their replicas (`WAIT` blocks its connection).
    /// Default 16.
    pub durable_connections: usize,
    /// Whether creates index every task for the admin listing
    /// ([`presa_store::AdminStore::list_tasks`]). Off: no index bytes, and
    /// listings answer [`presa_store::StoreError::Unsupported`]. Default on.
    pub task_index: bool,
    /// Most writes one group commit runs in one script call (`batch.rs`):
    /// concurrent creates (standalone) and a worker's concluding writes
    /// waiting while a call is in flight go out together. 1 turns it off
    /// (each write its own script). Default 64.
    pub batch_max: usize,
}

impl RedisConfig {
    /// Defaults for `url`.
    pub fn new(url: impl Into<String>) -> Self {
        RedisConfig {
            url: url.into(),
            sentinel: None,
            tls_ca_file: None,
            prefix: "presa".into(),
            partitions: 16,
            op_timeout: presa_store::DEFAULT_OP_TIMEOUT,
            cluster: false,
            max_lease: Duration::from_secs(600),
            blocking_connections: 8,
            watch_buffer: 256,
            dead_letter_ttl: presa_store::dead::DEFAULT_DEAD_LETTER_TTL,
            durability: Durability::Primary,
            durable_connections: 16,
            task_index: true,
            batch_max: 64,
        }
    }

    /// Defaults, with the primary found through Redis Sentinel.
    pub fn sentinel(sentinel: SentinelConfig) -> Self {
        RedisConfig { sentinel: Some(sentinel), ..RedisConfig::new("") }
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

    /// Keep dead letters this long after their task died.
    pub fn with_dead_letter_ttl(mut self, ttl: Duration) -> Self {
        self.dead_letter_ttl = ttl;
        self
    }

    /// Index every task for the admin listing (on by default).
    pub fn with_task_index(mut self, on: bool) -> Self {
        self.task_index = on;
        self
    }

    /// Group-commit at most `max` writes in one script call (1: off).
    pub fn with_batch_max(mut self, max: usize) -> Self {
        self.batch_max = max;
        self
    }

    /// The longest lease a claim or renewal may grant: the work streams'
    /// recovery horizon (see `max_lease`).
    pub fn with_max_lease(mut self, max_lease: Duration) -> Self {
        self.max_lease = max_lease;
        self
    }

    /// Use the Redis Cluster client.
    pub fn with_cluster(mut self, cluster: bool) -> Self {
        self.cluster = cluster;
        self
    }

    /// Set what writes must reach before they are acknowledged.
    pub fn with_durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
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
        if self.dead_letter_ttl < Duration::from_millis(1) {
            return bad("dead_letter_ttl must be at least a millisecond");
        }
        if self.blocking_connections == 0
            || self.watch_buffer == 0
            || self.durable_connections == 0
            || self.batch_max == 0
        {
            return bad("blocking_connections, watch_buffer, durable_connections and batch_max must be positive");
        }
        self.durability.validate()?;
        if let Some(sentinel) = &self.sentinel {
            if !self.url.is_empty() {
                return bad("a Redis URL and Sentinels exclude each other: give one");
            }
            if self.cluster {
                return bad("Sentinels and cluster mode exclude each other (Redis Cluster fails over by itself)");
            }
            if self.tls_ca_file.is_some() && !sentinel.tls {
                return bad("tls_ca_file needs TLS to the Sentinels and the primary");
            }
            return sentinel.validate();
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

/// Where Redis Sentinel finds the primary: the Sentinels to ask, the name
/// they monitor it by, and how to authenticate to them and to the primary.
///
/// Every new connection (the command connection, a blocking-read
/// connection, the pub/sub connection) asks the Sentinels for the primary's
/// address (`SENTINEL get-master-addr-by-name`, all of them at once, the
/// first answer wins) and checks with `ROLE` that what it names is a
/// primary; an error a new connection can cure (`READONLY`, a refused or
/// dropped connection…) sends the connection through that again, so after a
/// failover every connection ends up on the promoted replica.
#[derive(Clone, PartialEq, Eq)]
pub struct SentinelConfig {
    /// The Sentinels, `host:port` each (Sentinel's port is usually 26379).
    pub sentinels: Vec<String>,
    /// The name the Sentinels monitor the primary by (`sentinel monitor <name> …`).
    pub master: String,
    /// Username for the Sentinels (an ACL user in `sentinel.conf`); `None`: `default`.
    pub sentinel_username: Option<String>,
    /// Password for the Sentinels (`requirepass` in `sentinel.conf`); `None`: no AUTH.
    pub sentinel_password: Option<String>,
    /// Username for the primary (and replicas); `None`: `default`.
    pub username: Option<String>,
    /// Password for the primary (`requirepass`); `None`: no AUTH.
    pub password: Option<String>,
    /// TLS (rustls) to the Sentinels and to the primary, checked against the
    /// system's roots or [`RedisConfig::tls_ca_file`]. The primary's
    /// certificate must name the host the Sentinels announce (an IP address
    /// unless they run with `resolve-hostnames`/`announce-hostnames`).
    pub tls: bool,
}

impl std::fmt::Debug for SentinelConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hidden = |p: &Option<String>| p.as_ref().map(|_| "***");
        f.debug_struct("SentinelConfig")
            .field("sentinels", &self.sentinels)
            .field("master", &self.master)
            .field("sentinel_username", &self.sentinel_username)
            .field("sentinel_password", &hidden(&self.sentinel_password))
            .field("username", &self.username)
            .field("password", &hidden(&self.password))
            .field("tls", &self.tls)
            .finish()
    }
}

impl SentinelConfig {
    /// The Sentinels of `list` (`host:port`, comma-separated) watching `master`,
    /// without authentication or TLS.
    pub fn new(list: &str, master: impl Into<String>) -> Self {
        SentinelConfig {
            sentinels: list.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect(),
            master: master.into(),
            sentinel_username: None,
            sentinel_password: None,
            username: None,
            password: None,
            tls: false,
        }
    }

    /// The Sentinels as host and port (a validated configuration has only good ones).
    pub(crate) fn addresses(&self) -> Result<Vec<(String, u16)>, RedisStoreError> {
        self.sentinels.iter().map(|s| parse_host_port(s)).collect()
    }

    fn validate(&self) -> Result<(), RedisStoreError> {
        if self.sentinels.is_empty() {
            return Err(RedisStoreError::Config("no Sentinel given".into()));
        }
        self.addresses()?;
        if self.master.is_empty() || self.master.len() > 256 || self.master.chars().any(char::is_whitespace) {
            return Err(RedisStoreError::Config(
                "the Sentinel master name must be 1 to 256 characters without spaces".into(),
            ));
        }
        Ok(())
    }
}

/// `host:port` (IPv6 in brackets: `[::1]:26379`) as host and port.
fn parse_host_port(s: &str) -> Result<(String, u16), RedisStoreError> {
    let bad = || RedisStoreError::Config(format!("a Sentinel must be HOST:PORT, not {s:?}"));
    if s.contains("://") {
        return Err(bad());
    }
    let (host, port) = s.rsplit_once(':').ok_or_else(bad)?;
    let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    let port: u16 = port.parse().map_err(|_| bad())?;
    if host.is_empty() || port == 0 || host.contains(['/', '@', ' ']) {
        return Err(bad());
    }
    Ok((host.to_string(), port))
}

/// What a write must reach before it is acknowledged (`--durability`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Applied by the primary (asynchronous replication; a failover may lose
    /// the last writes).
    #[default]
    Primary,
    /// Also confirmed by `replicas` replicas within `timeout` (`WAIT`).
    Replicated {
        /// How many replicas must confirm (`WAIT`'s numreplicas).
        replicas: u32,
        /// How long to wait for them (`WAIT`'s timeout).
        timeout: Duration,
    },
}

impl Durability {
    pub(crate) fn validate(&self) -> Result<(), RedisStoreError> {
        match self {
            Durability::Replicated { replicas: 0, .. } => {
                Err(RedisStoreError::Config("replicated durability needs at least one replica".into()))
            }
            Durability::Replicated { timeout, .. } if timeout.is_zero() => Err(RedisStoreError::Config(
                "replicated durability needs a positive timeout (WAIT 0 would wait forever)".into(),
            )),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentinel_addresses_parse_or_fail_clearly() {
        let cfg = SentinelConfig::new(" s1:26379, 10.0.0.2:26380 ,[::1]:5000,", "m");
        assert_eq!(
            cfg.addresses().unwrap(),
            vec![("s1".into(), 26379), ("10.0.0.2".into(), 26380), ("::1".into(), 5000)]
        );
        assert!(RedisConfig::sentinel(cfg).validate().is_ok());
        for bad in ["s1", "s1:", ":26379", "s1:0", "s1:99999", "redis://s1:26379", "u@s1:1"] {
            let err = RedisConfig::sentinel(SentinelConfig::new(bad, "m")).validate().unwrap_err();
            assert!(err.to_string().contains("HOST:PORT"), "{bad}: {err}");
        }
        assert!(RedisConfig::sentinel(SentinelConfig::new("", "m")).validate().is_err());
        assert!(RedisConfig::sentinel(SentinelConfig::new("s:1", "")).validate().is_err());
        assert!(RedisConfig::sentinel(SentinelConfig::new("s:1", "a b")).validate().is_err());
    }

    #[test]
    fn sentinels_exclude_a_url_and_cluster_mode() {
        let s = SentinelConfig::new("s:1", "m");
        let with_url = RedisConfig { url: "redis://h:1".into(), ..RedisConfig::sentinel(s.clone()) };
        assert!(with_url.validate().unwrap_err().to_string().contains("exclude"));
        assert!(RedisConfig::sentinel(s.clone()).with_cluster(true).validate().is_err());
        let ca = RedisConfig::sentinel(s.clone()).with_tls_ca_file(Some("/ca.pem".into()));
        assert!(ca.validate().is_err(), "a CA file needs TLS");
        let tls = RedisConfig::sentinel(SentinelConfig { tls: true, ..s }).with_tls_ca_file(Some("/ca.pem".into()));
        assert!(tls.validate().is_ok());
    }

    #[test]
    fn debug_hides_passwords() {
        let s = SentinelConfig {
            sentinel_password: Some("sentpw".into()),
            password: Some("datapw".into()),
            ..SentinelConfig::new("s:1", "m")
        };
        let text = format!("{:?}", RedisConfig::sentinel(s));
        assert!(!text.contains("sentpw") && !text.contains("datapw"), "{text}");
    }
}
