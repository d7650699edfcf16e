//! The 2025-11-25 era on the same `/mcp` endpoint, for clients that still
//! open with `initialize` (the versioning page's dual-era server).
//!
//! Sessions are stateless for the pods: the `Mcp-Session-Id` this module
//! issues is a token sealed with the shared `requestState` key
//! ([`presa_server::StateCodec`]), bound to the caller's principal and
//! expiring, that carries what the session negotiated (protocol version,
//! client capabilities, client info). Any pod verifies it. The little state
//! legacy semantics share (log level, resource subscriptions, ended) lives in
//! the store under the session's owner and key, with the session's TTL,
//! counted and capped ([`crate::LegacyConfig`]): a subscription must name a
//! resource or template the catalog lists (else `-32002`), its URI is
//! bounded, and so are a session's subscriptions and bytes and the sessions
//! holding state per principal and in all.
//!
//! Requests run through the same dispatcher as modern ones, with a `_meta`
//! built from the session. Where the dispatcher answers an MRTR
//! `InputRequiredResult`, this module asks the client as 2025-11-25 does: a
//! JSON-RPC request on the call's SSE stream. The client's answer is a
//! separate POST that may reach another pod; it is published on the
//! session's own bus topic (never the broadcast every subscriber reads) and
//! the waiting call (wherever it runs) retries with the answers as
//! `inputResponses`, so a handler's `ToolContext::input` works in both eras.
//! Tasks attach to 2026-07-28 only: a task-required tool is refused with an
//! error naming that revision, optional ones run in the request.
//!
//! [`session`] issues and verifies the session ids, [`call`] runs a call
//! (asking the client on its stream, cancelling from any pod), [`stream`]
//! serves the standalone `GET` stream and `DELETE`.

mod call;
mod session;
mod stream;

use std::{collections::HashMap, time::Instant};

use axum::{
    http::{HeaderMap, StatusCode},
    response::{IntoResponse, Response},
};
use presa_protocol::{
    LEGACY_VERSIONS, Limit, Method, codes, headers,
    jsonrpc::{self, ErrorObject, Incoming, Request},
    meta::{IDEMPOTENCY_KEY_META, LogLevel, PROGRESS_TOKEN_KEY, PROTOCOL_VERSION_KEY, RequestMeta},
};
use presa_server::{Admitted, Caller, Outbox};
use presa_telemetry::metrics;
use serde_json::{Map, Value, json};

use crate::{
    app::App,
    observe::{NOTIFICATION, Observed, UNKNOWN_METHOD},
    respond::{self, Era, json},
};

use session::FIELD_SUBSCRIPTION;
pub(crate) use session::initialize;
use session::{FIELD_LOG_LEVEL, Session, remaining, verify};
pub(crate) use stream::{delete_mcp, get_mcp};

/// The one method that opens a legacy session.
pub(crate) const INITIALIZE: &str = "initialize";
/// The methods only a legacy session has (besides [`INITIALIZE`]), which
/// [`Method`] does not name: answered here, not dispatched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LegacyMethod {
    Ping,
    SetLevel,
    Subscribe,
    Unsubscribe,
}

impl LegacyMethod {
    const ALL: [LegacyMethod; 4] =
        [LegacyMethod::Ping, LegacyMethod::SetLevel, LegacyMethod::Subscribe, LegacyMethod::Unsubscribe];

    /// Its name on the wire, also its metrics label.
    fn as_str(self) -> &'static str {
        match self {
            LegacyMethod::Ping => "ping",
            LegacyMethod::SetLevel => "logging/setLevel",
            LegacyMethod::Subscribe => "resources/subscribe",
            LegacyMethod::Unsubscribe => "resources/unsubscribe",
        }
    }

    /// The legacy-only method `name` names (`None`: [`Method`] names it, or nothing does).
    fn parse(name: &str) -> Option<LegacyMethod> {
        LegacyMethod::ALL.into_iter().find(|m| m.as_str() == name)
    }
}

/// Whether a message is of the 2026-07-28 era: its params carry `_meta` with a protocol version.
pub(crate) fn is_modern(message: &Value) -> bool {
    message["params"]["_meta"].get(PROTOCOL_VERSION_KEY).is_some()
}

