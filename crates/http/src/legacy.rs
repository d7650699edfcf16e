//! The 2025-11-25 era on the same `/mcp` endpoint, for clients that still
//! open with `initialize` (the versioning page's dual-era server).
//!
//! Sessions are stateless for the pods: the `Mcp-Session-Id` this module
//! issues is a token sealed with the shared `requestState` key
//! ([`presa_server::StateCodec`]), bound to the caller's principal and
//! expiring, that carries what the session negotiated (protocol version,
//! client capabilities, client info). Any pod verifies it. The little state
//! legacy semantics share (log level, resource subscriptions, ended) lives in
//! the store under the session's key, with the session's TTL.
//!
//! Requests run through the same dispatcher as modern ones, with a `_meta`
//! built from the session. Where the dispatcher answers an MRTR
//! `InputRequiredResult`, this module asks the client as 2025-11-25 does: a
//! JSON-RPC request on the call's SSE stream. The client's answer is a
//! separate POST that may reach another pod; it is published on the event
//! bus and the waiting call (wherever it runs) retries with the answers as
//! `inputResponses`, so a handler's `ToolContext::input` works in both eras.
//! Tasks attach to 2026-07-28 only: a task-required tool is refused with an
//! error naming that revision, optional ones run in the request.

use std::{collections::BTreeMap, collections::HashMap, time::Instant};

use axum::{
    extract::State,
    http::{HeaderMap, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
};
use futures::{StreamExt, future::ready};
use presa_protocol::{
    LEGACY_PROTOCOL_VERSION, LEGACY_VERSIONS, Method, TASKS_EXTENSION, codes, headers,
    jsonrpc::{self, ErrorObject, Incoming, Request},
    meta::{LogLevel, PROGRESS_TOKEN_KEY, PROTOCOL_VERSION_KEY, RequestMeta},
};
use presa_server::{Admitted, Caller, Outbox, Reply, Server, context::RESOURCE_UPDATED_EVENT, state::Binding};
use presa_store::util::now_ms;
use presa_telemetry::metrics;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::{
    App, admission,
    respond::{self, Era, NOTIFICATION, Observed, UNKNOWN_METHOD, json, refused},
};

/// The one method that opens a legacy session.
pub(crate) const INITIALIZE: &str = "initialize";
/// What a session token is bound to besides the principal (`Binding::method`).
const SESSION_PURPOSE: &str = "mcp-session";
/// Prefix of the bus events that carry a client's answer to a server request.
const ANSWER_EVENT: &str = "legacy/answer ";
/// Longest session id issued: it travels in a header on every request, and
/// proxies refuse large headers (nginx: 8 KiB per line by default).
const MAX_SESSION_ID_LEN: usize = 4096;
/// Prefix of the bus events that cancel a legacy call (`notifications/cancelled`).
const CANCEL_EVENT: &str = "legacy/cancel ";
/// Most MRTR rounds one legacy call may go through.
const MAX_ROUNDS: usize = 16;
/// The methods only a legacy session has, as metrics label them.
const LEGACY_METHODS: [&str; 5] =
    [INITIALIZE, "ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe"];

/// The metrics label of a legacy-only method (`None`: [`Method`] names it, or nothing does).
fn legacy_label(method: &str) -> Option<&'static str> {
    LEGACY_METHODS.into_iter().find(|m| *m == method)
}

/// Store fields of a session's shared state.
const FIELD_LOG_LEVEL: &str = "logLevel";
const FIELD_ENDED: &str = "ended";
const FIELD_SUBSCRIPTION: &str = "sub:";

/// What a session token carries (sealed, so the client cannot change it).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Negotiated {
    /// The negotiated protocol version.
    v: String,
    /// The client's capabilities from `initialize`.
    c: Map<String, Value>,
    /// The client's `clientInfo`, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    i: Option<Value>,
}

/// A verified session.
#[derive(Debug, Clone)]
struct Session {
    /// The key of its shared state and of its answers: a digest of the token.
    key: String,
    negotiated: Negotiated,
    /// When the token expires (ms since the epoch).
    expires_ms: u64,
}

