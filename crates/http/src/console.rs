//! The web console, `/console`: a single page for operators over the admin
//! API (`docs/admin.md`, "Console"): sign in with a bearer token, the live
//! overview (from `/admin/v1/events`), the task table and a task's page,
//! dead letters and workers, and the overview's charts of the last minutes.
//!
//! Four hand-written files (`crates/http/console/`: the page, its style,
//! `app.js`, and `charts.js`, which draws the overview's trends from
//! `/admin/v1/history` as inline SVG), embedded in the binary
//! with `include_str!`: no build step, no framework, nothing fetched from
//! elsewhere, so it works offline. The page holds no data of its own; every
//! read and action is an admin API call with the operator's token, so the
//! console can do exactly what its token may do, no more. It is served with
//! a Content-Security-Policy allowing only its own script, style and API
//! (no inline script, no other origin, no framing).

use axum::{
    Router,
    http::{HeaderValue, header},
    response::{IntoResponse, Response},
    routing::get,
};

const INDEX_HTML: &str = include_str!("../console/index.html");
const APP_JS: &str = include_str!("../console/app.js");
const CHARTS_JS: &str = include_str!("../console/charts.js");
const STYLE_CSS: &str = include_str!("../console/style.css");

/// The page's Content-Security-Policy: its own script, style, images and
/// API calls only; no plugins, no `<base>`, no framing, no form posts.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

/// `GET /console`, `/console/app.js`, `/console/charts.js` and `/console/style.css`.
pub fn router() -> Router {
    Router::new()
        .route("/console", get(|| async { asset("text/html; charset=utf-8", INDEX_HTML) }))
        .route("/console/", get(|| async { asset("text/html; charset=utf-8", INDEX_HTML) }))
        .route("/console/app.js", get(|| async { asset("text/javascript; charset=utf-8", APP_JS) }))
        .route("/console/charts.js", get(|| async { asset("text/javascript; charset=utf-8", CHARTS_JS) }))
        .route("/console/style.css", get(|| async { asset("text/css; charset=utf-8", STYLE_CSS) }))
}

/// One embedded file with the console's headers. `no-cache`: the browser
/// revalidates, so a page never runs against an older or newer API than the
/// binary that served it.
fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut resp = body.into_response();
    let headers = resp.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    resp
}

#[cfg(test)]
mod tests {
    use axum::{body::Body, http::Request};
    use tower::ServiceExt;

    use super::*;

    async fn get(path: &str) -> Response {
        router().oneshot(Request::get(path).body(Body::empty()).expect("request")).await.expect("answer")
    }

    async fn text(resp: Response) -> String {
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX).await.expect("body");
        String::from_utf8(bytes.to_vec()).expect("utf-8")
    }

    #[tokio::test]
    async fn serves_the_four_files_with_their_types_and_headers() {
        for (path, ty, marker) in [
            ("/console", "text/html", "data-testid=\"signin\""),
            ("/console/app.js", "text/javascript", "'use strict'"),
            ("/console/charts.js", "text/javascript", "PresaCharts"),
            ("/console/style.css", "text/css", "@media"),
        ] {
            let resp = get(path).await;
            assert_eq!(resp.status(), 200, "{path}");
            let h = resp.headers();
            assert!(h[header::CONTENT_TYPE].to_str().unwrap().starts_with(ty), "{path}");
            assert_eq!(h[header::CONTENT_SECURITY_POLICY], CONTENT_SECURITY_POLICY, "{path}");
            assert_eq!(h[header::X_CONTENT_TYPE_OPTIONS], "nosniff", "{path}");
            assert_eq!(h[header::CACHE_CONTROL], "no-cache", "{path}");
            assert!(text(resp).await.contains(marker), "{path} lacks {marker}");
        }
        assert_eq!(get("/console/other.js").await.status(), 404);
    }

    /// The page loads only what the policy allows: its own script and
    /// style, no inline script or style, nothing from another origin.
    #[test]
    fn the_page_needs_nothing_the_policy_forbids() {
        assert!(INDEX_HTML.contains("<script src=\"/console/app.js\" defer></script>"));
        assert!(INDEX_HTML.contains("<script src=\"/console/charts.js\" defer></script>"));
        assert!(INDEX_HTML.contains("<link rel=\"stylesheet\" href=\"/console/style.css\">"));
        assert_eq!(INDEX_HTML.matches("<script").count(), 2, "two scripts, no inline one");
        for forbidden in ["style=", "<style", "onclick", "onload", "http://", "https://", "javascript:"] {
            assert!(!INDEX_HTML.contains(forbidden), "index.html holds {forbidden:?}");
        }
        for forbidden in ["innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"] {
            assert!(!APP_JS.contains(forbidden), "app.js uses {forbidden:?}");
            assert!(!CHARTS_JS.contains(forbidden), "charts.js uses {forbidden:?}");
        }
        assert!(!STYLE_CSS.contains("@import") && !STYLE_CSS.contains("url("), "style.css loads nothing");
    }
}
