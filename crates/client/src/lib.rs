//! A small client for MCP revision 2026-07-28 (stateless Streamable HTTP)
//! with the Tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663).
//!
//! It speaks only the wire, so it works against any conformant server, not
//! only presa. The `presa` command-line client (`services/cli`) is built on it.
//!
//! Modules:
//! - [`wire`]: protocol constants and request building: the JSON-RPC body with
//!   its per-request `_meta`, and the `MCP-Protocol-Version`, `Mcp-Method` and
//!   `Mcp-Name` headers.
//! - [`client`]: [`Client`], one HTTP connection pool to one MCP endpoint:
//!   sends requests, reads JSON or SSE answers, turns HTTP and JSON-RPC
//!   failures into [`Error`]s a person can act on.
//! - [`sse`]: reading JSON-RPC messages from a `text/event-stream` body.
//! - [`task`]: the shapes a client handles: [`Task`] snapshots, their
//!   [`Status`] (`presa-protocol`'s, re-exported), and the three outcomes of
//!   `tools/call` ([`CallOutcome`]).
//! - [`follow`](mod@follow): following tasks to the end: `subscriptions/listen` when the
//!   server offers it, re-subscribing when the stream drops, polling
//!   `tasks/get` at `pollIntervalMs` otherwise.
//! - [`schema`]: JSON Schema helpers: typing `key=value` arguments from a
//!   tool's `inputSchema`, describing arguments, and turning an
//!   elicitation's `requestedSchema` into form fields.
//! - [`error`]: the crate's [`Error`].
//! - [`admin`]: [`AdminClient`], presa's own admin API (`/admin/v1`; not
//!   MCP, so it works against presa only), sharing the client's pool and token.

pub mod admin;
pub mod client;
pub mod error;
pub mod follow;
pub mod schema;
pub mod sse;
pub mod task;
pub mod wire;

pub use admin::AdminClient;
pub use client::{Client, DOWNLOAD_META};
pub use error::Error;
pub use follow::{FollowEvent, FollowOptions, Following, follow};
pub use presa_protocol::{ResultType, Status};
pub use task::{CallOutcome, Task};
