//! W3C Trace Context and Baggage in and out of presa's carriers.
//!
//! - in: HTTP headers ([`from_headers`]), an MCP `_meta` object
//!   ([`from_meta`], SEP-414 `_meta.traceparent` / `tracestate` / `baggage`),
//!   and the string map a work item carries ([`from_map`]);
//! - out: the context of a span as such a map ([`inject`], [`inject_current`]),
//!   and the context a task's work item carries on ([`for_continuation`]);
//! - [`adopt_request_parent`]: the parent of an MCP server span, by the
//!   precedence of the OpenTelemetry MCP conventions: `_meta` first, the HTTP
//!   headers only when `_meta` carries no context (a differing HTTP context
//!   becomes a span link, so neither is lost).
//!
//! Extraction yields `None` unless the carrier held a valid `traceparent` or
//! some baggage, so callers can tell "no incoming context" from "a context".

use std::{collections::BTreeMap, sync::LazyLock};

use opentelemetry::{
    Context,
    baggage::BaggageExt as _,
    propagation::{Extractor, Injector, TextMapCompositePropagator, TextMapPropagator},
    trace::TraceContextExt as _,
};
use opentelemetry_sdk::propagation::{BaggagePropagator, TraceContextPropagator};
use serde_json::{Map, Value};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// The `_meta` and work-item keys of the W3C context (SEP-414).
pub const KEYS: [&str; 3] = ["traceparent", "tracestate", "baggage"];

/// The context to hand to work that continues the current request elsewhere
/// (a task's work item): the current span's, so the worker's span becomes
/// its child; or, when no OpenTelemetry layer records spans here, the
/// caller's own context from `meta` passed on unchanged, so the trace still
/// joins up wherever spans are exported.
pub fn for_continuation(meta: &Map<String, Value>) -> BTreeMap<String, String> {
    let current = inject_current();
    if !current.is_empty() {
        return current;
    }
    KEYS.into_iter()
        .filter_map(|k| meta.get(k).and_then(Value::as_str).map(|v| (k.to_string(), v.to_string())))
        .collect()
}

/// W3C Trace Context + Baggage: the propagator every helper here uses, and
/// the one [`crate::init`] installs globally.
pub fn propagator() -> TextMapCompositePropagator {
    TextMapCompositePropagator::new(vec![Box::new(TraceContextPropagator::new()), Box::new(BaggagePropagator::new())])
}

/// [`propagator`], built once: every request extracts with it, and building
/// one allocates (a box per propagator, their field lists).
static PROPAGATOR: LazyLock<TextMapCompositePropagator> = LazyLock::new(propagator);

/// A context worth adopting: a valid remote span context, or baggage.
fn meaningful(cx: Context) -> Option<Context> {
    (cx.span().span_context().is_valid() || !cx.baggage().is_empty()).then_some(cx)
}

struct Headers<'a>(&'a http::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

struct Meta<'a>(&'a Map<String, Value>);

impl Extractor for Meta<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        KEYS.contains(&key).then(|| self.0.get(key).and_then(Value::as_str)).flatten()
    }

    fn keys(&self) -> Vec<&str> {
        KEYS.into_iter().filter(|k| self.0.contains_key(*k)).collect()
    }
}

struct Strings<'a>(&'a BTreeMap<String, String>);

impl Extractor for Strings<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

struct StringsOut<'a>(&'a mut BTreeMap<String, String>);

impl Injector for StringsOut<'_> {
    fn set(&mut self, key: &str, value: String) {
        self.0.insert(key.to_string(), value);
    }
}

/// What extracting from a carrier that holds none of [`KEYS`] yields: the
/// current context when it is [`meaningful`], without running the
/// propagators (most requests carry no context, and extraction allocates).
fn current_if_meaningful() -> Option<Context> {
    let worth = Context::map_current(|cx| cx.span().span_context().is_valid() || !cx.baggage().is_empty());
    worth.then(Context::current)
}

/// [`KEYS`] as header names, made once: looking a header up by a `&str`
/// parses the name first (a few hundred instructions each, every request).
static HEADER_KEYS: [http::HeaderName; 3] = [
    http::HeaderName::from_static(KEYS[0]),
    http::HeaderName::from_static(KEYS[1]),
    http::HeaderName::from_static(KEYS[2]),
];

