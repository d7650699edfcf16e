//! presa: durable MCP tasks for your tools. This crate is the one dependency
//! a server needs: [`App`] (every flag, probe, metric, trace, the Redis
//! cluster mode and the graceful drain of `presa-api` and `presa-worker`) and
//! the tool API (typed tools, elicitation, task policies, and what protects
//! what a tool calls: retries, rates, concurrency limits, circuit breakers) of `presa-server`.
//!
//! ```no_run
//! use presa::{App, Catalog, Elicited, TaskPolicy, Tool, ToolContext, ToolError};
//! use schemars::JsonSchema;
//! use serde::Deserialize;
//!
//! presa::use_jemalloc!(); // optional: jemalloc as the allocator
//!
//! #[derive(Deserialize, JsonSchema)]
//! struct Backup {
//!     /// The directory to back up.
//!     path: String,
//! }
//!
//! #[derive(Deserialize, JsonSchema)]
//! struct Confirm {
//!     proceed: bool,
//! }
//!
//! async fn backup(ctx: ToolContext, args: Backup) -> Result<String, ToolError> {
//!     let files = std::fs::read_dir(&args.path)?.count(); // `?` on io::Error: an internal error, not leaked
//!     ctx.set_status(format!("{files} files to copy")).await?;
//!     match ctx.elicit::<Confirm>("go", format!("Copy {files} files?")).await? {
//!         // ... the long work: ctx.sleep(..) and ctx.cancellation() notice tasks/cancel
//!         Elicited::Accept(Confirm { proceed: true }) => Ok(format!("copied {files} files")),
//!         _ => Ok("nothing copied".into()),
//!     }
//! }
//!
//! #[tokio::main]
//! async fn main() -> std::process::ExitCode {
//!     let tool = Tool::typed("backup", "Backs up a directory.", backup).policy(TaskPolicy::Optional);
//!     App::new("backup", env!("CARGO_PKG_VERSION"), Catalog::builder().tool(tool).build()).run().await
//! }
//! ```
//!
//! Its `Cargo.toml` needs `presa`, `schemars`, `serde` and `tokio` (the
//! derives and `#[tokio::main]` name their own crates; the versions presa
//! builds with are re-exported as [`schemars`], [`serde`] and [`tokio`]).
//!
//! Features: `jemalloc` (default) provides [`use_jemalloc!`]; without it the
//! crate builds no C code and the binary keeps the system allocator.

pub use presa_runtime::{App, RuntimeError, jemalloc_in_use};
#[cfg(feature = "jemalloc")]
pub use presa_runtime::{Jemalloc, use_jemalloc};
pub use presa_server::{
    Caller, Catalog, CatalogBuilder, Elicited, InputRequest, IntoToolOutput, Json, JsonWithText, ListChanged, NoArgs,
    PolicyInput, PromptOutput, RetryPolicy, TaskPolicy, Tool, ToolBreaker, ToolConcurrency, ToolContext, ToolError,
    ToolOutput, ToolRate,
};

/// The MCP wire: error codes, `_meta` keys and log levels, for tools that
/// answer in protocol terms.
pub use presa_protocol as protocol;
/// The rest of the server API (catalog entries, prompts, the worker).
pub use presa_server as server;

pub use schemars;
pub use serde;
pub use serde_json;
pub use tokio;
