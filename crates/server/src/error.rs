//! The dispatcher's error type and the one place it becomes a JSON-RPC error.
//!
//! Internal causes are logged here and never sent: clients see a stable message.

use presa_protocol::{Limit, TASKS_EXTENSION, codes, jsonrpc::ErrorObject, limit::RETRY_AFTER_MS};
use presa_store::StoreError;
use serde_json::{Value, json};

/// The message of an insufficient-scope error's body. The transport does not
/// read it: it answers [`Reply::InsufficientScope`](crate::Reply::InsufficientScope),
/// the typed refusal, 403 with a `WWW-Authenticate: Bearer error="insufficient_scope"` challenge.
pub const INSUFFICIENT_SCOPE: &str = "Insufficient scope";
/// The `data` field listing every scope an insufficient-scope call needs.
pub const REQUIRED_SCOPES: &str = "requiredScopes";

/// The `retryAfterMs` of a refusal for a full work queue: about the time
/// workers need to drain a burst.
pub const QUEUE_FULL_RETRY_AFTER_MS: u64 = RETRY_AFTER_MS;

/// The `retryAfterMs` of a refusal for one principal's quota (a
/// `…_per_scope` limit: its active tasks, bytes, listen streams): the quota
/// frees as the principal's own tasks end or streams close, which presa
/// cannot foresee; a second is a polite first retry.
pub const QUOTA_RETRY_AFTER_MS: u64 = RETRY_AFTER_MS;

/// The `retryAfterMs` of a retryable 503: a pod-wide capacity limit or a
/// store that does not answer.
pub const UNAVAILABLE_RETRY_AFTER_MS: u64 = RETRY_AFTER_MS;

/// The `retryAfterMs` of a refusal for a full in-request call pool: most
/// in-request calls answer within a second (long ones belong in tasks).
pub const INFLIGHT_RETRY_AFTER_MS: u64 = RETRY_AFTER_MS;

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// Bad params (`-32602`).
    #[error("{0}")]
    InvalidParams(String),
    /// Bad params with structured data (`-32602`), e.g. an unknown resource.
    #[error("{message}")]
    InvalidParamsData {
        /// The message.
        message: String,
        /// The data.
        data: Value,
    },
    /// Unknown or removed method (`-32601`).
    #[error("Method not found: {0}")]
    MethodNotFound(String),
    /// The client must declare these capabilities (`-32021`).
    #[error("Missing required client capability")]
    MissingCapability(Value),
    /// A pod-wide capacity limit was hit; nothing was stored (`-32603`,
    /// HTTP 503, retryable after `data.retryAfterMs`). Build it with
    /// [`ServerError::capacity`], which turns a principal's quota into
    /// [`ServerError::RateLimited`].
    #[error("Capacity exhausted: {0}")]
    Capacity(Limit),
    /// A limit that frees itself was hit: a full work queue, or the caller's
    /// own quota (a `…_per_scope` limit); nothing was stored (`-32023`, HTTP
    /// 429 with `Retry-After`, retryable after `retry_after_ms`).
    #[error("Too many requests: {limit}")]
    RateLimited {
        /// Which limit ([`Limit::MaxQueued`], a `…_per_scope` one).
        limit: Limit,
        /// When to try again, in ms (`data.retryAfterMs`).
        retry_after_ms: u64,
    },
    /// The store is unreachable (`-32603`, retryable).
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// Anything else (`-32603`); the cause is logged, not sent.
    #[error("internal error: {0}")]
    Internal(String),
    /// The caller lacks OAuth scopes the call needs (`-32600`, HTTP 403
    /// `insufficient_scope`); the dispatcher hands it to the transport as
    /// [`Reply::InsufficientScope`](crate::Reply::InsufficientScope).
    #[error("Insufficient scope")]
    InsufficientScope {
        /// Every scope the call needs.
        scopes: Vec<String>,
    },
    /// A JSON-RPC error chosen by a tool handler, sent as is.
    #[error("{}", .0.message)]
    Rpc(ErrorObject),
    /// A handler ran in its request past `call_timeout` and was cancelled (`-32603`).
    #[error("Call timed out after {} ms", .0.as_millis())]
    CallTimeout(std::time::Duration),
    /// A stream's client read too slowly: it fell behind its event queue and
    /// the stream ends (`-32603`, retryable: listen again).
    #[error("Stream lagged")]
    Lagged,
}

impl ServerError {
    /// A capacity limit was hit: the caller's own share or a queue that
    /// frees itself ([`Limit::is_callers`]) is [`ServerError::RateLimited`]
    /// (HTTP 429, the caller asks for more than its share); any other limit
    /// is pod-wide, [`ServerError::Capacity`] (HTTP 503, the server is full).
    pub fn capacity(limit: Limit) -> Self {
        match limit.retry_after_ms() {
            Some(retry_after_ms) if limit.is_callers() => ServerError::RateLimited { limit, retry_after_ms },
            _ => ServerError::Capacity(limit),
        }
    }

    /// `-32021` asking for the Tasks extension.
    pub fn tasks_required() -> Self {
        ServerError::MissingCapability(json!({ "extensions": { TASKS_EXTENSION: {} } }))
    }

