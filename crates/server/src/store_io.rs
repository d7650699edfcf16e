//! Every store call the server makes, traced the same way, and the one
//! read-modify-write of a task.
//!
//! - `store_call` / `store_call_at`: one store operation in a client span
//!   (`store.<op>`), its failures counted, whatever the backend.
//! - [`update_task`]: load, reduce, compare-and-set, retry. The reducer
//!   decides; the store only persists with a CAS. Conflicts (a concurrent
//!   `tasks/update`, a cancel) are retried on the fresh record; a worker whose
//!   claim was superseded stops (`Fenced`).
//! - [`update_task_patiently`]: a worker's write, which also waits out a
//!   store that is briefly unavailable (a Redis restart, a failover) for up
//!   to a lease instead of failing the task or dropping its outcome.

use std::{future::Future, time::Duration};

use presa_store::{Cas, StoreError, TaskId, TaskStore, Writer, util::now_ms};
use presa_tasks::{Event, Task, apply};
use presa_telemetry::metrics;
use tracing::{Instrument, field::Empty};

/// The outcome of [`update_task`].
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Updated {
    /// The event changed the task; this is the stored result.
    Applied(Task),
    /// The event changed nothing (terminal task, unknown input keys…).
    Unchanged(Task),
    /// The task no longer exists (expired or never did).
    Gone,
    /// The writer is a worker whose claim was taken over.
    Fenced,
}

/// Why an update failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum UpdateError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The event is invalid for this task (a reused input key…).
    #[error(transparent)]
    Reduce(#[from] presa_tasks::ReduceError),
    /// The event would make the stored task larger than its byte limit.
    #[error("the task would be {bytes} bytes, more than the {limit}-byte limit (max_task_bytes)")]
    TooLarge {
        /// The task's size with the event applied.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// Too many concurrent writers.
    #[error("task {0} is contended; gave up after {1} attempts")]
    Contended(TaskId, usize),
}

const MAX_ATTEMPTS: usize = 32;

/// Apply `event` to task `id` as `writer`, retrying on CAS conflicts.
pub(crate) async fn update_task(
    store: &dyn TaskStore,
    id: &TaskId,
    writer: Writer,
    event: &Event,
) -> Result<Updated, UpdateError> {
    update_task_within(store, id, writer, event, usize::MAX).await
}

/// [`update_task`], refusing an event that would grow the stored task past
/// `max_bytes` (serialised; a task already past it may still shrink or finish).
pub(crate) async fn update_task_within(
    store: &dyn TaskStore,
    id: &TaskId,
    writer: Writer,
    event: &Event,
    max_bytes: usize,
) -> Result<Updated, UpdateError> {
    let size = |t: &Task| serde_json::to_vec(t).map_or(0, |v| v.len());
    for _ in 0..MAX_ATTEMPTS {
        let Some(task) = store_call("load", store.load(id)).await? else {
            return Ok(Updated::Gone);
        };
        if !writer.fence_holds(&task) {
            return Ok(Updated::Fenced);
        }
        let Some(next) = apply(&task, event, now_ms())? else {
            return Ok(Updated::Unchanged(task));
        };
        if max_bytes < usize::MAX {
            let bytes = size(&next);
            if bytes > max_bytes && bytes > size(&task) {
                return Err(UpdateError::TooLarge { bytes, limit: max_bytes });
            }
        }
        match store_call("transition", store.transition(&next, writer)).await? {
            Cas::Applied(stored) => {
                if stored.status != task.status {
                    metrics::task_transition(stored.status.as_str());
                }
                return Ok(Updated::Applied(stored));
            }
            Cas::Conflict(_) => tokio::task::yield_now().await,
        }
    }
    Err(UpdateError::Contended(id.clone(), MAX_ATTEMPTS))
}

/// [`update_task_within`] for a worker holding a claim: a retryable store
/// failure (unavailable, out of memory) is retried with backoff (50 ms
/// doubling to 1 s) for up to `patience`, normally the lease. Retrying is
/// safe: the write is a fenced compare-and-set of a reduced event, so one
/// that landed before its reply was lost is `Unchanged` (or re-applied
/// identically) the second time, and a claim that lapsed meanwhile is `Fenced`.
pub(crate) async fn update_task_patiently(
    store: &dyn TaskStore,
    id: &TaskId,
    writer: Writer,
    event: &Event,
    max_bytes: usize,
    patience: Duration,
) -> Result<Updated, UpdateError> {
    let deadline = tokio::time::Instant::now() + patience;
    const FIRST_PAUSE: Duration = Duration::from_millis(50);
    let mut pause = FIRST_PAUSE;
    loop {
        match update_task_within(store, id, writer, event, max_bytes).await {
            Err(UpdateError::Store(e)) if e.is_retryable() && tokio::time::Instant::now() + pause < deadline => {
                if pause == FIRST_PAUSE {
                    tracing::info!(error = %e, "store unavailable; retrying the task write for up to a lease");
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            other => return other,
        }
    }
}

/// How loudly a store call is traced (the same two levels as the Redis
/// store's own per-round-trip spans).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verbosity {
    /// An `info` span: exported by default.
    Info,
    /// A `debug` span: for calls that repeat while idle (claim polls, lease
    /// renewals), exported only when `PRESA_TRACE_FILTER` asks for debug.
    Debug,
}

/// Run `call`, the store operation `operation`, inside a client span named
/// `store.<operation>` (attribute `presa.store.operation`), marking the span
/// and counting `presa_store_errors_total` when it fails.
pub(crate) async fn store_call<T>(
    operation: &'static str,
    call: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    store_call_at(Verbosity::Info, operation, call).await
}

/// [`store_call`] at a chosen span level.
pub(crate) async fn store_call_at<T>(
    verbosity: Verbosity,
    operation: &'static str,
    call: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    let name = format!("store.{operation}");
    // A span's level is part of its static callsite, hence one macro per level.
    macro_rules! store_span {
        ($level:ident) => {
            tracing::$level!(
                "store",
                otel.name = name.as_str(),
                otel.kind = "client",
                presa.store.operation = operation,
                otel.status_code = Empty,
                error.type = Empty,
            )
        };
    }
    let span = match verbosity {
        Verbosity::Info => store_span!(info_span),
        Verbosity::Debug => store_span!(debug_span),
    };
    let result = call.instrument(span.clone()).await;
    if let Err(e) = &result {
        metrics::store_error(operation);
        span.record("otel.status_code", "error");
        span.record("error.type", store_error_type(e));
    }
    result
}

/// A low-cardinality name for a store failure.
fn store_error_type(e: &StoreError) -> &'static str {
    match e {
        StoreError::Unavailable(_) => "unavailable",
        StoreError::Capacity { .. } => "capacity",
        StoreError::QueueFull => "queue_full",
        StoreError::Corrupt(_) => "corrupt",
    }
}
