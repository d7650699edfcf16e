//! The task store: async traits split by what they are about, shaped for
//! Redis, with an in-memory implementation for the embedded mode and a
//! contract suite every implementation must pass.
//!
//! - [`TaskStore`]: the records. Create + enqueue atomically, scoped reads
//!   (whole tasks, or just the `tasks/get` view, [`TaskStore::get_view`]),
//!   compare-and-set transitions (fenced for workers), watches.
//! - [`WorkQueue`] (`queue`): work claims under a lease, renewal, release,
//!   removal, a worker's concluding write, the queue's statistics.
//! - [`DeadLetters`] (`dead`): what is kept of poison tasks, listed,
//!   replayed or discarded.
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
//! - [`rates`]: rates that span the cluster ([`Rates`], GCRA), for a tool's calls.
//! - [`breakers`]: circuit breakers that span the cluster ([`Breakers`]), for what a tool calls.
//! - [`permits`]: concurrency permits that span the cluster ([`Permits`]: leases, a line in creation order).
//! - [`shares`]: fair shares at claim time (a scope without room is skipped, not waited behind).
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
//! - a task has a dead letter exactly when a [`WorkQueue::conclude_dead`]
//!   ending it was applied (recorded in the same atomic step), and every
//!   dead-letter read names the tenant it may see.

use std::{pin::Pin, sync::Arc};

pub use admin::{AdminStore, NodeInfo, TaskFilter, TaskPage};
pub use breakers::{BreakerPolicy, BreakerView, Breakers, Change, Check, Circuit, Report};
pub use claim::{Cas, Claim, PartitionStats, Writer};
pub use dead::{DeadLetter, DeadLetterFilter, DeadLetterPage, DeadLetters, Replayed};
pub use error::StoreError;
use futures::Stream;
pub use idempotency::{Created, Idempotency};
pub use limits::{
    BUS_QUEUE, CreateLimits, DEFAULT_OP_TIMEOUT, MAX_EVENT_BYTES, TOPIC_QUEUE, check_event, growth_quota,
};
pub use permits::{Acquired, Holder, PermitName, PermitTerms, PermitUsage, Permits, Released};
pub use presa_protocol::Limit;
pub use presa_tasks::{Caller, NewTask, Scope, Status, Task, TaskId, wire::GetView};
pub use queue::WorkQueue;
pub use rates::{Rate, Rates, Take, Taken};
pub use session::{SessionLimits, SessionStore, SessionWrite};
pub use shares::Shares;

pub mod admin;
pub mod breakers;
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
pub mod permits;
mod queue;
pub mod rates;
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

/// The durable task store: the records ([`WorkQueue`] works on them,
/// [`DeadLetters`] keeps what is left of poison ones).
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

/// The records, work queue, dead letters, bus, admin reads and legacy
/// sessions a server runs on. Both implementations serve every trait from
/// one object; [`Backend::new`] takes it once.
#[derive(Debug, Clone)]
pub struct Backend {
    /// The durable task records.
    pub store: Arc<dyn TaskStore>,
    /// The work queue over those records.
    pub work: Arc<dyn WorkQueue>,
    /// Dead letters of poison tasks.
    pub dead: Arc<dyn DeadLetters>,
    /// The server-wide broadcast.
    pub bus: Arc<dyn EventBus>,
    /// Listings and the process registry, for the admin API and heartbeats.
    pub admin: Arc<dyn AdminStore>,
    /// The shared state of legacy (2025-11-25) sessions.
    pub sessions: Arc<dyn SessionStore>,
    /// Rates that span the cluster.
    pub rates: Arc<dyn Rates>,
    /// Circuit breakers that span the cluster.
    pub breakers: Arc<dyn Breakers>,
    /// Concurrency permits that span the cluster.
    pub permits: Arc<dyn Permits>,
}

impl Backend {
    /// A backend served by one object behind every trait.
    pub fn new<T: WorkQueue + DeadLetters + EventBus + AdminStore + SessionStore + Rates + Breakers + Permits>(
        all: Arc<T>,
    ) -> Self {
        Backend {
            store: all.clone(),
            work: all.clone(),
            dead: all.clone(),
            bus: all.clone(),
            admin: all.clone(),
            sessions: all.clone(),
            rates: all.clone(),
            breakers: all.clone(),
            permits: all,
        }
    }
}
