//! The active-tasks-per-scope limit (`CreateLimits::max_active_per_scope`).
//!
//! A scope's tasks are spread over every partition, so its counter cannot
//! share a hash slot with them and one script cannot check and create on a
//! cluster. The limit is kept in a per-scope sorted set
//! (`Keys::scope_active`) in two steps:
//!
//! 1. `admit.lua` atomically adds the new id unless the set is full, so
//!    concurrent creates never admit more than the limit between them;
//! 2. `create.lua` then writes the task. When it definitely did not (id
//!    collision) the member is removed again.
//!
//! Members leave the set when their task turns terminal (`transition` removes
//! them after its CAS). The races, all erring on the side of *refusing*:
//! - a crash (or an ambiguous timeout) between admission and creation leaves a
//!   member without a task;
//! - a crash between a terminal CAS and the removal leaves a finished member;
//! - an expired task stays a member (Redis reaps the hash, not the member),
//!   until the set itself expires: `admit.lua` keeps the set's expiry at the
//!   latest of its tasks' (so a scope whose tasks all expired leaves no key).
//!
//! So when a create is refused, [`RedisStore::admit`] first *repairs* the set:
//! it reads each member's task and drops members that are terminal, expired,
//! or gone for longer than [`GHOST_GRACE_MS`] (a member younger than that
//! may belong to a create still in flight), then tries once more. The only
//! over-admission left is a create whose `create.lua` is delayed past the
//! grace period and then still runs — far beyond every command timeout.

use crate::{RedisStore, RedisStoreError, conn::Verbosity, scripts};
use futures::future::join_all;
use presa_store::{Scope, StoreError, Task, TaskId, util::now_ms};

/// A member whose task does not exist is only dropped once it is this old.
pub(crate) const GHOST_GRACE_MS: u64 = 60_000;
/// How many members one repair looks at (the oldest first).
const REPAIR_SCAN: isize = 1000;

impl RedisStore {
    /// Admit `task` under its scope's limit, repairing the set once when full.
    pub(crate) async fn admit(&self, task: &Task, limit: u64) -> Result<(), StoreError> {
        if self.try_admit(task, limit).await? {
            return Ok(());
        }
        if limit > 0 && self.repair_active(&task.scope).await? > 0 && self.try_admit(task, limit).await? {
            return Ok(());
        }
        Err(StoreError::Capacity { limit: "max_active_tasks_per_scope" })
    }

    async fn try_admit(&self, task: &Task, limit: u64) -> Result<bool, RedisStoreError> {
        let mut inv = scripts::ADMIT.prepare_invoke();
        let expire_at = task.expires_at_ms().map(|ms| ms.to_string()).unwrap_or_default();
        inv.key(self.inner.keys.scope_active(&task.scope))
            .arg(limit)
            .arg(task.id.as_str())
            .arg(now_ms())
            .arg(expire_at);
        let admitted: i64 = self.invoke(&inv).await?;
        Ok(admitted == 1)
    }

    /// Drop members that no longer count; returns how many were dropped.
    async fn repair_active(&self, scope: &Scope) -> Result<usize, RedisStoreError> {
        let key = self.inner.keys.scope_active(scope);
        let range = redis::cmd("ZRANGE").arg(&key).arg(0).arg(REPAIR_SCAN - 1).arg("WITHSCORES").to_owned();
        let members: Vec<(String, u64)> = self.query(Verbosity::Info, &range).await?;
        let now = now_ms();
        let checks = members.into_iter().map(|(id, admitted_at)| async move {
            let task = self.read(&TaskId::from_wire(id.as_str())).await;
            let stale = match task {
                Ok(Some(t)) => t.status.is_terminal(),
                Ok(None) => now.saturating_sub(admitted_at) > GHOST_GRACE_MS,
                // Corrupt records never finish: they do not count either.
                Err(RedisStoreError::Corrupt(_)) => true,
                Err(e) => return Err(e),
            };
            Ok(stale.then_some(id))
        });
        let stale: Vec<String> =
            join_all(checks).await.into_iter().collect::<Result<Vec<_>, _>>()?.into_iter().flatten().collect();
        if stale.is_empty() {
            return Ok(0);
        }
        let removed: usize = self.query(Verbosity::Info, redis::cmd("ZREM").arg(&key).arg(&stale)).await?;
        tracing::info!(removed, "repaired a scope's active-task set");
        Ok(removed)
    }

    /// Best effort: the task no longer counts against its scope (a failure
    /// is repaired the next time the scope hits its limit).
    pub(crate) async fn forget_active(&self, scope: &Scope, id: &TaskId) {
        let key = self.inner.keys.scope_active(scope);
        if let Err(e) = self.query::<i64>(Verbosity::Info, redis::cmd("ZREM").arg(&key).arg(id.as_str())).await {
            tracing::warn!(error = %e, "could not update the scope's active-task set");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::decode_live;

    #[test]
    fn grace_outlasts_every_timeout() {
        assert!(GHOST_GRACE_MS > 10 * presa_store::DEFAULT_OP_TIMEOUT.as_millis() as u64);
    }

    #[test]
    fn expired_docs_read_as_gone() {
        let mut t = Task::new(
            presa_store::util::new_task_id(4),
            presa_store::NewTask {
                scope: Scope::anonymous(),
                work: Default::default(),
                ttl_ms: Some(1),
                poll_interval_ms: None,
                status_message: None,
            },
            1,
        );
        let doc = serde_json::to_string(&t).unwrap();
        assert_eq!(decode_live(Some(&doc)).unwrap(), None);
        t.ttl_ms = None;
        let doc = serde_json::to_string(&t).unwrap();
        assert_eq!(decode_live(Some(&doc)).unwrap(), Some(t));
    }
}
