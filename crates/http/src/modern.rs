//! A 2026-07-28 request ([`post`]): stateless, every request carrying its
//! own `_meta`. Admission (`MCP-Protocol-Version`, `Mcp-Method`,
//! `Idempotency-Key`, `Mcp-Param-*`, the SSE `Accept` of a listen), then
//! dispatch, answered by [`respond`](crate::respond::respond).

use std::time::Instant;

use axum::{
    http::{HeaderMap, StatusCode},
    response::Response,
};
use futures::future::BoxFuture;
use presa_protocol::{
    Method, codes,
    jsonrpc::{self, ErrorObject, Request},
};
use presa_server::{Admitted, Caller, Outbox};
use tracing::Instrument;

use crate::{
    admission,
    app::App,
    observe::Observed,
    respond::{Era, accepts_sse, error, json, respond},
};

/// A parsed 2026-07-28 request: admitted and dispatched inside its span.
pub(crate) async fn post(
    app: App,
    headers: HeaderMap,
    req: Request,
    caller: Caller,
    ended: Option<BoxFuture<'static, ()>>,
    started: Instant,
) -> Response {
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
    if let Err(e) = admission::check_param_headers(&headers, observed.tool.as_deref(), &req.params) {
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
    let tool = observed.tool.clone();
    respond(app, id, streaming, observed, Era::Modern, ended, move |tx, cancel| {
        let outbox = tx.map_or_else(Outbox::none, Outbox::new);
        let admitted = Admitted { id: req.id, method, params: req.params, meta, caller, outbox, cancel, tool };
        Box::pin(async move { server.handle(&admitted).await })
    })
    .await
}
