//! The `POST /mcp` handler ([`post_mcp`]): authenticate on the head, then
//! read and parse the body, admit, dispatch, and the choice between one JSON
//! body and an SSE stream; each request's span and metrics ([`Observed`]).

use std::{
    convert::Infallible,
    pin::Pin,
    task::{Context, Poll},
    time::Instant,
};

use axum::{
    body::{Body, Bytes},
    extract::{FromRequest, State},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{
        IntoResponse, Response,
        sse::{Event, KeepAlive, Sse},
    },
};
use futures::{Stream, StreamExt, future::BoxFuture};
use presa_protocol::{
    Method, codes,
    jsonrpc::{self, ErrorObject, Incoming, Request, RequestId},
};
use presa_server::{Admitted, Caller, Outbox, Reply, dispatch::MessageStream};
use presa_telemetry::{metrics, propagation};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, Span, field::Empty};

use crate::{App, Refusal, admission, auth, legacy};

/// A JSON body (always compact, one line).
pub(crate) fn json(status: StatusCode, body: &Value) -> Response {
    // `serde_json::to_vec` into a sized buffer: `to_string` goes through
    // `fmt::Display`, many small writes into a growing string.
    let mut out = Vec::with_capacity(256);
    let bytes = match serde_json::to_writer(&mut out, body) {
        Ok(()) => out,
        // Unreachable for a `Value` (string keys only); never a panic.
        Err(_) => body.to_string().into_bytes(),
    };
    (status, [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], Bytes::from(bytes)).into_response()
}

/// A JSON-RPC error with its HTTP status; a 429 or 503 whose error says
/// `data.retryAfterMs` also says `Retry-After` (whole seconds, rounded up).
pub(crate) fn error(id: Option<&RequestId>, e: &ErrorObject) -> Response {
    let status = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = json(status, &jsonrpc::failure(id, e));
    if matches!(status, StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE)
        && let Some(ms) = e.data.as_ref().and_then(|d| d.get("retryAfterMs")).and_then(Value::as_u64)
    {
        resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(ms.div_ceil(1000)));
    }
    resp
}

/// A refusal of the authenticator (or of a scope check): its status, its
/// `WWW-Authenticate` challenge, and a JSON-RPC error body.
pub(crate) fn refused(id: Option<&RequestId>, refusal: &Refusal) -> Response {
    let e = ErrorObject::new(codes::INVALID_REQUEST, refusal.message.clone());
    let mut body = jsonrpc::failure(id, &e);
    // Refused on the head alone, the body unread: the id is unknown, `null` (JSON-RPC 2.0 §5).
    if id.is_none() {
        body["id"] = Value::Null;
    }
    let mut resp = json(refusal.status, &body);
    if let Some(challenge) = refusal.challenge.as_deref().and_then(|c| HeaderValue::from_str(c).ok()) {
        resp.headers_mut().insert(header::WWW_AUTHENTICATE, challenge);
    }
    resp
}

/// The dispatcher's typed refusal for missing scopes: 403 with its
/// `insufficient_scope` challenge naming `scopes`, the body the dispatcher's
/// error (its data lists the scopes too).
fn insufficient_scope(app: &App, id: &RequestId, e: &ErrorObject, scopes: &[String]) -> Response {
    let mut resp = refused(Some(id), &app.config.challenge.insufficient_scope(scopes));
    *resp.body_mut() = Body::from(jsonrpc::failure(Some(id), e).to_string());
    resp
}

pub(crate) fn accepts_sse(headers: &HeaderMap) -> bool {
    match headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) {
        None => true,
        Some(a) => a.contains("text/event-stream") || a.contains("*/*"),
    }
}

pub(crate) fn sse(stream: impl Stream<Item = Value> + Send + 'static, keep_alive: std::time::Duration) -> Response {
    let events = stream.map(|m| Ok::<_, Infallible>(Event::default().data(m.to_string())));
    let mut resp = Sse::new(events).keep_alive(KeepAlive::new().interval(keep_alive)).into_response();
    resp.headers_mut().insert("x-accel-buffering", HeaderValue::from_static("no"));
    resp
}

