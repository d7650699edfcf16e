//! Connections: one multiplexed, self-reconnecting command connection
//! (standalone [`ConnectionManager`] or cluster [`ClusterConnection`]), each
//! command bounded by `op_timeout`, and for standalone blocking work reads a
//! small pool of dedicated connections without a response timeout (a blocking
//! `XREADGROUP` would otherwise trip redis-rs' default 500 ms timeout, or hold
//! up every command queued behind it on the shared connection).
//!
//! The command connection heals itself ([`Healing`]): it is opened lazily
//! (a pod starts with Redis down and serves once it answers), and replaced
//! by a fresh one after any error a new connection can cure (refused AUTH
//! or ACL, `LOADING`, `READONLY` after a failover, `CLUSTERDOWN`, `MOVED`,
//! I/O errors, a connection that stopped answering), so no error class
//! leaves a pod wedged. It also records when Redis last answered, for the
//! liveness probe.
//!
//! With Sentinel, every new connection (this one, a blocking-read one, the
//! pub/sub hub's) first asks the Sentinels for the primary and checks its
//! `ROLE` (`sentinel.rs`), so the healing above is also what follows a
//! failover: the first error on the old primary (refused, dropped,
//! `READONLY` once it came back as a replica) drops the connection, and the
//! next one goes to the promoted replica; when the old primary stays up
//! (a forced failover), `link::follow_primary` drops the connection once the
//! Sentinels name another primary ([`Healing::leave`]). The blocking-read
//! pool ([`Blocking`]) follows the primary the last discovery confirmed.
//!
//! Also where every round trip gets its client span ([`traced`], in
//! `conn/trace.rs`), and where the URLs, Sentinels and TLS settings become
//! clients ([`Endpoint`], in `conn/endpoint.rs`); the blocking-read pool is
//! in `conn/blocking.rs`.

mod blocking;
mod endpoint;
mod sentinel;
mod trace;

use std::{
    sync::{
        Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use redis::{
    Cmd, ConnectionAddr, ConnectionInfo, Pipeline, RedisFuture, Value,
    aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig},
    cluster_async::ClusterConnection,
};

pub(crate) use blocking::Blocking;
pub(crate) use endpoint::Endpoint;
pub(crate) use sentinel::{Asking, Sentinels};
pub(crate) use trace::{Target, Verbosity, command_name, traced};

use crate::{config::RedisConfig, error::RedisStoreError};

/// The shared command connection.
#[derive(Clone)]
pub(crate) enum Conn {
    /// A standalone server (or a proxy that looks like one).
    Single(ConnectionManager),
    /// A Redis Cluster, routed by key slot.
    Cluster(ClusterConnection),
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Conn::Single(_) => f.write_str("Conn::Single"),
            Conn::Cluster(_) => f.write_str("Conn::Cluster"),
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// Bound a Redis future by `limit`.
pub(crate) async fn bounded<T>(
    limit: Duration,
    fut: impl Future<Output = redis::RedisResult<T>>,
) -> Result<T, RedisStoreError> {
    match tokio::time::timeout(limit, fut).await {
        Ok(r) => r.map_err(RedisStoreError::from),
        Err(_) => Err(RedisStoreError::Timeout(limit)),
    }
}

/// Open the command connection (failing within `op_timeout` when Redis is
/// unreachable; with Sentinel, after a discovery of up to twice that). With
/// Sentinel, also the `host:port` of the primary it connected to.
pub(crate) async fn connect(cfg: &RedisConfig, endpoint: &Endpoint) -> Result<(Conn, Option<String>), RedisStoreError> {
    if cfg.cluster {
        let client = endpoint
            .cluster()
            .connection_timeout(cfg.op_timeout)
            .response_timeout(cfg.op_timeout)
            .retries(2)
            .build()?;
        let conn = bounded(cfg.op_timeout, client.get_async_connection()).await?;
        Ok((Conn::Cluster(conn), None))
    } else {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(cfg.op_timeout))
            .set_response_timeout(Some(cfg.op_timeout))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(500));
        let client = endpoint.primary().await?;
        let address = endpoint.is_sentinel().then(|| address_of(client.get_connection_info()));
        let conn = bounded(cfg.op_timeout, ConnectionManager::new_with_config(client, config)).await?;
        Ok((Conn::Single(conn), address))
    }
}

/// `host:port` of a TCP (or TLS) address, as [`Sentinels`] name primaries.
pub(crate) fn address_of(info: &ConnectionInfo) -> String {
    match info.addr() {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => format!("{host}:{port}"),
        other => other.to_string(),
    }
}

/// The command connection, (re)opened on demand: see the module docs.
pub(crate) struct Healing {
    cfg: RedisConfig,
    endpoint: Endpoint,
    current: Mutex<Option<Conn>>,
    /// With Sentinel: the primary (`host:port`) `current` was opened to.
    on: Mutex<Option<String>>,
    /// One (re)connect at a time; the others wait for its outcome (the
    /// error of the last failed attempt, and how many attempts ended).
    connecting: tokio::sync::Mutex<(u64, String)>,
    /// Connect attempts ended (a copy of `connecting.0` readable without the lock).
    attempts: AtomicU64,
    /// When this process started (the base of `last_ok_ms`).
    born: Instant,
    /// Ms after `born` of the last successful round trip (0: none yet).
    last_ok_ms: AtomicU64,
}

