//! Prometheus metrics: the recorder, and every `presa_*` series named here.
//!
//! Code records through the functions below (the `metrics` facade: a no-op
//! until `install` (feature `exporters`) sets the process-wide recorder), and
//! `/metrics` renders with the `PrometheusHandle` that `install` returns. Label values are
//! bounded: methods outside the method table count as `unknown`, outcomes are
//! `ok`, `cancelled` or a JSON-RPC error code; every other label takes its
//! values from a fixed list in the code (a status, a limit's name, a
//! partition number, a pool). Never a task id, a principal or a tool argument.
//!
//! The series a dashboard or an alert reads exist from the start with their
//! zero value (`install` registers them, [`worker_capacity`] and the Redis
//! store register theirs when they start), so a panel shows `0`, not "no
//! data", and `rate()` and `increase()` see the first event.
//!
//! Two crates below this one record their own series through the `metrics`
//! facade (they do not depend on this crate), under the names listed here:
//! `presa-store` ([`QUOTA_USAGE`]) and `presa-store-redis` ([`REDIS_RECONNECTS`],
//! [`STORE_DATA_LOSS`], [`REDIS_COMMAND_DURATION`], [`REDIS_ERRORS`], [`REDIS_UP`]);
//! `install` describes them and sets their buckets.

use std::time::Duration;

pub use metrics::SharedString;
use metrics::{Gauge, counter, gauge, histogram};
use presa_protocol::Limit;
#[cfg(feature = "exporters")]
pub use recorder::{PrometheusHandle, install};