/// [`is_modern`] on parsed params.
pub(crate) fn has_modern_meta(params: &Map<String, Value>) -> bool {
    params.get("_meta").and_then(|m| m.get(PROTOCOL_VERSION_KEY)).is_some()
}

/// Any POST in a legacy session: a client's answer to a server request, a
/// notification, or a request.
pub(crate) async fn post(app: App, headers: HeaderMap, message: Value, caller: Caller, started: Instant) -> Response {
    if message.get("method").is_none() && (message.get("result").is_some() || message.get("error").is_some()) {
        let (session, _) = match verify(&app, &headers, &caller).await {
            Ok(s) => s,
            Err(resp) => return resp,
        };
        return call::answer(&app, &session, &message).await;
    }
    match jsonrpc::classify(message) {
        Ok(Incoming::Request(r)) if r.method == INITIALIZE => initialize(&app, &headers, r, &caller, started),
        Ok(Incoming::Request(r)) => request(app, headers, r, caller, started).await,
        Ok(Incoming::Notification { method, params }) => {
            let (session, _) = match verify(&app, &headers, &caller).await {
                Ok(s) => s,
                Err(resp) => return resp,
            };
            if method == "notifications/cancelled"
                && let Some(id) =
                    params.as_ref().and_then(|p| p.get("requestId")).filter(|i| i.is_string() || i.is_i64())
            {
                call::publish_cancel(&app, &session, id).await;
            }
            metrics::request(NOTIFICATION, "ok", started.elapsed());
            StatusCode::ACCEPTED.into_response()
        }
        Err(e) => {
            let err = e.to_error();
            metrics::request(UNKNOWN_METHOD, err.code.to_string(), started.elapsed());
            json(StatusCode::BAD_REQUEST, &jsonrpc::failure(e.id(), &err))
        }
    }
}

