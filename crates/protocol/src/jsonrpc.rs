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
///
/// The envelope's members are read straight from the bytes (no object is
/// built for the envelope itself, only for `params`), and classified as
/// [`classify`] classifies a parsed value: the same answers, the same errors.
pub fn parse_message(body: &[u8]) -> Result<Incoming, EnvelopeError> {
    // UTF-8 checked once for the whole body, then parsed as a `str`:
    // `from_slice` checks every string (each member name) on its own, about
    // a hundred instructions a string. Invalid UTF-8 anywhere was a parse
    // error before and is one still.
    let body = std::str::from_utf8(body).map_err(|_| EnvelopeError::Parse)?;
    let top: Top = serde_json::from_str(body).map_err(|_| EnvelopeError::Parse)?;
    match top {
        Top::Object(members) => members.classify(),
        Top::Other => Err(EnvelopeError::Invalid { id: None, reason: NOT_AN_OBJECT }),
    }
}

/// Classify an already-parsed JSON value.
pub fn classify(value: Value) -> Result<Incoming, EnvelopeError> {
    let Value::Object(mut obj) = value else {
        return Err(EnvelopeError::Invalid { id: None, reason: NOT_AN_OBJECT });
    };
    Members {
        id: obj.remove("id"),
        jsonrpc: obj.remove("jsonrpc"),
        method: obj.remove("method"),
        params: obj.remove("params"),
        response: obj.contains_key("result") || obj.contains_key("error"),
    }
    .classify()
}

const NOT_AN_OBJECT: &str = "the body must be one JSON-RPC object";

/// The members of a message's object that decide what it is (every other
/// member is ignored).
#[derive(Default)]
struct Members {
    id: Option<Value>,
    jsonrpc: Option<Value>,
    method: Option<Value>,
    params: Option<Value>,
    /// A `result` or an `error` member is present (whatever its value).
    response: bool,
}

impl Members {
    fn classify(self) -> Result<Incoming, EnvelopeError> {
        let id = match self.id {
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
        if self.jsonrpc.as_ref().and_then(Value::as_str) != Some("2.0") {
            return Err(invalid("jsonrpc must be \"2.0\""));
        }
        if self.response {
            return Err(invalid("clients must not send responses"));
        }
        let method = match self.method {
            Some(Value::String(m)) if !m.is_empty() => m,
            _ => return Err(invalid("method must be a non-empty string")),
        };
        let params = match self.params {
            None | Some(Value::Null) => None,
            Some(Value::Object(p)) => Some(p),
            Some(_) => return Err(invalid("params must be an object")),
        };
        Ok(match id {
            Some(id) => Incoming::Request(Request { id, method, params: params.unwrap_or_default() }),
            None => Incoming::Notification { method, params: params.map(Value::Object) },
        })
    }
}

/// A whole JSON document: an object's deciding [`Members`], or anything
/// else (read through, so that only malformed JSON is a parse error).
enum Top {
    Object(Members),
    Other,
}

impl<'de> Deserialize<'de> for Top {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(TopVisitor)
    }
}

struct TopVisitor;

impl<'de> serde::de::Visitor<'de> for TopVisitor {
    type Value = Top;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Top, A::Error> {
        let mut m = Members::default();
        // A repeated member: the last one counts, as in a parsed object.
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Id => m.id = Some(map.next_value()?),
                Key::Jsonrpc => m.jsonrpc = Some(map.next_value()?),
                Key::Method => m.method = Some(map.next_value()?),
                Key::Params => m.params = Some(map.next_value()?),
                Key::Response => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                    m.response = true;
                }
                Key::Other => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        Ok(Top::Object(m))
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Top, A::Error> {
        while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
        Ok(Top::Other)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Top, E> {
        Ok(Top::Other)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Top, E> {
        Ok(Top::Other)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Top, E> {
        Ok(Top::Other)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Top, E> {
        Ok(Top::Other)
    }

    fn visit_str<E>(self, _: &str) -> Result<Top, E> {
        Ok(Top::Other)
    }

    fn visit_unit<E>(self) -> Result<Top, E> {
        Ok(Top::Other)
    }
}

/// A member's name, as far as [`Members`] cares.
enum Key {
    Id,
    Jsonrpc,
    Method,
    Params,
    /// `result` or `error`.
    Response,
    Other,
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl serde::de::Visitor<'_> for KeyVisitor {
            type Value = Key;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a member name")
            }

            fn visit_str<E>(self, name: &str) -> Result<Key, E> {
                Ok(match name {
                    "id" => Key::Id,
                    "jsonrpc" => Key::Jsonrpc,
                    "method" => Key::Method,
                    "params" => Key::Params,
                    "result" | "error" => Key::Response,
                    _ => Key::Other,
                })
            }
        }
        d.deserialize_identifier(KeyVisitor)
    }
}

/// A success response to serialise as it stands: the same JSON as
/// [`success`] (members in the same order), without building an object
/// for the envelope or moving the result.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct SuccessRef<'a> {
    id: &'a RequestId,
    jsonrpc: &'static str,
    result: &'a Value,
}

