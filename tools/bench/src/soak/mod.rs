//! `presa-bench soak`: a steady, moderate load on a small cluster for minutes,
//! with memory sampled all along, to see whether anything grows that should
//! stay flat (keys without a TTL, stream entries never removed, RSS that
//! only climbs).
//!
//! Run: `cargo build --release -p presa-api -p presa-worker -p presa-bench &&
//! target/release/presa-bench soak [--minutes 5 --rate 20 --ttl-s 30 --sample-s 10]`
//! (`--seconds 90` instead of `--minutes` for a short run).
//!
//! Started on loopback with the chaos program's rig ([`Rig`]): a `redis-server`
//! without persistence, `--apis` `presa-api` pods whose `--task-ttl-ms` is
//! `--ttl-s` (so tasks expire within the run, and the key count reaches its
//! steady state after one TTL) and `--workers` `presa-worker` pods. No nginx
//! and nothing is killed: the client spreads requests over the API pods itself
//! (task n is created on pod n mod apis and read, answered and cancelled on the
//! next pod, so every flow crosses pods through Redis).
//!
//! The load: `--rate` task creates per second at fixed intervals, each followed
//! by its own client flow; of every ten tasks
//! - seven are quick: `slow_compute` of 50 to 300 ms, read with `tasks/get`
//!   every 200 ms until `completed`;
//! - one is cancelled: `slow_compute` of 60 s, `tasks/cancel` 1 s after the
//!   create, then read until `cancelled`;
//! - one parks and is answered: `confirm_delete`, read until `input_required`,
//!   answered with `tasks/update`, read until `completed`;
//! - one parks and is left to expire: `confirm_delete`, read until
//!   `input_required`, then left alone; `--ttl-s` + 5 s after its create it is
//!   read once more and must be gone (unknown task id): counted as expired.
//!
//! Meanwhile `--listeners` loops each open a `subscriptions/listen` stream on
//! the 10 most recent task ids (and `toolsListChanged`), read it for
//! `--listen-s`, drop it (the connection closes) and open the next, alternating
//! pods. Creates keep to their schedule whatever the flows do: the number of
//! tasks live at any time (about rate × TTL, what the key count follows) stays
//! the same. A create whose tick came late (a busy machine) is sent at once to
//! catch up; beyond `--rate` × 120 flows in flight a create is skipped and counted.
//!
//! Every `--sample-s` one row: elapsed time; tasks created, completed (quick
//! and answered), cancelled, parked (`input_required` seen), expired (seen
//! gone after their TTL); requests that failed; listen streams opened; the RSS
//! of each presa process (VmRSS of `/proc/<pid>/status`); Redis `used_memory`
//! (`INFO memory`), its key count (`DBSIZE`) and the entries of the partition
//! work streams (`XLEN`, summed: removed entries do not show in the key count).
//!
//! Verdict: the samples after the warm-up (`--warmup-s`, a third of the run by
//! default, at least one TTL + 10 s so the key count has reached its steady
//! state) are cut in two halves by time (by default the middle and the last
//! third of the run), and each series' mean over the later half is compared
//! with its mean over the earlier one. A series is flat when it grew by at most
//! its tolerance, the larger of a share of the earlier mean and a floor:
//! - RSS of each presa process: 5 % or 2 MiB. Allocator-backed RSS wobbles:
//!   jemalloc keeps freed pages for its 10 s decay and per-thread caches, and
//!   how many connections, parked handlers and listen streams are live at the
//!   sampling instant moves it by a MiB or so. A leak of 1 KiB per task at the
//!   default 20 tasks/s (2000 tasks between the two windows' centres of a
//!   5-minute run) already adds 2 MiB; longer runs see smaller leaks.
//! - Redis `used_memory`: 5 % or 0.5 MiB. It counts the bytes Redis
//!   allocated, not pages, so it has no allocator lag: it moves only with the
//!   tasks live at the instant (a fixed number at a fixed rate and TTL) and
//!   client buffers, by some 10 KiB between rows. 0.5 MiB is 250 bytes per
//!   task between the windows at the default rate.
//! - Redis keys and work-stream entries: 5 % or 20. At a fixed rate and TTL the
//!   live set is fixed (rate × TTL tasks); Redis removes expired keys in its
//!   background cycle, which lets a few percent linger. One key leaked per ten
//!   tasks adds 200 keys between the windows, several times the tolerance.
//!
//! The growth is also printed per minute (between the windows' centres).
//! Exit status 1 when a series grew past its tolerance, the run is too short to
//! have two samples in each window, the setup fails or the run is interrupted
//! (SIGINT, SIGTERM: the pods and Redis are stopped first); 0 otherwise. Failed
//! requests, stuck flows and parked tasks seen after their TTL are reported
//! but do not decide the exit status: the soak is about growth.
//!
//! Its parts: [`flows`] (the load: creates, task flows, listen streams) and
//! [`mod@verdict`] (samples, rows and whether each series stayed flat).

