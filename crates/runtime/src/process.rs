//! What every process sets up around its work: logs, traces and metrics
//! ([`telemetry`]), the signal that starts its drain ([`shutdown_signal`]),
//! and announcing catalog changes to the listen streams of every API pod.

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

/// A listener on `at`, and the address it got (`at` with port 0: a free one).
pub(crate) async fn bind(
    at: std::net::SocketAddr,
) -> Result<(tokio::net::TcpListener, std::net::SocketAddr), crate::error::RuntimeError> {
    let listener = tokio::net::TcpListener::bind(at).await.map_err(|e| crate::error::RuntimeError::Bind(at, e))?;
    let address = listener.local_addr().map_err(|e| crate::error::RuntimeError::Bind(at, e))?;
    Ok((listener, address))
}
