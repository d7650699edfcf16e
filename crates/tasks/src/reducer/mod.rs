//! The reducer: the one place task state changes are decided.
//!
//! `apply(task, event, now)` returns the next task, `Ok(None)` when the event
//! changes nothing (every event on a terminal task, answers to keys that are
//! not outstanding…), or an error when the event is a programming error of
//! the caller (re-using an input key for a different request).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::{model::Status, model::Task, model::Work};

/// Something that happens to a task.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A worker claimed the task's work (first delivery or a recovery): the
    /// fencing `attempt` goes up by one, so the previous holder's writes are
    /// refused from now on, and the work names its new holder. The status
    /// does not change (a task parked on input stays `input_required` while
    /// its new holder re-runs the handler).
    Claimed {
        /// The claiming worker's id.
        worker: String,
    },
    /// The worker needs input: park as `input_required` with these requests.
    RequestInput(BTreeMap<String, Value>),
    /// The client answered (`tasks/update`). Only outstanding keys are taken.
    ProvideInput(BTreeMap<String, Value>),
    /// The worker updates the status message.
    SetMessage(String),
    /// The worker records how far it got, for a re-run to resume from.
    Checkpoint(Value),
    /// The work finished with a result (tool errors included).
    Complete(Value),
    /// The work failed with a JSON-RPC error object.
    Fail(Value),
    /// The client cancelled (`tasks/cancel`).
    Cancel,
    /// The worker puts the task's work off: its try failed in a way worth
    /// trying again (`failed`: the failure goes to its
    /// [`Retries`](crate::Retries)), or it may not start yet (not `failed`:
    /// it waits for a turn reserved for it under its tool's rate,
    /// `Retries::turn_reserved`). The
    /// task stays `working` with `message` as its status message, and its
    /// work waits until `due_at_ms` (the store moves it to its delayed work,
    /// `WorkQueue::defer`).
    Defer {
        /// Whether a try failed (else the run did not start).
        failed: bool,
        /// Why.
        reason: String,
        /// The status message while the work waits.
        message: String,
        /// When the next try is due, Unix ms.
        due_at_ms: u64,
    },
    /// The worker puts the task's work off before it starts, holding no
    /// turn of a rate and counting no try (what it calls is failing: its
    /// circuit breaker is open). Like [`Event::Defer`] otherwise: the task
    /// stays `working` with `message`, its work waits until `due_at_ms`.
    Wait {
        /// The status message while the work waits.
        message: String,
        /// When the run may be tried, Unix ms.
        due_at_ms: u64,
    },
}

impl Event {
    /// Every event kind with sample payloads, for exhaustive tests.
    pub fn samples() -> Vec<Event> {
        let one = |k: &str| BTreeMap::from([(k.to_string(), serde_json::json!({"method": "elicitation/create"}))]);
        vec![
            Event::Claimed { worker: "w-1".into() },
            Event::RequestInput(one("a")),
            Event::ProvideInput(BTreeMap::from([("a".to_string(), serde_json::json!({"action": "accept"}))])),
            Event::SetMessage("step 2".into()),
            Event::Checkpoint(serde_json::json!({"upstreamTask": "t-1"})),
            Event::Complete(serde_json::json!({"content": [], "isError": false})),
            Event::Fail(serde_json::json!({"code": -32603, "message": "Internal error"})),
            Event::Cancel,
            Event::Defer {
                failed: true,
                reason: "upstream 503".into(),
                message: "attempt 1 of 3 failed".into(),
                due_at_ms: 9_000,
            },
            Event::Wait { message: "circuit open; trying again in 5 s".into(), due_at_ms: 9_000 },
        ]
    }
}

/// A caller error: the event cannot apply to this task.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReduceError {
    /// The key was issued before for a different request, or already answered.
    #[error("input key {0:?} was already used in this task's lifetime")]
    KeyReused(String),
    /// An input request map must not be empty.
    #[error("an input request needs at least one key")]
    NoInputRequests,
}

