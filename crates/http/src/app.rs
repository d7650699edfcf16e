//! [`App`]: what every handler of the router shares (the server and the
//! HTTP settings), and the small answers and header checks several of them use.

use std::sync::Arc;

use axum::{
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
};
use presa_server::Server;

use crate::config::HttpConfig;

/// The router's state.
#[derive(Clone)]
pub(crate) struct App {
    pub(crate) server: Server,
    pub(crate) config: Arc<HttpConfig>,
}

/// 405 for the methods `/mcp` does not take, naming the one it does.
pub(crate) async fn method_not_allowed() -> Response {
    (StatusCode::METHOD_NOT_ALLOWED, [(header::ALLOW, "POST")]).into_response()
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
