//! Legacy sessions: the sealed, expiring `Mcp-Session-Id` that carries what
//! `initialize` negotiated, its verification on any pod, and the names of
//! the little shared state a session keeps in the store (under its owner,
//! counted and capped: see [`crate::LegacyConfig`]).
//!
//! A session id that is not the caller's answers exactly like one that does
//! not exist (404), so an id is never an oracle for another principal's session.

use std::{collections::HashMap, time::Instant};

use axum::{
    http::{HeaderMap, HeaderValue, StatusCode},
    response::Response,
};
use presa_protocol::{
    LEGACY_PROTOCOL_VERSION, LEGACY_VERSIONS, codes, headers,
    jsonrpc::{self, ErrorObject, Request},
};
use presa_server::{Caller, state::Binding};
use presa_store::Scope;
use presa_store::util::now_ms;
use presa_telemetry::metrics;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::{
    app::App,
    config::LegacyConfig,
    observe::{Observed, UNKNOWN_METHOD},
    respond::json,
};

use super::INITIALIZE;

/// What a session token is bound to besides the principal (`Binding::method`).
const SESSION_PURPOSE: &str = "mcp-session";
/// Longest session id issued: it travels in a header on every request, and
/// proxies refuse large headers (nginx: 8 KiB per line by default).
const MAX_SESSION_ID_LEN: usize = 4096;

/// Store fields of a session's shared state.
pub(super) const FIELD_LOG_LEVEL: &str = "logLevel";
pub(super) const FIELD_ENDED: &str = "ended";
/// The prefix of a subscription's field (what `max_subscriptions_per_session` counts).
pub(crate) const FIELD_SUBSCRIPTION: &str = "sub:";

/// The store's limits on each of a session's writes, from `legacy`'s settings.
pub(super) fn session_limits(legacy: &LegacyConfig) -> presa_store::SessionLimits {
    let limit = |n: u64| (n > 0).then_some(n);
    presa_store::SessionLimits {
        max_fields: limit(legacy.max_subscriptions_per_session),
        counted_prefix: FIELD_SUBSCRIPTION,
        max_bytes: limit(legacy.max_session_bytes),
        max_per_scope: limit(legacy.max_sessions_per_scope),
        max_sessions: limit(legacy.max_sessions),
    }
}

/// What a session token carries (sealed, so the client cannot change it).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Negotiated {
    /// The negotiated protocol version.
    pub(super) v: String,
    /// The client's capabilities from `initialize`.
    pub(super) c: Map<String, Value>,
    /// The client's `clientInfo`, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) i: Option<Value>,
}

/// A verified session.
#[derive(Debug, Clone)]
pub(super) struct Session {
    /// The key of its shared state and of its answers: a digest of the token.
    pub(super) key: String,
    /// The principal it belongs to (its state is stored under it).
    pub(super) owner: Scope,
    /// What `initialize` negotiated.
    pub(super) negotiated: Negotiated,
    /// When the token expires (ms since the epoch).
    expires_ms: u64,
}

fn binding(caller: &Caller) -> Binding {
    Binding { principal: caller.scope.key(), method: SESSION_PURPOSE.into(), digest: String::new() }
}

pub(super) fn session_key(token: &str) -> String {
    Sha256::digest(token.as_bytes()).iter().take(16).map(|b| format!("{b:02x}")).collect()
}

/// A refusal of the session itself, before any method runs.
pub(super) fn session_refused(status: StatusCode, message: &str) -> Response {
    metrics::request(UNKNOWN_METHOD, status.as_u16().to_string(), std::time::Duration::ZERO);
    let mut body = jsonrpc::failure(None, &ErrorObject::new(codes::INVALID_REQUEST, message));
    body["id"] = Value::Null;
    json(status, &body)
}

/// Verify the `Mcp-Session-Id` of a request from `caller`: 400 without one,
/// 404 when it is not ours, expired, ended, or issued to another principal
/// (the same answer, so an id tells nothing about other principals' sessions;
/// the client must initialize again).
pub(super) async fn verify(
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
    let not_found = || session_refused(StatusCode::NOT_FOUND, "Session not found: send initialize to start a new one");
    // Any failure (forged, expired, another principal's, a requestState
    // passed as a session id…) is an unknown session, alike.
    let Ok(sealed) = codec.open(token, &binding(caller), now) else {
        return Err(not_found());
    };
    let Ok(negotiated) = serde_json::from_value::<Negotiated>(sealed.clone()) else {
        return Err(not_found());
    };
    let expires_ms = sealed.get("e").and_then(Value::as_u64).unwrap_or(0);
    let session = Session { key: session_key(token), owner: caller.scope.clone(), negotiated, expires_ms };
    let state = match app.server.core().sessions().session_state(&session.owner, &session.key).await {
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
    let mut observed = Observed::start(app, headers, &req, started, None);
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

/// How long the session has left (at least a second), the TTL of its shared state.
pub(super) fn remaining(session: &Session) -> std::time::Duration {
    std::time::Duration::from_millis(session.expires_ms.saturating_sub(now_ms()).max(1000))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_keys_are_stable_and_distinct() {
        assert_eq!(session_key("a.b"), session_key("a.b"));
        assert_ne!(session_key("a.b"), session_key("a.c"));
        assert_eq!(session_key("x").len(), 32);
    }
}
