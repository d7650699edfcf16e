//! The MCP dispatcher of presa: everything MCP, nothing HTTP.
//!
//! A `tools/call` that becomes a task reads top to bottom through these modules:
//!
//! - [`dispatch`]: [`Server::handle`] takes an [`Admitted`] request and
//!   matches its [`presa_protocol::Method`]; one module per method family
//!   parses the params and runs it (`call` creates the task).
//! - [`store_io`]: every store call, traced alike, and `update_task` (load,
//!   reduce with [`presa_tasks::apply`], compare-and-set, retry).
//! - [`worker`]: [`Worker`] claims the task's work from the store and runs
//!   its handler under a lease (in-process when embedded, in `presa-worker`
//!   pods over Redis).
//! - [`context`]: [`ToolContext`], what a running handler can do (input,
//!   progress, status, cancellation), in a request or in a task alike.
//! - [`core`]: [`Core`], what server and worker share (catalog, backend,
//!   settings) and the one place handler output becomes a protocol result.
//!
//! And around them: `slots` (a worker's run and parked slots), [`tool`]
//! (the API tools are written with), [`catalog`] (tools, resources,
//! templates, prompts, completion), [`state`]
//! (HMAC-sealed MRTR `requestState`), [`config`], and [`error`]
//! ([`ServerError`] and the one place it becomes a JSON-RPC error).
//!
//! # A server with your own tool
//!
//! ```
//! use std::sync::Arc;
//! use presa_server::{Catalog, Core, Server, ServerConfig, StateCodec, TaskPolicy, Tool, ToolContext, ToolOutput};
//! use presa_store::{Backend, memory::MemoryStore};
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
//! let core = Core::new(ServerConfig::default(), catalog, Backend::new(Arc::new(MemoryStore::new())));
//! let server = Server::new(core.clone(), StateCodec::new(b"shared secret"));
//! // Serve it with `presa_http::router(server.clone(), Default::default())` and run
//! // `presa_server::Worker::new(core, Default::default()).run(shutdown)` where handlers should execute.
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
pub mod core;
pub mod dispatch;
pub mod error;
mod slots;
pub mod state;
pub mod store_io;
pub mod tool;
pub mod worker;

pub use catalog::{Catalog, CatalogBuilder};
pub use config::ServerConfig;
pub use context::{Outbox, ToolContext};
pub use core::Core;
pub use dispatch::{Admitted, Reply, Server};
pub use error::ServerError;
pub use state::StateCodec;
pub use tool::{PolicyInput, TaskPolicy, Tool, ToolError, ToolHandler, ToolOutput};
pub use worker::{Worker, WorkerConfig};