mod flows;
mod verdict;

use flows::*;
use verdict::*;

use std::{
    collections::{BTreeMap, VecDeque},
    path::PathBuf,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use futures::StreamExt;
use presa_store_redis::keys::Keys;
use presa_testkit::{Client, TestRedis, tasks_caps};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::chaos::{PARTITIONS, Redis, Rig, Shape, reason, shorten};

/// `presa-bench soak` flags.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct SoakArgs {
    /// How long the load runs, minutes.
    #[arg(long, default_value_t = 5.0)]
    minutes: f64,
    /// How long the load runs, seconds (instead of `--minutes`, for short runs).
    #[arg(long, conflicts_with = "minutes")]
    seconds: Option<f64>,
    /// Task creates per second.
    #[arg(long, default_value_t = 20.0)]
    rate: f64,
    /// The tasks' TTL (the API pods' `--task-ttl-ms`), s.
    #[arg(long, default_value_t = 30)]
    ttl_s: u64,
    /// Interval between two sample rows, s.
    #[arg(long, default_value_t = 10.0)]
    sample_s: f64,
    /// Samples before this are not judged, s (default: a third of the run, at least TTL + 10 s).
    #[arg(long)]
    warmup_s: Option<f64>,
    /// API pods (the client alternates between them).
    #[arg(long, default_value_t = 2)]
    apis: usize,
    /// Worker pods.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Listen streams open at once (each reopened after `--listen-s`).
    #[arg(long, default_value_t = 4)]
    listeners: usize,
    /// How long each listen stream stays open, s.
    #[arg(long, default_value_t = 3.0)]
    listen_s: f64,
    /// Where `presa-api` and `presa-worker` are (default: next to this program).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
}

/// How often a flow reads its task.
const POLL: Duration = Duration::from_millis(200);
/// A flow that has not seen the status it waits for this long after its create is stuck.
const FLOW_DEADLINE: Duration = Duration::from_secs(30);
/// A parked task left alone is read again this long after its TTL ends, and must be gone.
const EXPIRY_GRACE: Duration = Duration::from_secs(5);
/// How many recent task ids a listen stream watches.
const WATCHED: usize = 10;

/// Counters the flows and listeners share.
#[derive(Debug, Default)]
struct Counts {
    created: AtomicU64,
    completed: AtomicU64,
    cancelled: AtomicU64,
    parked: AtomicU64,
    expired: AtomicU64,
    /// Parked tasks still readable after their TTL (+5 s).
    not_expired: AtomicU64,
    /// Flows that never saw the status they waited for.
    stuck: AtomicU64,
    /// Creates not sent because too many flows were in flight.
    skipped: AtomicU64,
    listens: AtomicU64,
    /// Messages received on listen streams.
    notifications: AtomicU64,
    /// Failed requests by what and why.
    failed: Mutex<BTreeMap<String, u64>>,
}

