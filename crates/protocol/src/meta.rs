//! The per-request `_meta` object of the stateless 2026-07-28 wire.
//!
//! Every request carries its own protocol version and client capabilities;
//! nothing is remembered between requests.

use serde_json::{Map, Value};

use crate::{TASKS_EXTENSION, codes, jsonrpc::ErrorObject};

/// `_meta` key: the protocol version of this request.
pub const PROTOCOL_VERSION_KEY: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key: the client's capabilities for this request.
pub const CLIENT_CAPABILITIES_KEY: &str = "io.modelcontextprotocol/clientCapabilities";
/// `_meta` key: the client's name and version.
pub const CLIENT_INFO_KEY: &str = "io.modelcontextprotocol/clientInfo";
/// `_meta` key: the lowest log level the client wants as `notifications/message`.
pub const LOG_LEVEL_KEY: &str = "io.modelcontextprotocol/logLevel";
/// `_meta` key on results: the server's name and version.
pub const SERVER_INFO_KEY: &str = "io.modelcontextprotocol/serverInfo";
/// `_meta` key on subscription traffic: the id of the `subscriptions/listen` request.
pub const SUBSCRIPTION_ID_KEY: &str = "io.modelcontextprotocol/subscriptionId";
/// `_meta` key: the progress token of a request.
pub const PROGRESS_TOKEN_KEY: &str = "progressToken";
/// `_meta` key (presa's own): the idempotency key of a `tools/call` that
/// creates a task, for clients that cannot set the `Idempotency-Key` header
/// (which, when sent, is copied here).
pub const IDEMPOTENCY_KEY_META: &str = "presa/idempotencyKey";
/// The v1 related-task key, which must never be emitted.
pub const RELATED_TASK_KEY: &str = "io.modelcontextprotocol/related-task";

/// The validated `_meta` of one request.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RequestMeta {
    /// The protocol version the request claims.
    pub protocol_version: String,
    /// The client capabilities declared on this request.
    pub client_capabilities: Map<String, Value>,
    /// `clientInfo`, when given.
    pub client_info: Option<Value>,
    /// The requested log level, when given.
    pub log_level: Option<LogLevel>,
    /// The progress token, when given.
    pub progress_token: Option<Value>,
    /// `_meta[`[`IDEMPOTENCY_KEY_META`]`]` as sent (any JSON value: the
    /// dispatcher validates it), or the `Idempotency-Key` header the
    /// transport copied here. Other keys (trace context…) are read from the
    /// request's `params._meta` itself: a copy of the whole object a request
    /// was most of this struct's cost, and nothing needs it twice.
    pub idempotency_key: Option<Value>,
}

impl RequestMeta {
    /// Read and validate `params._meta`. Missing `_meta`, a missing or
    /// non-string protocol version, or missing or non-object capabilities
    /// give `-32602`.
    pub fn from_params(params: &Map<String, Value>) -> Result<Self, ErrorObject> {
        let bad = |msg: &str| ErrorObject::new(codes::INVALID_PARAMS, msg);
        let Some(meta) = Self::object_of(params) else {
            return Err(bad("Invalid params: _meta with protocolVersion and clientCapabilities is required"));
        };
        let Some(Value::String(version)) = meta.get(PROTOCOL_VERSION_KEY) else {
            return Err(bad("Invalid params: _meta[\"io.modelcontextprotocol/protocolVersion\"] must be a string"));
        };
        let Some(Value::Object(caps)) = meta.get(CLIENT_CAPABILITIES_KEY) else {
            return Err(bad("Invalid params: _meta[\"io.modelcontextprotocol/clientCapabilities\"] must be an object"));
        };
        let log_level = match meta.get(LOG_LEVEL_KEY) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(LogLevel::parse(s).ok_or_else(|| bad("Invalid params: unknown logLevel"))?),
            Some(_) => return Err(bad("Invalid params: logLevel must be a string")),
        };
        Ok(Self {
            protocol_version: version.clone(),
            client_capabilities: caps.clone(),
            client_info: meta.get(CLIENT_INFO_KEY).cloned(),
            log_level,
            progress_token: meta.get(PROGRESS_TOKEN_KEY).filter(|t| t.is_string() || t.is_i64()).cloned(),
            idempotency_key: meta.get(IDEMPOTENCY_KEY_META).cloned(),
        })
    }

    /// `params._meta`, when it is an object: where keys this struct does not
    /// keep (the trace context) are read.
    pub fn object_of(params: &Map<String, Value>) -> Option<&Map<String, Value>> {
        params.get("_meta").and_then(Value::as_object)
    }

    /// Whether the client declared a top-level capability (`sampling`, `elicitation`, `roots`).
    pub fn has_capability(&self, name: &str) -> bool {
        self.client_capabilities.get(name).is_some_and(|v| !v.is_null())
    }

    /// Whether this request declares the Tasks extension.
    pub fn declares_tasks(&self) -> bool {
        self.client_capabilities.get("extensions").and_then(|e| e.get(TASKS_EXTENSION)).is_some_and(|v| !v.is_null())
    }
}

