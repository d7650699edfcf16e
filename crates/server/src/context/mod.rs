//! [`ToolContext`]: what a handler can do while it runs.
//!
//! In a request (sync) it can stream progress and logs on the request's own
//! response stream and read MRTR answers. In a task it parks on input
//! (`input_required` until `tasks/update` answers), updates the status
//! message, and notices cancellation. Both modes share one API so a handler
//! does not care where it runs.

use std::{sync::Arc, time::Duration};

use presa_protocol::{codes, jsonrpc, jsonrpc::ErrorObject, meta::LogLevel};
use presa_store::{EventBus, TaskId, TaskStore, Writer};
use presa_tasks::{Caller, Event, Status};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

mod inputs;
mod lists;

pub use lists::ListChanged;

use crate::{
    artifacts::{ArtifactSink, RunArtifacts},
    output::ToolError,
    slots::Slot,
    store_io::{TaskWriter, UpdateError, Updated, WriteLimits, store_call},
};

/// Prefix of the bus event that says a resource changed (its URI follows):
/// 2025-11-25 sessions subscribed to it get `notifications/resources/updated`.
pub const RESOURCE_UPDATED_EVENT: &str = "resources/updated ";

/// How many notifications an [`Outbox`] holds for a client that reads
/// slower than its handler sends: past it, progress and log notifications
/// are dropped (each is superseded by the next, and none is a question).
pub const OUTBOX_BOUND: usize = 256;

/// Where request-scoped notifications go: the response stream of the request.
#[derive(Debug, Clone)]
pub struct Outbox {
    tx: Option<mpsc::Sender<Value>>,
}

impl Outbox {
    /// An outbox feeding `tx` (a channel of [`OUTBOX_BOUND`] is the transport's).
    pub fn new(tx: mpsc::Sender<Value>) -> Self {
        Outbox { tx: Some(tx) }
    }

    /// An outbox that drops everything (tasks, tests).
    pub fn none() -> Self {
        Outbox { tx: None }
    }

    /// Queue `message`; dropped when the client is gone or this many are
    /// waiting for it already (it is not reading).
    pub(crate) fn send(&self, message: Value) {
        if let Some(tx) = &self.tx
            && let Err(mpsc::error::TrySendError::Full(_)) = tx.try_send(message)
        {
            tracing::debug!("the client reads no faster than its notifications come; one dropped");
        }
    }
}

/// What a handler was invoked with, beyond its arguments: the same fields
/// whether it runs in the request or as a task (then from the task's [`presa_tasks::Work`]).
#[derive(Debug, Clone)]
pub(crate) struct Invocation {
    /// The client capabilities of the creating request.
    pub(crate) client_capabilities: Map<String, Value>,
    /// MRTR `inputResponses` of the call (validated: an object of objects).
    pub(crate) input_responses: Option<Map<String, Value>>,
    /// The tool state carried by a verified `requestState`.
    pub(crate) request_state: Option<Value>,
    /// Who called (on a worker: who created the task).
    pub(crate) caller: Caller,
    /// The checkpoint an earlier run of the task saved.
    pub(crate) checkpoint: Option<Value>,
}

/// What a handler running as a task works with.
#[derive(Debug)]
pub(crate) struct TaskRun {
    /// Where the task lives.
    pub(crate) store: Arc<dyn TaskStore>,
    /// The task.
    pub(crate) id: TaskId,
    /// The claim's writer (fencing attempt).
    pub(crate) writer: Writer,
    /// Which try of the task this run is (1 for the first), and how many
    /// times this try has been claimed (1 unless a worker running it was lost).
    pub(crate) tries: (u32, u64),
    /// The worker slot, given back while parked on input.
    pub(crate) slot: Arc<Slot>,
    /// How long a parked handler goes at most without re-reading the task.
    pub(crate) tick: Duration,
    /// Largest the stored task may grow (status message, input requests).
    pub(crate) max_bytes: usize,
    /// How long a write waits out an unavailable store (the lease): past it
    /// the claim has likely lapsed, so the handler stops and another worker
    /// runs the task again.
    pub(crate) patience: Duration,
    /// Where this run's artifacts go, when an artifact store is configured.
    pub(crate) artifacts: Option<Arc<RunArtifacts>>,
}

#[derive(Debug)]
enum Mode {
    Request { outbox: Outbox, progress_token: Option<Value>, log_level: Option<LogLevel> },
    Task(TaskRun),
}

#[derive(Debug)]
struct Inner {
    call: Invocation,
    mode: Mode,
    cancel: CancellationToken,
    bus: Arc<dyn EventBus>,
    /// Whether the handler said its upstream failed ([`ToolContext::upstream_failed`]).
    upstream_failed: std::sync::atomic::AtomicBool,
}

