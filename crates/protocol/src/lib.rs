//! Wire types of MCP revision 2026-07-28 and the Tasks extension (SEP-2663).
//!
//! This crate is pure: serde types, constants and small codecs, no IO and no
//! async runtime. Everything that crosses the wire is named here once.
//!
//! - [`jsonrpc`]: the JSON-RPC 2.0 envelope (requests, responses, errors).
//! - [`codes`]: JSON-RPC and MCP error codes, with their HTTP statuses.
//! - [`meta`]: the per-request `_meta` keys and their validation.
//! - [`headers`]: Streamable HTTP header names and the `=?base64?…?=` codec.
//!
//! Invariant: serialising any type here yields single-line JSON (serde_json's
//! compact writer), which some clients parse line by line.

pub mod codes;
pub mod headers;
pub mod jsonrpc;
pub mod meta;

/// The one protocol revision this server speaks.
pub const PROTOCOL_VERSION: &str = "2026-07-28";

/// Every revision accepted in `MCP-Protocol-Version` / `_meta`.
pub const SUPPORTED_VERSIONS: &[&str] = &[PROTOCOL_VERSION];

/// Identifier of the Tasks extension in capabilities objects.
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";
