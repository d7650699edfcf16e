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
//! (a forced failover), `sentinel::watch` drops the connection once the
//! Sentinels name another primary ([`Healing::leave`]). The blocking-read
//! pool ([`Blocking`]) follows the primary the last discovery confirmed.
//!
//! Also where every round trip gets its client span ([`traced`]), and where
//! the URLs, Sentinels and TLS settings become clients ([`Endpoint`]).

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use deadpool_redis::{Pool, PoolConfig, Runtime, Timeouts};
use redis::{
    AsyncConnectionConfig, Client, Cmd, ConnectionAddr, ConnectionInfo, Pipeline, RedisFuture, TlsCertificates, Value,
    aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig},
    cluster::{ClusterClient, ClusterClientBuilder},
    cluster_async::ClusterConnection,
};
use tracing::{Instrument, field::Empty};

use crate::{RedisConfig, RedisStoreError, sentinel::Sentinels};

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

/// How to reach Redis, resolved once from the configuration: the URLs and,
/// with `tls_ca_file`, the CA certificates `rediss://` connections trust; or
/// the Sentinels that name the primary.
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    urls: Vec<String>,
    certs: Option<TlsCertificates>,
    /// With Sentinel: where every new standalone connection finds the primary.
    sentinels: Option<Arc<Sentinels>>,
}

impl Endpoint {
    /// Read the configuration's URLs and CA file (a validated configuration).
    pub(crate) fn resolve(cfg: &RedisConfig) -> Result<Endpoint, RedisStoreError> {
        let certs = match &cfg.tls_ca_file {
            None => None,
            Some(path) => {
                let pem = std::fs::read(path)
                    .map_err(|e| RedisStoreError::Config(format!("cannot read tls_ca_file {}: {e}", path.display())))?;
                Some(TlsCertificates { client_tls: None, root_cert: Some(pem) })
            }
        };
        let sentinels = match &cfg.sentinel {
            Some(s) => Some(Arc::new(Sentinels::new(s, certs.clone(), cfg.op_timeout)?)),
            None => None,
        };
        Ok(Endpoint { urls: cfg.urls(), certs, sentinels })
    }

    /// A client of the first URL (standalone: the only one). Not with
    /// Sentinel: see [`primary`](Self::primary).
    pub(crate) fn client(&self) -> Result<Client, RedisStoreError> {
        let Some(url) = self.urls.first() else {
            return Err(RedisStoreError::Config("no Redis URL (the primary is found through Sentinel)".into()));
        };
        Ok(match &self.certs {
            Some(certs) => Client::build_with_tls(url.as_str(), certs.clone())?,
            None => Client::open(url.as_str())?,
        })
    }

    /// A client of the standalone server for a new connection: the URL's,
    /// or the primary the Sentinels name now (confirmed by `ROLE`; at most
    /// about twice `op_timeout`).
    pub(crate) async fn primary(&self) -> Result<Client, RedisStoreError> {
        match &self.sentinels {
            None => self.client(),
            Some(s) => Ok(Client::open(s.discover().await?.info)?),
        }
    }

    /// The standalone server known now, without asking anything: the URL's,
    /// or the primary the last discovery confirmed (`None` before the first).
    /// Its `host:port` names it.
    pub(crate) fn known_primary(&self) -> Result<Option<(String, ConnectionInfo)>, RedisStoreError> {
        match &self.sentinels {
            None => {
                let info = self.client()?.get_connection_info().clone();
                Ok(Some((String::new(), info)))
            }
            Some(s) => Ok(s.last().map(|p| (p.address, p.info))),
        }
    }

    /// With Sentinel: why no primary could be found lately (a failover in
    /// progress, the Sentinels unreachable), while none was found since.
    pub(crate) fn trouble(&self) -> Option<String> {
        self.sentinels.as_ref().and_then(|s| s.trouble())
    }

    /// Whether the primary is found through Sentinel.
    pub(crate) fn is_sentinel(&self) -> bool {
        self.sentinels.is_some()
    }

