//! Connections: one multiplexed, self-reconnecting command connection
//! (standalone [`ConnectionManager`] or cluster [`ClusterConnection`]), each
//! command bounded by `op_timeout`, and for standalone blocking work reads a
//! small pool of dedicated connections without a response timeout (a blocking
//! `XREADGROUP` would otherwise trip redis-rs' default 500 ms timeout, or hold
//! up every command queued behind it on the shared connection).
//!
//! Also where every round trip gets its client span ([`traced`]), and where
//! the URLs and TLS settings become clients ([`Endpoint`]).

use std::time::Duration;

use deadpool_redis::{Pool, PoolConfig, Runtime, Timeouts};
use redis::{
    AsyncConnectionConfig, Client, Cmd, ConnectionAddr, Pipeline, RedisFuture, TlsCertificates, Value,
    aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig},
    cluster::{ClusterClient, ClusterClientBuilder},
    cluster_async::ClusterConnection,
};
use tracing::{Instrument, field::Empty};

use crate::{RedisConfig, RedisStoreError};

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
/// with `tls_ca_file`, the CA certificates `rediss://` connections trust.
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    urls: Vec<String>,
    certs: Option<TlsCertificates>,
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
        Ok(Endpoint { urls: cfg.urls(), certs })
    }

    /// A client of the first URL (standalone: the only one).
    pub(crate) fn client(&self) -> Result<Client, RedisStoreError> {
        let url = self.urls[0].as_str();
        Ok(match &self.certs {
            Some(certs) => Client::build_with_tls(url, certs.clone())?,
            None => Client::open(url)?,
        })
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

/// Open the command connection (failing within `op_timeout` when Redis is unreachable).
pub(crate) async fn connect(cfg: &RedisConfig, endpoint: &Endpoint) -> Result<Conn, RedisStoreError> {
    if cfg.cluster {
        let client = endpoint
            .cluster()
            .connection_timeout(cfg.op_timeout)
            .response_timeout(cfg.op_timeout)
            .retries(2)
            .build()?;
        let conn = bounded(cfg.op_timeout, client.get_async_connection()).await?;
        Ok(Conn::Cluster(conn))
    } else {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(cfg.op_timeout))
            .set_response_timeout(Some(cfg.op_timeout))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(500));
        let conn = bounded(cfg.op_timeout, ConnectionManager::new_with_config(endpoint.client()?, config)).await?;
        Ok(Conn::Single(conn))
    }
}

/// The pool of dedicated connections for blocking reads (standalone only).
pub(crate) fn blocking_pool(cfg: &RedisConfig, endpoint: &Endpoint) -> Result<Pool, RedisStoreError> {
    let conn_config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(cfg.op_timeout))
        // Blocking reads are bounded by the caller (BLOCK + op_timeout).
        .set_response_timeout(None);
    let info = endpoint.client()?.get_connection_info().clone();
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
        let server = if cfg.cluster {
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
/// `script` is given), recording a failure's `error.type`.
pub(crate) async fn traced<T>(
    target: &Target,
    verbosity: Verbosity,
    operation: &str,
    script: Option<&str>,
    limit: Duration,
    fut: impl Future<Output = redis::RedisResult<T>>,
) -> Result<T, RedisStoreError> {
    let name = match script {
        Some(s) => format!("redis {operation} {s}"),
        None => format!("redis {operation}"),
    };
    let (address, port) = match &target.server {
        Some((a, p)) => (Some(a.as_str()), Some(*p)),
        None => (None, None),
    };
    macro_rules! redis_span {
        ($make:ident) => {
            tracing::$make!(
                "redis",
                otel.name = name.as_str(),
                otel.kind = "client",
                db.system.name = "redis",
                db.operation.name = operation,
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
        RedisStoreError::Pool(_) => Some("pool"),
        RedisStoreError::Config(_) => Some("config"),
        RedisStoreError::Corrupt(_) => Some("corrupt"),
    }
}
