//! `presa-bench recovery`: what taking over stranded work costs, and
//! whether it grows with the backlog. It starts a private `redis-server` and
//! one shipped `presa-api` pod, creates `--tasks` tasks of `flaky_job` (one
//! try that succeeds at once) with no worker running, and strands them all:
//! a consumer that then vanishes reads every entry (`XREADGROUP`), and each
//! entry's idle time is set past any `max_lease` (`XCLAIM … IDLE`), as a
//! worker SIGKILLed more than a lease ago leaves its work (its tasks' fences
//! were not bumped: that changes nothing recovery does). Then `--workers`
//! `presa-worker` pods start and must find, claim and complete every task
//! through `recover.lua` alone (nothing is new to read).
//!
//! Printed: the time until all completed, what Redis spent in `XAUTOCLAIM`
//! (calls, µs a call, µs per recovered entry, over the first and the second
//! half of the backlog, from `INFO commandstats`) and its CPU per task, the
//! slowest commands (`SLOWLOG`, over 5 ms), the worst round trip of a `PING`
//! sent every 5 ms on a connection of its own (a Redis stall), and the worst
//! answer of each pod's `/healthz` polled every 10 ms (a pod stall). Nothing
//! is asserted but that every task completed.

use std::{
    collections::BTreeMap,
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::Duration,
};

use futures::future::join_all;
use presa_store_redis::keys::{GROUP, Keys};
use presa_testkit::{Client, TestRedis, task_id, tasks_caps};
use serde_json::json;
use tokio::time::Instant;

use crate::chaos::{PARTITIONS, Redis, Rig, Shape};

/// `presa-bench recovery` flags.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct RecoveryArgs {
    /// Tasks stranded, then recovered.
    #[arg(long, default_value_t = 10_000)]
    tasks: usize,
    /// Worker pods that recover them.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Concurrent connections creating the tasks.
    #[arg(long, default_value_t = 32)]
    connections: usize,
    /// Give up (and print how far recovery got) after this many seconds.
    #[arg(long, default_value_t = 1800)]
    timeout_secs: u64,
    /// Where `presa-api` and `presa-worker` are (default: next to this program).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
}

/// Run it; the process's exit code.
pub(crate) async fn run(args: RecoveryArgs) -> i32 {
    crate::procs::exit_code("recovery", recovery(args).await)
}

/// Idle time given to the stranded entries: past any `max_lease` (1 hour).
const STRANDED_IDLE_MS: u64 = 3_600_000;
/// Commands slower than this (µs) are logged by Redis and reported.
const SLOW_US: u64 = 5_000;