    /// The Sentinels, when the primary is found through them.
    pub(crate) fn sentinels(&self) -> Option<&Arc<Sentinels>> {
        self.sentinels.as_ref()
    }

    /// A cluster client over every seed URL.
    pub(crate) fn cluster(&self) -> ClusterClientBuilder {
        let builder = ClusterClient::builder(self.urls.clone());
        match &self.certs {
            Some(certs) => builder.certs(certs.clone()),
            None => builder,
        }
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
        let attempt = connect(&self.cfg, &self.endpoint).await;
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

/// The pool of dedicated connections for blocking reads (standalone only),
/// without a response timeout. With Sentinel it follows the primary: a pool
/// is built for the primary the last discovery confirmed (by the command
/// connection or the pub/sub hub), and replaced when that moves.
pub(crate) struct Blocking {
    cfg: RedisConfig,
    endpoint: Endpoint,
    /// The pool, and the primary (`host:port`; empty without Sentinel) it connects to.
    current: Mutex<Option<(String, Pool)>>,
}

impl std::fmt::Debug for Blocking {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let on = self.current.lock().ok().and_then(|c| c.as_ref().map(|(a, _)| a.clone()));
        f.debug_struct("Blocking").field("primary", &on).finish_non_exhaustive()
    }
}

impl Blocking {
    /// Without Sentinel the pool is built at once (a bad URL fails here).
    pub(crate) fn new(cfg: &RedisConfig, endpoint: &Endpoint) -> Result<Blocking, RedisStoreError> {
        let blocking = Blocking { cfg: cfg.clone(), endpoint: endpoint.clone(), current: Mutex::new(None) };
        if !endpoint.is_sentinel() {
            blocking.pool()?;
        }
        Ok(blocking)
    }

    /// The pool for the primary known now (`None`: none known yet).
    pub(crate) fn pool(&self) -> Result<Option<Pool>, RedisStoreError> {
        let mut current =
            self.current.lock().map_err(|_| RedisStoreError::Pool("blocking pool lock poisoned".into()))?;
        if let Some((address, pool)) = current.as_ref()
            && (!self.endpoint.is_sentinel()
                || self.endpoint.known_primary()?.is_some_and(|(known, _)| &known == address))
        {
            return Ok(Some(pool.clone()));
        }
        let Some((address, info)) = self.endpoint.known_primary()? else {
            return Ok(None);
        };
        let pool = blocking_pool(&self.cfg, info)?;
        if current.is_some() {
            tracing::info!(primary = %address, "blocking-read connections follow the new Redis primary");
        }
        *current = Some((address, pool.clone()));
        Ok(Some(pool))
    }
}

fn blocking_pool(cfg: &RedisConfig, info: ConnectionInfo) -> Result<Pool, RedisStoreError> {
    let conn_config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(cfg.op_timeout))
        // Blocking reads are bounded by the caller (BLOCK + op_timeout).
        .set_response_timeout(None);
    let manager = deadpool_redis::Manager::new_with_config(info, conn_config)?;
    let mut pool_config = PoolConfig::new(cfg.blocking_connections);
    pool_config.timeouts =
        Timeouts { wait: Some(cfg.op_timeout), create: Some(cfg.op_timeout), recycle: Some(cfg.op_timeout) };
    Pool::builder(manager)
        .config(pool_config)
        .runtime(Runtime::Tokio1)
        .build()
        .map_err(|e| RedisStoreError::Config(e.to_string()))
}

/// How loud a round trip's span is: `Debug` for the polls idle workers run
/// all the time (work reads, lease recovery, queue statistics), `Info` otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verbosity {
    Info,
    Debug,
}

/// Where this store's commands go, as its spans say it (OpenTelemetry
/// database client conventions).
#[derive(Debug, Clone)]
pub(crate) struct Target {
    /// `db.namespace`: the key prefix.
    namespace: String,
    /// `server.address` and `server.port`: known for a standalone server; a
    /// cluster routes each command to its slot's node.
    server: Option<(String, u16)>,
}

