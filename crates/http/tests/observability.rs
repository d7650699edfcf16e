//! Traces and metrics of a real task, end to end in one process: `tools/call`
//! through `presa_http::router` (oneshot), an embedded `Worker` running it,
//! spans captured in memory, `/metrics` scraped before and after.
//!
//! Each trace test installs its own subscriber as the thread's default on a
//! current-thread runtime (the worker and SSE pumps are spawned on that same
//! thread, so they see it). The metrics recorder is process-wide: the metrics
//! test compares deltas.

use std::{sync::Arc, time::Duration};

use axum::{
    Router,
    body::Body,
    http::{Request, StatusCode, header},
};
use http_body_util::BodyExt;
use presa_http::HttpConfig;
use presa_server::{Core, Server, ServerConfig, StateCodec, Worker, WorkerConfig};
use presa_store::{Backend, memory::MemoryStore};
use presa_telemetry::testing::{SpanData, SpanKind, TestTracing, attribute};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

const VERSION: &str = "2026-07-28";
const TASKS: &str = "io.modelcontextprotocol/tasks";
const REMOTE_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const REMOTE_SPAN: &str = "00f067aa0ba902b7";
const OTHER_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const OTHER_SPAN: &str = "b7ad6b7169203331";

fn traceparent(trace: &str, span: &str) -> String {
    format!("00-{trace}-{span}-01")
}

/// An embedded deployment: one server, its router, and a running worker.
struct Embedded {
    server: Server,
    router: Router,
    stop: CancellationToken,
    worker: tokio::task::JoinHandle<()>,
}

impl Embedded {
    fn start(http: HttpConfig) -> Self {
        let backend = Backend::new(Arc::new(MemoryStore::new()));
        let core = Core::new(ServerConfig::default(), presa_demo::catalog().unwrap(), backend);
        let server = Server::new(core.clone(), StateCodec::new(b"test"));
        let router = presa_http::router(server.clone(), http);
        let stop = CancellationToken::new();
        let config = WorkerConfig { claim_wait: Duration::from_millis(50), ..WorkerConfig::default() };
        let worker = tokio::spawn(Worker::new(core, config).run(stop.clone()));
        Embedded { server, router, stop, worker }
    }

    /// Stop the worker and wait until it has drained (every span closed).
    async fn stop(self) {
        self.stop.cancel();
        self.worker.await.unwrap();
    }

    /// POST one request (`_meta` entries merged over the standard ones) and
    /// return its JSON body (a result or an error, whatever the HTTP status).
    async fn call(&self, method: &str, mut params: Value, meta: Value, headers: &[(&str, String)]) -> Value {
        let mut full_meta = json!({
            "io.modelcontextprotocol/protocolVersion": VERSION,
            "io.modelcontextprotocol/clientCapabilities": { "extensions": { TASKS: {} } },
        });
        full_meta.as_object_mut().unwrap().extend(meta.as_object().cloned().unwrap_or_default());
        params["_meta"] = full_meta;
        let mut req = Request::post("/mcp")
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json, text/event-stream")
            .header("mcp-protocol-version", VERSION)
            .header("mcp-method", method);
        for key in ["name", "taskId"] {
            if let Some(v) = params.get(key).and_then(Value::as_str) {
                req = req.header("mcp-name", v);
            }
        }
        for (k, v) in headers {
            req = req.header(*k, v.as_str());
        }
        let body = json!({ "jsonrpc": "2.0", "id": 7, "method": method, "params": params });
        let resp = self.router.clone().oneshot(req.body(Body::from(body.to_string())).unwrap()).await.unwrap();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        serde_json::from_slice(&bytes).unwrap()
    }

    /// POST one request and return its raw body (JSON or a whole SSE stream).
    async fn call_raw(&self, method: &str, mut params: Value, meta: Value) -> (String, String) {
        let mut full_meta = json!({
            "io.modelcontextprotocol/protocolVersion": VERSION,
            "io.modelcontextprotocol/clientCapabilities": {},
        });
        full_meta.as_object_mut().unwrap().extend(meta.as_object().cloned().unwrap_or_default());
        params["_meta"] = full_meta;
        let name = params["name"].as_str().unwrap().to_string();
        let req = Request::post("/mcp")
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json, text/event-stream")
            .header("mcp-protocol-version", VERSION)
            .header("mcp-method", method)
            .header("mcp-name", name);
        let body = json!({ "jsonrpc": "2.0", "id": 8, "method": method, "params": params });
        let resp = self.router.clone().oneshot(req.body(Body::from(body.to_string())).unwrap()).await.unwrap();
        let content_type = resp.headers()[header::CONTENT_TYPE].to_str().unwrap().to_string();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        (content_type, String::from_utf8(bytes.to_vec()).unwrap())
    }

