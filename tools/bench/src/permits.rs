//! What a tool's concurrency permit costs Redis per task (`presa-bench
//! retries` prints it after the rate check): [`PERMIT_RUNS`] runs each
//! taking a permit that is free (`acquire_permit.lua`) and giving it back
//! (`release_permit.lua`), through the Redis store, as a task's run of a
//! concurrency-limited tool does; Redis's CPU and commands per run. A run
//! longer than a third of its lease adds one `renew_permit.lua` per third.

use presa_store::{Holder, PermitName, PermitTerms, Permits};

use crate::chaos::Redis;

/// Runs (acquire + release) of one measurement.
const PERMIT_RUNS: usize = 10_000;

/// Measure [`PERMIT_RUNS`] acquire-and-release pairs on `rig`'s standalone Redis.
pub(crate) async fn permit_cost(
    con: &redis::aio::MultiplexedConnection,
    redis: &Redis,
    prefix: &str,
) -> Result<(), String> {
    let Redis::Standalone(redis) = redis else {
        return Err("the permit cost is measured on a standalone Redis".into());
    };
    let url = redis.url().to_string();
    let config = presa_store_redis::RedisConfig::new(url.clone()).with_prefix(format!("{prefix}-permits"));
    let store = presa_store_redis::RedisStore::connect(config).await.map_err(|e| format!("{url}: {e}"))?;
    let name = PermitName { limit: "bench-tool".into(), key: String::new() };
    let lease = std::time::Duration::from_secs(30);
    let terms = PermitTerms { permits: 2, lease, waiter_ttl: lease * 3 };
    let mut con = con.clone();
    let (cpu0, stats0) = (crate::cost::redis_cpu_secs(&mut con).await, crate::tiers::commandstats(&mut con).await);
    for i in 0..PERMIT_RUNS {
        let holder = Holder { id: format!("p00.bench-{i:016}"), fence: 1, order: i as u64 };
        store.acquire_permit(&name, &holder, terms).await.map_err(|e| e.to_string())?;
        store.release_permit(&name, &holder, terms).await.map_err(|e| e.to_string())?;
    }
    let (cpu1, stats1) = (crate::cost::redis_cpu_secs(&mut con).await, crate::tiers::commandstats(&mut con).await);
    let per_run = crate::tiers::command_deltas(&stats0, &stats1, PERMIT_RUNS);
    let listed: Vec<String> = per_run.iter().map(|(name, c, us)| format!("{name} {c:.2} ({us:.1} µs)")).collect();
    let commands: f64 = per_run.iter().map(|(_, c, _)| c).sum();
    println!(
        "a tool's concurrency permit: {:.1} µs of Redis CPU a task (acquire + release, {PERMIT_RUNS} tasks, two \
         scripts each), {commands:.1} commands; per task: {}",
        (cpu1 - cpu0) * 1e6 / PERMIT_RUNS as f64,
        listed.join(", ")
    );
    Ok(())
}
