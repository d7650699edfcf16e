//! The one entry of `POST /mcp` for both eras ([`post_mcp`]): the transport
//! checks, authentication on the head, the body read, then the era: a
//! 2026-07-28 request goes to [`modern`], a 2025-11-25 one (`initialize`
//! or a message in a session) to [`legacy`]. Both answer through
//! [`respond`](crate::respond), below them, which imports neither.

use std::time::Instant;

use axum::{
    body::Bytes,
    extract::{FromRequest, State},
    http::StatusCode,
    response::{IntoResponse, Response},
};
use presa_protocol::jsonrpc::{self, ErrorObject, Incoming};
use presa_telemetry::metrics;
use serde_json::Value;

use crate::{
    admission,
    app::App,
    auth, legacy, modern,
    observe::{NOTIFICATION, UNKNOWN_METHOD},
    respond::{error, json, refused},
};

/// `caller` on the endpoint `app` serves: what it creates and reads there
/// (tasks, sessions, sealed state) is that endpoint's.
pub(crate) fn bound(app: &App, mut caller: presa_server::Caller) -> presa_server::Caller {
    caller.scope.endpoint = app.server.endpoint_name().map(str::to_string);
    caller
}

/// `POST /mcp` (and `/mcp/<name>`, with `app` bound to that endpoint): Origin and content type, then authentication on the head
/// alone (an unauthenticated client costs no body read and no parsing),
/// then the envelope; the era: a 2026-07-28 request goes on to [`modern::post`],
/// a 2025-11-25 one (`initialize`, or a message in a session) to
/// [`legacy::post`] or [`legacy::initialize`]; a notification gets 202.
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
    let (caller, ended) = match auth::authenticate(
        &*config.access.authenticator,
        &config.access.challenge,
        config.max_token_bytes,
        &parts,
    )
    .await
    {
        Ok(a) => {
            let ended = a.ended();
            (bound(&app, a.caller), ended)
        }
        Err(refusal) => {
            metrics::request(UNKNOWN_METHOD, refusal.status.as_u16().to_string(), started.elapsed());
            return refused(None, &refusal);
        }
    };
    let required = &app.config.access.challenge.required_scopes;
    if !caller.missing(required).is_empty() {
        let refusal = app.config.access.challenge.insufficient_scope(&[]);
        metrics::request(UNKNOWN_METHOD, refusal.status.as_u16().to_string(), started.elapsed());
        return refused(None, &refusal);
    }
    // Taken, not cloned (a copy of every header a request): reading the
    // body needs only the parts' extensions.
    let mut parts = parts;
    let headers = std::mem::take(&mut parts.headers);
    // The body limit (`DefaultBodyLimit`) travels in the request's extensions.
    let body = match Bytes::from_request(axum::extract::Request::from_parts(parts, body), &()).await {
        Ok(body) => body,
        Err(rejection) => return rejection.into_response(),
    };
    // A session id means the 2025-11-25 era, unless the body carries modern `_meta`.
    let parsed = if app.config.legacy.enabled && headers.contains_key(&crate::app::names::SESSION_ID) {
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
    modern::post(app, headers, req, caller, ended, started).await
}
