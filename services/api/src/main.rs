//! `presa-api`: the presa MCP server.
//!
//! Without `--redis-url` one process is the whole system: an in-memory store
//! and an in-process worker pool (the embedded mode: not durable). With it,
//! this process is a stateless API pod and `presa-worker` pods run the tools.

use std::{net::SocketAddr, time::Duration};

use anyhow::Context;
use clap::Parser;
use presa_http::HttpConfig;
use presa_runtime::{
    RedisArgs, Storage,
    auth::{AuthArgs, check_listen, check_state_secret},
    shutdown_signal,
};
use presa_server::{Core, Server, ServerConfig, StateCodec, Worker, WorkerConfig};
use presa_telemetry::LogFormat;
use tokio_util::sync::CancellationToken;

/// presa: an MCP 2026-07-28 server that runs long tool calls as durable tasks.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    #[command(flatten)]
    redis: RedisArgs,

    #[command(flatten)]
    auth: AuthArgs,

    /// Address to serve MCP (`/mcp`), `/healthz`, `/readyz` and `/metrics` on.
    #[arg(long, env = "PRESA_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,

    /// Allowed `Origin` values: hostnames (any scheme and port) or full
    /// origins, comma-separated. Requests without `Origin` are always accepted.
    #[arg(long, env = "PRESA_ALLOWED_ORIGINS", value_delimiter = ',', default_value = "localhost,127.0.0.1,[::1]")]
    allowed_origins: Vec<String>,

    /// Largest request body in bytes (HTTP 413 beyond).
    #[arg(long, env = "PRESA_MAX_BODY_BYTES", default_value_t = 4 * 1024 * 1024)]
    max_body_bytes: usize,

    /// Task lifetime from creation in ms, or `none` for tasks that never expire.
    #[arg(long, env = "PRESA_TASK_TTL_MS", default_value = "3600000", value_parser = parse_ttl)]
    task_ttl_ms: Ttl,

    /// Suggested polling interval for tasks, in ms.
    #[arg(long, env = "PRESA_POLL_INTERVAL_MS", default_value_t = 500)]
    poll_interval_ms: u64,

    /// Largest task input (arguments plus answers, or one tasks/update), in bytes.
    #[arg(long, env = "PRESA_MAX_TASK_INPUT_BYTES", default_value_t = 256 * 1024)]
    max_task_input_bytes: usize,

    /// Most non-terminal tasks one caller scope may hold (0: no limit).
    #[arg(long, env = "PRESA_MAX_ACTIVE_TASKS_PER_SCOPE", default_value_t = 1000)]
    max_active_tasks_per_scope: u64,

    /// Embedded mode: most tasks held in memory, finished ones included until
    /// their TTL (a few KiB each); past it new tasks get a retryable error.
    #[arg(long, env = "PRESA_MAX_TASKS", default_value_t = 100_000, value_parser = clap::value_parser!(usize))]
    max_tasks: usize,

    /// Most `subscriptions/listen` streams open at once on this pod.
    #[arg(long, env = "PRESA_MAX_LISTEN_STREAMS", default_value_t = 1000)]
    max_listen_streams: usize,

    /// Tool handlers run at once by the in-process worker (embedded mode only;
    /// with Redis, `presa-worker` pods run them).
    #[arg(long, env = "PRESA_CONCURRENCY", default_value_t = 64)]
    concurrency: usize,

    /// Grace period on SIGTERM/SIGINT for in-flight requests and running tasks, in ms.
    #[arg(long, env = "PRESA_GRACE_MS", default_value_t = 20_000)]
    grace_ms: u64,

    /// Log format: human-readable text or JSON lines.
    #[arg(long, env = "PRESA_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,

    /// Key for MRTR requestState HMACs (at least 32 bytes); every API pod must
    /// share it. When unset, a random per-process key is used.
    #[arg(long, env = "PRESA_STATE_SECRET", hide_env_values = true)]
    state_secret: Option<String>,
}

#[derive(Debug, Clone, Copy)]
struct Ttl(Option<u64>);

