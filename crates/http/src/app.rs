//! [`App`]: what every handler of the router shares (the server and the
//! HTTP settings), and the small answers and header checks several of them use.

use std::sync::Arc;

use axum::{
    http::{HeaderMap, StatusCode, header, header::AsHeaderName},
    response::{IntoResponse, Response},
};
use presa_server::Server;
use presa_telemetry::metrics::RequestMetrics;

use crate::config::HttpConfig;

/// The router's state.
#[derive(Clone)]
pub(crate) struct App {
    pub(crate) server: Server,
    pub(crate) config: Arc<HttpConfig>,
    /// Every request's series, resolved when the router is built (under the
    /// metrics recorder installed by then).
    pub(crate) metrics: RequestMetrics,
}

impl App {
    /// The state of a router serving `server` with `config`.
    pub(crate) fn new(server: Server, config: HttpConfig) -> Self {
        let metrics = RequestMetrics::new(presa_protocol::Method::ALL.map(presa_protocol::Method::as_str));
        App { server, config: Arc::new(config), metrics }
    }
}

/// 405 for the methods `/mcp` does not take, naming the one it does.
pub(crate) async fn method_not_allowed() -> Response {
    (StatusCode::METHOD_NOT_ALLOWED, [(header::ALLOW, "POST")]).into_response()
}

/// The MCP request headers the admission checks read, as header names made
/// once: a lookup by `&str` parses (and lowercases) the name on every request.
pub(crate) mod names {
    use axum::http::HeaderName;
    use presa_protocol::headers;

    /// `MCP-Protocol-Version`.
    pub(crate) static PROTOCOL_VERSION: HeaderName = HeaderName::from_static(headers::PROTOCOL_VERSION);
    /// `Mcp-Method`.
    pub(crate) static METHOD: HeaderName = HeaderName::from_static(headers::METHOD);
    /// `Mcp-Name`.
    pub(crate) static NAME: HeaderName = HeaderName::from_static(headers::NAME);
    /// `Mcp-Session-Id` (2025-11-25).
    pub(crate) static SESSION_ID: HeaderName = HeaderName::from_static(headers::SESSION_ID);
    /// `Idempotency-Key`.
    pub(crate) static IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static(headers::IDEMPOTENCY_KEY);
}

/// Header map helper used by the admission checks.
pub(crate) fn single_header<K: AsHeaderName>(headers: &HeaderMap, name: K) -> Result<Option<&str>, &'static str> {
    let mut values = headers.get_all(name).iter();
    let Some(first) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err("repeated header");
    }
    first.to_str().map(Some).map_err(|_| "header value has invalid characters")
}
