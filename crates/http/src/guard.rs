//! The browser rules of the routes that are not `/mcp` (which checks the
//! same things in its own admission order, `admission`): the admin API, the
//! console and `/metrics`. Without them any web page the operator opens
//! could drive a loopback admin API with `--auth none`: a cross-origin
//! `POST` (CSRF) or a page on a rebound DNS name (`Host: attacker.example`).
//!
//! - `Host` must be one of [`HttpConfig::allowed_hosts`] when that is set
//!   (a loopback listener sets it to the loopback names by default).
//! - Every `Origin` must be one of [`HttpConfig::allowed_origins`].
//! - A state-changing request (anything but `GET`, `HEAD`, `OPTIONS`) must
//!   carry what a page cannot send cross-origin without a CORS preflight,
//!   which presa never answers: `Content-Type: application/json` or the
//!   [`ADMIN_HEADER`] header. A form or `text/plain` body is refused (415),
//!   and so is a request with neither (403). `Authorization` does not count:
//!   a browser resends cached Basic credentials on its own.
//! - `Sec-Fetch-Site: cross-site` is refused on the API (a browser's own
//!   word that another site sent the request); a navigation to the console
//!   from another site's link still opens the page, which holds no data.
//!
//! Refusals are the admin API's JSON shape, `{"error": {"code", "message"}}`.
//! `/healthz` and `/readyz` are left out: probes come from the kubelet with
//! the pod's address as `Host`, and answer only whether the process is up.

use std::sync::Arc;

use axum::{
    extract::{Request, State},
    http::{HeaderMap, Method, StatusCode, header},
    middleware::Next,
    response::{IntoResponse, Response},
};

use crate::{
    admin::Refused,
    admission::{content_type_is_json, host_allowed, origin_allowed},
    config::HttpConfig,
};

/// The header that marks a state-changing admin request as sent by a
/// program (`presa admin`, the console, `curl -H 'X-Presa-Admin: 1'`), not
/// by a web page's form or `fetch` without a preflight.
pub const ADMIN_HEADER: &str = "x-presa-admin";

/// Why a request is refused before its route runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `Host` is not allowed (or missing, or given twice).
    Host,
    /// An `Origin` is not allowed.
    Origin,
    /// The browser says another site sent it.
    CrossSite,
    /// A state-changing request with a body type a form can send.
    SimpleBody,
    /// A state-changing request without the JSON type or [`ADMIN_HEADER`].
    NotMarked,
}

impl Refusal {
    fn status(self) -> StatusCode {
        match self {
            Refusal::SimpleBody => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            _ => StatusCode::FORBIDDEN,
        }
    }

    fn message(self) -> &'static str {
        match self {
            Refusal::Host => "Host not allowed (see --allowed-hosts)",
            Refusal::Origin => "Origin not allowed (see --allowed-origins)",
            Refusal::CrossSite => "cross-site requests are refused",
            Refusal::SimpleBody => "Content-Type must be application/json",
            Refusal::NotMarked => {
                "a state-changing admin request needs Content-Type: application/json or an X-Presa-Admin header"
            }
        }
    }
}

/// Whether a request with `headers` may reach a route behind the guard.
/// `api`: the admin API (cross-site fetches refused), not the console's files.
pub fn check(headers: &HeaderMap, method: &Method, config: &HttpConfig, api: bool) -> Result<(), Refusal> {
    if !config.allowed_hosts.is_empty() {
        let mut hosts = headers.get_all(header::HOST).iter();
        let host = hosts.next().and_then(|h| h.to_str().ok());
        if hosts.next().is_some() || !host.is_some_and(|h| host_allowed(h, &config.allowed_hosts)) {
            return Err(Refusal::Host);
        }
    }
    for origin in headers.get_all(header::ORIGIN) {
        if !origin.to_str().is_ok_and(|o| origin_allowed(o, &config.allowed_origins)) {
            return Err(Refusal::Origin);
        }
    }
    if api && headers.get("sec-fetch-site").is_some_and(|s| s.as_bytes().eq_ignore_ascii_case(b"cross-site")) {
        return Err(Refusal::CrossSite);
    }
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return Ok(());
    }
    match headers.get(header::CONTENT_TYPE) {
        Some(ct) if ct.to_str().is_ok_and(content_type_is_json) => Ok(()),
        Some(_) => Err(Refusal::SimpleBody),
        None if headers.contains_key(ADMIN_HEADER) => Ok(()),
        None => Err(Refusal::NotMarked),
    }
}

