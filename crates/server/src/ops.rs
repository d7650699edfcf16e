//! Read-modify-write of a task: load, reduce, compare-and-set, retry.
//!
//! The reducer decides; the store only persists with a CAS. Conflicts (a
//! concurrent `tasks/update`, a cancel) are retried on the fresh record; a
//! worker whose claim was superseded stops (`Fenced`).

use presa_store::{Cas, StoreError, TaskId, TaskStore, Writer, util::now_ms};
use presa_tasks::{Event, Task, apply};

/// The outcome of [`update_task`].
#[derive(Debug, Clone, PartialEq)]
pub enum Updated {
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
pub enum UpdateError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The event is invalid for this task (a reused input key…).
    #[error(transparent)]
    Reduce(#[from] presa_tasks::ReduceError),
    /// Too many concurrent writers.
    #[error("task {0} is contended; gave up after {1} attempts")]
    Contended(TaskId, usize),
}

const MAX_ATTEMPTS: usize = 32;

/// Apply `event` to task `id` as `writer`, retrying on CAS conflicts.
pub async fn update_task(
    store: &dyn TaskStore,
    id: &TaskId,
    writer: Writer,
    event: &Event,
) -> Result<Updated, UpdateError> {
    for _ in 0..MAX_ATTEMPTS {
        let Some(task) = store.load(id).await? else {
            return Ok(Updated::Gone);
        };
        if let Writer::Worker { attempt } = writer
            && attempt != task.attempt
        {
            return Ok(Updated::Fenced);
        }
        let Some(next) = apply(&task, event, now_ms())? else {
            return Ok(Updated::Unchanged(task));
        };
        match store.transition(&next, writer).await? {
            Cas::Applied(stored) => return Ok(Updated::Applied(stored)),
            Cas::Conflict(_) => tokio::task::yield_now().await,
        }
    }
    Err(UpdateError::Contended(id.clone(), MAX_ATTEMPTS))
}
