//! The client span of every round trip ([`traced`]): its name, its
//! OpenTelemetry database attributes ([`Target`]), its level
//! ([`Verbosity`]) and a failure's `error.type`.

use std::time::Duration;

use redis::{Cmd, ConnectionAddr};
use tracing::{Instrument, field::Empty};

use super::{Endpoint, bounded};
use crate::{config::RedisConfig, error::RedisStoreError};

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
/// The span is trace-only (`log.omit`, see `presa_telemetry::LOG_OMIT`):
/// it never holds a log line, so the log layers leave it out, and without
/// OpenTelemetry it is not built at all.
///
/// `fut` comes boxed: redis-rs's futures are kilobytes, and every future
/// that awaits one inline grows by that much and is copied whole each time
/// it moves (into an `async_trait` box, a spawned task): 17 KB for a task
/// write, which was about a tenth of a worker's CPU in `memmove`.
pub(crate) async fn traced<T>(
    target: &Target,
    verbosity: Verbosity,
    operation: impl FnOnce() -> String,
    script: Option<&str>,
    limit: Duration,
    fut: redis::RedisFuture<'_, T>,
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
                log.omit = Empty,
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
        RedisStoreError::Unanswered(_) => Some("unanswered"),
        RedisStoreError::Unconfirmed { .. } => Some("unconfirmed"),
    }
}
