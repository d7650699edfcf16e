//! One legacy call: dispatched like a modern one, with each MRTR input
//! request sent to the client on the call's stream and the answers (posted
//! to any pod) delivered on the session's own bus topic
//! ([`session_topic`]), which only that session's waiting calls subscribe
//! to: a client's payload is never fanned out to every subscriber.
//! `notifications/cancelled` reaches the call the same way.

use std::{collections::BTreeMap, collections::HashMap};

use axum::{
    http::StatusCode,
    response::{IntoResponse, Response},
};
use futures::{StreamExt, future::ready};
use presa_protocol::{Method, ResultType, TASKS_EXTENSION, codes, jsonrpc::ErrorObject};
use presa_server::{Admitted, Reply, Server};
use presa_store::util::now_ms;
use presa_telemetry::metrics;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::{app::App, observe::NOTIFICATION};

use super::session::{Session, session_key, session_refused};

/// Prefix of the topic messages that carry a client's answer to a server request.
const ANSWER_EVENT: &str = "legacy/answer ";
/// Prefix of the topic messages that cancel a legacy call (`notifications/cancelled`).
const CANCEL_EVENT: &str = "legacy/cancel ";

/// The bus topic of one session's answers and cancellations.
fn session_topic(session: &str) -> String {
    format!("legacy/{session}")
}
/// Most MRTR rounds one legacy call may go through.
const MAX_ROUNDS: usize = 16;

/// A client's answer to a request the server sent on a call's stream:
/// published for the waiting call, wherever it runs. 202.
pub(super) async fn answer(app: &App, session: &Session, message: &Value) -> Response {
    let Some(id) = message.get("id").filter(|i| i.is_string() || i.is_i64()) else {
        return session_refused(StatusCode::BAD_REQUEST, "Bad Request: a response needs a string or integer id");
    };
    let mut event = json!({ "id": id });
    if let Some(r) = message.get("result") {
        event["result"] = r.clone();
    }
    if let Some(e) = message.get("error") {
        event["error"] = e.clone();
    }
    let topic = session_topic(&session.key);
    match app.server.core().bus().publish_to(&topic, &format!("{ANSWER_EVENT}{event}")).await {
        Ok(()) => {
            metrics::request(NOTIFICATION, "ok", std::time::Duration::ZERO);
            StatusCode::ACCEPTED.into_response()
        }
        Err(e) => {
            tracing::warn!(error = %e, "a legacy answer could not be published");
            session_refused(StatusCode::SERVICE_UNAVAILABLE, "Answer not delivered, retry")
        }
    }
}

/// One legacy call: dispatched, and re-dispatched with the client's answers
/// while the dispatcher needs input.
pub(super) struct Call<'a> {
    /// The dispatcher.
    pub(super) server: &'a Server,
    /// The session key: its topic carries the answers and cancellations.
    pub(super) session: &'a str,
    /// The call's response stream (`None`: the client takes no SSE, so it cannot be asked).
    pub(super) stream: Option<&'a mpsc::Sender<Value>>,
    /// How long to wait for the client's answers.
    pub(super) limit: std::time::Duration,
}