/// The context in `traceparent`, `tracestate` and `baggage` request headers.
pub fn from_headers(headers: &http::HeaderMap) -> Option<Context> {
    if !HEADER_KEYS.iter().any(|k| headers.contains_key(k)) {
        return current_if_meaningful();
    }
    meaningful(PROPAGATOR.extract(&Headers(headers)))
}

/// The context in an MCP `_meta` object (string values of `traceparent`,
/// `tracestate`, `baggage`; anything else is ignored).
pub fn from_meta(meta: &Map<String, Value>) -> Option<Context> {
    if !KEYS.iter().any(|k| meta.contains_key(*k)) {
        return current_if_meaningful();
    }
    meaningful(PROPAGATOR.extract(&Meta(meta)))
}

/// The context in a string map (the `trace` of a work item).
pub fn from_map(map: &BTreeMap<String, String>) -> Option<Context> {
    meaningful(PROPAGATOR.extract(&Strings(map)))
}

/// The W3C context of `span` (and the baggage it carries) as a string map;
/// empty when the span is not part of a trace (no OpenTelemetry layer).
pub fn inject(span: &tracing::Span) -> BTreeMap<String, String> {
    let cx = span.context();
    let mut map = BTreeMap::new();
    if meaningful(cx.clone()).is_some() {
        PROPAGATOR.inject_context(&cx, &mut StringsOut(&mut map));
    }
    map
}

/// [`inject`] for the current span.
pub fn inject_current() -> BTreeMap<String, String> {
    inject(&tracing::Span::current())
}

/// Make `cx` the parent of `span` (which must not have been entered yet).
/// Returns whether it took; without an OpenTelemetry layer it never does.
pub fn set_parent(span: &tracing::Span, cx: Context) -> bool {
    match span.set_parent(cx) {
        Ok(()) => true,
        Err(e) => {
            tracing::trace!(error = %e, "span parent not set");
            false
        }
    }
}

/// Record the trace id of `span` in its `trace_id` field (declared
/// `tracing::field::Empty`), so text logs inside it show the trace.
/// Call after [`set_parent`]: reading the id fixes the span's parent.
pub fn record_trace_id(span: &tracing::Span) {
    let cx = span.context();
    let otel = cx.span();
    let sc = otel.span_context();
    if sc.is_valid() {
        span.record("trace_id", tracing::field::display(sc.trace_id()));
    }
}

/// Where the parent of an MCP server span came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParentSource {
    /// `params._meta.traceparent` (SEP-414).
    Meta,
    /// The HTTP `traceparent` header.
    Http,
    /// No incoming context: a new trace.
    None,
}

