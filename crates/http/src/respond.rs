//! The `POST /mcp` handler: admission, dispatch, and the choice between one
//! JSON body and an SSE stream.

use std::convert::Infallible;

use axum::{
    body::Bytes,
    extract::State,
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{
        IntoResponse, Response,
        sse::{Event, KeepAlive, Sse},
    },
};
use futures::{Stream, StreamExt};
use presa_protocol::{
    codes,
    jsonrpc::{self, ErrorObject, Incoming, RequestId},
};
use presa_server::{Outbox, Reply};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;

use crate::{App, admission};

/// A JSON body (always compact, one line).
fn json(status: StatusCode, body: &Value) -> Response {
    (status, [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], body.to_string()).into_response()
}

fn error(id: Option<&RequestId>, e: &ErrorObject) -> Response {
    let status = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json(status, &jsonrpc::failure(id, e))
}

fn accepts_sse(headers: &HeaderMap) -> bool {
    match headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) {
        None => true,
        Some(a) => a.contains("text/event-stream") || a.contains("*/*"),
    }
}

fn sse(stream: impl Stream<Item = Value> + Send + 'static, keep_alive: std::time::Duration) -> Response {
    let events = stream.map(|m| Ok::<_, Infallible>(Event::default().data(m.to_string())));
    let mut resp = Sse::new(events).keep_alive(KeepAlive::new().interval(keep_alive)).into_response();
    resp.headers_mut().insert("x-accel-buffering", HeaderValue::from_static("no"));
    resp
}

pub(crate) async fn mcp(State(app): State<App>, headers: HeaderMap, body: Bytes) -> Response {
    if let Some(origin) = headers.get(header::ORIGIN) {
        let allowed = origin.to_str().is_ok_and(|o| admission::origin_allowed(o, &app.config.allowed_origins));
        if !allowed {
            return json(
                StatusCode::FORBIDDEN,
                &jsonrpc::failure(None, &ErrorObject::new(codes::INVALID_REQUEST, "Origin not allowed")),
            );
        }
    }
    if let Some(ct) = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok())
        && !ct.to_ascii_lowercase().contains("json")
    {
        return json(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            &jsonrpc::failure(None, &ErrorObject::new(codes::INVALID_REQUEST, "Content-Type must be application/json")),
        );
    }
    let req = match jsonrpc::parse_message(&body) {
        Ok(Incoming::Request(r)) => r,
        Ok(Incoming::Notification { .. }) => return StatusCode::ACCEPTED.into_response(),
        Err(e) => return error(e.id(), &e.to_error()),
    };
    let meta = match admission::check_request(&headers, &req) {
        Ok(m) => m,
        Err(e) => return error(Some(&req.id), &e),
    };
    if let Err(e) = admission::check_param_headers(&headers, &req, app.server.catalog()) {
        return error(Some(&req.id), &e);
    }
    let scope = match app.config.authenticator.authenticate(&headers) {
        Ok(s) => s,
        Err(msg) => {
            let e = ErrorObject::new(codes::INVALID_REQUEST, format!("Unauthorized: {msg}"));
            return json(StatusCode::UNAUTHORIZED, &jsonrpc::failure(Some(&req.id), &e));
        }
    };
    let streaming = accepts_sse(&headers);
    if req.method == "subscriptions/listen" && !streaming {
        let e = ErrorObject::new(codes::INVALID_REQUEST, "subscriptions/listen needs Accept: text/event-stream");
        return json(StatusCode::NOT_ACCEPTABLE, &jsonrpc::failure(Some(&req.id), &e));
    }

    let (tx, mut notes) = mpsc::unbounded_channel();
    let outbox = if streaming { Outbox::new(tx) } else { Outbox::none() };
    let cancel = CancellationToken::new();
    let guard = cancel.clone().drop_guard();
    let server = app.server.clone();
    let id = req.id.clone();
    let mut work = Box::pin(async move { server.handle(&req, &meta, &scope, outbox, cancel).await });

    // JSON unless a notification comes before the reply.
    let first = tokio::select! {
        biased;
        reply = &mut work => {
            let pending: Vec<Value> = std::iter::from_fn(|| notes.try_recv().ok()).collect();
            if pending.is_empty() {
                return match reply {
                    Reply::Result(v) => json(StatusCode::OK, &jsonrpc::success(&id, v)),
                    Reply::Error(e) => error(Some(&id), &e),
                    Reply::Stream(s) => sse(s, app.config.keep_alive),
                };
            }
            let last = reply_message(&id, reply);
            return sse(futures::stream::iter(pending.into_iter().chain(last)), app.config.keep_alive);
        }
        Some(note) = notes.recv() => note,
    };

    // Stream: pump notifications and then the reply; stop the work if the client goes away.
    let (out, rx) = mpsc::channel::<Value>(64);
    tokio::spawn(async move {
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
        for m in reply_message(&id, reply) {
            let _ = out.send(m).await;
        }
    });
    sse(ReceiverStream::new(rx), app.config.keep_alive)
}

/// The final message(s) of a streamed request.
fn reply_message(id: &RequestId, reply: Reply) -> Vec<Value> {
    match reply {
        Reply::Result(v) => vec![jsonrpc::success(id, v)],
        Reply::Error(e) => vec![jsonrpc::failure(Some(id), &e)],
        Reply::Stream(_) => {
            tracing::error!("a streaming reply cannot follow request notifications");
            vec![jsonrpc::failure(Some(id), &ErrorObject::new(codes::INTERNAL_ERROR, "Internal error"))]
        }
    }
}
