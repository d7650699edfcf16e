//! `presa-bench chaos`: tasks through nginx while pods and Redis are SIGKILLed,
//! and what it cost.
//!
//! Run: `cargo build --release -p presa-api -p presa-worker -p presa-bench &&
//! target/release/presa-bench chaos [--tasks 10000 --worker-kills 10 --api-kills 3 --redis-restarts 1]`,
//! or on Redis with replicas: `… chaos --topology sentinel|cluster [--primary-kills 1] [--durability replicated]`.
//!
//! The program starts, all on loopback, Redis as `--topology` says:
//! `standalone` (the default), a `redis-server` with AOF (`appendonly yes`,
//! `appendfsync everysec`) in a temporary directory; `sentinel`, a primary, 2
//! replicas and 3 Sentinels (`presa_testkit::redis_sentinel`: down after 1 s,
//! failover timeout 5 s), the pods given `--redis-sentinels`; `cluster`, a
//! Redis Cluster of 3 primaries with a replica each
//! (`presa_testkit::redis_cluster`: node timeout 1 s), the pods given
//! `--redis-cluster` and every node as seed. Then
//! `--apis` `presa-api` pods behind nginx (round robin, the template of
//! `deploy/nginx/presa.conf.template`) and `--workers` `presa-worker` pods (the
//! binaries next to this one, or `--bin-dir`). `--concurrency` client loops
//! each create a `slow_compute` task through nginx (work of `--min-ms` to
//! `--max-ms`, spread evenly), poll it every `--poll-ms` until it is terminal,
//! then create the next. Meanwhile the kills are spread over the run (by tasks
//! acknowledged) and done one at a time: a worker (round robin) is SIGKILLed
//! and, `--restart-ms` later, replaced by a fresh one (a new consumer name, as
//! a Deployment's new pod); an API pod is SIGKILLed and restarted on its port
//! `--restart-ms` later; Redis is SIGKILLed and restarted from its AOF
//! `--redis-down-ms` later (standalone only); a Redis primary is SIGKILLed
//! (`--primary-kills`, with replicas only: the primary the Sentinels name
//! now, or in a cluster the primary serving `{p00}`'s slot), its replica is
//! promoted, and `--restart-ms` after the promotion the killed node is
//! restarted, empty, as a replica (a Sentinel data node with `--replicaof`
//! the new primary; a cluster node from its `nodes.conf`, which the cluster
//! turns into the new primary's replica), so each shard has a replica again
//! for the next kill and for `--durability replicated`. With
//! `--replication-gap-ms`, the primary is first cut off from its replicas
//! for that long (a password they lack, their links dropped), so the
//! failover certainly loses what it acknowledged meanwhile unless the pods
//! asked for `--durability replicated`. `--durability
//! replicated` gives every pod `PRESA_DURABILITY=replicated` with 1 replica
//! (creates and terminal writes acknowledged after `WAIT 1`); the pods must
//! know the flag. A failed create (no answer, a proxy's 502, a
//! retryable 503) is not acknowledged and is retried with the same
//! idempotency key (`_meta["presa/idempotencyKey"]`), so a create that landed
//! before its answer was lost is returned, not made twice: the report counts
//! tasks stored that no client acknowledged ("ambiguous creates"), which must be 0.
//!
//! When every task is terminal, every acknowledged task is read once more
//! through nginx (its final state) and its Redis task hash gives the handler
//! executions: the claim `attempt` counter, bumped by every claim (a handler
//! runs right after its claim; a worker killed between the two would count
//! once too many, an upper bound). Figures printed:
//! - tasks acknowledged; kills by kind; tasks completed / failed / lost (the
//!   final read says "unknown taskId") / stuck (not terminal `--task-deadline-s`
//!   after the ack); losses of tasks acknowledged less than 1 s before a Redis
//!   kill are counted apart: the AOF `everysec` promise allows them; with
//!   replicas, losses of tasks acknowledged before a primary kill on the
//!   partitions it held (lost to the failover) are counted apart too;
//! - duplicated creates: two stored tasks of one label (one logical create
//!   made twice, which idempotency keys prevent);
//! - handler executions per task (how many ran twice or more: the
//!   at-least-once cost);
//! - recovery after each kill, p50 / p99 / max per kind: **to next ack** (kill →
//!   the first acknowledged create sent after it: how long clients see
//!   failures), **to next completion** (kill → the first task seen terminal
//!   by a `tasks/get` sent after it), and for
//!   worker kills **in-flight done** (kill → the last of the tasks the killed
//!   worker held, its pending stream entries at the kill, seen terminal: lease
//!   plus a re-run). Completions are seen by polling, so times carry up to
//!   `--poll-ms` of polling delay; for each primary kill, also kill → promoted,
//!   kill → back as a replica, and next ack / next completion counted on the
//!   tasks of the partitions it held only (a cluster's other shards go on);
//! - requests that failed and were retried.
//!
//! Exit status: 1 on any lost task (outside the AOF window), stuck task,
//! failed task (`slow_compute` never fails by itself), ambiguous or
//! duplicated create or completed task whose result is not its own
//! (`Completed c<n>`), or when the setup fails; 0 otherwise. With replicas
//! and `--durability primary`, lost tasks are a measured figure, not a
//! failure (a failover may lose writes not yet replicated); with
//! `--durability replicated` any loss fails the run.
//!
//! Its parts: [`args`] (flags, kill schedule), [`rig`] (pods and Redis),
//! [`nginx`], [`load`] (client loops), [`faults`] (the kills), [`mod@report`].