/// Whether a message is of the 2026-07-28 era: its params carry `_meta` with a protocol version.
pub(crate) fn is_modern(message: &Value) -> bool {
    message["params"]["_meta"].get(PROTOCOL_VERSION_KEY).is_some()
}

/// [`is_modern`] on parsed params.
pub(crate) fn has_modern_meta(params: &Map<String, Value>) -> bool {
    params.get("_meta").and_then(|m| m.get(PROTOCOL_VERSION_KEY)).is_some()
}

fn binding(caller: &Caller) -> Binding {
    Binding { principal: caller.scope.key(), method: SESSION_PURPOSE.into(), digest: String::new() }
}

fn session_key(token: &str) -> String {
    Sha256::digest(token.as_bytes()).iter().take(16).map(|b| format!("{b:02x}")).collect()
}

/// A refusal of the session itself, before any method runs.
fn session_refused(status: StatusCode, message: &str) -> Response {
    metrics::request(UNKNOWN_METHOD, status.as_u16().to_string(), std::time::Duration::ZERO);
    let mut body = jsonrpc::failure(None, &ErrorObject::new(codes::INVALID_REQUEST, message));
    body["id"] = Value::Null;
    json(status, &body)
}

/// Verify the `Mcp-Session-Id` of a request from `caller`: 400 without one,
/// 404 when it is not ours, expired or ended (the client must initialize
/// again), 403 when it was issued to another principal.
async fn verify(
    app: &App,
    headers: &HeaderMap,
    caller: &Caller,
) -> Result<(Session, HashMap<String, String>), Response> {
    let Some(token) = headers.get(headers::SESSION_ID).and_then(|v| v.to_str().ok()) else {
        return Err(session_refused(StatusCode::BAD_REQUEST, "Bad Request: Mcp-Session-Id header is required"));
    };
    let token = token.trim();
    let codec = app.server.state_codec();
    let now = now_ms();
    let sealed = match codec.open(token, &binding(caller), now) {
        Ok(v) => v,
        // Any other failure (forged, expired, a requestState passed as a session id…) is an unknown session.
        Err(presa_server::state::StateError::OtherPrincipal) => {
            return Err(session_refused(StatusCode::FORBIDDEN, "Forbidden: the session belongs to another principal"));
        }
        Err(_) => {
            return Err(session_refused(
                StatusCode::NOT_FOUND,
                "Session not found: send initialize to start a new one",
            ));
        }
    };
    let Ok(negotiated) = serde_json::from_value::<Negotiated>(sealed.clone()) else {
        return Err(session_refused(StatusCode::NOT_FOUND, "Session not found: send initialize to start a new one"));
    };
    let expires_ms = sealed.get("e").and_then(Value::as_u64).unwrap_or(0);
    let session = Session { key: session_key(token), negotiated, expires_ms };
    let state = match app.server.core().store().session_state(&session.key).await {
        Ok(s) => s,
        Err(e) => {
            let status =
                if e.is_retryable() { StatusCode::SERVICE_UNAVAILABLE } else { StatusCode::INTERNAL_SERVER_ERROR };
            return Err(session_refused(status, "Session state unavailable, retry"));
        }
    };
    if state.contains_key(FIELD_ENDED) {
        return Err(session_refused(StatusCode::NOT_FOUND, "Session ended: send initialize to start a new one"));
    }
    Ok((session, state))
}

/// The capabilities a legacy client is told about.
fn server_capabilities() -> Value {
    json!({
        "tools": { "listChanged": true },
        "prompts": { "listChanged": true },
        "resources": { "subscribe": true, "listChanged": true },
        "completions": {},
        "logging": {},
    })
}

