//! The embedded store: every task, work item and lease in one process's
//! memory, behind one mutex, for running presa without Redis.
//!
//! **Not durable**: a restart loses every task, and only this process can
//! see them. Same contract as the Redis store (the contract suite runs
//! against both): atomic create + enqueue, scoped reads, CAS transitions
//! fenced by attempt, leased claims with recovery, watches via broadcast.
//! Expired tasks are invisible at once and purged lazily on `create`.
//!
//! The event bus hands each subscriber its own bounded queue
//! ([`crate::fanout`]): the broadcast carries short events only, a topic's
//! messages reach that topic's subscribers only. Legacy session state is
//! counted per session (fields, bytes), per scope and in all
//! ([`crate::SessionLimits`]). Dead letters ([`crate::dead`]) are kept in
//! the same state, so the write that ends a poison task records its letter
//! under the same lock.
//!
//! Each area has its own file: `tasks` (records, [`crate::TaskStore`]:
//! create, reads, compare-and-set, watches), `work` (claims, leases,
//! recovery, concluding writes, queue statistics: [`crate::WorkQueue`]),
//! `dead` (dead letters, [`crate::DeadLetters`]), `rates` (GCRA rates,
//! [`crate::Rates`]), `breakers` (circuit breakers, [`crate::Breakers`]), `bus` (the
//! [`crate::Rates`]), `permits` (concurrency permits, [`crate::Permits`]), `bus` (the
//! [`crate::EventBus`]), `sessions` (legacy session state,
//! [`crate::SessionStore`]) and `admin` ([`crate::AdminStore`]);
//! this file holds the store, the state they share and its purge.

use std::{
    collections::{BTreeSet, HashMap, VecDeque},
    fmt,
    sync::{Mutex, MutexGuard, PoisonError},
    time::{Duration, Instant},
};

use presa_tasks::{Scope, Task, TaskId};
use tokio::sync::{Notify, broadcast};

mod admin;
mod breakers;
mod bus;
mod dead;
mod permits;
mod rates;
mod sessions;
mod tasks;
#[cfg(test)]
mod tests;
mod work;

/// Snapshots a slow watcher may fall behind by before it skips some.
const CHANNEL_CAPACITY: usize = 1024;
/// Expired tasks are swept at most this often (they are invisible at once).
const PURGE_EVERY_MS: u64 = 1_000;

/// The in-memory [`TaskStore`](crate::TaskStore), [`EventBus`](crate::EventBus),
/// [`SessionStore`](crate::SessionStore) and [`AdminStore`](crate::AdminStore) of the embedded mode.
pub struct MemoryStore {
    partitions: u16,
    /// Most tasks held at once (finished ones included, until they expire).
    max_tasks: Option<usize>,
    /// Most bytes of task records held at once (serialised JSON, the
    /// measure of what a task stores), finished ones included.
    max_bytes: Option<usize>,
    /// How long a dead letter is kept after its task died.
    dead_letter_ttl: Duration,
    state: Mutex<State>,
    /// Woken when work becomes claimable (create, release).
    work_ready: Notify,
    /// Committed task snapshots (transitions and claims).
    changes: broadcast::Sender<Task>,
    /// The subscribers of the bus and of every topic.
    events: std::sync::Arc<Mutex<bus::Subscribers>>,
}

