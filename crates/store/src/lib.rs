//! The task store: one async trait, shaped for Redis, with an in-memory
//! implementation for the embedded mode and a contract suite every
//! implementation must pass.
//!
//! - [`TaskStore`]: create + enqueue atomically, scoped reads (whole tasks, or
//!   just the `tasks/get` view, [`TaskStore::get_view`]), compare-and-set
//!   transitions (fenced for workers), work claims under a lease, watches.
//! - [`EventBus`]: server-wide broadcast of short events (list-changed
//!   notifications, at most [`MAX_EVENT_BYTES`]) that reaches every API
//!   process, and topics that reach only their own subscribers (a legacy
//!   session's answers); every subscriber's queue is bounded ([`fanout`]) and
//!   one that falls behind is ended with [`StoreError::Lagged`].
//! - [`session`]: the shared state of legacy (2025-11-25) sessions
//!   ([`SessionStore`]), counted and capped ([`SessionLimits`]).
//! - [`Backend`]: what a server runs on (every trait, usually one object).
//! - [`memory`]: the embedded backend (not durable, and says so).
//! - [`fanout`]: the bounded per-subscriber queues both buses hand events to.
//! - [`metrics`]: what every store reports of a create (a principal's quota use).
//! - [`idempotency`]: creates named by a client's idempotency key (a retry returns the first task).
//! - [`shares`]: fair shares at claim time (a scope without room is skipped, not waited behind).
//! - [`dead`]: dead letters, what is kept of a poison task to list, replay or discard it.
//! - [`admin`]: what the admin API reads and steers beyond one task ([`AdminStore`]:
//!   task listings across owners, the registry of live processes, drains).
//! - `contract` (feature `contract`): the behavioural suite, written once
//!   against the trait; `store_contract_tests!` instantiates it per backend.
//!
//! Beside the traits, private modules hold what they share, re-exported
//! here: `error` ([`StoreError`]), `limits` ([`CreateLimits`], the bus's
//! bounds) and `claim` ([`Writer`], [`Cas`], [`Claim`], [`PartitionStats`]).
//!
//! Invariants every implementation upholds:
//! - `create` returns only once `get` resolves the task from any process;
//! - a task and its work item are created together or not at all;
//! - `transition` writes only when the stored revision is `next.revision - 1`,
//!   the stored status is not terminal and, for worker writes, the stored
//!   attempt equals the writer's fence;
//! - every claim (first or recovered) bumps the task's `attempt`;
//! - pub/sub is a wake-up only: readers re-read the record;
//! - nothing a caller sends is fanned out to every subscriber: bus events are
//!   bounded ([`MAX_EVENT_BYTES`]), a payload goes to one topic;
//! - a legacy session's state is counted and capped ([`SessionLimits`]);
//! - a task has a dead letter exactly when a [`TaskStore::conclude_dead`]
//!   ending it was applied (recorded in the same atomic step), and every
//!   dead-letter read names the tenant it may see.

use std::{pin::Pin, sync::Arc, time::Duration};

pub use admin::{AdminStore, NodeInfo, TaskFilter, TaskPage};
pub use claim::{Cas, Claim, PartitionStats, Writer};
pub use dead::{DeadLetter, DeadLetterFilter, DeadLetterPage, Replayed};
pub use error::StoreError;
use futures::Stream;
pub use idempotency::{Created, Idempotency};
pub use limits::{
    BUS_QUEUE, CreateLimits, DEFAULT_OP_TIMEOUT, MAX_EVENT_BYTES, TOPIC_QUEUE, check_event, growth_quota,
};
pub use presa_protocol::Limit;
pub use presa_tasks::{Caller, NewTask, Scope, Status, Task, TaskId, wire::GetView};
pub use session::{SessionLimits, SessionStore};
pub use shares::Shares;

pub mod admin;
mod claim;
#[cfg(any(test, feature = "contract"))]
pub mod contract;
pub mod dead;
mod error;
pub mod fanout;
pub mod idempotency;
mod limits;
pub mod memory;
pub mod metrics;
pub mod session;
pub mod shares;
pub mod util;
#[cfg(any(test, feature = "contract"))]
pub mod wrapped;

/// A stream of task snapshots (each one a change that was committed).
pub type TaskStream = Pin<Box<dyn Stream<Item = Task> + Send>>;
/// A stream of events: each one, or [`StoreError::Lagged`] once (the
/// subscriber fell behind its queue's bound) and then the end.
pub type EventStream = Pin<Box<dyn Stream<Item = Result<String, StoreError>> + Send>>;