mod args;
mod faults;
mod load;
mod nginx;
mod report;
mod rig;
#[cfg(test)]
mod tests;

use args::*;
use faults::*;
use load::*;
use nginx::*;
use report::*;
use rig::*;

use std::{
    collections::{BTreeMap, HashMap},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use presa_store::TaskId;
use presa_store_redis::{
    keys::{GROUP, Keys},
    record::{FIELDS, Record},
};
use presa_testkit::{
    Client, Pod, TestRedis, free_port,
    redis::unique_prefix,
    redis_cluster::TestCluster,
    redis_sentinel::{MASTER as SENTINEL_MASTER, TestSentinel},
    tasks_caps,
};
use serde_json::{Value, json};

pub(crate) use args::ChaosArgs;
pub(crate) use load::{reason, shorten, spread};
pub(crate) use rig::{Redis, Rig, Shape};

/// The pods' work partitions (presa's default).
pub(crate) const PARTITIONS: u16 = 16;
/// The final status of a completed task whose result is not its own.
const WRONG: &str = "wrong result";

/// What the kill was aimed at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Worker,
    Api,
    Redis,
    Primary,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Worker => "worker",
            Kind::Api => "api",
            Kind::Redis => "redis",
            Kind::Primary => "primary",
        }
    }
}

/// One kill done.
#[derive(Debug)]
struct Kill {
    kind: Kind,
    at: Instant,
    /// Which pod (or `redis`, or the primary's address).
    target: String,
    /// Worker kills: the ids of the tasks it held (pending entries at the kill).
    in_flight: Vec<String>,
    /// When its replacement answered (`/readyz` 200, Redis PING; for a
    /// primary kill: when the promoted replica served as the primary).
    back_at: Instant,
    /// Primary kills: the partitions whose keys the killed primary held.
    partitions: Vec<u16>,
    /// Primary kills: when the killed node was back as an in-sync replica.
    rejoined_at: Option<Instant>,
}

impl Kill {
    /// A kill of `target` at `at` whose replacement answers now, holding no
    /// tasks and no partitions (a worker's, an API pod's, a standalone Redis's).
    fn replaced(kind: Kind, at: Instant, target: String, in_flight: Vec<String>) -> Kill {
        Kill { kind, at, target, in_flight, back_at: Instant::now(), partitions: Vec::new(), rejoined_at: None }
    }
}

/// One acknowledged task, as the client saw it.
#[derive(Debug, Clone)]
struct Seen {
    id: String,
    label: String,
    acked_at: Instant,
    /// When the create that was acknowledged was sent.
    create_sent: Instant,
    /// When the `tasks/get` that first saw it terminal was sent.
    done_sent: Option<Instant>,
    /// First time it was seen terminal.
    done_at: Option<Instant>,
    /// Last status seen (`unknown` for "Unknown or inaccessible taskId").
    status: String,
}

/// Counters shared by the client loops.
#[derive(Debug, Default)]
struct Counters {
    creates_failed: Mutex<BTreeMap<String, u64>>,
    gets_failed: Mutex<BTreeMap<String, u64>>,
    creates_sent: AtomicU64,
    gets_sent: AtomicU64,
}

impl Counters {
    fn failed(map: &Mutex<BTreeMap<String, u64>>, why: String) {
        *map.lock().expect("counters").entry(why).or_default() += 1;
    }
}

/// State shared by the client loops and the killer.
struct Shared {
    args: ChaosArgs,
    lb: Client,
    next: AtomicUsize,
    acked: AtomicUsize,
    seen: Mutex<Vec<Seen>>,
    counters: Counters,
    /// Set once the client loops are done (the killer stops waiting for acks).
    done: AtomicBool,
    /// When the load started.
    start: Instant,
}

/// A flag value as it is spelled on the command line.
fn name_of(v: impl clap::ValueEnum) -> String {
    v.to_possible_value().map(|p| p.get_name().to_string()).unwrap_or_default()
}

