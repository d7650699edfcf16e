//! `presa-bench`: requests/s and latency of presa on loopback, everything in one process.
//!
//! Run: `cargo run --profile dist -p presa-bench -- [--seconds N] [--connections C] [--listeners L] [--redis-url URL]`
//! (`dist`: the shipped binaries' profile; `--release` builds faster and runs slower.)
//!
//! `presa-bench chaos [...]` is a different program: pods and Redis killed
//! under load through nginx, and what it cost (see `chaos/mod.rs`). So is
//! `presa-bench soak [...]`: minutes of steady load on pods and Redis, memory
//! sampled, and whether it stayed flat (see `soak.rs`).
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

use std::{
    future::Future,
    sync::{
        Arc, LazyLock, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

mod chaos;
mod fairness;
mod gateway;
mod procs;
mod soak;

/// The allocator presa's binaries ship with (presa-runtime's `jemalloc` feature), so the bench measures what ships.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

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

#[derive(Debug, Parser)]
#[command(
    about = "Throughput and latency of presa on loopback (module docs say how to read them).",
    args_conflicts_with_subcommands = true
)]
struct Args {
    /// `chaos`: tasks through nginx while pods and Redis are killed (see `chaos/mod.rs`); `soak`: steady load,
    /// memory sampled (see `soak.rs`); none: the throughput rows.
    #[command(subcommand)]
    command: Option<Command>,
    /// Seconds of measurement per row (each side of an alternated pair gets this much).
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Concurrent connections of the multi-connection rows.
    #[arg(long, default_value_t = 16)]
    connections: usize,
    /// Listen streams of the fan-out scenario.
    #[arg(long, default_value_t = 50)]
    listeners: usize,
    /// Redis for the Redis rows; without it, a `redis-server` on PATH is spawned on a free loopback port.
    #[arg(long)]
    redis_url: Option<String>,
    /// Listen streams held open at once for the RSS-per-stream row.
    #[arg(long, default_value_t = 2000)]
    rss_streams: usize,
    /// The binaries' telemetry, installed before measuring so its cost is included: `none` (no
    /// subscriber), `logs` (`presa_telemetry::init` with no exporter: text logs filtered by
    /// `RUST_LOG`, default `info`, one line per task), `otel` (the same plus the OpenTelemetry
    /// layer building every span with no exporter, as `init` did before).
    #[arg(long, value_enum, default_value_t = Telemetry::None)]
    telemetry: Telemetry,
    /// Small tasks created for the Redis-bytes-per-task row.
    #[arg(long, default_value_t = 2000)]
    redis_tasks: usize,
    /// Only the peer comparison (sync echo and `tasks/get` through Redis against rmcp), for
    /// quick before/after runs of one lever.
    #[arg(long)]
    peer_only: bool,
    /// Only the gateway rows (presa-gateway in front of the rmcp peer: added latency, tasks/s).
    #[arg(long)]
    gateway_only: bool,
    /// Only the fairness rows (one principal flooding, another at a low rate).
    #[arg(long)]
    fairness_only: bool,
    /// Only the admin task index's cost: bytes and CPU per small task with `--task-index` on and
    /// off, alternated this many rounds (0: the rows are part of a full run, 2 rounds).
    #[arg(long, default_value_t = 0)]
    task_index_rounds: usize,
}

/// The subcommands.
#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Tasks created through nginx in front of API pods while workers, API pods and Redis
    /// are SIGKILLed and restarted; prints lost / stuck / re-run tasks and recovery times;
    /// exits non-zero on any loss.
    Chaos(chaos::ChaosArgs),
    /// Minutes of steady task load on API pods and workers on Redis (quick, cancelled, answered
    /// and expiring tasks, listen streams); prints the RSS of each process, Redis memory and
    /// keys every few seconds; exits non-zero when one of them keeps growing.
    Soak(soak::SoakArgs),
    /// (Run by presa-bench itself.) Serve the bench catalog on a loopback port in this
    /// process, print the URL, stop when stdin closes.
    #[command(hide = true)]
    Serve(ServeArgs),
}

/// `serve`: the presa side of the process-separated rows.
#[derive(Debug, clap::Args)]
struct ServeArgs {
    /// Redis to run on (a fresh key prefix, one worker pool); none: embedded.
    #[arg(long)]
    redis_url: Option<String>,
    /// `max_listen_streams` (0: the default), with no per-scope bound.
    #[arg(long, default_value_t = 0)]
    max_listen_streams: usize,
}

/// The `serve` subcommand: see [`Command::Serve`].
async fn serve(args: ServeArgs) {
    let mut config = bench_config();
    if args.max_listen_streams > 0 {
        config =
            ServerConfig { max_listen_streams: args.max_listen_streams, max_listen_streams_per_scope: 0, ..config };
    }
    let running = match &args.redis_url {
        None => {
            let memory = Arc::new(MemoryStore::new());
            start_with(Backend::new(memory), None, config, 1).await
        }
        Some(url) => {
            let redis = RedisConfig::new(url.clone()).with_prefix(format!("presa-bench-{}", unique_prefix()));
            let store =
                Arc::new(RedisStore::connect(redis).await.unwrap_or_else(|e| panic!("connecting to {url}: {e}")));
            start_with(Backend::new(store), None, config, 1).await
        }
    };
    println!("{}", running.url);
    let mut sink = Vec::new();
    let _ = tokio::io::AsyncReadExt::read_to_end(&mut tokio::io::stdin(), &mut sink).await;
}