/// `initialize`: negotiate a version and issue the session token. With
/// `--legacy off`, an error naming the versions this server speaks.
pub(crate) fn initialize(app: &App, headers: &HeaderMap, req: Request, caller: &Caller, started: Instant) -> Response {
    let mut observed = Observed::start(app, headers, &req, started);
    observed.relabel(INITIALIZE);
    let requested = req.params.get("protocolVersion").and_then(Value::as_str).unwrap_or_default().to_string();
    if !app.config.legacy.enabled {
        let e = ErrorObject::with_data(
            codes::UNSUPPORTED_PROTOCOL_VERSION,
            format!(
                "Unsupported protocol version: this server speaks only {} (stateless, no initialize)",
                presa_protocol::PROTOCOL_VERSION
            ),
            json!({ "supported": presa_protocol::SUPPORTED_VERSIONS, "requested": requested }),
        );
        observed.failed(&e);
        return json(StatusCode::BAD_REQUEST, &jsonrpc::failure(Some(&req.id), &e));
    }
    let capabilities = match req.params.get("capabilities") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(c)) => c.clone(),
        Some(_) => {
            let e = ErrorObject::new(codes::INVALID_PARAMS, "Invalid params: capabilities must be an object");
            observed.failed(&e);
            return json(StatusCode::OK, &jsonrpc::failure(Some(&req.id), &e));
        }
    };
    let version = LEGACY_VERSIONS.iter().find(|v| **v == requested).copied().unwrap_or(LEGACY_PROTOCOL_VERSION);
    // Only the identifying fields of clientInfo travel in the id (icons can be large data URIs).
    let info = req.params.get("clientInfo").and_then(Value::as_object).map(|i| {
        let kept = ["name", "version", "title"].into_iter().filter_map(|k| Some((k.to_string(), i.get(k)?.clone())));
        Value::Object(kept.collect())
    });
    let negotiated = Negotiated { v: version.to_string(), c: capabilities, i: info };
    let expires = now_ms().saturating_add(u64::try_from(app.config.legacy.session_ttl.as_millis()).unwrap_or(u64::MAX));
    let mut sealed = serde_json::to_value(&negotiated).unwrap_or_default();
    sealed["e"] = json!(expires);
    let token = app.server.state_codec().seal(&binding(caller), sealed, expires);
    if token.len() > MAX_SESSION_ID_LEN {
        let e = ErrorObject::new(
            codes::INVALID_PARAMS,
            format!(
                "Invalid params: capabilities too large to carry in a session id (over {MAX_SESSION_ID_LEN} bytes)"
            ),
        );
        observed.failed(&e);
        return json(StatusCode::OK, &jsonrpc::failure(Some(&req.id), &e));
    }
    let config = app.server.config();
    let mut result = json!({
        "protocolVersion": version,
        "capabilities": server_capabilities(),
        "serverInfo": { "name": config.name, "version": config.version },
    });
    if let Some(i) = &config.instructions {
        result["instructions"] = json!(i);
    }
    observed.succeeded(&result);
    let mut resp = json(StatusCode::OK, &jsonrpc::success(&req.id, result));
    if let Ok(v) = HeaderValue::from_str(&token) {
        resp.headers_mut().insert(headers::SESSION_ID, v);
    }
    resp
}