/// The middleware: [`check`] for the admin API.
pub(crate) async fn api(State(config): State<Arc<HttpConfig>>, req: Request, next: Next) -> Response {
    guarded(&config, req, next, true).await
}

/// The middleware: [`check`] for the console's files and `/metrics`.
pub(crate) async fn page(State(config): State<Arc<HttpConfig>>, req: Request, next: Next) -> Response {
    guarded(&config, req, next, false).await
}

async fn guarded(config: &HttpConfig, req: Request, next: Next, api: bool) -> Response {
    match check(req.headers(), req.method(), config, api) {
        Ok(()) => next.run(req).await,
        Err(refusal) => {
            tracing::warn!(
                target: "presa::audit",
                path = %req.uri().path(),
                method = %req.method(),
                refusal = refusal.message(),
                "refused a request a web page may have sent"
            );
            Refused::new(refusal.status(), "forbidden", refusal.message()).into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    fn loopback() -> HttpConfig {
        HttpConfig { allowed_hosts: vec!["localhost".into(), "127.0.0.1".into(), "[::1]".into()], ..Default::default() }
    }

    #[test]
    fn a_foreign_host_or_origin_is_refused_on_every_method() {
        let c = loopback();
        let ok = headers(&[("host", "127.0.0.1:8080")]);
        assert_eq!(check(&ok, &Method::GET, &c, true), Ok(()));
        let rebound = headers(&[("host", "attacker.example:8080")]);
        assert_eq!(check(&rebound, &Method::GET, &c, true), Err(Refusal::Host));
        assert_eq!(check(&headers(&[]), &Method::GET, &c, true), Err(Refusal::Host), "no Host");
        let twice = headers(&[("host", "localhost"), ("host", "attacker.example")]);
        assert_eq!(check(&twice, &Method::GET, &c, true), Err(Refusal::Host));
        let foreign = headers(&[("host", "localhost:8080"), ("origin", "https://evil.example")]);
        assert_eq!(check(&foreign, &Method::GET, &c, true), Err(Refusal::Origin));
        let own = headers(&[("host", "localhost:8080"), ("origin", "http://localhost:8080"), (ADMIN_HEADER, "1")]);
        assert_eq!(check(&own, &Method::POST, &c, true), Ok(()));
        // No --allowed-hosts (a pod on 0.0.0.0 behind an ingress): any Host.
        assert_eq!(check(&rebound, &Method::GET, &HttpConfig::default(), true), Ok(()));
    }

    #[test]
    fn a_state_changing_request_must_be_one_a_page_cannot_send_without_preflight() {
        let c = loopback();
        let bare = headers(&[("host", "localhost")]);
        assert_eq!(check(&bare, &Method::POST, &c, true), Err(Refusal::NotMarked));
        assert_eq!(check(&bare, &Method::DELETE, &c, true), Err(Refusal::NotMarked));
        let with_basic = headers(&[("host", "localhost"), ("authorization", "Basic YTpi")]);
        assert_eq!(check(&with_basic, &Method::POST, &c, true), Err(Refusal::NotMarked), "ambient credentials");
        for simple in ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"] {
            let h = {
                let mut h = headers(&[("host", "localhost"), (ADMIN_HEADER, "1")]);
                h.insert(header::CONTENT_TYPE, HeaderValue::from_static(simple));
                h
            };
            assert_eq!(check(&h, &Method::POST, &c, true), Err(Refusal::SimpleBody), "{simple}");
        }
        let json = headers(&[("host", "localhost"), ("content-type", "application/json; charset=utf-8")]);
        assert_eq!(check(&json, &Method::POST, &c, true), Ok(()));
        let marked = headers(&[("host", "localhost"), (ADMIN_HEADER, "console")]);
        assert_eq!(check(&marked, &Method::POST, &c, true), Ok(()));
        assert_eq!(check(&bare, &Method::GET, &c, true), Ok(()), "reads need no mark");
    }

    #[test]
    fn a_cross_site_fetch_is_refused_on_the_api_but_a_navigation_opens_the_console() {
        let c = HttpConfig::default();
        let cross = headers(&[("host", "localhost"), ("sec-fetch-site", "cross-site")]);
        assert_eq!(check(&cross, &Method::GET, &c, true), Err(Refusal::CrossSite));
        assert_eq!(check(&cross, &Method::GET, &c, false), Ok(()));
        let same = headers(&[("host", "localhost"), ("sec-fetch-site", "same-origin")]);
        assert_eq!(check(&same, &Method::GET, &c, true), Ok(()));
    }
}