/// `--telemetry`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Telemetry {
    None,
    Logs,
    Otel,
}

/// Length of one round when two operations are alternated.
const ROUND: Duration = Duration::from_millis(250);
/// Interval between two `tasks/get` of the same task.
const POLL: Duration = Duration::from_millis(5);
/// The wider connection count of the peer comparison.
const PEER_WIDE: usize = 50;
/// Creators of the full-speed row (issue 12: p99 create latency at c=100).
const CREATE_WIDE: usize = 100;
/// Rounds of the fan-out scenario.
const FAN_OUT_ROUNDS: usize = 30;

/// What one operation reports.
#[derive(Debug, Default, Clone, Copy)]
struct Sample {
    latency: Duration,
    /// `tasks/get` requests it sent.
    polls: u64,
    /// The part after `tasks/update` (input round trips).
    tail: Option<Duration>,
    /// Refused with a retryable answer (HTTP 503 or 429): not counted as done.
    refused: bool,
}

/// The bench's clock: handlers get send times as microseconds since it.
static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);
/// Create sent → handler started (`stamp_task`).
static PICKUPS: Mutex<Vec<Duration>> = Mutex::new(Vec::new());
/// `tasks/update` sent → parked `park` handler resumed.
static RESUMES: Mutex<Vec<Duration>> = Mutex::new(Vec::new());
/// Handlers of `noop_task` that ran.
static COMPLETED: AtomicU64 = AtomicU64::new(0);

fn now_us() -> u64 {
    EPOCH.elapsed().as_micros() as u64
}

/// Record the time since `sent` (from [`now_us`]) in `into`.
fn stamp(into: &Mutex<Vec<Duration>>, sent: Option<u64>) {
    if let Some(sent) = sent {
        into.lock().expect("stamps").push(Duration::from_micros(now_us().saturating_sub(sent)));
    }
}

fn take(from: &Mutex<Vec<Duration>>) -> Vec<Duration> {
    std::mem::take(&mut *from.lock().expect("stamps"))
}

/// One operation of a load loop: gets its connection's index, reports a [`Sample`].
type Op = Arc<dyn Fn(usize) -> BoxFuture<'static, Sample> + Send + Sync>;

fn op<F, Fut>(f: F) -> Op
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Sample> + Send + 'static,
{
    Arc::new(move |i| f(i).boxed())
}

/// Samples of completed operations and the wall time they took.
#[derive(Debug, Default)]
struct Stats {
    latencies: Vec<Duration>,
    tails: Vec<Duration>,
    polls: u64,
    refused: u64,
    elapsed: Duration,
}