    /// Start `slow_compute` as a task and wait until it completed; its task id.
    async fn run_task(&self, meta: Value, headers: &[(&str, String)]) -> String {
        let params = json!({ "name": "slow_compute", "arguments": { "seconds": 0 } });
        let created = self.call("tools/call", params, meta, headers).await;
        assert_eq!(created["result"]["resultType"], "task", "{created}");
        let id = created["result"]["taskId"].as_str().unwrap().to_string();
        for _ in 0..250 {
            let got = self.call("tasks/get", json!({ "taskId": id }), json!({}), &[]).await;
            if got["result"]["status"] == "completed" {
                return id;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("task {id} did not complete");
    }

    async fn scrape(&self) -> String {
        let req = Request::get("/metrics").body(Body::empty()).unwrap();
        let resp = self.router.clone().oneshot(req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        String::from_utf8(resp.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap()
    }
}

/// The one span named `name`.
fn one<'a>(spans: &'a [SpanData], name: &str) -> &'a SpanData {
    let found: Vec<_> = spans.iter().filter(|s| s.name == name).collect();
    assert_eq!(found.len(), 1, "spans named {name:?}: {:?}", spans.iter().map(|s| &s.name).collect::<Vec<_>>());
    found[0]
}

fn trace_id(s: &SpanData) -> String {
    s.span_context.trace_id().to_string()
}

/// The request, create and execution spans of the one task, checked for
/// their links: one trace; create and execution are children of the request.
fn task_spans(spans: &[SpanData]) -> (&SpanData, &SpanData, &SpanData) {
    let request = one(spans, "tools/call slow_compute");
    let create = one(spans, "store.create");
    let execute = one(spans, "execute_tool slow_compute");
    assert_eq!(request.span_kind, SpanKind::Server);
    assert_eq!(create.span_kind, SpanKind::Client);
    assert_eq!(execute.span_kind, SpanKind::Consumer);
    assert_eq!(trace_id(create), trace_id(request));
    assert_eq!(trace_id(execute), trace_id(request));
    assert_eq!(create.parent_span_id, request.span_context.span_id());
    assert!(!create.parent_span_is_remote);
    // The worker joins through the work item's trace context: a remote parent.
    assert_eq!(execute.parent_span_id, request.span_context.span_id());
    assert!(execute.parent_span_is_remote);
    (request, create, execute)
}

#[tokio::test]
async fn one_task_yields_one_trace() {
    let tracing = TestTracing::new();
    let _default = tracing.set_default();
    let app = Embedded::start(HttpConfig::default());
    let task_id = app.run_task(json!({}), &[]).await;
    app.stop().await;

    let spans = tracing.spans();
    let (request, create, execute) = task_spans(&spans);
    // A new trace: the request span is a root.
    assert_eq!(request.parent_span_id, opentelemetry_invalid_span_id());

    // MCP semantic conventions on the request span.
    assert_eq!(attribute(request, "mcp.method.name").as_deref(), Some("tools/call"));
    assert_eq!(attribute(request, "gen_ai.tool.name").as_deref(), Some("slow_compute"));
    assert_eq!(attribute(request, "gen_ai.operation.name").as_deref(), Some("execute_tool"));
    assert_eq!(attribute(request, "jsonrpc.request.id").as_deref(), Some("7"));
    assert_eq!(attribute(request, "mcp.protocol.version").as_deref(), Some(VERSION));
    assert_eq!(attribute(request, "network.transport").as_deref(), Some("tcp"));
    assert_eq!(attribute(request, "presa.task.id").as_deref(), Some(task_id.as_str()));
    assert_eq!(attribute(create, "presa.store.operation").as_deref(), Some("create"));

    // The execution span, and the store calls inside it.
    assert_eq!(attribute(execute, "task_id").as_deref(), Some(task_id.as_str()));
    assert_eq!(attribute(execute, "presa.task.attempt").as_deref(), Some("1"));
    assert_eq!(attribute(execute, "presa.work.deliveries").as_deref(), Some("1"));
    assert_eq!(attribute(execute, "presa.task.status").as_deref(), Some("completed"));
    let in_execution: Vec<_> = spans.iter().filter(|s| s.parent_span_id == execute.span_context.span_id()).collect();
    assert!(
        in_execution.iter().any(|s| s.name == "store.conclude" && s.span_kind == SpanKind::Client),
        "the completing write is a child of the execution span: {:?}",
        in_execution.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    assert!(in_execution.iter().all(|s| trace_id(s) == trace_id(request)));
}

/// The request span is a child of the remote `REMOTE_SPAN`, and the task's
/// execution joined that remote trace. Returns the request span.
fn assert_remote_parent(spans: &[SpanData]) -> &SpanData {
    let (request, _, execute) = task_spans(spans);
    assert_eq!(trace_id(request), REMOTE_TRACE);
    assert_eq!(request.parent_span_id.to_string(), REMOTE_SPAN);
    assert!(request.parent_span_is_remote);
    assert_eq!(trace_id(execute), REMOTE_TRACE);
    request
}

#[tokio::test]
async fn an_http_traceparent_parents_the_request_span() {
    let tracing = TestTracing::new();
    let _default = tracing.set_default();
    let app = Embedded::start(HttpConfig::default());
    app.run_task(json!({}), &[("traceparent", traceparent(REMOTE_TRACE, REMOTE_SPAN))]).await;
    app.stop().await;

    let spans = tracing.spans();
    let request = assert_remote_parent(&spans);
    assert!(request.links.is_empty());
}

#[tokio::test]
async fn a_meta_traceparent_parents_the_request_span() {
    let tracing = TestTracing::new();
    let _default = tracing.set_default();
    let app = Embedded::start(HttpConfig::default());
    app.run_task(json!({ "traceparent": traceparent(REMOTE_TRACE, REMOTE_SPAN), "baggage": "tenant=acme" }), &[]).await;
    app.stop().await;

    assert_remote_parent(&tracing.spans());
}

#[tokio::test]
async fn meta_wins_over_the_http_header_which_becomes_a_link() {
    let tracing = TestTracing::new();
    let _default = tracing.set_default();
    let app = Embedded::start(HttpConfig::default());
    let meta = json!({ "traceparent": traceparent(REMOTE_TRACE, REMOTE_SPAN) });
    app.run_task(meta, &[("traceparent", traceparent(OTHER_TRACE, OTHER_SPAN))]).await;
    app.stop().await;

    let spans = tracing.spans();
    let (request, _, _) = task_spans(&spans);
    assert_eq!(trace_id(request), REMOTE_TRACE);
    assert_eq!(request.parent_span_id.to_string(), REMOTE_SPAN);
    let links: Vec<_> = request
        .links
        .iter()
        .map(|l| (l.span_context.trace_id().to_string(), l.span_context.span_id().to_string()))
        .collect();
    assert_eq!(links, vec![(OTHER_TRACE.to_string(), OTHER_SPAN.to_string())]);
}

#[tokio::test]
async fn errors_mark_the_request_span() {
    let tracing = TestTracing::new();
    let _default = tracing.set_default();
    let app = Embedded::start(HttpConfig::default());
    let reply = app.call("tools/call", json!({ "name": "no_such_tool", "arguments": {} }), json!({}), &[]).await;
    let code = reply["error"]["code"].as_i64().expect("an error");
    app.stop().await;

    let spans = tracing.spans();
    // An unknown tool is not a low-cardinality target: the span is named by the method only.
    let request = one(&spans, "tools/call");
    assert_eq!(attribute(request, "error.type"), Some(code.to_string()));
    assert_eq!(attribute(request, "rpc.response.status_code"), Some(code.to_string()));
    assert!(matches!(request.status, presa_telemetry::testing::Status::Error { .. }), "{:?}", request.status);
}

#[tokio::test]
async fn a_streamed_reply_keeps_its_request_span_open_until_the_last_message() {
    let tracing = TestTracing::new();
    let _default = tracing.set_default();
    let app = Embedded::start(HttpConfig::default());
    let params = json!({ "name": "test_tool_with_progress", "arguments": {} });
    let (content_type, body) = app.call_raw("tools/call", params, json!({ "progressToken": "p1" })).await;
    assert!(content_type.starts_with("text/event-stream"), "{content_type}");
    assert!(body.contains("notifications/progress") && body.contains("Progress complete"), "{body}");
    let params = json!({ "name": "test_error_handling", "arguments": {} });
    app.call_raw("tools/call", params, json!({})).await;
    app.stop().await;

    let spans = tracing.spans();
    // The handler answers after three 50 ms sleeps, long after the response
    // started streaming: the span covers the SSE pump too.
    let streamed = one(&spans, "tools/call test_tool_with_progress");
    let lasted = streamed.end_time.duration_since(streamed.start_time).unwrap();
    assert!(lasted >= Duration::from_millis(140), "{lasted:?}");
    assert_eq!(attribute(streamed, "error.type"), None);
    // A tool result with isError: true is an error of the span (MCP conventions).
    let failed = one(&spans, "tools/call test_error_handling");
    assert_eq!(attribute(failed, "error.type").as_deref(), Some("tool_error"));
}

fn opentelemetry_invalid_span_id() -> presa_telemetry::testing::SpanId {
    presa_telemetry::testing::SpanId::INVALID
}

/// The value of the series `name{labels}` (exact label text), or 0 when absent.
fn value(scrape: &str, series: &str) -> f64 {
    scrape
        .lines()
        .find_map(|l| l.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
        .map_or(0.0, |v| v.trim().parse().unwrap())
}

#[tokio::test]
async fn metrics_move_when_a_task_runs() {
    let handle = presa_telemetry::metrics::install();
    let app = Embedded::start(HttpConfig::default().with(|c| {
        c.probes.metrics = Some(Arc::new(move || handle.render()));
    }));
    let before = app.scrape().await;
    app.run_task(json!({}), &[]).await;
    let after = app.scrape().await;
    assert_eq!(app.server.active_listeners(), 0);

    // The queue series move: a task parked on input holds its claimed work
    // pending; once answered and finished, nothing is pending any more.
    let params = json!({ "name": "confirm_delete", "arguments": { "filename": "m.txt" } });
    let created = app.call("tools/call", params, json!({}), &[]).await;
    let id = created["result"]["taskId"].as_str().expect("a task").to_string();
    let status = |want: &'static str| {
        let id = id.clone();
        let app = &app;
        async move {
            for _ in 0..250 {
                let got = app.call("tasks/get", json!({ "taskId": id }), json!({}), &[]).await;
                if got["result"]["status"] == want {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            panic!("task {id} never became {want}");
        }
    };
    status("input_required").await;
    let parked = app.scrape().await;
    let pending = "presa_work_pending{partition=\"0\"}";
    assert_eq!(value(&parked, pending), 1.0, "{parked}");
    assert!(value(&parked, "presa_work_oldest_pending_age_seconds{partition=\"0\"}") >= 0.0, "{parked}");
    // The worker holds it parked on input, in a parked slot (other tests may hold more).
    assert!(value(&parked, "presa_worker_tasks{state=\"input_required\"}") >= 1.0, "{parked}");
    assert!(value(&parked, "presa_worker_slots_in_use{pool=\"parked\"}") >= 1.0, "{parked}");
    assert!(value(&parked, "presa_worker_slots{pool=\"run\"}") >= 1.0, "{parked}");
    let answer = json!({ "confirm-delete": { "action": "accept", "content": { "confirm": true } } });
    app.call("tasks/update", json!({ "taskId": id, "inputResponses": answer }), json!({}), &[]).await;
    status("completed").await;
    let drained = app.scrape().await;
    assert_eq!(value(&drained, pending), 0.0, "{drained}");
    // A refusal for a limit is counted by its name.
    let big = json!({ "name": "slow_compute", "arguments": { "label": "x".repeat(300 * 1024) } });
    let refused = app.call("tools/call", big, json!({}), &[]).await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    let refusals = "presa_refusals_total{limit=\"max_task_input_bytes\"}";
    assert!(value(&app.scrape().await, refusals) >= value(&drained, refusals) + 1.0);
    app.stop().await;

    let delta = |series: &str| value(&after, series) - value(&before, series);
    assert!(delta("presa_tasks_created_total") >= 1.0, "{after}");
    assert!(delta("presa_task_transitions_total{status=\"working\"}") >= 1.0, "{after}");
    assert!(delta("presa_task_transitions_total{status=\"completed\"}") >= 1.0, "{after}");
    assert!(delta("presa_requests_total{method=\"tools/call\",outcome=\"ok\"}") >= 1.0, "{after}");
    assert!(delta("presa_requests_total{method=\"tasks/get\",outcome=\"ok\"}") >= 1.0, "{after}");
    assert!(delta("presa_request_duration_seconds_count{method=\"tools/call\"}") >= 1.0, "{after}");
    // Queue gauges of the one partition are reported, and this store's queue is empty again.
    for gauge in [
        "presa_work_queued",
        "presa_work_pending",
        "presa_work_oldest_pending_age_seconds",
        "presa_work_oldest_queued_age_seconds",
    ] {
        let series = format!("{gauge}{{partition=\"0\"}}");
        assert!(after.lines().any(|l| l.starts_with(&series)), "{series} missing:\n{after}");
    }
    assert!(after.lines().any(|l| l.starts_with("presa_listen_streams ")), "{after}");
    // Registered at zero: a method's first server error is seen by rate().
    let unused = "presa_requests_total{method=\"prompts/get\",outcome=\"-32603\"}";
    assert!(before.lines().any(|l| l.starts_with(unused)), "{before}");
    assert!(after.contains("# TYPE presa_request_duration_seconds histogram"), "{after}");
}

#[tokio::test]
async fn metrics_are_not_served_unless_configured() {
    let app = Embedded::start(HttpConfig::default());
    let resp = app.router.clone().oneshot(Request::get("/metrics").body(Body::empty()).unwrap()).await.unwrap();
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    app.stop().await;
}
