//! The admin API, `/admin/v1/…` (`docs/admin.md`): JSON over HTTP for the
//! console and `presa admin`, on the logic of [`presa_server::admin`].
//!
//! This module only speaks HTTP: it authenticates the request head with the
//! transport's [`Authenticator`](crate::Authenticator), turns the caller's
//! OAuth scopes into an [`Operator`] ([`AdminConfig::admin_scope`]: every
//! tenant; [`AdminConfig::tenant_admin_scope`]: its own), parses queries
//! strictly (an unknown parameter is a 400 naming it), and renders answers
//! and refusals as JSON (`{"error": {"code", "message"}}`).
//!
//! - `routes`: the reads and the actions.
//! - `events`: the console's live SSE stream.
//! - `history`'s sampler ([`presa_server::admin::History`]) is started with
//!   the router and ends with it, or at shutdown.
//! - `view`: the JSON shapes of tasks, dead letters, nodes and upstreams.

mod events;
mod routes;
mod view;

use std::sync::Arc;

use axum::{
    Json, Router,
    extract::FromRequestParts,
    http::{HeaderValue, StatusCode, header, request::Parts},
    response::{IntoResponse, Response},
    routing::{delete, get, post},
};
use presa_server::{
    admin::{Admin, AdminError, History, Operator, Reach},
    pools::ScopedPool,
};
use presa_store::{Limit, StoreError};
use serde_json::json;

use crate::{app::App, auth};

pub use crate::config::{AdminConfig, DEFAULT_ADMIN_SCOPE, DEFAULT_TENANT_ADMIN_SCOPE};

/// The admin routes' state: the operations, and the transport's settings.
#[derive(Clone)]
pub(crate) struct AdminState {
    app: App,
    admin: Admin,
    streams: Streams,
}

/// The event stream places: one pool for cluster admins, one for tenant
/// admins with a share per tenant, so no tenant admin can take the places
/// of another tenant or of the cluster's operators.
#[derive(Clone)]
pub(crate) struct Streams {
    cluster: Arc<ScopedPool>,
    tenants: Arc<ScopedPool>,
}

/// `/admin/v1/…` for `app` (empty when the admin API is off).
pub(crate) fn router(app: &App) -> Router {
    let config = &app.config.admin;
    if !config.enabled {
        return Router::new();
    }
    let core = app.server.core().clone();
    let history = History::new(config.history_every, config.history_window);
    // The sampler runs while this router (its state) holds the history.
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(History::run(Arc::downgrade(&history), core.clone(), app.server.shutdown_token()));
    }
    let state = AdminState {
        app: app.clone(),
        admin: Admin::with_usage_cache(core, config.usage_cache).with_history(history),
        streams: Streams {
            cluster: ScopedPool::new(config.max_streams, 0, (Limit::AdminMaxStreams, Limit::AdminMaxStreams)),
            tenants: ScopedPool::new(
                config.max_streams,
                config.max_streams_per_tenant,
                (Limit::AdminMaxStreams, Limit::AdminMaxStreamsPerTenant),
            ),
        },
    };
    Router::new()
        .route("/admin/v1/whoami", get(routes::whoami))
        .route("/admin/v1/cluster", get(routes::cluster))
        .route("/admin/v1/queues", get(routes::queues))
        .route("/admin/v1/breakers", get(routes::breakers))
        .route("/admin/v1/limits", get(routes::limits))
        .route("/admin/v1/history", get(routes::history))
        .route("/admin/v1/upstreams", get(routes::upstreams))
        .route("/admin/v1/upstreams/{name}/restart", post(routes::restart_upstream))
        .route("/admin/v1/gateway/config", get(routes::gateway_config))
        .route("/admin/v1/gateway/reload", post(routes::reload_gateway))
        .route("/admin/v1/tenants", get(routes::tenants))
        .route("/admin/v1/tasks", get(routes::tasks))
        .route("/admin/v1/tasks/{id}", get(routes::task))
        .route("/admin/v1/tasks/{id}/cancel", post(routes::cancel))
        .route("/admin/v1/tasks/{id}/retry", post(routes::retry))
        .route("/admin/v1/tasks/{id}/artifacts/{*key}", get(routes::artifact))
        .route("/admin/v1/dead-letters", get(routes::dead_letters))
        .route("/admin/v1/dead-letters/{id}", delete(routes::discard))
        .route("/admin/v1/dead-letters/{id}/replay", post(routes::replay))
        .route("/admin/v1/workers/{id}/drain", post(routes::drain))
        .route("/admin/v1/usage", get(routes::usage))
        .route("/admin/v1/events", get(events::events))
        .fallback(|| async { Refused::new(StatusCode::NOT_FOUND, "not_found", "no such admin route").into_response() })
        .with_state(state)
}

