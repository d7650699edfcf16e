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
    meta::RequestMeta,
};
use presa_server::{Admitted, Caller, Outbox, catalog::RegisteredTool};

use crate::{
    admission,
    app::App,
    observe::Observed,
    respond::{Era, accepts_sse, error, json, respond},
};

/// A parsed 2026-07-28 request: admitted and dispatched inside its span.
///
/// `_meta` is checked before the span is built, so the span gets the
/// protocol version with its other fields: a `record` afterwards makes the
/// text log layer format the span's fields again. The check is pure (no
/// event, no await): it needs no span around it.
pub(crate) async fn post(
    app: App,
    headers: HeaderMap,
    req: Request,
    caller: Caller,
    ended: Option<BoxFuture<'static, ()>>,
    started: Instant,
) -> Response {
    let checked = admission::check_request(&headers, &req);
    let version = checked.as_ref().ok().map(|(_, meta)| meta.protocol_version.as_str());
    let mut observed = Observed::start(&app, &headers, &req, started, version);
    // The rest of admission in the span; the dispatch runs in it wherever
    // it is polled (`respond` instruments it). Not one `Instrumented`
    // around the whole of this future: that entered and left the span at
    // every poll and at its drop, on top of the dispatch's own.
    let tool = observed.tool.as_deref();
    match observed.span.in_scope(|| admit(&headers, &req, checked, tool)) {
        Ok(admitted) => dispatch(app, headers, req, admitted, caller, ended, observed).await,
        Err((e, status)) => {
            observed.failed(&e);
            match status {
                None => error(Some(&req.id), &e),
                Some(status) => json(status, &jsonrpc::failure(Some(&req.id), &e)),
            }
        }
    }
}

/// Admission after the `_meta` check (`checked`): `Idempotency-Key`,
/// `Mcp-Param-*`, and the SSE `Accept` of a listen. A refusal is its error,
/// and the HTTP status to send it with when not the error's own.
fn admit(
    headers: &HeaderMap,
    req: &Request,
    checked: Result<(Method, RequestMeta), ErrorObject>,
    tool: Option<&RegisteredTool>,
) -> Result<(Method, RequestMeta), (ErrorObject, Option<StatusCode>)> {
    let (method, mut meta) = checked.map_err(|e| (e, None))?;
    admission::idempotency_key(headers, method, &mut meta).map_err(|e| (e, None))?;
    admission::check_param_headers(headers, tool, &req.params).map_err(|e| (e, None))?;
    if method == Method::Listen && !accepts_sse(headers) {
        let e = ErrorObject::new(codes::INVALID_REQUEST, "subscriptions/listen needs Accept: text/event-stream");
        return Err((e, Some(StatusCode::NOT_ACCEPTABLE)));
    }
    Ok((method, meta))
}

/// Dispatch of one admitted request, answered by [`respond`].
async fn dispatch(
    app: App,
    headers: HeaderMap,
    req: Request,
    (method, meta): (Method, RequestMeta),
    caller: Caller,
    ended: Option<BoxFuture<'static, ()>>,
    observed: Observed,
) -> Response {
    let streaming = accepts_sse(&headers);
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