impl TaskRun {
    /// Apply a handler's `event` to the task (fenced, bounded in bytes).
    async fn update(&self, event: &Event) -> Result<(), ToolError> {
        let store = self.store.as_ref();
        let writer = TaskWriter::new(store, self.writer, WriteLimits::task(self.max_bytes));
        match writer.write_patiently(&self.id, event, self.patience).await {
            Ok(Updated::Applied(_) | Updated::Unchanged(_)) => Ok(()),
            Ok(Updated::Gone | Updated::Fenced) => Err(ToolError::Cancelled),
            // A store that stayed unavailable for a whole lease: not the task's
            // failure. Stop; the work is re-delivered once the lease lapses.
            Err(UpdateError::Store(e)) if e.is_retryable() => {
                tracing::warn!(error = %e, "store unavailable for a whole lease; stopping, the task will run again");
                Err(ToolError::Cancelled)
            }
            Err(e @ UpdateError::TooLarge { .. }) => {
                Err(ToolError::Rpc(ErrorObject::new(codes::INTERNAL_ERROR, format!("Task not updated: {e}"))))
            }
            Err(e) => Err(ToolError::internal(e)),
        }
    }
}

/// The handle a tool handler gets. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ToolContext {
    inner: Arc<Inner>,
}

impl ToolContext {
    /// A context for a call running inside its request.
    pub(crate) fn for_request(
        call: Invocation,
        outbox: Outbox,
        progress_token: Option<Value>,
        log_level: Option<LogLevel>,
        cancel: CancellationToken,
        bus: Arc<dyn EventBus>,
    ) -> Self {
        let mode = Mode::Request { outbox, progress_token, log_level };
        ToolContext { inner: Arc::new(Inner { call, mode, cancel, bus, upstream_failed: Default::default() }) }
    }

    /// A context for a call running as a task.
    pub(crate) fn for_task(call: Invocation, run: TaskRun, cancel: CancellationToken, bus: Arc<dyn EventBus>) -> Self {
        let mode = Mode::Task(run);
        ToolContext { inner: Arc::new(Inner { call, mode, cancel, bus, upstream_failed: Default::default() }) }
    }

    /// Whether the client declared a capability (`sampling`, `elicitation`, `roots`…).
    pub fn has_capability(&self, name: &str) -> bool {
        self.inner.call.client_capabilities.get(name).is_some_and(|v| !v.is_null())
    }

    /// MRTR answers carried by the call (or by the request that created the task).
    pub fn input_responses(&self) -> Option<&Map<String, Value>> {
        self.inner.call.input_responses.as_ref()
    }

    /// The tool state from a verified `requestState`, if the call carried one.
    pub fn request_state(&self) -> Option<&Value> {
        self.inner.call.request_state.as_ref()
    }

    /// Who called: tenant, subject and granted scopes (on a worker, the
    /// task's creator), so a handler can authorize its own downstream action.
    pub fn caller(&self) -> &Caller {
        &self.inner.call.caller
    }

    /// The task id, when running as a task.
    pub fn task_id(&self) -> Option<&TaskId> {
        match &self.inner.mode {
            Mode::Task(run) => Some(&run.id),
            Mode::Request { .. } => None,
        }
    }

    /// Which run of this try this is: 1 for its first claim, more when a
    /// worker took it over after another was lost mid-run; `None` in a sync
    /// call. A handler whose work is not safe to repeat can refuse a re-run
    /// with it. A new try after a failure worth trying again
    /// ([`ToolError::Retry`]) starts again from 1 ([`try_number`](Self::try_number) counts those).
    pub fn attempt(&self) -> Option<u64> {
        match &self.inner.mode {
            Mode::Task(TaskRun { tries: (_, deliveries), .. }) => Some(*deliveries),
            Mode::Request { .. } => None,
        }
    }

    /// Which try of the task this is: 1 until a try failed in a way worth
    /// trying again and was put off; `None` in a sync call.
    pub fn try_number(&self) -> Option<u32> {
        match &self.inner.mode {
            Mode::Task(TaskRun { tries: (number, _), .. }) => Some(*number),
            Mode::Request { .. } => None,
        }
    }

    /// Ask for this task to run again in `delay` (a handler rescheduling
    /// itself: an external job not done yet, a rate limit's reset): return
    /// the error this makes. It counts as a failed try of the tool's
    /// [`RetryPolicy`](crate::RetryPolicy); in a sync call the client gets
    /// a retryable error saying when to try again.
    pub fn retry_after(&self, delay: Duration, reason: impl Into<String>) -> ToolError {
        ToolError::retry_after(delay, reason)
    }

