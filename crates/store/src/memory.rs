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

use std::{
    collections::{BTreeSet, HashMap, HashSet, VecDeque},
    fmt,
    sync::{Mutex, MutexGuard, PoisonError},
    time::{Duration, Instant},
};

use futures::StreamExt;
use presa_tasks::{Event, NewTask, Scope, Task, TaskId, apply, wire::GetView};
use tokio::sync::{Notify, broadcast};
use tokio_stream::wrappers::BroadcastStream;

use crate::{
    BUS_QUEUE, Cas, Claim, CreateLimits, Created, DeadLetter, DeadLetterFilter, DeadLetterPage, EventBus, EventStream,
    Idempotency, PartitionStats, SESSION_BYTES_LIMIT, SESSION_FIELDS_LIMIT, SESSIONS_LIMIT, SESSIONS_PER_SCOPE_LIMIT,
    SessionLimits, Shares, StoreError, TOPIC_QUEUE, TaskStore, TaskStream, Writer,
    fanout::{self, Offered, Overflow, QueueLimits, QueueSender},
    util::{new_task_id_in, now_ms},
};

mod admin;

/// Snapshots a slow watcher may fall behind by before it skips some.
const CHANNEL_CAPACITY: usize = 1024;
/// Expired tasks are swept at most this often (they are invisible at once).
const PURGE_EVERY_MS: u64 = 1_000;

/// The in-memory [`TaskStore`] and [`EventBus`] of the embedded mode.
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
    events: std::sync::Arc<Mutex<Subscribers>>,
}

/// The name under which [`Subscribers`] keeps the broadcast's subscribers
/// (topics are prefixed, so no topic is named so).
const BROADCAST: &str = "";

/// One subscriber's queue of shared messages, with its id.
type Subscriber = (u64, QueueSender<std::sync::Arc<str>>);

/// Every subscriber's queue, by topic ([`BROADCAST`] for the bus).
#[derive(Default)]
struct Subscribers {
    next_id: u64,
    topics: HashMap<String, Vec<Subscriber>>,
}

impl Subscribers {
    /// Offer `message` to each subscriber of `topic`, forgetting the ones gone or ended.
    fn offer(&mut self, topic: &str, message: &str) {
        let Some(subs) = self.topics.get_mut(topic) else {
            return;
        };
        // One copy, shared by every queue (each counts all of it against its bound).
        let shared: std::sync::Arc<str> = std::sync::Arc::from(message);
        subs.retain(|(_, tx)| match tx.offer(shared.clone(), shared.len()) {
            Offered::Queued | Offered::Skipped => true,
            Offered::Ended => {
                tracing::warn!(topic, "an event subscriber lagged and was ended");
                false
            }
            Offered::Closed => false,
        });
        if subs.is_empty() {
            self.topics.remove(topic);
        }
    }

    fn remove(&mut self, topic: &str, id: u64) {
        if let Some(subs) = self.topics.get_mut(topic) {
            subs.retain(|(i, _)| *i != id);
            if subs.is_empty() {
                self.topics.remove(topic);
            }
        }
    }
}

/// A subscription to the memory bus; unregisters when dropped.
struct Subscription {
    rx: fanout::QueueReceiver<std::sync::Arc<str>>,
    registry: std::sync::Weak<Mutex<Subscribers>>,
    topic: String,
    id: u64,
}

impl futures::Stream for Subscription {
    type Item = Result<String, StoreError>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.rx.poll_next_unpin(cx).map(|next| next.map(|r| r.map(|m| m.to_string())))
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if let Some(registry) = self.registry.upgrade() {
            registry.lock().unwrap_or_else(PoisonError::into_inner).remove(&self.topic, self.id);
        }
    }
}

/// A legacy session's shared state.
struct SessionState {
    /// When it expires (ms since the epoch).
    expires: u64,
    fields: HashMap<String, String>,
    /// Field names plus values.
    bytes: usize,
}

