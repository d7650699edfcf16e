//! Log formatting details: trace ids in JSON lines; in text, quieter span
//! fields and control characters escaped (JSON escapes them by itself); the
//! log layers' filter, which keeps trace-only spans ([`crate::LOG_OMIT`]) out.

use std::{
    cell::RefCell,
    fmt::{self, Write as _},
    sync::{Arc, OnceLock},
};

use opentelemetry::trace::TraceContextExt as _;
use tracing::{
    Dispatch, Event, Metadata, Subscriber,
    dispatcher::WeakDispatch,
    field::{Field, Visit},
    level_filters::LevelFilter,
    span,
    subscriber::Interest,
};
use tracing_subscriber::{
    EnvFilter, Layer,
    field::RecordFields,
    fmt::{
        FmtContext, FormatEvent, FormatFields,
        format::{Format, Json, Writer},
    },
    layer::{Context, Filter},
    registry::LookupSpan,
};

use crate::clock::Rfc3339;

/// The filter of the log layers: `RUST_LOG`'s [`EnvFilter`], and never a
/// span declaring a [`crate::LOG_OMIT`] field. Such a span (a Redis round
/// trip, several a task) holds no log line, so a log layer would only have
/// built it and formatted its fields for nothing; left out, with no
/// OpenTelemetry layer either, it is not built at all.
pub(crate) struct LogFilter {
    env: EnvFilter,
    /// Whether `env` has a directive that depends on spans (a span name or
    /// field values, `target[span{field=value}]=level`). Only such a
    /// directive makes `EnvFilter` track spans; without one, its span
    /// callbacks look each span up for nothing, at every enter and exit.
    span_dependent: bool,
}

impl LogFilter {
    pub(crate) fn new(env: EnvFilter) -> Self {
        // `EnvFilter` displays its directives as parsed, and only a
        // span-dependent one is written with brackets (a target never has any).
        let span_dependent = env.to_string().contains('[');
        LogFilter { env, span_dependent }
    }
}

/// Whether the log layers see `meta`: everything but trace-only spans.
fn logged(meta: &Metadata<'_>) -> bool {
    !(meta.is_span() && meta.fields().field(crate::LOG_OMIT).is_some())
}

impl<S> Filter<S> for LogFilter {
    fn enabled(&self, meta: &Metadata<'_>, cx: &Context<'_, S>) -> bool {
        logged(meta) && Filter::<S>::enabled(&self.env, meta, cx)
    }

    /// Decided once per callsite, as `EnvFilter` decides its static directives.
    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> Interest {
        if logged(meta) { Filter::<S>::callsite_enabled(&self.env, meta) } else { Interest::never() }
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Filter::<S>::max_level_hint(&self.env)
    }

    // The span callbacks reach `EnvFilter` only when it tracks spans.

    fn on_new_span(&self, attrs: &span::Attributes<'_>, id: &span::Id, cx: Context<'_, S>) {
        if self.span_dependent {
            Filter::<S>::on_new_span(&self.env, attrs, id, cx);
        }
    }

    fn on_record(&self, id: &span::Id, values: &span::Record<'_>, cx: Context<'_, S>) {
        if self.span_dependent {
            Filter::<S>::on_record(&self.env, id, values, cx);
        }
    }

    fn on_enter(&self, id: &span::Id, cx: Context<'_, S>) {
        if self.span_dependent {
            Filter::<S>::on_enter(&self.env, id, cx);
        }
    }

    fn on_exit(&self, id: &span::Id, cx: Context<'_, S>) {
        if self.span_dependent {
            Filter::<S>::on_exit(&self.env, id, cx);
        }
    }

    fn on_close(&self, id: span::Id, cx: Context<'_, S>) {
        if self.span_dependent {
            Filter::<S>::on_close(&self.env, id, cx);
        }
    }
}

/// Remembers the dispatcher the subscriber became, so the JSON formatter can
/// ask the OpenTelemetry layer for span contexts while formatting (when
/// `tracing::dispatcher::get_default` would answer the no-op dispatcher).
pub(crate) struct CaptureDispatch(Arc<OnceLock<WeakDispatch>>);

impl CaptureDispatch {
    pub(crate) fn new(slot: Arc<OnceLock<WeakDispatch>>) -> Self {
        CaptureDispatch(slot)
    }
}