/// MCP requests answered, by `method` and `outcome` (`ok`, `cancelled`, or the JSON-RPC error code).
pub const REQUESTS: &str = "presa_requests_total";
/// Time to answer an MCP request, by `method` (streams: until the last message).
pub const REQUEST_DURATION: &str = "presa_request_duration_seconds";
/// Task status changes committed, by the new `status` (creation counts as `working`).
pub const TASK_TRANSITIONS: &str = "presa_task_transitions_total";
/// Tasks created.
pub const TASKS_CREATED: &str = "presa_tasks_created_total";
/// Work items a worker claimed (every delivery: first runs and re-runs).
pub const WORK_CLAIMS: &str = "presa_work_claims_total";
/// Work claimed again after an earlier delivery (lease lapsed, handed back, worker died): re-runs.
pub const WORK_RECLAIMS: &str = "presa_work_reclaims_total";
/// Tasks failed for having been delivered too often (the dead letters).
pub const POISON_TASKS: &str = "presa_poison_tasks_total";
/// Tries that failed in a way worth trying again and were put off, by
/// `tool` and `reason` (`backoff`: the retry policy chose the delay;
/// `retry_after`: the failure said when).
pub const TASK_RETRIES: &str = "presa_task_retries_total";
/// Tasks failed because their last allowed try failed too, by `tool`
/// (each leaves a dead letter).
pub const TASK_RETRIES_EXHAUSTED: &str = "presa_task_retries_exhausted_total";
/// Calls of a rate-limited tool held back by its rate, by `tool` (a task put
/// off until its turn, or a call run inside its request refused).
pub const TOOL_THROTTLED: &str = "presa_tool_throttled_total";
/// Operators' actions through the admin API that took effect, by `action`
/// ([`ADMIN_ACTIONS`]: a dead letter's replay counts once, when it made the
/// new task; `retry_now`, a waiting task's next try made due).
pub const ADMIN_ACTIONS_TOTAL: &str = "presa_admin_actions_total";
/// Open `subscriptions/listen` streams on this process.
pub const LISTEN_STREAMS: &str = "presa_listen_streams";
/// Failed store operations, by `operation`.
pub const STORE_ERRORS: &str = "presa_store_errors_total";
/// Work items waiting for a worker, by `partition`.
pub const WORK_QUEUED: &str = "presa_work_queued";
/// Work items delivered to a worker and not finished, by `partition`.
pub const WORK_PENDING: &str = "presa_work_pending";
/// Age (since it was enqueued) of the oldest delivered, unfinished work item, by `partition`; 0 when none.
pub const WORK_OLDEST_PENDING_AGE: &str = "presa_work_oldest_pending_age_seconds";
/// Age (since it was enqueued) of the oldest work item waiting for a worker, by `partition`; 0 when none.
pub const WORK_OLDEST_QUEUED_AGE: &str = "presa_work_oldest_queued_age_seconds";
/// Work items put off until a time (a retry's backoff), due or not, by `partition`.
pub const WORK_DELAYED: &str = "presa_work_delayed";
/// How late the earliest due delayed work item is (seconds since it came
/// due and was not queued yet), by `partition`; 0 when none is due.
pub const WORK_OLDEST_DUE_AGE: &str = "presa_work_oldest_due_age_seconds";
/// Handler slots of this worker, by `pool` (`run`: handlers doing work at
/// once, `--concurrency`; `parked`: handlers waiting for input without a run slot, `--max-parked`).
pub const WORKER_SLOTS: &str = "presa_worker_slots";
/// Handler slots of this worker in use, by `pool` (as [`WORKER_SLOTS`]).
pub const WORKER_SLOTS_IN_USE: &str = "presa_worker_slots_in_use";
/// Tasks this worker holds a lease on, by `state` (`running`, or
/// `input_required`: parked until the client answers).
pub const WORKER_TASKS: &str = "presa_worker_tasks";
/// Requests refused for a limit or quota, by `limit` (its setting's name, every [`Limit`]).
pub const REFUSALS: &str = "presa_refusals_total";
/// A principal's use of a per-principal quota after each accepted task
/// creation, as a fraction of the quota, by `quota` (`max_active_tasks_per_scope`,
/// `max_bytes_per_scope`). Recorded by the stores (`presa_store::metrics`).
pub const QUOTA_USAGE: &str = "presa_quota_usage_ratio";
/// Redis reconnects, by `connection` (`pubsub`: the pub/sub hub re-connected and re-subscribed).
/// Recorded by `presa-store-redis` (its `RECONNECTS_METRIC`).
pub const REDIS_RECONNECTS: &str = "presa_redis_reconnects_total";
/// Detected losses of Redis's data (its epoch key vanished or changed).
/// Recorded by `presa-store-redis` (its `DATA_LOSS_METRIC`).
pub const STORE_DATA_LOSS: &str = "presa_store_data_loss_total";
/// Writes `--durability replicated` could not confirm: `WAIT` answered fewer
/// replicas than asked in time (the write is on the primary only). Recorded
/// by `presa-store-redis`.
pub const REDIS_UNCONFIRMED_WRITES: &str = "presa_redis_unconfirmed_writes_total";
/// Time of one Redis round trip (a command or a script; blocking reads
/// excluded), by `operation` (the script's name, or the command's in lower case).
/// Recorded by `presa-store-redis`.
pub const REDIS_COMMAND_DURATION: &str = "presa_redis_command_duration_seconds";
/// Failed Redis round trips, by `kind` (`timeout`, `unreachable`, `io`, `oom`,
/// `readonly`, `loading`, `server`, `other`). Recorded by `presa-store-redis`.
pub const REDIS_ERRORS: &str = "presa_redis_errors_total";
/// 1 when Redis answered this process's last periodic check (the epoch
/// check, every `--store-epoch-check-ms`), else 0. Recorded by `presa-store-redis`.
pub const REDIS_UP: &str = "presa_redis_up";

/// The outcomes of [`REQUESTS`] registered at zero for every method
/// ([`register_requests`]): success, a client's bad params, a server-side
/// failure (what the API error-ratio alert counts). Other outcomes appear
/// when they first happen.
pub const REQUEST_OUTCOMES_AT_ZERO: &[&str] = &["ok", "-32602", "-32603"];
/// Every status a task can enter (the `status` values of [`TASK_TRANSITIONS`]).
pub const TASK_STATUSES: &[&str] = &["working", "input_required", "completed", "failed", "cancelled"];
/// The `action` values of [`ADMIN_ACTIONS_TOTAL`].
pub const ADMIN_ACTIONS: &[&str] =
    &["cancel", "retry_now", "replay", "discard", "drain", "restart_upstream", "reload_gateway"];
