//! Request admission for `POST /mcp`, in the order that gives every probe
//! its expected code (see the transport spec and SEP-2243):
//!
//! 0. `Origin` not allowed → 403.
//! 1. Body not JSON → 400 `-32700`; not a JSON-RPC request → 400 `-32600`.
//! 2. `_meta` missing or incomplete → 400 `-32602`.
//! 3. `MCP-Protocol-Version` missing or ≠ `_meta` → 400 `-32020`.
//! 4. Version unsupported → 400 `-32022` with `supported` and `requested`.
//! 5. `Mcp-Method` missing or ≠ body `method` (case-sensitive) → 400 `-32020`.
//! 6. `Mcp-Name` for `tools/call`, `prompts/get`, `resources/read`, `tasks/*` → 400 `-32020`.
//! 7. Unknown method → 404 `-32601`.
//! 8. `Mcp-Param-*` of the tool's `x-mcp-header` parameters → 400 `-32020`.

use axum::http::HeaderMap;
use presa_protocol::{
    Method, codes,
    headers::{self, decode_value},
    jsonrpc::{ErrorObject, Request},
    meta::RequestMeta,
};
use presa_server::catalog::Catalog;
use serde_json::Value;

use crate::single_header;

/// Whether `origin` (an `Origin` header value) is allowed by `allowed`.
pub fn origin_allowed(origin: &str, allowed: &[String]) -> bool {
    if allowed.iter().any(|a| a == "*" || a.eq_ignore_ascii_case(origin)) {
        return true;
    }
    let Some((_, rest)) = origin.split_once("://") else {
        return false;
    };
    let host = if let Some(v6) = rest.strip_prefix('[') {
        match v6.split_once(']') {
            Some((h, _)) => format!("[{h}]"),
            None => return false,
        }
    } else {
        rest.split(':').next().unwrap_or_default().to_string()
    };
    allowed.iter().any(|a| !a.contains("://") && a.eq_ignore_ascii_case(&host))
}

fn mismatch(msg: impl Into<String>) -> ErrorObject {
    ErrorObject::new(codes::HEADER_MISMATCH, format!("Header mismatch: {}", msg.into()))
}

/// Steps 2–7: `_meta`, protocol version, `Mcp-Method`, `Mcp-Name`, method.
/// On success, the request's [`Method`] and validated `_meta`.
pub fn check_request(headers: &HeaderMap, req: &Request) -> Result<(Method, RequestMeta), ErrorObject> {
    let meta = RequestMeta::from_params(&req.params)?;
    let header_version = single_header(headers, headers::PROTOCOL_VERSION).map_err(mismatch)?;
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
    match single_header(headers, headers::METHOD).map_err(mismatch)? {
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
        let header = single_header(headers, headers::NAME)
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

/// Step 8: every `x-mcp-header` parameter present in the arguments must be
/// mirrored, and equal after decoding.
pub fn check_param_headers(
    headers: &HeaderMap,
    method: Method,
    params: &serde_json::Map<String, Value>,
    catalog: &Catalog,
) -> Result<(), ErrorObject> {
    if method != Method::ToolsCall {
        return Ok(());
    }
    let Some(tool) = params.get("name").and_then(Value::as_str).and_then(|n| catalog.tool(n)) else {
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
            "http://127.0.0.1.nip.io",
        ] {
            assert!(!origin_allowed(bad, &allowed), "{bad}");
        }
    }
}
