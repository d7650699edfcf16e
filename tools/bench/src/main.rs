//! `presa-bench`: requests/s and latency of presa on loopback, everything in one process.
//!
//! Run: `cargo run --profile dist -p presa-bench -- [--seconds N] [--connections C] [--listeners L] [--redis-url URL]`
//! (`dist`: the shipped binaries' profile; `--release` builds faster and runs slower.)
//!
//! `presa-bench chaos [...]` is a different program: pods and Redis killed
//! under load through nginx, and what it cost (see `chaos/mod.rs`). So is
//! `presa-bench soak [...]`: minutes of steady load on pods and Redis, memory
//! sampled, and whether it stayed flat (see `soak/mod.rs`). And
//! `presa-bench tiers [...]`: the CPU a task costs on each tier, pods in
//! processes of their own, for docs/capacity.md's sizing model (`tiers.rs`).
//! And `presa-bench artifacts [...]`: a big artifact streamed by a tool and
//! downloaded, throughput and each pod's RSS rise (`artifacts.rs`). And
//! `presa-bench recovery [...]`: stranded work taken over after a mass worker
//! loss, its cost per recovered entry and the worst stalls (`recovery.rs`).
//! And `presa-bench calls --url URL [...]`: a fixed number of plain
//! `tools/call`s to one endpoint, for instruction-count drivers (`calls.rs`).
//!
//! The process holds the server (`presa_http::router` + `presa_http::serve` on
//! 127.0.0.1:0), its in-process worker (`presa_server::Worker`) and the load
//! generator: C loops, each with its own keep-alive connection, sending one
//! request after another for a fixed time, then stopping. Traffic stays on
//! 127.0.0.1 (except to a Redis given with `--redis-url`). The catalog is the
//! bench's own: `echo` (sync, JSON reply), `echo_progress` (sync, sends one
//! progress notification first, so the reply is SSE), `noop_task` (a task that
//! completes at once) and `park` (a task that asks for one input, then completes).
//!
//! One row per measurement: operations/s, latency p50/p90/p99 of one operation, notes.
//! 1. `tools/call echo` (JSON) and 2. `echo_progress` (SSE), at 1 and C
//!    connections, alternated in short rounds; the notes give SSE/JSON throughput.
//! 3. Task round trip, embedded: create `noop_task`, then `tasks/get` at once
//!    and every 5 ms until `completed`. ops/s is tasks created (and seen
//!    completed) per second; the latency runs from sending the create to seeing
//!    `completed`, so it includes the polling delay. Notes: `tasks/get` per task,
//!    and RSS growth per 1000 tasks (the memory store keeps tasks for their TTL).
//! 4. The same on Redis (`--redis-url`, else a `redis-server` spawned on a free
//!    port when one is on PATH), alternated with embedded: Redis/embedded ratio.
//! 5. Input round trip: create `park`, poll until `input_required`,
//!    `tasks/update`, poll until `completed` (notes: the update→completed part).
//! 6. `subscriptions/listen` fan-out: L streams watch `toolsListChanged`; one
//!    `list_changed` is published on the event bus per round; the row gives the
//!    time until all L streams received it, over the rounds.
//!
//! 7. Peer comparison: the same `echo` request to presa (this binary's `serve`
//!    in a child process, on Redis when there is one) and to an rmcp 3.11 echo
//!    server (the `rmcp-peer` binary: stateless Streamable HTTP, JSON replies,
//!    TCP_NODELAY), alternated at C and 50 connections; then `tasks/get` of a
//!    completed task through presa on Redis against rmcp's echo. Ratios are
//!    printed at the end. Before the table: idle RSS of the shipped `presa-api`
//!    (embedded, after one sync call) and `presa-worker` (on Redis), when built
//!    beside this binary, and of the peer (after one echo).
//! 8. On Redis with the default settings (per-scope limits on) and two worker
//!    pools: Redis bytes per small completed task (`INFO memory` delta and
//!    `MEMORY USAGE` of one task record) and the CPU a task costs from create to
//!    completed against a sync call's (this process and Redis), task creates against sync calls on the
//!    same server (refusals counted), creators at full speed on 100
//!    connections (completions meanwhile and their ratio to creations, RSS
//!    after the backlog drained), create → handler started (c=1 and C), `tasks/update` →
//!    parked handler resumed (c=1, also embedded); RSS per open listen stream
//!    (the server's own process), and how much of it is back 1 s and 11 s
//!    after they close (jemalloc returns freed pages after a 10 s decay).
//!    `--pickup-only` runs just its create → handler started rows.
//!
//! 9. presa-gateway in front of the rmcp peer (`gateway.rs`; `--gateway-only`
//!    runs just these): what a proxied plain call adds over a direct one, and
//!    gateway tasks/s end to end against presa's own.
//!
//! How to read it: server, worker, generator (and Redis) share the machine's
//! cores, so absolute figures only describe the machine and its load at the
//! time (printed in the header and footer). Compare the ratios: both sides are
//! measured in the same run, in alternating rounds (ABBA…) with the same
//! generator, which cancels most drift. No tracing subscriber or metrics
//! recorder is installed unless `--telemetry logs|otel` asks for the binaries'
//! subscriber; the allocator is jemalloc, as in the binaries
//! (`--no-default-features` measures the system allocator instead). The
//! peer rows and the listen-stream row run their servers in processes of
//! their own (`procs.rs`): presa with this allocator, rmcp with the system's,
//! as each ships. Nothing is asserted: speed goals live here, never in timed
//! tests.
//!
//! Layout: `main` runs the rows in order; [`args`] (flags), [`load`] (the
//! generator and its rows), [`servers`] (the servers under test), [`ops`] (the
//! operations measured), [`cost`] (CPU, bytes and RSS per task or stream),
//! [`peer`] (the rmcp comparison's processes).

