//! A minimal MCP client for the stateless 2026-07-28 wire, for tests.

use std::time::Duration;

use eventsource_stream::Eventsource;
use futures::{Stream, StreamExt};
use presa_client::wire;
use serde_json::{Map, Value, json};

/// The Tasks extension identifier, as declared in capabilities.
pub const TASKS: &str = wire::TASKS_EXTENSION;

/// Declared capabilities: elicitation plus the Tasks extension.
pub fn tasks_caps() -> Value {
    wire::client_capabilities()
}

/// The `taskId` of a `CreateTaskResult` (panics, showing it, when the call did not create a task).
pub fn task_id(created: &Value) -> String {
    assert_eq!(created["resultType"], "task", "{created}");
    created["taskId"].as_str().expect("taskId").to_string()
}

/// A minimal MCP client for the stateless wire.
#[derive(Debug, Clone)]
pub struct Client {
    /// The MCP endpoint.
    pub url: String,
    /// The HTTP client (connection pool) requests go through.
    pub http: reqwest::Client,
    /// The client capabilities every request declares in `_meta`.
    pub caps: Value,
    /// Sent as `x-test-scope` (read by [`HeaderScopes`](crate::HeaderScopes)).
    pub scope: Option<String>,
    /// Sent as `Authorization: Bearer …`.
    pub bearer: Option<String>,
}

impl Client {
    /// A client of `url` declaring `caps` on every request.
    pub fn new(url: impl Into<String>, caps: Value) -> Self {
        Client { url: url.into(), http: reqwest::Client::new(), caps, scope: None, bearer: None }
    }

    /// The same client, calling as `scope` (see [`crate::HeaderScopes`]).
    pub fn with_scope(mut self, scope: &str) -> Self {
        self.scope = Some(scope.into());
        self
    }

    /// The same client, sending `token` as its bearer token.
    pub fn with_bearer(mut self, token: &str) -> Self {
        self.bearer = Some(token.into());
        self
    }

    /// The request the wire asks for (built by presa-client's `wire`, the
    /// one MCP client code): `_meta` with the protocol's keys (the caller's
    /// own stay), the MCP headers, and the test kit's scope and bearer.
    fn request(&self, id: u64, method: &str, params: Value) -> reqwest::RequestBuilder {
        let params = match params {
            Value::Object(params) => params,
            Value::Null => Map::new(),
            other => panic!("{method}: params must be an object, not {other}"),
        };
        let name = wire::mcp_name(method, &params);
        let body = wire::request_body(id, method, params, &self.caps);
        let mut b = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header(wire::HEADER_PROTOCOL_VERSION, wire::PROTOCOL_VERSION)
            .header(wire::HEADER_METHOD, method)
            .body(body.to_string());
        if let Some(n) = name {
            b = b.header(wire::HEADER_NAME, n);
        }
        if let Some(s) = &self.scope {
            b = b.header("x-test-scope", s);
        }
        if let Some(t) = &self.bearer {
            b = b.bearer_auth(t);
        }
        b
    }

    /// Send a request; returns (HTTP status, the JSON-RPC response).
    /// SSE replies are read to their final response.
    pub async fn send(&self, method: &str, params: Value) -> (u16, Value) {
        self.try_send(method, params).await.unwrap_or_else(|e| panic!("{method}: {e}"))
    }