impl Stats {
    fn rate(&self) -> f64 {
        self.latencies.len() as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    fn absorb(&mut self, other: Stats) {
        self.latencies.extend(other.latencies);
        self.tails.extend(other.tails);
        self.polls += other.polls;
        self.refused += other.refused;
        self.elapsed += other.elapsed;
    }

    fn polls_per_op(&self) -> f64 {
        self.polls as f64 / self.latencies.len().max(1) as f64
    }
}

/// The `p`th percentile (nearest rank) of `d`, sorting it.
fn pct(d: &mut [Duration], p: f64) -> Duration {
    d.sort_unstable();
    if d.is_empty() { Duration::ZERO } else { d[((p / 100.0) * (d.len() - 1) as f64).round() as usize] }
}

fn ms(d: Duration) -> String {
    format!("{:.2}ms", d.as_secs_f64() * 1e3)
}

/// Print one table row (`rate` None: not a throughput measurement).
fn row(name: &str, conns: usize, rate: Option<f64>, lat: &mut [Duration], notes: &str) {
    let rate = rate.map_or("-".into(), |r| format!("{r:.0}"));
    let (p50, p90, p99) = (pct(lat, 50.0), pct(lat, 90.0), pct(lat, 99.0));
    let line = format!("{name:<38} {conns:>5} {rate:>8} {:>9} {:>9} {:>9}  {notes}", ms(p50), ms(p90), ms(p99));
    println!("{}", line.trim_end());
}

/// Run `op` on `conns` loops for `dur`; each loop finishes the operation under way, then stops.
async fn run(op: &Op, conns: usize, dur: Duration) -> Stats {
    let start = Instant::now();
    let deadline = start + dur;
    let loops: Vec<_> = (0..conns)
        .map(|i| {
            let op = op.clone();
            tokio::spawn(async move {
                let mut samples = Vec::new();
                while Instant::now() < deadline {
                    samples.push(op(i).await);
                }
                samples
            })
        })
        .collect();
    let mut stats = Stats::default();
    for l in loops {
        for s in l.await.expect("a load loop panicked") {
            if s.refused {
                stats.refused += 1;
                continue;
            }
            stats.latencies.push(s.latency);
            stats.tails.extend(s.tail);
            stats.polls += s.polls;
        }
    }
    stats.elapsed = start.elapsed();
    stats
}

/// `a` and `b` for `total` each, in alternating rounds (ABBA…), after a warm-up of both.
async fn alternate(a: &Op, b: &Op, conns: usize, total: Duration) -> (Stats, Stats) {
    run(a, conns, ROUND / 2).await;
    run(b, conns, ROUND / 2).await;
    let rounds = ((total.as_secs_f64() / ROUND.as_secs_f64()).ceil() as usize).max(2);
    let (mut sa, mut sb) = (Stats::default(), Stats::default());
    for r in 0..rounds {
        if r % 2 == 0 {
            sa.absorb(run(a, conns, ROUND).await);
            sb.absorb(run(b, conns, ROUND).await);
        } else {
            sb.absorb(run(b, conns, ROUND).await);
            sa.absorb(run(a, conns, ROUND).await);
        }
    }
    (sa, sb)
}

/// The bench's catalog (see the module docs).
fn catalog() -> Catalog {
    let text = json!({ "type": "object", "properties": { "text": { "type": "string" } } });
    let echo = |args: &Value| ToolOutput::text(args["text"].as_str().unwrap_or_default());
    Catalog::builder()
        .tool(Tool::new("echo", "Echoes `text` (JSON reply).", text.clone(), move |_ctx, args: Value| async move {
            Ok(echo(&args))
        }))
        .tool(Tool::new(
            "echo_progress",
            "Sends one progress notification, then echoes `text` (SSE reply).",
            text,
            move |ctx: ToolContext, args: Value| async move {
                ctx.progress(1.0, Some(1.0), None);
                Ok(echo(&args))
            },
        ))
        .tool(
            Tool::new("noop_task", "A task that completes at once.", json!({ "type": "object" }), |_ctx, _| async {
                COMPLETED.fetch_add(1, Ordering::Relaxed);
                Ok(ToolOutput::text("done"))
            })
            .policy(TaskPolicy::Required),
        )
        .tool(
            Tool::new(
                "stamp_task",
                "A task that records when a worker picked it up (`t`: send time), then completes.",
                json!({ "type": "object", "properties": { "t": { "type": "integer" } } }),
                |_ctx, args: Value| async move {
                    stamp(&PICKUPS, args["t"].as_u64());
                    Ok(ToolOutput::text("done"))
                },
            )
            .policy(TaskPolicy::Required),
        )
        .tool(
            Tool::new(
                "sleep_task",
                "A task that holds its worker slot for `ms`, then completes.",
                json!({ "type": "object", "properties": { "ms": { "type": "integer" } } }),
                |_ctx, args: Value| async move {
                    tokio::time::sleep(Duration::from_millis(args["ms"].as_u64().unwrap_or(0))).await;
                    Ok(ToolOutput::text("done"))
                },
            )
            .policy(TaskPolicy::Required),
        )
        .tool(
            Tool::new(
                "park",
                "A task that asks for one input, then completes.",
                json!({ "type": "object" }),
                |ctx: ToolContext, _| async move {
                    let ask = json!({ "method": "elicitation/create", "params": { "message": "Go on?",
                        "requestedSchema": { "type": "object", "properties": { "t": { "type": "integer" } } } } });
                    let answer = ctx.input("go", ask).await?;
                    stamp(&RESUMES, answer["content"]["t"].as_u64());
                    Ok(ToolOutput::text(answer["action"].as_str().unwrap_or("?")))
                },
            )
            .policy(TaskPolicy::Required),
        )
        .build()
        .expect("the bench catalog is valid")
}

/// The fairness rows on fresh servers with default quotas and shares (see `fairness.rs`).
async fn fairness_rows(redis: Option<&Running>, secs: Duration) {
    let scoped = || HttpConfig { authenticator: Arc::new(presa_testkit::HeaderScopes), ..HttpConfig::default() };
    let memory = Arc::new(MemoryStore::new());
    let fair = start_http(Backend::new(memory), None, ServerConfig::default(), 1, scoped()).await;
    fairness::rows(&fair, "embedded", secs).await;
    drop(fair);
    let url = redis.and_then(|r| r.redis_url.as_ref()).map(|u| u.0.as_str());
    if url.is_some()
        && let Some(fair) = start_redis_with(url, ServerConfig::default(), 1, scoped()).await
    {
        fairness::rows(&fair, "Redis", secs).await;
    }
}

/// A server with its worker on a loopback port; stopped when dropped.
#[derive(Debug)]
struct Running {
    url: String,
    /// The Redis it runs on, and its key prefix.
    redis_url: Option<(String, String)>,
    server: Server,
    stop: CancellationToken,
    /// The spawned Redis behind it, killed after the server stops.
    _redis: Option<TestRedis>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The bench's server settings: no per-scope limit on tasks, listen streams
/// or in-request calls (one principal drives every row, and the round trips
/// measure speed, not admission).
fn bench_config() -> ServerConfig {
    ServerConfig {
        max_active_tasks_per_scope: None,
        max_listen_streams_per_scope: 0,
        max_inflight_calls_per_scope: 0,
        ..ServerConfig::default()
    }
}

async fn start(backend: Backend, redis: Option<TestRedis>) -> Running {
    start_with(backend, redis, bench_config(), 1).await
}

/// A server with `workers` in-process worker pools (each as one `presa-worker` would run).
async fn start_with(backend: Backend, redis: Option<TestRedis>, config: ServerConfig, workers: usize) -> Running {
    start_http(backend, redis, config, workers, HttpConfig::default()).await
}

/// [`start_with`] with `http` settings (the fairness rows name their callers
/// with `x-test-scope`: presa_testkit's `HeaderScopes`).
async fn start_http(
    backend: Backend,
    redis: Option<TestRedis>,
    config: ServerConfig,
    workers: usize,
    http: HttpConfig,
) -> Running {
    let core = Core::new(config, catalog(), backend);
    let server = Server::new(core.clone(), StateCodec::new(b"presa-bench"));
    let stop = CancellationToken::new();
    for _ in 0..workers {
        tokio::spawn(Worker::new(core.clone(), WorkerConfig::default()).run(stop.clone()));
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
    let url = format!("http://{}/mcp", listener.local_addr().expect("a bound listener"));
    let router = presa_http::router(server.clone(), http);
    let shutdown = stop.clone();
    tokio::spawn(presa_http::serve(listener, router, async move { shutdown.cancelled().await }));
    Running { url, server, stop, _redis: redis, redis_url: None }
}

/// A Redis-backed server (unique key prefix), when a Redis is given or `redis-server` is on PATH.
async fn start_redis(url: Option<&str>) -> Option<Running> {
    start_redis_with(url, bench_config(), 1, HttpConfig::default()).await
}

async fn start_redis_with(
    url: Option<&str>,
    config: ServerConfig,
    workers: usize,
    http: HttpConfig,
) -> Option<Running> {
    start_redis_indexed(url, config, workers, http, true).await
}

/// [`start_redis_with`], its store indexing tasks for the admin listing or not.
async fn start_redis_indexed(
    url: Option<&str>,
    config: ServerConfig,
    workers: usize,
    http: HttpConfig,
    task_index: bool,
) -> Option<Running> {
    let on_path =
        std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("redis-server").is_file()));
    let spawned = match url {
        None if on_path => Some(TestRedis::spawn()),
        _ => None,
    };
    let url = url.map(str::to_string).or_else(|| spawned.as_ref().map(|r| r.url().to_string()))?;
    let prefix = format!("presa-bench-{}", unique_prefix());
    let server_config = config;
    let config = RedisConfig::new(url.clone()).with_prefix(prefix.clone()).with_task_index(task_index);
    let store = Arc::new(RedisStore::connect(config).await.unwrap_or_else(|e| panic!("connecting to {url}: {e}")));
    let how = if spawned.is_some() { "spawned redis-server" } else { "given" };
    println!("Redis: {url} ({how}), key prefix {prefix}, {workers} worker pool(s)");
    let mut running = start_http(Backend::new(store), spawned, server_config, workers, http).await;
    running.redis_url = Some((url, prefix));
    Some(running)
}

/// One keep-alive connection sending prepared `tools/call` bodies (JSON or SSE replies).
#[derive(Debug, Clone)]
struct Raw {
    http: reqwest::Client,
    url: String,
}

impl Raw {
    fn pool(url: &str, n: usize) -> Arc<Vec<Raw>> {
        let client = || reqwest::Client::builder().tcp_nodelay(true).build().expect("an HTTP client");
        Arc::new((0..n).map(|_| Raw { http: client(), url: url.into() }).collect())
    }

