//! How both eras answer, below both (it imports neither): JSON bodies and
//! JSON-RPC errors with their HTTP status ([`json`], [`error`]), refusals
//! with their challenge ([`refused`], and the dispatcher's typed
//! insufficient-scope refusal), and [`respond`], the choice between one JSON
//! body and an SSE stream for a dispatched request; a stream that ends with
//! its credential ([`until_ended`]).

use std::{
    convert::Infallible,
    pin::Pin,
    task::{Context, Poll},
};

use axum::{
    body::{Body, Bytes},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{
        IntoResponse, Response,
        sse::{Event, KeepAlive, Sse},
    },
};
use futures::{Stream, StreamExt, future::BoxFuture};
use presa_protocol::{
    codes,
    jsonrpc::{self, ErrorObject, RequestId},
};
use presa_server::{Reply, dispatch::MessageStream};
use serde::Serialize;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, Span};

use crate::{app::App, auth::Refusal, observe::Observed};

/// A JSON body (always compact, one line).
pub(crate) fn json(status: StatusCode, body: &(impl Serialize + ?Sized)) -> Response {
    // `serde_json::to_vec` into a sized buffer: `to_string` goes through
    // `fmt::Display`, many small writes into a growing string.
    let mut out = Vec::with_capacity(256);
    match serde_json::to_writer(&mut out, body) {
        Ok(()) => json_bytes(status, out),
        // Unreachable for what is sent here (values and envelopes with
        // string keys); never a panic.
        Err(_) => json_bytes(StatusCode::INTERNAL_SERVER_ERROR, UNSERIALISABLE.as_bytes().to_vec()),
    }
}

/// A JSON body already written.
fn json_bytes(status: StatusCode, body: Vec<u8>) -> Response {
    (status, [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], Bytes::from(body)).into_response()
}

/// What [`json`] sends for a body that would not serialise.
const UNSERIALISABLE: &str = r#"{"error":{"code":-32603,"message":"Internal error"},"id":null,"jsonrpc":"2.0"}"#;

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
    let mut resp = refused(Some(id), &app.config.access.challenge.insufficient_scope(scopes));
    *resp.body_mut() = Body::from(jsonrpc::failure(Some(id), e).to_string());
    resp
}

/// Whether the client takes an SSE stream (no `Accept`, or one naming it or `*/*`).
pub(crate) fn accepts_sse(headers: &HeaderMap) -> bool {
    match headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) {
        None => true,
        Some(a) => a.contains("text/event-stream") || a.contains("*/*"),
    }
}

/// An SSE stream of `stream`'s messages, with keep-alive comments and
/// `X-Accel-Buffering: no`.
pub(crate) fn sse(stream: impl Stream<Item = Value> + Send + 'static, keep_alive: std::time::Duration) -> Response {
    let events = stream.map(|m| Ok::<_, Infallible>(Event::default().data(m.to_string())));
    let mut resp = Sse::new(events).keep_alive(KeepAlive::new().interval(keep_alive)).into_response();
    resp.headers_mut().insert("x-accel-buffering", HeaderValue::from_static("no"));
    resp
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
    make: impl FnOnce(Option<mpsc::Sender<Value>>, CancellationToken) -> BoxFuture<'static, Reply>,
) -> Response {
    // Bounded: a client that stops reading makes the handler's progress and
    // logs drop (Outbox::send), not pile up in memory.
    let (tx, mut notes) = mpsc::channel(presa_server::context::OUTBOX_BOUND);
    let tx = streaming.then_some(tx);
    let cancel = CancellationToken::new();
    let guard = cancel.clone().drop_guard();
    // The dispatch runs in the request span wherever it is polled (here, or in the SSE pump).
    let mut work = Traced { work: Some(make(tx, cancel)), span: observed.span.clone() };

    // JSON unless a notification comes before the reply.
    let first = tokio::select! {
        biased;
        reply = &mut work => {
            let pending: Vec<Value> = std::iter::from_fn(|| notes.try_recv().ok()).collect();
            if pending.is_empty() {
                return match reply {
                    Reply::Result(v) => {
                        observed.succeeded(&v);
                        json(StatusCode::OK, &jsonrpc::SuccessRef::new(&id, &v))
                    }
                    Reply::Written(w) => {
                        observed.succeeded_written();
                        json_bytes(StatusCode::OK, jsonrpc::success_written(&id, &w))
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

/// A dispatch polled inside its request's span. Unlike `tracing`'s
/// `Instrumented`, which enters the span again to drop its future, a
/// finished dispatch is dropped in the poll that finished it (the span
/// still entered); one dropped unfinished (the client went away) is dropped
/// inside the span too, so whatever its drop logs is in the span.
struct Traced {
    work: Option<BoxFuture<'static, Reply>>,
    span: Span,
}

impl Future for Traced {
    type Output = Reply;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Reply> {
        let this = &mut *self;
        let _entered = this.span.enter();
        let work = this.work.as_mut().expect("a dispatch polled after it finished");
        let reply = work.as_mut().poll(cx);
        if reply.is_ready() {
            this.work = None;
        }
        reply
    }
}

impl Drop for Traced {
    fn drop(&mut self) {
        if let Some(work) = self.work.take() {
            let _entered = self.span.enter();
            drop(work);
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
        // A text of presa's own: it parses.
        Reply::Written(w) => match w.to_value() {
            Ok(v) => vec![jsonrpc::success(id, v)],
            Err(_) => vec![jsonrpc::failure(Some(id), &ErrorObject::new(codes::INTERNAL_ERROR, "Internal error"))],
        },
        Reply::Error(e) | Reply::InsufficientScope { error: e, .. } => vec![jsonrpc::failure(Some(id), &e)],
        Reply::Stream(_) => {
            tracing::error!("a streaming reply cannot follow request notifications");
            vec![jsonrpc::failure(Some(id), &ErrorObject::new(codes::INTERNAL_ERROR, "Internal error"))]
        }
    }
}