/// What one session write does.
enum SessionWrite<'a> {
    Set(&'a str, &'a str),
    Remove(&'a str),
    /// Drop every field but this one, set to `1`.
    End(&'a str),
}

/// Everything behind the one mutex, so a task and its work change together.
#[derive(Default)]
struct State {
    tasks: HashMap<TaskId, Task>,
    /// Serialised size of each held task (with its scope), their sum, and their sum per scope.
    sizes: HashMap<TaskId, (Scope, usize)>,
    bytes: usize,
    scope_bytes: HashMap<Scope, usize>,
    /// Each scope's non-terminal tasks, ordered by expiry (`u64::MAX`: never):
    /// a task leaves when it turns terminal, and expired ones are dropped
    /// from the front when the scope's limit is checked, so counting never
    /// looks at the live ones.
    active: HashMap<Scope, BTreeSet<(u64, TaskId)>>,
    /// Work items by task id.
    work: HashMap<TaskId, WorkItem>,
    /// How many work items (queued or claimed) each partition holds, for
    /// `max_queued_per_partition`.
    work_per_partition: HashMap<u16, usize>,
    /// Unleased work, oldest first (released work goes to the front).
    queue: VecDeque<TaskId>,
    next_receipt: u64,
    last_purge_ms: u64,
    /// Idempotency records ([`Idempotency::id`]): the request's fingerprint
    /// and the task it made; dropped with the task.
    idempotency: HashMap<String, (String, TaskId)>,
    /// Legacy session state by owner and session id.
    sessions: HashMap<(Scope, String), SessionState>,
    /// Dead letters of poison tasks, until their retention ends.
    dead: crate::dead::Book,
    /// How many sessions holding state each scope has (expired ones until a purge).
    sessions_per_scope: HashMap<Scope, u64>,
    /// Live processes and drains ([`crate::AdminStore`]).
    nodes: admin::Registry,
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
}

struct Lease {
    /// Who holds it (kept for debugging; the receipt identifies the claim).
    #[allow(dead_code)]
    worker: String,
    deadline: Instant,
    receipt: String,
}

impl State {
    /// The task unless it is gone or expired; an expired task is dropped
    /// with its work on the spot.
    fn live(&mut self, id: &TaskId, now: u64) -> Option<&mut Task> {
        if self.tasks.get(id)?.is_expired(now) {
            self.tasks.remove(id);
            self.remove_work(id);
            self.resize(id, None);
            return None;
        }
        self.tasks.get_mut(id)
    }

    /// Record task `id`'s serialised size (`None`: it is gone).
    fn resize(&mut self, id: &TaskId, task: Option<&Task>) {
        let old = match task {
            Some(t) => self.sizes.insert(id.clone(), (t.scope.clone(), record_size(t))),
            None => self.sizes.remove(id),
        };
        if let Some((scope, n)) = old {
            self.bytes = self.bytes.saturating_sub(n);
            if let Some(b) = self.scope_bytes.get_mut(&scope) {
                *b = b.saturating_sub(n);
                if *b == 0 {
                    self.scope_bytes.remove(&scope);
                }
            }
        }
        if let Some((scope, n)) = self.sizes.get(id) {
            self.bytes += n;
            *self.scope_bytes.entry(scope.clone()).or_default() += n;
        }
    }

    /// Refuse a client's write that would grow `next` past its scope's
    /// byte `quota` or the store's `max_bytes` (after a purge of expired
    /// tasks); a write that does not grow the task always passes.
    fn check_growth(
        &mut self,
        next: &Task,
        quota: Option<u64>,
        max_bytes: Option<usize>,
        now: u64,
    ) -> Result<(), StoreError> {
        let before = self.sizes.get(&next.id).map_or(0, |(_, n)| *n);
        let growth = record_size(next).saturating_sub(before);
        if growth == 0 {
            return Ok(());
        }
        let over = |s: &State| {
            if let Some(q) = quota
                && (s.scope_bytes.get(&next.scope).copied().unwrap_or(0) + growth) as u64 > q
            {
                return Some(crate::BYTES_LIMIT);
            }
            max_bytes.filter(|max| s.bytes + growth > *max).map(|_| "max_memory_bytes")
        };
        if over(self).is_some() {
            self.purge(now);
            if let Some(limit) = over(self) {
                return Err(StoreError::Capacity { limit });
            }
        }
        Ok(())
    }

    /// Drop task `id`'s work item, if any.
    fn remove_work(&mut self, id: &TaskId) {
        if self.work.remove(id).is_some()
            && let Some(n) = self.work_per_partition.get_mut(&id.partition().unwrap_or(0))
        {
            *n = n.saturating_sub(1);
        }
    }

    /// Non-terminal, non-expired tasks of `scope` (amortised O(log n)).
    fn count_active(&mut self, scope: &Scope, now: u64) -> u64 {
        let Some(ids) = self.active.get_mut(scope) else {
            return 0;
        };
        while ids.first().is_some_and(|(expires, _)| *expires <= now) {
            ids.pop_first();
        }
        let n = ids.len() as u64;
        if n == 0 {
            self.active.remove(scope);
        }
        n
    }

    /// The task no longer counts against its scope's limit.
    fn forget_active(&mut self, task: &Task) {
        if let Some(ids) = self.active.get_mut(&task.scope) {
            ids.remove(&active_key(task));
            if ids.is_empty() {
                self.active.remove(&task.scope);
            }
        }
    }

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
        self.active.retain(|_, ids| {
            ids.retain(|(_, id)| tasks.get(id).is_some_and(|t| !t.status.is_terminal()));
            !ids.is_empty()
        });
    }

    /// Drop expired sessions and recount the sessions of each scope.
    fn purge_sessions(&mut self, now: u64) {
        self.sessions.retain(|_, st| st.expires > now);
        self.sessions_per_scope.clear();
        for (owner, _) in self.sessions.keys() {
            *self.sessions_per_scope.entry(owner.clone()).or_default() += 1;
        }
    }

    /// One write to `owner`'s session `id`, within `limits` (a removal always fits).
    fn write_session(
        &mut self,
        owner: &Scope,
        id: &str,
        write: SessionWrite<'_>,
        now: u64,
        ttl: Duration,
        limits: SessionLimits,
    ) -> Result<(), StoreError> {
        let key = (owner.clone(), id.to_string());
        let expires = now.saturating_add(ttl.as_millis().try_into().unwrap_or(u64::MAX));
        let live = self.sessions.get(&key).is_some_and(|st| st.expires > now);
        if !live {
            if matches!(write, SessionWrite::Remove(_)) {
                return Ok(());
            }
            // A session that starts holding state counts for its scope and the store.
            let over = |s: &State| {
                let scope_full = limits
                    .max_per_scope
                    .is_some_and(|max| s.sessions_per_scope.get(owner).copied().unwrap_or(0) >= max);
                let store_full = limits.max_sessions.is_some_and(|max| s.sessions.len() as u64 >= max);
                (scope_full, store_full)
            };
            if over(self) != (false, false) {
                self.purge_sessions(now);
            }
            match over(self) {
                (true, _) => return Err(StoreError::Capacity { limit: SESSIONS_PER_SCOPE_LIMIT }),
                (_, true) => return Err(StoreError::Capacity { limit: SESSIONS_LIMIT }),
                _ => {}
            }
        }
        // Written on a copy, so a refused write leaves everything (a new session's place too) as it was.
        let mut st = match self.sessions.get(&key).filter(|_| live) {
            Some(st) => SessionState { expires, fields: st.fields.clone(), bytes: st.bytes },
            None => SessionState { expires, fields: HashMap::new(), bytes: 0 },
        };
        match write {
            SessionWrite::Set(field, value) => {
                let old = st.fields.get(field).map(|v| field.len() + v.len());
                let bytes = st.bytes - old.unwrap_or(0) + field.len() + value.len();
                let counted = || st.fields.keys().filter(|f| f.starts_with(limits.counted_prefix)).count() as u64;
                if old.is_none()
                    && field.starts_with(limits.counted_prefix)
                    && limits.max_fields.is_some_and(|max| counted() >= max)
                {
                    return Err(StoreError::Capacity { limit: SESSION_FIELDS_LIMIT });
                }
                if bytes > st.bytes && limits.max_bytes.is_some_and(|max| bytes as u64 > max) {
                    return Err(StoreError::Capacity { limit: SESSION_BYTES_LIMIT });
                }
                st.fields.insert(field.to_string(), value.to_string());
                st.bytes = bytes;
            }
            SessionWrite::Remove(field) => {
                if let Some(v) = st.fields.remove(field) {
                    st.bytes -= field.len() + v.len();
                }
            }
            SessionWrite::End(field) => {
                st.fields.clear();
                st.fields.insert(field.to_string(), "1".into());
                st.bytes = field.len() + 1;
            }
        }
        // A session that starts holding state counts for its scope (an
        // expired entry under the same key already did).
        if self.sessions.insert(key, st).is_none() {
            *self.sessions_per_scope.entry(owner.clone()).or_default() += 1;
        }
        Ok(())
    }

    /// Compare-and-set `next` over the stored task (see
    /// [`TaskStore::transition_within`]); an applied write is sent to the
    /// watchers while the lock is held, so snapshots stay in order.
    fn compare_and_set(
        &mut self,
        next: &Task,
        writer: Writer,
        quota: Option<u64>,
        max_bytes: Option<usize>,
        now: u64,
        changes: &broadcast::Sender<Task>,
    ) -> Result<Cas, StoreError> {
        let Some(stored) = self.live(&next.id, now) else {
            return Ok(Cas::Conflict(None));
        };
        let fenced = match writer {
            Writer::Client => true,
            Writer::Worker { attempt } => attempt == stored.attempt,
        };
        if stored.revision.checked_add(1) != Some(next.revision) || stored.status.is_terminal() || !fenced {
            return Ok(Cas::Conflict(Some(stored.clone())));
        }
        // What growth_quota holds to the scope's quota, held to the pod's memory too.
        if writer == Writer::Client && !next.status.is_terminal() {
            self.check_growth(next, quota, max_bytes, now)?;
        }
        let Some(stored) = self.tasks.get_mut(&next.id) else {
            return Ok(Cas::Conflict(None));
        };
        *stored = next.clone();
        if next.status.is_terminal() {
            self.forget_active(next);
        }
        self.resize(&next.id, Some(next));
        let _ = changes.send(next.clone());
        Ok(Cas::Applied(next.clone()))
    }

    /// Claim up to `max` items within `shares`: queued first (in order,
    /// skipping the work of scopes without room, which keeps its place),
    /// then lapsed leases (oldest deadline first). Also returns the earliest
    /// deadline still running.
    fn take(
        &mut self,
        worker: &str,
        max: usize,
        lease: Duration,
        shares: &mut Shares,
        changes: &broadcast::Sender<Task>,
    ) -> (Vec<Claim>, Option<Instant>) {
        let now = now_ms();
        let instant = Instant::now();
        let mut claims = Vec::new();
        let mut skipped = VecDeque::new();
        while claims.len() < max {
            let Some(id) = self.queue.pop_front() else {
                break;
            };
            if self.work.get(&id).is_none_or(|w| w.lease.is_some()) {
                continue;
            }
            if !self.admits(&id, shares, now) {
                skipped.push_back(id);
                continue;
            }
            if let Some(claim) = self.claim_item(&id, worker, lease, now, instant, changes) {
                claims.push(claim);
            }
        }
        // What was skipped goes back to the front, in its order.
        while let Some(id) = skipped.pop_back() {
            self.queue.push_front(id);
        }
        if claims.len() < max {
            let mut lapsed: Vec<(Instant, TaskId)> = self
                .work
                .iter()
                .filter_map(|(id, w)| {
                    let l = w.lease.as_ref()?;
                    (l.deadline <= instant).then(|| (l.deadline, id.clone()))
                })
                .collect();
            lapsed.sort();
            for (_, id) in lapsed {
                if claims.len() >= max {
                    break;
                }
                if self.admits(&id, shares, now)
                    && let Some(claim) = self.claim_item(&id, worker, lease, now, instant, changes)
                {
                    claims.push(claim);
                }
            }
        }
        let next_deadline = self.work.values().filter_map(|w| w.lease.as_ref().map(|l| l.deadline)).min();
        (claims, next_deadline)
    }

    /// Whether `shares` admit the work of task `id` (counting it). Work of a
    /// task that is gone is admitted, so that claiming it drops it.
    fn admits(&mut self, id: &TaskId, shares: &mut Shares, now: u64) -> bool {
        if !shares.is_capped() {
            return true;
        }
        match self.live(id, now) {
            Some(task) => {
                let scope = task.scope.clone();
                shares.take(&scope)
            }
            None => true,
        }
    }

    /// Lease one work item to `worker`, recording the claim on the task
    /// (`Event::Claimed`: the fence moves); drop it instead when its task is over.
    fn claim_item(
        &mut self,
        id: &TaskId,
        worker: &str,
        lease: Duration,
        now: u64,
        instant: Instant,
        changes: &broadcast::Sender<Task>,
    ) -> Option<Claim> {
        let Some(task) = self.live(id, now) else {
            self.remove_work(id);
            return None;
        };
        // `None`: the task is terminal, its work is over.
        let Ok(Some(claimed)) = apply(task, &Event::Claimed { worker: worker.to_string() }, now) else {
            self.remove_work(id);
            return None;
        };
        *task = claimed.clone();
        let task = claimed;
        self.next_receipt += 1;
        let receipt = format!("m{}", self.next_receipt);
        let item = self.work.entry(id.clone()).or_default();
        item.deliveries += 1;
        item.lease = Some(Lease {
            worker: worker.to_string(),
            deadline: deadline_after(instant, lease),
            receipt: receipt.clone(),
        });
        let deliveries = item.deliveries;
        // No receivers is fine; sent under the lock so snapshots stay in order.
        let _ = changes.send(task.clone());
        Some(Claim { task, deliveries, receipt })
    }

    /// Whether `claim` still holds its work item's lease.
    fn holds(&mut self, claim: &Claim, now: u64) -> bool {
        let id = &claim.task.id;
        let Some(attempt) = self.live(id, now).map(|t| t.attempt) else {
            return false;
        };
        attempt == claim.task.attempt
            && self.work.get(id).and_then(|w| w.lease.as_ref()).is_some_and(|l| l.receipt == claim.receipt)
    }
}

