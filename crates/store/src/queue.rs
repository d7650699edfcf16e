//! The work queue ([`WorkQueue`]): what workers do with the work a create
//! enqueued. Claims (in queue order, within fair [`Shares`]), leases that
//! are renewed or lapse and are recovered, work handed back or removed,
//! a worker's last write (which removes the work of a task it ends) and the
//! queue's statistics. The records it works on are the [`TaskStore`]'s,
//! hence the supertrait: a claim bumps the record's attempt and a
//! conclusion is a compare-and-set of the record.

use std::time::Duration;

use presa_tasks::{Task, TaskId};

use crate::{claim::Cas, claim::Claim, claim::PartitionStats, error::StoreError, records::TaskStore, shares::Shares};

/// The work queue of the durable task store.
#[async_trait::async_trait]
pub trait WorkQueue: TaskStore {
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

    /// A worker's write under `claim`: [`transition`](TaskStore::transition) as
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

    /// [`conclude`](Self::conclude) of a task the writer gives up (a
    /// worker's last write, which never needs `next` again): a backend that
    /// can answers `Applied` with this task itself rather than a copy (a
    /// copy of a task and its drop are about 6,000 instructions, on every
    /// task a worker ends). Boxed, so the call's future holds a pointer.
    async fn conclude_owned(&self, next: Box<Task>, claim: &Claim) -> Result<Cas, StoreError> {
        self.conclude(&next, claim).await
    }

    /// [`conclude`](Self::conclude) for a poison task (its work was
    /// delivered too often): when the write is applied and ends the task, its
    /// [`DeadLetter`](crate::DeadLetter) (`DeadLetter::of(claim, reason, next.updated_at_ms)`)
    /// is recorded in the same atomic step, kept for the store's dead-letter
    /// retention. A refused write records nothing, so a task has at most one
    /// letter.
    async fn conclude_dead(&self, next: &Task, claim: &Claim, reason: &str) -> Result<Cas, StoreError>;

    /// A worker's write under `claim` that puts the work off (a try failed
    /// in a way worth trying again, `Event::Defer`): `next` (still working)
    /// is written as the claim's writer and, when applied, the claim's work
    /// leaves the queue and waits, holding no worker, until `due_at_ms`;
    /// then it is queued again (behind the work queued before it) and
    /// claimed, fenced and recovered like new work. Waiting work survives
    /// the loss of any process (and, on Redis, a restart with AOF). Work of
    /// a task that ended meanwhile is dropped when it comes due. A refused
    /// write moves nothing.
    async fn defer(&self, next: &Task, claim: &Claim, due_at_ms: u64) -> Result<Cas, StoreError>;

    /// Make task `id`'s waiting work due now (an operator's "retry now"):
    /// `true` when it was waiting. Not scoped: an operator's call.
    async fn retry_now(&self, id: &TaskId) -> Result<bool, StoreError>;

    /// Give unfinished work back so another worker claims it at once.
    async fn release(&self, claim: &Claim) -> Result<(), StoreError>;

    /// The work queue of every partition, for metrics (read on each scrape,
    /// so it should be cheap). The default knows nothing: an empty list.
    async fn work_stats(&self) -> Result<Vec<PartitionStats>, StoreError> {
        Ok(Vec::new())
    }
}