/// `POST /mcp`: Origin and content type, then authentication on the head
/// alone (an unauthenticated client costs no body read and no parsing),
/// then the envelope; a request goes on to [`admit_and_dispatch`] inside its
/// span, a notification gets 202.
pub(crate) async fn post_mcp(State(app): State<App>, request: axum::extract::Request) -> Response {
    let started = Instant::now();
    let (parts, body) = request.into_parts();
    let headers = &parts.headers;
    // Failures before the method is known count as `unknown` and get no span.
    let refuse = |status: StatusCode, e: ErrorObject| {
        metrics::request(UNKNOWN_METHOD, e.code.to_string(), started.elapsed());
        json(status, &jsonrpc::failure(None, &e))
    };
    let config = &app.config;
    if let Err((status, e)) = admission::check_transport(headers, &config.allowed_origins, &config.allowed_hosts) {
        return refuse(status, e);
    }
    let (caller, ended) =
        match auth::authenticate(&*config.authenticator, &config.challenge, config.max_token_bytes, &parts).await {
            Ok(a) => {
                let ended = a.ended();
                (a.caller, ended)
            }
            Err(refusal) => {
                metrics::request(UNKNOWN_METHOD, refusal.status.as_u16().to_string(), started.elapsed());
                return refused(None, &refusal);
            }
        };
    let required = &app.config.challenge.required_scopes;
    if !caller.missing(required).is_empty() {
        let refusal = app.config.challenge.insufficient_scope(&[]);
        metrics::request(UNKNOWN_METHOD, refusal.status.as_u16().to_string(), started.elapsed());
        return refused(None, &refusal);
    }
    let headers = headers.clone();
    // The body limit (`DefaultBodyLimit`) travels in the request's extensions.
    let body = match Bytes::from_request(axum::extract::Request::from_parts(parts, body), &()).await {
        Ok(body) => body,
        Err(rejection) => return rejection.into_response(),
    };
    // A session id means the 2025-11-25 era, unless the body carries modern `_meta`.
    let parsed = if app.config.legacy.enabled && headers.contains_key(presa_protocol::headers::SESSION_ID) {
        match serde_json::from_slice::<Value>(&body) {
            Ok(v) if !legacy::is_modern(&v) => return legacy::post(app, headers, v, caller, started).await,
            Ok(v) => jsonrpc::classify(v),
            Err(_) => jsonrpc::parse_message(&body),
        }
    } else {
        jsonrpc::parse_message(&body)
    };
    let req = match parsed {
        // `initialize` with modern `_meta` is a 2026-07-28 request for a removed method (404).
        Ok(Incoming::Request(r)) if r.method == legacy::INITIALIZE && !legacy::has_modern_meta(&r.params) => {
            return legacy::initialize(&app, &headers, r, &caller, started);
        }
        Ok(Incoming::Request(r)) => r,
        Ok(Incoming::Notification { .. }) => {
            metrics::request(NOTIFICATION, "ok", started.elapsed());
            return StatusCode::ACCEPTED.into_response();
        }
        Err(e) => {
            let err = e.to_error();
            metrics::request(UNKNOWN_METHOD, err.code.to_string(), started.elapsed());
            return error(e.id(), &err);
        }
    };
    let observed = Observed::start(&app, &headers, &req, started);
    let span = observed.span.clone();
    admit_and_dispatch(app, headers, req, caller, ended, observed).instrument(span).await
}

