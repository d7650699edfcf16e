//! Streamable HTTP (MCP 2026-07-28) for presa, on axum.
//!
//! - [`router`]: `POST /mcp`, `GET /artifacts/{key}` (an artifact's streamed
//!   download, for its owner: `artifacts`), `GET /healthz`, `GET /readyz`, `GET /metrics` when
//!   [`Probes::metrics`] is set (and 405 for GET/DELETE `/mcp`).
//! - [`metrics_router`]: `GET /metrics` alone, for a process without the MCP endpoint (a worker).
//! - [`admin`]: the admin API, `/admin/v1/…` (beside `/mcp`, or alone on
//!   its own listener: [`admin_router`]), and the [`console`] at `/console` beside it.
//! - [`serve`](mod@serve): run a router on a listener (TCP_NODELAY) until a shutdown
//!   future fires, with header, body and idle timeouts and a connection cap.
//! - [`guard`]: `Host`, `Origin` and CSRF rules for the routes beside `/mcp`
//!   (the admin API, the console, `/metrics`).
//! - [`admission`]: the request admission order (Origin, envelope, `_meta`,
//!   `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`, method, `Mcp-Param-*`).
//! - [`auth`]: who is calling ([`Authenticator`]); anonymous by default, or
//!   a scheme of the `presa-auth` crate (bearer JWTs, static tokens); run on
//!   the request head before the body is read. With [`Access::resource_metadata`] set, the RFC 9728
//!   metadata is served at `/.well-known/oauth-protected-resource`, with
//!   `/mcp` and with the resource URL's own path appended ([`auth::metadata`]).
//!
//! `POST /mcp` has one entry for both eras (`mcp`): the transport checks,
//! authentication and the body, then a 2026-07-28 request goes to `modern`
//! and a 2025-11-25 one (`initialize`, or a message in a session) to
//! `legacy`; both answer through `respond` and `observe`, which import neither.
//!
//! A reply is one JSON body unless the handler streams notifications first
//! (progress, logs) or the method is `subscriptions/listen`: then SSE with
//! `X-Accel-Buffering: no`. Closing an SSE stream cancels the request's work.
//! A listen stream (and a legacy `GET` stream) ends when the credential that
//! opened it expires ([`Authenticated::expires_at`]): a listen stream with a
//! JSON-RPC error on its request id, a legacy stream by closing.
//!
//! Every parsed request runs in one server span (`<method> <tool>`, the MCP
//! semantic conventions; parent from `_meta.traceparent`, else the HTTP
//! `traceparent` header) and is counted in `presa_requests_total` and
//! `presa_request_duration_seconds` (see `presa_telemetry::metrics`).

pub mod admin;
pub mod admission;
mod artifacts;
pub mod auth;
mod config;
pub mod console;
pub mod guard;
mod legacy;
mod mcp;
mod modern;
mod observe;
mod respond;
pub mod serve;

use std::{sync::Arc, time::Duration};

