//! `/mcp/<name>`: a virtual server's endpoint (`presa_server::Endpoint`),
//! answered exactly like `/mcp` (both eras, the same guards, authentication
//! and limits) by the same handlers, given an [`App`] whose dispatcher is
//! bound to that endpoint. An unknown name, and `/mcp` itself when the
//! server does not serve its whole catalog there, are 404 with a JSON-RPC error.

use axum::{
    extract::{Path, State},
    http::StatusCode,
    response::Response,
};
use presa_protocol::jsonrpc::{self, ErrorObject};

use crate::{app::App, artifacts, legacy, mcp, respond::json};

/// The app for endpoint `name` (`None`: the root), or why it is not served.
fn on(app: App, name: Option<&str>) -> Result<App, String> {
    match name {
        None if app.server.endpoints().root() => Ok(app),
        None => Err("This gateway serves its catalog only at /mcp/<server>".into()),
        Some(name) => match app.server.endpoint(name) {
            Some(server) => Ok(App { server, ..app }),
            None => Err(format!("No MCP server is served at /mcp/{name}")),
        },
    }
}

/// 404 with a JSON-RPC error saying `why`.
fn not_found(why: &str) -> Response {
    let e = ErrorObject::new(presa_protocol::codes::INVALID_REQUEST, why);
    json(StatusCode::NOT_FOUND, &jsonrpc::failure(None, &e))
}

/// `POST /mcp`.
pub(crate) async fn post_root(State(app): State<App>, request: axum::extract::Request) -> Response {
    match on(app, None) {
        Ok(app) => mcp::post_mcp(State(app), request).await,
        Err(why) => not_found(&why),
    }
}

/// `GET /mcp` (a 2025-11-25 session's stream).
pub(crate) async fn get_root(State(app): State<App>, request: axum::extract::Request) -> Response {
    match on(app, None) {
        Ok(app) => legacy::get_mcp(State(app), request).await,
        Err(why) => not_found(&why),
    }
}

/// `DELETE /mcp` (ending a 2025-11-25 session).
pub(crate) async fn delete_root(State(app): State<App>, request: axum::extract::Request) -> Response {
    match on(app, None) {
        Ok(app) => legacy::delete_mcp(State(app), request).await,
        Err(why) => not_found(&why),
    }
}

/// `POST /mcp/<name>`.
pub(crate) async fn post(
    State(app): State<App>,
    Path(name): Path<String>,
    request: axum::extract::Request,
) -> Response {
    match on(app, Some(&name)) {
        Ok(app) => mcp::post_mcp(State(app), request).await,
        Err(why) => not_found(&why),
    }
}

/// `GET /mcp/<name>`.
pub(crate) async fn get(State(app): State<App>, Path(name): Path<String>, request: axum::extract::Request) -> Response {
    match on(app, Some(&name)) {
        Ok(app) => legacy::get_mcp(State(app), request).await,
        Err(why) => not_found(&why),
    }
}

/// `DELETE /mcp/<name>`.
pub(crate) async fn delete(
    State(app): State<App>,
    Path(name): Path<String>,
    request: axum::extract::Request,
) -> Response {
    match on(app, Some(&name)) {
        Ok(app) => legacy::delete_mcp(State(app), request).await,
        Err(why) => not_found(&why),
    }
}

/// `GET /mcp/<name>/artifacts/<key>`: the download of an artifact of a task
/// made on that server (its link's relative path resolves here).
pub(crate) async fn download(
    State(app): State<App>,
    Path((name, key)): Path<(String, String)>,
    request: axum::extract::Request,
) -> Response {
    match on(app, Some(&name)) {
        Ok(app) => artifacts::download_on(app, key, request).await,
        Err(why) => not_found(&why),
    }
}
