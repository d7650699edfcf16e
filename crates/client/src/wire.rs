//! Protocol constants and request building for the stateless 2026-07-28
//! wire: every request is a POST carrying its own `_meta` (protocol version
//! and client capabilities) and the `MCP-Protocol-Version`, `Mcp-Method` and
//! (where it applies) `Mcp-Name` headers.

use presa_protocol::{Method, headers, meta};
use serde_json::{Map, Value, json};

// The wire's names come from presa-protocol, the one place they are written.
/// The protocol revision this client speaks.
pub const PROTOCOL_VERSION: &str = presa_protocol::PROTOCOL_VERSION;
/// The Tasks extension's identifier.
pub const TASKS_EXTENSION: &str = presa_protocol::TASKS_EXTENSION;
/// `_meta` key of the protocol version.
pub const META_PROTOCOL_VERSION: &str = meta::PROTOCOL_VERSION_KEY;
/// `_meta` key of the client capabilities.
pub const META_CLIENT_CAPABILITIES: &str = meta::CLIENT_CAPABILITIES_KEY;

/// `MCP-Protocol-Version` header.
pub const HEADER_PROTOCOL_VERSION: &str = headers::PROTOCOL_VERSION;
/// `Mcp-Method` header.
pub const HEADER_METHOD: &str = headers::METHOD;
/// `Mcp-Name` header.
pub const HEADER_NAME: &str = headers::NAME;
/// `Idempotency-Key`: names a task-creating `tools/call`, so a retry with
/// the same key returns the task the first try made.
pub const HEADER_IDEMPOTENCY_KEY: &str = headers::IDEMPOTENCY_KEY;

/// A fresh idempotency key: 128 random bits, as 32 hex digits.
pub fn new_idempotency_key() -> String {
    let bits: u128 = rand::random();
    format!("{bits:032x}")
}

/// The capabilities this client declares: form elicitation and the Tasks extension.
pub fn client_capabilities() -> Value {
    json!({ "elicitation": {}, "extensions": { TASKS_EXTENSION: {} } })
}

/// The value of the `Mcp-Name` header for `method`, taken from `params`
/// (the field [`Method::name_param`] names; none for a method presa-protocol
/// does not know).
pub fn mcp_name(method: &str, params: &Map<String, Value>) -> Option<String> {
    let key = method.parse::<Method>().ok()?.name_param()?;
    params.get(key).and_then(Value::as_str).map(str::to_string)
}

/// A JSON-RPC request body with `_meta` added to `params`.
pub fn request_body(id: u64, method: &str, mut params: Map<String, Value>, capabilities: &Value) -> Value {
    let meta = params.entry("_meta").or_insert_with(|| json!({}));
    // Keys the caller put in `_meta` stay; the protocol's two are set.
    if let Value::Object(m) = meta {
        m.insert(META_PROTOCOL_VERSION.into(), json!(PROTOCOL_VERSION));
        m.insert(META_CLIENT_CAPABILITIES.into(), capabilities.clone());
    }
    json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_carries_meta_and_name_header_follows_the_method() {
        let params = json!({ "name": "slow_compute", "arguments": { "seconds": 1 } });
        let params = params.as_object().unwrap().clone();
        assert_eq!(mcp_name("tools/call", &params).as_deref(), Some("slow_compute"));
        let b = request_body(7, "tools/call", params, &client_capabilities());
        assert_eq!(b["params"]["_meta"][META_PROTOCOL_VERSION], PROTOCOL_VERSION);
        assert!(b["params"]["_meta"][META_CLIENT_CAPABILITIES]["extensions"][TASKS_EXTENSION].is_object());
        let task = json!({ "taskId": "t1" }).as_object().unwrap().clone();
        assert_eq!(mcp_name("tasks/cancel", &task).as_deref(), Some("t1"));
        assert_eq!(mcp_name("tools/list", &task), None);
    }
}
