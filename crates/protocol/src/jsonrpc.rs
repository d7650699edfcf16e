//! The JSON-RPC 2.0 envelope: parsing an incoming message and building
//! responses and notifications.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::codes;

/// A request id: a string or an integer (never null, never fractional).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RequestId {
    /// An integer id.
    Number(i64),
    /// A string id.
    String(String),
}

impl RequestId {
    /// The id as a JSON value, for embedding in `_meta`.
    pub fn to_value(&self) -> Value {
        match self {
            RequestId::Number(n) => Value::from(*n),
            RequestId::String(s) => Value::from(s.clone()),
        }
    }
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorObject {
    /// The error code (see [`crate::codes`]).
    pub code: i64,
    /// A short, stable, human-readable message. Never carries internals.
    pub message: String,
    /// Structured details.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl ErrorObject {
    /// An error without data.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), data: None }
    }

    /// An error with data.
    pub fn with_data(code: i64, message: impl Into<String>, data: Value) -> Self {
        Self { code, message: message.into(), data: Some(data) }
    }

    /// True when `data.retryable` is `true`: transient trouble, try again.
    pub fn is_retryable(&self) -> bool {
        self.data.as_ref().and_then(|d| d.get("retryable")).and_then(Value::as_bool) == Some(true)
    }

    /// The HTTP status this error is sent with.
    pub fn http_status(&self) -> u16 {
        codes::http_status(self.code, self.is_retryable())
    }
}

/// An incoming message, classified.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// A request: it has an id and expects a response.
    Request(Request),
    /// A notification: no id, no response.
    Notification {
        /// The notification method.
        method: String,
        /// Its params, if any.
        params: Option<Value>,
    },
}

/// A JSON-RPC request.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The request id.
    pub id: RequestId,
    /// The method name.
    pub method: String,
    /// The params object (an empty object when absent).
    pub params: Map<String, Value>,
}

/// Why an incoming message could not be accepted.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EnvelopeError {
    /// The body is not JSON.
    #[error("Parse error")]
    Parse,
    /// The JSON is not a JSON-RPC 2.0 request or notification. Carries the id
    /// when one could be read, so the error can echo it.
    #[error("Invalid request: {reason}")]
    Invalid {
        /// The id, if it could be read.
        id: Option<RequestId>,
        /// What is wrong.
        reason: &'static str,
    },
}

impl EnvelopeError {
    /// The JSON-RPC error to answer with.
    pub fn to_error(&self) -> ErrorObject {
        match self {
            EnvelopeError::Parse => ErrorObject::new(codes::PARSE_ERROR, "Parse error"),
            EnvelopeError::Invalid { reason, .. } => {
                ErrorObject::new(codes::INVALID_REQUEST, format!("Invalid request: {reason}"))
            }
        }
    }

    /// The request id to echo, if any.
    pub fn id(&self) -> Option<&RequestId> {
        match self {
            EnvelopeError::Parse => None,
            EnvelopeError::Invalid { id, .. } => id.as_ref(),
        }
    }
}

/// Parse one HTTP body as a single JSON-RPC request or notification.
pub fn parse_message(body: &[u8]) -> Result<Incoming, EnvelopeError> {
    let value: Value = serde_json::from_slice(body).map_err(|_| EnvelopeError::Parse)?;
    classify(value)
}

