//! The standalone `GET /mcp` stream of a legacy session and `DELETE /mcp`,
//! which ends the session on every pod. A `GET` stream whose client reads
//! too slowly falls behind its bus queue and ends with a last
//! `notifications/message` saying so (the client opens it again).

use axum::{
    extract::State,
    http::{StatusCode, request::Parts},
    response::{IntoResponse, Response},
};
use futures::StreamExt;
use presa_protocol::{
    headers,
    jsonrpc::{self},
};
use presa_server::{ListChanged, context::RESOURCE_UPDATED_EVENT};
use serde_json::json;

use crate::{
    admission,
    app::App,
    respond::{self, json, refused},
};

use crate::auth::Authenticated;

use super::session::{FIELD_ENDED, FIELD_SUBSCRIPTION, Session, remaining, session_refused, verify};

/// Prefix of the bus event that tells every pod a session ended: its open
/// `GET` streams close.
const ENDED_EVENT: &str = "legacy/ended ";

/// What a `GET` or `DELETE` of a legacy session passes before it acts: 405
/// without a session (or with `--legacy off`), the transport checks, the
/// caller's authentication, and the session's verification.
async fn admit(app: &App, parts: &Parts) -> Result<(Authenticated, Session), Response> {
    let headers = &parts.headers;
    if !app.config.legacy.enabled || !headers.contains_key(headers::SESSION_ID) {
        return Err(crate::app::method_not_allowed().await);
    }
    if let Err((status, e)) =
        admission::check_transport(headers, &app.config.allowed_origins, &app.config.allowed_hosts)
    {
        return Err(json(status, &jsonrpc::failure(None, &e)));
    }
    let config = &app.config;
    let mut authenticated = crate::auth::authenticate(
        &*config.access.authenticator,
        &config.access.challenge,
        config.max_token_bytes,
        parts,
    )
    .await
    .map_err(|refusal| refused(None, &refusal))?;
    authenticated.caller = crate::mcp::bound(app, authenticated.caller);
    let (session, _) = verify(app, headers, &authenticated.caller).await?;
    Ok((authenticated, session))
}

/// `GET /mcp` in a legacy session: the standalone stream of list-changed
/// notifications (from every pod, through the bus) and of updates to the
/// resources the session subscribed to. It closes when the session ends or
/// the caller's credential expires or is revoked. Without a session: 405, as before.
pub(crate) async fn get_mcp(State(app): State<App>, request: axum::extract::Request) -> Response {
    let (parts, _) = request.into_parts();
    let headers = &parts.headers;
    let (authenticated, session) = match admit(&app, &parts).await {
        Ok(admitted) => admitted,
        Err(resp) => return resp,
    };
    if !respond::accepts_sse(headers) {
        return session_refused(StatusCode::NOT_ACCEPTABLE, "Not Acceptable: GET needs Accept: text/event-stream");
    }
    // The same budget as `subscriptions/listen` streams, per pod and per principal.
    let permit = match app.server.admit_stream(&authenticated.caller.scope) {
        Ok(p) => p,
        Err(e) => return respond::error(None, &e),
    };
    let Ok(events) = app.server.core().bus().subscribe().await else {
        return session_refused(StatusCode::SERVICE_UNAVAILABLE, "Event stream unavailable, retry");
    };
    let store = app.server.core().sessions().clone();
    let (key, owner) = (session.key, session.owner);
    let ended = format!("{ENDED_EVENT}{key}");
    // The stream ends when the session does (a DELETE on any pod), or with a
    // last message when it lagged.
    let events = events.scan(false, move |over, event| {
        if *over {
            return futures::future::ready(None);
        }
        let next = match event {
            Ok(e) if e == ended => None,
            Ok(e) => Some(Ok(e)),
            Err(_) => {
                *over = true;
                Some(Err(()))
            }
        };
        futures::future::ready(next)
    });
    let messages = events.filter_map(move |event| {
        let (store, key, owner) = (store.clone(), key.clone(), owner.clone());
        async move {
            let Ok(event) = event else {
                return Some(lagged_notice());
            };
            if let Some(uri) = event.strip_prefix(RESOURCE_UPDATED_EVENT) {
                let state = store.session_state(&owner, &key).await.ok()?;
                let field = format!("{FIELD_SUBSCRIPTION}{uri}");
                return state
                    .contains_key(&field)
                    .then(|| jsonrpc::notification("notifications/resources/updated", json!({ "uri": uri })));
            }
            ListChanged::ALL.iter().any(|list| list.method() == event).then(|| jsonrpc::notification(&event, json!({})))
        }
    });
    // The permit is held while the stream is open; the stream closes when the credential expires.
    let messages = messages.map(move |m| {
        let _open = &permit;
        m
    });
    respond::sse(respond::until_ended(messages, authenticated.ended(), None), app.config.keep_alive)
}

/// The last message of a `GET` stream that lagged.
fn lagged_notice() -> serde_json::Value {
    jsonrpc::notification(
        "notifications/message",
        json!({ "level": "warning", "logger": "presa", "data": {
            "error": "stream lagged",
            "message": "The client read this stream too slowly: notifications were dropped and the stream ends; open it again",
        } }),
    )
}

/// `DELETE /mcp` in a legacy session: the session ends on every pod (its
/// id answers 404 from now on, and its open `GET` streams close); its state
/// is dropped but for the end mark. Without a session: 405, as before.
pub(crate) async fn delete_mcp(State(app): State<App>, request: axum::extract::Request) -> Response {
    let (parts, _) = request.into_parts();
    let (_, session) = match admit(&app, &parts).await {
        Ok(admitted) => admitted,
        Err(resp) => return resp,
    };
    let store = app.server.core().sessions();
    let limits = super::session::session_limits(&app.config.legacy);
    match store.end_session(&session.owner, &session.key, FIELD_ENDED, remaining(&session), limits).await {
        Ok(()) => {
            // Best effort: a stream that misses it ends at its next request's 404.
            if let Err(e) = app.server.core().bus().publish(&format!("{ENDED_EVENT}{}", session.key)).await {
                tracing::warn!(error = %e, "the end of a legacy session could not be published");
            }
            StatusCode::OK.into_response()
        }
        Err(presa_store::StoreError::Capacity { limit }) => {
            presa_telemetry::metrics::refusal(limit);
            session_refused(
                StatusCode::TOO_MANY_REQUESTS,
                &format!("Session not ended: too many sessions holding state ({limit}); it ends when it expires"),
            )
        }
        Err(_) => session_refused(StatusCode::SERVICE_UNAVAILABLE, "Session not ended, retry"),
    }
}