impl Target {
    pub(crate) fn new(cfg: &RedisConfig, endpoint: &Endpoint) -> Target {
        // A cluster routes each command to its slot's node; Sentinel's primary moves.
        let server = if cfg.cluster || cfg.sentinel.is_some() {
            None
        } else {
            endpoint.client().ok().and_then(|c| match c.get_connection_info().addr() {
                ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
                    Some((host.clone(), *port))
                }
                _ => None,
            })
        };
        Target { namespace: cfg.prefix.clone(), server }
    }
}

/// The command name of `cmd` (`HGET`, `XREADGROUP`…), for its span.
pub(crate) fn command_name(cmd: &Cmd) -> String {
    match cmd.args_iter().next() {
        Some(redis::Arg::Simple(name)) => String::from_utf8_lossy(name).to_ascii_uppercase(),
        _ => "COMMAND".into(),
    }
}

/// One round trip, bounded by `limit`, in a client span named
/// `redis <operation>` (`redis HGET`, or `redis EVALSHA <script>` when
/// `script` is given), recording a failure's `error.type`. `operation` is
/// only called when the span is recorded: with no subscriber interested
/// (no telemetry, or the level filtered out), a round trip formats nothing.
pub(crate) async fn traced<T>(
    target: &Target,
    verbosity: Verbosity,
    operation: impl FnOnce() -> String,
    script: Option<&str>,
    limit: Duration,
    fut: impl Future<Output = redis::RedisResult<T>>,
) -> Result<T, RedisStoreError> {
    let (address, port) = match &target.server {
        Some((a, p)) => (Some(a.as_str()), Some(*p)),
        None => (None, None),
    };
    macro_rules! redis_span {
        ($make:ident) => {
            tracing::$make!(
                "redis",
                otel.name = Empty,
                otel.kind = "client",
                db.system.name = "redis",
                db.operation.name = Empty,
                db.stored_procedure.name = script,
                db.namespace = target.namespace.as_str(),
                server.address = address,
                server.port = port,
                otel.status_code = Empty,
                error.type = Empty,
            )
        };
    }
    let span = match verbosity {
        Verbosity::Info => redis_span!(info_span),
        Verbosity::Debug => redis_span!(debug_span),
    };
    if span.is_disabled() {
        return bounded(limit, fut).await;
    }
    let operation = operation();
    let name = match script {
        Some(s) => format!("redis {operation} {s}"),
        None => format!("redis {operation}"),
    };
    span.record("otel.name", name.as_str());
    span.record("db.operation.name", operation.as_str());
    let result = bounded(limit, fut).instrument(span.clone()).await;
    if let Err(e) = &result
        && let Some(kind) = error_type(e)
    {
        span.record("otel.status_code", "error");
        span.record("error.type", kind);
    }
    result
}

/// A low-cardinality name for a failed round trip (`None`: an expected reply).
fn error_type(e: &RedisStoreError) -> Option<&str> {
    match e {
        RedisStoreError::Timeout(_) => Some("timeout"),
        RedisStoreError::Redis(r) => match r.code() {
            // XGROUP CREATE of an existing group: the usual case, not a failure.
            Some("BUSYGROUP") => None,
            // A server error code: NOSCRIPT, NOGROUP, OOM, READONLY, MOVED…
            Some(code) => Some(code),
            None if r.is_timeout() => Some("timeout"),
            None if r.is_io_error() || r.is_connection_dropped() || r.is_connection_refusal() => Some("io"),
            None => Some("client"),
        },
        RedisStoreError::Unreachable(_) => Some("unreachable"),
        RedisStoreError::Pool(_) => Some("pool"),
        RedisStoreError::Config(_) => Some("config"),
        RedisStoreError::Corrupt(_) => Some("corrupt"),
        RedisStoreError::Unconfirmed { .. } => Some("unconfirmed"),
    }
}
