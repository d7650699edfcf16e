//! The MCP dispatcher of presa: everything MCP, nothing HTTP.
//!
//! - [`tool`]: the API library users build tools with ([`Tool`], [`TaskPolicy`], [`ToolHandler`]).
//! - [`context`]: [`ToolContext`], what a running handler can do (input, progress, status, cancellation).
//! - [`catalog`]: the registry of tools, resources, templates, prompts and completion.
//! - [`dispatch`]: [`Server::handle`], method routing, MRTR, task creation, `tasks/*`, `subscriptions/listen`.
//! - [`worker`]: the pool that claims task work from the store and runs handlers (in-process in
//!   embedded mode, in `presa-worker` pods over Redis).
//! - [`state`]: HMAC-protected MRTR `requestState`.
//! - [`ops`]: load–reduce–compare-and-set of one task.
//! - [`error`]: [`ServerError`], and the one place it becomes a JSON-RPC error.
//!
//! # A server with your own tool
//!
//! ```
//! use std::sync::Arc;
//! use presa_server::{Catalog, Server, ServerConfig, StateCodec, TaskPolicy, Tool, ToolContext, ToolOutput};
//! use presa_store::memory::MemoryStore;
//! use serde_json::{Value, json};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let catalog = Catalog::builder()
//!     .tool(
//!         Tool::new(
//!             "summarise",
//!             "Summarises a long document.",
//!             json!({ "type": "object", "properties": { "url": { "type": "string" } }, "required": ["url"] }),
//!             |ctx: ToolContext, args: Value| async move {
//!                 ctx.set_status(format!("fetching {}", args["url"])).await?;
//!                 // ... long work; ctx.sleep() and ctx.cancellation() notice tasks/cancel ...
//!                 let ok = ctx
//!                     .input("confirm", json!({ "method": "elicitation/create", "params": {
//!                         "message": "Publish the summary?",
//!                         "requestedSchema": { "type": "object", "properties": { "ok": { "type": "boolean" } } } } }))
//!                     .await?;
//!                 Ok(ToolOutput::text(format!("done: {}", ok["content"]["ok"])))
//!             },
//!         )
//!         .policy(TaskPolicy::Optional),
//!     )
//!     .build()?;
//! let memory = Arc::new(MemoryStore::new());
//! let server = Server::new(ServerConfig::default(), catalog, memory.clone(), memory, StateCodec::new(b"shared secret"));
//! // Serve it with `presa_http::router(server.clone(), Default::default())` and run
//! // `presa_server::Worker::new(server, Default::default()).run(shutdown)` where handlers should execute.
//! # let _ = server;
//! # Ok(())
//! # }
//! ```
//!
//! Invariants: every result carries `resultType` and `_meta.serverInfo`; a task
//! is created only for a request that declared the Tasks extension; another
//! scope's task answers exactly like an unknown one.

pub mod catalog;
pub mod config;
pub mod context;
pub mod dispatch;
pub mod error;
pub mod ops;
pub mod state;
pub mod tool;
pub mod worker;

pub use catalog::{Catalog, CatalogBuilder};
pub use config::ServerConfig;
pub use context::{Outbox, ToolContext};
pub use dispatch::{Reply, Server};
pub use error::ServerError;
pub use state::StateCodec;
pub use tool::{TaskPolicy, Tool, ToolError, ToolHandler, ToolOutput};
pub use worker::{Worker, WorkerConfig};
