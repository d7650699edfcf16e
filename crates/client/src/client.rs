//! [`Client`]: one MCP endpoint over HTTP. Sends each request with `_meta`
//! and the MCP headers, reads the answer (a JSON body, or an SSE stream read
//! to its response), and turns failures into [`Error`]s.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use futures::StreamExt;
use serde_json::{Map, Value, json};

use crate::{
    CallOutcome, Error, Task,
    sse::{self, Messages},
    wire,
};

/// A client of one MCP endpoint. Cheap to clone (the connection pool is shared).
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    url: String,
    token: Option<String>,
    capabilities: Value,
    next_id: Arc<AtomicU64>,
}

impl Client {
    /// A client of the MCP endpoint `url` (e.g. `http://127.0.0.1:8080/mcp`),
    /// sending `token`, when given, as a bearer token. It declares form
    /// elicitation and the Tasks extension on every request.
    pub fn new(url: &str, token: Option<String>) -> Result<Client, Error> {
        // With `tls`, reqwest is built without a default crypto provider: use ring.
        #[cfg(feature = "tls")]
        let _ = rustls::crypto::ring::default_provider().install_default();
        #[cfg(not(feature = "tls"))]
        if url.trim().to_ascii_lowercase().starts_with("https:") {
            return Err(Error::Unreachable {
                url: url.into(),
                reason: "this build of presa has no TLS; build it with `--features tls` for https:// endpoints".into(),
            });
        }
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .user_agent(concat!("presa-client/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| Error::Unreachable { url: url.into(), reason: e.to_string() })?;
        Ok(Client {
            http,
            url: url.to_string(),
            token: token.filter(|t| !t.is_empty()),
            capabilities: wire::client_capabilities(),
            next_id: Arc::new(AtomicU64::new(1)),
        })
    }

    /// The endpoint.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// presa's admin API at `base` (`…/admin/v1`), or by default on this
    /// endpoint's origin, with this client's token and connections.
    pub fn admin(&self, base: Option<&str>) -> Result<crate::AdminClient, Error> {
        let base = match base {
            Some(b) => b.trim_end_matches('/').to_string(),
            None => {
                let url = reqwest::Url::parse(&self.url)
                    .map_err(|e| Error::Unreachable { url: self.url.clone(), reason: format!("not a URL: {e}") })?;
                format!("{}/admin/v1", url.origin().ascii_serialization())
            }
        };
        Ok(crate::AdminClient { http: self.http.clone(), base, token: self.token.clone() })
    }

    async fn post(&self, method: &str, params: Value) -> Result<(u64, reqwest::Response), Error> {
        self.post_keyed(method, params, None).await
    }

    /// [`post`](Self::post) with an `Idempotency-Key` header when a key is given.
    async fn post_keyed(
        &self,
        method: &str,
        params: Value,
        idempotency_key: Option<&str>,
    ) -> Result<(u64, reqwest::Response), Error> {
        let params = match params {
            Value::Object(m) => m,
            Value::Null => Map::new(),
            other => return Err(Error::Protocol(format!("params must be an object, not {other}"))),
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let name = wire::mcp_name(method, &params);
        let body = wire::request_body(id, method, params, &self.capabilities);
        let mut req = self
            .http
            .post(&self.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(reqwest::header::ACCEPT, "application/json, text/event-stream")
            .header(wire::HEADER_PROTOCOL_VERSION, wire::PROTOCOL_VERSION)
            .header(wire::HEADER_METHOD, method)
            .body(body.to_string());
        if let Some(n) = name {
            req = req.header(wire::HEADER_NAME, n);
        }
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        if let Some(key) = idempotency_key {
            req = req.header(wire::HEADER_IDEMPOTENCY_KEY, key);
        }
        let resp = req.send().await.map_err(|e| self.unreachable(&e))?;
        Ok((id, resp))
    }

    fn unreachable(&self, e: &reqwest::Error) -> Error {
        // The innermost cause says it best ("Connection refused (os error 111)").
        let mut reason = e.to_string();
        let mut src = std::error::Error::source(e);
        while let Some(s) = src {
            reason = s.to_string();
            src = s.source();
        }
        if e.is_connect() {
            reason = format!("{reason} (is the server running, and is --url / PRESA_URL right?)");
        } else if e.is_timeout() {
            reason = format!("timed out ({reason})");
        }
        Error::Unreachable { url: self.url.clone(), reason }
    }

    /// Send `method` with `params`; the `result` of its response.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, Error> {
        self.request_keyed(method, params, None).await
    }

    /// [`request`](Self::request) under an idempotency key, if one is given.
    async fn request_keyed(&self, method: &str, params: Value, key: Option<&str>) -> Result<Value, Error> {
        let task_id = params.get("taskId").and_then(Value::as_str).map(str::to_string);
        let (id, resp) = self.post_keyed(method, params, key).await?;
        let message = if sse::is_event_stream(&resp) {
            let mut messages = sse::messages(resp, &self.url);
            loop {
                match messages.next().await {
                    Some(Ok(m)) if m.get("id").and_then(Value::as_u64) == Some(id) => break m,
                    Some(Ok(_)) => continue, // progress and log notifications
                    Some(Err(e)) => return Err(e),
                    None => return Err(Error::Protocol(format!("the {method} stream ended without a response"))),
                }
            }
        } else {
            read_json(resp, &self.url).await?
        };
        into_result(message, method, task_id.as_deref())
    }

    /// `server/discover`.
    pub async fn discover(&self) -> Result<Value, Error> {
        self.request("server/discover", json!({})).await
    }

    /// Every tool of `tools/list` (following `nextCursor`).
    pub async fn list_tools(&self) -> Result<Vec<Value>, Error> {
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let params = match &cursor {
                Some(c) => json!({ "cursor": c }),
                None => json!({}),
            };
            let page = self.request("tools/list", params).await?;
            tools.extend(page["tools"].as_array().cloned().unwrap_or_default());
            match page["nextCursor"].as_str() {
                Some(c) if !c.is_empty() => cursor = Some(c.to_string()),
                _ => return Ok(tools),
            }
        }
    }

    /// `tools/call`, with the answers and state of an earlier `input_required` round, if any.
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: &Value,
        input_responses: Option<&Map<String, Value>>,
        request_state: Option<&Value>,
    ) -> Result<CallOutcome, Error> {
        self.call_tool_keyed(name, arguments, input_responses, request_state, None).await
    }

    /// [`call_tool`](Self::call_tool) under an idempotency key
    /// (`Idempotency-Key`): when the call creates a task, sending it again
    /// with the same key (after [`Error::reply_lost`]) returns that task
    /// instead of creating a second one. Use a new key
    /// ([`wire::new_idempotency_key`]) for each distinct call.
    pub async fn call_tool_keyed(
        &self,
        name: &str,
        arguments: &Value,
        input_responses: Option<&Map<String, Value>>,
        request_state: Option<&Value>,
        idempotency_key: Option<&str>,
    ) -> Result<CallOutcome, Error> {
        let mut params = json!({ "name": name, "arguments": arguments });
        if let Some(r) = input_responses {
            params["inputResponses"] = Value::Object(r.clone());
        }
        if let Some(s) = request_state {
            params["requestState"] = s.clone();
        }
        CallOutcome::from_result(self.request_keyed("tools/call", params, idempotency_key).await?)
    }

    /// `tasks/get`.
    pub async fn get_task(&self, id: &str) -> Result<Task, Error> {
        Task::from_value(self.request("tasks/get", json!({ "taskId": id })).await?)
    }

    /// `tasks/update` with `inputResponses`.
    pub async fn update_task(&self, id: &str, input_responses: &Map<String, Value>) -> Result<(), Error> {
        self.request("tasks/update", json!({ "taskId": id, "inputResponses": input_responses })).await.map(drop)
    }

    /// `tasks/cancel`.
    pub async fn cancel_task(&self, id: &str) -> Result<(), Error> {
        self.request("tasks/cancel", json!({ "taskId": id })).await.map(drop)
    }

    /// Open `subscriptions/listen` for `task_ids` (at most 100): the stream of
    /// every message the server sends (acknowledgement, `notifications/tasks`,
    /// and the final response when the server closes it gracefully).
    pub async fn listen(&self, task_ids: &[String]) -> Result<Messages, Error> {
        let params = json!({ "notifications": { "taskIds": task_ids } });
        let (_, resp) = self.post("subscriptions/listen", params).await?;
        if sse::is_event_stream(&resp) {
            return Ok(sse::messages(resp, &self.url));
        }
        let message = read_json(resp, &self.url).await?;
        into_result(message, "subscriptions/listen", None)?;
        Err(Error::Protocol("subscriptions/listen answered without a stream".into()))
    }
}

async fn read_json(resp: reqwest::Response, url: &str) -> Result<Value, Error> {
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
fn into_result(message: Value, method: &str, task_id: Option<&str>) -> Result<Value, Error> {
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