/// Apply `event` to `task` at `now_ms`: the task it makes, or `None` when
/// the event changes nothing (a finished task, a repeat).
pub fn apply(task: &Task, event: &Event, now_ms: u64) -> Result<Option<Task>, ReduceError> {
    if task.status.is_terminal() {
        return Ok(None);
    }
    // An ending event keeps only what a finished task keeps: that part is
    // copied, not the whole task (its work's arguments, capabilities and
    // inputs) to be cleared at once (a worker ends every task it runs).
    let mut next = match ending(event) {
        Some(status) => finished(task, status),
        None => task.clone(),
    };
    if !change(&mut next, task, event, now_ms)? {
        return Ok(None);
    }
    stamp(&mut next, Was::of(task), now_ms);
    Ok(Some(next))
}

/// [`apply`] of [`Event::Claimed`] by `worker` to a task the caller gives
/// up (a claim decodes the stored task only to make the claimed one): the
/// same task, made in place instead of from a copy dropped with the original.
/// `None` for a finished task.
pub fn claim(mut task: Task, worker: &str, now_ms: u64) -> Option<Task> {
    if task.status.is_terminal() {
        return None;
    }
    let was = Was::of(&task);
    claimed_by(&mut task, worker);
    stamp(&mut task, was, now_ms);
    Some(task)
}

/// What [`stamp`] needs of the task a change started from.
#[derive(Clone, Copy)]
struct Was {
    status: Status,
    revision: u64,
    updated_at_ms: u64,
}

impl Was {
    fn of(task: &Task) -> Was {
        Was { status: task.status, revision: task.revision, updated_at_ms: task.updated_at_ms }
    }
}

/// Mark `next` as a change of the task it `was`: its revision, when, and
/// the status it moved to in its history.
fn stamp(next: &mut Task, was: Was, now_ms: u64) {
    next.revision = was.revision + 1;
    next.updated_at_ms = now_ms.max(was.updated_at_ms);
    // The end needs no entry: a finished task never changes again, so it
    // ended at `updated_at_ms` (what an operator's view adds, `Task::status_history`).
    if next.status != was.status && !next.status.is_terminal() {
        next.history.push(crate::model::StatusChange { status: next.status, at_ms: next.updated_at_ms });
    }
}

/// [`Event::Claimed`]: the fence moves on by one and the work names its
/// new holder, no longer waiting for a due time.
fn claimed_by(next: &mut Task, worker: &str) {
    next.attempt += 1;
    next.work.worker = Some(worker.to_string());
    next.retries.due_at_ms = None;
}

/// What `event` changes in `next`, a copy of the live `task` (of what it
/// keeps once it ends, for an [`ending`] event): `false` when it changes nothing.
fn change(next: &mut Task, task: &Task, event: &Event, now_ms: u64) -> Result<bool, ReduceError> {
    match event {
        Event::Claimed { worker } => claimed_by(next, worker),
        Event::Defer { failed, reason, message, due_at_ms } => {
            let failed = failed.then_some(reason.as_str());
            let turn = failed.is_none();
            put_off(next, task, PutOff { failed, turn, message, due_at_ms: *due_at_ms }, now_ms);
        }
        // Held back before it started, holding no turn of a rate.
        Event::Wait { message, due_at_ms } => {
            put_off(next, task, PutOff { failed: None, turn: false, message, due_at_ms: *due_at_ms }, now_ms);
        }
        Event::RequestInput(requests) => return request_input(next, task, requests),
        Event::ProvideInput(responses) => return Ok(provide_input(next, task, responses)),
        Event::SetMessage(message) => {
            if task.status_message.as_deref() == Some(message.as_str()) {
                return Ok(false);
            }
            next.status_message = Some(message.clone());
        }
        Event::Checkpoint(value) => {
            if task.checkpoint.as_ref() == Some(value) {
                return Ok(false);
            }
            next.checkpoint = Some(value.clone());
        }
        Event::Complete(result) => next.result = Some(result.clone()),
        Event::Fail(error) => {
            next.status_message = error.get("message").and_then(Value::as_str).map(str::to_string);
            next.error = Some(error.clone());
        }
        Event::Cancel => next.status_message = Some("Cancelled by the client".into()),
    }
    Ok(true)
}

