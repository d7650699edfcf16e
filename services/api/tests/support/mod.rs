//! Test support: an MCP client over reqwest for presa tests, and an
//! in-process embedded server on an ephemeral loopback port.

#![allow(dead_code, unreachable_pub)]

use std::{sync::Arc, time::Duration};

use eventsource_stream::Eventsource;
use futures::{Stream, StreamExt};
use presa_http::{Authenticator, HttpConfig};
use presa_server::{Server, ServerConfig, StateCodec, Worker, WorkerConfig};
use presa_store::{EventBus, Scope, TaskStore, memory::MemoryStore};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

pub const TASKS: &str = "io.modelcontextprotocol/tasks";

/// Declared capabilities: elicitation plus the Tasks extension.
pub fn tasks_caps() -> Value {
    json!({ "elicitation": {}, "extensions": { TASKS: {} } })
}

/// A minimal MCP client for the stateless wire.
#[derive(Clone)]
pub struct Client {
    pub url: String,
    pub http: reqwest::Client,
    pub caps: Value,
    /// Sent as `x-test-scope` (read by [`HeaderScopes`]).
    pub scope: Option<String>,
}

impl Client {
    pub fn new(url: impl Into<String>, caps: Value) -> Self {
        Client { url: url.into(), http: reqwest::Client::new(), caps, scope: None }
    }

    pub fn with_scope(mut self, scope: &str) -> Self {
        self.scope = Some(scope.into());
        self
    }

    fn request(&self, id: u64, method: &str, mut params: Value) -> reqwest::RequestBuilder {
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": self.caps,
        });
        let name = match method {
            "tools/call" | "prompts/get" => params["name"].as_str().map(str::to_string),
            "resources/read" => params["uri"].as_str().map(str::to_string),
            "tasks/get" | "tasks/update" | "tasks/cancel" => params["taskId"].as_str().map(str::to_string),
            _ => None,
        };
        let mut b = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", method)
            .body(json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }).to_string());
        if let Some(n) = name {
            b = b.header("mcp-name", n);
        }
        if let Some(s) = &self.scope {
            b = b.header("x-test-scope", s);
        }
        b
    }

    /// Send a request; returns (HTTP status, the JSON-RPC response).
    /// SSE replies are read to their final response.
    pub async fn send(&self, method: &str, params: Value) -> (u16, Value) {
        let resp = self.request(1, method, params).send().await.expect("request sent");
        let status = resp.status().as_u16();
        let sse = resp.headers().get("content-type").is_some_and(|c| c.to_str().unwrap_or("").contains("event-stream"));
        if !sse {
            return (status, resp.json().await.expect("JSON body"));
        }
        let mut events = resp.bytes_stream().eventsource();
        while let Some(ev) = events.next().await {
            let v: Value = serde_json::from_str(&ev.expect("SSE event").data).expect("JSON event");
            if v.get("id").is_some() {
                return (status, v);
            }
        }
        panic!("SSE stream ended without a response");
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

    pub async fn call_tool(&self, name: &str, arguments: Value) -> Value {
        self.ok("tools/call", json!({ "name": name, "arguments": arguments })).await
    }

    pub async fn get_task(&self, id: &str) -> Value {
        self.ok("tasks/get", json!({ "taskId": id })).await
    }

    /// Poll until `pred` holds for the task (10 s at most).
    pub async fn wait_task(&self, id: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let t = self.get_task(id).await;
            if pred(&t) {
                return t;
            }
            assert!(tokio::time::Instant::now() < deadline, "task {id} never became {what}: {t}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

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

/// Takes the scope from the `x-test-scope` header (tests only: never trust
/// a header for identity in production).
pub struct HeaderScopes;

impl Authenticator for HeaderScopes {
    fn authenticate(&self, headers: &axum::http::HeaderMap) -> Result<Scope, String> {
        let subject = headers.get("x-test-scope").and_then(|v| v.to_str().ok()).unwrap_or("anonymous");
        Ok(Scope { tenant: "test".into(), subject: subject.into() })
    }
}

/// An embedded server on 127.0.0.1:<ephemeral>.
pub struct Embedded {
    pub url: String,
    pub server: Server,
    pub stop: CancellationToken,
}

impl Drop for Embedded {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

pub async fn embedded(config: ServerConfig) -> Embedded {
    let mem = Arc::new(MemoryStore::new());
    let store: Arc<dyn TaskStore> = mem.clone();
    let bus: Arc<dyn EventBus> = mem;
    let server = Server::new(config, presa_demo::catalog().unwrap(), store, bus, StateCodec::new(b"test-secret"));
    let stop = CancellationToken::new();
    let worker_cfg = WorkerConfig { claim_wait: Duration::from_millis(200), ..WorkerConfig::default() };
    tokio::spawn(Worker::new(server.clone(), worker_cfg).run(stop.clone()));
    let http = HttpConfig { authenticator: Arc::new(HeaderScopes), ..HttpConfig::default() };
    let router = presa_http::router(server.clone(), http);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let shutdown = stop.clone();
    tokio::spawn(presa_http::serve(listener, router, async move { shutdown.cancelled().await }));
    Embedded { url, server, stop }
}