impl<S: Subscriber> Layer<S> for CaptureDispatch {
    fn on_register_dispatch(&self, subscriber: &Dispatch) {
        let _ = self.0.set(subscriber.downgrade());
    }
}

/// The standard JSON line, with `trace_id` and `span_id` first when the
/// event happens inside a span that belongs to a trace.
pub(crate) struct WithTraceIds {
    inner: Format<Json, Rfc3339>,
    dispatch: Arc<OnceLock<WeakDispatch>>,
}

impl WithTraceIds {
    pub(crate) fn new(dispatch: Arc<OnceLock<WeakDispatch>>) -> Self {
        WithTraceIds { inner: tracing_subscriber::fmt::format().json().with_timer(Rfc3339), dispatch }
    }

    /// The ids of the innermost span (of the event's scope) the OpenTelemetry layer knows.
    fn ids<S, N>(&self, ctx: &FmtContext<'_, S, N>) -> Option<(String, String)>
    where
        S: Subscriber + for<'a> LookupSpan<'a>,
        N: for<'a> FormatFields<'a> + 'static,
    {
        let dispatch = self.dispatch.get()?.upgrade()?;
        ctx.event_scope()?.find_map(|span| {
            let cx = tracing_opentelemetry::get_otel_context(&span.id(), &dispatch)?;
            let span = cx.span();
            let sc = span.span_context();
            sc.is_valid().then(|| (sc.trace_id().to_string(), sc.span_id().to_string()))
        })
    }
}

impl<S, N> FormatEvent<S, N> for WithTraceIds
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let Some((trace_id, span_id)) = self.ids(ctx) else {
            return self.inner.format_event(ctx, writer, event);
        };
        let mut line = String::new();
        self.inner.format_event(ctx, Writer::new(&mut line), event)?;
        match line.strip_prefix('{') {
            // Hex ids need no escaping.
            Some(rest) => write!(writer, "{{\"trace_id\":\"{trace_id}\",\"span_id\":\"{span_id}\",{rest}"),
            None => writer.write_str(&line),
        }
    }
}

/// Text fields without the span attributes meant for OpenTelemetry only
/// (`otel.*`, `network.*`), so span context in text lines stays readable.
pub(crate) struct TextFields;

thread_local! {
    /// Where [`TextFields`] puts a span's fields together before writing
    /// them in one piece: the span's own text starts empty, and growing it
    /// field by field reallocated it several times a span (about a
    /// quarter of what building a span cost a log layer).
    static SCRATCH: RefCell<String> = const { RefCell::new(String::new()) };
}

/// The most [`SCRATCH`] keeps between uses (a rare huge field is not held on to).
const SCRATCH_KEPT: usize = 4096;

impl<'w> FormatFields<'w> for TextFields {
    fn format_fields<R: RecordFields>(&self, mut writer: Writer<'w>, fields: R) -> fmt::Result {
        SCRATCH.with(|scratch| {
            let Ok(mut buf) = scratch.try_borrow_mut() else {
                // Re-entered (a field's `Display` logged): straight to the writer.
                let mut visitor = TextVisitor { writer, empty: true, result: Ok(()) };
                fields.record(&mut visitor);
                return visitor.result;
            };
            buf.clear();
            let mut visitor = TextVisitor { writer: Writer::new(&mut *buf), empty: true, result: Ok(()) };
            fields.record(&mut visitor);
            let written = visitor.result.and_then(|()| writer.write_str(&buf));
            if buf.capacity() > SCRATCH_KEPT {
                *buf = String::new();
            }
            written
        })
    }
}

struct TextVisitor<'w> {
    writer: Writer<'w>,
    empty: bool,
    result: fmt::Result,
}

impl TextVisitor<'_> {
    /// Whether `field` is written (not an OpenTelemetry-only attribute, no
    /// earlier write failed), and the separator to write before it.
    fn start(&mut self, field: &Field) -> Option<&'static str> {
        let name = field.name();
        if self.result.is_err() || name.starts_with("otel.") || name.starts_with("network.") || name.starts_with("log.")
        {
            return None;
        }
        let sep = if self.empty { "" } else { " " };
        self.empty = false;
        Some(sep)
    }
}