impl Call<'_> {
    /// Run the call; a `notifications/cancelled` for it, posted to any pod, stops its handler.
    pub(super) async fn run(&self, admitted: Admitted) -> Reply {
        let watcher = match admitted.method {
            Method::ToolsCall | Method::PromptsGet => match self.events().await {
                Ok(events) => {
                    Some(tokio::spawn(cancel_on_request(events, admitted.id.to_value(), admitted.cancel.clone())))
                }
                Err(e) => {
                    tracing::debug!(error = %e, "no cancellation watch for this legacy call");
                    None
                }
            },
            _ => None,
        };
        let reply = self.rounds(admitted).await;
        if let Some(w) = watcher {
            w.abort();
        }
        reply
    }

    /// What the session's topic carries from now on.
    async fn events(&self) -> Result<presa_store::EventStream, presa_store::StoreError> {
        self.server.core().bus().subscribe_to(&session_topic(self.session)).await
    }

    async fn rounds(&self, mut admitted: Admitted) -> Reply {
        for _ in 0..MAX_ROUNDS {
            let mut result = match self.server.handle(&admitted).await {
                Reply::Result(v) => v,
                // Stripped below as a value: the legacy era's replies are edited.
                Reply::Written(w) => match w.to_value() {
                    Ok(v) => v,
                    Err(_) => return Reply::Error(ErrorObject::new(codes::INTERNAL_ERROR, "Internal error")),
                },
                Reply::Error(e) => return Reply::Error(legacy_error(&admitted, e)),
                other @ (Reply::Stream(_) | Reply::InsufficientScope { .. }) => return other,
            };
            if ResultType::of(&result) != Some(ResultType::InputRequired) {
                strip(&mut result);
                return Reply::Result(result);
            }
            let requests: BTreeMap<String, Value> = match result.get("inputRequests") {
                Some(Value::Object(r)) => r.clone().into_iter().collect(),
                _ => BTreeMap::new(),
            };
            let answers = match self.ask(&requests, &admitted.cancel).await {
                Ok(a) => a,
                Err(e) => return Reply::Error(e),
            };
            admitted.params.insert("inputResponses".into(), Value::Object(answers));
            match result.get_mut("requestState").map(Value::take) {
                Some(state) => admitted.params.insert("requestState".into(), state),
                None => admitted.params.remove("requestState"),
            };
        }
        Reply::Error(ErrorObject::new(codes::INTERNAL_ERROR, "The call asked the client too many times"))
    }

    /// Send each input request to the client on the call's stream and wait
    /// for every answer (from any pod, through the bus).
    async fn ask(
        &self,
        requests: &BTreeMap<String, Value>,
        cancel: &CancellationToken,
    ) -> Result<Map<String, Value>, ErrorObject> {
        if requests.is_empty() {
            return Ok(Map::new());
        }
        let Some(stream) = self.stream else {
            return Err(ErrorObject::new(
                codes::INVALID_REQUEST,
                "This call asks the client (elicitation or sampling): send it with Accept: text/event-stream",
            ));
        };
        // Subscribed before asking, so an answer that comes at once is not missed.
        let mut events = self.events().await.map_err(|e| {
            let mut err = ErrorObject::new(codes::INTERNAL_ERROR, "Cannot wait for the client's answer, retry");
            if e.is_retryable() {
                err.data = Some(json!({ "retryable": true }));
            }
            err
        })?;
        let round = session_key(&format!("{}{}", self.session, now_ms()));
        let mut pending: HashMap<String, String> = HashMap::new();
        for (key, request) in requests {
            let id = format!("presa-{}-{key}", &round[..12]);
            let message = json!({
                "jsonrpc": "2.0",
                "id": id,
                "method": request["method"],
                "params": request.get("params").cloned().unwrap_or_else(|| json!({})),
            });
            if stream.send(message).await.is_err() {
                return Err(ErrorObject::new(codes::INTERNAL_ERROR, "The client went away"));
            }
            pending.insert(id, key.clone());
        }
        let mut answers = Map::new();
        let deadline = tokio::time::sleep(self.limit);
        tokio::pin!(deadline);
        // A lagging subscription ends the wait (`None` below).
        let mut relevant = events.by_ref().take_while(|event| ready(event.is_ok())).filter_map(|event| {
            let parsed = event
                .ok()
                .and_then(|e| e.strip_prefix(ANSWER_EVENT).and_then(|rest| serde_json::from_str::<Value>(rest).ok()));
            ready(parsed)
        });
        while !pending.is_empty() {
            let event = tokio::select! {
                e = relevant.next() => e,
                _ = &mut deadline => {
                    return Err(ErrorObject::new(codes::INTERNAL_ERROR, "The client did not answer in time"));
                }
                _ = cancel.cancelled() => return Err(ErrorObject::new(codes::INTERNAL_ERROR, "The client went away")),
            };
            let Some(event) = event else {
                return Err(ErrorObject::new(codes::INTERNAL_ERROR, "The answer channel closed, retry"));
            };
            let Some(key) = event["id"].as_str().and_then(|id| pending.remove(id)) else {
                continue;
            };
            if let Some(error) = event.get("error") {
                let message = error["message"].as_str().unwrap_or("error");
                return Err(ErrorObject::with_data(
                    codes::INVALID_PARAMS,
                    format!("The client refused the request {key}: {message}"),
                    error.clone(),
                ));
            }
            match event.get("result") {
                Some(r @ Value::Object(_)) => {
                    answers.insert(key, r.clone());
                }
                _ => {
                    return Err(ErrorObject::new(
                        codes::INVALID_PARAMS,
                        format!("The client's answer to {key} is not an object"),
                    ));
                }
            }
        }
        Ok(answers)
    }
}