/// Any POST in a legacy session: a client's answer to a server request, a
/// notification, or a request.
pub(crate) async fn post(app: App, headers: HeaderMap, message: Value, caller: Caller, started: Instant) -> Response {
    if message.get("method").is_none() && (message.get("result").is_some() || message.get("error").is_some()) {
        let (session, _) = match verify(&app, &headers, &caller).await {
            Ok(s) => s,
            Err(resp) => return resp,
        };
        return answer(&app, &session, &message).await;
    }
    let req = match jsonrpc::classify(message) {
        Ok(Incoming::Request(r)) if r.method == INITIALIZE => return initialize(&app, &headers, r, &caller, started),
        Ok(Incoming::Request(r)) => r,
        Ok(Incoming::Notification { method, params }) => {
            let (session, _) = match verify(&app, &headers, &caller).await {
                Ok(s) => s,
                Err(resp) => return resp,
            };
            if method == "notifications/cancelled"
                && let Some(id) =
                    params.as_ref().and_then(|p| p.get("requestId")).filter(|i| i.is_string() || i.is_i64())
            {
                // The call may run on another pod: tell them all.
                let event = json!({ "s": session.key, "id": id });
                if let Err(e) = app.server.core().bus().publish(&format!("{CANCEL_EVENT}{event}")).await {
                    tracing::warn!(error = %e, "a legacy cancellation could not be published");
                }
            }
            metrics::request(NOTIFICATION, "ok", started.elapsed());
            return StatusCode::ACCEPTED.into_response();
        }
        Err(e) => {
            let err = e.to_error();
            metrics::request(UNKNOWN_METHOD, err.code.to_string(), started.elapsed());
            return json(StatusCode::BAD_REQUEST, &jsonrpc::failure(e.id(), &err));
        }
    };
    let (session, state) = match verify(&app, &headers, &caller).await {
        Ok(s) => s,
        Err(resp) => return resp,
    };
    let mut observed = Observed::start(&app, &headers, &req, started);
    if let Some(label) = legacy_label(&req.method) {
        observed.relabel(label);
    }
    observed.record_version(&session.negotiated.v);
    if let Some(v) = headers.get(headers::PROTOCOL_VERSION).and_then(|v| v.to_str().ok())
        && !LEGACY_VERSIONS.contains(&v.trim())
    {
        let e = ErrorObject::with_data(
            codes::INVALID_REQUEST,
            format!("Bad Request: unsupported MCP-Protocol-Version '{}' in a 2025-11-25 session", v.trim()),
            json!({ "supported": LEGACY_VERSIONS }),
        );
        observed.failed(&e);
        return json(StatusCode::BAD_REQUEST, &jsonrpc::failure(Some(&req.id), &e));
    }
    let store = app.server.core().store().clone();
    let ttl = remaining(&session);
    let done = |observed: &mut Observed, r: Result<(), ErrorObject>| match r {
        Ok(()) => {
            let result = json!({});
            observed.succeeded(&result);
            json(StatusCode::OK, &jsonrpc::success(&req.id, result))
        }
        Err(e) => {
            observed.failed(&e);
            json(StatusCode::OK, &jsonrpc::failure(Some(&req.id), &e))
        }
    };
    let unavailable = |e: presa_store::StoreError| {
        let mut err = ErrorObject::new(codes::INTERNAL_ERROR, "Session state not saved, retry");
        if e.is_retryable() {
            err.data = Some(json!({ "retryable": true }));
        }
        err
    };
    match req.method.as_str() {
        "ping" => return done(&mut observed, Ok(())),
        "logging/setLevel" => {
            let r = match req.params.get("level").and_then(Value::as_str).and_then(LogLevel::parse) {
                None => Err(ErrorObject::new(codes::INVALID_PARAMS, "Invalid params: level must be a log level")),
                Some(level) => store
                    .set_session_field(&session.key, FIELD_LOG_LEVEL, Some(level.as_str()), ttl)
                    .await
                    .map_err(unavailable),
            };
            return done(&mut observed, r);
        }
        "resources/subscribe" | "resources/unsubscribe" => {
            let r = match req.params.get("uri").and_then(Value::as_str) {
                None => Err(ErrorObject::new(codes::INVALID_PARAMS, "Invalid params: uri must be a string")),
                Some(uri) => {
                    let value = (req.method == "resources/subscribe").then_some("1");
                    let field = format!("{FIELD_SUBSCRIPTION}{uri}");
                    store.set_session_field(&session.key, &field, value, ttl).await.map_err(unavailable)
                }
            };
            return done(&mut observed, r);
        }
        _ => {}
    }
    let Ok(
        method @ (Method::ToolsList
        | Method::ToolsCall
        | Method::ResourcesList
        | Method::ResourcesRead
        | Method::ResourceTemplatesList
        | Method::PromptsList
        | Method::PromptsGet
        | Method::Complete),
    ) = req.method.parse::<Method>()
    else {
        // Tasks attach to 2026-07-28 only, and so does everything else dispatch knows.
        let e = ErrorObject::new(
            codes::METHOD_NOT_FOUND,
            format!("Method not found: {} (in a 2025-11-25 session)", req.method),
        );
        observed.failed(&e);
        return json(StatusCode::OK, &jsonrpc::failure(Some(&req.id), &e));
    };
    let raw = match req.params.get("_meta") {
        Some(Value::Object(m)) => m.clone(),
        _ => Map::new(),
    };
    let meta = RequestMeta {
        protocol_version: session.negotiated.v.clone(),
        client_capabilities: without_tasks(&session.negotiated.c),
        client_info: session.negotiated.i.clone(),
        log_level: state.get(FIELD_LOG_LEVEL).and_then(|l| LogLevel::parse(l)),
        progress_token: raw.get(PROGRESS_TOKEN_KEY).filter(|t| t.is_string() || t.is_i64()).cloned(),
        raw,
    };
    let streaming = respond::accepts_sse(&headers);
    let server = app.server.clone();
    let id = req.id.clone();
    let key = session.key.clone();
    let limit = app.config.legacy.answer_timeout;
    respond::respond(app, id, streaming, observed, Era::Legacy, move |tx, cancel| {
        let outbox = tx.clone().map_or_else(Outbox::none, Outbox::new);
        let admitted = Admitted { id: req.id, method, params: req.params, meta, caller, outbox, cancel };
        Box::pin(async move {
            let call = Call { server: &server, session: &key, stream: tx.as_ref(), limit };
            call.run(admitted).await
        })
    })
    .await
}

