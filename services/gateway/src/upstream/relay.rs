//! What the upstream sends while a call runs, handed to that call: the
//! connection's rmcp client handler ([`Relay`]) routes progress, log lines
//! and questions to the running call's [`Events`] channel, and answers what
//! arrives outside any call with a fixed answer (see `upstream/mod.rs`).

// Sampling, roots and logging are deprecated in 2026-07-28 (SEP-2577), and
// the 2025-11-25 servers the gateway fronts still use them.
#![allow(deprecated)]

use std::sync::{Arc, Mutex};

use presa_protocol::meta::LogLevel;
use rmcp::{
    ClientHandler, RoleClient,
    model::{
        ClientConfig, CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams, ElicitResult, ErrorCode,
        Implementation, ListRootsResult, LoggingMessageNotificationParam, ProgressNotificationParam,
    },
    service::{NotificationContext, RequestContext},
};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::convert::{client_answer, client_capabilities, log_level, to_json};

/// What the upstream sent during a call, for the call.
#[derive(Debug)]
pub enum Event {
    /// `notifications/progress` for the call's progress token.
    Progress {
        /// Progress so far.
        progress: f64,
        /// The total, if known.
        total: Option<f64>,
        /// A message.
        message: Option<String>,
    },
    /// `notifications/message`.
    Log {
        /// The level.
        level: LogLevel,
        /// The data.
        data: Value,
    },
    /// A request to the client; the call answers on `reply`.
    Question {
        /// `elicitation/create`, `sampling/createMessage` or `roots/list`.
        method: &'static str,
        /// Its params.
        params: Value,
        /// The client's result, or an error for the upstream.
        reply: oneshot::Sender<Result<Value, String>>,
    },
}

/// The receiving end of a call's [`Event`]s.
pub type Events = mpsc::Receiver<Event>;

/// Events one call's channel holds before progress and log lines are dropped.
pub const EVENTS_BOUND: usize = 256;

/// The call a connection runs now: where its events go (`None`: no call).
#[derive(Debug, Default)]
pub(super) struct Current {
    pub(super) events: Option<mpsc::Sender<Event>>,
}

/// The rmcp client handler of one connection: routes what the upstream sends
/// to the call running on it, if any.
#[derive(Debug, Clone)]
pub struct Relay {
    pub(super) current: Arc<Mutex<Current>>,
    /// Notified when the upstream says a list (tools, prompts, resources) changed.
    pub(super) lists_changed: Arc<tokio::sync::Notify>,
}

impl Relay {
    fn sender(&self) -> Option<mpsc::Sender<Event>> {
        self.current.lock().ok()?.events.clone()
    }

    /// Hand progress or a log line to the current call, if any; dropped
    /// when its channel is full.
    fn tell(&self, event: Event) {
        if let Some(events) = self.sender() {
            let _ = events.try_send(event);
        }
    }

    async fn ask(&self, method: &'static str, params: Value) -> Option<Result<Value, rmcp::ErrorData>> {
        let events = self.sender()?;
        let (reply, answer) = oneshot::channel();
        // A question is never dropped: it waits for room.
        events.send(Event::Question { method, params, reply }).await.ok()?;
        Some(match answer.await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(message)) => Err(rmcp::ErrorData::new(ErrorCode::INTERNAL_ERROR, message, None)),
            Err(_) => Err(rmcp::ErrorData::new(ErrorCode::INTERNAL_ERROR, "the call ended before an answer", None)),
        })
    }
}

impl ClientHandler for Relay {
    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, rmcp::ErrorData> {
        match self.ask("elicitation/create", to_json(&request)).await {
            Some(answer) => client_answer(answer?, "elicitation"),
            None => client_answer(serde_json::json!({ "action": "decline" }), "elicitation"),
        }
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, rmcp::ErrorData> {
        match self.ask("sampling/createMessage", to_json(&params)).await {
            Some(answer) => client_answer(answer?, "sampling"),
            None => Err(rmcp::ErrorData::new(
                ErrorCode::INVALID_REQUEST,
                "sampling is only answered during a tool call",
                None,
            )),
        }
    }

    async fn list_roots(&self, _context: RequestContext<RoleClient>) -> Result<ListRootsResult, rmcp::ErrorData> {
        match self.ask("roots/list", serde_json::json!({})).await {
            Some(answer) => client_answer(answer?, "roots"),
            // Roots are a caller's; outside a call there is none. An error
            // (not an empty list) keeps an upstream that caches roots from
            // caching "none" and makes it ask again during the call that needs them.
            None => Err(rmcp::ErrorData::new(
                ErrorCode::INVALID_REQUEST,
                "roots are only answered during a tool call (they are the caller's)",
                None,
            )),
        }
    }

    async fn on_progress(&self, params: ProgressNotificationParam, _context: NotificationContext<RoleClient>) {
        // One request at a time per connection: any progress is the current call's.
        self.tell(Event::Progress { progress: params.progress, total: params.total, message: params.message });
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.tell(Event::Log { level: log_level(params.level), data: params.data });
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.lists_changed.notify_one();
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.lists_changed.notify_one();
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.lists_changed.notify_one();
    }

    fn get_info(&self) -> ClientConfig {
        let mut info = ClientConfig::default();
        info.capabilities = client_capabilities();
        info.client_info = Implementation::new("presa-gateway", env!("CARGO_PKG_VERSION"));
        info
    }
}
