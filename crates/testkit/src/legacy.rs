//! A minimal 2025-11-25 client (`initialize`, `Mcp-Session-Id`, server
//! requests on a call's SSE stream), for tests of the legacy era.

use eventsource_stream::Eventsource;
use futures::{Stream, StreamExt};
use serde_json::{Value, json};

/// A 2025-11-25 session with one server (any pod of it: the session id is all there is).
#[derive(Debug, Clone)]
pub struct LegacyClient {
    /// The MCP endpoint requests go to (change it to talk to another pod).
    pub url: String,
    /// The HTTP client.
    pub http: reqwest::Client,
    /// The `Mcp-Session-Id` the server issued.
    pub session: String,
    /// Sent as `x-test-scope` (read by [`HeaderScopes`](crate::HeaderScopes)).
    pub scope: Option<String>,
}

/// What a POST answered: status, and the messages (one JSON body, or every SSE event).
#[derive(Debug)]
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// The JSON body, or the SSE events in order.
    pub messages: Vec<Value>,
}

fn post(
    http: &reqwest::Client,
    url: &str,
    session: Option<&str>,
    scope: Option<&str>,
    body: &Value,
) -> reqwest::RequestBuilder {
    let mut b = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25")
        .body(body.to_string());
    if let Some(s) = session {
        b = b.header("mcp-session-id", s);
    }
    if let Some(s) = scope {
        b = b.header("x-test-scope", s);
    }
    b
}

impl LegacyClient {
    /// `initialize` with `capabilities` (as `scope`, when given), then
    /// `notifications/initialized`. Panics unless both are accepted.
    pub async fn connect(url: &str, capabilities: Value, scope: Option<&str>) -> LegacyClient {
        let client = Self::initialize(url, capabilities, scope).await;
        let done = client.raw(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" })).await;
        assert_eq!(done.status, 202, "initialized: {done:?}");
        client
    }

    /// `initialize` alone (no `notifications/initialized`); panics unless it is accepted.
    pub async fn initialize(url: &str, capabilities: Value, scope: Option<&str>) -> LegacyClient {
        let http = reqwest::Client::new();
        let body = json!({ "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": capabilities,
            "clientInfo": { "name": "presa-legacy-test", "version": "1.0.0" } } });
        let resp = post(&http, url, None, scope, &body).send().await.expect("initialize sent");
        assert_eq!(resp.status().as_u16(), 200, "initialize");
        let session = resp.headers().get("mcp-session-id").expect("Mcp-Session-Id").to_str().unwrap().to_string();
        let result: Value = resp.json().await.expect("JSON");
        assert_eq!(result["result"]["protocolVersion"], "2025-11-25", "{result}");
        LegacyClient { url: url.to_string(), http, session, scope: scope.map(str::to_string) }
    }

    /// The same session, talking to `url` (another pod).
    pub fn at(&self, url: &str) -> LegacyClient {
        LegacyClient { url: url.to_string(), ..self.clone() }
    }

    /// The same session id, sent as `scope`.
    pub fn as_scope(&self, scope: &str) -> LegacyClient {
        LegacyClient { scope: Some(scope.to_string()), ..self.clone() }
    }

    /// The same client with another session id (forged, expired…).
    pub fn with_session(&self, session: &str) -> LegacyClient {
        LegacyClient { session: session.to_string(), ..self.clone() }
    }

    /// POST one message in the session; read the whole answer.
    pub async fn raw(&self, body: &Value) -> Answer {
        let resp = self.start(body).await;
        let status = resp.status().as_u16();
        let sse = resp.headers().get("content-type").is_some_and(|c| c.to_str().unwrap_or("").contains("event-stream"));
        if !sse {
            let text = resp.text().await.unwrap_or_default();
            let messages = serde_json::from_str::<Value>(&text).map(|v| vec![v]).unwrap_or_default();
            return Answer { status, messages };
        }
        let messages = events(resp).collect().await;
        Answer { status, messages }
    }

    /// POST one message; the response, unread.
    pub async fn start(&self, body: &Value) -> reqwest::Response {
        post(&self.http, &self.url, Some(&self.session), self.scope.as_deref(), body).send().await.expect("POST sent")
    }

    /// A request `method` with `params` (id 1); its answer.
    pub async fn request(&self, method: &str, params: Value) -> Answer {
        self.raw(&json!({ "jsonrpc": "2.0", "id": 1, "method": method, "params": params })).await
    }

    /// Open the session's standalone `GET` stream; the response, unread
    /// (its messages: [`events`]).
    pub async fn open_stream(&self) -> reqwest::Response {
        let mut b =
            self.http.get(&self.url).header("accept", "text/event-stream").header("mcp-session-id", &self.session);
        if let Some(s) = &self.scope {
            b = b.header("x-test-scope", s);
        }
        b.send().await.expect("GET sent")
    }

    /// DELETE the session; the status.
    pub async fn delete(&self) -> u16 {
        let mut b = self.http.delete(&self.url).header("mcp-session-id", &self.session);
        if let Some(s) = &self.scope {
            b = b.header("x-test-scope", s);
        }
        b.send().await.expect("DELETE sent").status().as_u16()
    }
}

/// The JSON messages of an SSE response, as they arrive.
pub fn events(resp: reqwest::Response) -> impl Stream<Item = Value> + Unpin {
    resp.bytes_stream()
        .eventsource()
        .filter_map(|ev| async move { ev.ok().and_then(|e| serde_json::from_str::<Value>(&e.data).ok()) })
        .boxed()
}