impl Counts {
    fn fail(&self, what: &str, why: &str) {
        *self.failed.lock().expect("failures").entry(format!("{what}: {why}")).or_default() += 1;
    }

    fn failures(&self) -> u64 {
        self.failed.lock().expect("failures").values().sum()
    }
}

/// What the flows share.
struct Load {
    /// One client per API pod (requests time out after 10 s).
    pods: Vec<Client>,
    /// The same without a timeout, for listen streams.
    listen_pods: Vec<Client>,
    counts: Counts,
    /// The most recent task ids, for the listeners.
    recent: Mutex<VecDeque<String>>,
    ttl: Duration,
}

impl Load {
    /// The pod task `n` is created on, and the one it is read, answered and cancelled on.
    fn pods_of(&self, n: u64) -> (&Client, &Client) {
        let k = self.pods.len() as u64;
        let at = |i: u64| &self.pods[usize::try_from(i % k).unwrap_or(0)];
        (at(n), at(n + 1))
    }
}

/// One sample row.
#[derive(Debug, Clone)]
struct Sample {
    t: f64,
    /// RSS of each presa process, MiB (in [`Rig`] order: API pods, then workers).
    rss: Vec<f64>,
    redis_mib: f64,
    keys: u64,
    work_entries: u64,
}

/// Run the soak; the process exit code.
pub(crate) async fn run(args: SoakArgs) -> i32 {
    crate::procs::exit_code("soak", soak(args).await)
}