/// How long the session has left (at least a second), the TTL of its shared state.
fn remaining(session: &Session) -> std::time::Duration {
    std::time::Duration::from_millis(session.expires_ms.saturating_sub(now_ms()).max(1000))
}

/// A client's answer to a request the server sent on a call's stream:
/// published for the waiting call, wherever it runs. 202.
async fn answer(app: &App, session: &Session, message: &Value) -> Response {
    let Some(id) = message.get("id").filter(|i| i.is_string() || i.is_i64()) else {
        return session_refused(StatusCode::BAD_REQUEST, "Bad Request: a response needs a string or integer id");
    };
    let mut event = json!({ "s": session.key, "id": id });
    if let Some(r) = message.get("result") {
        event["result"] = r.clone();
    }
    if let Some(e) = message.get("error") {
        event["error"] = e.clone();
    }
    match app.server.core().bus().publish(&format!("{ANSWER_EVENT}{event}")).await {
        Ok(()) => {
            metrics::request(NOTIFICATION, "ok", std::time::Duration::ZERO);
            StatusCode::ACCEPTED.into_response()
        }
        Err(e) => {
            tracing::warn!(error = %e, "a legacy answer could not be published");
            session_refused(StatusCode::SERVICE_UNAVAILABLE, "Answer not delivered, retry")
        }
    }
}

/// One legacy call: dispatched, and re-dispatched with the client's answers
/// while the dispatcher needs input.
struct Call<'a> {
    server: &'a Server,
    /// The session key: answers of other sessions are ignored.
    session: &'a str,
    /// The call's response stream (`None`: the client takes no SSE, so it cannot be asked).
    stream: Option<&'a mpsc::UnboundedSender<Value>>,
    /// How long to wait for the client's answers.
    limit: std::time::Duration,
}

