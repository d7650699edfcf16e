//! `presa-bench retries`: how punctual the delayed queue is. It starts a
//! private `redis-server`, one shipped `presa-api` pod and `--workers`
//! `presa-worker` pods (the demo catalog), then creates `--tasks` tasks of
//! `flaky_job` whose first try fails asking to be tried again after
//! `--delay-ms` (`ToolError::retry_after`), so they all wait in the delayed
//! sets at once (the peak is sampled and printed), and waits until every one
//! has completed. Each task's record then says when its next try was due
//! (its first failed try's time plus the delay) and when the task ended
//! (its second try runs at once, in about a millisecond): the difference is
//! how late the due entry started, printed as p50 / p90 / p99 / max. Last,
//! what one check of a tool's rate (`Tool::rate`, `rate.lua`) costs Redis, and
//! what a concurrency permit (`Tool::concurrency`: acquire and release) costs a task (`permits.rs`).

use std::{path::PathBuf, sync::Arc, time::Duration};

use futures::future::join_all;
use presa_store::TaskId;
use presa_store_redis::keys::Keys;
use presa_testkit::{Client, TestRedis, task_id, tasks_caps};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::chaos::{PARTITIONS, Redis, Rig, Shape};

/// `presa-bench retries` flags.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct RetriesArgs {
    /// Tasks that wait at once.
    #[arg(long, default_value_t = 1000)]
    tasks: usize,
    /// How long each waits after its failed first try, ms (longer than creating them all takes).
    #[arg(long, default_value_t = 5000)]
    delay_ms: u64,
    /// Worker pods.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Concurrent connections creating the tasks.
    #[arg(long, default_value_t = 16)]
    connections: usize,
    /// Where `presa-api` and `presa-worker` are (default: next to this program).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
}

/// Run it; the process's exit code.
pub(crate) async fn run(args: RetriesArgs) -> i32 {
    crate::procs::exit_code("retries", retries(args).await.map(|()| true))
}