/// The hash tag of partition `p`'s keys (`{pNN}`).
fn tag(p: u16) -> String {
    format!("{{p{p:02}}}")
}

/// A connection to the Redis node on `port`.
pub(crate) async fn node(port: u16) -> Result<redis::aio::MultiplexedConnection, String> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).map_err(|e| e.to_string())?;
    client.get_multiplexed_async_connection().await.map_err(|e| format!("Redis 127.0.0.1:{port}: {e}"))
}

/// Run the chaos program; the process exit code.
pub(crate) async fn run(args: ChaosArgs) -> i32 {
    crate::procs::exit_code("chaos", chaos(args).await)
}

async fn chaos(args: ChaosArgs) -> Result<bool, String> {
    let (bin, profile) = crate::procs::pod_binaries(args.bin_dir.as_deref())?;
    args.check()?;
    if args.durability == Durability::Replicated {
        // Pods built before `--durability` existed would ignore PRESA_DURABILITY.
        let help = Command::new(bin.join("presa-api")).arg("--help").output().map_err(|e| e.to_string())?;
        if !String::from_utf8_lossy(&help.stdout).contains("--durability") {
            return Err(format!("{} has no --durability flag: rebuild it", bin.join("presa-api").display()));
        }
    }
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    println!("presa-bench chaos: {cores} cores, load average {} (1/5/15 min), pods {profile}", crate::load_average());
    println!(
        "{} tasks (slow_compute {}-{} ms), {} client loops polling every {} ms; {} API pods behind nginx, {} workers \
         (lease {} ms, {} handlers each); Redis {}, durability {}; kills: {} worker, {} API, {} Redis (AOF \
         everysec), {} primary; replacements after {} ms, Redis down {} ms",
        args.tasks,
        args.min_ms,
        args.max_ms,
        args.concurrency,
        args.poll_ms,
        args.apis,
        args.workers,
        args.lease_ms,
        args.worker_concurrency,
        name_of(args.topology),
        name_of(args.durability),
        args.worker_kills,
        args.api_kills,
        args.redis_restarts(),
        args.primary_kills(),
        args.restart_ms,
        args.redis_down_ms,
    );

    let nginx_bin = nginx_binary(&args)?;
    let started = Instant::now();
    let redis = tokio::task::block_in_place(|| Redis::start(args.topology));
    let mut rig = Rig::start(redis, &args.shape(), bin).await;
    let nginx = start_nginx(&nginx_bin, &rig).await?;
    println!("up in {:.1} s: nginx {}, {}", started.elapsed().as_secs_f64(), nginx.url, rig.redis.describe());

    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().map_err(|e| e.to_string())?;
    let lb = Client { http, ..Client::new(nginx.url.clone(), tasks_caps()) };
    let shared = Arc::new(Shared {
        args: args.clone(),
        lb,
        next: AtomicUsize::new(0),
        acked: AtomicUsize::new(0),
        seen: Mutex::new(Vec::with_capacity(args.tasks)),
        counters: Counters::default(),
        done: AtomicBool::new(false),
        start: Instant::now(),
    });
    let load_start = shared.start;
    let mut loops = tokio::task::JoinSet::new();
    for _ in 0..args.concurrency {
        loops.spawn(client_loop(shared.clone()));
    }
    let killer = {
        let shared = shared.clone();
        tokio::spawn(async move {
            let kills = kill_all(&shared, &mut rig).await;
            (rig, kills)
        })
    };
    let mut failed = None;
    while let Some(r) = loops.join_next().await {
        failed = failed.or(r.err());
    }
    shared.done.store(true, Ordering::Relaxed);
    if let Some(e) = failed {
        // Dropping the killer's future drops the rig: no pod outlives the program.
        killer.abort();
        let _ = killer.await;
        return Err(format!("a client loop failed: {e}"));
    }
    let load_time = load_start.elapsed();
    let (rig, kills) = killer.await.map_err(|e| format!("the killer failed: {e}"))?;

    // The final state of every acknowledged task, and its handler executions.
    let mut seen = shared.seen.lock().expect("seen").clone();
    final_pass(&shared, &mut seen).await;
    let attempts = attempts(&rig, &seen).await?;
    let stored = rig.stored_labels().await.map_err(|e| format!("counting stored tasks: {e}"))?;
    let clean = report(&shared, &seen, &kills, &attempts, load_time, &stored);
    println!(
        "\nend: load average {} (1/5/15 min), {:.1} s in all",
        crate::load_average(),
        started.elapsed().as_secs_f64()
    );
    drop(nginx);
    drop(rig);
    Ok(clean)
}
