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
//! - [`upstreams`]: what a gateway process reports of its upstreams in its heartbeat (bounded).
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

pub use admin::{AdminStore, NodeInfo, TaskFilter, TaskPage};
pub use backend::Backend;
pub use breakers::{BreakerPolicy, BreakerView, Breakers, Change, Check, Circuit, Report};
pub use bus::{EventBus, EventStream};
pub use claim::{Cas, Claim, PartitionStats, TaskRef, Writer};
pub use dead::{DeadLetter, DeadLetterFilter, DeadLetterPage, DeadLetters, Replayed};
pub use error::StoreError;
pub use idempotency::{Created, Idempotency};
pub use limits::{
    BUS_QUEUE, CreateLimits, DEFAULT_OP_TIMEOUT, MAX_EVENT_BYTES, TOPIC_QUEUE, check_event, growth_quota,
};
pub use permits::{Acquired, Holder, PermitName, PermitTerms, PermitUsage, Permits, Released};
pub use presa_protocol::Limit;
pub use presa_tasks::{Caller, NewTask, Scope, Status, Task, TaskId, wire::GetView};
pub use queue::WorkQueue;
pub use rates::{Rate, Rates, Take, Taken};
pub use records::{TaskStore, TaskStream};
pub use session::{SessionLimits, SessionStore, SessionWrite};
pub use shares::Shares;
pub use upstreams::{ConfigReport, ToolCalls, UpstreamReport};

pub mod admin;
mod backend;
pub mod breakers;
mod bus;
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
mod records;
pub mod session;
pub mod shares;
pub mod upstreams;
pub mod util;
#[cfg(any(test, feature = "contract"))]
pub mod wrapped;
