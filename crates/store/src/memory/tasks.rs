//! The memory store's [`TaskStore`] (the records): create (with its
//! limits and idempotency key), scoped reads, compare-and-set and watches.
//! Claims and leases are in `work`, dead letters in `dead`.

use std::collections::HashSet;

use futures::StreamExt;
use presa_tasks::{NewTask, Scope, Task, TaskId, wire::GetView};
use tokio::sync::broadcast;
use tokio_stream::wrappers::BroadcastStream;

use crate::{
    claim::Cas,
    claim::Writer,
    error::StoreError,
    idempotency::Created,
    idempotency::Idempotency,
    limits::CreateLimits,
    memory::{MemoryStore, State, WorkItem, active_key, record_size},
    records::TaskStore,
    records::TaskStream,
    util::{new_task_id_in, now_ms},
};
use presa_protocol::Limit;

impl State {
    /// The task unless it is gone or expired; an expired task is dropped
    /// with its work on the spot.
    pub(super) fn live(&mut self, id: &TaskId, now: u64) -> Option<&mut Task> {
        if self.tasks.get(id)?.is_expired(now) {
            self.tasks.remove(id);
            self.remove_work(id);
            self.resize(id, None);
            return None;
        }
        self.tasks.get_mut(id)
    }

    /// Record task `id`'s serialised size (`None`: it is gone).
    pub(super) fn resize(&mut self, id: &TaskId, task: Option<&Task>) {
        let old = match task {
            Some(t) => self.sizes.insert(id.clone(), (t.scope.principal(), record_size(t))),
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
    pub(super) fn check_growth(
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
                && (s.scope_bytes.get(&next.scope.principal()).copied().unwrap_or(0) + growth) as u64 > q
            {
                return Some(Limit::MaxBytesPerScope);
            }
            max_bytes.filter(|max| s.bytes + growth > *max).map(|_| Limit::MaxMemoryBytes)
        };
        if over(self).is_some() {
            self.purge(now);
            // Room in memory may come from finished tasks; a scope's own quota may not.
            if over(self) == Some(Limit::MaxMemoryBytes) {
                self.evict_finished(|s| over(s) == Some(Limit::MaxMemoryBytes));
            }
            if let Some(limit) = over(self) {
                return Err(StoreError::Capacity { limit });
            }
        }
        Ok(())
    }

    /// Non-terminal, non-expired tasks of `scope` (amortised O(log n)).
    pub(super) fn count_active(&mut self, scope: &Scope, now: u64) -> u64 {
        let scope = &scope.principal();
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
    pub(super) fn forget_active(&mut self, task: &Task) {
        if let Some(ids) = self.active.get_mut(&task.scope.principal()) {
            ids.remove(&active_key(task));
            if ids.is_empty() {
                self.active.remove(&task.scope.principal());
            }
        }
    }

    /// Compare-and-set `next` over the stored task (see
    /// [`TaskStore::transition_within`]); an applied write is sent to the
    /// watchers while the lock is held, so snapshots stay in order.
    pub(super) fn compare_and_set(
        &mut self,
        next: &Task,
        writer: Writer,
        quota: Option<u64>,
        max_bytes: Option<usize>,
        changes: &broadcast::Sender<Task>,
    ) -> Result<Cas, StoreError> {
        let now = now_ms();
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
            self.finished.entry(next.scope.principal()).or_default().insert((next.updated_at_ms, next.id.clone()));
        }
        self.resize(&next.id, Some(next));
        let _ = changes.send(next.clone());
        Ok(Cas::Applied(next.clone()))
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
                if !s.evict_finished(|s| s.tasks.len() >= max) {
                    return Err(StoreError::Capacity { limit: Limit::MaxTasks });
                }
            }
            if let Some(max) = self.max_bytes
                && s.bytes >= max
            {
                s.purge(now);
                if !s.evict_finished(|s| s.bytes >= max) {
                    return Err(StoreError::Capacity { limit: Limit::MaxMemoryBytes });
                }
            }
            if let Some(max) = limits.max_active_per_scope
                && s.count_active(&new.scope, now) >= max
            {
                return Err(StoreError::Capacity { limit: Limit::MaxActiveTasksPerScope });
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
                let over = |s: &State| {
                    (s.scope_bytes.get(&task.scope.principal()).copied().unwrap_or(0) + size) as u64 > quota
                };
                if over(&s) {
                    s.purge(now);
                    if over(&s) {
                        return Err(StoreError::Capacity { limit: Limit::MaxBytesPerScope });
                    }
                }
            }
            s.active.entry(task.scope.principal()).or_default().insert(active_key(&task));
            s.tasks.insert(id.clone(), task.clone());
            s.resize(&id, Some(&task));
            s.work.insert(id.clone(), WorkItem::default());
            *s.work_per_partition.entry(partition).or_default() += 1;
            s.queue.push_back(id.clone());
            if let Some(key) = idempotency {
                s.idempotency.insert(key.id.clone(), (key.fingerprint.clone(), id));
            }
            let active = s.active.get(&task.scope.principal()).map_or(0, |a| a.len() as u64);
            let bytes = s.scope_bytes.get(&task.scope.principal()).copied().unwrap_or(0) as u64;
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
        self.state().compare_and_set(next, writer, quota, self.max_bytes, &self.changes)
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