/// An authenticated operator, extracted from the request head.
pub(crate) struct Op {
    pub(crate) operator: Operator,
    /// When its credential stops holding (its streams end then).
    pub(crate) authenticated: auth::Authenticated,
}

impl FromRequestParts<AdminState> for Op {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AdminState) -> Result<Self, Response> {
        let http = &state.app.config;
        let authenticated =
            auth::authenticate(http.access.authenticator.as_ref(), &http.access.challenge, http.max_token_bytes, parts)
                .await
                .map_err(refusal)?;
        let caller = authenticated.caller.clone();
        let reach = match &caller.scopes {
            // No authentication configured: presa runs so only on loopback.
            None => Reach::Cluster,
            Some(scopes) if scopes.contains(&http.admin.admin_scope) => Reach::Cluster,
            Some(scopes) if scopes.contains(&http.admin.tenant_admin_scope) => {
                Reach::Tenant(caller.scope.tenant.clone())
            }
            Some(_) => {
                return Err(refusal(
                    http.access.challenge.insufficient_scope(std::slice::from_ref(&http.admin.admin_scope)),
                ));
            }
        };
        Ok(Op { operator: Operator { caller, reach }, authenticated })
    }
}

/// An authentication refusal as a JSON answer, with its challenge.
fn refusal(r: auth::Refusal) -> Response {
    let code = if r.status == StatusCode::FORBIDDEN { "forbidden" } else { "unauthorized" };
    let mut resp = Refused::new(r.status, code, &r.message).into_response();
    if let Some(challenge) = r.challenge.and_then(|c| HeaderValue::from_str(&c).ok()) {
        resp.headers_mut().insert(header::WWW_AUTHENTICATE, challenge);
    }
    resp
}

/// A refusal: its status and `{"error": {"code", "message"}}`.
pub(crate) struct Refused {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl Refused {
    pub(crate) fn new(status: StatusCode, code: &'static str, message: &str) -> Self {
        Refused { status, code, message: message.to_string() }
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Refused { status: StatusCode::BAD_REQUEST, code: "bad_request", message: message.into() }
    }
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        let body = Json(json!({ "error": { "code": self.code, "message": self.message } }));
        let mut resp = (self.status, body).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            resp.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        resp
    }
}

impl From<AdminError> for Refused {
    fn from(e: AdminError) -> Self {
        let (status, code) = match &e {
            AdminError::BadRequest(_) => (StatusCode::BAD_REQUEST, "bad_request"),
            AdminError::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden"),
            AdminError::NotFound(_) => (StatusCode::NOT_FOUND, "not_found"),
            AdminError::Conflict(_) => (StatusCode::CONFLICT, "conflict"),
            AdminError::Store(s) if s.is_retryable() => (StatusCode::SERVICE_UNAVAILABLE, "unavailable"),
            AdminError::Store(StoreError::Unsupported(_)) => (StatusCode::NOT_IMPLEMENTED, "not_implemented"),
            AdminError::Store(s) => {
                tracing::error!(error = %s, "admin API: store failure");
                return Refused::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "internal error");
            }
        };
        Refused { status, code, message: e.to_string() }
    }
}