/// Admission and dispatch of one parsed request, inside its span.
async fn admit_and_dispatch(
    app: App,
    headers: HeaderMap,
    req: Request,
    caller: Caller,
    ended: Option<BoxFuture<'static, ()>>,
    mut observed: Observed,
) -> Response {
    let (method, mut meta) = match admission::check_request(&headers, &req) {
        Ok(m) => m,
        Err(e) => {
            observed.failed(&e);
            return error(Some(&req.id), &e);
        }
    };
    observed.span.record("mcp.protocol.version", meta.protocol_version.as_str());
    if let Err(e) = admission::idempotency_key(&headers, method, &mut meta) {
        observed.failed(&e);
        return error(Some(&req.id), &e);
    }
    if let Err(e) = admission::check_param_headers(&headers, method, &req.params, &app.server.catalog()) {
        observed.failed(&e);
        return error(Some(&req.id), &e);
    }
    let streaming = accepts_sse(&headers);
    if method == Method::Listen && !streaming {
        let e = ErrorObject::new(codes::INVALID_REQUEST, "subscriptions/listen needs Accept: text/event-stream");
        observed.failed(&e);
        return json(StatusCode::NOT_ACCEPTABLE, &jsonrpc::failure(Some(&req.id), &e));
    }

    let server = app.server.clone();
    let id = req.id.clone();
    respond(app, id, streaming, observed, Era::Modern, ended, move |tx, cancel| {
        let outbox = tx.map_or_else(Outbox::none, Outbox::new);
        let admitted = Admitted { id: req.id, method, params: req.params, meta, caller, outbox, cancel };
        Box::pin(async move { server.handle(&admitted).await })
    })
    .await
}

/// Which revision's conventions a reply follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Era {
    /// 2026-07-28: a JSON-RPC error carries its HTTP status (`ErrorObject::http_status`).
    Modern,
    /// 2025-11-25: a JSON-RPC error to an accepted request is sent with 200.
    Legacy,
}

/// Run `make`'s work and answer: one JSON body when the reply comes before
/// any message on the stream, else an SSE stream of the messages and then
/// the reply; the work stops when the client goes away. A listen stream
/// ends when `ended` resolves (the caller's credential's end, [`until_ended`]).
pub(crate) async fn respond(
    app: App,
    id: RequestId,
    streaming: bool,
    mut observed: Observed,
    era: Era,
    ended: Option<BoxFuture<'static, ()>>,
    make: impl FnOnce(Option<mpsc::UnboundedSender<Value>>, CancellationToken) -> BoxFuture<'static, Reply>,
) -> Response {
    let (tx, mut notes) = mpsc::unbounded_channel();
    let tx = streaming.then_some(tx);
    let cancel = CancellationToken::new();
    let guard = cancel.clone().drop_guard();
    // The dispatch runs in the request span wherever it is polled (here, or in the SSE pump).
    let mut work = make(tx, cancel).instrument(observed.span.clone());

    // JSON unless a notification comes before the reply.
    let first = tokio::select! {
        biased;
        reply = &mut work => {
            let pending: Vec<Value> = std::iter::from_fn(|| notes.try_recv().ok()).collect();
            if pending.is_empty() {
                return match reply {
                    Reply::Result(v) => {
                        observed.succeeded(&v);
                        json(StatusCode::OK, &jsonrpc::success(&id, v))
                    }
                    Reply::Error(e) => {
                        observed.failed(&e);
                        match era {
                            Era::Legacy => json(StatusCode::OK, &jsonrpc::failure(Some(&id), &e)),
                            Era::Modern => error(Some(&id), &e),
                        }
                    }
                    Reply::InsufficientScope { error: e, scopes } => {
                        observed.failed(&e);
                        insufficient_scope(&app, &id, &e, &scopes)
                    }
                    Reply::Stream(s) => {
                        // A listen stream: counted when it opens; its span lasts while it streams.
                        observed.opened();
                        let last = jsonrpc::failure(Some(&id), &ErrorObject::new(codes::INVALID_REQUEST, TOKEN_ENDED));
                        let inner = until_ended(s, ended, Some(last));
                        sse(InSpan { inner, span: observed.span.clone() }, app.config.keep_alive)
                    }
                };
            }
            observed.replied(&reply);
            let last = reply_message(&id, reply);
            return sse(futures::stream::iter(pending.into_iter().chain(last)), app.config.keep_alive);
        }
        Some(note) = notes.recv() => note,
    };

    // Stream: pump notifications and then the reply; stop the work if the client goes away.
    let (out, rx) = mpsc::channel::<Value>(64);
    let span = observed.span.clone();
    tokio::spawn(
        async move {
            let _guard = guard;
            if out.send(first).await.is_err() {
                return;
            }
            let reply = loop {
                tokio::select! {
                    reply = &mut work => break reply,
                    Some(note) = notes.recv() => if out.send(note).await.is_err() { return },
                    _ = out.closed() => return,
                }
            };
            for note in std::iter::from_fn(|| notes.try_recv().ok()) {
                let _ = out.send(note).await;
            }
            observed.replied(&reply);
            for m in reply_message(&id, reply) {
                let _ = out.send(m).await;
            }
        }
        .instrument(span),
    );
    sse(ReceiverStream::new(rx), app.config.keep_alive)
}

