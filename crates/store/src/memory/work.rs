//! The work side of the memory store: claims in queue order within fair
//! shares, leases that lapse and are recovered, renewal, release and
//! removal of work by the claim's holder only, and the queue statistics.
//! The memory store's [`WorkQueue`], with the concluding writes (a poison
//! task's records its dead letter under the same lock).

use std::{
    collections::VecDeque,
    time::{Duration, Instant},
};

use presa_tasks::{Event, Task, TaskId, apply};
use tokio::sync::broadcast;

use crate::{
    claim::Cas,
    claim::Claim,
    claim::PartitionStats,
    dead::DeadLetter,
    error::StoreError,
    memory::{Lease, MemoryStore, State, WorkItem, deadline_after},
    queue::WorkQueue,
    shares::Shares,
    util::now_ms,
};

impl State {
    /// Drop task `id`'s work item, if any.
    pub(super) fn remove_work(&mut self, id: &TaskId) {
        let Some(item) = self.work.remove(id) else {
            return;
        };
        if let Some(due) = item.due_at_ms {
            self.delayed.remove(&(due, id.clone()));
        }
        if let Some(n) = self.work_per_partition.get_mut(&id.partition().unwrap_or(0)) {
            *n = n.saturating_sub(1);
        }
    }

    /// Queue (at the back) the waiting work that is due at `now`; when the
    /// next item comes due if some still wait.
    fn promote_due(&mut self, now: u64) -> Option<u64> {
        while let Some((due, id)) = self.delayed.first().cloned() {
            if due > now {
                return Some(due);
            }
            self.delayed.pop_first();
            if let Some(item) = self.work.get_mut(&id) {
                *item = WorkItem::default();
                self.queue.push_back(id);
            }
        }
        None
    }

    /// Claim up to `max` items within `shares`: queued first (in order,
    /// skipping the work of scopes without room, which keeps its place),
    /// then lapsed leases (oldest deadline first), after queueing the waiting
    /// work that came due. Also returns when to look again: the earliest
    /// lease deadline still running or waiting work coming due.
    pub(super) fn take(
        &mut self,
        worker: &str,
        max: usize,
        lease: Duration,
        shares: &mut Shares,
        changes: &broadcast::Sender<Task>,
    ) -> (Vec<Claim>, Option<Instant>) {
        let now = now_ms();
        let instant = Instant::now();
        let next_due = self.promote_due(now);
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
        let next_lapse = self.work.values().filter_map(|w| w.lease.as_ref().map(|l| l.deadline)).min();
        let next_due = next_due.map(|due| instant + Duration::from_millis(due.saturating_sub(now)));
        (claims, next_lapse.into_iter().chain(next_due).min())
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
    pub(super) fn holds(&mut self, claim: &Claim, now: u64) -> bool {
        let id = &claim.task.id;
        let Some(attempt) = self.live(id, now).map(|t| t.attempt) else {
            return false;
        };
        attempt == claim.task.attempt
            && self.work.get(id).and_then(|w| w.lease.as_ref()).is_some_and(|l| l.receipt == claim.receipt)
    }
}

#[async_trait::async_trait]
impl WorkQueue for MemoryStore {
    /// Take what there is, else wait for a create, a release or a lapse,
    /// until `wait` is over.
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

    /// Extend the lease while `claim` holds it.
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

    /// Drop the work of an ended task, or of a claim that still holds it.
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

    /// Hand the work back to the front of the queue.
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

    /// Write `next` as the claim's writer and move its work to the delayed set.
    async fn defer(&self, next: &Task, claim: &Claim, due_at_ms: u64) -> Result<Cas, StoreError> {
        let mut s = self.state();
        if !s.holds(claim, now_ms()) {
            let stored = s.live(&claim.task.id, now_ms()).cloned();
            return Ok(Cas::Conflict(stored));
        }
        let cas = s.compare_and_set(next, claim.writer(), None, self.max_bytes, &self.changes)?;
        if matches!(cas, Cas::Applied(_)) && !next.status.is_terminal() {
            let id = next.id.clone();
            if let Some(item) = s.work.get_mut(&id) {
                *item = WorkItem { due_at_ms: Some(due_at_ms), ..WorkItem::default() };
                s.delayed.insert((due_at_ms, id));
            }
        }
        drop(s);
        // A claimer waiting past the due time looks again.
        self.work_ready.notify_waiters();
        Ok(cas)
    }

    async fn retry_now(&self, id: &TaskId) -> Result<bool, StoreError> {
        {
            let mut s = self.state();
            let Some(due) = s.work.get(id).and_then(|w| w.due_at_ms) else {
                return Ok(false);
            };
            s.delayed.remove(&(due, id.clone()));
            let now = now_ms();
            s.delayed.insert((now, id.clone()));
            if let Some(item) = s.work.get_mut(id) {
                item.due_at_ms = Some(now);
            }
        }
        self.work_ready.notify_waiters();
        Ok(true)
    }

    async fn conclude_dead(&self, next: &Task, claim: &Claim, reason: &str) -> Result<Cas, StoreError> {
        let mut s = self.state();
        let cas = s.compare_and_set(next, claim.writer(), None, self.max_bytes, &self.changes)?;
        if matches!(cas, Cas::Applied(_)) && next.status.is_terminal() {
            s.remove_work(&next.id);
            let letter = DeadLetter::of(claim, reason, next.updated_at_ms);
            let expires = letter.expires_at_ms(self.dead_letter_ttl);
            s.dead.record(letter, expires);
        }
        Ok(cas)
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
            if let Some(due) = item.due_at_ms {
                entry.delayed += 1;
                if due <= now {
                    let late = now - due;
                    entry.oldest_due_age_ms = Some(entry.oldest_due_age_ms.map_or(late, |a| a.max(late)));
                }
            } else if item.lease.is_some() {
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
}
