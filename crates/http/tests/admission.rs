//! Transport tests for `POST /mcp` and the health routes, driven through
//! `tower::ServiceExt::oneshot` on `presa_http::router` with the demo catalog
//! (no sockets). They follow the admission order and codes of
//! `conformance/FIXTURE.md` §3.6 and the probes of §8.1, §8.25 and §8.26.

use std::sync::Arc;

use axum::{
    Router,
    body::Body,
    http::{HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode, header},
};
use http_body_util::BodyExt;
use presa_http::HttpConfig;
use presa_server::{Core, Server, ServerConfig, StateCodec};
use presa_store::{Backend, WorkQueue, memory::MemoryStore};
use serde_json::{Map, Value, json};
use tower::ServiceExt;

const VERSION: &str = "2026-07-28";
const PV_KEY: &str = "io.modelcontextprotocol/protocolVersion";
const CAPS_KEY: &str = "io.modelcontextprotocol/clientCapabilities";
const INFO_KEY: &str = "io.modelcontextprotocol/clientInfo";
const LOG_KEY: &str = "io.modelcontextprotocol/logLevel";
const TASKS: &str = "io.modelcontextprotocol/tasks";

const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;
const HEADER_MISMATCH: i64 = -32020;
const MISSING_CAPABILITY: i64 = -32021;
const UNSUPPORTED_VERSION: i64 = -32022;

// ---------------------------------------------------------------- fixtures

fn server() -> Server {
    let backend = Backend::new(Arc::new(MemoryStore::new()));
    Server::new(Core::new(ServerConfig::default(), presa_demo::catalog().unwrap(), backend), StateCodec::new(b"test"))
}

fn app_with(config: HttpConfig) -> Router {
    presa_http::router(server(), config)
}

fn app() -> Router {
    app_with(HttpConfig::default())
}

/// The standard `_meta` (protocol version, capabilities, client info).
fn default_meta(caps: Value) -> Map<String, Value> {
    let meta = json!({
        PV_KEY: VERSION,
        CAPS_KEY: caps,
        INFO_KEY: { "name": "admission-tests", "version": "1.0.0" },
    });
    meta.as_object().unwrap().clone()
}

fn tasks_caps() -> Value {
    json!({ "extensions": { TASKS: {} } })
}

/// The body field mirrored into `Mcp-Name` for `method`.
fn name_source(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        "tasks/get" | "tasks/update" | "tasks/cancel" => Some("taskId"),
        _ => None,
    }
}

/// A `POST /mcp` request under construction. By default it carries every
/// header a well-behaved client sends: `Content-Type`, `Accept`,
/// `MCP-Protocol-Version`, `Mcp-Method` and (when the method has one) a
/// matching `Mcp-Name`.
struct Call {
    body: Value,
    headers: HeaderMap,
}

impl Call {
    /// `params` with the standard `_meta` merged in (keys already in
    /// `params._meta` win) and capabilities `{}`.
    fn new(method: &str, params: Value) -> Self {
        Self::with_caps(method, params, json!({}))
    }

    /// Like [`Call::new`] with explicit client capabilities.
    fn with_caps(method: &str, params: Value, caps: Value) -> Self {
        let mut params = params.as_object().cloned().unwrap_or_default();
        let mut meta = default_meta(caps);
        if let Some(Value::Object(given)) = params.get("_meta") {
            meta.extend(given.clone());
        }
        params.insert("_meta".into(), Value::Object(meta));
        Self::bare(method, Value::Object(params))
    }

    /// `params` exactly as given (no `_meta` added).
    fn bare(method: &str, params: Value) -> Self {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(header::ACCEPT, HeaderValue::from_static("application/json, text/event-stream"));
        headers.insert("mcp-protocol-version", HeaderValue::from_static(VERSION));
        headers.insert("mcp-method", HeaderValue::from_str(method).unwrap());
        if let Some(field) = name_source(method)
            && let Some(Value::String(v)) = params.get(field)
        {
            headers.insert("mcp-name", HeaderValue::from_str(v).unwrap());
        }
        let body = json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params });
        Call { body, headers }
    }

    fn id(mut self, id: Value) -> Self {
        self.body["id"] = id;
        self
    }

    /// Replace a header.
    fn header(mut self, name: &str, value: &str) -> Self {
        let name = HeaderName::from_bytes(name.as_bytes()).unwrap();
        self.headers.insert(name, HeaderValue::from_str(value).unwrap());
        self
    }

    /// Add one more value for a header.
    fn append(mut self, name: &str, value: &str) -> Self {
        let name = HeaderName::from_bytes(name.as_bytes()).unwrap();
        self.headers.append(name, HeaderValue::from_str(value).unwrap());
        self
    }

    /// Remove a header.
    fn without(mut self, name: &str) -> Self {
        self.headers.remove(name);
        self
    }

    fn request(self) -> Request<Body> {
        let mut req =
            Request::builder().method(Method::POST).uri("/mcp").body(Body::from(self.body.to_string())).unwrap();
        *req.headers_mut() = self.headers;
        req
    }

    async fn send(self, app: Router) -> Resp {
        exchange(app, self.request()).await
    }
}

/// A finished exchange.
struct Resp {
    status: StatusCode,
    /// The body parsed as JSON, when it is `application/json`.
    json: Option<Value>,
    headers: HeaderMap,
    text: String,
}

impl Resp {
    fn content_type(&self) -> &str {
        self.headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default()
    }

    fn body(&self) -> &Value {
        self.json.as_ref().unwrap_or_else(|| panic!("not a JSON body ({}): {}", self.content_type(), self.text))
    }

    fn result(&self) -> &Value {
        assert_eq!(self.status, StatusCode::OK, "{}", self.text);
        let body = self.body();
        assert!(body.get("error").is_none(), "unexpected error: {body}");
        &body["result"]
    }

    /// The `data:` payloads of an SSE body.
    fn frames(&self) -> Vec<Value> {
        assert!(self.content_type().starts_with("text/event-stream"), "not SSE: {}", self.content_type());
        self.text
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(|d| serde_json::from_str(d.trim()).unwrap_or_else(|e| panic!("bad SSE frame {d:?}: {e}")))
            .collect()
    }
}