/// The error that ends a listen stream when the token that opened it expires or is revoked.
pub(crate) const TOKEN_ENDED: &str =
    "Unauthorized: the token that opened this stream is no longer valid (expired or revoked)";

/// `stream` until `ended` resolves, then `last` (when given) and its end;
/// the stream (and what it holds: a listener's place) is dropped at that
/// moment, however busy it is. `None`: `stream` as is.
pub(crate) fn until_ended(
    stream: impl Stream<Item = Value> + Send + 'static,
    ended: Option<BoxFuture<'static, ()>>,
    last: Option<Value>,
) -> MessageStream {
    match ended {
        None => stream.boxed(),
        Some(ended) => Box::pin(UntilEnded { inner: Some(stream.boxed()), ended, last }),
    }
}

struct UntilEnded {
    inner: Option<MessageStream>,
    ended: BoxFuture<'static, ()>,
    last: Option<Value>,
}

impl Stream for UntilEnded {
    type Item = Value;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Value>> {
        let this = &mut *self;
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(this.last.take());
        };
        if this.ended.as_mut().poll(cx).is_ready() {
            tracing::debug!("the credential that opened this stream ended: ending it");
            this.inner = None;
            return Poll::Ready(this.last.take());
        }
        match inner.as_mut().poll_next(cx) {
            Poll::Ready(None) => {
                // Ended on its own (shutdown closes with its own last message).
                this.inner = None;
                this.last = None;
                Poll::Ready(None)
            }
            other => other,
        }
    }
}

/// The `method` label of requests that were not parsed, or name no known method.
pub(crate) const UNKNOWN_METHOD: &str = "unknown";
/// The `method` label of notifications (answered 202, never dispatched).
pub(crate) const NOTIFICATION: &str = "notification";
/// Longest client-chosen string copied into a span attribute.
const MAX_ATTRIBUTE_LEN: usize = 128;

