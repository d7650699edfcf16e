//! Sending one request to the endpoint: the JSON-RPC body with its `_meta`,
//! the MCP headers, the bearer token and an idempotency key, and reading
//! its answer from a JSON body or an SSE stream.

use std::sync::atomic::Ordering;

use futures::StreamExt;
use serde_json::{Map, Value};

use super::{
    Client,
    response::{into_result, read_json},
};
use crate::{error::Error, sse, wire};

impl Client {
    pub(super) async fn post(&self, method: &str, params: Value) -> Result<(u64, reqwest::Response), Error> {
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
    pub(super) async fn request_keyed(&self, method: &str, params: Value, key: Option<&str>) -> Result<Value, Error> {
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
}
