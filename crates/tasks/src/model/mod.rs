//! The task record: what every store keeps for one task.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::id::TaskId;

/// A task's status on the wire: the one in `presa-protocol` (`crates/protocol/src/task.rs`).
pub use presa_protocol::Status;

/// Who owns a task. Every task method and subscription is authorised against
/// it; another scope's task is indistinguishable from an unknown one.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Scope {
    /// The tenant (organisation, workspace…).
    pub tenant: String,
    /// The principal inside the tenant.
    pub subject: String,
    /// The virtual server (presa-gateway's `/mcp/<name>`) the task was
    /// created on; `None` for the root endpoint `/mcp`. Part of the owner: a
    /// task made on one endpoint is unknown on every other. Left out of the
    /// stored record when `None`, so records made before it read the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
}

impl Scope {
    /// The one scope used while no authentication is configured.
    pub fn anonymous() -> Self {
        Scope::new("local", "anonymous")
    }

    /// The scope of `subject` in `tenant`, on the root endpoint.
    pub fn new(tenant: impl Into<String>, subject: impl Into<String>) -> Self {
        Scope { tenant: tenant.into(), subject: subject.into(), endpoint: None }
    }

    /// The same principal on `endpoint` (`None`: the root endpoint).
    pub fn on_endpoint(mut self, endpoint: Option<String>) -> Self {
        self.endpoint = endpoint;
        self
    }

    /// The principal alone, whatever endpoint: what quotas and fair shares
    /// count by, so that one principal's limits span every endpoint.
    pub fn principal(&self) -> Scope {
        Scope::new(self.tenant.clone(), self.subject.clone())
    }

    /// Whether this is [`Scope::anonymous`].
    pub fn is_anonymous(&self) -> bool {
        self.tenant == "local" && self.subject == "anonymous"
    }

    /// A stable single-string form, for keys and HMAC payloads: the JSON
    /// array `[tenant, subject]` (`[tenant, subject, endpoint]` on a virtual
    /// server's endpoint), so two different scopes never share a key
    /// (`"a/b"`+`"c"` and `"a"`+`"b/c"` differ).
    pub fn key(&self) -> String {
        match &self.endpoint {
            None => serde_json::to_string(&[&self.tenant, &self.subject]),
            Some(e) => serde_json::to_string(&[&self.tenant, &self.subject, e]),
        }
        .unwrap_or_default()
    }
}

/// Who called: the scope that owns the caller's tasks and the OAuth scopes
/// the caller was granted. Tool handlers see it (`ctx.caller()`), also on a
/// worker: it travels in the task's [`Work`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Caller {
    /// Tenant and subject.
    pub scope: Scope,
    /// The granted OAuth scopes; `None` when no authentication is configured
    /// (then no scope check applies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scopes: Option<Vec<String>>,
}

impl Caller {
    /// The caller while no authentication is configured: the anonymous scope, unrestricted.
    pub fn anonymous() -> Self {
        Caller { scope: Scope::anonymous(), scopes: None }
    }

    /// An authenticated caller with `scopes`.
    pub fn new(tenant: impl Into<String>, subject: impl Into<String>, scopes: Vec<String>) -> Self {
        Caller { scope: Scope::new(tenant, subject), scopes: Some(scopes) }
    }

    /// The tenant.
    pub fn tenant(&self) -> &str {
        &self.scope.tenant
    }

    /// The subject.
    pub fn subject(&self) -> &str {
        &self.scope.subject
    }

    /// Whether the caller holds `scope` (always, without authentication).
    pub fn has_scope(&self, scope: &str) -> bool {
        self.scopes.as_ref().is_none_or(|granted| granted.iter().any(|g| g == scope))
    }

    /// The scopes of `needed` the caller lacks (none, without authentication).
    pub fn missing<'a>(&self, needed: &'a [String]) -> Vec<&'a str> {
        needed.iter().filter(|s| !self.has_scope(s)).map(String::as_str).collect()
    }
}

