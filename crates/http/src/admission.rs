//! Request admission for `POST /mcp`, in the order that gives every probe
//! its expected code (see the transport spec and SEP-2243):
//!
//! 0. `Host` not in `allowed_hosts` (when set), or any `Origin` not allowed →
//!    403; `Content-Type` other than `application/json` → 415 ([`check_transport`]).
//! 1. Body not JSON → 400 `-32700`; not a JSON-RPC request → 400 `-32600`.
//! 2. `_meta` missing or incomplete → 400 `-32602`.
//! 3. `MCP-Protocol-Version` missing or ≠ `_meta` → 400 `-32020`.
//! 4. Version unsupported → 400 `-32022` with `supported` and `requested`.
//! 5. `Mcp-Method` missing or ≠ body `method` (case-sensitive) → 400 `-32020`.
//! 6. `Mcp-Name` for `tools/call`, `prompts/get`, `resources/read`, `tasks/*` → 400 `-32020`.
//! 7. Unknown method → 404 `-32601`.
//! 8. `Mcp-Param-*` of the tool's `x-mcp-header` parameters → 400 `-32020`.

use axum::http::{HeaderMap, StatusCode, header};
use presa_protocol::{
    Method, codes,
    headers::{self, decode_value},
    jsonrpc::{ErrorObject, Request},
    meta::{IDEMPOTENCY_KEY_META, RequestMeta},
};
use presa_server::catalog::RegisteredTool;
use serde_json::Value;

use crate::app::{names, single_header};

/// An origin (`scheme://host[:port]`, RFC 6454) parsed strictly: no
/// userinfo, path, query or fragment; a DNS name, IPv4 or bracketed IPv6 host.
#[derive(Debug, PartialEq, Eq)]
struct Origin<'a> {
    scheme: &'a str,
    host: &'a str,
    port: Option<u16>,
}

fn parse_origin(origin: &str) -> Option<Origin<'_>> {
    let (scheme, rest) = origin.split_once("://")?;
    let scheme_ok = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme.bytes().all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b));
    if !scheme_ok {
        return None;
    }
    let (host, port) = split_host_port(rest)?;
    Some(Origin { scheme, host, port })
}

/// `host[:port]` (an origin's authority or a `Host` header): a DNS name,
/// IPv4 or bracketed IPv6 host, and an optional decimal port. Anything else
/// (userinfo, a path, empty parts) is `None`. Searched by bytes (every
/// delimiter is ASCII): a request's `Host` and each allowed entry pass here
/// on every request.
fn split_host_port(authority: &str) -> Option<(&str, Option<u16>)> {
    let bytes = authority.as_bytes();
    let (host, port) = if bytes.first() == Some(&b'[') {
        let end = bytes.iter().position(|&b| b == b']')? + 1;
        let inner = &authority[1..end - 1];
        if inner.is_empty() || !inner.bytes().all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.') {
            return None;
        }
        (&authority[..end], &authority[end..])
    } else {
        let end = bytes.iter().position(|&b| b == b':').unwrap_or(bytes.len());
        let host = &authority[..end];
        let label_ok = |l: &[u8]| !l.is_empty() && l.iter().all(|&b| b.is_ascii_alphanumeric() || b == b'-');
        let dots = host.bytes().rev().take_while(|&b| b == b'.').count();
        if !host.as_bytes()[..host.len() - dots].split(|&b| b == b'.').all(label_ok) {
            return None;
        }
        (host, &authority[end..])
    };
    let port = match port.strip_prefix(':') {
        None if port.is_empty() => None,
        None => return None,
        Some(p) if !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()) => Some(p.parse().ok()?),
        Some(_) => return None,
    };
    Some((host, port))
}

/// Whether `origin` (an `Origin` header value) is allowed by `allowed`: `*`
/// allows every origin; a hostname entry (`localhost`) allows that host with
/// any scheme and port; a full origin entry (`https://app.example.com`)
/// allows exactly it (scheme, host and port). A malformed origin (userinfo,
/// a path, a bad port…) is never allowed.
pub fn origin_allowed(origin: &str, allowed: &[String]) -> bool {
    if allowed.iter().any(|a| a == "*") {
        return true;
    }
    let Some(o) = parse_origin(origin) else {
        return false;
    };
    allowed.iter().any(|a| match parse_origin(a) {
        Some(entry) => {
            entry.scheme.eq_ignore_ascii_case(o.scheme)
                && entry.host.eq_ignore_ascii_case(o.host)
                && entry.port == o.port
        }
        None => a.eq_ignore_ascii_case(o.host),
    })
}