use axum::{
    Router,
    extract::{DefaultBodyLimit, State},
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use futures::future::BoxFuture;
use presa_server::{Core, Server};

pub use auth::{Anonymous, Authenticated, Authenticator, Caller, Challenge, Refusal, metadata::ResourceMetadata};
pub use config::{Access, HttpConfig, Probes};
pub use serve::{ServeLimits, serve, serve_with};

/// Readiness probe: `true` when the process can serve (its store answers).
pub type ReadyCheck = Arc<dyn Fn() -> BoxFuture<'static, bool> + Send + Sync>;

/// What `/readyz` adds to its answer (for example a data loss the store
/// detected); `None`: nothing to say.
pub type ReadyDetail = Arc<dyn Fn() -> Option<String> + Send + Sync>;

/// Renders the process's metrics in the Prometheus text format (for
/// example `PrometheusHandle::render` of the recorder a binary installed).
pub type RenderMetrics = Arc<dyn Fn() -> String + Send + Sync>;

/// What `/metrics` brings up to date before rendering: the gauges that are
/// read from somewhere (open listen streams, the work queue), not counted.
pub type RefreshGauges = Arc<dyn Fn() -> BoxFuture<'static, ()> + Send + Sync>;

/// The default [`HttpConfig::max_token_bytes`]: 8 KiB, several times the
/// largest real access tokens (JWTs with many claims are 1–4 KiB).
pub const DEFAULT_MAX_TOKEN_BYTES: usize = 8 * 1024;

/// The default of [`LegacyConfig::max_sessions_per_scope`].
pub const DEFAULT_MAX_LEGACY_SESSIONS_PER_SCOPE: u64 = 50;
/// The default of [`LegacyConfig::max_sessions`]: room for
/// [`presa_server::FAIR_SHARE_SCOPES`] principals at their share.
pub const DEFAULT_MAX_LEGACY_SESSIONS: u64 =
    DEFAULT_MAX_LEGACY_SESSIONS_PER_SCOPE * presa_server::FAIR_SHARE_SCOPES as u64;

/// The 2025-11-25 (`initialize`) era on the same endpoint; see the `legacy` module.
///
/// A session costs the store nothing until it *holds state* (a log level,
/// a subscription, or the end mark `DELETE` leaves); from then until it
/// expires it counts for its principal and for the store, and what it
/// stores is counted and capped. Every limit: 0 is no limit.
#[derive(Debug, Clone)]
pub struct LegacyConfig {
    /// Serve `initialize` clients (`--legacy on`). Off: `initialize` is
    /// refused with an error naming the versions this server speaks.
    pub enabled: bool,
    /// How long a session id is valid (the client then initializes again).
    pub session_ttl: Duration,
    /// How long a call waits for the client's answer to a server request.
    pub answer_timeout: Duration,
    /// Longest URI `resources/subscribe` accepts, bytes. Default 1 KiB.
    pub max_subscription_uri_bytes: usize,
    /// Most resource subscriptions one session holds. Default 32.
    pub max_subscriptions_per_session: u64,
    /// Most bytes of state one session holds (field names plus values:
    /// subscribed URIs, the log level). Default 64 KiB.
    pub max_session_bytes: u64,
    /// Most sessions holding state one principal may have. Default 50.
    pub max_sessions_per_scope: u64,
    /// Most sessions holding state in the whole store (every pod's, with
    /// Redis). Default 5,000: 100 principals at their share.
    pub max_sessions: u64,
}

impl Default for LegacyConfig {
    fn default() -> Self {
        LegacyConfig {
            enabled: true,
            session_ttl: Duration::from_secs(24 * 3600),
            answer_timeout: Duration::from_secs(300),
            max_subscription_uri_bytes: 1024,
            max_subscriptions_per_session: 32,
            max_session_bytes: 64 * 1024,
            max_sessions_per_scope: DEFAULT_MAX_LEGACY_SESSIONS_PER_SCOPE,
            max_sessions: DEFAULT_MAX_LEGACY_SESSIONS,
        }
    }
}

impl LegacyConfig {
    /// The store's limits on each session write.
    pub(crate) fn session_limits(&self) -> presa_store::SessionLimits {
        let limit = |n: u64| (n > 0).then_some(n);
        presa_store::SessionLimits {
            max_fields: limit(self.max_subscriptions_per_session),
            counted_prefix: legacy::FIELD_SUBSCRIPTION,
            max_bytes: limit(self.max_session_bytes),
            max_per_scope: limit(self.max_sessions_per_scope),
            max_sessions: limit(self.max_sessions),
        }
    }
}

#[derive(Clone)]
pub(crate) struct App {
    pub(crate) server: Server,
    pub(crate) config: Arc<HttpConfig>,
}

/// The axum router for `server`.
pub fn router(server: Server, config: HttpConfig) -> Router {
    let limit = config.max_body_bytes;
    if config.probes.metrics.is_some() {
        presa_telemetry::metrics::register_requests(presa_protocol::Method::ALL.map(presa_protocol::Method::as_str));
    }
    let metrics = config.probes.metrics.clone().map(|render| {
        let (server, queue) = (server.clone(), config.probes.queue_metrics);
        let refresh: RefreshGauges = Arc::new(move || {
            let server = server.clone();
            Box::pin(async move { server.refresh_metrics(queue).await })
        });
        metrics_router(refresh, render)
    });
    let metadata = config.access.resource_metadata.as_ref().map(ResourceMetadata::router);
    let app = App { server, config: Arc::new(config) };
    let admin = if app.config.admin.own_listener { Router::new() } else { guarded_admin(&app) };
    let console =
        if app.config.admin.enabled && !app.config.admin.own_listener { guarded_console(&app) } else { Router::new() };
    let metrics = metrics.map(|m| m.layer(axum::middleware::from_fn_with_state(app.config.clone(), guard::page)));
    let router = Router::new()
        .route("/mcp", post(mcp::post_mcp).get(legacy::get_mcp).delete(legacy::delete_mcp))
        .route("/artifacts/{*key}", get(artifacts::download))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .layer(DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn_with_state(limit, serve::refuse_declared_oversize))
        .with_state(app)
        .merge(admin)
        .merge(console);
    let router = match metadata {
        Some(m) => router.merge(m),
        None => router,
    };
    match metrics {
        Some(m) => router.merge(m),
        None => router,
    }
}

/// The admin API alone (`/admin/v1`), for a listener of its own
/// ([`admin::AdminConfig::own_listener`]): `config` says who may call it.
pub fn admin_router(server: Server, config: HttpConfig) -> Router {
    let limit = config.max_body_bytes;
    let app = App { server, config: Arc::new(config) };
    let console = if app.config.admin.enabled { guarded_console(&app) } else { Router::new() };
    guarded_admin(&app).merge(console).layer(DefaultBodyLimit::max(limit))
}

/// `/admin/v1` behind the [`guard`]'s rules for an API.
fn guarded_admin(app: &App) -> Router {
    admin::router(app).layer(axum::middleware::from_fn_with_state(app.config.clone(), guard::api))
}

/// `/console` behind the [`guard`]'s rules for pages.
fn guarded_console(app: &App) -> Router {
    console::router().layer(axum::middleware::from_fn_with_state(app.config.clone(), guard::page))
}

/// The work queue gauges of `core`'s store, for a process without the MCP
/// endpoint (a worker).
pub fn refresh_queue_gauges(core: Core) -> RefreshGauges {
    Arc::new(move || {
        let core = core.clone();
        Box::pin(async move { core.refresh_queue_metrics().await })
    })
}

/// `GET /metrics`: `refresh` the read gauges, then `render` them all in the
/// Prometheus text format.
pub fn metrics_router(refresh: RefreshGauges, render: RenderMetrics) -> Router {
    Router::new().route(
        "/metrics",
        get(move || {
            let (refresh, render) = (refresh.clone(), render.clone());
            async move {
                refresh().await;
                let body = render();
                ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], body)
            }
        }),
    )
}