/// Everything behind the one mutex, so a task and its work change together.
#[derive(Default)]
struct State {
    tasks: HashMap<TaskId, Task>,
    /// Serialised size of each held task (with its scope), their sum, and their sum per scope.
    /// Here and in `active`, `finished` and `sessions_per_scope` a scope is
    /// [`Scope::principal`]: one principal's quotas span every endpoint, as
    /// the Redis store's per-scope keys (tenant and subject) do.
    sizes: HashMap<TaskId, (Scope, usize)>,
    bytes: usize,
    scope_bytes: HashMap<Scope, usize>,
    /// Each scope's non-terminal tasks, ordered by expiry (`u64::MAX`: never):
    /// a task leaves when it turns terminal, and expired ones are dropped
    /// from the front when the scope's limit is checked, so counting never
    /// looks at the live ones.
    active: HashMap<Scope, BTreeSet<(u64, TaskId)>>,
    /// Each scope's finished tasks, oldest end first: what the store evicts
    /// when it is full (see `State::evict_finished`). An entry whose task
    /// went (expired) stays until it is met or a purge rebuilds the sets.
    finished: HashMap<Scope, BTreeSet<(u64, TaskId)>>,
    /// Work items by task id.
    work: HashMap<TaskId, WorkItem>,
    /// How many work items (queued or claimed) each partition holds, for
    /// `max_queued_per_partition`.
    work_per_partition: HashMap<u16, usize>,
    /// Unleased work, oldest first (released work goes to the front).
    queue: VecDeque<TaskId>,
    /// Work put off until a time (Unix ms), earliest first: queued at the
    /// back once due (see `work.rs`).
    delayed: BTreeSet<(u64, TaskId)>,
    next_receipt: u64,
    last_purge_ms: u64,
    /// Idempotency records ([`Idempotency::id`]): the request's fingerprint
    /// and the task it made; dropped with the task.
    idempotency: HashMap<String, (String, TaskId)>,
    /// Legacy session state by owner and session id.
    sessions: HashMap<(Scope, String), sessions::SessionState>,
    /// Dead letters of poison tasks, until their retention ends.
    dead: dead::Book,
    /// How many sessions holding state each scope has (expired ones until a purge).
    sessions_per_scope: HashMap<Scope, u64>,
    /// Live processes and drains ([`crate::AdminStore`]).
    nodes: admin::Registry,
    /// Each rate's theoretical arrival time, Unix µs ([`crate::Rates`]).
    rates: HashMap<String, u64>,
    /// Each circuit breaker by name, with the policy it was last reported under ([`crate::Breakers`]).
    breakers: HashMap<String, (crate::breakers::Breaker, crate::breakers::BreakerPolicy)>,
    /// Concurrency permits by limit, then key ([`crate::Permits`]).
    permits: HashMap<String, HashMap<String, crate::permits::Semaphore>>,
}

/// A task's entry in its scope's active set: expiry first, so the expired
/// ones come first.
fn active_key(task: &Task) -> (u64, TaskId) {
    (task.expires_at_ms().unwrap_or(u64::MAX), task.id.clone())
}

#[derive(Default)]
struct WorkItem {
    deliveries: u64,
    lease: Option<Lease>,
    /// While the work waits in `State::delayed`: when it is due (Unix ms).
    due_at_ms: Option<u64>,
}

struct Lease {
    /// Who holds it (kept for debugging; the receipt identifies the claim).
    #[allow(dead_code)]
    worker: String,
    deadline: Instant,
    receipt: String,
}

impl State {
    /// Sweep expired tasks with their work, at most once per `PURGE_EVERY_MS`.
    fn maybe_purge(&mut self, now: u64) {
        if now.saturating_sub(self.last_purge_ms) < PURGE_EVERY_MS {
            return;
        }
        self.purge(now);
    }

    fn purge(&mut self, now: u64) {
        self.last_purge_ms = now;
        self.purge_sessions(now);
        self.purge_rates(now.saturating_mul(1000));
        self.purge_breakers(now);
        self.purge_permits(now);
        self.dead.purge(now);
        self.tasks.retain(|_, t| !t.is_expired(now));
        let tasks = &self.tasks;
        self.sizes.retain(|id, _| tasks.contains_key(id));
        self.bytes = self.sizes.values().map(|(_, n)| n).sum();
        self.scope_bytes.clear();
        for (scope, n) in self.sizes.values() {
            *self.scope_bytes.entry(scope.clone()).or_default() += n;
        }
        self.work.retain(|id, _| tasks.contains_key(id));
        self.idempotency.retain(|_, (_, id)| tasks.contains_key(id));
        self.work_per_partition.clear();
        for id in self.work.keys() {
            *self.work_per_partition.entry(id.partition().unwrap_or(0)).or_default() += 1;
        }
        let work = &self.work;
        self.queue.retain(|id| work.contains_key(id));
        self.delayed.retain(|(_, id)| work.contains_key(id));
        self.active.retain(|_, ids| {
            ids.retain(|(_, id)| tasks.get(id).is_some_and(|t| !t.status.is_terminal()));
            !ids.is_empty()
        });
        self.finished.clear();
        for t in self.tasks.values().filter(|t| t.status.is_terminal()) {
            self.finished.entry(t.scope.principal()).or_default().insert((t.updated_at_ms, t.id.clone()));
        }
    }