/// A request in a legacy session: a legacy-only method answered here, or
/// one dispatch knows, run with the session's `_meta`.
async fn request(app: App, headers: HeaderMap, req: Request, caller: Caller, started: Instant) -> Response {
    let (session, state) = match verify(&app, &headers, &caller).await {
        Ok(s) => s,
        Err(resp) => return resp,
    };
    let mut observed = Observed::start(&app, &headers, &req, started, None);
    let legacy_only = LegacyMethod::parse(&req.method);
    if let Some(m) = legacy_only {
        observed.relabel(m.as_str());
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
    if let Some(m) = legacy_only {
        let r = legacy_only_method(&app, &session, m, &req.params).await;
        return match r {
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
    let meta = session_meta(&session, &state, &req.params);
    let streaming = respond::accepts_sse(&headers);
    let server = app.server.clone();
    let id = req.id.clone();
    let key = session.key.clone();
    let limit = app.config.legacy.answer_timeout;
    let tool = observed.tool.clone();
    respond::respond(app, id, streaming, observed, Era::Legacy, None, move |tx, cancel| {
        let outbox = tx.clone().map_or_else(Outbox::none, Outbox::new);
        let admitted = Admitted { id: req.id, method, params: req.params, meta, caller, outbox, cancel, tool };
        Box::pin(async move {
            let call = call::Call { server: &server, session: &key, stream: tx.as_ref(), limit };
            call.run(admitted).await
        })
    })
    .await
}

/// `ping`, `logging/setLevel` and `resources/(un)subscribe`: what they
/// change is the session's state in the store.
async fn legacy_only_method(
    app: &App,
    session: &Session,
    method: LegacyMethod,
    params: &Map<String, Value>,
) -> Result<(), ErrorObject> {
    let (field, value) = match method {
        LegacyMethod::Ping => return Ok(()),
        LegacyMethod::SetLevel => match params.get("level").and_then(Value::as_str).and_then(LogLevel::parse) {
            None => return Err(ErrorObject::new(codes::INVALID_PARAMS, "Invalid params: level must be a log level")),
            Some(level) => (FIELD_LOG_LEVEL.to_string(), Some(level.as_str())),
        },
        LegacyMethod::Subscribe | LegacyMethod::Unsubscribe => {
            let subscribe = method == LegacyMethod::Subscribe;
            let uri = subscription_uri(app, params, subscribe)?;
            (format!("{FIELD_SUBSCRIPTION}{uri}"), subscribe.then_some("1"))
        }
    };
    let limits = session::session_limits(&app.config.legacy);
    app.server
        .core()
        .sessions()
        .set_session_field(&session.owner, &session.key, &field, value, remaining(session), limits)
        .await
        .map_err(|e| refused_write(&app.config.legacy, e))
}

/// The `_meta` a legacy request runs with: the session's negotiated
/// version, capabilities and log level, and the request's own progress token.
fn session_meta(session: &Session, state: &HashMap<String, String>, params: &Map<String, Value>) -> RequestMeta {
    let meta = RequestMeta::object_of(params);
    let get = |key: &str| meta.and_then(|m| m.get(key));
    RequestMeta {
        protocol_version: session.negotiated.v.clone(),
        client_capabilities: call::without_tasks(&session.negotiated.c),
        client_info: session.negotiated.i.clone(),
        log_level: state.get(FIELD_LOG_LEVEL).and_then(|l| LogLevel::parse(l)),
        progress_token: get(PROGRESS_TOKEN_KEY).filter(|t| t.is_string() || t.is_i64()).cloned(),
        idempotency_key: get(IDEMPOTENCY_KEY_META).cloned(),
    }
}

/// The URI of a `resources/subscribe` (or `unsubscribe`): a string within
/// `max_subscription_uri_bytes` and, to subscribe, one the catalog lists (a
/// resource, or a match of a template), else `-32002` as 2025-11-25 says.
fn subscription_uri<'a>(app: &App, params: &'a Map<String, Value>, subscribe: bool) -> Result<&'a str, ErrorObject> {
    let Some(uri) = params.get("uri").and_then(Value::as_str) else {
        return Err(ErrorObject::new(codes::INVALID_PARAMS, "Invalid params: uri must be a string"));
    };
    let max = app.config.legacy.max_subscription_uri_bytes;
    if max > 0 && uri.len() > max {
        metrics::refusal(Limit::MaxSubscriptionUriBytes);
        return Err(ErrorObject::with_data(
            codes::INVALID_PARAMS,
            format!("Invalid params: uri is {} bytes, over the limit of {max} (max_subscription_uri_bytes)", uri.len()),
            json!({ "limit": Limit::MaxSubscriptionUriBytes, "max": max }),
        ));
    }
    if subscribe && !app.server.catalog().lists(uri) {
        return Err(ErrorObject::with_data(codes::RESOURCE_NOT_FOUND, "Resource not found", json!({ "uri": uri })));
    }
    Ok(uri)
}

/// A session write the store refused, as the client reads it: the limit it
/// hit and how to go on, or a retryable failure to save.
fn refused_write(legacy: &crate::config::LegacyConfig, e: presa_store::StoreError) -> ErrorObject {
    let presa_store::StoreError::Capacity { limit } = e else {
        let mut err = ErrorObject::new(codes::INTERNAL_ERROR, "Session state not saved, retry");
        if e.is_retryable() {
            err.data = Some(json!({ "retryable": true }));
        }
        return err;
    };
    metrics::refusal(limit);
    let (code, message, max, retryable) = match limit {
        Limit::MaxLegacySessionFields => (
            codes::INVALID_PARAMS,
            "Too many subscriptions in this session (max_subscriptions_per_session): unsubscribe from one first",
            legacy.max_subscriptions_per_session,
            false,
        ),
        Limit::MaxLegacySessionBytes => (
            codes::INVALID_PARAMS,
            "This session stores too much (max_legacy_session_bytes): unsubscribe from some resources first",
            legacy.max_session_bytes,
            false,
        ),
        Limit::MaxLegacySessionsPerScope => (
            codes::INTERNAL_ERROR,
            "Too many sessions holding state for this principal (max_legacy_sessions_per_scope): \
             one frees its place when it expires",
            legacy.max_sessions_per_scope,
            true,
        ),
        Limit::MaxLegacySessions => (
            codes::INTERNAL_ERROR,
            "Too many sessions holding state on this server (max_legacy_sessions): retry later",
            legacy.max_sessions,
            true,
        ),
        other => (codes::INTERNAL_ERROR, other.as_str(), 0, true),
    };
    ErrorObject::with_data(code, message, json!({ "limit": limit, "max": max, "retryable": retryable }))
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
}