    /// Send `body` (a call of `tool`); the reply must be SSE when `sse`, else JSON.
    async fn call(&self, tool: &str, body: String, sse: bool) -> Duration {
        self.post("tools/call", tool, body, sse, "\"result\"").await.latency
    }

    /// Send `body` (`method`, `Mcp-Name: name`); the reply must be HTTP 200 holding `expect`,
    /// SSE when `sse`, else JSON. A retryable refusal (503, 429) is reported as refused.
    async fn post(&self, method: &str, name: &str, body: String, sse: bool, expect: &str) -> Sample {
        let t = Instant::now();
        let resp = (self.http.post(&self.url))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", method)
            .header("mcp-name", name)
            .body(body)
            .send()
            .await
            .expect("request sent");
        let status = resp.status().as_u16();
        let ctype = resp.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
        let text = resp.text().await.expect("a reply body");
        if matches!(status, 503 | 429) && text.contains("retry") {
            return Sample { latency: t.elapsed(), refused: true, ..Sample::default() };
        }
        let ok = status == 200 && ctype.contains("event-stream") == sse && text.contains(expect);
        assert!(ok, "{method} {name}: HTTP {status} {ctype}: {text}");
        Sample { latency: t.elapsed(), ..Sample::default() }
    }
}

/// `tools/call tool` on connection i, the same body every time.
/// The `_meta` every raw request carries (rmcp requires `clientInfo` too; presa accepts it).
fn raw_meta(caps: Value) -> Value {
    json!({ "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": { "name": "presa-bench", "version": "0" },
        "io.modelcontextprotocol/clientCapabilities": caps })
}

fn echo_op(pool: &Arc<Vec<Raw>>, tool: &'static str, sse: bool) -> Op {
    let mut meta = raw_meta(json!({}));
    meta["progressToken"] = json!("p1");
    let params = json!({ "name": tool, "arguments": { "text": "hello" }, "_meta": meta });
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params }).to_string();
    let pool = pool.clone();
    op(move |i| {
        let (pool, body) = (pool.clone(), body.clone());
        async move { Sample { latency: pool[i].call(tool, body, sse).await, ..Sample::default() } }
    })
}

