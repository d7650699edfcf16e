//! `presa-worker`: claims task work from Redis streams and runs the tool
//! handlers. Serves only `/healthz`, `/readyz` and `/metrics` (with the work
//! queue gauges of every partition). Run as many as you like;
//! they survive each other's crashes (leases, recovery, fencing).

use std::{net::SocketAddr, time::Duration};

use anyhow::{Context, bail};
use axum::{Router, http::StatusCode, response::IntoResponse, routing::get};
use clap::Parser;
use presa_runtime::{RedisArgs, Storage, shutdown_signal};
use presa_server::{Core, ServerConfig, Worker, WorkerConfig};
use presa_telemetry::LogFormat;
use tokio_util::sync::CancellationToken;

/// presa-worker: runs presa's tool handlers for tasks queued in Redis.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    #[command(flatten)]
    redis: RedisArgs,

    /// Address for `/healthz`, `/readyz` and `/metrics`.
    #[arg(long, env = "PRESA_WORKER_LISTEN", default_value = "127.0.0.1:9090")]
    listen: SocketAddr,

    /// This worker's name (its Redis consumer name); unique per pod.
    #[arg(long, env = "PRESA_WORKER_ID")]
    worker_id: Option<String>,

    /// Tool handlers run at once.
    #[arg(long, env = "PRESA_CONCURRENCY", default_value_t = 64)]
    concurrency: usize,

    /// Lease on claimed work, in ms: a worker silent for this long loses its
    /// work to another. Renewed every third of it.
    #[arg(long, env = "PRESA_LEASE_MS", default_value_t = 30_000)]
    lease_ms: u64,

    /// Deliveries after which a task ends failed (poison task).
    #[arg(long, env = "PRESA_MAX_DELIVERIES", default_value_t = 5)]
    max_deliveries: u64,

    /// Grace period on SIGTERM/SIGINT for running handlers, in ms; what is
    /// still running then is handed back to other workers at once.
    #[arg(long, env = "PRESA_GRACE_MS", default_value_t = 20_000)]
    grace_ms: u64,

    /// Log format.
    #[arg(long, env = "PRESA_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Args = presa_runtime::config::load();
    let telemetry = presa_runtime::telemetry("presa-worker", args.log_format).context("setting up telemetry")?;
    let Some(url) = args.redis.redis_url.as_deref().filter(|u| !u.is_empty()) else {
        bail!("--redis-url (PRESA_REDIS_URL) is required: presa-worker runs tasks queued in Redis");
    };
    if args.lease_ms < 300 {
        bail!("--lease-ms (PRESA_LEASE_MS) must be at least 300");
    }
    let storage = Storage::redis(url, &args.redis).await.context("connecting to Redis")?;
    let catalog = presa_demo::catalog().context("building the demo catalog")?;
    let core = Core::new(ServerConfig::default(), catalog, storage.backend.clone());
    let id = args.worker_id.clone().unwrap_or_else(|| {
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "worker".into());
        format!("{host}-{}", std::process::id())
    });
    let grace = Duration::from_millis(args.grace_ms);
    let config = WorkerConfig {
        id,
        concurrency: args.concurrency,
        lease: Duration::from_millis(args.lease_ms),
        max_deliveries: args.max_deliveries,
        grace,
        ..WorkerConfig::default()
    };

    let stop = CancellationToken::new();
    let ready = storage.ready.clone();
    let live = storage.live.clone();
    let detail = storage.ready_detail.clone();
    let draining = stop.clone();
    let health = Router::new()
        .merge(presa_http::metrics_router(presa_http::refresh_queue_gauges(core.clone()), telemetry.metrics.clone()))
        .route(
            "/healthz",
            get(move || {
                let live = live.clone();
                async move { presa_http::liveness(Some(&live)).await }
            }),
        )
        .route(
            "/readyz",
            get(move || {
                let (ready, detail, draining) = (ready.clone(), detail.clone(), draining.clone());
                async move {
                    if draining.is_cancelled() {
                        (StatusCode::SERVICE_UNAVAILABLE, "draining").into_response()
                    } else {
                        presa_http::readiness(Some(&ready), Some(&detail)).await
                    }
                }
            }),
        );
    let listener =
        tokio::net::TcpListener::bind(args.listen).await.with_context(|| format!("binding {}", args.listen))?;
    tracing::info!(address = %listener.local_addr()?, "presa-worker health endpoints up");
    let health_stop = stop.clone();
    tokio::spawn(presa_http::serve(listener, health, async move { health_stop.cancelled().await }));

    let on_signal = stop.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        tracing::info!("shutting down: no new claims; running handlers get the grace period");
        on_signal.cancel();
    });
    Worker::new(core, config).run(stop).await;
    Ok(())
}