/// Syslog severities used by `notifications/message`, lowest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LogLevel {
    /// Debug.
    Debug,
    /// Info.
    Info,
    /// Notice.
    Notice,
    /// Warning.
    Warning,
    /// Error.
    Error,
    /// Critical.
    Critical,
    /// Alert.
    Alert,
    /// Emergency.
    Emergency,
}

impl LogLevel {
    const NAMES: [(&'static str, LogLevel); 8] = [
        ("debug", LogLevel::Debug),
        ("info", LogLevel::Info),
        ("notice", LogLevel::Notice),
        ("warning", LogLevel::Warning),
        ("error", LogLevel::Error),
        ("critical", LogLevel::Critical),
        ("alert", LogLevel::Alert),
        ("emergency", LogLevel::Emergency),
    ];

    /// Parse a wire name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::NAMES.iter().find(|(n, _)| *n == s).map(|(_, l)| *l)
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        Self::NAMES.iter().find(|(_, l)| *l == self).map_or("info", |(n, _)| *n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn params(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn accepts_minimal_meta_without_client_info() {
        let m = RequestMeta::from_params(&params(json!({"_meta":{
            PROTOCOL_VERSION_KEY: "2026-07-28", CLIENT_CAPABILITIES_KEY: {}}})))
        .unwrap();
        assert_eq!(m.protocol_version, "2026-07-28");
        assert!(m.client_info.is_none());
        assert!(!m.declares_tasks());
    }

    #[test]
    fn rejects_missing_pieces_with_invalid_params() {
        for p in [
            json!({}),
            json!({"_meta": 3}),
            json!({"_meta": {CLIENT_CAPABILITIES_KEY: {}}}),
            json!({"_meta": {PROTOCOL_VERSION_KEY: 1, CLIENT_CAPABILITIES_KEY: {}}}),
            json!({"_meta": {PROTOCOL_VERSION_KEY: "2026-07-28"}}),
            json!({"_meta": {PROTOCOL_VERSION_KEY: "2026-07-28", CLIENT_CAPABILITIES_KEY: []}}),
            json!({"_meta": {PROTOCOL_VERSION_KEY: "2026-07-28", CLIENT_CAPABILITIES_KEY: {}, LOG_LEVEL_KEY: "loud"}}),
        ] {
            assert_eq!(RequestMeta::from_params(&params(p.clone())).unwrap_err().code, codes::INVALID_PARAMS, "{p}");
        }
    }

    #[test]
    fn reads_tasks_declaration_and_capabilities() {
        let m = RequestMeta::from_params(&params(json!({"_meta":{
            PROTOCOL_VERSION_KEY: "2026-07-28",
            CLIENT_CAPABILITIES_KEY: {"sampling": {}, "extensions": {"io.modelcontextprotocol/tasks": {}}},
            LOG_LEVEL_KEY: "warning", "progressToken": "t1"}})))
        .unwrap();
        assert!(m.declares_tasks());
        assert!(m.has_capability("sampling"));
        assert!(!m.has_capability("elicitation"));
        assert_eq!(m.log_level, Some(LogLevel::Warning));
        assert_eq!(m.progress_token, Some(json!("t1")));
        assert!(LogLevel::Error > LogLevel::Warning);
    }

    /// The idempotency key is kept as sent (the dispatcher validates it);
    /// the rest of `_meta` stays in the params, read there.
    #[test]
    fn keeps_the_idempotency_key_as_sent() {
        let base = json!({ PROTOCOL_VERSION_KEY: "2026-07-28", CLIENT_CAPABILITIES_KEY: {}, "traceparent": "x" });
        let m = RequestMeta::from_params(&params(json!({ "_meta": base.clone() }))).unwrap();
        assert_eq!(m.idempotency_key, None);
        for key in [json!("k-1"), json!(7), json!("")] {
            let mut meta = base.clone();
            meta[IDEMPOTENCY_KEY_META] = key.clone();
            let p = params(json!({ "_meta": meta }));
            assert_eq!(RequestMeta::from_params(&p).unwrap().idempotency_key, Some(key));
            assert_eq!(RequestMeta::object_of(&p).and_then(|m| m.get("traceparent")), Some(&json!("x")));
        }
    }
}