fn parse_ttl(s: &str) -> Result<Ttl, String> {
    match s {
        "none" | "null" => Ok(Ttl(None)),
        n => match n.parse::<u64>() {
            Ok(0) => Err("must be positive, or `none`".into()),
            Ok(ms) => Ok(Ttl(Some(ms))),
            Err(_) => Err(format!("`{n}` is not a number of milliseconds or `none`")),
        },
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Args = presa_runtime::config::load();
    let secret = args.state_secret.as_deref().filter(|s| !s.is_empty());
    let refusal =
        check_listen(&args.auth, args.listen).err().or_else(|| secret.and_then(|s| check_state_secret(s).err()));
    if let Some(why) = refusal {
        eprintln!("presa-api: {why}");
        std::process::exit(2);
    }
    let telemetry = presa_runtime::telemetry("presa-api", args.log_format).context("setting up telemetry")?;

    let state = match secret {
        Some(s) => StateCodec::new(s.as_bytes()),
        None => {
            tracing::warn!(
                "PRESA_STATE_SECRET is not set: using a random per-process key; \
                 several API pods would not accept each other's requestState"
            );
            StateCodec::random()
        }
    };
    let config = ServerConfig {
        task_ttl_ms: args.task_ttl_ms.0,
        poll_interval_ms: Some(args.poll_interval_ms),
        max_task_input_bytes: args.max_task_input_bytes,
        max_active_tasks_per_scope: (args.max_active_tasks_per_scope > 0).then_some(args.max_active_tasks_per_scope),
        max_listen_streams: args.max_listen_streams,
        ..ServerConfig::default()
    };
    let storage = Storage::from_args(&args.redis, args.max_tasks).await.context("setting up the task store")?;
    if storage.durable {
        tracing::info!("Redis mode: this pod serves requests; presa-worker pods run the tools");
    } else {
        tracing::warn!("embedded mode: tasks live in this process's memory and are lost when it stops");
    }
    let catalog = presa_demo::catalog().context("building the demo catalog")?;
    let tool_scopes: Vec<String> = catalog.tools().flat_map(|t| t.scopes().to_vec()).collect();
    let auth = match args.auth.build(&tool_scopes).await {
        Ok(auth) => auth,
        Err(e) => {
            eprintln!("presa-api: {e}");
            std::process::exit(2);
        }
    };
    tracing::info!(auth = ?args.auth.auth, metadata = ?auth.resource_metadata, "authentication");
    let core = Core::new(config, catalog, storage.backend.clone());
    let server = Server::new(core.clone(), state);

    let grace = Duration::from_millis(args.grace_ms);
    let stop_worker = CancellationToken::new();
    let worker = (!storage.durable).then(|| {
        let config = WorkerConfig { concurrency: args.concurrency, grace, ..WorkerConfig::default() };
        tokio::spawn(Worker::new(core, config).run(stop_worker.clone()))
    });

    let http = HttpConfig {
        allowed_origins: args.allowed_origins.clone(),
        max_body_bytes: args.max_body_bytes,
        ready: Some(storage.ready.clone()),
        metrics: Some(telemetry.metrics.clone()),
        // With Redis, presa-worker pods report the shared work queue.
        queue_metrics: !storage.durable,
        authenticator: auth.authenticator,
        challenge: auth.challenge,
        resource_metadata: auth.resource_metadata,
        ..HttpConfig::default()
    };
    let router = presa_http::router(server.clone(), http);
    let listener =
        tokio::net::TcpListener::bind(args.listen).await.with_context(|| format!("binding {}", args.listen))?;
    tracing::info!(address = %listener.local_addr()?, "presa-api serving MCP at /mcp");

    let shutdown = server.shutdown_token();
    let on_signal = shutdown.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        tracing::info!("shutting down: closing listen streams, finishing in-flight requests");
        on_signal.cancel();
    });
    let serve = presa_http::serve(listener, router, shutdown.clone().cancelled_owned());
    let grace_elapsed = async {
        shutdown.cancelled().await;
        tokio::time::sleep(grace).await;
    };
    tokio::select! {
        r = serve => r.context("serving HTTP")?,
        _ = grace_elapsed => tracing::warn!("grace period elapsed with requests still in flight"),
    }
    stop_worker.cancel();
    if let Some(worker) = worker {
        let _ = tokio::time::timeout(grace + Duration::from_secs(1), worker).await;
    }
    tracing::info!("stopped");
    Ok(())
}