/// What a task runs: enough to run it again on any worker after a crash.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Work {
    /// The tool name.
    pub tool: String,
    /// The validated tool arguments (none once the task has finished).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub arguments: Value,
    /// The creating request's client capabilities (`_meta` clientCapabilities).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub client_capabilities: Map<String, Value>,
    /// The `inputResponses` the creating `tools/call` carried: MRTR answers
    /// gathered before the task existed, used before any `tasks/update` answer.
    /// (Records written before this field's rename call it `request_inputs`.)
    #[serde(default, alias = "request_inputs", skip_serializing_if = "Option::is_none")]
    pub input_responses: Option<Map<String, Value>>,
    /// W3C trace context (`traceparent`, `tracestate`, `baggage`) of the creating request.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub trace: BTreeMap<String, String>,
    /// Who created the task (records written before this field have none:
    /// their handler sees the task's scope with no granted scopes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller: Option<Caller>,
    /// The task whose dead letter this task replays (an operator ran a
    /// poison task again); kept when the task finishes, never on the wire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_of: Option<TaskId>,
    /// The worker whose claim holds the work now (set by each claim, gone
    /// when the task finishes), for an operator; never on the wire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
}

/// A change of a task's status, as its history keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusChange {
    /// The status it changed to.
    pub status: Status,
    /// When, Unix ms.
    pub at_ms: u64,
}

/// One task, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    /// The id.
    pub id: TaskId,
    /// The owner.
    pub scope: Scope,
    /// The status.
    pub status: Status,
    /// Optional human-readable status message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    /// Creation time, Unix milliseconds.
    pub created_at_ms: u64,
    /// Last change, Unix milliseconds.
    pub updated_at_ms: u64,
    /// Lifetime from creation; `None` never expires.
    pub ttl_ms: Option<u64>,
    /// Suggested polling interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll_interval_ms: Option<u64>,
    /// Bumped by one on every change: the compare-and-set token.
    pub revision: u64,
    /// Fencing token: bumped on every (re)claim of the work. A worker's
    /// writes carry the attempt it claimed; stale attempts are refused.
    pub attempt: u64,
    /// What the task runs.
    pub work: Work,
    /// Outstanding input requests, by key.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub input_requests: BTreeMap<String, Value>,
    /// Every input request ever issued, by key (keys are unique per lifetime).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub issued_inputs: BTreeMap<String, Value>,
    /// Accepted input responses, by key: replayed when the work re-runs.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub input_responses: BTreeMap<String, Value>,
    /// The handler's last checkpoint (`ToolContext::save_checkpoint`): handed
    /// back to the handler when the work re-runs after a lost worker, so it
    /// resumes instead of starting over. Never sent to clients.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<Value>,
    /// The result, when `completed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// The JSON-RPC error, when `failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
    /// The status changes after creation (the task was created `working`
    /// at `created_at_ms`) to a status that is not terminal, oldest first:
    /// the end is `status` at `updated_at_ms` (a finished task never changes
    /// again), so a task that just runs and ends stores none. For an
    /// operator ([`Task::status_history`]); never on the wire.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<StatusChange>,
    /// The tries that failed in a way worth trying again, and when the next
    /// one is due while the work waits (`Event::Defer`). For the worker and
    /// an operator; never on the wire.
    #[serde(default, skip_serializing_if = "Retries::is_empty")]
    pub retries: Retries,
}

/// How many failed tries a task record keeps in [`Retries::log`] (the last ones).
pub const MAX_TRIES_KEPT: usize = 10;

/// A task's failed tries so far (see [`Task::retries`]).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Retries {
    /// How many tries failed and were put off; the running try is `failed + 1`.
    #[serde(default)]
    pub failed: u32,
    /// The fencing attempt of the claim whose run last put the work off: the
    /// claims of the current try are counted from it ([`Task::deliveries`]).
    #[serde(default)]
    pub fence: u64,
    /// When the next try is due (Unix ms) while the work waits; `None` once
    /// a worker has claimed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due_at_ms: Option<u64>,
    /// The last failed tries, oldest first (at most [`MAX_TRIES_KEPT`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub log: Vec<FailedTry>,
    /// Whether the current try was put off to a turn reserved for it under
    /// its tool's rate (`Event::Defer` with `failed: false`): its run counts
    /// against the rate already and does not take a turn again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub turn_reserved: bool,
}

