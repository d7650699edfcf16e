//! A claimed run of a concurrency-limited tool (`Tool::concurrency`) and its
//! permit (see [`crate::concurrency`]): asked for after the claim; without
//! one, the work is put off in line (no try counted, no worker held, the
//! status message saying how many are ahead) until a release wakes it or,
//! at the latest, one lease later.

use presa_store::{Claim, Holder, util::now_ms};
use presa_tasks::{Caller, Event};

use super::Worker;
use crate::{catalog::RegisteredTool, concurrency::PermitHold};

impl Worker {
    /// The permit `claim`'s run needs: `Ok(None)` when its tool has no
    /// limit, `Ok(Some(hold))` when it got one, `Err(())` when it waits (its
    /// work was put off, and the run is over for now).
    pub(super) async fn permit_for(&self, claim: &Claim, tool: &RegisteredTool) -> Result<Option<PermitHold>, ()> {
        let Some(limit) = tool.concurrency() else { return Ok(None) };
        let task = &claim.task;
        let caller = task.work.caller.clone().unwrap_or_else(Caller::anonymous);
        let name = limit.name(tool.name(), &caller, &task.work.arguments);
        let holder = Holder { id: task.id.to_string(), fence: task.attempt, order: task.created_at_ms };
        match limit.admit_task(self.core.permits(), name, holder, self.config.lease).await {
            Ok(hold) => Ok(Some(hold)),
            Err((in_use, ahead)) => {
                let message = format!(
                    "waiting for a permit of {} ({} at once, {ahead} ahead, {in_use} running)",
                    tool.name(),
                    limit.limit
                );
                tracing::info!(in_use, ahead, "no permit free: waiting in line");
                // Woken by a release; at the latest, asks again after a lease
                // (a holder that died frees its permit within one).
                let due_at_ms = now_ms().saturating_add(self.config.lease.as_millis() as u64);
                let event = Event::Defer { failed: false, reason: "tool concurrency".into(), message, due_at_ms };
                self.conclude(claim, event).await;
                Err(())
            }
        }
    }
}