/// Give an MCP server span its parent: the context in `_meta` when there is
/// one, else the one in the HTTP headers. When both exist and name different
/// spans, the HTTP one is added as a link (the OTel MCP conventions: the MCP
/// client span is the parent whatever the transport; transport context is
/// recorded as a link). Call before the span is first entered.
pub fn adopt_request_parent(
    span: &tracing::Span,
    meta: Option<&Map<String, Value>>,
    headers: &http::HeaderMap,
) -> ParentSource {
    let from_meta = meta.and_then(from_meta);
    let from_http = from_headers(headers);
    match (from_meta, from_http) {
        (Some(m), http) => {
            if let Some(h) = http {
                let (hs, ms) = (h.span().span_context().clone(), m.span().span_context().clone());
                if hs.is_valid() && hs != ms {
                    span.add_link(hs);
                }
            }
            set_parent(span, m);
            ParentSource::Meta
        }
        (None, Some(h)) => {
            set_parent(span, h);
            ParentSource::Http
        }
        (None, None) => ParentSource::None,
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::TraceContextExt as _;

    use super::*;

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn meta_headers_and_maps_read_the_same_context() {
        let meta: Map<String, Value> =
            serde_json::from_value(serde_json::json!({ "traceparent": TP, "tracestate": "rojo=1", "other": 1 }))
                .unwrap();
        let mut headers = http::HeaderMap::new();
        headers.insert("traceparent", TP.parse().unwrap());
        let map = BTreeMap::from([("traceparent".to_string(), TP.to_string())]);
        for cx in [from_meta(&meta), from_headers(&headers), from_map(&map)] {
            let cx = cx.expect("a context");
            let sc = cx.span().span_context().clone();
            assert_eq!(sc.trace_id().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
            assert_eq!(sc.span_id().to_string(), "00f067aa0ba902b7");
            assert!(sc.is_remote() && sc.is_sampled());
        }
    }

    #[test]
    fn junk_or_missing_context_is_none() {
        let meta: Map<String, Value> =
            serde_json::from_value(serde_json::json!({ "traceparent": "00-zz-01", "tracestate": 5 })).unwrap();
        assert!(from_meta(&meta).is_none());
        assert!(from_meta(&Map::new()).is_none());
        assert!(from_headers(&http::HeaderMap::new()).is_none());
        assert!(from_map(&BTreeMap::new()).is_none());
    }

    #[test]
    fn baggage_alone_is_a_context() {
        let map = BTreeMap::from([("baggage".to_string(), "tenant=acme".to_string())]);
        let cx = from_map(&map).expect("baggage");
        assert_eq!(cx.baggage().get("tenant").map(|v| v.as_str().to_string()), Some("acme".into()));
    }

    // The tests below need the OpenTelemetry layer, which only `exporters`
    // builds (the workspace's test run turns it on; `-p presa-telemetry`
    // alone runs the rest).
    #[cfg(feature = "exporters")]
    fn with_otel<R>(f: impl FnOnce() -> R) -> R {
        use tracing_subscriber::layer::SubscriberExt as _;
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
        let subscriber = tracing_subscriber::registry().with(crate::otel_layer(&provider));
        tracing::subscriber::with_default(subscriber, f)
    }

    #[cfg(feature = "exporters")]
    fn ids(span: &tracing::Span) -> (String, String) {
        let cx = span.context();
        let sc = cx.span().span_context().clone();
        (sc.trace_id().to_string(), sc.span_id().to_string())
    }

    #[test]
    #[cfg(feature = "exporters")]
    fn a_span_injects_its_own_id_in_its_parents_trace() {
        with_otel(|| {
            let span = tracing::info_span!("request");
            let map = BTreeMap::from([
                ("traceparent".to_string(), TP.to_string()),
                ("baggage".to_string(), "tenant=acme".to_string()),
            ]);
            assert!(set_parent(&span, from_map(&map).unwrap()));
            let injected = span.in_scope(inject_current);
            let (trace, id) = ids(&span);
            assert_eq!(trace, "4bf92f3577b34da6a3ce929d0e0e4736");
            assert_eq!(injected["traceparent"], format!("00-{trace}-{id}-01"));
            assert_eq!(injected["baggage"], "tenant=acme");
        });
    }

    #[test]
    #[cfg(feature = "exporters")]
    fn meta_context_wins_over_http_context() {
        const OTHER: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        with_otel(|| {
            let meta: Map<String, Value> = serde_json::from_value(serde_json::json!({ "traceparent": TP })).unwrap();
            let mut headers = http::HeaderMap::new();
            headers.insert("traceparent", OTHER.parse().unwrap());
            let both = tracing::info_span!("both");
            assert_eq!(adopt_request_parent(&both, Some(&meta), &headers), ParentSource::Meta);
            assert_eq!(ids(&both).0, "4bf92f3577b34da6a3ce929d0e0e4736");
            let http_only = tracing::info_span!("http");
            assert_eq!(adopt_request_parent(&http_only, Some(&Map::new()), &headers), ParentSource::Http);
            assert_eq!(ids(&http_only).0, "0af7651916cd43dd8448eb211c80319c");
            let neither = tracing::info_span!("neither");
            assert_eq!(adopt_request_parent(&neither, None, &http::HeaderMap::new()), ParentSource::None);
        });
    }

    #[test]
    fn without_an_otel_layer_nothing_is_injected() {
        assert!(inject_current().is_empty());
    }
}
