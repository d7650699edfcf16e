//! The worker process (`presa-worker`, or `<server> worker`): its flags
//! ([`WorkerArgs`]) and its life: it claims task work from Redis streams and
//! runs the tool handlers, serving only `/healthz`, `/readyz` and `/metrics`
//! (with the work queue gauges of every partition). Run as many as you like;
//! they survive each other's crashes (leases, recovery, fencing).

use std::{net::SocketAddr, time::Duration};

use axum::{Router, http::StatusCode, response::IntoResponse, routing::get};
use clap::Parser;
use presa_server::{Core, Worker, WorkerConfig};
use presa_telemetry::LogFormat;
use tokio_util::sync::CancellationToken;

use crate::{checked::Checked, error::RuntimeError, process::shutdown_signal, storage::RedisArgs, storage::Storage};

/// The flags and environment of a worker process (`presa-worker`).
#[derive(Debug, Parser)]
#[command(version, about = "Runs the tool handlers of tasks queued in Redis.")]
pub struct WorkerArgs {
    #[command(flatten)]
    redis: RedisArgs,

    #[command(flatten)]
    artifacts: crate::artifacts::ArtifactArgs,

    /// Address for `/healthz`, `/readyz` and `/metrics`.
    #[arg(long, env = "PRESA_WORKER_LISTEN", default_value = "127.0.0.1:9090")]
    listen: SocketAddr,

    /// This worker's name (its Redis consumer name); unique per pod.
    #[arg(long, env = "PRESA_WORKER_ID")]
    worker_id: Option<String>,

    #[command(flatten)]
    pool: crate::pool::PoolArgs,

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

    /// Largest stored task in bytes (status message, questions and result
    /// included); an outcome that would exceed it ends the task failed.
    #[arg(long, env = "PRESA_MAX_TASK_BYTES", default_value_t = 2 * 1024 * 1024)]
    max_task_bytes: usize,

    /// Largest task result in bytes; a bigger result ends the task failed, saying so.
    #[arg(long, env = "PRESA_MAX_RESULT_BYTES", default_value_t = 1024 * 1024)]
    max_result_bytes: usize,

    /// Log format.
    #[arg(long, env = "PRESA_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

/// Run a worker process for `app` with `args` until SIGTERM/SIGINT and its drain.
pub(crate) async fn run(app: Checked, args: WorkerArgs) -> Result<(), RuntimeError> {
    let Some(redis) = args.redis.config()? else {
        return Err(RuntimeError::Config(
            "--redis-url (PRESA_REDIS_URL), --redis-url-file (PRESA_REDIS_URL_FILE) or --redis-sentinels \
             (PRESA_REDIS_SENTINELS) is required: \
             a worker runs tasks queued in Redis"
                .into(),
        ));
    };
    check_leases(&args)?;
    let telemetry = crate::process::telemetry(&format!("{}-worker", app.name), args.log_format)?;
    let storage = Storage::redis_with(redis, &args.redis).await?.also_ready(app.ready.clone().map(|r| r.0));
    let server_config = app.server_config().with(|c| {
        c.max_task_bytes = args.max_task_bytes;
        c.max_result_bytes = args.max_result_bytes;
    });
    let upstreams = app.upstreams.clone();
    let mut core = Core::new(server_config, app.catalog, storage.backend.clone());
    if let Some(artifacts) = args.artifacts.open(false)? {
        core = core.with_artifacts(artifacts);
    }
    crate::process::announce_catalog_changes(&core);
    let id = args.worker_id.clone().unwrap_or_else(|| {
        let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "worker".into());
        format!("{host}-{}", std::process::id())
    });
    let grace = Duration::from_millis(args.grace_ms);
    let config = WorkerConfig {
        lease: Duration::from_millis(args.lease_ms),
        max_deliveries: args.max_deliveries,
        ..args.pool.worker_config(id, grace)?
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
    let (listener, address) = crate::process::bind(args.listen).await?;
    tracing::info!(%address, "{}-worker health endpoints up", app.name);
    let health_stop = stop.clone();
    tokio::spawn(presa_http::serve(listener, health, async move { health_stop.cancelled().await }));

    let on_signal = stop.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        tracing::info!("shutting down: no new claims; running handlers get the grace period");
        on_signal.cancel();
    });
    let mut node = presa_server::Node::new(config.id.clone(), "worker", config.concurrency);
    if let Some(source) = upstreams {
        node = node.with_upstreams(source);
    }
    tokio::spawn(node.clone().heartbeat(core.clone(), stop.clone()));
    Worker::new(core, config).with_node(node).run(stop).await;
    Ok(())
}

/// `--lease-ms` is at least 300 ms and at most `--max-lease-ms`: the store
/// would cut a longer lease to the horizon, while the worker renews on its
/// own lease's clock, so its work would lapse between renewals.
fn check_leases(args: &WorkerArgs) -> Result<(), RuntimeError> {
    if args.lease_ms < 300 {
        return Err(RuntimeError::Config("--lease-ms (PRESA_LEASE_MS) must be at least 300".into()));
    }
    if args.lease_ms > args.redis.max_lease_ms {
        return Err(RuntimeError::Config(format!(
            "--lease-ms (PRESA_LEASE_MS) {} is longer than --max-lease-ms (PRESA_MAX_LEASE_MS) {}",
            args.lease_ms, args.redis.max_lease_ms
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    fn leases(flags: &[&str]) -> Result<(), RuntimeError> {
        let args = WorkerArgs::try_parse_from(["presa-worker"].iter().chain(flags)).unwrap();
        check_leases(&args)
    }

    #[test]
    fn a_lease_must_fit_under_the_recovery_horizon() {
        assert!(leases(&[]).is_ok(), "the defaults: 30 s under 10 minutes");
        assert!(leases(&["--lease-ms", "299"]).is_err());
        let err = leases(&["--lease-ms", "60000", "--max-lease-ms", "30000"]).unwrap_err().to_string();
        assert!(err.contains("--lease-ms (PRESA_LEASE_MS) 60000 is longer than --max-lease-ms"), "{err}");
        assert!(leases(&["--lease-ms", "30000", "--max-lease-ms", "30000"]).is_ok());
    }
}