impl std::fmt::Debug for Healing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Healing").field("current", &self.current.lock().ok().map(|c| c.is_some())).finish()
    }
}

impl Healing {
    /// Nothing is opened yet: the first command connects.
    pub(crate) fn new(cfg: &RedisConfig, endpoint: &Endpoint) -> Healing {
        Healing {
            cfg: cfg.clone(),
            endpoint: endpoint.clone(),
            current: Mutex::new(None),
            on: Mutex::new(None),
            connecting: tokio::sync::Mutex::new((0, String::new())),
            attempts: AtomicU64::new(0),
            born: Instant::now(),
            last_ok_ms: AtomicU64::new(0),
        }
    }

    fn cached(&self) -> Option<Conn> {
        self.current.lock().ok().and_then(|c| c.clone())
    }

    /// The current connection, or a new one (failing within about `op_timeout`).
    pub(crate) async fn get(&self) -> Result<Conn, RedisStoreError> {
        if let Some(c) = self.cached() {
            return Ok(c);
        }
        let seen = self.attempts.load(Ordering::Acquire);
        let mut last = self.connecting.lock().await;
        if let Some(c) = self.cached() {
            return Ok(c);
        }
        if last.0 != seen {
            // An attempt failed while this command waited: share its outcome
            // rather than queue one more connect timeout per waiting command.
            return Err(RedisStoreError::Unreachable(last.1.clone()));
        }
        // Boxed: the connect future (Sentinel discovery included) is
        // kilobytes, and every round trip's future would carry it inline.
        let attempt = Box::pin(connect(&self.cfg, &self.endpoint)).await;
        last.0 += 1;
        self.attempts.store(last.0, Ordering::Release);
        let (conn, address) = attempt.inspect_err(|e| last.1 = e.to_string())?;
        if let Ok(mut cur) = self.current.lock() {
            *cur = Some(conn.clone());
            if let Ok(mut on) = self.on.lock() {
                *on = address;
            }
        }
        tracing::info!("redis command connection open");
        Ok(conn)
    }

    /// Record how a round trip on the connection ended: success moves the
    /// liveness clock; an error a new connection can cure drops this one.
    pub(crate) fn record<T>(&self, result: &Result<T, RedisStoreError>) {
        match result {
            Ok(_) => {
                let ms = (self.born.elapsed().as_millis() as u64).max(1);
                self.last_ok_ms.fetch_max(ms, Ordering::Relaxed);
            }
            Err(e) if self.cured_by_reconnect(e) => {
                if let Ok(mut cur) = self.current.lock()
                    && cur.take().is_some()
                {
                    tracing::warn!(error = %e, "dropping the redis command connection; the next command opens a new one");
                }
            }
            Err(_) => {}
        }
    }

    /// With Sentinel: the primary the open connection goes to, if one is open.
    pub(crate) fn on(&self) -> Option<String> {
        let open = self.current.lock().ok().is_some_and(|c| c.is_some());
        if open { self.on.lock().ok().and_then(|o| o.clone()) } else { None }
    }

    /// Drop the open connection if it still goes to `address` (the
    /// Sentinels promoted another primary): the next command opens one to
    /// the new primary.
    pub(crate) fn leave(&self, address: &str, why: &str) {
        if let Ok(mut cur) = self.current.lock()
            && self.on.lock().ok().is_some_and(|on| on.as_deref() == Some(address))
            && cur.take().is_some()
        {
            tracing::warn!(
                primary = address,
                reason = why,
                "dropping the redis command connection to a former primary"
            );
        }
    }

    /// How long since Redis last answered a round trip (since start-up
    /// when it never did).
    pub(crate) fn silent_for(&self) -> Duration {
        let last = Duration::from_millis(self.last_ok_ms.load(Ordering::Relaxed));
        self.born.elapsed().saturating_sub(last)
    }

    fn cured_by_reconnect(&self, e: &RedisStoreError) -> bool {
        match e {
            // Slow or gone: only when nothing answered for a while (a slow
            // Redis under load must not make every pod reconnect).
            RedisStoreError::Timeout(_) => self.silent_for() > self.cfg.op_timeout * 2,
            RedisStoreError::Redis(r) => curable(r),
            RedisStoreError::Unreachable(_)
            | RedisStoreError::Pool(_)
            | RedisStoreError::Config(_)
            | RedisStoreError::Unconfirmed { .. }
            | RedisStoreError::Unanswered(_)
            | RedisStoreError::Corrupt(_) => false,
        }
    }
}

/// Whether a fresh connection may cure this error.
pub(crate) fn curable(r: &redis::RedisError) -> bool {
    const CODES: [&str; 9] =
        ["NOAUTH", "WRONGPASS", "NOPERM", "LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "MOVED", "TRYAGAIN"];
    r.kind() == redis::ErrorKind::AuthenticationFailed
        || r.code().is_some_and(|c| CODES.contains(&c))
        || r.is_io_error()
        || r.is_connection_dropped()
        || r.is_connection_refusal()
        || r.is_timeout()
        || r.is_unrecoverable_error()
}
