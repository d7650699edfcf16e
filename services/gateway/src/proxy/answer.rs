//! What the caller gets back from the gateway: an upstream's result as a
//! tool output, and upstream failures as errors that say what happened
//! (and whether trying again may help) without internals. An upstream's own
//! error message is passed on cut at [`MAX_ERROR_MESSAGE_BYTES`] (its `data`
//! only when it is at most that size too): an upstream cannot make presa
//! carry megabytes to its callers.

use presa_protocol::{codes, jsonrpc::ErrorObject};
use presa_server::ToolError;
use rmcp::service::ServiceError;
use serde_json::json;

use crate::{
    pool::Pool,
    upstream::{UpstreamError, auth_failure},
};

/// The most bytes of an upstream's error message (and of its `data`) passed on.
pub const MAX_ERROR_MESSAGE_BYTES: usize = 4096;

/// `message` cut at [`MAX_ERROR_MESSAGE_BYTES`] (on a character boundary), saying so.
pub fn cap_message(message: &str) -> String {
    if message.len() <= MAX_ERROR_MESSAGE_BYTES {
        return message.to_string();
    }
    let mut end = MAX_ERROR_MESSAGE_BYTES;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…(truncated)", &message[..end])
}

/// An error an upstream answered, as passed on: its code, its message capped,
/// its `data` only when small.
pub(crate) fn upstream_rpc(code: i64, message: &str, data: Option<serde_json::Value>) -> ErrorObject {
    let mut err = ErrorObject::new(code, cap_message(message));
    err.data = data.filter(|d| serde_json::to_vec(d).is_ok_and(|b| b.len() <= MAX_ERROR_MESSAGE_BYTES));
    err
}

/// Any failure to get an answer from an upstream as the error the caller
/// sees: no free connection in time and a lost or silent upstream are
/// retryable; the upstream's own errors are passed on, capped.
pub fn upstream_error(pool: &Pool, e: UpstreamError) -> ToolError {
    match e {
        UpstreamError::Service(e) => service_error(pool, e),
        e @ UpstreamError::Busy { .. } => {
            let data = json!({ "retryable": true, "retryAfterMs": 1000 });
            ToolError::Rpc(ErrorObject::with_data(codes::INTERNAL_ERROR, e.to_string(), data))
        }
        // It names the upstream and the token endpoint already.
        e @ UpstreamError::Token { .. } => rpc(e.to_string(), true),
        e => {
            tracing::warn!(upstream = %pool.name(), error = %e, "no upstream connection");
            rpc(format!("upstream {:?} is unavailable: {e}", pool.name()), true)
        }
    }
}

pub(super) fn rpc(message: impl Into<String>, retryable: bool) -> ToolError {
    let data = json!({ "retryable": retryable });
    ToolError::Rpc(ErrorObject::with_data(codes::INTERNAL_ERROR, message, data))
}

pub(super) fn lost_worker_error(tool: &str) -> ToolError {
    rpc(
        format!(
            "The worker running {tool:?} was lost mid-call and the tool is not marked idempotent or \
             read-only, so it was not called again: it may or may not have taken effect. Call it again \
             if that is safe."
        ),
        true,
    )
}

/// A call that failed after the upstream may have received it, of a tool
/// not safe to repeat: it is not tried again, and the error says why and
/// how to mark the tool.
pub(super) fn not_tried_again_error(tool: &str, reason: &str) -> ToolError {
    rpc(
        format!(
            "The call to {tool:?} failed after the upstream may have received it ({reason}), and the tool is \
             not marked idempotent or read-only, so it was not tried again: it may or may not have taken \
             effect. Call it again if that is safe. To have such failures tried again, mark the tool \
             idempotentHint or readOnlyHint upstream, or give it rerun = \"always\" in a [[tool]] rule."
        ),
        true,
    )
}

/// An upstream failure as the error the caller sees (no internals beyond the upstream's name).
pub(super) fn service_error(pool: &Pool, e: ServiceError) -> ToolError {
    match e {
        ServiceError::McpError(e) => ToolError::Rpc(upstream_rpc(i64::from(e.code.0), &e.message, e.data)),
        ServiceError::Timeout { timeout } => {
            rpc(format!("upstream {:?} did not answer within {timeout:?}", pool.name()), true)
        }
        ServiceError::TransportSend(e) if let Some(why) = auth_failure(pool.name(), &e) => rpc(why, true),
        ServiceError::TransportClosed | ServiceError::TransportSend(_) => {
            rpc(format!("upstream {:?} went away during the call", pool.name()), true)
        }
        other => {
            tracing::warn!(upstream = %pool.name(), error = %other, "upstream call failed");
            rpc(format!("upstream {:?} answered unexpectedly", pool.name()), false)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstream_error_messages_are_capped() {
        let huge = "é".repeat(5_000_000);
        let capped = cap_message(&huge);
        assert!(capped.len() <= MAX_ERROR_MESSAGE_BYTES + "…(truncated)".len(), "{}", capped.len());
        assert!(capped.ends_with("…(truncated)"));
        assert_eq!(cap_message("short"), "short");
        let e = upstream_rpc(-32000, &huge, Some(json!({ "blob": "x".repeat(10_000) })));
        assert!(e.message.len() < 5000 && e.data.is_none(), "{}", e.message.len());
        let e = upstream_rpc(-32000, "no", Some(json!({ "k": 1 })));
        assert_eq!((e.message.as_str(), e.data), ("no", Some(json!({ "k": 1 }))));
    }
}
