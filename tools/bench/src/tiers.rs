//! `presa-bench tiers`: the CPU a small durable task costs on each tier, the
//! figures the sizing model in docs/capacity.md is built from, so an
//! operator can re-derive it on their own hardware.
//!
//! It starts a private `redis-server` (no persistence), one shipped
//! `presa-api` pod and one `presa-worker` pod (the demo catalog, as
//! `presa-bench soak` does), then creates `--tasks` tasks of `failing_job`
//! (a task whose tool returns at once) on `--connections` connections and
//! waits until every partition's work stream is empty (each task concluded),
//! then sends five times as many sync calls of `test_simple_text` to the same
//! API pod. Around each phase it reads each pod's CPU (the sum of its
//! threads' `schedstat`, nanoseconds), Redis's (`INFO cpu`) and its
//! `INFO commandstats`, and this process's own (the load generator). It
//! prints CPU per task and per sync call by tier, Redis's commands per task,
//! and what one core of each tier sustains at those costs.

use std::{
    collections::BTreeMap,
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use presa_store_redis::keys::Keys;
use presa_testkit::TestRedis;
use serde_json::json;

use crate::{
    chaos::{PARTITIONS, Redis, Rig, Shape},
    cost::{cpu_secs_of, load_average, own_cpu_secs, redis_cpu_secs},
    load::{Op, Sample, op, run_n},
    ops::{Raw, create_op, raw_meta},
};

/// `presa-bench tiers` flags.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct TiersArgs {
    /// Tasks created (then five times as many sync calls).
    #[arg(long, default_value_t = 5000)]
    tasks: usize,
    /// Concurrent connections of the load generator.
    #[arg(long, default_value_t = 16)]
    connections: usize,
    /// Where `presa-api` and `presa-worker` are (default: next to this program).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// A flag for the API pod, repeatable: what a setting costs, e.g.
    /// `--api-flag=--task-index=off --api-flag=--max-bytes-per-scope=0`.
    #[arg(long = "api-flag", allow_hyphen_values = true)]
    api_flags: Vec<String>,
}

/// The demo tool each task runs: it returns at once.
const TASK_TOOL: &str = "failing_job";
/// The demo tool each sync call runs.
const SYNC_TOOL: &str = "test_simple_text";

/// CPU seconds of each tier at one instant, and Redis's command counters.
struct Reading {
    api: f64,
    worker: f64,
    redis: f64,
    generator: f64,
    /// Command → (calls, µs inside it), from `INFO commandstats`.
    commands: BTreeMap<String, (f64, f64)>,
}

/// Run it; the process exit code.
pub(crate) async fn run(args: TiersArgs) -> i32 {
    crate::procs::exit_code("tiers", tiers(args).await.map(|()| true))
}

