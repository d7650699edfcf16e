//! `presa-bench tiers`: the CPU a small durable task costs on each tier, the
//! figures the sizing model in docs/capacity.md is built from, so an
//! operator can re-derive it on their own hardware.
//!
//! It starts a private `redis-server` (no persistence; with
//! `--redis-cluster N`, a Redis Cluster of N primaries without replicas),
//! one shipped `presa-api` pod and one `presa-worker` pod (the demo catalog,
//! as `presa-bench soak` does), then creates `--tasks` tasks of `failing_job`
//! (a task whose tool returns at once) on `--connections` connections and
//! waits until every partition's work stream is empty (each task concluded),
//! then sends five times as many sync calls of `test_simple_text` to the same
//! API pod. Around each phase it reads each pod's CPU (the sum of its
//! threads' `schedstat`, nanoseconds), Redis's (`INFO cpu` and `INFO
//! commandstats`, summed over the primaries of a cluster, each shard's share
//! printed too), and this process's own (the load generator). It
//! prints CPU per task and per sync call by tier, Redis's commands per task,
//! and what one core of each tier sustains at those costs.

use std::{
    collections::BTreeMap,
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use presa_store_redis::keys::Keys;
use presa_testkit::{TestRedis, redis_cluster::TestCluster};
use serde_json::json;

use crate::{
    chaos::{PARTITIONS, Redis, Rig, Shape, node},
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
    /// Run on a Redis Cluster of this many primaries (no replicas) instead
    /// of one standalone server (0).
    #[arg(long, default_value_t = 0)]
    redis_cluster: usize,
}

/// The demo tool each task runs: it returns at once.
const TASK_TOOL: &str = "failing_job";
/// The demo tool each sync call runs.
const SYNC_TOOL: &str = "test_simple_text";

/// CPU seconds of each tier at one instant, and Redis's command counters.
struct Reading {
    api: f64,
    worker: f64,
    /// Each primary's CPU seconds.
    redis: Vec<f64>,
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
    let redis = tokio::task::block_in_place(|| match args.redis_cluster {
        0 => Redis::Standalone(Box::new(TestRedis::spawn())),
        n => Redis::Cluster(TestCluster::spawn(n, 0)),
    });
    let url = redis.describe();
    let rig = Rig::start(redis, &shape, bin).await;
    let (api, worker) = (&rig.apis[0].1, &rig.workers[0].1);
    let mut servers = Vec::new();
    for port in tokio::task::block_in_place(|| rig.redis.primaries())? {
        servers.push(node(port).await?);
    }
    let partitions = rig.partition_connections().await?;
    let keys = Keys::new(rig.prefix.clone(), PARTITIONS);
    let pool = Raw::pool(&api.url, c);
    let read = || {
        let (api, worker, servers) = (api.pid(), worker.pid(), servers.clone());
        async move {
            let mut redis = Vec::new();
            let mut commands = BTreeMap::new();
            for mut con in servers {
                redis.push(redis_cpu_secs(&mut con).await);
                for (name, (calls, us)) in commandstats(&mut con).await {
                    let sum: &mut (f64, f64) = commands.entry(name).or_default();
                    (sum.0, sum.1) = (sum.0 + calls, sum.1 + us);
                }
            }
            Reading {
                api: cpu_secs_of(&format!("/proc/{api}/task")),
                worker: cpu_secs_of(&format!("/proc/{worker}/task")),
                redis,
                generator: own_cpu_secs(),
                commands,
            }
        }
    };
    let flags = if args.api_flags.is_empty() { String::new() } else { format!(" ({})", args.api_flags.join(" ")) };
    println!(
        "1 presa-api pod{flags}, 1 presa-worker pod, {url} (no persistence); {n} tasks ({TASK_TOOL}) \
         then {} sync calls ({SYNC_TOOL}), {c} connections",
        5 * n
    );
    // A warm-up, so connections and caches are there before measuring.
    run_n(&create_op(&pool, TASK_TOOL, false), c, c * 10).await;
    drained(&partitions, &keys, Duration::from_secs(30)).await?;

    let t0 = read().await;
    let started = Instant::now();
    run_n(&create_op(&pool, TASK_TOOL, false), c, n).await;
    drained(&partitions, &keys, Duration::from_secs(60)).await?;
    let tasks_s = started.elapsed().as_secs_f64();
    let t1 = read().await;
    run_n(&sync_op(&pool), c, 5 * n).await;
    let t2 = read().await;

    let us = |a: f64, b: f64, k: usize| (b - a) * 1e6 / k as f64;
    let redis_sum = |r: &Reading| r.redis.iter().sum::<f64>();
    let task = [us(t0.api, t1.api, n), us(t0.worker, t1.worker, n), us(redis_sum(&t0), redis_sum(&t1), n)];
    let sync = [us(t1.api, t2.api, 5 * n), us(t1.worker, t2.worker, 5 * n), us(redis_sum(&t1), redis_sum(&t2), 5 * n)];
    let generator = (us(t0.generator, t1.generator, n), us(t1.generator, t2.generator, 5 * n));
    println!("\n{:<26} {:>12} {:>16}", "tier", "µs per task", "µs per sync call");
    for (i, tier) in ["presa-api pod", "presa-worker pod", "Redis"].into_iter().enumerate() {
        println!("{tier:<26} {:>12.1} {:>16.1}", task[i], sync[i]);
    }
    let (presa, sync_all) = (task.iter().sum::<f64>(), sync.iter().sum::<f64>());
    println!("{:<26} {:>12.1} {:>16.1}  (task / sync call = {:.1})", "all three", presa, sync_all, presa / sync_all);
    println!("{:<26} {:>12.1} {:>16.1}  (not part of presa)", "load generator", generator.0, generator.1);
    if t1.redis.len() > 1 {
        let shards: Vec<String> =
            t0.redis.iter().zip(&t1.redis).map(|(a, b)| format!("{:.1}", us(*a, *b, n))).collect();
        println!("Redis µs per task on each primary: {}", shards.join(", "));
    }
    println!("tasks done in {tasks_s:.2} s: {:.0} tasks/s on these {cores} shared cores", n as f64 / tasks_s);

    let per_task = command_deltas(&t0.commands, &t1.commands, n);
    let of = |name: &str| per_task.iter().find(|(c, ..)| c == name).map_or((0.0, 0.0), |(_, c, u)| (*c, *u));
    let (scripts, in_scripts) = of("evalsha");
    let others = per_task.iter().filter(|(name, ..)| name != "evalsha");
    let (commands, commands_us) = others.fold((0.0, 0.0), |(c, u), (_, calls, us)| (c + calls, u + us));
    let top: Vec<String> = per_task.iter().take(30).map(|(name, c, u)| format!("{name} {c:.2} ({u:.1} µs)")).collect();
    println!(
        "\nRedis per task: {scripts:.2} scripts (EVALSHA: {in_scripts:.1} µs, their commands included) and \
         {commands:.1} commands (inside scripts or sent alone), of {:.1} µs Redis CPU (the rest: network, event loop)",
        task[2]
    );
    // Commands sent alone (XREAD, PING…) are a few hundredths of a call a task, so nearly all of
    // the commands' time is inside EVALSHA's: the difference is the scripts' own cost.
    println!(
        "  the commands' own time {commands_us:.1} µs; the scripts' own {:.1} µs (Lua: arguments, logic, and \
         the glue of each redis.call)",
        (in_scripts - commands_us).max(0.0)
    );
    println!("  calls per task by command (µs per task): {}", top.join(", "));

    let per_core = |us: f64| if us > 0.0 { 1e6 / us } else { f64::INFINITY };
    println!(
        "\nceilings at these costs: one presa-api core {:.0} tasks/s ({:.0} sync calls/s), one presa-worker core \
         {:.0} tasks/s, Redis {:.0} tasks/s per shard (each a single-threaded server; {} here, sharing \
         {:.1} µs of Redis CPU a task)",
        per_core(task[0]),
        per_core(sync[0]),
        per_core(task[1]),
        per_core(task[2]),
        t1.redis.len(),
        task[2]
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
/// (its entry goes with the write that ends it). `partitions[p]` reaches
/// partition p's primary.
async fn drained(
    partitions: &[redis::aio::MultiplexedConnection],
    keys: &Keys,
    within: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + within;
    loop {
        let mut queued = 0u64;
        for (p, con) in (0..keys.partitions()).zip(partitions) {
            let len: u64 = redis::cmd("XLEN")
                .arg(keys.work(p))
                .query_async(&mut con.clone())
                .await
                .map_err(|e| format!("Redis: {e}"))?;
            queued += len;
        }
        if queued == 0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("{queued} work entries still queued after {within:?}"));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `INFO commandstats`: command → (calls, µs).
pub(crate) async fn commandstats(con: &mut redis::aio::MultiplexedConnection) -> BTreeMap<String, (f64, f64)> {
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
pub(crate) fn command_deltas(
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
