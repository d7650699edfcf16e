//! [`Client`]: one MCP endpoint over HTTP. Sends each request with `_meta`
//! and the MCP headers, reads the answer (a JSON body, or an SSE stream read
//! to its response), and turns failures into [`Error`]s.
//!
//! Here: [`Client`] itself and its typed methods (`tools/list`,
//! `tools/call`, `tasks/*`, `subscriptions/listen`). Sending one request and
//! reading its answer is in `send`; turning an HTTP response into a JSON-RPC
//! result or an [`Error`] (and reading `WWW-Authenticate` challenges) in
//! `response`; streaming an artifact to a file in `download`.

use std::{
    sync::{Arc, atomic::AtomicU64},
    time::Duration,
};

use serde_json::{Map, Value, json};

use crate::{
    error::Error,
    sse::{self, Messages},
    task::CallOutcome,
    task::Task,
    wire,
};

mod download;
pub(crate) mod response;
mod send;

pub use download::DOWNLOAD_META;

pub use response::parse_bearer_challenge;
use response::{into_result, read_json};

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
    pub fn admin(&self, base: Option<&str>) -> Result<crate::admin::AdminClient, Error> {
        let base = match base {
            Some(b) => b.trim_end_matches('/').to_string(),
            None => {
                let url = reqwest::Url::parse(&self.url)
                    .map_err(|e| Error::Unreachable { url: self.url.clone(), reason: format!("not a URL: {e}") })?;
                format!("{}/admin/v1", url.origin().ascii_serialization())
            }
        };
        Ok(crate::admin::AdminClient { http: self.http.clone(), base, token: self.token.clone() })
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