async fn retries(args: RetriesArgs) -> Result<(), String> {
    let (bin, profile) = crate::procs::pod_binaries(args.bin_dir.as_deref())?;
    let (n, c) = (args.tasks.max(1), args.connections.max(1));
    println!(
        "presa-bench retries: pods {profile}, 1 presa-api pod, {} presa-worker pods, a private redis-server; \
         {n} flaky_job tasks each put off {} ms after its first try, created on {c} connections; load average {}",
        args.workers,
        args.delay_ms,
        crate::cost::load_average()
    );
    let shape =
        Shape { apis: 1, workers: args.workers, env: Vec::new(), api_flags: Vec::new(), worker_flags: Vec::new() };
    let redis = tokio::task::block_in_place(|| Redis::Standalone(Box::new(TestRedis::spawn())));
    let rig = Rig::start(redis, &shape, bin).await;
    let partitions = rig.partition_connections().await?;
    let keys = Keys::new(rig.prefix.clone(), PARTITIONS);
    let url = rig.apis[0].1.url.clone();

    let started = Instant::now();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let creators = (0..c).map(|_| {
        let (client, next) = (Client::new(&url, tasks_caps()), next.clone());
        async move {
            let mut ids = Vec::new();
            while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < n {
                let args = json!({ "failures": 1, "retryAfterMs": args.delay_ms });
                ids.push(task_id(&client.call_tool("flaky_job", args).await));
            }
            ids
        }
    });
    let ids: Vec<String> = join_all(creators).await.into_iter().flatten().collect();
    let created = started.elapsed();
    println!("created {} tasks in {:.2} s", ids.len(), created.as_secs_f64());

    // Sample how many wait at once until every work entry is gone.
    let deadline = Instant::now() + Duration::from_millis(args.delay_ms) + Duration::from_secs(120);
    let mut peak = 0;
    loop {
        let (mut waiting, mut queued) = (0u64, 0u64);
        for (p, con) in (0..keys.partitions()).zip(&partitions) {
            let mut con = con.clone();
            let zcard: u64 = redis::cmd("ZCARD").arg(keys.delayed(p)).query_async(&mut con).await.map_err(err)?;
            let xlen: u64 = redis::cmd("XLEN").arg(keys.work(p)).query_async(&mut con).await.map_err(err)?;
            (waiting, queued) = (waiting + zcard, queued + xlen);
        }
        peak = peak.max(waiting);
        if waiting == 0 && queued == 0 {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("{waiting} tasks still waiting and {queued} queued at the deadline"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "at most {peak} tasks waited in the delayed sets at once; all done {:.2} s after the first create",
        started.elapsed().as_secs_f64()
    );

    let mut late = Vec::with_capacity(ids.len());
    let mut not_completed = 0;
    for id in &ids {
        let id = TaskId::from_wire(id.as_str());
        let (Some(key), Some(p)) = (keys.task(&id), id.partition()) else {
            return Err(format!("{id}: not a presa task id"));
        };
        let mut con = partitions[usize::from(p)].clone();
        let doc: String = redis::cmd("HGET").arg(key).arg("doc").query_async(&mut con).await.map_err(err)?;
        let task: Value = serde_json::from_str(&doc).map_err(|e| format!("{id}: {e}"))?;
        if task["status"] != "completed" {
            not_completed += 1;
            continue;
        }
        let first = &task["retries"]["log"][0];
        let due = first["at_ms"].as_u64().unwrap_or(0) + first["delay_ms"].as_u64().unwrap_or(0);
        let ended = task["updated_at_ms"].as_u64().unwrap_or(0);
        late.push(Duration::from_millis(ended.saturating_sub(due)));
    }
    if not_completed > 0 {
        return Err(format!("{not_completed} tasks did not complete"));
    }
    let count = late.len();
    let [p50, p90, p99, max] = [50.0, 90.0, 99.0, 100.0].map(|p| crate::load::pct(&mut late, p).as_millis());
    println!(
        "how late a due try started (its task's end − its due time, {count} tasks): p50 {p50} ms, p90 {p90} ms, \
         p99 {p99} ms, max {max} ms"
    );
    rate_check_cost(&partitions[0], &rig).await?;
    crate::permits::permit_cost(&partitions[0], &rig.redis, &rig.prefix).await?;
    println!("end: load average {}", crate::cost::load_average());
    Ok(())
}

/// Takes of one rate per run of [`rate_check_cost`].
const RATE_TAKES: usize = 10_000;

/// What a tool's rate check costs Redis: [`RATE_TAKES`] takes (a rate that
/// admits them all, as a task's check that passes) from this process
/// through the Redis store, Redis's CPU and commands per take.
async fn rate_check_cost(con: &redis::aio::MultiplexedConnection, rig: &Rig) -> Result<(), String> {
    use presa_store::{Rate, Rates, Take};
    let Redis::Standalone(redis) = &rig.redis else {
        return Err("the rate check is measured on a standalone Redis".into());
    };
    let url = redis.url().to_string();
    let config = presa_store_redis::RedisConfig::new(url.clone()).with_prefix(format!("{}-rates", rig.prefix));
    let store = presa_store_redis::RedisStore::connect(config).await.map_err(|e| format!("{url}: {e}"))?;
    let rate = Rate::per_second(1e6, 1_000_000);
    let mut con = con.clone();
    let (cpu0, stats0) = (crate::cost::redis_cpu_secs(&mut con).await, crate::tiers::commandstats(&mut con).await);
    for _ in 0..RATE_TAKES {
        store.take_rate("bench-tool", rate, Take::Reserve).await.map_err(|e| e.to_string())?;
    }
    let (cpu1, stats1) = (crate::cost::redis_cpu_secs(&mut con).await, crate::tiers::commandstats(&mut con).await);
    let per_take = crate::tiers::command_deltas(&stats0, &stats1, RATE_TAKES);
    let listed: Vec<String> = per_take.iter().map(|(name, c, us)| format!("{name} {c:.2} ({us:.1} µs)")).collect();
    println!(
        "a tool's rate check: {:.1} µs of Redis CPU a take ({RATE_TAKES} takes, one script each); per take: {}",
        (cpu1 - cpu0) * 1e6 / RATE_TAKES as f64,
        listed.join(", ")
    );
    Ok(())
}

fn err(e: redis::RedisError) -> String {
    format!("Redis: {e}")
}
