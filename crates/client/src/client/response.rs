//! Reading an answer: an HTTP response as a JSON-RPC message (401 and 403
//! with their `WWW-Authenticate` challenge, other statuses, bodies that are
//! not JSON-RPC), and a JSON-RPC message as its `result` or an [`Error`].

use serde_json::Value;

use crate::{error::Error, wire};

pub(super) async fn read_json(resp: reqwest::Response, url: &str) -> Result<Value, Error> {
    let status = resp.status().as_u16();
    let challenge =
        resp.headers().get(reqwest::header::WWW_AUTHENTICATE).and_then(|v| v.to_str().ok()).map(str::to_string);
    let body = resp.text().await.map_err(|e| Error::Unreachable { url: url.into(), reason: e.to_string() })?;
    let json: Option<Value> = serde_json::from_str(&body).ok();
    match status {
        401 => {
            let params = challenge.as_deref().map(parse_bearer_challenge).unwrap_or_default();
            Err(Error::Unauthorized {
                resource_metadata: param(&params, "resource_metadata"),
                detail: param(&params, "error_description").or_else(|| param(&params, "error")),
            })
        }
        403 if challenge.is_some() || json.as_ref().is_none_or(|j| j.get("error").is_none()) => {
            let params = challenge.as_deref().map(parse_bearer_challenge).unwrap_or_default();
            Err(Error::Forbidden {
                scope: param(&params, "scope"),
                detail: param(&params, "error_description")
                    .or_else(|| param(&params, "error"))
                    .or_else(|| (!body.trim().is_empty()).then(|| snippet(&body))),
            })
        }
        _ => match json {
            Some(j) if j.get("result").is_some() || j.get("error").is_some() => Ok(j),
            _ if !(200..300).contains(&status) => Err(Error::Http { status, body: snippet(&body) }),
            _ => Err(Error::Protocol(format!("the body is not a JSON-RPC response: {}", snippet(&body)))),
        },
    }
}

fn snippet(body: &str) -> String {
    let b = body.trim();
    if b.chars().count() > 200 { format!("{}…", b.chars().take(200).collect::<String>()) } else { b.to_string() }
}

fn param(params: &[(String, String)], key: &str) -> Option<String> {
    params.iter().find(|(k, _)| k.eq_ignore_ascii_case(key)).map(|(_, v)| v.clone())
}

/// The `key=value` parameters of a `WWW-Authenticate: Bearer …` challenge
/// (quoted or bare values; other schemes' parameters too, in order).
pub fn parse_bearer_challenge(header: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut s = header.trim();
    // Drop the scheme ("Bearer").
    if let Some((first, rest)) = s.split_once(char::is_whitespace)
        && !first.contains('=')
    {
        s = rest;
    }
    let mut chars = s.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace() || *c == ',') {
            chars.next();
        }
        let key: String =
            std::iter::from_fn(|| chars.next_if(|c| *c != '=' && *c != ',' && !c.is_whitespace())).collect();
        if key.is_empty() {
            return out;
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.next_if_eq(&'=').is_none() {
            continue; // a scheme name or a token68 without value
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut value = String::new();
        if chars.next_if_eq(&'"').is_some() {
            while let Some(c) = chars.next() {
                match c {
                    '\\' => value.extend(chars.next()),
                    '"' => break,
                    c => value.push(c),
                }
            }
        } else {
            value = std::iter::from_fn(|| chars.next_if(|c| *c != ',' && !c.is_whitespace())).collect();
        }
        out.push((key, value));
    }
}

/// The `result` of a JSON-RPC response, or its error as an [`Error`].
pub(super) fn into_result(message: Value, method: &str, task_id: Option<&str>) -> Result<Value, Error> {
    if let Some(e) = message.get("error") {
        let code = e["code"].as_i64().unwrap_or(0);
        let text = e["message"].as_str().unwrap_or("(no message)").to_string();
        let data = e.get("data").filter(|d| !d.is_null()).cloned();
        return Err(match (code, task_id) {
            (-32022, _) => Error::UnsupportedVersion {
                requested: data
                    .as_ref()
                    .and_then(|d| d["requested"].as_str())
                    .unwrap_or(wire::PROTOCOL_VERSION)
                    .to_string(),
                supported: data
                    .as_ref()
                    .and_then(|d| d["supported"].as_array())
                    .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
                    .unwrap_or_default(),
            },
            (-32602, Some(id)) if method.starts_with("tasks/") => {
                Error::UnknownTask { id: id.to_string(), message: text }
            }
            _ => Error::Rpc { code, message: text, data },
        });
    }
    match message.get("result") {
        Some(r) => Ok(r.clone()),
        None => Err(Error::Protocol(format!("a response without result or error: {message}"))),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn parses_bearer_challenges() {
        let p = parse_bearer_challenge(
            r#"Bearer resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource", scope="a b""#,
        );
        assert_eq!(
            param(&p, "resource_metadata").unwrap(),
            "https://mcp.example.com/.well-known/oauth-protected-resource"
        );
        assert_eq!(param(&p, "scope").unwrap(), "a b");
        let p = parse_bearer_challenge(
            r#"Bearer error="insufficient_scope", scope="tasks:write", error_description="need \"more\"""#,
        );
        assert_eq!(param(&p, "error").unwrap(), "insufficient_scope");
        assert_eq!(param(&p, "scope").unwrap(), "tasks:write");
        assert_eq!(param(&p, "error_description").unwrap(), "need \"more\"");
        assert!(parse_bearer_challenge("Bearer").is_empty());
        assert_eq!(param(&parse_bearer_challenge("Bearer realm=x"), "realm").unwrap(), "x");
    }

    #[test]
    fn maps_rpc_errors() {
        let e = into_result(
            json!({ "error": { "code": -32022, "message": "Unsupported protocol version",
                "data": { "supported": ["2026-07-28", "2025-11-25"], "requested": "2026-07-28" } } }),
            "tools/list",
            None,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "the server does not support protocol version 2026-07-28; it supports: 2026-07-28, 2025-11-25"
        );
        let e =
            into_result(json!({ "error": { "code": -32602, "message": "Task not found" } }), "tasks/get", Some("x"))
                .unwrap_err();
        assert!(matches!(e, Error::UnknownTask { ref id, .. } if id == "x"), "{e}");
        let e = into_result(json!({ "error": { "code": -32602, "message": "bad" } }), "tools/call", None).unwrap_err();
        assert_eq!(e.rpc_code(), Some(-32602));
    }
}