/// Run `req` through `app`: (status, JSON body when the body is JSON, headers).
async fn send_request(app: Router, req: Request<Body>) -> (StatusCode, Option<Value>, HeaderMap) {
    let r = exchange(app, req).await;
    (r.status, r.json, r.headers)
}

async fn exchange(app: Router, req: Request<Body>) -> Resp {
    // A stream that never ends after its response would hang the test: bound it.
    let limit = std::time::Duration::from_secs(10);
    let resp = tokio::time::timeout(limit, app.oneshot(req)).await.expect("no response in time").unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    let collected = tokio::time::timeout(limit, resp.into_body().collect()).await.expect("the body never ended");
    let bytes = collected.unwrap().to_bytes();
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    let is_json = headers.get(header::CONTENT_TYPE).is_some_and(|v| v.to_str().unwrap().contains("application/json"));
    let json = if is_json {
        assert!(!text.contains('\n'), "a JSON body must be a single line: {text:?}");
        Some(serde_json::from_str(&text).unwrap_or_else(|e| panic!("invalid JSON body {text:?}: {e}")))
    } else {
        None
    };
    Resp { status, json, headers, text }
}

/// A `POST /mcp` with a raw body and the standard headers for `tools/list`.
fn raw_post(body: impl Into<Body>) -> Request<Body> {
    Request::builder()
        .method(Method::POST)
        .uri("/mcp")
        .header(header::CONTENT_TYPE, "application/json")
        .header("mcp-protocol-version", VERSION)
        .header("mcp-method", "tools/list")
        .body(body.into())
        .unwrap()
}

fn get(uri: &str) -> Request<Body> {
    Request::builder().method(Method::GET).uri(uri).body(Body::empty()).unwrap()
}

/// Assert a JSON-RPC error reply: HTTP status, code, and the echoed id
/// (`None`: the reply carries no id, or a null one).
fn assert_error(r: &Resp, status: StatusCode, code: i64, id: Option<Value>) {
    assert_eq!(r.status, status, "status; body {}", r.text);
    let body = r.body();
    assert_eq!(body["jsonrpc"], "2.0", "{body}");
    assert!(body.get("result").is_none(), "{body}");
    assert_eq!(body["error"]["code"], code, "code; body {body}");
    assert!(body["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{body}");
    match id {
        Some(id) => assert_eq!(body.get("id"), Some(&id), "the error must echo the request id: {body}"),
        None => assert!(body.get("id").is_none_or(Value::is_null), "no id to echo, got {body}"),
    }
}

fn first_text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_else(|| panic!("no text content in {result}"))
}

// ---------------------------------------------------------------- envelope

