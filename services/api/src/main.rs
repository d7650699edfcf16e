//! `presa-api`: the presa MCP server with the demo catalog.
//!
//! Without `--redis-url` one process is the whole system: an in-memory store
//! and an in-process worker pool (the embedded mode: not durable). With it,
//! this process is a stateless API pod and `presa-worker` pods run the tools.
//! Everything but the catalog lives in `presa_runtime::App`.

// jemalloc as the allocator: the binary's choice (see presa_runtime::use_jemalloc).
presa_runtime::use_jemalloc!();

#[tokio::main]
async fn main() -> std::process::ExitCode {
    presa_runtime::App::new("presa", env!("CARGO_PKG_VERSION"), presa_demo::catalog()).api().await
}
