//! Where the console (`/console`) is served: wherever the admin API is
//! (beside `/mcp`, or on the admin API's own listener), and nowhere when the
//! admin API is off. Driven with `tower::ServiceExt::oneshot` (no sockets).

use std::sync::Arc;

use axum::{
    Router,
    body::Body,
    http::{Request, StatusCode, header},
};
use presa_http::{HttpConfig, admin::AdminConfig};
use presa_server::{Core, Server, ServerConfig, StateCodec};
use presa_store::{Backend, memory::MemoryStore};
use tower::ServiceExt;

fn server() -> Server {
    let backend = Backend::new(Arc::new(MemoryStore::new()));
    let catalog = presa_demo::catalog().expect("the demo catalog");
    Server::new(Core::new(ServerConfig::default(), catalog, backend), StateCodec::new(b"test"))
}

fn config(admin: AdminConfig) -> HttpConfig {
    HttpConfig::default().with(|c| {
        c.admin = admin;
    })
}

/// The status of `GET path` on `app`, and whether the answer is the console's page.
async fn get(app: Router, path: &str) -> (StatusCode, bool) {
    let resp = app.oneshot(Request::get(path).body(Body::empty()).expect("request")).await.expect("answer");
    let console = resp
        .headers()
        .get(header::CONTENT_SECURITY_POLICY)
        .is_some_and(|csp| csp == presa_http::console::CONTENT_SECURITY_POLICY);
    (resp.status(), console)
}

#[tokio::test]
async fn beside_mcp_by_default() {
    for path in ["/console", "/console/app.js", "/console/style.css"] {
        assert_eq!(
            get(presa_http::router(server(), HttpConfig::default()), path).await,
            (StatusCode::OK, true),
            "{path}"
        );
    }
}

#[tokio::test]
async fn on_the_admin_listener_when_it_has_one() {
    let own = AdminConfig { own_listener: true, ..AdminConfig::default() };
    let (status, console) = get(presa_http::router(server(), config(own.clone())), "/console").await;
    assert!(status != StatusCode::OK && !console, "not beside /mcp: {status}");
    assert_eq!(get(presa_http::admin_router(server(), config(own)), "/console").await, (StatusCode::OK, true));
}

#[tokio::test]
async fn nowhere_when_the_admin_api_is_off() {
    let off = AdminConfig { enabled: false, ..AdminConfig::default() };
    let (status, console) = get(presa_http::router(server(), config(off.clone())), "/console").await;
    assert!(status != StatusCode::OK && !console, "beside /mcp: {status}");
    let (status, console) = get(presa_http::admin_router(server(), config(off)), "/console").await;
    assert!(status != StatusCode::OK && !console, "on the admin listener: {status}");
}