#[tokio::test]
async fn malformed_json_is_a_parse_error_without_id() {
    let r = exchange(app(), raw_post(r#"{"jsonrpc":"2.0","id":3,"method":"tools/list""#)).await;
    assert_error(&r, StatusCode::BAD_REQUEST, PARSE_ERROR, None);
}

#[tokio::test]
async fn empty_body_is_a_parse_error() {
    let r = exchange(app(), raw_post("")).await;
    assert_error(&r, StatusCode::BAD_REQUEST, PARSE_ERROR, None);
}

#[tokio::test]
async fn client_response_is_an_invalid_request() {
    let r = exchange(app(), raw_post(r#"{"jsonrpc":"2.0","id":6,"result":{}}"#)).await;
    assert_error(&r, StatusCode::BAD_REQUEST, INVALID_REQUEST, Some(json!(6)));
}

#[tokio::test]
async fn json_array_body_is_an_invalid_request() {
    let body = json!([{ "jsonrpc": "2.0", "id": 1, "method": "tools/list" }]).to_string();
    let r = exchange(app(), raw_post(body)).await;
    assert_error(&r, StatusCode::BAD_REQUEST, INVALID_REQUEST, None);
}

#[tokio::test]
async fn missing_method_is_an_invalid_request_echoing_the_id() {
    let r = exchange(app(), raw_post(r#"{"jsonrpc":"2.0","id":5}"#)).await;
    assert_error(&r, StatusCode::BAD_REQUEST, INVALID_REQUEST, Some(json!(5)));
}

#[tokio::test]
async fn wrong_jsonrpc_version_is_an_invalid_request() {
    let mut call = Call::new("tools/list", json!({})).id(json!("v1"));
    call.body["jsonrpc"] = json!("1.0");
    let r = call.send(app()).await;
    assert_error(&r, StatusCode::BAD_REQUEST, INVALID_REQUEST, Some(json!("v1")));
}

#[tokio::test]
async fn params_that_are_not_an_object_are_an_invalid_request() {
    let mut call = Call::new("tools/list", json!({})).id(json!(8));
    call.body["params"] = json!([1, 2]);
    let r = call.send(app()).await;
    assert_error(&r, StatusCode::BAD_REQUEST, INVALID_REQUEST, Some(json!(8)));
}

#[tokio::test]
async fn fractional_id_is_an_invalid_request() {
    let r = Call::new("tools/list", json!({})).id(json!(1.5)).send(app()).await;
    assert_error(&r, StatusCode::BAD_REQUEST, INVALID_REQUEST, None);
}

#[tokio::test]
async fn notification_is_accepted_with_an_empty_body() {
    let body = json!({ "jsonrpc": "2.0", "method": "notifications/cancelled", "params": { "requestId": 1 } });
    let r = exchange(app(), raw_post(body.to_string())).await;
    assert_eq!(r.status, StatusCode::ACCEPTED);
    assert!(r.text.is_empty(), "{:?}", r.text);
}

#[tokio::test]
async fn string_ids_are_echoed_on_results_and_errors() {
    let r = Call::new("tools/list", json!({})).id(json!("req-abc")).send(app()).await;
    r.result();
    assert_eq!(r.body()["id"], "req-abc");
    let r = Call::new("unknown/method", json!({})).id(json!("req-def")).send(app()).await;
    assert_error(&r, StatusCode::NOT_FOUND, METHOD_NOT_FOUND, Some(json!("req-def")));
}

// ---------------------------------------------------------------- _meta

#[tokio::test]
async fn missing_meta_is_invalid_params() {
    let r = Call::bare("server/discover", json!({})).id(json!(101)).send(app()).await;
    assert_error(&r, StatusCode::BAD_REQUEST, INVALID_PARAMS, Some(json!(101)));
}

#[tokio::test]
async fn meta_without_protocol_version_is_invalid_params_not_header_mismatch() {
    // The header is still present and correct: the `_meta` check comes first.
    let params = json!({ "_meta": { CAPS_KEY: {}, INFO_KEY: { "name": "c", "version": "1" } } });
    let call = Call::bare("server/discover", params).id(json!(102));
    assert_eq!(call.headers["mcp-protocol-version"], VERSION);
    let r = call.send(app()).await;
    assert_error(&r, StatusCode::BAD_REQUEST, INVALID_PARAMS, Some(json!(102)));
}

#[tokio::test]
async fn meta_without_client_capabilities_is_invalid_params() {
    let params = json!({ "_meta": { PV_KEY: VERSION, INFO_KEY: { "name": "c", "version": "1" } } });
    let r = Call::bare("server/discover", params).id(json!(104)).send(app()).await;
    assert_error(&r, StatusCode::BAD_REQUEST, INVALID_PARAMS, Some(json!(104)));
}

#[tokio::test]
async fn meta_without_client_info_is_accepted() {
    let r = Call::bare("server/discover", json!({ "_meta": { PV_KEY: VERSION, CAPS_KEY: {} } }))
        .id(json!(105))
        .send(app())
        .await;
    assert!(r.result()["supportedVersions"].is_array());
    assert_eq!(r.body()["id"], 105);
}

#[tokio::test]
async fn unknown_log_level_is_invalid_params() {
    let r = Call::new("tools/list", json!({ "_meta": { LOG_KEY: "loud" } })).id(json!(9)).send(app()).await;
    assert_error(&r, StatusCode::BAD_REQUEST, INVALID_PARAMS, Some(json!(9)));
}

// ---------------------------------------------------------------- protocol version

#[tokio::test]
async fn missing_protocol_version_header_is_a_header_mismatch() {
    let r = Call::new("tools/list", json!({})).id(json!(11)).without("mcp-protocol-version").send(app()).await;
    assert_error(&r, StatusCode::BAD_REQUEST, HEADER_MISMATCH, Some(json!(11)));
}

#[tokio::test]
async fn header_version_differing_from_meta_is_a_header_mismatch() {
    let r = Call::new("server/discover", json!({ "_meta": { PV_KEY: "v999.0.0" } })).id(json!(302)).send(app()).await;
    assert_error(&r, StatusCode::BAD_REQUEST, HEADER_MISMATCH, Some(json!(302)));
}

#[tokio::test]
async fn unsupported_version_lists_the_supported_ones() {
    let r = Call::new("server/discover", json!({ "_meta": { PV_KEY: "v999.0.0" } }))
        .id(json!(301))
        .header("MCP-Protocol-Version", "v999.0.0")
        .send(app())
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, UNSUPPORTED_VERSION, Some(json!(301)));
    let data = &r.body()["error"]["data"];
    assert_eq!(data["supported"], json!([VERSION]));
    assert_eq!(data["requested"], "v999.0.0");
}

// ---------------------------------------------------------------- Mcp-Method

#[tokio::test]
async fn missing_mcp_method_is_a_header_mismatch() {
    let r = Call::new("tools/list", json!({})).id(json!(21)).without("mcp-method").send(app()).await;
    assert_error(&r, StatusCode::BAD_REQUEST, HEADER_MISMATCH, Some(json!(21)));
}

#[tokio::test]
async fn mcp_method_for_another_method_is_a_header_mismatch() {
    let r = Call::new("tools/list", json!({})).id(json!(22)).header("Mcp-Method", "prompts/list").send(app()).await;
    assert_error(&r, StatusCode::BAD_REQUEST, HEADER_MISMATCH, Some(json!(22)));
}

#[tokio::test]
async fn mcp_method_value_is_case_sensitive() {
    let r = Call::new("tools/list", json!({})).id(json!(23)).header("Mcp-Method", "TOOLS/LIST").send(app()).await;
    assert_error(&r, StatusCode::BAD_REQUEST, HEADER_MISMATCH, Some(json!(23)));
}

#[tokio::test]
async fn mcp_method_header_name_is_case_insensitive() {
    for name in ["mcp-method", "MCP-METHOD", "Mcp-Method"] {
        let r = Call::new("tools/list", json!({})).without("mcp-method").header(name, "tools/list").send(app()).await;
        assert!(r.result()["tools"].is_array(), "{name}: {}", r.text);
    }
}

#[tokio::test]
async fn repeated_mcp_method_is_a_header_mismatch() {
    let r = Call::new("tools/list", json!({})).id(json!(24)).append("Mcp-Method", "tools/list").send(app()).await;
    assert_error(&r, StatusCode::BAD_REQUEST, HEADER_MISMATCH, Some(json!(24)));
}

// ---------------------------------------------------------------- Mcp-Name

fn simple_text_call() -> Call {
    Call::new("tools/call", json!({ "name": "test_simple_text", "arguments": {} }))
}

#[tokio::test]
async fn tools_call_without_mcp_name_is_a_header_mismatch() {
    let r = simple_text_call().id(json!(31)).without("mcp-name").send(app()).await;
    assert_error(&r, StatusCode::BAD_REQUEST, HEADER_MISMATCH, Some(json!(31)));
}

#[tokio::test]
async fn tools_call_with_the_wrong_mcp_name_is_a_header_mismatch() {
    let r = simple_text_call().id(json!(32)).header("Mcp-Name", "wrong_tool_name").send(app()).await;
    assert_error(&r, StatusCode::BAD_REQUEST, HEADER_MISMATCH, Some(json!(32)));
}

#[tokio::test]
async fn mcp_name_with_surrounding_whitespace_is_accepted() {
    let r = simple_text_call().header("Mcp-Name", "  test_simple_text  ").send(app()).await;
    assert_eq!(first_text(r.result()), "This is a simple text response for testing.");
}

#[tokio::test]
async fn mcp_name_in_base64_sentinel_is_accepted() {
    // base64("test_simple_text") = dGVzdF9zaW1wbGVfdGV4dA==
    let r = simple_text_call().header("Mcp-Name", "=?base64?dGVzdF9zaW1wbGVfdGV4dA==?=").send(app()).await;
    assert_eq!(first_text(r.result()), "This is a simple text response for testing.");
}

#[tokio::test]
async fn mcp_name_with_invalid_base64_is_a_header_mismatch() {
    let r = simple_text_call().id(json!(33)).header("Mcp-Name", "=?base64?abc?=").send(app()).await;
    assert_error(&r, StatusCode::BAD_REQUEST, HEADER_MISMATCH, Some(json!(33)));
}

#[tokio::test]
async fn resources_read_checks_mcp_name_against_the_uri() {
    let call = || Call::new("resources/read", json!({ "uri": "test://static-text" }));
    let r = call().send(app()).await;
    assert_eq!(r.result()["contents"][0]["text"], "This is the content of the static text resource.");
    let r = call().id(json!(34)).header("Mcp-Name", "test://static-binary").send(app()).await;
    assert_error(&r, StatusCode::BAD_REQUEST, HEADER_MISMATCH, Some(json!(34)));
}

#[tokio::test]
async fn prompts_get_checks_mcp_name_against_the_name() {
    let call = || Call::new("prompts/get", json!({ "name": "test_simple_prompt" }));
    let r = call().send(app()).await;
    assert_eq!(r.result()["messages"][0]["content"]["text"], "This is a simple prompt for testing.");
    let r = call().id(json!(35)).without("mcp-name").send(app()).await;
    assert_error(&r, StatusCode::BAD_REQUEST, HEADER_MISMATCH, Some(json!(35)));
}

#[tokio::test]
async fn tasks_get_checks_mcp_name_against_the_task_id() {
    let call = || Call::with_caps("tasks/get", json!({ "taskId": "task-abc" }), tasks_caps());
    let r = call().id(json!(36)).header("Mcp-Name", "task-xyz").send(app()).await;
    assert_error(&r, StatusCode::BAD_REQUEST, HEADER_MISMATCH, Some(json!(36)));
    // With a matching Mcp-Name the request is admitted and the dispatcher
    // answers: the task is unknown.
    let r = call().id(json!(37)).send(app()).await;
    assert_error(&r, StatusCode::BAD_REQUEST, INVALID_PARAMS, Some(json!(37)));
}

#[tokio::test]
async fn tasks_result_with_a_task_id_and_no_mcp_name_is_method_not_found() {
    let call = Call::with_caps("tasks/result", json!({ "taskId": "task-abc" }), tasks_caps()).id(json!(38));
    assert!(!call.headers.contains_key("mcp-name"));
    let r = call.send(app()).await;
    assert_error(&r, StatusCode::NOT_FOUND, METHOD_NOT_FOUND, Some(json!(38)));
}

#[tokio::test]
async fn repeated_mcp_name_is_a_header_mismatch() {
    let r = simple_text_call().id(json!(39)).append("Mcp-Name", "test_simple_text").send(app()).await;
    assert_error(&r, StatusCode::BAD_REQUEST, HEADER_MISMATCH, Some(json!(39)));
}

// ---------------------------------------------------------------- admission order

#[tokio::test]
async fn origin_is_checked_before_content_type_and_body() {
    let req = Request::builder()
        .method(Method::POST)
        .uri("/mcp")
        .header(header::ORIGIN, "http://evil.example.com")
        .header(header::CONTENT_TYPE, "text/plain")
        .body(Body::from("{nope"))
        .unwrap();
    let (status, _, _) = send_request(app(), req).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn content_type_is_checked_before_parsing() {
    let req = Request::builder()
        .method(Method::POST)
        .uri("/mcp")
        .header(header::CONTENT_TYPE, "text/plain")
        .body(Body::from("{nope"))
        .unwrap();
    let (status, _, _) = send_request(app(), req).await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
}

#[tokio::test]
async fn meta_is_checked_before_every_header() {
    let r = Call::bare("unknown/method", json!({}))
        .id(json!(90))
        .without("mcp-protocol-version")
        .without("mcp-method")
        .send(app())
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, INVALID_PARAMS, Some(json!(90)));
}

#[tokio::test]
async fn version_support_is_checked_before_mcp_method() {
    let r = Call::new("tools/list", json!({ "_meta": { PV_KEY: "v999.0.0" } }))
        .id(json!(91))
        .header("MCP-Protocol-Version", "v999.0.0")
        .header("Mcp-Method", "prompts/list")
        .send(app())
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, UNSUPPORTED_VERSION, Some(json!(91)));
}

#[tokio::test]
async fn mcp_method_is_checked_before_the_method_exists() {
    let r = Call::new("unknown/method", json!({})).id(json!(92)).without("mcp-method").send(app()).await;
    assert_error(&r, StatusCode::BAD_REQUEST, HEADER_MISMATCH, Some(json!(92)));
}

#[tokio::test]
async fn mcp_name_is_checked_before_mcp_param() {
    let r = region_call("Hello").id(json!(93)).without("mcp-name").send(app()).await;
    assert_error(&r, StatusCode::BAD_REQUEST, HEADER_MISMATCH, Some(json!(93)));
    assert!(r.body()["error"]["message"].as_str().unwrap().contains("Mcp-Name"), "{}", r.text);
}

#[tokio::test]
async fn mcp_param_is_checked_before_schema_validation() {
    // A number where the schema wants a string: the header matches, so the
    // request is admitted and the schema violation is a tool error.
    let call = || Call::new("tools/call", json!({ "name": "test_header_param", "arguments": { "region": 5 } }));
    let r = call().id(json!(94)).send(app()).await;
    assert_error(&r, StatusCode::BAD_REQUEST, HEADER_MISMATCH, Some(json!(94)));
    let r = call().header("Mcp-Param-Region", "5").send(app()).await;
    assert_eq!(r.result()["isError"], true, "{}", r.text);
}

// ---------------------------------------------------------------- methods

#[tokio::test]
async fn unknown_method_is_not_found() {
    let r = Call::new("unknown/method", json!({})).id(json!(601)).send(app()).await;
    assert_error(&r, StatusCode::NOT_FOUND, METHOD_NOT_FOUND, Some(json!(601)));
}

#[tokio::test]
async fn removed_methods_are_not_found() {
    let cases = [
        ("initialize", json!({ "protocolVersion": VERSION, "capabilities": {} })),
        ("ping", json!({})),
        ("logging/setLevel", json!({ "level": "info" })),
        ("resources/subscribe", json!({ "uri": "test://static-text" })),
        ("resources/unsubscribe", json!({ "uri": "test://static-text" })),
        ("tasks/list", json!({})),
    ];
    for (method, params) in cases {
        let r = Call::with_caps(method, params, tasks_caps()).id(json!(500)).send(app()).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{method}: {}", r.text);
        assert_error(&r, StatusCode::NOT_FOUND, METHOD_NOT_FOUND, Some(json!(500)));
    }
}

// ---------------------------------------------------------------- Mcp-Param-*

fn region_call(region: &str) -> Call {
    Call::new("tools/call", json!({ "name": "test_header_param", "arguments": { "region": region } }))
}

#[tokio::test]
async fn mcp_param_in_base64_is_decoded() {
    let r = region_call("Hello").header("Mcp-Param-Region", "=?base64?SGVsbG8=?=").send(app()).await;
    assert_eq!(first_text(r.result()), "Region: Hello");
}

#[tokio::test]
async fn mcp_param_with_bad_base64_padding_is_a_header_mismatch() {
    let r = region_call("Hello").id(json!(41)).header("Mcp-Param-Region", "=?base64?SGVsbG8?=").send(app()).await;
    assert_error(&r, StatusCode::BAD_REQUEST, HEADER_MISMATCH, Some(json!(41)));
}

#[tokio::test]
async fn mcp_param_with_bad_base64_characters_is_a_header_mismatch() {
    let r = region_call("Hello").id(json!(42)).header("Mcp-Param-Region", "=?base64?SGVs!!!bG8=?=").send(app()).await;
    assert_error(&r, StatusCode::BAD_REQUEST, HEADER_MISMATCH, Some(json!(42)));
}

#[tokio::test]
async fn mcp_param_without_the_prefix_is_literal() {
    let r = region_call("SGVsbG8=").header("Mcp-Param-Region", "SGVsbG8=").send(app()).await;
    assert_eq!(first_text(r.result()), "Region: SGVsbG8=");
}

#[tokio::test]
async fn mcp_param_without_the_suffix_is_literal() {
    let r = region_call("=?base64?SGVsbG8=").header("Mcp-Param-Region", "=?base64?SGVsbG8=").send(app()).await;
    assert_eq!(first_text(r.result()), "Region: =?base64?SGVsbG8=");
}

#[tokio::test]
async fn mcp_param_omitted_is_a_header_mismatch() {
    let r = region_call("test-value").id(json!(43)).send(app()).await;
    assert_error(&r, StatusCode::BAD_REQUEST, HEADER_MISMATCH, Some(json!(43)));
}

#[tokio::test]
async fn mcp_param_with_a_different_value_is_a_header_mismatch() {
    let r = region_call("eu-west").id(json!(44)).header("Mcp-Param-Region", "us-east").send(app()).await;
    assert_error(&r, StatusCode::BAD_REQUEST, HEADER_MISMATCH, Some(json!(44)));
}

#[tokio::test]
async fn mcp_param_literal_match_is_accepted() {
    let r = region_call("eu-west").header("mcp-param-region", "eu-west").send(app()).await;
    assert_eq!(first_text(r.result()), "Region: eu-west");
}

// ---------------------------------------------------------------- Origin

#[tokio::test]
async fn foreign_origin_is_forbidden() {
    let r = Call::new("server/discover", json!({})).header("Origin", "http://evil.example.com").send(app()).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text);
    assert!(r.body().get("result").is_none());
}

#[tokio::test]
async fn local_origins_and_no_origin_are_accepted() {
    for origin in ["http://localhost:3000", "http://127.0.0.1:8080"] {
        let r = Call::new("server/discover", json!({})).header("Origin", origin).send(app()).await;
        assert!(r.result()["capabilities"].is_object(), "{origin}: {}", r.text);
    }
    let call = Call::new("server/discover", json!({}));
    assert!(!call.headers.contains_key(header::ORIGIN));
    assert!(call.send(app()).await.result()["capabilities"].is_object());
}

#[tokio::test]
async fn configured_origins_replace_the_defaults() {
    let config = HttpConfig::default().with(|c| {
        c.allowed_origins = vec!["https://app.example.com".into()];
    });
    let app = app_with(config);
    let r = Call::new("server/discover", json!({})).header("Origin", "https://app.example.com").send(app.clone()).await;
    assert!(r.result()["capabilities"].is_object());
    let r = Call::new("server/discover", json!({})).header("Origin", "http://localhost").send(app).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text);
}

// ---------------------------------------------------------------- body and content type

#[tokio::test]
async fn body_over_the_limit_is_payload_too_large() {
    let app = app_with(HttpConfig::default().with(|c| {
        c.max_body_bytes = 1024;
    }));
    let padded = |len: usize| {
        let mut call = Call::new("tools/list", json!({ "pad": "" }));
        let base = call.body.to_string().len();
        call.body["params"]["pad"] = json!("x".repeat(len - base));
        assert_eq!(call.body.to_string().len(), len);
        call
    };
    let r = padded(2048).send(app.clone()).await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE, "{}", r.text);
    // The same request under the limit goes through.
    let r = padded(1000).send(app).await;
    assert!(r.result()["tools"].is_array());
}

#[tokio::test]
async fn non_json_content_type_is_unsupported_media_type() {
    let r = Call::new("tools/list", json!({})).header("Content-Type", "text/plain").send(app()).await;
    assert_eq!(r.status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{}", r.text);
    let r =
        Call::new("tools/list", json!({})).header("Content-Type", "application/json; charset=utf-8").send(app()).await;
    assert!(r.result()["tools"].is_array());
}

// ---------------------------------------------------------------- other routes

#[tokio::test]
async fn get_mcp_is_method_not_allowed_with_allow_post() {
    let (status, _, headers) = send_request(app(), get("/mcp")).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(headers.get(header::ALLOW).unwrap(), "POST");
}

#[tokio::test]
async fn delete_mcp_is_method_not_allowed() {
    let req = Request::builder().method(Method::DELETE).uri("/mcp").body(Body::empty()).unwrap();
    let (status, _, headers) = send_request(app(), req).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(headers.get(header::ALLOW).unwrap(), "POST");
}

#[tokio::test]
async fn health_and_readiness() {
    let r = exchange(app(), get("/healthz")).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.text, "ok");
    let r = exchange(app(), get("/readyz")).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.text, "ready");
}