impl Retries {
    /// Whether no try has failed (what a record leaves out).
    pub fn is_empty(&self) -> bool {
        *self == Retries::default()
    }
}

/// One try that failed and was put off, as [`Retries::log`] keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailedTry {
    /// Which try (1 for the first run).
    pub number: u32,
    /// When it failed, Unix ms.
    pub at_ms: u64,
    /// Why, as the handler or the gateway said it.
    pub reason: String,
    /// How long the work was put off after it, ms.
    pub delay_ms: u64,
}

/// What a caller supplies to create a task; the store adds id, times and counters.
#[derive(Debug, Clone, PartialEq)]
pub struct NewTask {
    /// The owner.
    pub scope: Scope,
    /// What to run.
    pub work: Work,
    /// Lifetime from creation; `None` never expires.
    pub ttl_ms: Option<u64>,
    /// Suggested polling interval.
    pub poll_interval_ms: Option<u64>,
    /// Initial status message.
    pub status_message: Option<String>,
}

impl Task {
    /// A fresh `working` task at revision 1, attempt 0.
    pub fn new(id: TaskId, new: NewTask, now_ms: u64) -> Self {
        Task {
            id,
            scope: new.scope,
            status: Status::Working,
            status_message: new.status_message,
            created_at_ms: now_ms,
            updated_at_ms: now_ms,
            ttl_ms: new.ttl_ms,
            poll_interval_ms: new.poll_interval_ms,
            revision: 1,
            attempt: 0,
            work: new.work,
            input_requests: BTreeMap::new(),
            issued_inputs: BTreeMap::new(),
            input_responses: BTreeMap::new(),
            checkpoint: None,
            result: None,
            error: None,
            history: Vec::new(),
            retries: Retries::default(),
        }
    }

    /// How many times the current try's work has been claimed, this claim
    /// included: 1 for a try's first run, more when a worker took it over
    /// after another was lost. Claims of earlier, failed tries do not count.
    pub fn deliveries(&self) -> u64 {
        self.attempt.saturating_sub(self.retries.fence)
    }

    /// Which try this is: 1 until a try has failed and been put off.
    pub fn try_number(&self) -> u32 {
        self.retries.failed.saturating_add(1)
    }

    /// Every status change after creation, oldest first: the stored
    /// [`Task::history`], and the end when the task has ended (once, even in
    /// a record that stored its end).
    pub fn status_history(&self) -> Vec<StatusChange> {
        let mut changes = self.history.clone();
        let stored_end = changes.last().is_some_and(|c| c.status == self.status);
        if self.status.is_terminal() && !stored_end {
            changes.push(StatusChange { status: self.status, at_ms: self.updated_at_ms });
        }
        changes
    }

    /// When the task stops existing (Unix ms), if ever.
    pub fn expires_at_ms(&self) -> Option<u64> {
        expires_at_ms(self.created_at_ms, self.ttl_ms)
    }

    /// Whether the task's lifetime has passed at `now_ms`.
    pub fn is_expired(&self, now_ms: u64) -> bool {
        self.expires_at_ms().is_some_and(|e| now_ms >= e)
    }
}

/// When a task created at `created_at_ms` with lifetime `ttl_ms` stops existing, if ever.
pub(crate) fn expires_at_ms(created_at_ms: u64, ttl_ms: Option<u64>) -> Option<u64> {
    ttl_ms.map(|t| created_at_ms.saturating_add(t))
}

/// The length of `value` serialised as JSON, without building the JSON: what
/// a task record, a result or a payload counts for against a byte limit
/// (0 for a value that does not serialise).
pub fn json_len(value: &impl Serialize) -> usize {
    /// Counts the bytes written to it.
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    match serde_json::to_writer(&mut count, value) {
        Ok(()) => count.0,
        Err(_) => 0,
    }
}

#[cfg(test)]
mod tests;
