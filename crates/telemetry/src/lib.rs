//! Telemetry for presa, in one crate: logs, traces, context propagation and metrics.
//!
//! - [`init`]: the process-wide `tracing` subscriber of a binary: an `EnvFilter`
//!   (`RUST_LOG`, default `info`) over a text or JSON log layer on stderr, and an
//!   OpenTelemetry layer. Spans are always built (so trace ids reach the logs and
//!   the work queue), but **exported only when `OTEL_EXPORTER_OTLP_ENDPOINT` or
//!   `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set** (OTLP over gRPC, configured by
//!   the standard `OTEL_*` variables). The returned [`TelemetryGuard`] flushes on drop.
//! - [`propagation`]: W3C Trace Context and Baggage in and out of HTTP headers,
//!   an MCP `_meta` object (SEP-414) and the `BTreeMap` a work item carries.
//! - [`metrics`]: the Prometheus recorder and every `presa_*` series, named in one place.
//! - [`redact`]: secrets kept out of logs ([`redact_url`]: a URL's password).
//! - `testing` (feature `testing`): an in-memory span exporter for tests.
//!
//! Libraries depend on this crate with no features: recording spans and
//! metrics and propagating context pull in no exporter, no subscriber setup
//! and no CLI parser. Binaries enable `exporters` for [`init`], the log
//! formats and the Prometheus recorder ([`metrics::install`]).
//!
//! Invariants: without an OTLP endpoint nothing is exported and nothing is
//! logged about exporting; propagation always speaks W3C `traceparent`,
//! `tracestate` and `baggage` (the MCP wire contract), whatever global
//! propagator another library installs; span fields named `otel.*` follow
//! `tracing-opentelemetry` (`otel.name`, `otel.kind`, `otel.status_code`).

#[cfg(feature = "exporters")]
mod clock;
#[cfg(feature = "exporters")]
mod logfmt;
pub mod metrics;
pub mod propagation;
pub mod redact;
#[cfg(feature = "exporters")]
mod setup;
#[cfg(feature = "testing")]
pub mod testing;

#[cfg(feature = "exporters")]
pub use setup::{LogFormat, TRACE_FILTER_VAR, TelemetryError, TelemetryGuard, init, init_with, otlp_configured};

pub use redact::redact_url;

/// The instrumentation scope of presa's spans.
pub const TRACER_NAME: &str = "presa";

/// The field that makes a span trace-only: declared (as `Empty`, never
/// recorded, so no exporter sees it), it keeps the span out of the log
/// layers `init` installs (feature `exporters`). For spans that never hold a log line and come
/// by the thousand (a Redis round trip's): the logs would not show them, yet
/// building one for the log layer and formatting its fields costs CPU on
/// every call. Without an OpenTelemetry layer such a span is not built at
/// all (`Span::is_disabled`); with one, only that layer records it.
pub const LOG_OMIT: &str = "log.omit";

#[cfg(feature = "exporters")]
use opentelemetry::trace::TracerProvider as _;

/// The OpenTelemetry layer over `provider`: what production and tests share.
#[cfg(feature = "exporters")]
pub(crate) fn otel_layer<S>(
    provider: &opentelemetry_sdk::trace::SdkTracerProvider,
) -> impl tracing_subscriber::Layer<S> + Send + Sync + 'static
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a> + Send + Sync,
{
    tracing_opentelemetry::layer()
        .with_tracer(provider.tracer(TRACER_NAME))
        .with_threads(false)
        .with_tracked_inactivity(false)
}