#[tokio::test]
async fn readiness_follows_the_probe_and_shutdown() {
    let failing: presa_http::ReadyCheck = Arc::new(|| Box::pin(async { false }));
    let app = app_with(HttpConfig::default().with(|c| {
        c.probes.ready = Some(failing);
    }));
    assert_eq!(exchange(app, get("/readyz")).await.status, StatusCode::SERVICE_UNAVAILABLE);

    let server = server();
    let app = presa_http::router(server.clone(), HttpConfig::default());
    assert_eq!(exchange(app.clone(), get("/readyz")).await.status, StatusCode::OK);
    server.shutdown_token().cancel();
    assert_eq!(exchange(app.clone(), get("/readyz")).await.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(exchange(app, get("/healthz")).await.status, StatusCode::OK);
}

// ---------------------------------------------------------------- results

#[tokio::test]
async fn discover_result_is_complete() {
    let r = Call::new("server/discover", json!({})).id(json!(201)).send(app()).await;
    assert_eq!(r.content_type(), "application/json");
    let result = r.result();
    assert_eq!(r.body()["id"], 201);
    assert_eq!(result["resultType"], "complete");
    assert!(result["ttlMs"].as_u64().is_some(), "{result}");
    assert!(matches!(result["cacheScope"].as_str(), Some("public" | "private")), "{result}");
    assert_eq!(result["supportedVersions"], json!([VERSION]));
    assert_eq!(result["capabilities"]["extensions"][TASKS], json!({}));
    assert!(result["capabilities"].get("tasks").is_none(), "no v1 tasks capability: {result}");
    assert!(result["capabilities"]["tools"].is_object() && result["capabilities"]["prompts"].is_object());
    let info = &result["_meta"]["io.modelcontextprotocol/serverInfo"];
    assert!(info["name"].as_str().is_some_and(|n| !n.is_empty()), "{result}");
    assert!(info["version"].is_string(), "{result}");
}

#[tokio::test]
async fn tools_list_order_is_stable_across_routers() {
    let names = |r: &Resp| -> Vec<String> {
        r.result()["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap().to_string()).collect()
    };
    let a = names(&Call::new("tools/list", json!({})).send(app()).await);
    let b = names(&Call::new("tools/list", json!({})).send(app()).await);
    assert!(a.len() > 10, "{a:?}");
    assert_eq!(a, b);
    assert_eq!(a[0], "test_simple_text");
    let r = Call::new("tools/list", json!({})).send(app()).await;
    assert_eq!(r.result()["resultType"], "complete");
    assert!(r.result()["ttlMs"].is_u64() && r.result()["cacheScope"].is_string());
}

#[tokio::test]
async fn json_bodies_are_single_line() {
    // `exchange` asserts the single line on every JSON body; make sure a varied
    // set of results and errors went through it as JSON.
    let calls = [
        Call::new("server/discover", json!({})),
        Call::new("tools/list", json!({})),
        Call::new("prompts/list", json!({})),
        Call::new("resources/templates/list", json!({})),
        Call::new("resources/read", json!({ "uri": "test://template/7/data" })),
        Call::new("prompts/get", json!({ "name": "test_prompt_with_image" })),
        Call::new("tools/call", json!({ "name": "test_multiple_content_types", "arguments": {} })),
        Call::new("unknown/method", json!({})),
    ];
    for call in calls {
        let r = call.send(app()).await;
        assert_eq!(r.content_type(), "application/json", "{}", r.text);
        assert!(r.json.is_some());
        assert!(!r.text.contains('\n'));
    }
}

// ---------------------------------------------------------------- tools/call errors

#[tokio::test]
async fn schema_violation_is_a_tool_error() {
    let r = Call::new("tools/call", json!({ "name": "slow_compute", "arguments": { "seconds": "abc" } }))
        .id(json!(51))
        .send(app())
        .await;
    let result = r.result();
    assert_eq!(result["isError"], true, "{result}");
    assert_eq!(result["content"][0]["type"], "text");
    assert_eq!(r.body()["id"], 51);
}

#[tokio::test]
async fn unknown_tool_is_invalid_params() {
    let r = Call::new("tools/call", json!({ "name": "no_such_tool", "arguments": {} })).id(json!(52)).send(app()).await;
    assert_error(&r, StatusCode::BAD_REQUEST, INVALID_PARAMS, Some(json!(52)));
}

#[tokio::test]
async fn arguments_that_are_not_an_object_are_invalid_params() {
    let r = Call::new("tools/call", json!({ "name": "test_simple_text", "arguments": [1, 2] }))
        .id(json!(53))
        .send(app())
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, INVALID_PARAMS, Some(json!(53)));
}

#[tokio::test]
async fn undeclared_sampling_is_a_missing_capability() {
    let r = Call::new("tools/call", json!({ "name": "test_missing_capability", "arguments": {} }))
        .id(json!(401))
        .send(app())
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, MISSING_CAPABILITY, Some(json!(401)));
    assert_eq!(r.body()["error"]["data"]["requiredCapabilities"]["sampling"], json!({}));
    // Declared: the tool runs.
    let r = Call::with_caps(
        "tools/call",
        json!({ "name": "test_missing_capability", "arguments": {} }),
        json!({ "sampling": {} }),
    )
    .send(app())
    .await;
    assert_eq!(first_text(r.result()), "Success");
}