/// Whether a `Host` header value is allowed by `allowed`: an entry `host`
/// allows that host on any port, `host:port` exactly that, `*` every host.
/// An empty list allows every host.
pub fn host_allowed(host: &str, allowed: &[String]) -> bool {
    if allowed.is_empty() || allowed.iter().any(|a| a == "*") {
        return true;
    }
    let Some((name, port)) = split_host_port(host) else {
        return false;
    };
    allowed.iter().any(|a| match split_host_port_of_entry(a) {
        Some((entry, None)) => entry.eq_ignore_ascii_case(name),
        Some((entry, entry_port)) => entry.eq_ignore_ascii_case(name) && entry_port == port,
        None => false,
    })
}

/// [`split_host_port`] of an `allowed_hosts` entry, which is read on every
/// request: an entry with neither a port nor brackets (`localhost`) is its
/// own host as it stands, and comparing it to a host already validated
/// tells whether it is a valid one too, so its labels are not checked again.
fn split_host_port_of_entry(entry: &str) -> Option<(&str, Option<u16>)> {
    if entry.bytes().all(|b| b != b':' && b != b'[') {
        return Some((entry, None));
    }
    split_host_port(entry)
}

/// Whether a `Content-Type` value is `application/json` (parameters such as
/// `charset` allowed).
pub fn content_type_is_json(value: &str) -> bool {
    value.split(';').next().is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"))
}

/// Step 0, on the headers alone: `Host` (when `allowed_hosts` is set), every
/// `Origin` header, and the `Content-Type` (when present). On refusal, the
/// HTTP status and the JSON-RPC error to answer with.
pub fn check_transport(
    headers: &HeaderMap,
    allowed_origins: &[String],
    allowed_hosts: &[String],
) -> Result<(), (StatusCode, ErrorObject)> {
    let forbidden = |what: &str| (StatusCode::FORBIDDEN, ErrorObject::new(codes::INVALID_REQUEST, what));
    if !allowed_hosts.is_empty() {
        let mut hosts = headers.get_all(header::HOST).iter();
        let host = hosts.next().and_then(|h| h.to_str().ok());
        if hosts.next().is_some() || !host.is_some_and(|h| host_allowed(h, allowed_hosts)) {
            return Err(forbidden("Host not allowed"));
        }
    }
    for origin in headers.get_all(header::ORIGIN) {
        if !origin.to_str().is_ok_and(|o| origin_allowed(o, allowed_origins)) {
            return Err(forbidden("Origin not allowed"));
        }
    }
    if let Some(ct) = headers.get(header::CONTENT_TYPE)
        && !ct.to_str().is_ok_and(content_type_is_json)
    {
        let e = ErrorObject::new(codes::INVALID_REQUEST, "Content-Type must be application/json");
        return Err((StatusCode::UNSUPPORTED_MEDIA_TYPE, e));
    }
    // A body presa does not decode is refused, not read as if it were plain
    // (RFC 9110 §8.4: 415 for a content coding the server does not accept).
    for coding in headers.get_all(header::CONTENT_ENCODING) {
        if !coding.to_str().is_ok_and(|c| c.split(',').all(|c| c.trim().eq_ignore_ascii_case("identity"))) {
            let e = ErrorObject::new(codes::INVALID_REQUEST, "Content-Encoding is not supported: send the body as is");
            return Err((StatusCode::UNSUPPORTED_MEDIA_TYPE, e));
        }
    }
    Ok(())
}

fn mismatch(msg: impl Into<String>) -> ErrorObject {
    ErrorObject::new(codes::HEADER_MISMATCH, format!("Header mismatch: {}", msg.into()))
}