/// [`Event::RequestInput`]: the task parks `input_required` on `requests`;
/// a key used before for something else is refused, and asking again what
/// it already waits for changes nothing.
fn request_input(next: &mut Task, task: &Task, requests: &BTreeMap<String, Value>) -> Result<bool, ReduceError> {
    if requests.is_empty() {
        return Err(ReduceError::NoInputRequests);
    }
    for (key, request) in requests {
        let reused =
            task.input_responses.contains_key(key) || task.issued_inputs.get(key).is_some_and(|prev| prev != request);
        if reused {
            return Err(ReduceError::KeyReused(key.clone()));
        }
    }
    let already_parked =
        task.status == Status::InputRequired && requests.keys().all(|k| task.input_requests.contains_key(k));
    if already_parked {
        return Ok(false);
    }
    for (key, request) in requests {
        next.input_requests.insert(key.clone(), request.clone());
        next.issued_inputs.insert(key.clone(), request.clone());
    }
    next.status = Status::InputRequired;
    Ok(true)
}

/// [`Event::ProvideInput`]: the answers to outstanding keys are taken (any
/// other is ignored); with none left outstanding the task works again.
fn provide_input(next: &mut Task, task: &Task, responses: &BTreeMap<String, Value>) -> bool {
    let accepted: Vec<&String> = responses.keys().filter(|k| task.input_requests.contains_key(*k)).collect();
    if accepted.is_empty() {
        return false;
    }
    for key in accepted {
        next.input_requests.remove(key);
        next.input_responses.insert(key.clone(), responses[key].clone());
    }
    if next.input_requests.is_empty() {
        next.status = Status::Working;
    }
    true
}

/// The status `event` ends a task with, if it ends it.
fn ending(event: &Event) -> Option<Status> {
    match event {
        Event::Complete(_) => Some(Status::Completed),
        Event::Fail(_) => Some(Status::Failed),
        Event::Cancel => Some(Status::Cancelled),
        _ => None,
    }
}

/// `task` as it ends with `status`. A finished task never runs again, so
/// what only a run needs is not kept (the arguments, client capabilities,
/// MRTR answers, trace context, caller, the checkpoint, and the inputs issued
/// and answered): a finished record holds only what `tasks/get` answers with
/// (plus the tool's name, and the dead letter it replays) for the rest of its
/// TTL, which is most of the memory a store spends on it. Every field is
/// named, so a new one is kept or dropped on purpose.
fn finished(task: &Task, status: Status) -> Task {
    Task {
        id: task.id.clone(),
        scope: task.scope.clone(),
        status,
        status_message: task.status_message.clone(),
        created_at_ms: task.created_at_ms,
        updated_at_ms: task.updated_at_ms,
        ttl_ms: task.ttl_ms,
        poll_interval_ms: task.poll_interval_ms,
        revision: task.revision,
        attempt: task.attempt,
        work: Work { tool: task.work.tool.clone(), replay_of: task.work.replay_of.clone(), ..Work::default() },
        input_requests: BTreeMap::new(),
        issued_inputs: BTreeMap::new(),
        input_responses: BTreeMap::new(),
        checkpoint: None,
        result: task.result.clone(),
        error: task.error.clone(),
        history: task.history.clone(),
        retries: task.retries.clone(),
    }
}

/// How [`Event::Defer`] or [`Event::Wait`] puts a run off: `failed`, why
/// its try failed (none: held back before it started); `turn`, whether it
/// holds a turn of its tool's rate; the task's `message` while it waits, and
/// when its work is due.
struct PutOff<'a> {
    failed: Option<&'a str>,
    turn: bool,
    message: &'a str,
    due_at_ms: u64,
}

/// `next` stays `working` with the wait's message, its work due at its due
/// time; a failed try is logged and counted.
fn put_off(next: &mut Task, task: &Task, off: PutOff<'_>, now_ms: u64) {
    let PutOff { failed, turn, message, due_at_ms } = off;
    let retries = &mut next.retries;
    if let Some(reason) = failed {
        retries.log.push(crate::model::FailedTry {
            number: task.try_number(),
            at_ms: now_ms,
            reason: reason.to_string(),
            delay_ms: due_at_ms.saturating_sub(now_ms),
        });
        let over = retries.log.len().saturating_sub(crate::model::MAX_TRIES_KEPT);
        retries.log.drain(..over);
        retries.failed = task.retries.failed.saturating_add(1);
    }
    retries.turn_reserved = turn;
    retries.fence = task.attempt;
    retries.due_at_ms = Some(due_at_ms);
    next.status = Status::Working;
    next.status_message = Some(message.to_string());
    next.input_requests.clear();
    next.work.worker = None;
}

#[cfg(test)]
mod tests;