impl<'a> SuccessRef<'a> {
    /// The success response to `id` with `result`.
    pub fn new(id: &'a RequestId, result: &'a Value) -> Self {
        SuccessRef { id, jsonrpc: "2.0", result }
    }
}

/// The success response to `id` with a result already written as JSON
/// text: the same bytes as [`SuccessRef`] of the result's value.
pub fn success_written(id: &RequestId, result: &crate::written::Written) -> Vec<u8> {
    let result = result.as_bytes();
    let mut out = Vec::with_capacity(result.len() + 48);
    out.extend_from_slice(b"{\"id\":");
    // An id (an integer or a string) always serialises.
    let _ = serde_json::to_writer(&mut out, id);
    out.extend_from_slice(b",\"jsonrpc\":\"2.0\",\"result\":");
    out.extend_from_slice(result);
    out.push(b'}');
    out
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
    fn parsing_bytes_answers_as_classifying_the_parsed_value() {
        let bodies: &[&str] = &[
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"a":[1,{"b":null}]}}}"#,
            r#"{"jsonrpc":"2.0","id":"x","method":"tasks/get","params":{"taskId":"t"},"extra":{"deep":[[]]}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"x","params":null}"#,
            r#"{"\u0069d":3,"json\u0072pc":"2.0","method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"first","method":"last","id":2}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"x","params":{"a":1},"params":[1]}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"x","params":[1],"params":{"a":1}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":null}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"x","error":{}}"#,
            r#"{"jsonrpc":"1.0","id":"a","method":"x"}"#,
            r#"{"jsonrpc":2.0,"id":1,"method":"x"}"#,
            r#"{"jsonrpc":"2.0","id":1.5,"method":"x"}"#,
            r#"{"jsonrpc":"2.0","id":18446744073709551615,"method":"x"}"#,
            r#"{"jsonrpc":"2.0","id":-9223372036854775808,"method":"x"}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"x"}"#,
            r#"{"jsonrpc":"2.0","id":[1],"method":"x"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":""}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":7}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"x","params":"p"}"#,
            r#"{}"#,
            r#"[]"#,
            r#"[{"jsonrpc":"2.0","id":1,"method":"x"}]"#,
            r#""a string""#,
            r#"42"#,
            r#"-1.5"#,
            r#"true"#,
            r#"null"#,
        ];
        for body in bodies {
            let value: Value = serde_json::from_str(body).expect(body);
            assert_eq!(parse_message(body.as_bytes()), classify(value), "{body}");
        }
        for malformed in ["", "{", "{nope", r#"{"id":1,}"#, r#"{"id":1} x"#, r#"[1,]"#, r#"{"a":"\q"}"#, "nul"] {
            assert_eq!(parse_message(malformed.as_bytes()), Err(EnvelopeError::Parse), "{malformed}");
        }
    }

    /// The body's UTF-8 is checked once, up front: what `from_slice` (which
    /// checks each string) accepts and refuses, `parse_message` does alike.
    #[test]
    fn utf8_is_checked_as_from_slice_checks_it() {
        let valid = r#"{"jsonrpc":"2.0","id":"é","method":"tools/call","params":{"name":"日本","a":"\ud83d\ude00 ✓"}}"#;
        let value: Value = serde_json::from_slice(valid.as_bytes()).unwrap();
        assert_eq!(parse_message(valid.as_bytes()), classify(value));
        let bodies: [&[u8]; 5] = [
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\"}",
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"params\":{\"\xc3\x28\":1}}",
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\"}\xe2\x82",
            b"\xef\xbb\xbf{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\"}",
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"extra\":\"\xed\xa0\x80\"}",
        ];
        for body in bodies {
            assert!(serde_json::from_slice::<Value>(body).is_err(), "{body:?}");
            assert_eq!(parse_message(body), Err(EnvelopeError::Parse), "{body:?}");
        }
    }

    #[test]
    fn a_success_serialises_the_same_by_reference() {
        let result = json!({"status":"completed","taskId":"t-1","nested":{"z":[1,2],"a":"\u{e9}\n"}});
        for id in [RequestId::Number(-3), RequestId::String("a\"b".into())] {
            let by_value = serde_json::to_string(&success(&id, result.clone())).unwrap();
            assert_eq!(serde_json::to_string(&SuccessRef::new(&id, &result)).unwrap(), by_value);
        }
    }

    #[test]
    fn a_written_success_is_what_success_ref_serialises() {
        let result = json!({"status":"completed","taskId":"t-1","nested":{"z":[1,2],"a":"\u{e9}\n"}});
        let written = crate::written::Written::of(result.as_object().unwrap());
        for id in [RequestId::Number(-3), RequestId::String("a\"b".into())] {
            let by_ref = serde_json::to_vec(&SuccessRef::new(&id, &result)).unwrap();
            assert_eq!(success_written(&id, &written), by_ref);
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
