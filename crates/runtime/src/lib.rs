//! The processes of a presa server, for any catalog: [`App`] runs the API
//! process ([`ApiArgs`]) or a worker process ([`WorkerArgs`]) with every flag,
//! environment variable, health endpoint, metric, trace and the graceful
//! drain of the shipped `presa-api` and `presa-worker`, whose `main`s are a
//! few lines around the demo catalog. Underneath, the plumbing they share: configuration ([`config::load`], `--print-config`),
//! shutdown signals, and choosing the storage (in-memory,
//! or Redis) behind the store traits ([`Storage`]), and setting up logs,
//! traces and metrics once ([`telemetry`], on top of `presa-telemetry`);
//! the authentication flags and start-up refusals ([`auth`]).

mod alloc;
mod api;
mod app;
mod artifacts;
pub mod auth;
mod checked;
pub mod config;
mod error;
mod retry;
pub mod secret_file;
mod storage;
mod worker;

#[cfg(feature = "jemalloc")]
pub use alloc::Jemalloc;
pub use alloc::jemalloc_in_use;
pub use api::ApiArgs;
pub use app::{App, Defaults, Process, parse_args, parse_args_with};
pub use artifacts::ArtifactArgs;
pub use error::RuntimeError;
pub use retry::RetryArgs;
pub use storage::{DurabilityLevel, RedisArgs, Storage, StorageError, Switch};
pub use worker::WorkerArgs;

use std::sync::Arc;

/// A binary's logs, traces and metrics, set up by [`telemetry`]. Keep it
/// alive until the process ends: dropping it flushes buffered spans.
pub struct Telemetry {
    _guard: presa_telemetry::TelemetryGuard,
    /// Renders every metric for `GET /metrics`.
    pub metrics: presa_http::RenderMetrics,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry").finish_non_exhaustive()
    }
}

/// Install the process-wide log and trace subscriber of `service` (OTLP
/// export when the `OTEL_*` variables ask for it) and the Prometheus recorder.
pub fn telemetry(
    service: &str,
    format: presa_telemetry::LogFormat,
) -> Result<Telemetry, presa_telemetry::TelemetryError> {
    let guard = presa_telemetry::init(service, format)?;
    if guard.exporting() {
        tracing::info!("exporting traces over OTLP");
    }
    let handle = presa_telemetry::metrics::install();
    Ok(Telemetry { _guard: guard, metrics: Arc::new(move || handle.render()) })
}

/// Announce every replacement of `core`'s catalog on the bus, so that every
/// API process tells its `subscriptions/listen` streams the lists changed.
pub(crate) fn announce_catalog_changes(core: &presa_server::Core) {
    let mut changes = core.catalog_cell().changes();
    let bus = core.bus().clone();
    tokio::spawn(async move {
        while changes.changed().await.is_ok() {
            for list in presa_server::ListChanged::ALL {
                if let Err(e) = bus.publish(list.method()).await {
                    tracing::warn!(error = %e, "announcing a catalog change failed");
                }
            }
        }
    });
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
}

/// Fair shares of a worker's slots, common to presa-worker and the embedded
/// worker of presa-api.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct ShareArgs {
    /// The most run slots (of `--concurrency`) one principal's tasks hold on
    /// a worker; its further tasks stay queued while others' run. Default: a
    /// quarter of `--concurrency` (at least 1), so three principals at their
    /// share leave a quarter of every worker to everyone else; 0: no cap.
    /// The anonymous principal (`--auth none`) has no cap.
    #[arg(long, env = "PRESA_MAX_RUNNING_PER_SCOPE")]
    pub max_running_per_scope: Option<usize>,

    /// The most parked slots (of `--max-parked`) one principal's tasks hold
    /// on a worker; past it its tasks waiting for input keep their run slot
    /// (and count against its run share). Default: a quarter of
    /// `--max-parked` (at least 1); 0: no cap.
    #[arg(long, env = "PRESA_MAX_PARKED_PER_SCOPE")]
    pub max_parked_per_scope: Option<usize>,
}