use std::{
    future::Future,
    sync::{
        Arc, LazyLock, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

mod args;
mod artifacts;
mod calls;
mod chaos;
mod cost;
mod fairness;
mod gateway;
mod load;
mod ops;
mod peer;
mod permits;
mod procs;
mod recovery;
mod retries;
mod servers;
mod soak;
mod tiers;

use args::*;
use cost::*;
use load::*;
use ops::*;
use peer::*;
use servers::*;

/// The allocator presa's binaries ship with (presa-runtime's `jemalloc` feature), so the bench measures what ships.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Create → handler started on `pool`'s server, at 1 and `c` connections:
/// each task's arguments carry its send time, which its handler stamps
/// (`stamp_task`).
async fn pickup_rows(pool: &Arc<Vec<Raw>>, c: usize, secs: Duration) {
    let stamped = create_op(pool, "stamp_task", true);
    for conns in [1, c] {
        take(&PICKUPS);
        let s = run(&stamped, conns, secs).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut picked = take(&PICKUPS);
        let notes = format!(
            "{} tasks, {} picked up; create reply p50 {}",
            s.latencies.len(),
            picked.len(),
            ms(pct(&mut s.latencies.clone(), 50.0))
        );
        row("create -> pickup, Redis, 2 workers", conns, None, &mut picked, &notes);
    }
}

/// As presa's binaries do (`presa_runtime`): jemalloc returns freed memory by itself.
fn return_freed_memory() {
    #[cfg(feature = "jemalloc")]
    if let Err(e) = tikv_jemalloc_ctl::background_thread::write(true) {
        eprintln!("jemalloc background threads not enabled: {e}");
    }
}

use clap::Parser;
use futures::{FutureExt, StreamExt, future::BoxFuture};
use presa_http::HttpConfig;
use presa_server::{
    Catalog, Core, Server, ServerConfig, StateCodec, TaskPolicy, Tool, ToolContext, ToolOutput, Worker, WorkerConfig,
};
use presa_store::{Backend, memory::MemoryStore};
use presa_store_redis::{RedisConfig, RedisStore};
use presa_telemetry::LogFormat;
use presa_testkit::{Client, TestRedis, next_within, redis::unique_prefix, tasks_caps};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

#[tokio::main]
async fn main() {
    let args = Args::parse();
    return_freed_memory();
    match args.command {
        Some(Command::Chaos(chaos)) => std::process::exit(chaos::run(chaos).await),
        Some(Command::Soak(soak)) => std::process::exit(soak::run(soak).await),
        Some(Command::Tiers(tiers)) => std::process::exit(tiers::run(tiers).await),
        Some(Command::Artifacts(a)) => std::process::exit(artifacts::run(a).await),
        Some(Command::Retries(r)) => std::process::exit(retries::run(r).await),
        Some(Command::Recovery(r)) => std::process::exit(recovery::run(r).await),
        Some(Command::Calls(a)) => std::process::exit(calls::run(a).await),
        Some(Command::Serve(serve_args)) => return serve(serve_args).await,
        None => {}
    }
    let _telemetry = (args.telemetry != Telemetry::None).then(|| {
        let otel = args.telemetry == Telemetry::Otel;
        presa_telemetry::init_with("presa-bench", LogFormat::Text, otel).expect("telemetry set up")
    });
    let secs = Duration::from_secs_f64(args.seconds.max(0.1));
    let (c, listeners) = (args.connections.max(1), args.listeners.max(1));
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    // The profile's directory (`debug`, `release`, `dist`): this binary's and its siblings'.
    let exe = std::env::current_exe().ok();
    let dir = exe.as_deref().and_then(|e| e.parent()?.file_name()?.to_str().map(str::to_string));
    let profile = dir.unwrap_or_else(|| if cfg!(debug_assertions) { "debug" } else { "release" }.into());
    println!("presa-bench: {cores} cores, {profile} build, load average {} (1/5/15 min)", load_average());
    if cfg!(debug_assertions) {
        println!("WARNING: debug build, figures are meaningless: cargo run --profile dist -p presa-bench");
    }
    let (s, rss) = (secs.as_secs_f64(), rss_mib());
    println!("{s:.1} s per row, C = {c} connections, L = {listeners} listen streams, RSS {rss:.1} MiB");
    let alloc = if cfg!(feature = "jemalloc") { "jemalloc" } else { "system (glibc)" };
    println!("allocator {alloc}, telemetry {:?}", args.telemetry);
    if args.gateway_only {
        println!("\n{:<38} {:>5} {:>8} {:>9} {:>9} {:>9}  notes", "scenario", "conns", "ops/s", "p50", "p90", "p99");
        gateway::rows(c, secs).await;
        println!("load average {} (1/5/15 min)", load_average());
        return;
    }
    let memory = Arc::new(MemoryStore::new());
    let embedded = start(Backend::new(memory), None).await;
    let redis = start_redis(args.redis_url.as_deref()).await;
    if redis.is_none() {
        println!("Redis: none (no --redis-url, no redis-server on PATH): Redis rows skipped");
    }
    if args.pickup_only {
        println!("\n{:<38} {:>5} {:>8} {:>9} {:>9} {:>9}  notes", "scenario", "conns", "ops/s", "p50", "p90", "p99");
        if let Some(r) = &redis {
            let url = r.redis_url.as_ref().map(|u| u.0.as_str());
            let d = start_redis_with(url, ServerConfig::default(), 2, HttpConfig::default()).await;
            if let Some(d) = &d {
                pickup_rows(&Raw::pool(&d.url, c), c, secs).await;
            }
        }
        println!("load average {} (1/5/15 min)", load_average());
        return;
    }
    if args.fairness_only {
        println!("\n{:<38} {:>5} {:>8} {:>9} {:>9} {:>9}  notes", "scenario", "conns", "ops/s", "p50", "p90", "p99");
        fairness_rows(redis.as_ref(), secs).await;
        return;
    }
    let redis_url = redis.as_ref().and_then(|r| r.redis_url.as_ref()).map(|u| u.0.clone());
    if args.task_index_rounds > 0 {
        task_index_rows(redis_url.as_deref(), args.redis_tasks, c, args.task_index_rounds).await;
        return;
    }
    println!("idle RSS (own processes): {}", idle_rss(redis_url.as_deref()).await);
    println!("\n{:<38} {:>5} {:>8} {:>9} {:>9} {:>9}  notes", "scenario", "conns", "ops/s", "p50", "p90", "p99");

    // 1–2. JSON against SSE replies, alternated, at 1 and C connections.
    let raw = Raw::pool(&embedded.url, c);
    let (json_op, sse_op) = (echo_op(&raw, "echo", false), echo_op(&raw, "echo_progress", true));
    for conns in if args.peer_only { vec![] } else { vec![1, c] } {
        let (mut j, mut s) = alternate(&json_op, &sse_op, conns, secs).await;
        let ratio = format!("SSE/JSON = {:.2}", s.rate() / j.rate());
        row("tools/call echo (JSON)", conns, Some(j.rate()), &mut j.latencies, "");
        row("tools/call echo_progress (SSE)", conns, Some(s.rate()), &mut s.latencies, &ratio);
    }

    // Peer: the same echo request to presa and to an rmcp echo server, each in a
    // process of its own (`procs.rs`), alternated.
    let mut ratios = Vec::new();
    let (presa_proc, rmcp_proc) = peers(redis.as_ref()).await;
    let wide = c.max(PEER_WIDE);
    let peer_widths = if c == wide { vec![c] } else { vec![c, wide] };
    let presa_pool = Raw::pool(&presa_proc.url, wide);
    let rmcp_pool = Raw::pool(&rmcp_proc.url, wide);
    let (presa_echo, rmcp_echo) = (echo_op(&presa_pool, "echo", false), echo_op(&rmcp_pool, "echo", false));
    for &conns in &peer_widths {
        let (mut p, mut r) = alternate(&presa_echo, &rmcp_echo, conns, secs).await;
        let ratio = p.rate() / r.rate();
        row("tools/call echo (JSON), presa", conns, Some(p.rate()), &mut p.latencies, "alternated with rmcp");
        row(
            "tools/call echo (JSON), rmcp 3.11",
            conns,
            Some(r.rate()),
            &mut r.latencies,
            &format!("presa/rmcp = {ratio:.2}"),
        );
        ratios.push(format!("sync tools/call echo, c={conns}: presa/rmcp = {ratio:.2}"));
    }
    // `tasks/get` of a completed task through presa on Redis, against rmcp's sync echo.
    if redis.is_some() {
        let client = Client::new(presa_proc.url.clone(), tasks_caps());
        let mut ids = Vec::with_capacity(wide);
        for _ in 0..wide {
            let id = create(&client, "noop_task").await;
            poll_until(&client, &id, "completed").await;
            ids.push(id);
        }
        let get = get_op(&Raw::pool(&presa_proc.url, wide), &ids);
        for &conns in &peer_widths {
            let (mut g, mut e) = alternate(&get, &rmcp_echo, conns, secs).await;
            let ratio = g.rate() / e.rate();
            row("tasks/get completed, presa on Redis", conns, Some(g.rate()), &mut g.latencies, "alternated with rmcp");
            let notes = format!("presa tasks/get / rmcp echo = {ratio:.2}");
            row("tools/call echo (JSON), rmcp 3.11", conns, Some(e.rate()), &mut e.latencies, &notes);
            ratios.push(format!("tasks/get (Redis) vs rmcp sync echo, c={conns}: presa/rmcp = {ratio:.2}"));
        }
    }
    drop((presa_proc, rmcp_proc));
    if args.peer_only {
        print_ratios(&ratios);
        return;
    }

    // Tasks on Redis with the default settings (per-scope limits on) and two worker pools.
    let defaults = match &redis {
        Some(r) => {
            start_redis_with(
                r.redis_url.as_ref().map(|u| u.0.as_str()),
                ServerConfig::default(),
                2,
                HttpConfig::default(),
            )
            .await
        }
        None => None,
    };
    if let Some(d) = &defaults {
        if let Some(notes) = redis_bytes_per_task(d, args.redis_tasks, c).await {
            println!("{:<38} {c:>5} {:>8}  {notes}", "Redis bytes per small completed task", "-");
        }
        if let Some(notes) = waiting_task_cost(d, args.redis_tasks, c).await {
            println!("{:<38} {c:>5} {:>8}  {notes}", "CPU per task awaiting 1 ms, Redis", "-");
        }
        task_index_rows(redis_url.as_deref(), args.redis_tasks, c, 2).await;
        let pool = Raw::pool(&d.url, wide);
        let (creates, sync) = (create_op(&pool, "noop_task", false), echo_op(&pool, "echo", false));
        let done0 = COMPLETED.load(Ordering::Relaxed);
        let (mut cr, mut sy) = alternate(&creates, &sync, c, secs).await;
        let ratio = cr.rate() / sy.rate();
        let notes = format!("{} refused (retryable); creates/sync = {ratio:.2}", cr.refused);
        row("task create, Redis, default limits", c, Some(cr.rate()), &mut cr.latencies, &notes);
        row("tools/call echo (JSON), same server", c, Some(sy.rate()), &mut sy.latencies, "alternated with creates");
        ratios.push(format!("task creations/s on Redis vs presa sync tools/call, c={c}: {ratio:.2}"));
        let created = done0 + cr.latencies.len() as u64 + 2 * c as u64;
        drain(created, Duration::from_secs(30)).await;
        // Creators at full speed, alone: do the two worker pools keep up?
        let create_pool = Raw::pool(&d.url, CREATE_WIDE);
        let creates_wide = create_op(&create_pool, "noop_task", false);
        let (rss0, done0) = (rss_mib(), COMPLETED.load(Ordering::Relaxed));
        let mut cr = run(&creates_wide, CREATE_WIDE, secs).await;
        let done_in_window = COMPLETED.load(Ordering::Relaxed) - done0;
        let created = cr.latencies.len() as u64;
        let waited = drain(done0 + created, Duration::from_secs(60)).await;
        let rss1 = rss_mib();
        let per_s = done_in_window as f64 / cr.elapsed.as_secs_f64();
        let keep_up = per_s / cr.rate();
        let notes = format!(
            "{} refused; completions {per_s:.0}/s meanwhile ({done_in_window} of {created}), completions/creations = {keep_up:.2}, backlog drained {:.1} s later; RSS {rss0:.1} -> {rss1:.1} MiB after the drain",
            cr.refused,
            waited.as_secs_f64()
        );
        row("task create at full speed, Redis", CREATE_WIDE, Some(cr.rate()), &mut cr.latencies, &notes);
        ratios.push(format!("completions/creations with creators at full speed (c={CREATE_WIDE}): {keep_up:.2}"));
        pickup_rows(&pool, c, secs).await;
    }
    // tasks/update -> parked handler resumed, one at a time.
    let resume_targets = std::iter::once(("embedded", &embedded)).chain(defaults.as_ref().map(|d| ("Redis", d)));
    for (name, target) in resume_targets {
        take(&RESUMES);
        let s = run(&input_op(&task_clients(&target.url, 1)), 1, secs).await;
        let mut resumed = take(&RESUMES);
        let notes = format!("{} input round trips", s.latencies.len());
        row(&format!("tasks/update -> resume, {name}"), 1, None, &mut resumed, &notes);
    }
    fairness_rows(redis.as_ref(), secs).await;
    // RSS per open listen stream.
    let notes = rss_per_listen_stream(args.rss_streams).await;
    println!("{:<38} {:>5} {:>8}  {notes}", "RSS per listen stream, embedded", args.rss_streams, "-");

    // 3. Task round trip, embedded, alone (so RSS growth is its own).
    let embedded_clients = task_clients(&embedded.url, c);
    let embedded_task = task_op(&embedded_clients, "noop_task");
    run(&embedded_task, c, ROUND / 2).await;
    let rss0 = rss_mib();
    let mut s = run(&embedded_task, c, secs).await;
    let rss1 = rss_mib();
    let per_1000 = (rss1 - rss0) * 1024.0 * 1000.0 / s.latencies.len().max(1) as f64;
    let notes = format!(
        "{:.1} gets/task; RSS {rss0:.1} -> {rss1:.1} MiB = {per_1000:+.0} KiB/1000 tasks ({} tasks)",
        s.polls_per_op(),
        s.latencies.len()
    );
    row("task round trip, embedded", c, Some(s.rate()), &mut s.latencies, &notes);

    // 4. Task round trip, Redis against embedded, alternated.
    let redis_clients = redis.as_ref().map(|r| task_clients(&r.url, c));
    if let Some(rc) = &redis_clients {
        let (mut e, mut r) = alternate(&embedded_task, &task_op(rc, "noop_task"), c, secs).await;
        let ratio = format!("{:.1} gets/task; Redis/embedded = {:.2}", r.polls_per_op(), r.rate() / e.rate());
        let e_notes = format!("{:.1} gets/task (alternated with Redis)", e.polls_per_op());
        row("task round trip, embedded", c, Some(e.rate()), &mut e.latencies, &e_notes);
        row("task round trip, Redis", c, Some(r.rate()), &mut r.latencies, &ratio);
    }

    // 5. Input round trip (create, input_required, tasks/update, completed).
    let embedded_input = input_op(&embedded_clients);
    let mut input_rows = match &redis_clients {
        Some(rc) => {
            let (e, r) = alternate(&embedded_input, &input_op(rc), c, secs).await;
            vec![("input round trip, embedded", e), ("input round trip, Redis", r)]
        }
        None => {
            run(&embedded_input, c, ROUND / 2).await;
            vec![("input round trip, embedded", run(&embedded_input, c, secs).await)]
        }
    };
    for (name, s) in &mut input_rows {
        let (p50, p99) = (pct(&mut s.tails, 50.0), pct(&mut s.tails, 99.0));
        let notes = format!("update->completed p50 {} p99 {}; {:.1} gets/trip", ms(p50), ms(p99), s.polls_per_op());
        row(name, c, Some(s.rate()), &mut s.latencies, &notes);
    }

    // 6. Listen fan-out.
    let targets = std::iter::once(("embedded", &embedded)).chain(redis.as_ref().map(|r| ("Redis", r)));
    for (name, target) in targets {
        let (mut all, mut each) = fan_out(target, listeners, secs).await;
        let (p50, p99) = (ms(pct(&mut each, 50.0)), ms(pct(&mut each, 99.0)));
        let notes = format!("all L received; each delivery p50 {p50} p99 {p99}; {} rounds", all.len());
        row(&format!("listen fan-out, {name}"), listeners, None, &mut all, &notes);
    }
    // 9. The gateway (`gateway.rs`).
    gateway::rows(c, secs).await;
    print_ratios(&ratios);
}
