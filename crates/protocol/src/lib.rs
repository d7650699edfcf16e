//! Wire types of MCP revision 2026-07-28 and the Tasks extension (SEP-2663).
//!
//! This crate is pure: serde types, constants and small codecs, no IO and no
//! async runtime. Everything that crosses the wire is named here once.
//!
//! - [`jsonrpc`]: the JSON-RPC 2.0 envelope (requests, responses, errors).
//! - [`codes`]: JSON-RPC and MCP error codes, with their HTTP statuses.
//! - [`meta`]: the per-request `_meta` keys and their validation.
//! - [`headers`]: Streamable HTTP header names and the `=?base64?…?=` codec.
//! - [`method`]: [`Method`], every request method presa answers, named once.
//! - [`limit`]: [`Limit`], every limit a request can be refused for, and how a refusal answers.
//! - [`task`]: a task's [`Status`] and a result's [`ResultType`].
//! - [`result`]: the results the dispatcher answers with, as types.
//!
//! Invariant: serialising any type here yields single-line JSON (serde_json's
//! compact writer), which some clients parse line by line.

pub mod calendar;
pub mod codes;
pub mod headers;
pub mod jsonrpc;
pub mod limit;
pub mod meta;
pub mod method;
pub mod result;
pub mod task;
pub mod written;

pub use limit::Limit;
pub use method::{Method, UnknownMethod};
use serde_json::json;
pub use task::{ResultType, Status};

/// The one protocol revision this server speaks.
pub const PROTOCOL_VERSION: &str = "2026-07-28";

/// Every revision accepted in `MCP-Protocol-Version` / `_meta`.
pub const SUPPORTED_VERSIONS: &[&str] = &[PROTOCOL_VERSION];

/// The newest revision of the `initialize` era, served to legacy clients.
pub const LEGACY_PROTOCOL_VERSION: &str = "2025-11-25";

/// Every `initialize`-era revision a legacy session may negotiate, newest first.
pub const LEGACY_VERSIONS: &[&str] = &[LEGACY_PROTOCOL_VERSION, "2025-06-18", "2025-03-26"];

/// Identifier of the Tasks extension in capabilities objects.
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// Whether `version` (from `MCP-Protocol-Version` and `_meta`) is one this server speaks.
pub fn supports_version(version: &str) -> bool {
    SUPPORTED_VERSIONS.contains(&version)
}

/// `-32022` for a request in a version this server does not speak, naming
/// the versions it does (`data.supported`) and the one asked for.
pub fn unsupported_version(requested: &str) -> jsonrpc::ErrorObject {
    jsonrpc::ErrorObject::with_data(
        codes::UNSUPPORTED_PROTOCOL_VERSION,
        "Unsupported protocol version",
        json!({ "supported": SUPPORTED_VERSIONS, "requested": requested }),
    )
}