/// Classify an already-parsed JSON value.
pub fn classify(value: Value) -> Result<Incoming, EnvelopeError> {
    let Value::Object(mut obj) = value else {
        return Err(EnvelopeError::Invalid { id: None, reason: "the body must be one JSON-RPC object" });
    };
    let id = match obj.remove("id") {
        None => None,
        Some(Value::String(s)) => Some(RequestId::String(s)),
        Some(Value::Number(n)) => match n.as_i64() {
            Some(i) => Some(RequestId::Number(i)),
            None => {
                return Err(EnvelopeError::Invalid { id: None, reason: "id must be a string or an integer" });
            }
        },
        Some(_) => {
            return Err(EnvelopeError::Invalid { id: None, reason: "id must be a string or an integer" });
        }
    };
    let invalid = |reason| EnvelopeError::Invalid { id: id.clone(), reason };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(invalid("jsonrpc must be \"2.0\""));
    }
    if obj.contains_key("result") || obj.contains_key("error") {
        return Err(invalid("clients must not send responses"));
    }
    let method = match obj.remove("method") {
        Some(Value::String(m)) if !m.is_empty() => m,
        _ => return Err(invalid("method must be a non-empty string")),
    };
    let params = match obj.remove("params") {
        None | Some(Value::Null) => None,
        Some(Value::Object(p)) => Some(p),
        Some(_) => return Err(invalid("params must be an object")),
    };
    Ok(match id {
        Some(id) => Incoming::Request(Request { id, method, params: params.unwrap_or_default() }),
        None => Incoming::Notification { method, params: params.map(Value::Object) },
    })
}

/// A success response.
pub fn success(id: &RequestId, result: Value) -> Value {
    // Built by hand: `json!` would serialise a deep copy of `result`.
    let mut m = Map::new();
    m.insert("jsonrpc".into(), Value::from("2.0"));
    m.insert("id".into(), id.to_value());
    m.insert("result".into(), result);
    Value::Object(m)
}

/// An error response. `id` is `None` only when the request id is unknown.
pub fn failure(id: Option<&RequestId>, error: &ErrorObject) -> Value {
    let mut v = serde_json::json!({ "jsonrpc": "2.0", "error": error });
    if let Some(id) = id {
        v["id"] = id.to_value();
    }
    v
}

/// A notification.
pub fn notification(method: &str, params: Value) -> Value {
    // Built by hand: `json!` would serialise a deep copy of `params`.
    let mut m = Map::new();
    m.insert("jsonrpc".into(), Value::from("2.0"));
    m.insert("method".into(), Value::from(method));
    m.insert("params".into(), params);
    Value::Object(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn classifies_requests_and_notifications() {
        let r = classify(json!({"jsonrpc":"2.0","id":7,"method":"tools/list"})).unwrap();
        assert_eq!(
            r,
            Incoming::Request(Request { id: RequestId::Number(7), method: "tools/list".into(), params: Map::new() })
        );
        let n = classify(json!({"jsonrpc":"2.0","method":"notifications/cancelled","params":{}})).unwrap();
        assert!(matches!(n, Incoming::Notification { .. }));
    }

    #[test]
    fn rejects_malformed_envelopes() {
        assert_eq!(parse_message(b"{nope"), Err(EnvelopeError::Parse));
        for bad in [
            json!([]),
            json!({"jsonrpc":"1.0","id":1,"method":"x"}),
            json!({"jsonrpc":"2.0","id":1}),
            json!({"jsonrpc":"2.0","id":1.5,"method":"x"}),
            json!({"jsonrpc":"2.0","id":null,"method":"x"}),
            json!({"jsonrpc":"2.0","id":1,"method":"x","params":[1]}),
            json!({"jsonrpc":"2.0","id":1,"result":{}}),
        ] {
            assert!(matches!(classify(bad.clone()), Err(EnvelopeError::Invalid { .. })), "{bad}");
        }
    }

    #[test]
    fn invalid_request_keeps_the_id_to_echo() {
        let e = classify(json!({"jsonrpc":"1.0","id":"a","method":"x"})).unwrap_err();
        assert_eq!(e.id(), Some(&RequestId::String("a".into())));
    }

    #[test]
    fn responses_are_single_line() {
        let s = serde_json::to_string(&success(&RequestId::Number(1), json!({"a":{"b":[1,2]}}))).unwrap();
        assert!(!s.contains('\n'));
        let e = failure(Some(&RequestId::Number(3)), &ErrorObject::new(codes::INVALID_PARAMS, "x"));
        assert_eq!(e["id"], 3);
        assert_eq!(e["error"]["code"], -32602);
    }
}
