//! `GET /artifacts/{key}` (and `/mcp/<name>/artifacts/{key}` for a task made
//! on a virtual server, `endpoints.rs`): the streamed download of an
//! artifact, for its owner (the scope of its task, from the same credentials
//! `/mcp` takes, bound to the endpoint `app` serves as `/mcp`'s caller is),
//! with `Range` (one range; RFC 9110 §14). Any other caller, and any key that
//! does not exist, gets the same 404. The body streams from the artifact store
//! as it arrives: the pod never holds a whole artifact.
//!
//! The response is a download, never a page: `Content-Disposition:
//! attachment`, `X-Content-Type-Options: nosniff` and a sandboxing CSP, so an
//! artifact holding HTML cannot run script on the server's origin.

use axum::{
    body::Body,
    extract::{Path, State},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use futures::TryStreamExt;
use presa_artifacts::{ArtifactError, ByteRange};
use presa_server::artifacts::Artifacts;

use crate::{admission, app::App, auth, respond::refused};

/// `GET /artifacts/{*key}` (and `HEAD`).
pub(crate) async fn download(
    State(app): State<App>,
    Path(key): Path<String>,
    request: axum::extract::Request,
) -> Response {
    download_on(app, key, request).await
}

/// The download of `key` for the caller on the endpoint `app` serves.
pub(crate) async fn download_on(app: App, key: String, request: axum::extract::Request) -> Response {
    let (parts, _) = request.into_parts();
    let config = &app.config;
    if let Err((status, e)) = admission::check_transport(&parts.headers, &config.allowed_origins, &config.allowed_hosts)
    {
        return (status, e.message).into_response();
    }
    let caller = match auth::authenticate(
        &*config.access.authenticator,
        &config.access.challenge,
        config.max_token_bytes,
        &parts,
    )
    .await
    {
        Ok(a) => crate::mcp::bound(&app, a.caller),
        Err(refusal) => return refused(None, &refusal),
    };
    if !caller.missing(&config.access.challenge.required_scopes).is_empty() {
        return refused(None, &config.access.challenge.insufficient_scope(&[]));
    }
    let Some(artifacts) = app.server.core().artifacts() else { return not_found() };
    let meta = match artifacts.authorize(app.server.core().store().as_ref(), &caller.scope, &key).await {
        Ok(Some(meta)) => meta,
        Ok(None) => return not_found(),
        Err(e) => return unavailable(&e.to_string()),
    };
    serve(artifacts, &meta.key, &parts.headers).await
}

/// The artifact `key` (already authorized) as a streamed download, honouring
/// one `Range` of `headers`: also the admin API's, for an operator's console.
pub(crate) async fn serve(artifacts: &Artifacts, key: &str, headers: &HeaderMap) -> Response {
    let range = parse_range(headers);
    let read = match artifacts.store().open(key, range).await {
        Ok(read) => read,
        Err(ArtifactError::RangeNotSatisfiable { size, .. }) => {
            let mut resp = StatusCode::RANGE_NOT_SATISFIABLE.into_response();
            insert(resp.headers_mut(), header::CONTENT_RANGE, &format!("bytes */{size}"));
            return resp;
        }
        Err(ArtifactError::NotFound { .. } | ArtifactError::InvalidKey { .. }) => return not_found(),
        Err(e) => return unavailable(&e.to_string()),
    };
    let (start, end, size) = (read.range.start, read.range.end, read.meta.size);
    let status = if range.is_some() { StatusCode::PARTIAL_CONTENT } else { StatusCode::OK };
    let body = Body::from_stream(read.stream.map_err(std::io::Error::other));
    let mut resp = (status, body).into_response();
    let h = resp.headers_mut();
    insert(h, header::CONTENT_TYPE, &read.meta.mime);
    insert(h, header::CONTENT_LENGTH, &(end - start).to_string());
    insert(h, header::ACCEPT_RANGES, "bytes");
    insert(h, header::ETAG, &format!("\"{}\"", read.meta.sha256));
    insert(h, header::CACHE_CONTROL, "private, no-store");
    insert(h, header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    insert(h, header::CONTENT_SECURITY_POLICY, "sandbox; default-src 'none'");
    let file = key.rsplit('/').next().unwrap_or("artifact");
    insert(h, header::CONTENT_DISPOSITION, &format!("attachment; filename=\"{file}\""));
    if range.is_some() {
        insert(h, header::CONTENT_RANGE, &format!("bytes {start}-{}/{size}", end.saturating_sub(1)));
    }
    resp
}

/// The one answer for an artifact that does not exist or is not the caller's.
pub(crate) fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "No such artifact").into_response()
}

/// A 503 saying which store failed (retry later).
fn unavailable(why: &str) -> Response {
    let mut resp = (StatusCode::SERVICE_UNAVAILABLE, format!("Artifact store unavailable: {why}")).into_response();
    insert(resp.headers_mut(), header::RETRY_AFTER, "1");
    resp
}

fn insert(headers: &mut HeaderMap, name: header::HeaderName, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        headers.insert(name, v);
    }
}

/// The one byte range a `Range` header asks for; `None` (the whole artifact)
/// for no header, another unit, several ranges or bad syntax, as RFC 9110
/// allows a server to ignore them.
fn parse_range(headers: &HeaderMap) -> Option<ByteRange> {
    let spec = headers.get(header::RANGE)?.to_str().ok()?.trim().strip_prefix("bytes=")?;
    if spec.contains(',') {
        return None;
    }
    let (start, end) = spec.split_once('-')?;
    let num = |s: &str| s.trim().parse::<u64>().ok();
    match (start.trim(), end.trim()) {
        ("", n) => num(n).map(ByteRange::Suffix),
        (s, "") => num(s).map(ByteRange::From),
        (s, e) => Some(ByteRange::Bounded { start: num(s)?, end: num(e)? }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(v: &str) -> Option<ByteRange> {
        let mut h = HeaderMap::new();
        h.insert(header::RANGE, HeaderValue::from_str(v).unwrap());
        parse_range(&h)
    }

    #[test]
    fn ranges_parse_like_http() {
        assert_eq!(range("bytes=0-99"), Some(ByteRange::Bounded { start: 0, end: 99 }));
        assert_eq!(range("bytes=100-"), Some(ByteRange::From(100)));
        assert_eq!(range("bytes=-5"), Some(ByteRange::Suffix(5)));
        for ignored in ["bytes=0-1,5-6", "items=0-1", "bytes=a-b", "bytes=-", "bytes=5"] {
            assert_eq!(range(ignored), None, "{ignored}");
        }
        assert_eq!(parse_range(&HeaderMap::new()), None);
    }
}