/// `tasks/get` of `ids[i]` (a completed task) on connection i.
fn get_op(pool: &Arc<Vec<Raw>>, ids: &[String]) -> Op {
    let bodies: Arc<Vec<(String, String)>> = Arc::new(
        ids.iter()
            .map(|id| {
                let params = json!({ "taskId": id, "_meta": raw_meta(tasks_caps()) });
                (id.clone(), json!({ "jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": params }).to_string())
            })
            .collect(),
    );
    let pool = pool.clone();
    op(move |i| {
        let (pool, bodies) = (pool.clone(), bodies.clone());
        async move { pool[i].post("tasks/get", &bodies[i].0, bodies[i].1.clone(), false, "\"completed\"").await }
    })
}

/// Create a task of `tool` on connection i (JSON reply); `stamped`: arguments carry the send time.
fn create_op(pool: &Arc<Vec<Raw>>, tool: &'static str, stamped: bool) -> Op {
    let pool = pool.clone();
    op(move |i| {
        let pool = pool.clone();
        async move {
            let args = if stamped { json!({ "t": now_us() }) } else { json!({}) };
            let params = json!({ "name": tool, "arguments": args, "_meta": raw_meta(tasks_caps()) });
            let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params }).to_string();
            pool[i].post("tools/call", tool, body, false, "\"taskId\"").await
        }
    })
}

/// Wait (at most `within`) until `noop_task` handlers ran `target` times in all; returns the wait.
async fn drain(target: u64, within: Duration) -> Duration {
    let t = Instant::now();
    while COMPLETED.load(Ordering::Relaxed) < target && t.elapsed() < within {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    t.elapsed()
}

/// `used_memory` of the Redis at `url` (INFO memory), bytes.
async fn redis_used_memory(con: &mut redis::aio::MultiplexedConnection) -> i64 {
    let info: String = redis::cmd("INFO").arg("memory").query_async(con).await.expect("INFO memory");
    info.lines().find_map(|l| l.strip_prefix("used_memory:")?.trim().parse().ok()).expect("used_memory in INFO")
}

/// CPU seconds Redis has used (`INFO cpu`: user + system, main thread and children).
async fn redis_cpu_secs(con: &mut redis::aio::MultiplexedConnection) -> f64 {
    let info: String = redis::cmd("INFO").arg("cpu").query_async(con).await.expect("INFO cpu");
    let field = |name: &str| -> f64 {
        info.lines().find_map(|l| l.strip_prefix(name)?.trim().parse().ok()).unwrap_or(f64::NAN)
    };
    field("used_cpu_user:") + field("used_cpu_sys:")
}

/// CPU seconds this process's threads have run: the sum of the first field of
/// each `/proc/self/task/<tid>/schedstat` (nanoseconds; `/proc/self/stat`
/// counts 10 ms ticks, too coarse for a few thousand sync calls). A thread
/// that exits takes its time along; the runtime's threads outlive every row.
fn own_cpu_secs() -> f64 {
    let Ok(threads) = std::fs::read_dir("/proc/self/task") else { return f64::NAN };
    let ns = threads
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<f64>().ok());
    ns.sum::<f64>() / 1e9
}

/// Run `op` `n` times over `c` loops, retrying refusals (the per-scope limit
/// while workers catch up).
async fn run_n(op: &Op, c: usize, n: usize) {
    let started = Arc::new(AtomicU64::new(0));
    let loops: Vec<_> = (0..c)
        .map(|i| {
            let (op, started) = (op.clone(), started.clone());
            tokio::spawn(async move {
                while started.fetch_add(1, Ordering::Relaxed) < n as u64 {
                    while op(i).await.refused {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
            })
        })
        .collect();
    for l in loops {
        l.await.expect("a load loop panicked");
    }
}

/// Redis bytes per small completed task: `INFO memory` delta over `n` `noop_task`s, and
/// `MEMORY USAGE` of one task's record. Also the CPU a task costs from create to
/// completed (this process: server, worker pools and generator; and Redis) against
/// a sync `echo` call's, which bounds the creations/sync ratio where the cores are the limit.
async fn redis_bytes_per_task(server: &Running, n: usize, c: usize) -> Option<String> {
    task_cost(server, n, c).await.map(|cost| cost.to_string())
}

/// What a small task costs, from create to completed, against a sync call
/// ([`task_cost`]).
struct TaskCost {
    before: i64,
    after: i64,
    n: usize,
    /// `MEMORY USAGE` of one completed task's record.
    usage: Option<i64>,
    /// `MEMORY USAGE` of the admin task indexes per entry, when indexed.
    index: Option<f64>,
    /// CPU per task, µs: this process's and Redis's.
    task_own: f64,
    task_redis: f64,
    /// CPU per sync `echo` call, µs: this process's and Redis's.
    echo_own: f64,
    echo_redis: f64,
}

impl TaskCost {
    fn bytes_per_task(&self) -> f64 {
        (self.after - self.before) as f64 / self.n as f64
    }

    fn cpu_per_task(&self) -> f64 {
        self.task_own + self.task_redis
    }
}

impl std::fmt::Display for TaskCost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let TaskCost { before, after, n, usage, index, task_own, task_redis, echo_own, echo_redis } = self;
        let (per, usage) = (self.bytes_per_task(), usage.map_or("-".into(), |u| u.to_string()));
        let index = index.map_or("none".into(), |b| format!("{b:.0} B/entry"));
        let bound = (echo_own + echo_redis) / (task_own + task_redis);
        write!(
            f,
            "INFO used_memory {before} -> {after} over {n} tasks = {per:.0} B/task; MEMORY USAGE of one task record {usage} B, \
             of the task index {index}; \
             CPU per task {task_own:.0} µs here + {task_redis:.0} µs Redis, per sync echo {echo_own:.0} + {echo_redis:.0} µs \
             (cores the limit: creations/sync ≤ {bound:.2})"
        )
    }
}