/// The store operations the server calls (the `operation` values of [`STORE_ERRORS`]).
pub const STORE_OPERATIONS: &[&str] = &[
    "create",
    "get",
    "load",
    "transition",
    "conclude",
    "claim",
    "renew",
    "release",
    "remove_work",
    "watch",
    "work_stats",
    "defer",
    "retry_now",
    "take_rate",
    "check_breaker",
    "report_breaker",
    "read_breaker",
    "acquire_permit",
    "renew_permit",
    "release_permit",
    "permit_usage",
];

mod breakers;
mod permits;
#[cfg(feature = "exporters")]
mod recorder;
mod requests;

pub use breakers::{BREAKER_OPENED, BREAKER_STATE, breaker_known, breaker_opened, breaker_state};
pub use permits::*;
pub use requests::RequestMetrics;

/// Register the process-wide series at zero (done by `install`): a counter
/// that never moved still renders, so dashboards and alerts see `0`.
pub fn register_at_zero() {
    counter!(TASKS_CREATED).absolute(0);
    for status in TASK_STATUSES {
        counter!(TASK_TRANSITIONS, "status" => *status).absolute(0);
    }
    counter!(WORK_CLAIMS).absolute(0);
    counter!(WORK_RECLAIMS).absolute(0);
    counter!(POISON_TASKS).absolute(0);
    for action in ADMIN_ACTIONS {
        counter!(ADMIN_ACTIONS_TOTAL, "action" => *action).absolute(0);
    }
    for limit in Limit::ALL {
        counter!(REFUSALS, "limit" => limit.as_str()).absolute(0);
    }
    for operation in STORE_OPERATIONS {
        counter!(STORE_ERRORS, "operation" => *operation).absolute(0);
    }
    gauge!(LISTEN_STREAMS).set(0.0);
}

/// Register [`REQUESTS`] at zero for each of `methods` (the transport's
/// method table) and each of [`REQUEST_OUTCOMES_AT_ZERO`], so `rate()` sees a
/// method's first requests and first errors (a counter series born with a
/// value loses its first increments to `rate()`).
pub fn register_requests(methods: impl IntoIterator<Item = &'static str>) {
    for method in methods {
        for outcome in REQUEST_OUTCOMES_AT_ZERO {
            counter!(REQUESTS, "method" => method, "outcome" => *outcome).absolute(0);
        }
    }
}

/// One MCP request answered (`outcome` a `&'static str` or a `String`: a
/// static one is not copied). Registers its series by key each time: a
/// transport recording every request keeps a [`RequestMetrics`].
pub fn request(method: &'static str, outcome: impl Into<SharedString>, elapsed: Duration) {
    counter!(REQUESTS, "method" => method, "outcome" => outcome).increment(1);
    histogram!(REQUEST_DURATION, "method" => method).record(elapsed.as_secs_f64());
}

/// A task was created (and entered `working`).
pub fn task_created() {
    counter!(TASKS_CREATED).increment(1);
    task_transition("working");
}

/// A task entered `status`.
pub fn task_transition(status: &'static str) {
    counter!(TASK_TRANSITIONS, "status" => status).increment(1);
}

/// A worker claimed a work item (`redelivered`: not its first delivery, a re-run).
pub fn work_claimed(redelivered: bool) {
    counter!(WORK_CLAIMS).increment(1);
    if redelivered {
        counter!(WORK_RECLAIMS).increment(1);
    }
}

/// A task failed as poison.
pub fn poison_task() {
    counter!(POISON_TASKS).increment(1);
}

/// A try of a `tool` task failed transiently and was put off (`after`: the failure said when).
pub fn task_retried(tool: &str, after: bool) {
    let reason = if after { "retry_after" } else { "backoff" };
    counter!(TASK_RETRIES, "tool" => tool.to_string(), "reason" => reason).increment(1);
}

/// A `tool` task's last allowed try failed: the task failed.
pub fn task_retries_exhausted(tool: &str) {
    counter!(TASK_RETRIES_EXHAUSTED, "tool" => tool.to_string()).increment(1);
}