/// The fast paths (`record_str`, the integers) write what `record_debug`
/// would, without `Debug`'s character-by-character escaping and the
/// control-character scan: a span's fields are formatted when it is made,
/// a few spans a task, so this is per-task CPU (presa-bench's tiers row;
/// `tools/bench/callgrind.sh` counts it).
impl Visit for TextVisitor<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let Some(sep) = self.start(field) else { return };
        let name = field.name();
        let mut out = Escaped(&mut self.writer);
        self.result =
            if name == "message" { write!(out, "{sep}{value:?}") } else { write!(out, "{sep}{name}={value:?}") };
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        // `Debug` writes these bytes unchanged between quotes: printable
        // ASCII but the quote and the backslash it escapes.
        let plain = value.bytes().all(|b| (b' '..=b'~').contains(&b) && b != b'"' && b != b'\\');
        if !plain || field.name() == "message" {
            return self.record_debug(field, &value);
        }
        let Some(sep) = self.start(field) else { return };
        let w = &mut self.writer;
        self.result = [sep, field.name(), "=\"", value, "\""].into_iter().try_for_each(|s| w.write_str(s));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        let Some(sep) = self.start(field) else { return };
        self.result = write!(self.writer, "{sep}{}={value}", field.name());
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        let Some(sep) = self.start(field) else { return };
        self.result = write!(self.writer, "{sep}{}={value}", field.name());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        let Some(sep) = self.start(field) else { return };
        self.result = write!(self.writer, "{sep}{}={value}", field.name());
    }
}

/// Writes through, with control characters escaped: a value from a client
/// (a `%` Display field, a message) can neither start a forged log line
/// (`\n`, `\r`) nor drive the terminal (`\x1b`…). Debug-formatted strings are
/// escaped already and pass unchanged.
struct Escaped<'a, 'w>(&'a mut Writer<'w>);

impl fmt::Write for Escaped<'_, '_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let mut rest = s;
        while let Some(at) = first_control(rest) {
            self.0.write_str(&rest[..at])?;
            let c = rest[at..].chars().next().unwrap_or_default();
            match c {
                '\n' => self.0.write_str("\\n")?,
                '\r' => self.0.write_str("\\r")?,
                '\t' => self.0.write_str("\\t")?,
                c => write!(self.0, "\\u{{{:x}}}", u32::from(c))?,
            }
            rest = &rest[at + c.len_utf8()..];
        }
        self.0.write_str(rest)
    }
}

