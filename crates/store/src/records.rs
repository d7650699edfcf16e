//! [`TaskStore`]: the durable task records (create, read, write by
//! compare-and-set, watch), the trait every store implements first.

use std::pin::Pin;

use futures::Stream;
use presa_tasks::{NewTask, Scope, Task, TaskId, wire::GetView};

use crate::{
    claim::{Cas, Writer},
    error::StoreError,
    idempotency::{Created, Idempotency},
    limits::CreateLimits,
};

/// A stream of task snapshots (each one a change that was committed).
pub type TaskStream = Pin<Box<dyn Stream<Item = Task> + Send>>;
/// The durable task store: the records ([`WorkQueue`](crate::WorkQueue) works on them,
/// [`DeadLetters`](crate::DeadLetters) keeps what is left of poison ones).
#[async_trait::async_trait]
pub trait TaskStore: Send + Sync + std::fmt::Debug + 'static {
    /// Create a `working` task and enqueue its work, atomically. Returns the
    /// stored task only once a `get` anywhere resolves it. Past a limit:
    /// `StoreError::Capacity` and nothing stored.
    async fn create(&self, new: NewTask, limits: CreateLimits) -> Result<Task, StoreError> {
        Ok(self.create_idempotent(new, limits, None).await?.into_task())
    }

    /// [`create`](Self::create), under an idempotency key when one is
    /// given: atomically with the create, a key the owner used before for
    /// the same request returns the task it made ([`Created::Replayed`]:
    /// nothing stored, no second run, and no limit checked: the task is
    /// already counted), one used for another request is
    /// [`StoreError::KeyReused`], and a new key is recorded with the new
    /// task for as long as the task lives. A keyed task goes to the
    /// partition the key names ([`Idempotency::partition`]).
    async fn create_idempotent(
        &self,
        new: NewTask,
        limits: CreateLimits,
        idempotency: Option<&Idempotency>,
    ) -> Result<Created, StoreError>;

    /// The task if it exists, has not expired and belongs to `scope`.
    /// Another scope's task is `None`, exactly like an unknown id.
    async fn get(&self, scope: &Scope, id: &TaskId) -> Result<Option<Task>, StoreError>;

    /// What `tasks/get` answers: exactly [`GetView::of`] what [`get`](Self::get)
    /// returns (`None` alike), without the rest of the task where a backend
    /// can skip it (Redis reads only the fields the view needs).
    async fn get_view(&self, scope: &Scope, id: &TaskId) -> Result<Option<GetView>, StoreError> {
        Ok(self.get(scope, id).await?.map(|t| GetView::of(&t)))
    }

    /// The task for a worker (no scope check). `None` if gone or expired.
    async fn load(&self, id: &TaskId) -> Result<Option<Task>, StoreError>;

    /// Compare-and-set `next` (computed by `presa_tasks::apply`) over the
    /// stored record at revision `next.revision - 1`. Refused when the
    /// revision moved, the stored task is terminal, or `writer` is a worker
    /// whose attempt is not the stored one. On success, watchers of the task
    /// are told. Counts `next` at its size under its scope's byte quota
    /// when the task has a reservation (never refuses: see
    /// [`transition_within`](Self::transition_within)).
    async fn transition(&self, next: &Task, writer: Writer) -> Result<Cas, StoreError> {
        self.transition_within(next, writer, None).await
    }

    /// [`transition`](Self::transition) within the scope's byte quota
    /// `max_bytes_per_scope` (what creates were given,
    /// [`CreateLimits::max_bytes_per_scope`]): a task created under a quota
    /// is counted at the size each write leaves it, and a client write that
    /// grows a task that stays live (an answer to `tasks/update`) past the
    /// quota is refused with [`StoreError::Capacity`]
    /// (`max_bytes_per_scope`), nothing written. Workers' writes and writes
    /// that end the task are counted, never refused ([`growth_quota`](crate::growth_quota)): a
    /// result is not thrown away, and a cancel always lands.
    async fn transition_within(
        &self,
        next: &Task,
        writer: Writer,
        max_bytes_per_scope: Option<u64>,
    ) -> Result<Cas, StoreError>;

    /// Changes of the given tasks, as committed snapshots, from now on.
    /// Best effort: a snapshot may be missed (readers re-read the record).
    async fn watch(&self, ids: &[TaskId]) -> Result<TaskStream, StoreError>;

    /// What the holder of a claim on task `id` watches while it runs it:
    /// committed snapshots of the writes others make (a client's answer or
    /// cancel, a later claim fencing this one out), from now on. The holder
    /// need not hear its own writes, so a store may leave them out (Redis
    /// does: see `presa-store-redis`'s `claimed.rs`); the default is
    /// [`watch`](Self::watch). Best effort, like `watch`.
    async fn watch_claimed(&self, id: &TaskId) -> Result<TaskStream, StoreError> {
        self.watch(std::slice::from_ref(id)).await
    }
}