impl Call<'_> {
    /// Run the call; a `notifications/cancelled` for it, posted to any pod, stops its handler.
    async fn run(&self, admitted: Admitted) -> Reply {
        let watcher = match admitted.method {
            Method::ToolsCall | Method::PromptsGet => match self.server.core().bus().subscribe().await {
                Ok(events) => Some(tokio::spawn(cancel_on_request(
                    events,
                    self.session.to_string(),
                    admitted.id.to_value(),
                    admitted.cancel.clone(),
                ))),
                Err(e) => {
                    tracing::debug!(error = %e, "no cancellation watch for this legacy call");
                    None
                }
            },
            _ => None,
        };
        let reply = self.rounds(admitted).await;
        if let Some(w) = watcher {
            w.abort();
        }
        reply
    }

    async fn rounds(&self, mut admitted: Admitted) -> Reply {
        for _ in 0..MAX_ROUNDS {
            let mut result = match self.server.handle(&admitted).await {
                Reply::Result(v) => v,
                Reply::Error(e) => return Reply::Error(legacy_error(&admitted, e)),
                stream @ Reply::Stream(_) => return stream,
            };
            if result.get("resultType").and_then(Value::as_str) != Some("input_required") {
                strip(&mut result);
                return Reply::Result(result);
            }
            let requests: BTreeMap<String, Value> = match result.get("inputRequests") {
                Some(Value::Object(r)) => r.clone().into_iter().collect(),
                _ => BTreeMap::new(),
            };
            let answers = match self.ask(&requests, &admitted.cancel).await {
                Ok(a) => a,
                Err(e) => return Reply::Error(e),
            };
            admitted.params.insert("inputResponses".into(), Value::Object(answers));
            match result.get_mut("requestState").map(Value::take) {
                Some(state) => admitted.params.insert("requestState".into(), state),
                None => admitted.params.remove("requestState"),
            };
        }
        Reply::Error(ErrorObject::new(codes::INTERNAL_ERROR, "The call asked the client too many times"))
    }

    /// Send each input request to the client on the call's stream and wait
    /// for every answer (from any pod, through the bus).
    async fn ask(
        &self,
        requests: &BTreeMap<String, Value>,
        cancel: &CancellationToken,
    ) -> Result<Map<String, Value>, ErrorObject> {
        if requests.is_empty() {
            return Ok(Map::new());
        }
        let Some(stream) = self.stream else {
            return Err(ErrorObject::new(
                codes::INVALID_REQUEST,
                "This call asks the client (elicitation or sampling): send it with Accept: text/event-stream",
            ));
        };
        let bus = self.server.core().bus();
        // Subscribed before asking, so an answer that comes at once is not missed.
        let mut events = bus.subscribe().await.map_err(|e| {
            let mut err = ErrorObject::new(codes::INTERNAL_ERROR, "Cannot wait for the client's answer, retry");
            if e.is_retryable() {
                err.data = Some(json!({ "retryable": true }));
            }
            err
        })?;
        let round = session_key(&format!("{}{}", self.session, now_ms()));
        let mut pending: HashMap<String, String> = HashMap::new();
        for (key, request) in requests {
            let id = format!("presa-{}-{key}", &round[..12]);
            let message = json!({
                "jsonrpc": "2.0",
                "id": id,
                "method": request["method"],
                "params": request.get("params").cloned().unwrap_or_else(|| json!({})),
            });
            if stream.send(message).is_err() {
                return Err(ErrorObject::new(codes::INTERNAL_ERROR, "The client went away"));
            }
            pending.insert(id, key.clone());
        }
        let session = self.session.to_string();
        let mut answers = Map::new();
        let deadline = tokio::time::sleep(self.limit);
        tokio::pin!(deadline);
        let mut relevant = events.by_ref().filter_map(|event| {
            let parsed = event
                .strip_prefix(ANSWER_EVENT)
                .and_then(|rest| serde_json::from_str::<Value>(rest).ok())
                .filter(|a| a["s"] == session.as_str());
            ready(parsed)
        });
        while !pending.is_empty() {
            let event = tokio::select! {
                e = relevant.next() => e,
                _ = &mut deadline => {
                    return Err(ErrorObject::new(codes::INTERNAL_ERROR, "The client did not answer in time"));
                }
                _ = cancel.cancelled() => return Err(ErrorObject::new(codes::INTERNAL_ERROR, "The client went away")),
            };
            let Some(event) = event else {
                return Err(ErrorObject::new(codes::INTERNAL_ERROR, "The answer channel closed, retry"));
            };
            let Some(key) = event["id"].as_str().and_then(|id| pending.remove(id)) else {
                continue;
            };
            if let Some(error) = event.get("error") {
                let message = error["message"].as_str().unwrap_or("error");
                return Err(ErrorObject::with_data(
                    codes::INVALID_PARAMS,
                    format!("The client refused the request {key}: {message}"),
                    error.clone(),
                ));
            }
            match event.get("result") {
                Some(r @ Value::Object(_)) => {
                    answers.insert(key, r.clone());
                }
                _ => {
                    return Err(ErrorObject::new(
                        codes::INVALID_PARAMS,
                        format!("The client's answer to {key} is not an object"),
                    ));
                }
            }
        }
        Ok(answers)
    }
}