/// `s`, cut to at most [`MAX_ATTRIBUTE_LEN`] bytes on a character boundary.
fn bounded(s: &str) -> &str {
    if s.len() <= MAX_ATTRIBUTE_LEN {
        return s;
    }
    let mut end = MAX_ATTRIBUTE_LEN;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The span and metrics of one MCP request.
///
/// The span is a server span named `<mcp.method.name> <target>` (the tool or
/// prompt, when the catalog knows it) with the OpenTelemetry MCP attributes.
/// Its parent is `params._meta.traceparent` when present, else the HTTP
/// `traceparent` header (see [`propagation::adopt_request_parent`]).
/// Dropped without an outcome (the client went away): counted as `cancelled`.
pub(crate) struct Observed {
    span: Span,
    method: &'static str,
    started: Instant,
    done: bool,
}

impl Observed {
    pub(crate) fn start(app: &App, headers: &HeaderMap, req: &Request, started: Instant) -> Self {
        let known = req.method.parse::<Method>().ok();
        let method = known.map_or(UNKNOWN_METHOD, Method::as_str);
        let name_param = req.params.get("name").and_then(Value::as_str);
        let target = match known {
            Some(Method::ToolsCall) => name_param.filter(|n| app.server.catalog().tool(n).is_some()),
            Some(Method::PromptsGet) => name_param.filter(|n| app.server.catalog().prompt(n).is_some()),
            _ => None,
        };
        let span_name = match target {
            Some(t) => format!("{method} {t}"),
            None => method.to_string(),
        };
        let request_id = match &req.id {
            RequestId::Number(n) => n.to_string(),
            RequestId::String(s) => bounded(s).to_string(),
        };
        let span = tracing::info_span!(
            "mcp.request",
            otel.name = span_name.as_str(),
            otel.kind = "server",
            mcp.method.name = bounded(&req.method),
            jsonrpc.request.id = request_id.as_str(),
            mcp.protocol.version = Empty,
            network.transport = "tcp",
            network.protocol.name = "http",
            gen_ai.operation.name = Empty,
            gen_ai.tool.name = Empty,
            gen_ai.prompt.name = Empty,
            presa.task.id = Empty,
            trace_id = Empty,
            error.type = Empty,
            rpc.response.status_code = Empty,
            otel.status_code = Empty,
            otel.status_description = Empty,
        );
        match (known, name_param) {
            (Some(Method::ToolsCall), Some(tool)) => {
                span.record("gen_ai.operation.name", "execute_tool");
                span.record("gen_ai.tool.name", bounded(tool));
            }
            (Some(Method::PromptsGet), Some(prompt)) => {
                span.record("gen_ai.prompt.name", bounded(prompt));
            }
            _ => {}
        }
        let meta = req.params.get("_meta").and_then(Value::as_object);
        propagation::adopt_request_parent(&span, meta, headers);
        propagation::record_trace_id(&span);
        Observed { span, method, started, done: false }
    }

    /// Record the request's protocol version on its span.
    pub(crate) fn record_version(&self, version: &str) {
        self.span.record("mcp.protocol.version", version);
    }

    /// Count the request under `method` (a legacy-only method [`Method`] does not name).
    pub(crate) fn relabel(&mut self, method: &'static str) {
        self.method = method;
        self.span.record("otel.name", method);
    }

    fn count(&mut self, outcome: String) {
        if !self.done {
            self.done = true;
            metrics::request(self.method, outcome, self.started.elapsed());
        }
    }

    /// A result: `ok`; a tool result with `isError: true` marks the span `tool_error`.
    pub(crate) fn succeeded(&mut self, result: &Value) {
        if result.get("isError") == Some(&Value::Bool(true)) {
            self.span.record("error.type", "tool_error");
            self.span.record("otel.status_code", "error");
        }
        self.count("ok".into());
    }

    /// A JSON-RPC error: its code is the outcome and the span's `error.type`.
    pub(crate) fn failed(&mut self, e: &ErrorObject) {
        let code = e.code.to_string();
        self.span.record("error.type", code.as_str());
        self.span.record("rpc.response.status_code", code.as_str());
        self.span.record("otel.status_description", e.message.as_str());
        self.count(code);
    }

    fn opened(&mut self) {
        self.count("ok".into());
    }

    fn replied(&mut self, reply: &Reply) {
        match reply {
            Reply::Result(v) => self.succeeded(v),
            Reply::Error(e) | Reply::InsufficientScope { error: e, .. } => self.failed(e),
            Reply::Stream(_) => self.failed(&ErrorObject::new(codes::INTERNAL_ERROR, "Internal error")),
        }
    }
}

impl Drop for Observed {
    fn drop(&mut self) {
        if !self.done {
            self.span.in_scope(|| tracing::debug!("client went away before the reply"));
            self.count("cancelled".into());
        }
    }
}

/// A stream polled inside a span (a listen stream, in its request's span).
struct InSpan {
    inner: MessageStream,
    span: Span,
}

impl Stream for InSpan {
    type Item = Value;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Value>> {
        let this = &mut *self;
        let _entered = this.span.enter();
        this.inner.as_mut().poll_next(cx)
    }
}

/// The final message(s) of a streamed request.
fn reply_message(id: &RequestId, reply: Reply) -> Vec<Value> {
    match reply {
        Reply::Result(v) => vec![jsonrpc::success(id, v)],
        Reply::Error(e) | Reply::InsufficientScope { error: e, .. } => vec![jsonrpc::failure(Some(id), &e)],
        Reply::Stream(_) => {
            tracing::error!("a streaming reply cannot follow request notifications");
            vec![jsonrpc::failure(Some(id), &ErrorObject::new(codes::INTERNAL_ERROR, "Internal error"))]
        }
    }
}