    /// Make room while `full` says the store is full: evict the oldest
    /// finished task of the scope holding the most bytes, again and again, so
    /// one principal's finished results never hold a place another
    /// principal's new task needs (a task still running is never evicted).
    /// Whether there is room at the end.
    fn evict_finished(&mut self, full: impl Fn(&State) -> bool) -> bool {
        while full(self) {
            let heaviest = self
                .finished
                .iter()
                .filter(|(_, ids)| !ids.is_empty())
                .max_by_key(|(scope, _)| self.scope_bytes.get(*scope).copied().unwrap_or(0))
                .map(|(scope, _)| scope.clone());
            let Some(scope) = heaviest else { return false };
            let Some((_, id)) = self.finished.get_mut(&scope).and_then(BTreeSet::pop_first) else { continue };
            if self.tasks.get(&id).is_some_and(|t| t.status.is_terminal()) {
                self.tasks.remove(&id);
                self.remove_work(&id);
                self.resize(&id, None);
                crate::metrics::evicted();
            }
            if self.finished.get(&scope).is_some_and(BTreeSet::is_empty) {
                self.finished.remove(&scope);
            }
        }
        true
    }
}

/// The size a task record counts for: its serialised JSON.
fn record_size(task: &Task) -> usize {
    presa_tasks::json_len(task)
}

/// `from + d`, saturating far in the future.
fn deadline_after(from: Instant, d: Duration) -> Instant {
    from.checked_add(d).or_else(|| from.checked_add(Duration::from_secs(100 * 365 * 24 * 3600))).unwrap_or(from)
}

impl MemoryStore {
    /// An empty store with one partition.
    pub fn new() -> Self {
        Self::with_partitions(1)
    }

    /// An empty store naming `n` partitions in its task ids (as the Redis
    /// store would), so ids look the same in both modes.
    pub fn with_partitions(n: u16) -> Self {
        crate::metrics::register_quota_usage();
        MemoryStore {
            partitions: n.max(1),
            max_tasks: None,
            max_bytes: None,
            dead_letter_ttl: crate::dead::DEFAULT_DEAD_LETTER_TTL,
            state: Mutex::new(State::default()),
            work_ready: Notify::new(),
            changes: broadcast::channel(CHANNEL_CAPACITY).0,
            events: Default::default(),
        }
    }

    /// Hold at most `max` tasks, finished ones included: every task stays
    /// readable for its whole `ttlMs`, so a full store refuses new tasks
    /// (`StoreError::Capacity { limit: Limit::MaxTasks }`, retryable) rather than
    /// forget old ones early. Memory grows by a few KiB per task otherwise.
    pub fn with_max_tasks(mut self, max: usize) -> Self {
        self.max_tasks = Some(max);
        self
    }

    /// Hold at most `max` bytes of task records (serialised), finished ones
    /// included: past it new tasks are refused (`StoreError::Capacity {
    /// limit: Limit::MaxMemoryBytes }`, retryable). Updates of existing tasks are
    /// always stored, so the bound can be overshot by what tasks already
    /// admitted grow to (each bounded by the server's `max_task_bytes`).
    pub fn with_max_bytes(mut self, max: usize) -> Self {
        self.max_bytes = Some(max);
        self
    }

    /// Keep each dead letter for `ttl` after its task died (default
    /// [`DEFAULT_DEAD_LETTER_TTL`](crate::dead::DEFAULT_DEAD_LETTER_TTL)).
    pub fn with_dead_letter_ttl(mut self, ttl: Duration) -> Self {
        self.dead_letter_ttl = ttl;
        self
    }

    /// Bytes of task records held now (serialised).
    pub fn bytes(&self) -> usize {
        self.state().bytes
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // No critical section leaves the state half-written, so a panic
        // elsewhere while holding the lock does not poison the data.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("MemoryStore");
        d.field("partitions", &self.partitions);
        if let Ok(s) = self.state.try_lock() {
            d.field("tasks", &s.tasks.len()).field("work", &s.work.len()).field("queued", &s.queue.len());
        }
        d.finish_non_exhaustive()
    }
}

#[cfg(test)]
mod contract_suite {
    use super::*;

    crate::store_contract_tests!(
        || async { crate::Backend::new(std::sync::Arc::new(MemoryStore::new())) },
        |ttl| async move { crate::Backend::new(std::sync::Arc::new(MemoryStore::new().with_dead_letter_ttl(ttl))) }
    );
}