/// Cancel `token` when the bus says the client cancelled request `id` of `session`.
async fn cancel_on_request(mut events: presa_store::EventStream, session: String, id: Value, token: CancellationToken) {
    while let Some(event) = events.next().await {
        let Some(cancel) = event.strip_prefix(CANCEL_EVENT).and_then(|e| serde_json::from_str::<Value>(e).ok()) else {
            continue;
        };
        if cancel["s"] == session.as_str() && cancel["id"] == id {
            token.cancel();
            return;
        }
    }
}

/// A dispatcher error as a legacy client should read it: a task-required
/// tool names the revision that can run it.
fn legacy_error(admitted: &Admitted, e: ErrorObject) -> ErrorObject {
    let needs_tasks = e.code == codes::MISSING_REQUIRED_CLIENT_CAPABILITY
        && e.data.as_ref().is_some_and(|d| d["requiredCapabilities"]["extensions"].get(TASKS_EXTENSION).is_some());
    if !needs_tasks {
        return e;
    }
    let tool = admitted.params.get("name").and_then(Value::as_str).unwrap_or("this tool");
    ErrorObject {
        message: format!(
            "Tool {tool} runs only as a task: call it with MCP {} and the {TASKS_EXTENSION} extension \
             (this 2025-11-25 session cannot create tasks)",
            presa_protocol::PROTOCOL_VERSION
        ),
        ..e
    }
}

/// A legacy client's capabilities without the Tasks extension, which
/// attaches to 2026-07-28 only (a legacy session has no `tasks/get`): its
/// calls run in the request, or are refused when the tool needs a task.
fn without_tasks(capabilities: &Map<String, Value>) -> Map<String, Value> {
    let mut c = capabilities.clone();
    if let Some(Value::Object(extensions)) = c.get_mut("extensions") {
        extensions.remove(TASKS_EXTENSION);
    }
    c
}

/// Drop the 2026-07-28 result fields a 2025-11-25 client has no use for.
fn strip(result: &mut Value) {
    if let Value::Object(m) = result {
        for key in ["resultType", "ttlMs", "cacheScope"] {
            m.remove(key);
        }
    }
}