/// The durable task store.
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
    /// that end the task are counted, never refused ([`growth_quota`]): a
    /// result is not thrown away, and a cancel always lands.
    async fn transition_within(
        &self,
        next: &Task,
        writer: Writer,
        max_bytes_per_scope: Option<u64>,
    ) -> Result<Cas, StoreError>;

    /// Claim up to `max` work items for `worker`: new work first, then items
    /// whose lease lapsed. Waits up to `wait` when there is none. Each claim
    /// bumps the task's attempt. Work of tasks that are terminal or gone is
    /// dropped, never returned. Admits every scope: [`claim_fair`](Self::claim_fair)
    /// with no cap.
    async fn claim(&self, worker: &str, max: usize, lease: Duration, wait: Duration) -> Result<Vec<Claim>, StoreError> {
        self.claim_fair(worker, max, lease, wait, &Shares::default()).await
    }

    /// [`claim`](Self::claim) within fair `shares`: work of a scope without
    /// room is not claimed (nor its attempt bumped) but stays queued, in
    /// order, while the work behind it is claimed; it is claimed once a
    /// claim with room for its scope comes (this worker's or another's).
    async fn claim_fair(
        &self,
        worker: &str,
        max: usize,
        lease: Duration,
        wait: Duration,
        shares: &Shares,
    ) -> Result<Vec<Claim>, StoreError>;

    /// Extend the lease. `false` when the claim was lost (another worker
    /// took it, or the task is gone): the holder must stop.
    async fn renew(&self, claim: &Claim, lease: Duration) -> Result<bool, StoreError>;

    /// The work is over (the task is terminal): remove its work item, so no
    /// worker claims it again. The task record itself is untouched (it lives
    /// until its TTL). A stale holder (an older attempt) removes nothing.
    async fn remove_work(&self, claim: &Claim) -> Result<(), StoreError>;

    /// A worker's write under `claim`: [`transition`](Self::transition) as
    /// the claim's writer and, when it is applied and `next` ends the task,
    /// [`remove_work`](Self::remove_work) of the claim, in one step where the
    /// backend can (Redis: one script). A refused write removes nothing.
    async fn conclude(&self, next: &Task, claim: &Claim) -> Result<Cas, StoreError> {
        let cas = self.transition(next, claim.writer()).await?;
        if matches!(cas, Cas::Applied(_)) && next.status.is_terminal() {
            self.remove_work(claim).await?;
        }
        Ok(cas)
    }

    /// [`conclude`](Self::conclude) for a poison task (its work was
    /// delivered too often): when the write is applied and ends the task, its
    /// [`DeadLetter`] (`DeadLetter::of(claim, reason, next.updated_at_ms)`)
    /// is recorded in the same atomic step, kept for the store's dead-letter
    /// retention. A refused write records nothing, so a task has at most one
    /// letter.
    async fn conclude_dead(&self, next: &Task, claim: &Claim, reason: &str) -> Result<Cas, StoreError>;

    /// Up to [`dead::page_limit`]`(limit)` dead letters passing `filter`
    /// (one tenant's, optionally one subject's), oldest death first, after
    /// the cursor `after` (a [`DeadLetterPage::next`], or `None` for the
    /// first page). Pages are stable: a letter dying later (at a later
    /// millisecond) comes after every one listed already, one removed
    /// meanwhile is skipped. A page may hold fewer letters than `limit`
    /// (some expired or were discarded while it was read) and still have a
    /// `next`; only `next: None` ends the listing.
    async fn dead_letters(
        &self,
        filter: &DeadLetterFilter,
        after: Option<&str>,
        limit: usize,
    ) -> Result<DeadLetterPage, StoreError>;

    /// The dead letter of task `id`, if it has one, not expired, of `tenant`
    /// (another tenant's is `None`, like none at all).
    async fn dead_letter(&self, tenant: &str, id: &TaskId) -> Result<Option<DeadLetter>, StoreError>;

    /// Mark `tenant`'s dead letter of task `id` replayed as task `new`,
    /// unless it was marked before: atomically, the mark now stored (`new`,
    /// or the earlier one's); `None` when there is no such letter.
    async fn mark_dead_letter_replayed(
        &self,
        tenant: &str,
        id: &TaskId,
        new: &TaskId,
    ) -> Result<Option<TaskId>, StoreError>;

    /// Run `tenant`'s dead letter of task `id` again: a new task for the
    /// same owner, tool, arguments and caller, created through
    /// [`create_idempotent`](Self::create_idempotent) under `limits` and the
    /// letter's [`DeadLetter::replay_key`], then the letter is marked
    /// ([`mark_dead_letter_replayed`](Self::mark_dead_letter_replayed)).
    /// A letter replayed before answers the task of its first replay
    /// (`first: false`), creating nothing; `None` when there is no such letter.
    ///
    /// The key makes the two steps safe without one script (the new task's
    /// partition is not the letter's): replays racing each other, or one
    /// retried after a crash between create and mark, find the same task.
    async fn replay_dead_letter(
        &self,
        tenant: &str,
        id: &TaskId,
        limits: CreateLimits,
    ) -> Result<Option<Replayed>, StoreError> {
        let Some(letter) = self.dead_letter(tenant, id).await? else {
            return Ok(None);
        };
        if let Some(task) = letter.replayed_as {
            return Ok(Some(Replayed { task, first: false }));
        }
        let created = self.create_idempotent(letter.replay_task(), limits, Some(&letter.replay_key())).await?;
        let made = created.task().id.clone();
        let first = matches!(created, Created::New(_));
        Ok(Some(match self.mark_dead_letter_replayed(tenant, id, &made).await? {
            // Marked by another replay with another task: possible only once
            // the first task (and its key's record) expired.
            Some(marked) if marked != made => Replayed { task: marked, first: false },
            // Marked now, or (`None`) discarded or expired meanwhile: the task exists all the same.
            _ => Replayed { task: made, first },
        }))
    }

    /// Remove `tenant`'s dead letter of task `id`; `false` when there was none.
    async fn discard_dead_letter(&self, tenant: &str, id: &TaskId) -> Result<bool, StoreError>;

    /// Give unfinished work back so another worker claims it at once.
    async fn release(&self, claim: &Claim) -> Result<(), StoreError>;

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

    /// The work queue of every partition, for metrics (read on each scrape,
    /// so it should be cheap). The default knows nothing: an empty list.
    async fn work_stats(&self) -> Result<Vec<PartitionStats>, StoreError> {
        Ok(Vec::new())
    }
}