#[tokio::test]
async fn task_required_tool_without_tasks_is_a_missing_capability() {
    let r = Call::new("tools/call", json!({ "name": "failing_job", "arguments": {} })).id(json!(402)).send(app()).await;
    assert_error(&r, StatusCode::BAD_REQUEST, MISSING_CAPABILITY, Some(json!(402)));
    assert_eq!(r.body()["error"]["data"]["requiredCapabilities"]["extensions"][TASKS], json!({}));
}

#[tokio::test]
async fn task_required_tool_with_tasks_creates_a_task() {
    let r = Call::with_caps("tools/call", json!({ "name": "failing_job", "arguments": {} }), tasks_caps())
        .send(app())
        .await;
    let result = r.result();
    assert_eq!(result["resultType"], "task", "{result}");
}

/// `--max-queued`: past the bound a create is refused with -32023, HTTP 429,
/// `Retry-After` and `data.retryAfterMs`, retryable, and stores nothing.
#[tokio::test]
async fn a_full_work_queue_is_429_with_retry_after_and_stores_nothing() {
    let store = Arc::new(MemoryStore::with_partitions(1));
    let backend = Backend::new(store.clone());
    let config = ServerConfig::default().with(|c| {
        c.max_queued_per_partition = Some(1);
    });
    let server = Server::new(Core::new(config, presa_demo::catalog().unwrap(), backend), StateCodec::new(b"test"));
    let app = presa_http::router(server, HttpConfig::default());
    let create = || Call::with_caps("tools/call", json!({ "name": "failing_job", "arguments": {} }), tasks_caps());
    let first = create().send(app.clone()).await;
    assert_eq!(first.result()["resultType"], "task");
    let r = create().id(json!(429)).send(app.clone()).await;
    assert_error(&r, StatusCode::TOO_MANY_REQUESTS, -32023, Some(json!(429)));
    let data = &r.body()["error"]["data"];
    assert_eq!(data["retryAfterMs"], presa_server::QUEUE_FULL_RETRY_AFTER_MS, "{data}");
    assert_eq!(data["retryable"], true, "{data}");
    assert_eq!(data["limit"], "max_queued", "{data}");
    assert_eq!(r.headers.get(header::RETRY_AFTER).and_then(|v| v.to_str().ok()), Some("1"));
    let stats = store.work_stats().await.unwrap();
    assert_eq!(stats.iter().map(|p| p.queued + p.pending).sum::<u64>(), 1, "only the first task's work: {stats:?}");
}