    /// The JSON-RPC error to send. Logs internal causes.
    pub fn to_error_object(&self) -> ErrorObject {
        match self {
            ServerError::InvalidParams(m) => ErrorObject::new(codes::INVALID_PARAMS, m.clone()),
            ServerError::InvalidParamsData { message, data } => {
                ErrorObject::with_data(codes::INVALID_PARAMS, message.clone(), data.clone())
            }
            ServerError::MethodNotFound(m) => {
                ErrorObject::new(codes::METHOD_NOT_FOUND, format!("Method not found: {m}"))
            }
            ServerError::MissingCapability(caps) => ErrorObject::with_data(
                codes::MISSING_REQUIRED_CLIENT_CAPABILITY,
                "Missing required client capability",
                json!({ "requiredCapabilities": caps }),
            ),
            ServerError::Capacity(limit) => ErrorObject::with_data(
                codes::INTERNAL_ERROR,
                "Capacity exhausted",
                json!({ "retryable": true, "retryAfterMs": UNAVAILABLE_RETRY_AFTER_MS, "limit": limit }),
            ),
            ServerError::RateLimited { limit, retry_after_ms } => ErrorObject::with_data(
                codes::RATE_LIMITED,
                "Too many requests",
                json!({ "retryable": true, "retryAfterMs": retry_after_ms, "limit": limit }),
            ),
            ServerError::Unavailable(cause) => {
                tracing::warn!(%cause, "store unavailable");
                ErrorObject::with_data(
                    codes::INTERNAL_ERROR,
                    "Service temporarily unavailable",
                    json!({ "retryable": true, "retryAfterMs": UNAVAILABLE_RETRY_AFTER_MS }),
                )
            }
            ServerError::Internal(cause) => {
                tracing::error!(%cause, "internal error");
                ErrorObject::new(codes::INTERNAL_ERROR, "Internal error")
            }
            ServerError::InsufficientScope { scopes } => {
                ErrorObject::with_data(codes::INVALID_REQUEST, INSUFFICIENT_SCOPE, json!({ REQUIRED_SCOPES: scopes }))
            }
            ServerError::Rpc(e) => e.clone(),
            ServerError::CallTimeout(limit) => {
                let ms = u64::try_from(limit.as_millis()).unwrap_or(u64::MAX);
                ErrorObject::with_data(
                    codes::INTERNAL_ERROR,
                    format!(
                        "Call timed out: its handler ran longer than {ms} ms (call_timeout) and was cancelled; \
                         a call that long should run as a task"
                    ),
                    json!({ "limit": "call_timeout", "timeoutMs": ms }),
                )
            }
            ServerError::Lagged => ErrorObject::with_data(
                codes::INTERNAL_ERROR,
                "Stream lagged: the client read too slowly, events were dropped and the stream ends; open it again",
                json!({ "retryable": true, "lagged": true }),
            ),
        }
    }
}

impl From<StoreError> for ServerError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Capacity { limit } => ServerError::capacity(limit),
            StoreError::QueueFull => ServerError::capacity(Limit::MaxQueued),
            StoreError::Unavailable(m) => ServerError::Unavailable(m),
            e @ StoreError::Unconfirmed { .. } => ServerError::Unavailable(e.to_string()),
            StoreError::Corrupt(m) => ServerError::Internal(format!("corrupt record: {m}")),
            e @ StoreError::BadCursor(_) => ServerError::InvalidParams(e.to_string()),
            StoreError::Unsupported(m) => ServerError::Internal(format!("not available: {m}")),
            StoreError::Lagged => ServerError::Lagged,
            e @ StoreError::TooLarge { .. } => ServerError::InvalidParams(e.to_string()),
            StoreError::KeyReused => ServerError::InvalidParams(
                "Idempotency-Key was already used for a different request (another tool or other arguments); \
                 use a new key"
                    .into(),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_principals_quota_is_429_and_a_full_pod_503_both_with_retry_after() {
        for limit in [Limit::MaxActiveTasksPerScope, Limit::MaxBytesPerScope, Limit::MaxListenStreamsPerScope] {
            let e = ServerError::from(StoreError::Capacity { limit }).to_error_object();
            assert_eq!((e.code, e.http_status()), (codes::RATE_LIMITED, 429), "{limit}");
            assert_eq!(
                e.data,
                Some(json!({ "retryable": true, "retryAfterMs": QUOTA_RETRY_AFTER_MS, "limit": limit }))
            );
        }
        for limit in [Limit::MaxTasks, Limit::MaxMemoryBytes, Limit::MaxListenStreams] {
            let e = ServerError::capacity(limit).to_error_object();
            assert_eq!((e.code, e.http_status()), (codes::INTERNAL_ERROR, 503), "{limit}");
            assert_eq!(e.data.unwrap()["retryAfterMs"], UNAVAILABLE_RETRY_AFTER_MS, "{limit}");
        }
        let e = ServerError::from(StoreError::Unavailable("down".into())).to_error_object();
        assert_eq!(e.http_status(), 503);
        assert_eq!(e.data.unwrap()["retryAfterMs"], UNAVAILABLE_RETRY_AFTER_MS);
    }

    #[test]
    fn a_missing_scope_reaches_the_transport_typed_and_a_look_alike_error_does_not() {
        let scopes = vec!["deploy".to_string()];
        let reply = crate::dispatch::Reply::failure(&ServerError::InsufficientScope { scopes: scopes.clone() });
        let crate::dispatch::Reply::InsufficientScope { error, scopes: typed } = reply else { panic!("{reply:?}") };
        assert_eq!(typed, scopes);
        assert_eq!((error.code, error.message.as_str()), (codes::INVALID_REQUEST, INSUFFICIENT_SCOPE));
        assert_eq!(error.data, Some(json!({ REQUIRED_SCOPES: ["deploy"] })));
        // A handler's own error with the same text is an error like any other, never a 403.
        let reply = crate::dispatch::Reply::failure(&ServerError::Rpc(error));
        assert!(matches!(reply, crate::dispatch::Reply::Error(_)), "{reply:?}");
    }
}