    /// [`send`](Self::send) with extra HTTP `headers` (name, value).
    pub async fn send_with_headers(&self, method: &str, params: Value, headers: &[(&str, &str)]) -> (u16, Value) {
        let mut b = self.request(1, method, params);
        for (name, value) in headers {
            b = b.header(*name, *value);
        }
        let resp = b.send().await.unwrap_or_else(|e| panic!("{method}: {e}"));
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or_else(|e| panic!("{method}: HTTP {status}, not JSON: {e}")))
    }

    /// A request expected to be refused: (HTTP status, its `Retry-After`
    /// header, the JSON-RPC error).
    pub async fn refused(&self, method: &str, params: Value) -> (u16, Option<String>, Value) {
        let resp = self.request(1, method, params).send().await.unwrap_or_else(|e| panic!("{method}: {e}"));
        let status = resp.status().as_u16();
        let retry_after = resp.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(str::to_string);
        let v: Value = resp.json().await.unwrap_or_else(|e| panic!("{method}: HTTP {status}, not JSON: {e}"));
        (status, retry_after, v["error"].clone())
    }

    /// Like [`send`](Self::send), but a transport failure, a body that is not
    /// JSON (a proxy's 502 page) or an SSE stream without a response is an
    /// `Err` describing it instead of a panic: for load under faults.
    pub async fn try_send(&self, method: &str, params: Value) -> Result<(u16, Value), String> {
        let resp = self.request(1, method, params).send().await.map_err(|e| format!("request not answered: {e}"))?;
        let status = resp.status().as_u16();
        let sse = resp.headers().get("content-type").is_some_and(|c| c.to_str().unwrap_or("").contains("event-stream"));
        if !sse {
            let body = resp.bytes().await.map_err(|e| format!("HTTP {status}, body cut: {e}"))?;
            return serde_json::from_slice(&body).map(|v| (status, v)).map_err(|_| format!("HTTP {status}, not JSON"));
        }
        let mut events = resp.bytes_stream().eventsource();
        while let Some(ev) = events.next().await {
            let ev = ev.map_err(|e| format!("HTTP {status}, SSE stream cut: {e}"))?;
            let v: Value = serde_json::from_str(&ev.data).map_err(|_| format!("HTTP {status}, SSE event not JSON"))?;
            if v.get("id").is_some() {
                return Ok((status, v));
            }
        }
        Err(format!("HTTP {status}, SSE stream ended without a response"))
    }

    /// The `result` of a successful call (panics on an error).
    pub async fn ok(&self, method: &str, params: Value) -> Value {
        let (status, v) = self.send(method, params).await;
        assert_eq!(status, 200, "{method}: {v}");
        v["result"].clone()
    }

    /// The `error` of a failed call (panics on success).
    pub async fn err(&self, method: &str, params: Value) -> (u16, Value) {
        let (status, v) = self.send(method, params).await;
        assert!(v.get("error").is_some(), "{method} should fail: {v}");
        (status, v["error"].clone())
    }

    /// `tools/call`; its result (panics on an error).
    pub async fn call_tool(&self, name: &str, arguments: Value) -> Value {
        self.ok("tools/call", json!({ "name": name, "arguments": arguments })).await
    }

    /// `tasks/get`; its result (panics on an error).
    pub async fn get_task(&self, id: &str) -> Value {
        self.ok("tasks/get", json!({ "taskId": id })).await
    }

    /// Poll until `pred` holds for the task (10 s at most).
    pub async fn wait_task(&self, id: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        self.wait_task_for(id, what, Duration::from_secs(10), pred).await
    }

    /// Poll every 50 ms until `pred` holds for the task, `timeout` at most.
    pub async fn wait_task_for(&self, id: &str, what: &str, timeout: Duration, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let t = self.get_task(id).await;
            if pred(&t) {
                return t;
            }
            assert!(tokio::time::Instant::now() < deadline, "task {id} never became {what} within {timeout:?}: {t}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Poll until the task has `status` (10 s at most).
    pub async fn wait_status(&self, id: &str, status: &str) -> Value {
        self.wait_task(id, status, |t| t["status"] == status).await
    }

    /// Open `subscriptions/listen`; returns (HTTP status, stream of JSON messages).
    pub async fn listen(&self, notifications: Value) -> (u16, impl Stream<Item = Value> + Unpin + use<>) {
        let resp =
            self.request(77, "subscriptions/listen", json!({ "notifications": notifications })).send().await.unwrap();
        let status = resp.status().as_u16();
        let stream = resp
            .bytes_stream()
            .eventsource()
            .filter_map(|ev| async move { ev.ok().and_then(|e| serde_json::from_str::<Value>(&e.data).ok()) })
            .boxed();
        (status, stream)
    }
}

/// Next message of a stream within `secs` seconds.
pub async fn next_within(stream: &mut (impl Stream<Item = Value> + Unpin), secs: u64) -> Value {
    tokio::time::timeout(Duration::from_secs(secs), stream.next())
        .await
        .expect("a message in time")
        .expect("the stream is still open")
}
