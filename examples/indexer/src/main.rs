//! `indexer`: the example presa server. `indexer` serves MCP (embedded, or as
//! an API pod with `--redis-url`); `indexer worker --redis-url …` runs its
//! tools for a cluster. Every flag of `presa-api` / `presa-worker` applies.

use presa::App;

// jemalloc as the allocator: the binary's choice, one line.
presa::use_jemalloc!();

#[tokio::main]
async fn main() -> std::process::ExitCode {
    App::new("indexer", env!("CARGO_PKG_VERSION"), presa_example_indexer::catalog())
        .instructions("Index a directory tree: file counts, sizes by extension, the largest files and a fingerprint.")
        .run()
        .await
}