/// A full pod (`--max-tasks`) is not the caller's fault: 503, retryable,
/// with `Retry-After` from `data.retryAfterMs`.
#[tokio::test]
async fn a_full_pod_is_503_with_retry_after() {
    let backend = Backend::new(Arc::new(MemoryStore::new().with_max_tasks(1)));
    let server =
        Server::new(Core::new(ServerConfig::default(), presa_demo::catalog().unwrap(), backend), StateCodec::new(b"t"));
    let app = presa_http::router(server, HttpConfig::default());
    let create = || Call::with_caps("tools/call", json!({ "name": "failing_job", "arguments": {} }), tasks_caps());
    assert_eq!(create().send(app.clone()).await.result()["resultType"], "task");
    let r = create().id(json!(503)).send(app).await;
    assert_error(&r, StatusCode::SERVICE_UNAVAILABLE, -32603, Some(json!(503)));
    assert_eq!(r.body()["error"]["data"]["limit"], "max_tasks");
    assert_eq!(r.headers.get(header::RETRY_AFTER).and_then(|v| v.to_str().ok()), Some("1"));
}

#[tokio::test]
async fn unknown_resource_is_invalid_params_with_the_uri() {
    let r = Call::new("resources/read", json!({ "uri": "test://nope" })).id(json!(61)).send(app()).await;
    assert_error(&r, StatusCode::BAD_REQUEST, INVALID_PARAMS, Some(json!(61)));
    assert_eq!(r.body()["error"]["data"]["uri"], "test://nope");
}