pub(crate) async fn method_not_allowed() -> Response {
    (StatusCode::METHOD_NOT_ALLOWED, [(header::ALLOW, "POST")]).into_response()
}

async fn healthz(State(app): State<App>) -> Response {
    liveness(app.config.probes.live.as_ref()).await
}

/// `/healthz` from a liveness check: 200 `ok`, or 503 when the check says
/// the process cannot reach a working store and should be restarted.
pub async fn liveness(check: Option<&ReadyCheck>) -> Response {
    match check {
        Some(check) if !check().await => {
            (StatusCode::SERVICE_UNAVAILABLE, "store unreachable for too long").into_response()
        }
        _ => (StatusCode::OK, "ok").into_response(),
    }
}

async fn readyz(State(app): State<App>) -> Response {
    if app.server.shutdown_token().is_cancelled() {
        return (StatusCode::SERVICE_UNAVAILABLE, "draining").into_response();
    }
    if !app.config.access.authenticator.ready() {
        return (StatusCode::SERVICE_UNAVAILABLE, "authentication not ready: the signing keys have not loaded yet")
            .into_response();
    }
    readiness(app.config.probes.ready.as_ref(), app.config.probes.ready_detail.as_ref()).await
}

/// `/readyz` from a readiness check: 200 `ready` or 503 `store
/// unreachable`, each followed by `detail` when it has something to say.
pub async fn readiness(check: Option<&ReadyCheck>, detail: Option<&ReadyDetail>) -> Response {
    let ready = match check {
        Some(check) => check().await,
        None => true,
    };
    let (status, word) =
        if ready { (StatusCode::OK, "ready") } else { (StatusCode::SERVICE_UNAVAILABLE, "store unreachable") };
    match detail.and_then(|d| d()) {
        Some(d) => (status, format!("{word}; {d}")).into_response(),
        None => (status, word).into_response(),
    }
}

/// Header map helper used by the admission checks.
pub(crate) fn single_header<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, &'static str> {
    let mut values = headers.get_all(name).iter();
    let Some(first) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err("repeated header");
    }
    first.to_str().map(Some).map_err(|_| "header value has invalid characters")
}