    /// Tell the tool's circuit breaker (`Tool::breaker`) that what this run
    /// calls failed (went away, refused the connection, answered 5xx) when
    /// the handler does not return a transient error for it (a call run in
    /// its request, or one not safe to repeat); a transient error counts already.
    pub fn upstream_failed(&self) {
        self.inner.upstream_failed.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether the handler said [`upstream_failed`](Self::upstream_failed).
    pub(crate) fn has_upstream_failed(&self) -> bool {
        self.inner.upstream_failed.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Fires when the work must stop (task cancelled, claim lost, request gone, shutdown).
    pub fn cancellation(&self) -> CancellationToken {
        self.inner.cancel.clone()
    }

    /// Whether the client cancelled this task (`tasks/cancel`), as opposed
    /// to [`ToolContext::cancellation`] firing because this worker lost its
    /// claim (another will run the task) or is shutting down. `false` in a sync call.
    pub async fn cancelled_by_client(&self) -> bool {
        let Mode::Task(run) = &self.inner.mode else {
            return false;
        };
        matches!(store_call("load", run.store.load(&run.id)).await, Ok(Some(t)) if t.status == Status::Cancelled)
    }

    /// Sleep, unless cancelled first.
    pub async fn sleep(&self, d: Duration) -> Result<(), ToolError> {
        tokio::select! {
            _ = tokio::time::sleep(d) => Ok(()),
            _ = self.inner.cancel.cancelled() => Err(ToolError::Cancelled),
        }
    }

    /// Report progress on the request's stream (only when the client sent a
    /// progress token; tasks have no request stream, so this is a no-op there).
    pub fn progress(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        if let Mode::Request { outbox, progress_token: Some(token), .. } = &self.inner.mode {
            let mut params = json!({ "progressToken": token, "progress": progress });
            if let Some(t) = total {
                params["total"] = json!(t);
            }
            if let Some(m) = message {
                params["message"] = json!(m);
            }
            outbox.send(jsonrpc::notification("notifications/progress", params));
        }
    }

    /// Send a log message on the request's stream, only when the request asked
    /// for logs (`_meta` logLevel) at `level` or below.
    pub fn log(&self, level: LogLevel, logger: &str, data: Value) {
        if let Mode::Request { outbox, log_level: Some(min), .. } = &self.inner.mode
            && level >= *min
        {
            let params = json!({ "level": level.as_str(), "logger": logger, "data": data });
            outbox.send(jsonrpc::notification("notifications/message", params));
        }
    }

    /// Set the task's status message (a no-op for sync calls).
    pub async fn set_status(&self, message: impl Into<String>) -> Result<(), ToolError> {
        let Mode::Task(run) = &self.inner.mode else {
            return Ok(());
        };
        run.update(&Event::SetMessage(message.into())).await
    }

    /// The checkpoint an earlier run of this task saved with
    /// [`ToolContext::save_checkpoint`] before its worker was lost (`None` on
    /// a first run and in a sync call).
    pub fn checkpoint(&self) -> Option<&Value> {
        self.inner.call.checkpoint.as_ref()
    }

    /// Record how far the work got (an upstream's task id, the last file
    /// copied…), stored with the task: a worker that re-runs the task after
    /// this one was lost finds it in [`ToolContext::checkpoint`] and can
    /// resume instead of starting over. A no-op in a sync call.
    pub async fn save_checkpoint(&self, value: Value) -> Result<(), ToolError> {
        let Mode::Task(run) = &self.inner.mode else {
            return Ok(());
        };
        run.update(&Event::Checkpoint(value)).await
    }

    /// A new artifact of this task, written by the tool as it goes (a big
    /// file, an export): see [`ArtifactSink`] for an example. Its link goes
    /// in the result; its owner reads it with `resources/read` or downloads
    /// it, and it is removed with the task. Fails in a call that is not a
    /// task, and when no artifact store is configured (`--artifact-url`).
    pub async fn artifact(&self, name: &str, mime: &str) -> Result<ArtifactSink, ToolError> {
        let refuse = |why: &str| Err(ToolError::Rpc(ErrorObject::new(codes::INTERNAL_ERROR, why)));
        match &self.inner.mode {
            Mode::Task(TaskRun { artifacts: Some(run), .. }) => run.create(name, mime).await,
            Mode::Task(_) => refuse("This server keeps no artifacts (no artifact store is configured)"),
            Mode::Request { .. } => refuse("An artifact needs a task: call this tool as a task"),
        }
    }

    /// Tell every `subscriptions/listen` stream (on every API process) that
    /// asked for it that `list` changed.
    pub async fn notify_list_changed(&self, list: ListChanged) -> Result<(), ToolError> {
        self.inner.bus.publish(list.method()).await.map_err(ToolError::internal)
    }

    /// Tell every 2025-11-25 session subscribed to `uri` (on every API
    /// process) that the resource changed (`notifications/resources/updated`
    /// on its standalone `GET` stream).
    pub async fn notify_resource_updated(&self, uri: &str) -> Result<(), ToolError> {
        self.inner.bus.publish(&format!("{RESOURCE_UPDATED_EVENT}{uri}")).await.map_err(ToolError::internal)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A client that reads nothing: its outbox holds [`OUTBOX_BOUND`]
    /// notifications and drops the rest, instead of growing without end.
    #[tokio::test]
    async fn an_outbox_nobody_reads_stays_bounded() {
        let (tx, mut rx) = mpsc::channel(OUTBOX_BOUND);
        let outbox = Outbox::new(tx);
        for n in 0..OUTBOX_BOUND * 4 {
            outbox.send(json!({ "n": n }));
        }
        let held: Vec<Value> = std::iter::from_fn(|| rx.try_recv().ok()).collect();
        assert_eq!(held.len(), OUTBOX_BOUND);
        assert_eq!(held[0]["n"], 0, "the oldest are kept, the newest dropped");
        outbox.send(json!({ "n": "after" }));
        assert_eq!(rx.try_recv().ok(), Some(json!({ "n": "after" })), "room again once read");
    }
}