// ---------------------------------------------------------------- MRTR

fn elicitation() -> Value {
    json!({ "elicitation": {} })
}

fn mrtr_call(tool: &str, extra: Value) -> Call {
    let mut params = json!({ "name": tool, "arguments": {} });
    params.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    Call::with_caps("tools/call", params, elicitation())
}

async fn request_state_round_one() -> String {
    let r = mrtr_call("test_input_required_result_request_state", json!({})).send(app()).await;
    let result = r.result();
    assert_eq!(result["resultType"], "input_required", "{result}");
    assert_eq!(result["inputRequests"]["confirm"]["method"], "elicitation/create", "{result}");
    result["requestState"].as_str().unwrap_or_else(|| panic!("no requestState in {result}")).to_string()
}

fn confirmed() -> Value {
    json!({ "confirm": { "action": "accept", "content": { "ok": true } } })
}

#[tokio::test]
async fn mrtr_round_trip_with_request_state() {
    let state = request_state_round_one().await;
    let r = mrtr_call(
        "test_input_required_result_request_state",
        json!({ "requestState": state, "inputResponses": confirmed() }),
    )
    .send(app())
    .await;
    let result = r.result();
    assert_eq!(result["resultType"], "complete", "{result}");
    assert!(first_text(result).contains("state-ok"), "{result}");
    assert!(first_text(result).contains("confirmed=true"), "{result}");
}

#[tokio::test]
async fn mrtr_state_is_independent_of_the_router_instance() {
    // The codec key is shared (`StateCodec::new(b"test")`): another router
    // (another process) accepts the state.
    let state = request_state_round_one().await;
    let other = app();
    let r = mrtr_call(
        "test_input_required_result_request_state",
        json!({ "requestState": state, "inputResponses": confirmed() }),
    )
    .send(other)
    .await;
    assert!(first_text(r.result()).contains("state-ok"));
}

#[tokio::test]
async fn mrtr_tampered_state_is_invalid_params() {
    let state = request_state_round_one().await;
    let r = mrtr_call(
        "test_input_required_result_request_state",
        json!({ "requestState": format!("{state}-TAMPERED"), "inputResponses": confirmed() }),
    )
    .id(json!(71))
    .send(app())
    .await;
    assert_error(&r, StatusCode::BAD_REQUEST, INVALID_PARAMS, Some(json!(71)));
}

#[tokio::test]
async fn mrtr_state_presented_to_another_tool_is_invalid_params() {
    // With a valid state and an answer, `test_input_required_result_tampered_state`
    // would answer "State verified": the binding to the tool must refuse it.
    let state = request_state_round_one().await;
    let r = mrtr_call(
        "test_input_required_result_tampered_state",
        json!({ "requestState": state, "inputResponses": confirmed() }),
    )
    .id(json!(72))
    .send(app())
    .await;
    assert_error(&r, StatusCode::BAD_REQUEST, INVALID_PARAMS, Some(json!(72)));
}