/// The size a task record counts for: its serialised JSON.
fn record_size(task: &Task) -> usize {
    serde_json::to_vec(task).map_or(0, |v| v.len())
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
    /// (`StoreError::Capacity { limit: "max_tasks" }`, retryable) rather than
    /// forget old ones early. Memory grows by a few KiB per task otherwise.
    pub fn with_max_tasks(mut self, max: usize) -> Self {
        self.max_tasks = Some(max);
        self
    }

    /// Hold at most `max` bytes of task records (serialised), finished ones
    /// included: past it new tasks are refused (`StoreError::Capacity {
    /// limit: "max_memory_bytes" }`, retryable). Updates of existing tasks are
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

#[async_trait::async_trait]
impl TaskStore for MemoryStore {
    async fn create_idempotent(
        &self,
        new: NewTask,
        limits: CreateLimits,
        idempotency: Option<&Idempotency>,
    ) -> Result<Created, StoreError> {
        let (task, active, bytes) = {
            let mut s = self.state();
            let now = now_ms();
            s.maybe_purge(now);
            if let Some(key) = idempotency
                && let Some((fingerprint, id)) = s.idempotency.get(&key.id).cloned()
            {
                match s.live(&id, now) {
                    Some(task) if fingerprint == key.fingerprint => return Ok(Created::Replayed(task.clone())),
                    Some(_) => return Err(StoreError::KeyReused),
                    None => {
                        s.idempotency.remove(&key.id);
                    }
                }
            }
            if let Some(max) = self.max_tasks
                && s.tasks.len() >= max
            {
                s.purge(now);
                if s.tasks.len() >= max {
                    return Err(StoreError::Capacity { limit: "max_tasks" });
                }
            }
            if let Some(max) = self.max_bytes
                && s.bytes >= max
            {
                s.purge(now);
                if s.bytes >= max {
                    return Err(StoreError::Capacity { limit: "max_memory_bytes" });
                }
            }
            if let Some(max) = limits.max_active_per_scope
                && s.count_active(&new.scope, now) >= max
            {
                return Err(StoreError::Capacity { limit: "max_active_tasks_per_scope" });
            }
            let partition = idempotency.map(|key| key.partition(self.partitions));
            let mut id = new_task_id_in(self.partitions, partition);
            while s.tasks.contains_key(&id) {
                id = new_task_id_in(self.partitions, partition);
            }
            let partition = id.partition().unwrap_or(0);
            if let Some(max) = limits.max_queued_per_partition
                && s.work_per_partition.get(&partition).copied().unwrap_or(0) as u64 >= max
            {
                return Err(StoreError::QueueFull);
            }
            let task = Task::new(id.clone(), new, now);
            if let Some(quota) = limits.max_bytes_per_scope {
                let size = record_size(&task);
                let over = |s: &State| (s.scope_bytes.get(&task.scope).copied().unwrap_or(0) + size) as u64 > quota;
                if over(&s) {
                    s.purge(now);
                    if over(&s) {
                        return Err(StoreError::Capacity { limit: crate::BYTES_LIMIT });
                    }
                }
            }
            s.active.entry(task.scope.clone()).or_default().insert(active_key(&task));
            s.tasks.insert(id.clone(), task.clone());
            s.resize(&id, Some(&task));
            s.work.insert(id.clone(), WorkItem::default());
            *s.work_per_partition.entry(partition).or_default() += 1;
            s.queue.push_back(id.clone());
            if let Some(key) = idempotency {
                s.idempotency.insert(key.id.clone(), (key.fingerprint.clone(), id));
            }
            let active = s.active.get(&task.scope).map_or(0, |a| a.len() as u64);
            let bytes = s.scope_bytes.get(&task.scope).copied().unwrap_or(0) as u64;
            (task, active, bytes)
        };
        self.work_ready.notify_waiters();
        crate::metrics::quota_usage(crate::metrics::ACTIVE_TASKS_QUOTA, active, limits.max_active_per_scope);
        crate::metrics::quota_usage(crate::metrics::BYTES_QUOTA, bytes, limits.max_bytes_per_scope);
        Ok(Created::New(task))
    }

    async fn get(&self, scope: &Scope, id: &TaskId) -> Result<Option<Task>, StoreError> {
        let mut s = self.state();
        Ok(s.live(id, now_ms()).filter(|t| &t.scope == scope).map(|t| t.clone()))
    }

    async fn get_view(&self, scope: &Scope, id: &TaskId) -> Result<Option<GetView>, StoreError> {
        // The view straight from the stored task, without cloning all of it.
        let mut s = self.state();
        Ok(s.live(id, now_ms()).filter(|t| &t.scope == scope).map(|t| GetView::of(t)))
    }

    async fn load(&self, id: &TaskId) -> Result<Option<Task>, StoreError> {
        Ok(self.state().live(id, now_ms()).map(|t| t.clone()))
    }

    async fn transition_within(&self, next: &Task, writer: Writer, quota: Option<u64>) -> Result<Cas, StoreError> {
        self.state().compare_and_set(next, writer, quota, self.max_bytes, now_ms(), &self.changes)
    }

    async fn conclude_dead(&self, next: &Task, claim: &Claim, reason: &str) -> Result<Cas, StoreError> {
        let mut s = self.state();
        let cas = s.compare_and_set(next, claim.writer(), None, self.max_bytes, now_ms(), &self.changes)?;
        if matches!(cas, Cas::Applied(_)) && next.status.is_terminal() {
            s.remove_work(&next.id);
            let letter = DeadLetter::of(claim, reason, next.updated_at_ms);
            let expires = letter.expires_at_ms(self.dead_letter_ttl);
            s.dead.record(letter, expires);
        }
        Ok(cas)
    }

    async fn dead_letters(
        &self,
        filter: &DeadLetterFilter,
        after: Option<&str>,
        limit: usize,
    ) -> Result<DeadLetterPage, StoreError> {
        let limit = crate::dead::page_limit(limit);
        Ok(DeadLetterPage::of(self.state().dead.after(filter, after, limit, now_ms()), limit))
    }

    async fn dead_letter(&self, tenant: &str, id: &TaskId) -> Result<Option<DeadLetter>, StoreError> {
        Ok(self.state().dead.get(tenant, id, now_ms()).map(|letter| letter.clone()))
    }

    async fn mark_dead_letter_replayed(
        &self,
        tenant: &str,
        id: &TaskId,
        new: &TaskId,
    ) -> Result<Option<TaskId>, StoreError> {
        let mut s = self.state();
        Ok(s.dead.get(tenant, id, now_ms()).map(|letter| letter.replayed_as.get_or_insert_with(|| new.clone()).clone()))
    }

    async fn discard_dead_letter(&self, tenant: &str, id: &TaskId) -> Result<bool, StoreError> {
        let mut s = self.state();
        Ok(s.dead.get(tenant, id, now_ms()).is_some() && s.dead.remove(id))
    }

    async fn claim_fair(
        &self,
        worker: &str,
        max: usize,
        lease: Duration,
        wait: Duration,
        shares: &Shares,
    ) -> Result<Vec<Claim>, StoreError> {
        let until = deadline_after(Instant::now(), wait);
        loop {
            // Registered before looking, so a create in between still wakes us.
            let notified = self.work_ready.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (claims, next_lapse) = self.state().take(worker, max, lease, &mut shares.clone(), &self.changes);
            if !claims.is_empty() || max == 0 || Instant::now() >= until {
                return Ok(claims);
            }
            let wake = next_lapse.map_or(until, |d| d.min(until));
            let _ = tokio::time::timeout_at(wake.into(), notified).await;
        }
    }

    async fn renew(&self, claim: &Claim, lease: Duration) -> Result<bool, StoreError> {
        let mut s = self.state();
        if !s.holds(claim, now_ms()) {
            return Ok(false);
        }
        if let Some(l) = s.work.get_mut(&claim.task.id).and_then(|w| w.lease.as_mut()) {
            l.deadline = deadline_after(Instant::now(), lease);
        }
        Ok(true)
    }

    async fn remove_work(&self, claim: &Claim) -> Result<(), StoreError> {
        let mut s = self.state();
        let id = &claim.task.id;
        let over = s.live(id, now_ms()).is_none_or(|t| t.status.is_terminal());
        // A stale holder must not drop work another worker now runs.
        if over || s.holds(claim, now_ms()) {
            s.remove_work(id);
        }
        Ok(())
    }

    async fn release(&self, claim: &Claim) -> Result<(), StoreError> {
        {
            let mut s = self.state();
            if !s.holds(claim, now_ms()) {
                return Ok(());
            }
            let id = claim.task.id.clone();
            if let Some(w) = s.work.get_mut(&id) {
                w.lease = None;
            }
            s.queue.push_front(id);
        }
        self.work_ready.notify_waiters();
        Ok(())
    }

    async fn set_session_field(
        &self,
        owner: &Scope,
        session: &str,
        field: &str,
        value: Option<&str>,
        ttl: Duration,
        limits: SessionLimits,
    ) -> Result<(), StoreError> {
        let write = match value {
            Some(v) => SessionWrite::Set(field, v),
            None => SessionWrite::Remove(field),
        };
        self.state().write_session(owner, session, write, now_ms(), ttl, limits)
    }

    async fn end_session(
        &self,
        owner: &Scope,
        session: &str,
        field: &str,
        ttl: Duration,
        limits: SessionLimits,
    ) -> Result<(), StoreError> {
        self.state().write_session(owner, session, SessionWrite::End(field), now_ms(), ttl, limits)
    }

    async fn session_state(&self, owner: &Scope, session: &str) -> Result<HashMap<String, String>, StoreError> {
        let now = now_ms();
        let s = self.state();
        let key = (owner.clone(), session.to_string());
        Ok(s.sessions.get(&key).filter(|st| st.expires > now).map(|st| st.fields.clone()).unwrap_or_default())
    }

    async fn work_stats(&self) -> Result<Vec<PartitionStats>, StoreError> {
        let now = now_ms();
        let mut stats: Vec<PartitionStats> =
            (0..self.partitions).map(|partition| PartitionStats { partition, ..PartitionStats::default() }).collect();
        let s = self.state();
        for (id, item) in &s.work {
            let Some(task) = s.tasks.get(id).filter(|t| !t.is_expired(now)) else {
                continue;
            };
            let p = id.partition().unwrap_or(0).min(self.partitions - 1);
            let entry = &mut stats[usize::from(p)];
            if item.lease.is_some() {
                entry.pending += 1;
                let age = now.saturating_sub(task.created_at_ms);
                entry.oldest_pending_age_ms = Some(entry.oldest_pending_age_ms.map_or(age, |a| a.max(age)));
            } else {
                entry.queued += 1;
                let age = now.saturating_sub(task.created_at_ms);
                entry.oldest_queued_age_ms = Some(entry.oldest_queued_age_ms.map_or(age, |a| a.max(age)));
            }
        }
        Ok(stats)
    }

    async fn watch(&self, ids: &[TaskId]) -> Result<TaskStream, StoreError> {
        let ids: HashSet<TaskId> = ids.iter().cloned().collect();
        let stream = BroadcastStream::new(self.changes.subscribe()).filter_map(move |item| {
            let keep = item.ok().filter(|t| ids.contains(&t.id));
            std::future::ready(keep)
        });
        Ok(Box::pin(stream))
    }
}

impl MemoryStore {
    fn subscribers(&self) -> MutexGuard<'_, Subscribers> {
        self.events.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new subscriber of `topic` ([`BROADCAST`]: the bus), with its own queue.
    fn subscribe_queue(&self, topic: String, limits: QueueLimits) -> EventStream {
        let (tx, rx) = fanout::queue(limits, Overflow::End);
        let mut subs = self.subscribers();
        subs.next_id += 1;
        let id = subs.next_id;
        subs.topics.entry(topic.clone()).or_default().push((id, tx));
        drop(subs);
        Box::pin(Subscription { rx, registry: std::sync::Arc::downgrade(&self.events), topic, id })
    }

    /// Bytes queued for the bus's subscribers now, all queues summed (what
    /// stalled subscribers hold).
    pub fn queued_event_bytes(&self) -> usize {
        self.subscribers().topics.values().flatten().map(|(_, tx)| tx.queued_bytes()).sum()
    }
}

/// The registry name of `topic` (never [`BROADCAST`]).
fn topic_key(topic: &str) -> String {
    format!("t:{topic}")
}

#[async_trait::async_trait]
impl EventBus for MemoryStore {
    async fn publish(&self, event: &str) -> Result<(), StoreError> {
        crate::check_event(event)?;
        // No subscribers is not an error: nobody needed telling.
        self.subscribers().offer(BROADCAST, event);
        Ok(())
    }

    async fn subscribe(&self) -> Result<EventStream, StoreError> {
        Ok(self.subscribe_queue(BROADCAST.to_string(), BUS_QUEUE))
    }

    async fn publish_to(&self, topic: &str, message: &str) -> Result<(), StoreError> {
        self.subscribers().offer(&topic_key(topic), message);
        Ok(())
    }

    async fn subscribe_to(&self, topic: &str) -> Result<EventStream, StoreError> {
        Ok(self.subscribe_queue(topic_key(topic), TOPIC_QUEUE))
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

#[cfg(test)]
mod tests {
    use super::*;
    use presa_tasks::{Event, Work, apply};

    fn new_task(ttl_ms: Option<u64>) -> NewTask {
        NewTask {
            scope: Scope::anonymous(),
            work: Work::default(),
            ttl_ms,
            poll_interval_ms: None,
            status_message: None,
        }
    }

    #[tokio::test]
    async fn a_full_store_refuses_new_tasks_until_old_ones_expire() {
        let store = MemoryStore::new().with_max_tasks(2);
        let new = |ttl| NewTask {
            scope: Scope::anonymous(),
            work: Work::default(),
            ttl_ms: Some(ttl),
            poll_interval_ms: None,
            status_message: None,
        };
        store.create(new(100), NO_LIMITS).await.unwrap();
        store.create(new(60_000), NO_LIMITS).await.unwrap();
        let full = store.create(new(60_000), NO_LIMITS).await.unwrap_err();
        assert!(matches!(full, StoreError::Capacity { limit: "max_tasks" }), "{full:?}");
        tokio::time::sleep(Duration::from_millis(150)).await;
        store.create(new(60_000), NO_LIMITS).await.expect("the expired task made room");
    }

    #[tokio::test]
    async fn memory_is_capped_in_bytes() {
        let one = record_size(&Task::new(crate::util::new_task_id(1), new_task(Some(60_000)), 0));
        let store = MemoryStore::new().with_max_bytes(2 * one + one / 2);
        store.create(new_task(Some(100)), NO_LIMITS).await.unwrap();
        store.create(new_task(Some(60_000)), NO_LIMITS).await.unwrap();
        store.create(new_task(Some(60_000)), NO_LIMITS).await.unwrap();
        assert!(store.bytes() >= 2 * one + one / 2);
        let full = store.create(new_task(Some(60_000)), NO_LIMITS).await.unwrap_err();
        assert!(matches!(full, StoreError::Capacity { limit: "max_memory_bytes" }), "{full:?}");
        assert!(full.is_retryable());
        tokio::time::sleep(Duration::from_millis(150)).await;
        store.create(new_task(Some(60_000)), NO_LIMITS).await.expect("the expired task made room");
        let held = store.state().sizes.values().map(|(_, n)| n).sum::<usize>();
        assert_eq!(store.bytes(), held);
    }

    const NO_LIMITS: CreateLimits =
        CreateLimits { max_active_per_scope: None, max_bytes_per_scope: None, max_queued_per_partition: None };

    #[tokio::test]
    async fn events_reach_every_subscriber() {
        let store = MemoryStore::new();
        store.publish("before anyone listens").await.unwrap();
        let mut a = store.subscribe().await.unwrap();
        let mut b = store.subscribe().await.unwrap();
        store.publish("list_changed").await.unwrap();
        assert_eq!(a.next().await.unwrap().unwrap(), "list_changed");
        assert_eq!(b.next().await.unwrap().unwrap(), "list_changed");
    }

    #[tokio::test]
    async fn a_stalled_subscriber_holds_at_most_its_bound() {
        let store = MemoryStore::new();
        let mut stalled = store.subscribe().await.unwrap();
        let event = "x".repeat(crate::MAX_EVENT_BYTES);
        for _ in 0..1000 {
            store.publish(&event).await.unwrap();
            assert!(store.queued_event_bytes() <= BUS_QUEUE.max_bytes);
        }
        assert_eq!(store.queued_event_bytes(), 0, "ended, its queue freed");
        assert!(matches!(stalled.next().await, Some(Err(StoreError::Lagged))));
        assert!(stalled.next().await.is_none());
        assert!(store.subscribers().topics.is_empty(), "the ended subscriber is forgotten");
    }

    #[tokio::test]
    async fn claims_are_broadcast_to_watchers() {
        let store = MemoryStore::new();
        let task = store.create(new_task(Some(60_000)), NO_LIMITS).await.unwrap();
        let mut watch = store.watch(std::slice::from_ref(&task.id)).await.unwrap();
        let claims = store.claim("w", 1, Duration::from_secs(30), Duration::ZERO).await.unwrap();
        let seen = watch.next().await.unwrap();
        assert_eq!(seen, claims[0].task);
        assert_eq!((seen.attempt, seen.revision), (1, 2));
    }

    #[tokio::test]
    async fn ids_name_a_partition_in_range() {
        let store = MemoryStore::with_partitions(4);
        for _ in 0..32 {
            let t = store.create(new_task(None), NO_LIMITS).await.unwrap();
            assert!(t.id.partition().is_some_and(|p| p < 4), "{}", t.id);
        }
        assert!(format!("{store:?}").contains("tasks: 32"));
    }

    #[tokio::test]
    async fn expired_tasks_are_purged_on_create() {
        let store = MemoryStore::new();
        let gone = store.create(new_task(Some(1)), NO_LIMITS).await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        store.state().last_purge_ms = 0;
        store.create(new_task(None), NO_LIMITS).await.unwrap();
        let s = store.state();
        assert!(!s.tasks.contains_key(&gone.id));
        assert!(!s.work.contains_key(&gone.id));
        assert!(!s.queue.contains(&gone.id));
        assert_eq!(s.tasks.len(), 1);
    }

    #[tokio::test]
    async fn a_stale_holder_cannot_finish_or_release_new_work() {
        let store = MemoryStore::new();
        store.create(new_task(Some(60_000)), NO_LIMITS).await.unwrap();
        let lease = Duration::from_millis(1);
        let old = store.claim("a", 1, lease, Duration::ZERO).await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        let new = store.claim("b", 1, Duration::from_secs(30), Duration::from_secs(2)).await.unwrap();
        assert_eq!(new[0].task.attempt, 2);
        store.remove_work(&old[0]).await.unwrap();
        store.release(&old[0]).await.unwrap();
        assert!(store.renew(&new[0], Duration::from_secs(30)).await.unwrap());
        assert!(store.state().queue.is_empty());
        // The current holder completes and finishes: the work is gone.
        let done = apply(&new[0].task, &Event::Cancel, now_ms()).unwrap().unwrap();
        assert!(matches!(store.transition(&done, Writer::Client).await.unwrap(), Cas::Applied(_)));
        store.remove_work(&new[0]).await.unwrap();
        assert!(store.state().work.is_empty());
    }
}
