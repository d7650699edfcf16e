//! RFC 9728 OAuth 2.0 Protected Resource Metadata: the document a client
//! fetches after a 401 to learn which authorization server issues tokens for
//! this MCP endpoint. Served at `/.well-known/oauth-protected-resource`, at
//! the path-inserted form of the resource URL (§3.1: for
//! `https://host/api/mcp`, `…/oauth-protected-resource/api/mcp`, the URL the
//! challenges advertise, [`metadata_url`]) and at `…/oauth-protected-resource/mcp`
//! (this server's own endpoint path, for a proxy that maps the public path onto it).

use axum::{Json, Router, routing::get};
use serde::Serialize;

/// The well-known path prefix (RFC 9728 §3).
pub const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

/// The metadata document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResourceMetadata {
    /// The canonical URL of the MCP endpoint (`--resource-url`).
    pub resource: String,
    /// Issuers whose tokens this resource accepts. MCP requires at least one:
    /// an empty list is left out of the document rather than sent as `[]`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
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

    /// `GET` on the well-known paths (see the module docs). A resource path
    /// that is not [`routable`] is left out (with a warning) rather than panic.
    pub fn router<S: Clone + Send + Sync + 'static>(&self) -> Router<S> {
        let doc = self.clone();
        let serve = move || {
            let doc = doc.clone();
            async move { Json(doc) }
        };
        let mut paths = vec![WELL_KNOWN.to_string(), format!("{WELL_KNOWN}/mcp")];
        let own = resource_path(&self.resource);
        if !own.is_empty() && own != "/mcp" {
            if routable(own) {
                paths.push(format!("{WELL_KNOWN}{own}"));
            } else {
                tracing::warn!(resource = %self.resource, "the resource URL's path cannot be served: its metadata is not at the advertised URL");
            }
        }
        paths.into_iter().fold(Router::new(), |router, path| router.route(&path, get(serve.clone())))
    }
}

/// The path of `resource` (an absolute URL), without a trailing `/`: `""`
/// for `https://host` or `https://host/`.
pub fn resource_path(resource: &str) -> &str {
    let rest = resource.split_once("://").map_or(resource, |(_, rest)| rest);
    let path = rest.find('/').map_or("", |i| &rest[i..]);
    let path = path.split(['?', '#']).next().unwrap_or_default();
    path.trim_end_matches('/')
}

/// Whether `path` can be served as is: `/`-separated segments of URL path
/// characters (RFC 3986 `pchar`), none empty, none that the router would
/// read as a parameter (`{…}`, `:x`, `*x`).
pub fn routable(path: &str) -> bool {
    let Some(segments) = path.strip_prefix('/') else {
        return false;
    };
    segments.split('/').all(|segment| {
        !segment.is_empty()
            && !segment.starts_with([':', '*'])
            && segment.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._~!$&'()+,;=:@%".contains(&b))
    })
}

/// The metadata URL of `resource` (RFC 9728 §3.1: the well-known prefix
/// inserted between the authority and the path), e.g.
/// `https://mcp.example.com/mcp` → `https://mcp.example.com/.well-known/oauth-protected-resource/mcp`.
pub fn metadata_url(resource: &str) -> String {
    let (scheme, rest) = resource.split_once("://").unwrap_or(("https", resource));
    let authority = rest.find('/').map_or(rest, |i| &rest[..i]);
    format!("{scheme}://{authority}{WELL_KNOWN}{}", resource_path(resource))
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
        assert_eq!(
            metadata_url("https://h.example/api/v1/mcp/"),
            "https://h.example/.well-known/oauth-protected-resource/api/v1/mcp"
        );
    }

    #[test]
    fn only_plain_paths_are_routable() {
        for ok in ["/mcp", "/api/v1/mcp", "/a-b_c.d~e", "/x%20y"] {
            assert!(routable(ok), "{ok}");
        }
        for bad in ["", "mcp", "/", "/a//b", "/{id}", "/:id", "/*rest", "/a b", "/a\nb", "/é"] {
            assert!(!routable(bad), "{bad}");
        }
    }

    /// The document answers at the URL the challenges advertise, whatever the resource's path.
    #[tokio::test]
    async fn the_metadata_is_served_where_its_url_says() {
        use tower::ServiceExt;
        for (resource, extra) in [
            ("https://h.example/api/v1/mcp", Some("/api/v1/mcp")),
            ("https://h.example/mcp", None),
            ("https://h.example/{id}", None),
        ] {
            let router: Router = ResourceMetadata::new(resource, vec!["https://as".into()], vec![]).router();
            let mut paths = vec![WELL_KNOWN.to_string(), format!("{WELL_KNOWN}/mcp")];
            paths.extend(extra.map(|p| format!("{WELL_KNOWN}{p}")));
            for path in paths {
                let req = http::Request::get(&path).body(axum::body::Body::empty()).unwrap();
                let resp = router.clone().oneshot(req).await.unwrap();
                assert_eq!(resp.status(), 200, "{resource}: {path}");
            }
            if let Some(p) = extra {
                assert_eq!(metadata_url(resource), format!("https://h.example{WELL_KNOWN}{p}"));
            }
        }
    }

    #[test]
    fn an_empty_authorization_server_list_is_left_out() {
        let doc = serde_json::to_value(ResourceMetadata::new("https://h/mcp", vec![], vec![])).unwrap();
        assert!(doc.get("authorization_servers").is_none(), "{doc}");
    }
}
