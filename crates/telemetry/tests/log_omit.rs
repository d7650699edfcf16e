//! With the subscriber `init` installs and no OpenTelemetry layer, a span
//! declaring `log.omit` is not built at all (so a Redis round trip costs no
//! span), while every other span is. The subscriber is process-wide, so this
//! binary holds this one test.
#![cfg(feature = "exporters")]

use presa_telemetry::{LOG_OMIT, LogFormat, init_with};
use tracing::field::Empty;

#[test]
fn trace_only_spans_are_not_built_without_an_opentelemetry_layer() {
    assert!(!presa_telemetry::otlp_configured(), "run without OTEL_EXPORTER_OTLP_* set");
    let _guard = init_with("log-omit-test", LogFormat::Text, false).unwrap();
    assert_eq!(LOG_OMIT, "log.omit", "the spelling spans declare");
    let omitted = tracing::info_span!("redis", db.namespace = "presa", log.omit = Empty);
    assert!(omitted.is_disabled());
    let logged = tracing::info_span!("task", tool = "echo");
    assert!(!logged.is_disabled());
    if std::env::var_os("RUST_LOG").is_none() {
        // Below the default level (info) a span is not built either.
        assert!(tracing::trace_span!("chatty").is_disabled());
    }
}
