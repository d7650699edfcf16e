//! What the caller gets back from the gateway: an upstream's result as a
//! tool output, and upstream failures as errors that say what happened
//! (and whether trying again may help) without internals.

use presa_protocol::{codes, jsonrpc::ErrorObject};
use presa_server::{ToolError, ToolOutput};
use rmcp::service::ServiceError;
use serde_json::json;

use crate::pool::Pool;

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

/// An upstream failure as the error the caller sees (no internals beyond the upstream's name).
pub(super) fn service_error(pool: &Pool, e: ServiceError) -> ToolError {
    match e {
        ServiceError::McpError(e) => {
            let mut err = ErrorObject::new(i64::from(e.code.0), e.message.to_string());
            err.data = e.data;
            ToolError::Rpc(err)
        }
        ServiceError::Timeout { timeout } => {
            rpc(format!("upstream {:?} did not answer within {timeout:?}", pool.name()), true)
        }
        ServiceError::TransportClosed | ServiceError::TransportSend(_) => {
            rpc(format!("upstream {:?} went away during the call", pool.name()), true)
        }
        other => {
            tracing::warn!(upstream = %pool.name(), error = %other, "upstream call failed");
            rpc(format!("upstream {:?} answered unexpectedly", pool.name()), false)
        }
    }
}

/// A `CallToolResult` as presa returns it (presa adds `resultType` itself).
pub(super) fn into_output(result: &impl serde::Serialize) -> ToolOutput {
    let mut v = serde_json::to_value(result).unwrap_or_else(|_| json!({ "content": [] }));
    if let Some(o) = v.as_object_mut() {
        o.remove("resultType");
    }
    ToolOutput::Complete(v)
}