async fn tiers(args: TiersArgs) -> Result<(), String> {
    let (bin, profile) = crate::procs::pod_binaries(args.bin_dir.as_deref())?;
    let (n, c) = (args.tasks.max(1), args.connections.max(1));
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    println!("presa-bench tiers: {cores} cores, pods {profile}, load average {} (1/5/15 min)", load_average());
    let api_flags = args.api_flags.clone();
    let shape = Shape { apis: 1, workers: 1, env: Vec::new(), api_flags, worker_flags: Vec::new() };
    let redis = tokio::task::block_in_place(TestRedis::spawn);
    let url = redis.url().to_string();
    let rig = Rig::start(Redis::Standalone(Box::new(redis)), &shape, bin).await;
    let (api, worker) = (&rig.apis[0].1, &rig.workers[0].1);
    let mut con = redis::Client::open(url.as_str())
        .map_err(|e| e.to_string())?
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| format!("Redis: {e}"))?;
    let keys = Keys::new(rig.prefix.clone(), PARTITIONS);
    let pool = Raw::pool(&api.url, c);
    let read = |con: &mut redis::aio::MultiplexedConnection| {
        let (api, worker) = (api.pid(), worker.pid());
        let mut con = con.clone();
        async move {
            Reading {
                api: cpu_secs_of(&format!("/proc/{api}/task")),
                worker: cpu_secs_of(&format!("/proc/{worker}/task")),
                redis: redis_cpu_secs(&mut con).await,
                generator: own_cpu_secs(),
                commands: commandstats(&mut con).await,
            }
        }
    };
    let flags = if args.api_flags.is_empty() { String::new() } else { format!(" ({})", args.api_flags.join(" ")) };
    println!(
        "1 presa-api pod{flags}, 1 presa-worker pod, redis-server {url} (no persistence); {n} tasks ({TASK_TOOL}) \
         then {} sync calls ({SYNC_TOOL}), {c} connections",
        5 * n
    );
    // A warm-up, so connections and caches are there before measuring.
    run_n(&create_op(&pool, TASK_TOOL, false), c, c * 10).await;
    drained(&mut con, &keys, Duration::from_secs(30)).await?;

    let t0 = read(&mut con).await;
    let started = Instant::now();
    run_n(&create_op(&pool, TASK_TOOL, false), c, n).await;
    drained(&mut con, &keys, Duration::from_secs(60)).await?;
    let tasks_s = started.elapsed().as_secs_f64();
    let t1 = read(&mut con).await;
    run_n(&sync_op(&pool), c, 5 * n).await;
    let t2 = read(&mut con).await;

    let us = |a: f64, b: f64, k: usize| (b - a) * 1e6 / k as f64;
    let task = [us(t0.api, t1.api, n), us(t0.worker, t1.worker, n), us(t0.redis, t1.redis, n)];
    let sync = [us(t1.api, t2.api, 5 * n), us(t1.worker, t2.worker, 5 * n), us(t1.redis, t2.redis, 5 * n)];
    let generator = (us(t0.generator, t1.generator, n), us(t1.generator, t2.generator, 5 * n));
    println!("\n{:<26} {:>12} {:>16}", "tier", "µs per task", "µs per sync call");
    for (i, tier) in ["presa-api pod", "presa-worker pod", "Redis"].into_iter().enumerate() {
        println!("{tier:<26} {:>12.1} {:>16.1}", task[i], sync[i]);
    }
    let (presa, sync_all) = (task.iter().sum::<f64>(), sync.iter().sum::<f64>());
    println!("{:<26} {:>12.1} {:>16.1}  (task / sync call = {:.1})", "all three", presa, sync_all, presa / sync_all);
    println!("{:<26} {:>12.1} {:>16.1}  (not part of presa)", "load generator", generator.0, generator.1);
    println!("tasks done in {tasks_s:.2} s: {:.0} tasks/s on these {cores} shared cores", n as f64 / tasks_s);

    let per_task = command_deltas(&t0.commands, &t1.commands, n);
    let of = |name: &str| per_task.iter().find(|(c, ..)| c == name).map_or((0.0, 0.0), |(_, c, u)| (*c, *u));
    let (scripts, in_scripts) = of("evalsha");
    let commands: f64 = per_task.iter().filter(|(name, ..)| name != "evalsha").map(|(_, c, _)| c).sum();
    let top: Vec<String> = per_task.iter().take(14).map(|(name, c, u)| format!("{name} {c:.2} ({u:.1} µs)")).collect();
    println!(
        "\nRedis per task: {scripts:.2} scripts (EVALSHA: {in_scripts:.1} µs, their commands included) and \
         {commands:.1} commands (inside scripts or sent alone), of {:.1} µs Redis CPU (the rest: network, event loop)",
        task[2]
    );
    println!("  calls per task by command (µs per task): {}", top.join(", "));

    let per_core = |us: f64| if us > 0.0 { 1e6 / us } else { f64::INFINITY };
    println!(
        "\nceilings at these costs: one presa-api core {:.0} tasks/s ({:.0} sync calls/s), one presa-worker core \
         {:.0} tasks/s, one Redis shard (a single-threaded server) {:.0} tasks/s",
        per_core(task[0]),
        per_core(sync[0]),
        per_core(task[1]),
        per_core(task[2])
    );
    println!("end: load average {}", load_average());
    Ok(())
}

/// `tools/call SYNC_TOOL` on connection i, the same body every time.
fn sync_op(pool: &Arc<Vec<Raw>>) -> Op {
    let params = json!({ "name": SYNC_TOOL, "arguments": {}, "_meta": raw_meta(json!({})) });
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params }).to_string();
    let pool = pool.clone();
    op(move |i| {
        let (pool, body) = (pool.clone(), body.clone());
        async move { Sample { latency: pool[i].call(SYNC_TOOL, body, false).await, ..Sample::default() } }
    })
}

/// Wait until every partition's work stream is empty: each task concluded
/// (its entry goes with the write that ends it).
async fn drained(con: &mut redis::aio::MultiplexedConnection, keys: &Keys, within: Duration) -> Result<(), String> {
    let deadline = Instant::now() + within;
    loop {
        let mut pipe = redis::pipe();
        for p in 0..keys.partitions() {
            pipe.cmd("XLEN").arg(keys.work(p));
        }
        let lens: Vec<u64> = pipe.query_async(con).await.map_err(|e| format!("Redis: {e}"))?;
        if lens.iter().all(|l| *l == 0) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("{} work entries still queued after {within:?}", lens.iter().sum::<u64>()));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `INFO commandstats`: command → (calls, µs).
async fn commandstats(con: &mut redis::aio::MultiplexedConnection) -> BTreeMap<String, (f64, f64)> {
    let info: String = redis::cmd("INFO").arg("commandstats").query_async(con).await.unwrap_or_default();
    info.lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let field = |k: &str| rest.split(',').find_map(|f| f.strip_prefix(k)?.parse::<f64>().ok());
            Some((name.to_string(), (field("calls=")?, field("usec=")?)))
        })
        .collect()
}

/// Calls and µs per task of each command between two readings, most µs first
/// (the commands this bench sends itself, `info` and `xlen`, left out).
fn command_deltas(
    before: &BTreeMap<String, (f64, f64)>,
    after: &BTreeMap<String, (f64, f64)>,
    n: usize,
) -> Vec<(String, f64, f64)> {
    let mut out: Vec<(String, f64, f64)> = after
        .iter()
        .filter(|(name, _)| !matches!(name.as_str(), "info" | "xlen"))
        .map(|(name, (calls, us))| {
            let (c0, u0) = before.get(name).copied().unwrap_or_default();
            (name.clone(), (calls - c0) / n as f64, (us - u0) / n as f64)
        })
        .filter(|(_, calls, _)| *calls > 0.0)
        .collect();
    out.sort_by(|a, b| b.2.total_cmp(&a.2));
    out
}
