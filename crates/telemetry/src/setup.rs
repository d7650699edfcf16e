//! The process-wide setup of a binary (feature `exporters`): the `tracing`
//! subscriber with its log layer and OTLP export, configured from the
//! environment. Libraries never need it; they only record.

use std::sync::{Arc, OnceLock};

use opentelemetry_sdk::{Resource, trace::SdkTracerProvider};
use tracing_subscriber::{EnvFilter, Layer, layer::SubscriberExt, registry::LookupSpan, util::SubscriberInitExt};

use crate::{clock::Rfc3339, logfmt, propagation};

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines; trace ids appear in the span context (`trace_id=…`).
    Text,
    /// One JSON object per line, with top-level `trace_id` and `span_id` inside a trace.
    Json,
}

/// Why telemetry could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The OTLP exporter could not be built (a malformed endpoint or header variable).
    #[error("building the OTLP span exporter: {0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
    /// A global `tracing` subscriber was installed already.
    #[error("installing the tracing subscriber: {0}")]
    Subscriber(#[from] tracing_subscriber::util::TryInitError),
    /// A filter variable does not parse.
    #[error("parsing {var}: {source}")]
    Filter {
        /// The variable.
        var: &'static str,
        /// The parse error.
        source: tracing_subscriber::filter::ParseError,
    },
}

/// The variable selecting which spans the OpenTelemetry layer records
/// (`EnvFilter` syntax, default `info`). Independent of `RUST_LOG`, so quieter
/// logs do not cost traces.
pub const TRACE_FILTER_VAR: &str = "PRESA_TRACE_FILTER";

/// Targets whose spans and events never become spans: the exporter's own
/// stack, which would otherwise trace its own exports.
const EXPORTER_TARGETS: &[&str] =
    &["opentelemetry", "opentelemetry_sdk", "opentelemetry_otlp", "tonic", "h2", "hyper", "hyper_util", "tower"];

/// Keeps the tracer provider alive; on drop, exports what is buffered and shuts it down.
#[must_use = "dropping the guard shuts tracing export down"]
pub struct TelemetryGuard {
    provider: SdkTracerProvider,
    exporting: bool,
}

impl std::fmt::Debug for TelemetryGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TelemetryGuard").field("exporting", &self.exporting).finish_non_exhaustive()
    }
}

impl TelemetryGuard {
    /// Whether spans are exported over OTLP.
    pub fn exporting(&self) -> bool {
        self.exporting
    }
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!(error = %e, "flushing traces on shutdown failed");
        }
    }
}

/// Whether the environment asks for OTLP export.
pub fn otlp_configured() -> bool {
    ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
        .iter()
        .any(|v| std::env::var(v).is_ok_and(|s| !s.trim().is_empty()))
}

/// Install the process-wide subscriber and tracer provider for `service_name`
/// (overridden by `OTEL_SERVICE_NAME`), and the global W3C propagator.
///
/// The OpenTelemetry layer is installed only when spans are exported
/// ([`otlp_configured`]): without an exporter no span is built for it, and
/// log lines carry no `trace_id` (nothing would show that trace).
///
/// Call once, inside the Tokio runtime (the gRPC exporter needs it), and keep
/// the guard until the process ends.
pub fn init(service_name: &str, format: LogFormat) -> Result<TelemetryGuard, TelemetryError> {
    init_with(service_name, format, otlp_configured())
}

/// [`init`], with the OpenTelemetry layer installed when `otel_layer` even
/// without an exporter (spans are then built and dropped: what `presa-bench
/// --telemetry otel` measures).
pub fn init_with(service_name: &str, format: LogFormat, otel_layer: bool) -> Result<TelemetryGuard, TelemetryError> {
    opentelemetry::global::set_text_map_propagator(propagation::propagator());
    let exporting = otlp_configured();
    let otel_layer = otel_layer || exporting;
    if exporting
        && let Ok(protocol) = std::env::var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            .or_else(|_| std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL"))
        && protocol != "grpc"
    {
        eprintln!("presa: OTEL_EXPORTER_OTLP_PROTOCOL={protocol} is not supported; exporting OTLP over gRPC");
    }
    let mut builder = SdkTracerProvider::builder().with_resource(resource(service_name));
    if exporting {
        let exporter = opentelemetry_otlp::SpanExporter::builder().with_tonic().build()?;
        builder = builder.with_batch_exporter(exporter);
    }
    let provider = builder.build();
    opentelemetry::global::set_tracer_provider(provider.clone());

    let log_filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let log_filter = logfmt::LogFilter::new(log_filter);
    // Every layer is behind a filter of its own and none is an `Option`:
    // a missing (`None`) or unfiltered layer would answer "interested" for
    // every callsite, and a span every present filter leaves out (a
    // trace-only span, see `LogFilter`) would still be built.
    if otel_layer {
        let otel = crate::otel_layer(&provider).with_filter(trace_filter()?);
        tracing_subscriber::registry().with(otel).with(log_layer(format, log_filter)).try_init()?;
    } else {
        tracing_subscriber::registry().with(log_layer(format, log_filter)).try_init()?;
    }
    Ok(TelemetryGuard { provider, exporting })
}

/// The log layer of `format` on stderr behind `filter` (boxed: the two
/// formats are two types).
fn log_layer<S>(format: LogFormat, filter: logfmt::LogFilter) -> Box<dyn Layer<S> + Send + Sync>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    match format {
        // Colour only on a terminal: a pod's stderr goes to a log collector,
        // where escape codes are noise (and cost ~2 % of a worker's instructions).
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_timer(Rfc3339)
            .with_writer(std::io::stderr)
            .fmt_fields(logfmt::TextFields)
            .with_filter(filter)
            .boxed(),
        LogFormat::Json => {
            let ids = Arc::new(OnceLock::new());
            tracing_subscriber::fmt::layer()
                .json()
                .with_writer(std::io::stderr)
                .event_format(logfmt::WithTraceIds::new(ids.clone()))
                .and_then(logfmt::CaptureDispatch::new(ids))
                .with_filter(filter)
                .boxed()
        }
    }
}

/// The resource: `OTEL_SERVICE_NAME` (or `service.name` in
/// `OTEL_RESOURCE_ATTRIBUTES`) when set, else `service_name`.
fn resource(service_name: &str) -> Resource {
    let named_by_env = std::env::var("OTEL_SERVICE_NAME").is_ok_and(|s| !s.is_empty())
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|s| s.contains("service.name="));
    let builder = Resource::builder();
    if named_by_env { builder.build() } else { builder.with_service_name(service_name.to_string()).build() }
}

/// The filter of the OpenTelemetry layer: [`TRACE_FILTER_VAR`] or `info`, never the exporter's own stack.
pub(crate) fn trace_filter() -> Result<EnvFilter, TelemetryError> {
    let given = std::env::var(TRACE_FILTER_VAR).ok().filter(|s| !s.trim().is_empty());
    let mut filter = match given {
        Some(s) => {
            EnvFilter::builder().parse(s).map_err(|source| TelemetryError::Filter { var: TRACE_FILTER_VAR, source })?
        }
        None => EnvFilter::new("info"),
    };
    for target in EXPORTER_TARGETS {
        filter = filter.add_directive(format!("{target}=off").parse().expect("a valid directive"));
    }
    Ok(filter)
}
