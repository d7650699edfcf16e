//! `presa-worker`: runs the demo catalog's tool handlers for tasks queued in
//! Redis, serving only `/healthz`, `/readyz` and `/metrics`. Run as many as you
//! like; they survive each other's crashes (leases, recovery, fencing).
//! Everything but the catalog lives in `presa_runtime::App`.

// jemalloc as the allocator: the binary's choice (see presa_runtime::use_jemalloc).
presa_runtime::use_jemalloc!();

#[tokio::main]
async fn main() -> std::process::ExitCode {
    presa_runtime::App::new("presa", env!("CARGO_PKG_VERSION"), presa_demo::catalog()).worker().await
}