/// Where the first control character of `s` (`char::is_control`: U+0000
/// to U+001F, U+007F to U+009F) starts. By bytes: every field and message
/// of a log line passes here, and decoding each character to ask costs
/// about twice as much. U+0080 to U+009F are `C2 80` to `C2 9F` in UTF-8,
/// and `C2` is only ever a leading byte.
fn first_control(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    b.iter().enumerate().position(|(i, &c)| {
        c < 0x20 || c == 0x7f || (c == 0xc2 && b.get(i + 1).is_some_and(|n| (0x80..=0x9f).contains(n)))
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use opentelemetry_sdk::trace::SdkTracerProvider;
    use tracing_subscriber::{fmt::MakeWriter, layer::SubscriberExt};

    use super::*;

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Buffer {
        type Writer = Buffer;

        fn make_writer(&'a self) -> Self::Writer {
            self.clone()
        }
    }

    impl Buffer {
        fn lines(&self) -> Vec<String> {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap().lines().map(str::to_string).collect()
        }
    }

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn json_lines_inside_a_trace_lead_with_its_ids() {
        let provider = SdkTracerProvider::builder().build();
        let out = Buffer::default();
        let slot = Arc::new(OnceLock::new());
        let subscriber = tracing_subscriber::registry()
            .with(crate::otel_layer(&provider))
            .with(CaptureDispatch::new(slot.clone()))
            .with(
                tracing_subscriber::fmt::layer().json().with_writer(out.clone()).event_format(WithTraceIds::new(slot)),
            );
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!("outside");
            let span = tracing::info_span!("request", trace_id = tracing::field::Empty);
            let map = std::collections::BTreeMap::from([("traceparent".to_string(), TP.to_string())]);
            assert!(crate::propagation::set_parent(&span, crate::propagation::from_map(&map).unwrap()));
            span.in_scope(|| tracing::info!(answer = 42, "inside"));
        });
        let lines = out.lines();
        assert_eq!(lines.len(), 2, "{lines:?}");
        let outside: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
        assert!(outside.get("trace_id").is_none(), "{outside}");
        let inside: serde_json::Value = serde_json::from_str(&lines[1]).unwrap();
        assert!(lines[1].starts_with("{\"trace_id\":\"4bf92f3577b34da6a3ce929d0e0e4736\",\"span_id\":\""), "{inside}");
        assert_ne!(inside["span_id"], "00f067aa0ba902b7", "the span's own id, not its parent's");
        assert_eq!(inside["fields"]["answer"], 42);
    }

    #[test]
    fn control_characters_are_found_as_char_is_control_finds_them() {
        for c in (0..=0x10_FFFF).filter_map(char::from_u32) {
            let s = format!("ab{c}é{c}");
            assert_eq!(first_control(&s), s.find(char::is_control), "U+{:04X}", u32::from(c));
        }
        assert_eq!(first_control(""), None);
        assert_eq!(first_control("\u{85}"), Some(0));
        assert_eq!(first_control("é\u{9f}"), Some(2));
    }

    /// Client-supplied text cannot forge a log line or send terminal escapes.
    #[test]
    fn text_lines_escape_control_characters() {
        let out = Buffer::default();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_subscriber::fmt::layer().with_ansi(false).with_writer(out.clone()).fmt_fields(TextFields));
        let client = "evil\nINFO forged line\r\x1b[31mred\tx";
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("request", tool = %client);
            span.in_scope(|| tracing::warn!(reason = %client, quoted = client, "refused {client}"));
        });
        let lines = out.lines();
        assert_eq!(lines.len(), 1, "{lines:?}");
        let line = &lines[0];
        assert!(!line.contains('\x1b') && !line.contains('\r'), "{line:?}");
        let escaped = r"evil\nINFO forged line\r\u{1b}[31mred\tx";
        assert!(line.contains(&format!("request{{tool={escaped}}}")), "{line}");
        assert!(line.contains(&format!("refused {escaped} reason={escaped}")), "{line}");
        assert!(line.contains(r#"quoted="evil\nINFO forged line\r\u{1b}[31mred\tx""#), "{line}");
    }

    /// The fast paths write exactly what `Debug` would.
    #[test]
    fn text_fields_read_as_debug_writes_them() {
        let out = Buffer::default();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_subscriber::fmt::layer().with_ansi(false).with_writer(out.clone()).fmt_fields(TextFields));
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("task", tool = "echo", attempt = 3u64, delta = -2i64, retried = true);
            span.in_scope(|| tracing::info!(plain = "a b", quote = "say \"hi\"", slash = "a\\b", uni = "é", "done"));
        });
        let lines = out.lines();
        assert_eq!(lines.len(), 1, "{lines:?}");
        let line = &lines[0];
        assert!(line.contains(r#"task{tool="echo" attempt=3 delta=-2 retried=true}"#), "{line}");
        let expected = format!("done plain={:?} quote={:?} slash={:?} uni={:?}", "a b", "say \"hi\"", "a\\b", "é");
        assert!(line.ends_with(&expected), "{line} / {expected}");
    }

    /// A trace-only span never shows in a line's span context; its
    /// parents and children still do, and so does a span at all with the
    /// filter alone (RUST_LOG's levels keep applying).
    #[test]
    fn log_lines_leave_trace_only_spans_out() {
        let out = Buffer::default();
        let text = tracing_subscriber::fmt::layer().with_ansi(false).with_writer(out.clone()).fmt_fields(TextFields);
        let subscriber = tracing_subscriber::registry()
            .with(CaptureDispatch::new(Arc::new(OnceLock::new())))
            .with(text.with_filter(LogFilter::new(EnvFilter::new("info"))));
        tracing::subscriber::with_default(subscriber, || {
            let outer = tracing::info_span!("task", tool = "echo");
            let _outer = outer.enter();
            let redis = tracing::info_span!("redis", db.namespace = "omitted-ns", log.omit = tracing::field::Empty);
            let _redis = redis.enter();
            let inner = tracing::info_span!("inner", n = 1u64);
            inner.in_scope(|| tracing::info!("inside"));
            tracing::debug!("below the level");
        });
        let lines = out.lines();
        assert_eq!(lines.len(), 1, "{lines:?}");
        let line = &lines[0];
        assert!(line.contains(r#"task{tool="echo"}:inner{n=1}: "#), "{line}");
        assert!(!line.contains("redis{") && !line.contains("omitted-ns"), "{line}");
    }

    /// `EnvFilter` follows spans only for span-dependent directives; with
    /// one, a span still lowers the level inside it, and without one the
    /// span callbacks skip it.
    #[test]
    fn span_dependent_directives_still_filter_inside_their_spans() {
        assert!(!LogFilter::new(EnvFilter::new("info,presa=debug")).span_dependent);
        assert!(LogFilter::new(EnvFilter::new("info,[loud]=debug")).span_dependent);
        assert!(LogFilter::new(EnvFilter::new("warn,[{tool=echo}]=debug")).span_dependent);
        for (directives, expected) in [("info,[loud]=debug", 2), ("info", 1)] {
            let out = Buffer::default();
            let text =
                tracing_subscriber::fmt::layer().with_ansi(false).with_writer(out.clone()).fmt_fields(TextFields);
            let subscriber =
                tracing_subscriber::registry().with(text.with_filter(LogFilter::new(EnvFilter::new(directives))));
            tracing::subscriber::with_default(subscriber, || {
                tracing::info_span!("loud").in_scope(|| {
                    tracing::debug!("debug inside");
                    tracing::info!("info inside");
                });
                tracing::debug!("debug outside");
            });
            assert_eq!(out.lines().len(), expected, "{directives}: {:?}", out.lines());
        }
    }

    /// A field whose `Display` logs formats its own line's fields while the
    /// span's are being put together: both come out whole.
    #[test]
    fn text_fields_formatted_inside_a_field_stay_whole() {
        struct Chatty;
        impl fmt::Display for Chatty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                tracing::info!(inner = "x", "formatting");
                f.write_str("chatty")
            }
        }
        let out = Buffer::default();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_subscriber::fmt::layer().with_ansi(false).with_writer(out.clone()).fmt_fields(TextFields));
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("task", before = "a", value = %Chatty, after = 2u64);
            span.in_scope(|| tracing::info!(big = "y".repeat(SCRATCH_KEPT * 2).as_str(), "done"));
            span.in_scope(|| tracing::info!("again"));
        });
        // (A scoped dispatcher drops an event made while it dispatches; the
        // global one, as in a binary, formats it.)
        let mut lines = out.lines();
        if lines.len() == 3 {
            let inner = lines.remove(0);
            assert!(inner.ends_with("formatting inner=\"x\""), "{inner}");
        }
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[0].contains(r#"task{before="a" value=chatty after=2}: "#), "{lines:?}");
        assert!(lines[0].ends_with(&format!("done big=\"{}\"", "y".repeat(SCRATCH_KEPT * 2))), "{lines:?}");
        assert!(lines[1].ends_with("again"), "{lines:?}");
        SCRATCH.with(|s| assert!(s.borrow().capacity() <= SCRATCH_KEPT, "a huge field is not kept"));
    }

    #[test]
    fn text_span_context_hides_otel_fields_and_shows_the_trace_id() {
        let out = Buffer::default();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_subscriber::fmt::layer().with_ansi(false).with_writer(out.clone()).fmt_fields(TextFields));
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!(
                "request",
                otel.name = "tools/call x",
                network.transport = "tcp",
                mcp.method.name = "tools/call",
                trace_id = tracing::field::Empty
            );
            span.record("trace_id", "abc");
            span.in_scope(|| tracing::info!(task_id = "t1", "task created"));
        });
        let lines = out.lines();
        assert_eq!(lines.len(), 1, "{lines:?}");
        let line = &lines[0];
        assert!(line.contains("request{mcp.method.name=\"tools/call\" trace_id=\"abc\"}"), "{line}");
        assert!(line.ends_with("task created task_id=\"t1\""), "{line}");
        assert!(!line.contains("otel.") && !line.contains("network."), "{line}");
    }
}