/// A call of `tool` was held back by the tool's rate.
pub fn tool_throttled(tool: &str) {
    counter!(TOOL_THROTTLED, "tool" => tool.to_string()).increment(1);
}

/// An operator's `action` (one of [`ADMIN_ACTIONS`]) took effect.
pub fn admin_action(action: &'static str) {
    counter!(ADMIN_ACTIONS_TOTAL, "action" => action).increment(1);
}

/// A store operation failed.
pub fn store_error(operation: &'static str) {
    counter!(STORE_ERRORS, "operation" => operation).increment(1);
}

/// A request was refused for `limit`.
pub fn refusal(limit: Limit) {
    counter!(REFUSALS, "limit" => limit.as_str()).increment(1);
}

/// Open listen streams right now.
pub fn listen_streams(open: usize) {
    gauge!(LISTEN_STREAMS).set(open as f64);
}

/// The work queue of one partition right now: how many items, and how old
/// the oldest is (`None`: none), of each kind.
#[derive(Debug, Clone, Copy, Default)]
pub struct QueueGauges {
    /// Waiting for a worker.
    pub queued: u64,
    /// Delivered and not finished.
    pub pending: u64,
    /// Put off until a time.
    pub delayed: u64,
    /// Since the oldest pending item was enqueued.
    pub oldest_pending_age: Option<Duration>,
    /// Since the oldest queued item was enqueued.
    pub oldest_queued_age: Option<Duration>,
    /// Since the earliest due delayed item came due.
    pub oldest_due_age: Option<Duration>,
}

/// The work queue of one partition right now.
pub fn work_queue(partition: u16, q: QueueGauges) {
    let p = partition.to_string();
    let secs = |age: Option<Duration>| age.map_or(0.0, |d| d.as_secs_f64());
    gauge!(WORK_QUEUED, "partition" => p.clone()).set(q.queued as f64);
    gauge!(WORK_PENDING, "partition" => p.clone()).set(q.pending as f64);
    gauge!(WORK_DELAYED, "partition" => p.clone()).set(q.delayed as f64);
    gauge!(WORK_OLDEST_PENDING_AGE, "partition" => p.clone()).set(secs(q.oldest_pending_age));
    gauge!(WORK_OLDEST_QUEUED_AGE, "partition" => p.clone()).set(secs(q.oldest_queued_age));
    gauge!(WORK_OLDEST_DUE_AGE, "partition" => p).set(secs(q.oldest_due_age));
}

/// The gauges a worker keeps up to date as its handlers start, park, resume
/// and end (handles resolved once: a change is one atomic add).
#[derive(Debug, Clone)]
pub struct WorkerGauges {
    /// [`WORKER_SLOTS_IN_USE`]`{pool="run"}`.
    pub run_slots_in_use: Gauge,
    /// [`WORKER_SLOTS_IN_USE`]`{pool="parked"}`.
    pub parked_slots_in_use: Gauge,
    /// [`WORKER_TASKS`]`{state="running"}`.
    pub running: Gauge,
    /// [`WORKER_TASKS`]`{state="input_required"}`.
    pub input_required: Gauge,
}

/// A worker starting with `run` run slots and `parked` parked slots: its
/// capacity ([`WORKER_SLOTS`]), and the gauges of what it holds, registered
/// at zero and to be moved by the worker.
pub fn worker_capacity(run: usize, parked: usize) -> WorkerGauges {
    gauge!(WORKER_SLOTS, "pool" => "run").set(run as f64);
    gauge!(WORKER_SLOTS, "pool" => "parked").set(parked as f64);
    let gauges = WorkerGauges {
        run_slots_in_use: gauge!(WORKER_SLOTS_IN_USE, "pool" => "run"),
        parked_slots_in_use: gauge!(WORKER_SLOTS_IN_USE, "pool" => "parked"),
        running: gauge!(WORKER_TASKS, "state" => "running"),
        input_required: gauge!(WORKER_TASKS, "state" => "input_required"),
    };
    for g in [&gauges.run_slots_in_use, &gauges.parked_slots_in_use, &gauges.running, &gauges.input_required] {
        g.increment(0.0);
    }
    gauges
}