/// `GET /mcp` in a legacy session: the standalone stream of list-changed
/// notifications (from every pod, through the bus) and of updates to the
/// resources the session subscribed to. Without a session: 405, as before.
pub(crate) async fn get_mcp(State(app): State<App>, request: axum::extract::Request) -> Response {
    let (parts, _) = request.into_parts();
    let headers = &parts.headers;
    if !app.config.legacy.enabled || !headers.contains_key(headers::SESSION_ID) {
        return crate::method_not_allowed().await;
    }
    if let Err((status, e)) =
        admission::check_transport(headers, &app.config.allowed_origins, &app.config.allowed_hosts)
    {
        return json(status, &jsonrpc::failure(None, &e));
    }
    let caller = match app.config.authenticator.authenticate(&parts).await {
        Ok(c) => c,
        Err(refusal) => return refused(None, &refusal),
    };
    let (session, _) = match verify(&app, headers, &caller).await {
        Ok(s) => s,
        Err(resp) => return resp,
    };
    if !respond::accepts_sse(headers) {
        return session_refused(StatusCode::NOT_ACCEPTABLE, "Not Acceptable: GET needs Accept: text/event-stream");
    }
    // The same budget as `subscriptions/listen` streams, per pod and per principal.
    let permit = match app.server.admit_stream(&caller.scope) {
        Ok(p) => p,
        Err(e) => {
            let status = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
            return json(status, &jsonrpc::failure(None, &e));
        }
    };
    let Ok(events) = app.server.core().bus().subscribe().await else {
        return session_refused(StatusCode::SERVICE_UNAVAILABLE, "Event stream unavailable, retry");
    };
    let store = app.server.core().store().clone();
    let key = session.key;
    let messages = events.filter_map(move |event| {
        let (store, key) = (store.clone(), key.clone());
        async move {
            if let Some(uri) = event.strip_prefix(RESOURCE_UPDATED_EVENT) {
                let state = store.session_state(&key).await.ok()?;
                let field = format!("{FIELD_SUBSCRIPTION}{uri}");
                return state
                    .contains_key(&field)
                    .then(|| jsonrpc::notification("notifications/resources/updated", json!({ "uri": uri })));
            }
            matches!(
                event.as_str(),
                "notifications/tools/list_changed"
                    | "notifications/prompts/list_changed"
                    | "notifications/resources/list_changed"
            )
            .then(|| jsonrpc::notification(&event, json!({})))
        }
    });
    // The permit is held while the stream is open.
    let messages = messages.map(move |m| {
        let _open = &permit;
        m
    });
    respond::sse(messages, app.config.keep_alive)
}

/// `DELETE /mcp` in a legacy session: the session ends on every pod (its
/// id answers 404 from now on). Without a session: 405, as before.
pub(crate) async fn delete_mcp(State(app): State<App>, request: axum::extract::Request) -> Response {
    let (parts, _) = request.into_parts();
    let headers = &parts.headers;
    if !app.config.legacy.enabled || !headers.contains_key(headers::SESSION_ID) {
        return crate::method_not_allowed().await;
    }
    if let Err((status, e)) =
        admission::check_transport(headers, &app.config.allowed_origins, &app.config.allowed_hosts)
    {
        return json(status, &jsonrpc::failure(None, &e));
    }
    let caller = match app.config.authenticator.authenticate(&parts).await {
        Ok(c) => c,
        Err(refusal) => return refused(None, &refusal),
    };
    let (session, _) = match verify(&app, headers, &caller).await {
        Ok(s) => s,
        Err(resp) => return resp,
    };
    let store = app.server.core().store();
    match store.set_session_field(&session.key, FIELD_ENDED, Some("1"), remaining(&session)).await {
        Ok(()) => StatusCode::OK.into_response(),
        Err(_) => session_refused(StatusCode::SERVICE_UNAVAILABLE, "Session not ended, retry"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modern_messages_are_told_apart() {
        assert!(is_modern(&json!({"params": {"_meta": {PROTOCOL_VERSION_KEY: "2026-07-28"}}})));
        assert!(!is_modern(&json!({"params": {"_meta": {"progressToken": 1}}})));
        assert!(!is_modern(&json!({"method": "tools/list"})));
        assert!(!is_modern(&json!({"result": {}, "id": 1})));
    }

    #[test]
    fn session_keys_are_stable_and_distinct() {
        assert_eq!(session_key("a.b"), session_key("a.b"));
        assert_ne!(session_key("a.b"), session_key("a.c"));
        assert_eq!(session_key("x").len(), 32);
    }

    #[test]
    fn legacy_capabilities_never_declare_tasks() {
        let caps = json!({ "elicitation": {}, "extensions": { TASKS_EXTENSION: {}, "x/other": {} } });
        let kept = without_tasks(caps.as_object().unwrap());
        assert_eq!(Value::Object(kept), json!({ "elicitation": {}, "extensions": { "x/other": {} } }));
    }

    #[test]
    fn results_lose_modern_fields_only() {
        let mut r = json!({"resultType": "complete", "ttlMs": 5, "cacheScope": "public", "tools": [], "_meta": {}});
        strip(&mut r);
        assert_eq!(r, json!({"tools": [], "_meta": {}}));
    }
}
