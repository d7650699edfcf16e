//! RFC 9728 OAuth 2.0 Protected Resource Metadata: the document a client
//! fetches after a 401 to learn which authorization server issues tokens for
//! this MCP endpoint. Served at `/.well-known/oauth-protected-resource` and at
//! the path-inserted form for the endpoint (`…/oauth-protected-resource/mcp`).

use axum::{Json, Router, routing::get};
use serde::Serialize;

/// The well-known path prefix (RFC 9728 §3).
pub const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

/// The metadata document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResourceMetadata {
    /// The canonical URL of the MCP endpoint (`--resource-url`).
    pub resource: String,
    /// Issuers whose tokens this resource accepts.
    pub authorization_servers: Vec<String>,
    /// Scopes a client may need (the required ones and every tool's).
    pub scopes_supported: Vec<String>,
    /// Always `["header"]`: tokens only in `Authorization`.
    pub bearer_methods_supported: Vec<String>,
}

impl ResourceMetadata {
    /// The document for `resource`.
    pub fn new(resource: impl Into<String>, authorization_servers: Vec<String>, scopes_supported: Vec<String>) -> Self {
        ResourceMetadata {
            resource: resource.into(),
            authorization_servers,
            scopes_supported,
            bearer_methods_supported: vec!["header".into()],
        }
    }

    /// `GET` on both well-known paths.
    pub fn router<S: Clone + Send + Sync + 'static>(&self) -> Router<S> {
        let doc = self.clone();
        let serve = move || {
            let doc = doc.clone();
            async move { Json(doc) }
        };
        Router::new().route(WELL_KNOWN, get(serve.clone())).route(&format!("{WELL_KNOWN}/mcp"), get(serve))
    }
}

/// The metadata URL of `resource` (RFC 9728 §3.1: the well-known prefix
/// inserted between the authority and the path), e.g.
/// `https://mcp.example.com/mcp` → `https://mcp.example.com/.well-known/oauth-protected-resource/mcp`.
pub fn metadata_url(resource: &str) -> String {
    let (scheme, rest) = resource.split_once("://").unwrap_or(("https", resource));
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let path = path.trim_end_matches('/');
    format!("{scheme}://{authority}{WELL_KNOWN}{path}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metadata_url_inserts_the_well_known_prefix() {
        assert_eq!(
            metadata_url("https://mcp.example.com/mcp"),
            "https://mcp.example.com/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(metadata_url("http://127.0.0.1:8080"), "http://127.0.0.1:8080/.well-known/oauth-protected-resource");
    }
}