#[tokio::test]
async fn mrtr_state_presented_with_other_arguments_is_invalid_params() {
    // The tool's schema allows extra properties, so only the state binding
    // (a digest of name and arguments) can refuse this retry.
    let state = request_state_round_one().await;
    let mut call = mrtr_call(
        "test_input_required_result_request_state",
        json!({ "requestState": state, "inputResponses": confirmed() }),
    )
    .id(json!(76));
    call.body["params"]["arguments"] = json!({ "extra": 1 });
    let r = call.send(app()).await;
    assert_error(&r, StatusCode::BAD_REQUEST, INVALID_PARAMS, Some(json!(76)));
}

#[tokio::test]
async fn mrtr_null_input_responses_are_invalid_params() {
    let r = mrtr_call("test_input_required_result_elicitation", json!({ "inputResponses": null }))
        .id(json!(73))
        .send(app())
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, INVALID_PARAMS, Some(json!(73)));
}

#[tokio::test]
async fn mrtr_non_object_input_response_is_invalid_params() {
    let r = mrtr_call("test_input_required_result_elicitation", json!({ "inputResponses": { "user_name": 12345 } }))
        .id(json!(74))
        .send(app())
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, INVALID_PARAMS, Some(json!(74)));
}

#[tokio::test]
async fn mrtr_input_request_needs_the_declared_capability() {
    let r = Call::new("tools/call", json!({ "name": "test_input_required_result_request_state", "arguments": {} }))
        .id(json!(75))
        .send(app())
        .await;
    assert_error(&r, StatusCode::BAD_REQUEST, MISSING_CAPABILITY, Some(json!(75)));
    assert_eq!(r.body()["error"]["data"]["requiredCapabilities"]["elicitation"], json!({}));
}

// ---------------------------------------------------------------- logging and progress (JSON vs SSE)

fn logging_call(level: Option<&str>) -> Call {
    let meta = match level {
        Some(l) => json!({ LOG_KEY: l }),
        None => json!({}),
    };
    Call::new("tools/call", json!({ "name": "test_logging_tool", "arguments": {}, "_meta": meta }))
}

fn methods(frames: &[Value]) -> Vec<&str> {
    frames.iter().filter_map(|f| f["method"].as_str()).collect()
}

#[tokio::test]
async fn logging_without_log_level_is_plain_json() {
    let r = logging_call(None).send(app()).await;
    assert_eq!(r.content_type(), "application/json");
    assert_eq!(first_text(r.result()), "Logging complete");
    assert!(!r.text.contains("notifications/message"), "{}", r.text);
}

#[tokio::test]
async fn logging_with_log_level_streams_messages_then_the_response() {
    let r = logging_call(Some("info")).id(json!("log-1")).send(app()).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.content_type().starts_with("text/event-stream"), "{}", r.content_type());
    assert_eq!(r.headers.get("x-accel-buffering").unwrap(), "no");
    let frames = r.frames();
    assert_eq!(methods(&frames), ["notifications/message", "notifications/message"], "{frames:?}");
    assert_eq!(frames[0]["params"]["level"], "info");
    assert_eq!(frames[1]["params"]["level"], "warning");
    let last = frames.last().unwrap();
    assert_eq!(last["id"], "log-1", "the response comes last: {frames:?}");
    assert_eq!(first_text(&last["result"]), "Logging complete");
    assert_eq!(frames.iter().filter(|f| f.get("id").is_some()).count(), 1, "{frames:?}");
}

#[tokio::test]
async fn logging_with_warning_level_filters_info() {
    let r = logging_call(Some("warning")).send(app()).await;
    let frames = r.frames();
    assert_eq!(methods(&frames), ["notifications/message"], "{frames:?}");
    assert_eq!(frames[0]["params"]["level"], "warning");
    assert_eq!(first_text(&frames.last().unwrap()["result"]), "Logging complete");
}

#[tokio::test]
async fn logging_with_error_level_sends_no_messages() {
    let r = logging_call(Some("error")).send(app()).await;
    assert!(!r.text.contains("notifications/message"), "{}", r.text);
    assert_eq!(r.content_type(), "application/json");
    assert_eq!(first_text(r.result()), "Logging complete");
}

#[tokio::test]
async fn logging_without_sse_accept_falls_back_to_json() {
    let r = logging_call(Some("info")).header("Accept", "application/json").send(app()).await;
    assert_eq!(r.content_type(), "application/json");
    assert_eq!(first_text(r.result()), "Logging complete");
    assert!(!r.text.contains("notifications/message"), "{}", r.text);
}

#[tokio::test]
async fn listen_without_sse_accept_is_not_acceptable() {
    let r = Call::new("subscriptions/listen", json!({ "notifications": { "toolsListChanged": true } }))
        .id(json!(95))
        .header("Accept", "application/json")
        .send(app())
        .await;
    assert_eq!(r.status, StatusCode::NOT_ACCEPTABLE, "{}", r.text);
    assert_eq!(r.body()["id"], 95);
    assert!(r.body()["error"]["code"].is_i64());
}

fn progress_call(token: Option<&str>) -> Call {
    let meta = match token {
        Some(t) => json!({ "progressToken": t }),
        None => json!({}),
    };
    Call::new("tools/call", json!({ "name": "test_tool_with_progress", "arguments": {}, "_meta": meta }))
}

#[tokio::test]
async fn progress_token_streams_progress_then_the_result() {
    let r = progress_call(Some("p1")).id(json!(81)).send(app()).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.headers.get("x-accel-buffering").unwrap(), "no");
    let frames = r.frames();
    assert_eq!(frames.len(), 4, "{frames:?}");
    let progress: Vec<&Value> = frames.iter().filter(|f| f["method"] == "notifications/progress").collect();
    assert_eq!(progress.len(), 3, "{frames:?}");
    let mut previous = f64::MIN;
    for p in &progress {
        assert_eq!(p["params"]["progressToken"], "p1");
        let value = p["params"]["progress"].as_f64().unwrap();
        assert!(value >= previous, "progress must not decrease: {frames:?}");
        previous = value;
    }
    let last = frames.last().unwrap();
    assert_eq!(last["id"], 81);
    assert_eq!(first_text(&last["result"]), "Progress complete");
}

#[tokio::test]
async fn no_progress_token_is_plain_json() {
    let r = progress_call(None).send(app()).await;
    assert_eq!(r.content_type(), "application/json");
    assert_eq!(first_text(r.result()), "Progress complete");
    assert!(!r.text.contains("notifications/progress"));
}