/// Events between API processes: a broadcast of short events to every
/// subscriber, and topics for payloads that concern one subscriber.
///
/// Every subscriber has its own bounded queue ([`BUS_QUEUE`],
/// [`TOPIC_QUEUE`]); one that falls behind it gets [`StoreError::Lagged`]
/// and its stream ends, so a subscriber that stops reading never holds more
/// than its bound.
#[async_trait::async_trait]
pub trait EventBus: Send + Sync + std::fmt::Debug + 'static {
    /// Publish an event (e.g. `notifications/tools/list_changed`) to every
    /// process. Over [`MAX_EVENT_BYTES`]: `StoreError::TooLarge`, nothing sent.
    async fn publish(&self, event: &str) -> Result<(), StoreError>;
    /// Events published from now on, by any process.
    async fn subscribe(&self) -> Result<EventStream, StoreError>;
    /// Publish `message` to the subscribers of `topic` only, in any process
    /// (none: it is dropped). For payloads (a client's answer to one
    /// session's request), which the broadcast never carries.
    async fn publish_to(&self, topic: &str, message: &str) -> Result<(), StoreError>;
    /// Messages published to `topic` from now on, by any process.
    async fn subscribe_to(&self, topic: &str) -> Result<EventStream, StoreError>;
}

/// The store, bus, admin reads and legacy sessions a server runs on. Both
/// implementations serve the four traits from one object; [`Backend::new`]
/// takes it once.
#[derive(Debug, Clone)]
pub struct Backend {
    /// The durable task store.
    pub store: Arc<dyn TaskStore>,
    /// The server-wide broadcast.
    pub bus: Arc<dyn EventBus>,
    /// Listings and the process registry, for the admin API and heartbeats.
    pub admin: Arc<dyn AdminStore>,
    /// The shared state of legacy (2025-11-25) sessions.
    pub sessions: Arc<dyn SessionStore>,
}

impl Backend {
    /// A backend served by one object behind every trait.
    pub fn new<T: TaskStore + EventBus + AdminStore + SessionStore>(all: Arc<T>) -> Self {
        Backend { store: all.clone(), bus: all.clone(), admin: all.clone(), sessions: all }
    }
}