async fn recovery(args: RecoveryArgs) -> Result<bool, String> {
    let (bin, profile) = crate::procs::pod_binaries(args.bin_dir.as_deref())?;
    let (n, c, w) = (args.tasks.max(1), args.connections.max(1), args.workers.max(1));
    println!(
        "presa-bench recovery: pods {profile}, 1 presa-api pod, then {w} presa-worker pods, a private redis-server; \
         {n} flaky_job tasks stranded by a vanished consumer; load average {}",
        crate::cost::load_average()
    );
    // One principal creates them all: its per-scope limits (and the queue bound) off.
    let env = ["PRESA_MAX_ACTIVE_TASKS_PER_SCOPE", "PRESA_MAX_BYTES_PER_SCOPE", "PRESA_MAX_QUEUED"]
        .map(|k| (k.to_string(), "0".to_string()))
        .to_vec();
    let shape = Shape { apis: 1, workers: 0, env, api_flags: Vec::new(), worker_flags: Vec::new() };
    let redis = tokio::task::block_in_place(|| Redis::Standalone(Box::new(TestRedis::spawn())));
    let port = tokio::task::block_in_place(|| rig_port(&redis))?;
    let mut rig = Rig::start(redis, &shape, bin).await;
    let keys = Keys::new(rig.prefix.clone(), PARTITIONS);
    let mut con = crate::chaos::node(port).await?;

    // Create them, with no worker to run them.
    let started = Instant::now();
    let url = rig.apis[0].1.url.clone();
    let next = Arc::new(AtomicUsize::new(0));
    let creators = (0..c).map(|_| {
        let (client, next) = (Client::new(&url, tasks_caps()), next.clone());
        async move {
            let mut ids = Vec::new();
            while next.fetch_add(1, Ordering::Relaxed) < n {
                ids.push(task_id(&client.call_tool("flaky_job", json!({})).await));
            }
            ids
        }
    });
    let ids: Vec<String> = join_all(creators).await.into_iter().flatten().collect();
    println!("created {} tasks in {:.1} s", ids.len(), started.elapsed().as_secs_f64());

    // Strand them: read by a consumer that never claims, their leases long lapsed.
    let mut stranded = 0;
    for stream in keys.all_work() {
        let reply: redis::streams::StreamReadReply = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg(GROUP)
            .arg("vanished")
            .arg("COUNT")
            .arg(n)
            .arg("STREAMS")
            .arg(&stream)
            .arg(">")
            .query_async(&mut con)
            .await
            .map_err(err)?;
        let entries: Vec<String> = reply.keys.into_iter().flat_map(|k| k.ids).map(|e| e.id).collect();
        for chunk in entries.chunks(1000) {
            let mut cmd = redis::cmd("XCLAIM");
            cmd.arg(&stream).arg(GROUP).arg("vanished").arg(0).arg(chunk);
            cmd.arg("IDLE").arg(STRANDED_IDLE_MS).arg("JUSTID");
            let _: redis::Value = cmd.query_async(&mut con).await.map_err(err)?;
        }
        stranded += entries.len();
    }
    if stranded != n {
        return Err(format!("{stranded} entries stranded, not {n}"));
    }

    // Watch Redis and the pods while the workers take over.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-log-slower-than")
        .arg(SLOW_US)
        .query_async(&mut con)
        .await
        .map_err(err)?;
    let _: () =
        redis::cmd("CONFIG").arg("SET").arg("slowlog-max-len").arg(1024).query_async(&mut con).await.map_err(err)?;
    let _: () = redis::cmd("SLOWLOG").arg("RESET").query_async(&mut con).await.map_err(err)?;
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query_async(&mut con).await.map_err(err)?;
    let stop = Arc::new(AtomicBool::new(false));
    let pinger = tokio::spawn(worst_ping(crate::chaos::node(port).await?, stop.clone()));
    let mut probes = vec![("api0".to_string(), tokio::spawn(worst_health(rig.apis[0].1.base(), stop.clone())))];
    let (cpu0, stats0) = (crate::cost::redis_cpu_secs(&mut con).await, crate::tiers::commandstats(&mut con).await);
    let recovering = Instant::now();
    for i in 0..w {
        let id = format!("worker{i}");
        let pod = rig.worker(&id).await;
        probes.push((id.clone(), tokio::spawn(worst_health(pod.base(), stop.clone()))));
        rig.workers.push((id, pod));
    }

    let deadline = recovering + Duration::from_secs(args.timeout_secs);
    let mut half = None;
    let left = loop {
        let left = queued(&mut con, &keys).await?;
        if half.is_none() && left <= n as u64 / 2 {
            half = Some((crate::tiers::commandstats(&mut con).await, n as u64 - left));
        }
        if left == 0 || Instant::now() > deadline {
            break left;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let took = recovering.elapsed();
    let (cpu1, stats1) = (crate::cost::redis_cpu_secs(&mut con).await, crate::tiers::commandstats(&mut con).await);
    stop.store(true, Ordering::Relaxed);
    let ping = pinger.await.map_err(|e| e.to_string())?;
    let mut pods = Vec::new();
    for (name, probe) in probes {
        pods.push((name, probe.await.map_err(|e| e.to_string())?));
    }
    let done = n as u64 - left;
    if left > 0 {
        println!("TIMED OUT after {:.1} s: {done} of {n} recovered and completed", took.as_secs_f64());
    }

    let autoclaim = |from: &BTreeMap<String, (f64, f64)>, to: &BTreeMap<String, (f64, f64)>| {
        let (c0, u0) = from.get("xautoclaim").copied().unwrap_or_default();
        let (c1, u1) = to.get("xautoclaim").copied().unwrap_or_default();
        (c1 - c0, u1 - u0)
    };
    let (calls, us) = autoclaim(&stats0, &stats1);
    let per_entry = |us: f64, entries: u64| if entries == 0 { 0.0 } else { us / entries as f64 };
    let halves = match &half {
        Some((mid, at)) => {
            let (_, us1) = autoclaim(&stats0, mid);
            let (_, us2) = autoclaim(mid, &stats1);
            format!("{:.2} / {:.2}", per_entry(us1, *at), per_entry(us2, done - at))
        }
        None => "-".into(),
    };
    let (evals, eval_us) = {
        let (c0, u0) = stats0.get("evalsha").copied().unwrap_or_default();
        let (c1, u1) = stats1.get("evalsha").copied().unwrap_or_default();
        (c1 - c0, u1 - u0)
    };
    println!(
        "all {done} recovered and completed {:.1} s after the first worker started ({:.0} tasks/s)",
        took.as_secs_f64(),
        done as f64 / took.as_secs_f64()
    );
    println!(
        "XAUTOCLAIM: {calls:.0} calls ({:.1} entries a call), {:.1} µs a call, {:.2} µs per recovered entry \
         (first half / second half of the backlog: {halves})",
        if calls > 0.0 { done as f64 / calls } else { 0.0 },
        if calls > 0.0 { us / calls } else { 0.0 },
        per_entry(us, done)
    );
    println!(
        "Redis CPU {:.1} µs per completed task (all scripts: {evals:.0} EVALSHA, {:.1} µs each)",
        (cpu1 - cpu0) * 1e6 / done.max(1) as f64,
        if evals > 0.0 { eval_us / evals } else { 0.0 }
    );
    let slow: Vec<(u64, String)> = slowlog(&mut con).await;
    let worst = slow.iter().max_by_key(|(us, _)| *us);
    println!(
        "commands over {} ms: {}{}",
        SLOW_US / 1000,
        slow.len(),
        worst.map_or(String::new(), |(us, what)| format!(", the slowest {:.1} ms ({what})", *us as f64 / 1000.0))
    );
    let pods: Vec<String> = pods.iter().map(|(name, d)| format!("{name} {:.1} ms", ms(*d))).collect();
    println!(
        "worst PING round trip (every 5 ms): {:.1} ms; worst /healthz (every 10 ms): {}",
        ms(ping),
        pods.join(", ")
    );
    println!(
        "row: | {n} | {w} | {:.1} s | {calls:.0} | {:.2} | {halves} | {:.1} | {} | {} |",
        took.as_secs_f64(),
        per_entry(us, done),
        ms(ping),
        pods.join(", "),
        crate::cost::load_average()
    );
    println!("end: load average {}", crate::cost::load_average());
    Ok(left == 0)
}

/// The port of the standalone Redis.
fn rig_port(redis: &Redis) -> Result<u16, String> {
    redis.primaries()?.first().copied().ok_or_else(|| "no Redis".to_string())
}

/// Work entries still in the streams (a completed task's is deleted).
async fn queued(con: &mut redis::aio::MultiplexedConnection, keys: &Keys) -> Result<u64, String> {
    let mut pipe = redis::pipe();
    for stream in keys.all_work() {
        pipe.cmd("XLEN").arg(stream);
    }
    let lens: Vec<u64> = pipe.query_async(con).await.map_err(err)?;
    Ok(lens.iter().sum())
}

/// The worst round trip of a `PING` every 5 ms until `stop`.
async fn worst_ping(mut con: redis::aio::MultiplexedConnection, stop: Arc<AtomicBool>) -> Duration {
    let mut worst = Duration::ZERO;
    while !stop.load(Ordering::Relaxed) {
        let sent = Instant::now();
        let _: Result<String, _> = redis::cmd("PING").query_async(&mut con).await;
        worst = worst.max(sent.elapsed());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    worst
}

/// The worst answer of `<base>/healthz`, asked every 10 ms until `stop`.
async fn worst_health(base: String, stop: Arc<AtomicBool>) -> Duration {
    let http = reqwest::Client::new();
    let url = format!("{base}/healthz");
    let mut worst = Duration::ZERO;
    while !stop.load(Ordering::Relaxed) {
        let sent = Instant::now();
        let _ = http.get(&url).send().await.and_then(reqwest::Response::error_for_status);
        worst = worst.max(sent.elapsed());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    worst
}

/// Redis's slow log: each entry's µs and command name (a script's first key).
async fn slowlog(con: &mut redis::aio::MultiplexedConnection) -> Vec<(u64, String)> {
    let entries: Vec<redis::Value> =
        redis::cmd("SLOWLOG").arg("GET").arg(1024).query_async(con).await.unwrap_or_default();
    entries
        .into_iter()
        .filter_map(|e| {
            let redis::Value::Array(fields) = e else { return None };
            let us: u64 = redis::from_redis_value_ref(fields.get(2)?).ok()?;
            let args: Vec<String> = redis::from_redis_value_ref(fields.get(3)?).unwrap_or_default();
            let what = match args.first().map(String::as_str) {
                Some(cmd @ ("EVALSHA" | "evalsha")) => format!("{cmd} {}", args.get(3).map_or("", String::as_str)),
                _ => args.join(" ").chars().take(60).collect(),
            };
            Some((us, what))
        })
        .collect()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn err(e: redis::RedisError) -> String {
    format!("Redis: {e}")
}