/// Steps 2–7: `_meta`, protocol version, `Mcp-Method`, `Mcp-Name`, method.
/// On success, the request's [`Method`] and validated `_meta`.
pub fn check_request(headers: &HeaderMap, req: &Request) -> Result<(Method, RequestMeta), ErrorObject> {
    let meta = RequestMeta::from_params(&req.params)?;
    let header_version = single_header(headers, &names::PROTOCOL_VERSION).map_err(mismatch)?;
    match header_version {
        None => return Err(mismatch("MCP-Protocol-Version header is required")),
        Some(v) if v.trim() != meta.protocol_version => {
            return Err(mismatch(format!(
                "MCP-Protocol-Version header '{}' does not match _meta protocolVersion '{}'",
                v.trim(),
                meta.protocol_version
            )));
        }
        Some(_) => {}
    }
    if !presa_protocol::supports_version(&meta.protocol_version) {
        return Err(presa_protocol::unsupported_version(&meta.protocol_version));
    }
    match single_header(headers, &names::METHOD).map_err(mismatch)? {
        None => return Err(mismatch("Mcp-Method header is required")),
        Some(m) if m.trim_matches([' ', '\t']) != req.method => {
            return Err(mismatch(format!("Mcp-Method header value does not match body method '{}'", req.method)));
        }
        Some(_) => {}
    }
    // Parsed now, refused only after the `Mcp-Name` check (step 7 follows 6).
    let method = req.method.parse::<Method>();
    if let Some(field) = method.as_ref().ok().and_then(|m| m.name_param())
        && let Some(Value::String(body_value)) = req.params.get(field)
    {
        let header = single_header(headers, &names::NAME)
            .map_err(mismatch)?
            .ok_or_else(|| mismatch(format!("Mcp-Name header is required for {}", req.method)))?;
        let decoded = decode_value(header).map_err(|e| mismatch(format!("Mcp-Name: {e}")))?;
        if &decoded != body_value {
            return Err(mismatch(format!("Mcp-Name header value does not match body {field}")));
        }
    }
    let method = method.map_err(|unknown| ErrorObject::new(codes::METHOD_NOT_FOUND, unknown.to_string()))?;
    Ok((method, meta))
}

/// A `tools/call`'s `Idempotency-Key` header, copied into its `_meta`
/// ([`IDEMPOTENCY_KEY_META`]) for the server; a header and a `_meta` key that
/// disagree are refused (-32602). Other methods' headers are ignored.
pub fn idempotency_key(headers: &HeaderMap, method: Method, meta: &mut RequestMeta) -> Result<(), ErrorObject> {
    if method != Method::ToolsCall {
        return Ok(());
    }
    let bad = |msg: String| ErrorObject::new(codes::INVALID_PARAMS, msg);
    let Some(key) =
        single_header(headers, &names::IDEMPOTENCY_KEY).map_err(|e| bad(format!("Idempotency-Key: {e}")))?
    else {
        return Ok(());
    };
    match &meta.idempotency_key {
        Some(Value::String(k)) if k == key => {}
        Some(_) => {
            return Err(bad(format!("Idempotency-Key header does not match _meta[\"{IDEMPOTENCY_KEY_META}\"]")));
        }
        None => {
            meta.idempotency_key = Some(Value::String(key.into()));
        }
    }
    Ok(())
}

