//! Trace capture for tests: a tracer provider exporting to memory, and a
//! subscriber to install per test with [`TestTracing::set_default`] (a
//! thread-local default: use a current-thread runtime, so spawned tasks see it).

pub use opentelemetry::trace::{SpanId, SpanKind, Status, TraceId};
use opentelemetry_sdk::trace::SdkTracerProvider;
pub use opentelemetry_sdk::trace::{InMemorySpanExporter, SpanData};
use tracing::Subscriber;
use tracing_subscriber::{Layer, layer::SubscriberExt};

/// Spans of one test, captured in memory.
#[derive(Debug)]
pub struct TestTracing {
    exporter: InMemorySpanExporter,
    provider: SdkTracerProvider,
}

impl Default for TestTracing {
    fn default() -> Self {
        Self::new()
    }
}

impl TestTracing {
    /// A provider that exports every ended span to memory at once.
    pub fn new() -> Self {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder().with_simple_exporter(exporter.clone()).build();
        TestTracing { exporter, provider }
    }

    /// A subscriber with presa's OpenTelemetry layer over this provider (and no log output).
    pub fn subscriber(&self) -> impl Subscriber + Send + Sync + 'static {
        let filter = crate::setup::trace_filter().expect("the default trace filter parses");
        tracing_subscriber::registry().with(crate::otel_layer(&self.provider).with_filter(filter))
    }

    /// Install [`TestTracing::subscriber`] as this thread's default until the guard drops.
    pub fn set_default(&self) -> tracing::subscriber::DefaultGuard {
        tracing::subscriber::set_default(self.subscriber())
    }

    /// Every span ended so far.
    pub fn spans(&self) -> Vec<SpanData> {
        let _ = self.provider.force_flush();
        self.exporter.get_finished_spans().unwrap_or_default()
    }
}

/// The value of attribute `key` of `span`, as a string.
pub fn attribute(span: &SpanData, key: &str) -> Option<String> {
    span.attributes.iter().find(|kv| kv.key.as_str() == key).map(|kv| kv.value.as_str().into_owned())
}
