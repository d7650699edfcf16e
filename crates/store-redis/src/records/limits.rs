//! The active-tasks-per-scope limit (`CreateLimits::max_active_per_scope`).
//!
//! A scope's tasks are spread over every partition, so its counter cannot
//! share a hash slot with them and one script cannot check and create on a
//! cluster. The limit is kept in a per-scope sorted set
//! (`Keys::scope_active`) scored by each task's expiry, in two steps:
//!
//! 1. `admit.lua` drops the members whose task has expired (by score, no
//!    task is read), then atomically adds the new id unless the set is full,
//!    so concurrent creates never admit more than the limit between them;
//! 2. `create.lua` then writes the task. When it definitely did not (id
//!    collision, quota refusal) the member is removed again.
//!
//! Members leave the set when their task turns terminal (`forget.lua`
//! removes them after its CAS; on standalone Redis `transition.lua` does,
//! in the same step) or when it expires (the next admission drops
//! them). Beside the tasks the set holds a pad (`admit.lua`), which keeps
//! it a skiplist: adding a task is O(log n), not a scan of a listpack. Admission and refusal cost the same few commands whatever the
//! set's size: no task is ever read or decoded for them.
//!
//! On standalone Redis both steps (and the byte reservation, `quota.rs`) run
//! as one script, `create_scoped.lua`, and the removal is part of the
//! terminal write, so neither race below can happen there.
//!
//! The races, all erring on the side of *refusing*, and each bounded by the
//! task's own lifetime (its TTL, `task_ttl_ms` by default):
//! - a crash (or an ambiguous timeout) between admission and creation leaves a
//!   member without a task;
//! - a crash between a terminal CAS and the removal leaves a finished member.
//!
//! Such a member counts until its task would have expired, then goes like
//! any other. (The scan that used to repair them on every refused create
//! read up to 1,000 tasks per refusal, exactly when the scope was busiest.)

use presa_store::{Scope, Task, TaskId, util::now_ms};

use super::Records;
use crate::{error::RedisStoreError, link::Link};

/// A scope's active-task limit, as the steps a cluster runs around the
/// task's own scripts (standalone Redis runs both inside them).
pub(super) struct ActiveTasks<'s> {
    link: &'s Link,
}

impl Records {
    /// The per-scope active-task limit's steps.
    pub(super) fn active_tasks(&self) -> ActiveTasks<'_> {
        ActiveTasks { link: &self.link }
    }
}

impl ActiveTasks<'_> {
    /// Admit `task` under its scope's limit: the scope's active tasks with
    /// it, or `None` when the scope is full.
    pub(super) async fn admit(&self, task: &Task, limit: u64) -> Result<Option<u64>, RedisStoreError> {
        let mut inv = super::ADMIT.prepare_invoke();
        let expire_at = task.expires_at_ms().map(|ms| ms.to_string()).unwrap_or_default();
        inv.key(self.link.keys.scope_active(&task.scope)).arg(limit).arg(task.id.as_str()).arg(now_ms()).arg(expire_at);
        let admitted: i64 = self.link.invoke(&inv).await?;
        Ok(u64::try_from(admitted).ok().filter(|n| *n > 0))
    }

    /// Best effort: the task no longer counts against its scope (a failure
    /// leaves the member counting until the task's expiry).
    pub(super) async fn forget(&self, scope: &Scope, id: &TaskId) {
        let mut inv = super::FORGET.prepare_invoke();
        inv.key(self.link.keys.scope_active(scope)).arg(id.as_str());
        if let Err(e) = self.link.invoke::<i64>(&inv).await {
            tracing::warn!(error = %e, "could not update the scope's active-task set");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::decode_live;

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
        assert_eq!(decode_live(Some(doc.as_bytes())).unwrap(), None);
        t.ttl_ms = None;
        let doc = serde_json::to_string(&t).unwrap();
        assert_eq!(decode_live(Some(doc.as_bytes())).unwrap(), Some(t));
    }
}