async fn soak(args: SoakArgs) -> Result<bool, String> {
    let (bin, profile) = crate::procs::pod_binaries(args.bin_dir.as_deref())?;
    let run_s = args.seconds.unwrap_or(args.minutes * 60.0);
    let positive = |x: f64| x > 0.0 && x.is_finite();
    if args.apis == 0 || args.workers == 0 || ![args.rate, run_s, args.sample_s].into_iter().all(positive) {
        return Err("need --apis and --workers of at least 1 and a positive --rate, run time and --sample-s".into());
    }
    let warmup_s = args.warmup_s.unwrap_or_else(|| (run_s / 3.0).max(args.ttl_s as f64 + 10.0));
    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    println!("presa-bench soak: {cores} cores, load average {} (1/5/15 min), pods {profile}", crate::load_average());
    println!(
        "{run_s:.0} s at {} tasks/s (7/10 quick, 1/10 cancelled, 1/10 answered, 1/10 left parked to expire), task TTL \
         {} s, {} listen streams reopened every {} s; {} API pods, {} workers, Redis without persistence; a row every \
         {} s, judged after {warmup_s:.0} s",
        args.rate, args.ttl_s, args.listeners, args.listen_s, args.apis, args.workers, args.sample_s,
    );
    if warmup_s < args.ttl_s as f64 + 10.0 {
        println!("warning: the warm-up is shorter than one TTL + 10 s: the key count is still filling up when judged");
    }

    let shape = Shape {
        apis: args.apis,
        workers: args.workers,
        env: Vec::new(),
        api_flags: vec!["--task-ttl-ms".into(), (args.ttl_s * 1000).to_string()],
        worker_flags: Vec::new(),
    };
    let started = Instant::now();
    // A standalone Redis without persistence (`TestRedis::spawn`): its memory is the dataset's alone.
    let redis = tokio::task::block_in_place(TestRedis::spawn);
    let url = redis.url().to_string();
    let rig = Rig::start(Redis::Standalone(Box::new(redis)), &shape, bin).await;
    println!("up in {:.1} s: redis {url}", started.elapsed().as_secs_f64());
    let redis = redis::Client::open(url).map_err(|e| e.to_string())?;
    let mut con = redis.get_multiplexed_async_connection().await.map_err(|e| format!("Redis: {e}"))?;
    let keys = Keys::new(rig.prefix.clone(), PARTITIONS);

    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().map_err(|e| e.to_string())?;
    let client = |url: &str, http: &reqwest::Client| Client { http: http.clone(), ..Client::new(url, tasks_caps()) };
    let plain = reqwest::Client::new();
    let load = Arc::new(Load {
        pods: rig.apis.iter().map(|(_, p)| client(&p.url, &http)).collect(),
        listen_pods: rig.apis.iter().map(|(_, p)| client(&p.url, &plain)).collect(),
        counts: Counts::default(),
        recent: Mutex::new(VecDeque::new()),
        ttl: Duration::from_secs(args.ttl_s),
    });
    let names: Vec<String> =
        rig.apis.iter().map(|(_, p)| &p.name).chain(rig.workers.iter().map(|(id, _)| id)).cloned().collect();
    let pids: Vec<u32> =
        rig.apis.iter().map(|(_, p)| p.pid()).chain(rig.workers.iter().map(|(_, p)| p.pid())).collect();

    let stop = CancellationToken::new();
    let creator = tokio::spawn(create_at_rate(load.clone(), args.rate, stop.clone()));
    let listeners: Vec<_> = (0..args.listeners)
        .map(|k| tokio::spawn(listen_loop(load.clone(), k, Duration::from_secs_f64(args.listen_s), stop.clone())))
        .collect();

    let rss_head: String = names.iter().map(|n| format!(" {n:>8}")).collect();
    println!(
        "\n{:>6} {:>7} {:>9} {:>9} {:>6} {:>7} {:>6} {:>7} |{rss_head} | {:>9} {:>6} {:>5}",
        "t s",
        "created",
        "completed",
        "cancelled",
        "parked",
        "expired",
        "failed",
        "listens",
        "redis MiB",
        "keys",
        "work"
    );
    println!("{:>60}  RSS MiB: presa processes", "");
    let load_start = Instant::now();
    let mut samples = Vec::new();
    let interval = Duration::from_secs_f64(args.sample_s);
    let mut next = load_start + interval;
    let mut signal = std::pin::pin!(interrupted());
    let mut interrupted = false;
    while next.duration_since(load_start).as_secs_f64() <= run_s + 1e-6 {
        tokio::select! {
            () = tokio::time::sleep_until(next.into()) => {}
            () = &mut signal => {
                interrupted = true;
                break;
            }
        }
        let sample = sample(&mut con, &keys, &pids, load_start.elapsed().as_secs_f64()).await?;
        print_row(&load.counts, &sample);
        samples.push(sample);
        next += interval;
    }
    // The load stops before the rig does (no request to a stopped pod).
    stop.cancel();
    let _ = creator.await;
    for l in listeners {
        let _ = l.await;
    }
    if interrupted {
        // Returning drops the rig: the pods and Redis stop too.
        return Err(format!("interrupted after {:.0} s", load_start.elapsed().as_secs_f64()));
    }

    let c = &load.counts;
    println!(
        "\nflows: {} stuck (no expected status within {} s), {} creates skipped (too many flows in flight); \
         {} listen streams, {} messages on them; {} parked tasks still there {} s after their TTL",
        c.stuck.load(Ordering::Relaxed),
        FLOW_DEADLINE.as_secs(),
        c.skipped.load(Ordering::Relaxed),
        c.listens.load(Ordering::Relaxed),
        c.notifications.load(Ordering::Relaxed),
        c.not_expired.load(Ordering::Relaxed),
        EXPIRY_GRACE.as_secs(),
    );
    for (why, n) in c.failed.lock().expect("failures").iter() {
        println!("failed: {n} × {why}");
    }
    let flat = verdict(&names, &samples, warmup_s, run_s);
    println!(
        "\nend: load average {} (1/5/15 min), {:.1} s in all",
        crate::load_average(),
        started.elapsed().as_secs_f64()
    );
    drop(rig);
    flat
}

/// SIGINT or SIGTERM (the soak then stops its pods and Redis before it exits).
async fn interrupted() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        },
        Err(_) => _ = tokio::signal::ctrl_c().await,
    }
}
