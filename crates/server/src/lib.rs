//! The MCP dispatcher of presa: everything MCP, nothing HTTP.
//!
//! A `tools/call` that becomes a task reads top to bottom through these modules:
//!
//! - [`dispatch`]: [`Server::handle`] takes an [`Admitted`] request and
//!   matches its [`presa_protocol::Method`]; one module per method family
//!   parses the params and runs it (`call` creates the task).
//! - `store_io`: every store call, traced alike; `task_writer`: the one
//!   write of a task, `TaskWriter` (load, reduce with
//!   [`presa_tasks::apply`], compare-and-set, retry).
//! - [`worker`]: [`Worker`] claims the task's work from the store and runs
//!   its handler under a lease (in-process when embedded, in `presa-worker`
//!   pods over Redis).
//! - [`context`]: [`ToolContext`], what a running handler can do (input,
//!   progress, status, cancellation), in a request or in a task alike.
//! - [`core`]: [`Core`], what server and worker share (catalog, backend,
//!   settings) and the one place handler output becomes a protocol result.
//! - [`endpoint`]: virtual servers, each its own catalog, scopes and
//!   identity, and the tasks made on it ([`Server::endpoint`]).
//!
//! And around them: `slots` (a worker's run and parked slots), `pools`
//! (the listen-stream and in-request call pools, fair between scopes), [`tool`] and [`typed`] (the API tools are written with:
//! [`Tool::typed`] derives the input schema from a Rust type), [`output`]
//! (what a handler may return), [`input`] (asking the client), [`prompt`]
//! (prompt handlers and their output), [`catalog`]
//! (tools, resources, templates, prompts, completion), [`state`]
//! (HMAC-sealed MRTR `requestState`), [`config`], and [`error`]
//! ([`ServerError`] and the one place it becomes a JSON-RPC error).
//!
//! # A server with your own tool
//!
//! A typed tool and the whole `main` of a server that serves it are the
//! example of the `presa` crate, the one dependency a server needs (it
//! re-exports this crate's tool API with `App`).
//!
//! Invariants: every result carries `resultType` and `_meta.serverInfo`; a task
//! is created only for a request that declared the Tasks extension; another
//! scope's task answers exactly like an unknown one.

pub mod admin;
pub mod artifacts;
pub mod breaker;
pub mod catalog;
pub mod concurrency;
pub mod config;
pub mod context;
pub mod core;
pub mod dispatch;
pub mod endpoint;
pub mod error;
pub mod flow;
pub mod input;
pub mod node;
pub mod output;
pub mod pools;
pub mod prompt;
pub mod retry;
mod schema;
mod slots;
mod snapshots;
pub mod state;
mod store_io;
mod task_writer;
pub mod tool;
pub mod tool_breaker;
pub mod typed;
pub mod worker;

pub use catalog::{Catalog, CatalogBuilder, CatalogCell, ToolRef};
pub use concurrency::ToolConcurrency;
pub use config::{
    DEFAULT_CALL_TIMEOUT, DEFAULT_MAX_INFLIGHT_CALLS, DEFAULT_MAX_INFLIGHT_CALLS_PER_SCOPE, DEFAULT_MAX_LISTEN_STREAMS,
    DEFAULT_MAX_LISTEN_STREAMS_PER_SCOPE, DEFAULT_MAX_QUEUED_PER_PARTITION, DEFAULT_PERMIT_WAIT, FAIR_SHARE_SCOPES,
    ServerConfig,
};
pub use context::{ListChanged, Outbox, ToolContext};
pub use core::Core;
pub use dispatch::{Admitted, Reply, Server, StreamPermit};
pub use endpoint::{Endpoint, EndpointError, Endpoints};
pub use error::{
    INFLIGHT_RETRY_AFTER_MS, INSUFFICIENT_SCOPE, QUEUE_FULL_RETRY_AFTER_MS, QUOTA_RETRY_AFTER_MS, REQUIRED_SCOPES,
    ServerError, UNAVAILABLE_RETRY_AFTER_MS,
};
pub use flow::ToolRate;
pub use input::{Elicited, InputRequest};
pub use node::{GATEWAY_RELOAD_TOPIC, Node, UPSTREAM_RESTART_TOPIC, UpstreamSource};
pub use output::{IntoToolOutput, Json, JsonWithText, ToolError, ToolOutput};
pub use presa_store::Caller;
pub use prompt::{PromptHandler, PromptOutput};
pub use retry::{Retry, RetryPolicy, RetryPolicyError};
pub use state::StateCodec;
pub use tool::{ArgumentsRefused, PolicyInput, TaskPolicy, Tool, ToolHandler};
pub use tool_breaker::ToolBreaker;
pub use typed::NoArgs;
pub use worker::{Worker, WorkerConfig};
