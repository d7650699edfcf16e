//! The routers this crate builds: [`router`] (`/mcp`, a virtual server's
//! `/mcp/<name>` (`endpoints.rs`), downloads, probes,
//! and the admin API, console and `/metrics` beside them),
//! [`admin_router`] and [`metrics_router`] alone, and the probes' answers.

use std::sync::Arc;

use axum::{
    Router,
    extract::{DefaultBodyLimit, State},
    http::{StatusCode, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use presa_server::{Core, Server};

use crate::{
    admin,
    app::App,
    artifacts,
    auth::metadata::ResourceMetadata,
    config::{HttpConfig, ReadyCheck, ReadyDetail, RefreshGauges, RenderMetrics},
    console, endpoints, guard, serve,
};

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
    let app = App::new(server, config);
    let admin = if app.config.admin.own_listener { Router::new() } else { guarded_admin(&app) };
    let console =
        if app.config.admin.enabled && !app.config.admin.own_listener { guarded_console(&app) } else { Router::new() };
    let metrics = metrics.map(|m| m.layer(axum::middleware::from_fn_with_state(app.config.clone(), guard::page)));
    let router = Router::new()
        .route("/mcp", post(endpoints::post_root).get(endpoints::get_root).delete(endpoints::delete_root))
        .route("/mcp/{name}", post(endpoints::post).get(endpoints::get).delete(endpoints::delete))
        .route("/mcp/{name}/artifacts/{*key}", get(endpoints::download))
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
    let app = App::new(server, config);
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