/// Tell the session's calls that the client cancelled request `id`: the
/// call may run on another pod.
pub(super) async fn publish_cancel(app: &App, session: &Session, id: &Value) {
    let event = json!({ "id": id });
    let topic = session_topic(&session.key);
    if let Err(e) = app.server.core().bus().publish_to(&topic, &format!("{CANCEL_EVENT}{event}")).await {
        tracing::warn!(error = %e, "a legacy cancellation could not be published");
    }
}

/// Cancel `token` when the session's topic says the client cancelled request `id`.
async fn cancel_on_request(mut events: presa_store::EventStream, id: Value, token: CancellationToken) {
    // A lagging subscription ends the watch: the call runs to its end.
    while let Some(Ok(event)) = events.next().await {
        let Some(cancel) = event.strip_prefix(CANCEL_EVENT).and_then(|e| serde_json::from_str::<Value>(e).ok()) else {
            continue;
        };
        if cancel["id"] == id {
            token.cancel();
            return;
        }
    }
}

/// A dispatcher error as a legacy client should read it: a task-required
/// tool names the revision that can run it.
fn legacy_error(admitted: &Admitted, e: ErrorObject) -> ErrorObject {
    let needs_tasks = e.code == codes::MISSING_REQUIRED_CLIENT_CAPABILITY
        && e.data.as_ref().is_some_and(|d| d["requiredCapabilities"]["extensions"].get(TASKS_EXTENSION).is_some());
    if !needs_tasks {
        return e;
    }
    let tool = admitted.params.get("name").and_then(Value::as_str).unwrap_or("this tool");
    ErrorObject {
        message: format!(
            "Tool {tool} runs only as a task: call it with MCP {} and the {TASKS_EXTENSION} extension \
             (this 2025-11-25 session cannot create tasks)",
            presa_protocol::PROTOCOL_VERSION
        ),
        ..e
    }
}

/// A legacy client's capabilities without the Tasks extension, which
/// attaches to 2026-07-28 only (a legacy session has no `tasks/get`): its
/// calls run in the request, or are refused when the tool needs a task.
pub(super) fn without_tasks(capabilities: &Map<String, Value>) -> Map<String, Value> {
    let mut c = capabilities.clone();
    if let Some(Value::Object(extensions)) = c.get_mut("extensions") {
        extensions.remove(TASKS_EXTENSION);
    }
    c
}

/// Drop the 2026-07-28 result fields a 2025-11-25 client has no use for.
fn strip(result: &mut Value) {
    if let Value::Object(m) = result {
        for key in ["resultType", "ttlMs", "cacheScope"] {
            m.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legacy_capabilities_never_declare_tasks() {
        let caps = json!({ "elicitation": {}, "extensions": { TASKS_EXTENSION: {}, "x/other": {} } });
        let kept = without_tasks(caps.as_object().unwrap());
        assert_eq!(Value::Object(kept), json!({ "elicitation": {}, "extensions": { "x/other": {} } }));
    }

    #[test]
    fn results_lose_modern_fields_only() {
        let mut r = json!({"resultType": "complete", "ttlMs": 5, "cacheScope": "public", "tools": [], "_meta": {}});
        strip(&mut r);
        assert_eq!(r, json!({"tools": [], "_meta": {}}));
    }
}
