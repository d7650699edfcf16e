//! `presa-bench calls`: a fixed number of plain `tools/call`s sent to one MCP
//! endpoint, for drivers that count what a server spends per call (e.g.
//! `tools/bench/callgrind-gateway.sh`, which runs presa-gateway under
//! callgrind): the same request as the echo rows (`echo_op`: a client
//! without Tasks, `{"text": "hello"}`), `--calls` of them over
//! `--connections` keep-alive connections, each answer checked (HTTP 200,
//! JSON, a `result`). Prints one line: calls, seconds, calls/s.

use std::time::Instant;

use crate::{
    load::run_n,
    ops::{Raw, echo_op},
};

/// `presa-bench calls` flags.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct CallsArgs {
    /// The MCP endpoint (`http://127.0.0.1:PORT/mcp`).
    #[arg(long)]
    url: String,
    /// Calls sent in all.
    #[arg(long, default_value_t = 1000)]
    calls: usize,
    /// Concurrent connections (each sends one call after another).
    #[arg(long, default_value_t = 1)]
    connections: usize,
    /// The tool called (it must take `{"text": …}` and answer with JSON).
    #[arg(long, default_value = "echo")]
    tool: String,
}

/// Run it; the process exit code (a failed call panics its load loop).
pub(crate) async fn run(args: CallsArgs) -> i32 {
    let c = args.connections.max(1);
    // `echo_op` takes a `&'static str`: the one tool name of this process.
    let tool: &'static str = Box::leak(args.tool.into_boxed_str());
    let op = echo_op(&Raw::pool(&args.url, c), tool, false);
    let t = Instant::now();
    run_n(&op, c, args.calls).await;
    let secs = t.elapsed().as_secs_f64();
    println!("{} calls of {tool} at c={c}: {secs:.2} s, {:.0} calls/s", args.calls, args.calls as f64 / secs.max(1e-9));
    0
}