/// [`redis_bytes_per_task`]'s figures.
async fn task_cost(server: &Running, n: usize, c: usize) -> Option<TaskCost> {
    let (url, prefix) = server.redis_url.clone()?;
    let client = redis::Client::open(url.as_str()).expect("a Redis URL");
    let mut con = client.get_multiplexed_async_connection().await.expect("a Redis connection");
    let pool = Raw::pool(&server.url, c);
    let one = create_op(&pool, "noop_task", false);
    let done0 = COMPLETED.load(Ordering::Relaxed);
    let before = redis_used_memory(&mut con).await;
    let cpu0 = (own_cpu_secs(), redis_cpu_secs(&mut con).await);
    run_n(&one, c, n).await;
    drain(done0 + n as u64, Duration::from_secs(30)).await;
    let cpu1 = (own_cpu_secs(), redis_cpu_secs(&mut con).await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = redis_used_memory(&mut con).await;
    let cpu2 = (own_cpu_secs(), redis_cpu_secs(&mut con).await);
    // Five times as many sync calls: each costs a fraction of a task.
    run_n(&echo_op(&pool, "echo", false), c, 5 * n).await;
    let cpu3 = (own_cpu_secs(), redis_cpu_secs(&mut con).await);
    let us = |a: f64, b: f64, n: usize| (b - a) * 1e6 / n as f64;
    let (task_own, task_redis) = (us(cpu0.0, cpu1.0, n), us(cpu0.1, cpu1.1, n));
    let (echo_own, echo_redis) = (us(cpu2.0, cpu3.0, 5 * n), us(cpu2.1, cpu3.1, 5 * n));
    let id = create(&Client::new(server.url.clone(), tasks_caps()), "noop_task").await;
    drain(done0 + n as u64 + 1, Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let key = format!("{prefix}:{{{}}}:task:{id}", &id[..3]);
    let usage: Option<i64> =
        redis::cmd("MEMORY").arg("USAGE").arg(&key).arg("SAMPLES").arg(0).query_async(&mut con).await.ok();
    let index = index_bytes_per_entry(&mut con, &prefix).await;
    Some(TaskCost { before, after, n, usage, index, task_own, task_redis, echo_own, echo_redis })
}

/// `MEMORY USAGE` of every admin task index under `prefix` over the entries
/// they hold (`None` when there is none: `--task-index off`).
async fn index_bytes_per_entry(con: &mut redis::aio::MultiplexedConnection, prefix: &str) -> Option<f64> {
    let keys: Vec<String> = redis::cmd("KEYS").arg(format!("{prefix}:{{p*}}:ix:*")).query_async(con).await.ok()?;
    let (mut bytes, mut entries) = (0i64, 0i64);
    for key in &keys {
        let usage: Option<i64> =
            redis::cmd("MEMORY").arg("USAGE").arg(key).arg("SAMPLES").arg(0).query_async(con).await.ok();
        let len: Option<i64> = redis::cmd("XLEN").arg(key).query_async(con).await.ok();
        bytes += usage.unwrap_or(0);
        entries += len.unwrap_or(0);
    }
    (entries > 0).then(|| bytes as f64 / entries as f64)
}

/// The admin task index's cost (`--task-index`): [`task_cost`] of one server
/// indexing its tasks and one not, alternated `rounds` times on one Redis,
/// with the ratios of bytes and CPU per task.
async fn task_index_rows(url: Option<&str>, n: usize, c: usize, rounds: usize) {
    let start = |index: bool| start_redis_indexed(url, ServerConfig::default(), 2, HttpConfig::default(), index);
    let (Some(on), Some(off)) = (start(true).await, start(false).await) else {
        println!("task index cost: no Redis, skipped");
        return;
    };
    let (mut ons, mut offs) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        for (name, server, seen) in [("on", &on, &mut ons), ("off", &off, &mut offs)] {
            let Some(cost) = task_cost(server, n, c).await else { return };
            println!("{:<38} {c:>5} {:>8}  {cost}", format!("small task, --task-index {name}"), "-");
            seen.push(cost);
        }
    }
    let mean = |v: &[TaskCost], f: fn(&TaskCost) -> f64| v.iter().map(f).sum::<f64>() / v.len().max(1) as f64;
    let (b_on, b_off) = (mean(&ons, TaskCost::bytes_per_task), mean(&offs, TaskCost::bytes_per_task));
    let (c_on, c_off) = (mean(&ons, TaskCost::cpu_per_task), mean(&offs, TaskCost::cpu_per_task));
    println!(
        "task index cost over {rounds} alternated rounds: {b_on:.0} vs {b_off:.0} B/task ({:+.1} %), \
         CPU {c_on:.0} vs {c_off:.0} µs/task ({:+.1} %)",
        (b_on / b_off - 1.0) * 100.0,
        (c_on / c_off - 1.0) * 100.0
    );
}

/// RSS of an embedded presa server in a process of its own (`serve`) with `n`
/// listen streams open (this process holds the client ends), then closed.
async fn rss_per_listen_stream(n: usize) -> String {
    let exe = std::env::current_exe().expect("this binary's path");
    let args = ["serve".to_string(), "--max-listen-streams".into(), (n + 10).to_string()];
    let server = procs::Proc::spawn(&exe, &args, true).await;
    let http = reqwest::Client::builder().tcp_nodelay(true).build().expect("an HTTP client");
    let client = Client { url: server.url.clone(), http, caps: json!({}), scope: None, bearer: None };
    // One stream opened and closed first, so the per-stream figure leaves out one-time set-up.
    drop(client.listen(json!({ "toolsListChanged": true })).await);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = server.rss_mib();
    let mut streams = Vec::with_capacity(n);
    for _ in 0..n {
        let (status, mut stream) = client.listen(json!({ "toolsListChanged": true })).await;
        let ack = next_within(&mut stream, 5).await;
        assert!(status == 200 && ack["method"] == "notifications/subscriptions/acknowledged", "listen: {ack}");
        streams.push(stream);
    }
    let open = server.rss_mib();
    drop(streams);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let closed = server.rss_mib();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let later = server.rss_mib();
    let per = (open - before) * 1024.0 / n as f64;
    format!(
        "server process RSS {before:.1} -> {open:.1} MiB with {n} open = {per:.1} KiB/stream; after closing: {closed:.1} MiB at 1 s, {later:.1} MiB at 11 s"
    )
}

/// One MCP client (its own connection) per load loop, declaring the Tasks extension.
fn task_clients(url: &str, n: usize) -> Arc<Vec<Client>> {
    Arc::new((0..n).map(|_| Client::new(url, tasks_caps())).collect())
}

/// Call `tool` (arguments `{"text": "hello"}`, which every bench tool takes) and return the id of the task it became.
async fn create(c: &Client, tool: &str) -> String {
    let r = c.call_tool(tool, json!({ "text": "hello" })).await;
    r["taskId"].as_str().unwrap_or_else(|| panic!("{tool} did not become a task: {r}")).to_string()
}

/// `tasks/get` at once, then every [`POLL`], until the task is `status`; returns the gets sent.
async fn poll_until(c: &Client, id: &str, status: &str) -> u64 {
    let mut polls = 0;
    loop {
        polls += 1;
        let t = c.get_task(id).await;
        if t["status"] == status {
            return polls;
        }
        assert!(matches!(t["status"].as_str(), Some("working" | "input_required")), "task {id}: {t}");
        tokio::time::sleep(POLL).await;
    }
}

fn task_op(clients: &Arc<Vec<Client>>, tool: &'static str) -> Op {
    let clients = clients.clone();
    op(move |i| {
        let clients = clients.clone();
        async move {
            let (c, t) = (&clients[i], Instant::now());
            let id = create(c, tool).await;
            let polls = poll_until(c, &id, "completed").await;
            Sample { latency: t.elapsed(), polls, ..Sample::default() }
        }
    })
}

fn input_op(clients: &Arc<Vec<Client>>) -> Op {
    let clients = clients.clone();
    op(move |i| {
        let clients = clients.clone();
        async move {
            let (c, t) = (&clients[i], Instant::now());
            let id = create(c, "park").await;
            let mut polls = poll_until(c, &id, "input_required").await;
            let answered = Instant::now();
            let content = json!({ "t": now_us() });
            let answer =
                json!({ "taskId": id, "inputResponses": { "go": { "action": "accept", "content": content } } });
            c.ok("tasks/update", answer).await;
            polls += poll_until(c, &id, "completed").await;
            Sample { latency: t.elapsed(), polls, tail: Some(answered.elapsed()), refused: false }
        }
    })
}

/// Open `listeners` listen streams, publish one `tools/list_changed` per round; returns
/// (time until all streams received it, per round; time of each single delivery).
async fn fan_out(server: &Running, listeners: usize, budget: Duration) -> (Vec<Duration>, Vec<Duration>) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut readers = tokio::task::JoinSet::new();
    for _ in 0..listeners {
        let (status, mut stream) =
            Client::new(server.url.clone(), json!({})).listen(json!({ "toolsListChanged": true })).await;
        let ack = next_within(&mut stream, 5).await;
        assert!(status == 200 && ack["method"] == "notifications/subscriptions/acknowledged", "listen: {ack}");
        let tx = tx.clone();
        readers.spawn(async move {
            while let Some(m) = stream.next().await {
                if m["method"] == "notifications/tools/list_changed" && tx.send(Instant::now()).is_err() {
                    return;
                }
            }
        });
    }
    let (mut all, mut each) = (Vec::new(), Vec::new());
    let deadline = Instant::now() + budget;
    while all.len() < FAN_OUT_ROUNDS && Instant::now() < deadline {
        let t0 = Instant::now();
        server.server.core().bus().publish("notifications/tools/list_changed").await.expect("publish list_changed");
        let mut last = t0;
        for _ in 0..listeners {
            let at = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await;
            let at = at.expect("every stream within 5 s").expect("readers alive");
            each.push(at - t0);
            last = last.max(at);
        }
        all.push(last - t0);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    readers.shutdown().await;
    (all, each)
}

/// VmRSS of this process, MiB.
fn rss_mib() -> f64 {
    rss_of("/proc/self/status")
}

/// VmRSS from a `/proc/<pid>/status` file, MiB.
fn rss_of(status: &str) -> f64 {
    let status = std::fs::read_to_string(status).unwrap_or_default();
    let kib = status.lines().find_map(|l| l.strip_prefix("VmRSS:")?.trim().strip_suffix("kB")?.trim().parse().ok());
    kib.map_or(f64::NAN, |k: f64| k / 1024.0)
}

fn load_average() -> String {
    let l = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    l.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    return_freed_memory();
    match args.command {
        Some(Command::Chaos(chaos)) => std::process::exit(chaos::run(chaos).await),
        Some(Command::Soak(soak)) => std::process::exit(soak::run(soak).await),
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
        // create -> handler started.
        let stamped = create_op(&pool, "stamp_task", true);
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

/// The two sides of the peer rows, each in a process of its own: presa (`serve`, on
/// the bench's Redis when there is one, with this binary's allocator) and rmcp.
async fn peers(redis: Option<&Running>) -> (procs::Proc, procs::Proc) {
    let exe = std::env::current_exe().expect("this binary's path");
    let mut args = vec!["serve".to_string()];
    if let Some((url, _)) = redis.and_then(|r| r.redis_url.as_ref()) {
        args.extend(["--redis-url".to_string(), url.clone()]);
    }
    let presa = procs::Proc::spawn(&exe, &args, true).await;
    let peer =
        procs::sibling("rmcp-peer").expect("rmcp-peer beside presa-bench: cargo build --profile dist -p presa-bench");
    (presa, procs::Proc::spawn(&peer, &[], true).await)
}

/// Idle RSS of the shipped `presa-api` (embedded) and `presa-worker` (on `redis_url`)
/// built beside this binary, and of the rmcp peer: each started, asked once for
/// `/healthz` (the peer: one `tools/call`), then read 1 s later.
async fn idle_rss(redis_url: Option<&str>) -> String {
    let http = reqwest::Client::new();
    let mut figures = Vec::new();
    for name in ["presa-api", "presa-worker"] {
        let Some(path) = procs::sibling(name) else {
            figures.push(format!(
                "{name} not built (cargo build --profile dist -p {name}, or the profile this bench was built with)"
            ));
            continue;
        };
        let port = procs::free_port();
        let mut args = vec!["--listen".to_string(), format!("127.0.0.1:{port}")];
        if name == "presa-worker" {
            let Some(url) = redis_url else { continue };
            let prefix = format!("presa-bench-{}", unique_prefix());
            args.extend(["--redis-url".into(), url.into(), "--redis-prefix".into(), prefix]);
        }
        let p = procs::Proc::spawn(&path, &args, false).await;
        let health = format!("http://127.0.0.1:{port}/healthz");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !http.get(&health).send().await.is_ok_and(|r| r.status().is_success()) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if name == "presa-api" {
            // One sync call first, as the peer below answers one echo.
            echo_op(&Raw::pool(&format!("http://127.0.0.1:{port}/mcp"), 1), "greet", false)(0).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        figures.push(format!("{name} {:.1} MiB", p.rss_mib()));
    }
    if let Some(peer) = procs::sibling("rmcp-peer") {
        let p = procs::Proc::spawn(&peer, &[], true).await;
        echo_op(&Raw::pool(&p.url, 1), "echo", false)(0).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        figures.push(format!("rmcp-peer {:.1} MiB", p.rss_mib()));
    }
    figures.join(", ")
}

/// The closing lines: the ratios, then the machine's load.
fn print_ratios(ratios: &[String]) {
    println!("\nratios (same run, alternated):");
    for r in ratios {
        println!("  {r}");
    }
    println!("\nend: load average {} (1/5/15 min), RSS {:.1} MiB", load_average(), rss_mib());
}
