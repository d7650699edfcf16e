//! The gateway rows (`presa-bench --gateway-only`, and at the end of a full
//! run): presa-gateway (built beside this binary) in front of the rmcp echo
//! peer, each in a process of its own.
//!
//! 1. Added latency: the same `tools/call echo` (a client without Tasks, so a
//!    plain call) straight to the peer and through the gateway, alternated, at
//!    1 and C connections; the notes give what the gateway adds at p50 and p99.
//!    (`--upstream-pool C`: one upstream connection per load connection.)
//! 2. Tasks end to end: create a task and poll `tasks/get` until `completed`,
//!    through the gateway (`echo` as a task: a worker calls the peer) and on
//!    presa's own `noop_task` (this binary's `serve`, embedded), alternated at
//!    C connections: gateway tasks/s against presa's.

use std::time::Duration;

use crate::{
    Raw, alternate, echo_op, procs,
    procs::{Proc, free_port},
    row, task_clients, task_op,
};

/// Print the gateway rows (see the module docs).
pub(crate) async fn rows(c: usize, secs: Duration) {
    let Some(gateway) = procs::sibling("presa-gateway") else {
        println!(
            "presa-gateway: not built beside presa-bench (cargo build --profile dist -p presa-bench -p presa-gateway): gateway rows skipped"
        );
        return;
    };
    let peer_bin =
        procs::sibling("rmcp-peer").expect("rmcp-peer beside presa-bench: cargo build --profile dist -p presa-bench");
    let peer = Proc::spawn(&peer_bin, &[], true).await;
    let port = free_port();
    let args: Vec<String> = [
        "--upstream-url",
        &peer.url,
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--upstream-pool",
        &c.to_string(),
        "--upstream-settle-ms",
        "0",
        // One principal drives every call: no per-principal share (the row measures speed).
        "--max-inflight-calls-per-scope",
        "0",
    ]
    .iter()
    .map(ToString::to_string)
    .collect();
    let _gw = Proc::spawn(&gateway, &args, false).await;
    let base = format!("http://127.0.0.1:{port}");
    for _ in 0..300 {
        if reqwest::get(format!("{base}/readyz")).await.is_ok_and(|r| r.status().is_success()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let gw_url = format!("{base}/mcp");

    let direct = echo_op(&Raw::pool(&peer.url, c), "echo", false);
    let via = echo_op(&Raw::pool(&gw_url, c), "echo", false);
    for conns in [1, c] {
        let (mut d, mut g) = alternate(&direct, &via, conns, secs).await;
        let (dp50, dp99) = (crate::pct(&mut d.latencies, 50.0), crate::pct(&mut d.latencies, 99.0));
        let (gp50, gp99) = (crate::pct(&mut g.latencies, 50.0), crate::pct(&mut g.latencies, 99.0));
        let added = format!(
            "adds p50 {:.2} ms, p99 {:.2} ms; gateway/direct = {:.2}",
            (gp50.as_secs_f64() - dp50.as_secs_f64()) * 1e3,
            (gp99.as_secs_f64() - dp99.as_secs_f64()) * 1e3,
            g.rate() / d.rate()
        );
        row("tools/call echo, rmcp peer directly", conns, Some(d.rate()), &mut d.latencies, "alternated");
        row("tools/call echo, through presa-gateway", conns, Some(g.rate()), &mut g.latencies, &added);
    }

    let exe = std::env::current_exe().expect("this binary's path");
    let presa = Proc::spawn(&exe, &["serve".to_string()], true).await;
    let (gateway_tasks, presa_tasks) =
        (task_op(&task_clients(&gw_url, c), "echo"), task_op(&task_clients(&presa.url, c), "noop_task"));
    let (mut g, mut p) = alternate(&gateway_tasks, &presa_tasks, c, secs).await;
    let ratio = format!("gateway/presa = {:.2}", g.rate() / p.rate());
    row("task round trip, presa-gateway (echo)", c, Some(g.rate()), &mut g.latencies, "embedded, alternated");
    row("task round trip, presa (noop_task)", c, Some(p.rate()), &mut p.latencies, &ratio);
}