/// Step 8: every `x-mcp-header` parameter present in the arguments must be
/// mirrored, and equal after decoding.
pub fn check_param_headers(
    headers: &HeaderMap,
    tool: Option<&RegisteredTool>,
    params: &serde_json::Map<String, Value>,
) -> Result<(), ErrorObject> {
    let Some(tool) = tool else {
        return Ok(());
    };
    let Some(arguments) = params.get("arguments") else {
        return Ok(());
    };
    for param in tool.headers() {
        let Some(value) = param.value(arguments) else {
            continue;
        };
        let name = format!("{}{}", headers::PARAM_PREFIX, param.header.to_ascii_lowercase());
        let raw = single_header(headers, &name)
            .map_err(|e| mismatch(format!("Mcp-Param-{}: {e}", param.header)))?
            .ok_or_else(|| mismatch(format!("Mcp-Param-{} header is required", param.header)))?;
        let decoded = decode_value(raw).map_err(|e| mismatch(format!("Mcp-Param-{}: {e}", param.header)))?;
        let matches = match value {
            Value::String(s) => &decoded == s,
            Value::Bool(b) => decoded == b.to_string(),
            Value::Number(n) => decoded.parse::<f64>().ok().zip(n.as_f64()).is_some_and(|(h, b)| h == b),
            _ => false,
        };
        if !matches {
            return Err(mismatch(format!("Mcp-Param-{} header value does not match the argument", param.header)));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins() {
        let allowed: Vec<String> =
            ["localhost", "127.0.0.1", "[::1]", "https://app.example.com"].map(String::from).into();
        for ok in [
            "http://localhost:3000",
            "http://127.0.0.1:8080",
            "http://[::1]:1",
            "https://app.example.com",
            "http://localhost",
        ] {
            assert!(origin_allowed(ok, &allowed), "{ok}");
        }
        for bad in [
            "http://evil.example.com",
            "null",
            "http://localhost.evil.com",
            "https://app.example.com:444",
            "http://app.example.com",
            "http://127.0.0.1.nip.io",
            "http://user@localhost",
            "http://localhost@evil.example.com",
            "http://evil.example.com#@localhost",
            "http://localhost/path",
            "http://localhost:99999",
            "http://localhost:",
            "http://localhost:80x",
            "localhost",
            "://localhost",
            "1http://localhost",
            "http://[::1",
            "http://[::1]x",
            "http://local host",
            "",
        ] {
            assert!(!origin_allowed(bad, &allowed), "{bad}");
        }
        assert!(origin_allowed("http://anything.example", &["*".to_string()]));
    }

    #[test]
    fn hosts() {
        let allowed: Vec<String> = ["localhost", "127.0.0.1:8080", "[::1]"].map(String::from).into();
        for ok in ["localhost", "LOCALHOST:3000", "127.0.0.1:8080", "[::1]:9", "[::1]"] {
            assert!(host_allowed(ok, &allowed), "{ok}");
        }
        for bad in ["evil.example.com", "127.0.0.1", "127.0.0.1:8081", "localhost.evil.com", "user@localhost", ""] {
            assert!(!host_allowed(bad, &allowed), "{bad}");
        }
        assert!(host_allowed("anything", &[]), "no list: every host");
        // Entries that are no valid host allow nothing, as when each was split.
        let invalid: Vec<String> = ["bad_host", "a..b", ""].map(String::from).into();
        for host in ["bad_host", "a..b", "", "localhost"] {
            assert!(!host_allowed(host, &invalid), "{host}");
        }
    }

    #[test]
    fn authorities() {
        type Split<'a> = Option<(&'a str, Option<u16>)>;
        let cases: [(&str, Split<'_>); 14] = [
            ("localhost", Some(("localhost", None))),
            ("localhost.:80", Some(("localhost.", Some(80)))),
            ("a.b..", Some(("a.b..", None))),
            ("my-host.example:65535", Some(("my-host.example", Some(65535)))),
            ("[::1]:9", Some(("[::1]", Some(9)))),
            ("[::1]", Some(("[::1]", None))),
            ("a..b", None),
            (".", None),
            ("", None),
            ("[]", None),
            ("[::1]:", None),
            ("[::1]x", None),
            ("host:65536", None),
            ("hé", None),
        ];
        for (authority, expected) in cases {
            assert_eq!(split_host_port(authority), expected, "{authority}");
        }
    }

    #[test]
    fn content_types() {
        for ok in ["application/json", "Application/JSON", "application/json; charset=utf-8", " application/json ;x=y"]
        {
            assert!(content_type_is_json(ok), "{ok}");
        }
        for bad in
            ["text/plain", "application/json-patch+json", "application/jsonx", "text/json", "application/x-json", ""]
        {
            assert!(!content_type_is_json(bad), "{bad}");
        }
    }

    #[test]
    fn every_origin_header_is_checked() {
        let allowed = vec!["localhost".to_string()];
        let mut headers = HeaderMap::new();
        headers.append(header::ORIGIN, "http://localhost".parse().unwrap());
        assert!(check_transport(&headers, &allowed, &[]).is_ok());
        headers.append(header::ORIGIN, "http://evil.example.com".parse().unwrap());
        assert_eq!(check_transport(&headers, &allowed, &[]).unwrap_err().0, StatusCode::FORBIDDEN);
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, "evil.example.com".parse().unwrap());
        assert!(check_transport(&headers, &allowed, &[]).is_ok(), "no --allowed-hosts: no check");
        for (coding, ok) in [("gzip", false), ("br", false), ("identity", true), ("gzip, identity", false)] {
            let mut h = headers.clone();
            h.insert(header::CONTENT_ENCODING, coding.parse().unwrap());
            let got = check_transport(&h, &allowed, &[]);
            assert_eq!(got.is_ok(), ok, "Content-Encoding: {coding}");
            if let Err((status, _)) = got {
                assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
            }
        }
        assert_eq!(check_transport(&headers, &allowed, &allowed).unwrap_err().0, StatusCode::FORBIDDEN);
    }
}
