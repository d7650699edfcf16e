//! A claimed run of a concurrency-limited tool (`Tool::concurrency`) and its
//! permit (see [`crate::concurrency`]): asked for after the claim; without
//! one, the work is put off in line (no try counted, no worker held, the
//! status message saying how many are ahead) until a release wakes it or,
//! at the latest, one lease later.

use presa_store::{Acquired, Claim, Holder, PermitName, util::now_ms};
use presa_tasks::{Caller, Event};

use super::Worker;
use crate::{catalog::RegisteredTool, concurrency::PermitHold, concurrency::ToolConcurrency, store_io::store_call};

impl Worker {
    /// The permit `claim`'s run needs: `Ok(None)` when its tool has no
    /// limit, `Ok(Some(hold))` when it got one, `Err(())` when it waits (its
    /// work was put off, and the run is over for now).
    pub(super) async fn permit_for(&self, claim: &Claim, tool: &RegisteredTool) -> Result<Option<PermitHold>, ()> {
        let Some(limit) = tool.concurrency() else { return Ok(None) };
        let (name, holder) = permit_of(claim, limit, tool);
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
                let event = Event::Wait { message, due_at_ms };
                if self.conclude(claim, event).await {
                    Box::pin(self.recheck(claim, limit, tool)).await;
                }
                Err(())
            }
        }
    }

    /// A waiter whose work was just put off asks once more: a release in
    /// between could not wake it (its work was not waiting yet). Granted
    /// now, the permit is left to its next claim, which takes it over, and
    /// its work is made due at once.
    async fn recheck(&self, claim: &Claim, limit: &ToolConcurrency, tool: &RegisteredTool) {
        let (name, holder) = permit_of(claim, limit, tool);
        let task = &claim.task;
        let asked = self.core.permits().acquire_permit(&name, &holder, limit.terms(self.config.lease));
        if let Ok(Acquired::Granted) = store_call("acquire_permit", asked).await
            && let Err(e) = store_call("retry_now", self.core.work().retry_now(&task.id)).await
        {
            tracing::warn!(error = %e, "making the work due failed; it comes back within a lease");
        }
    }
}

/// The semaphore `claim`'s run counts in, and the run as its holder: its
/// task, fenced by the claim's attempt, in line by its creation time.
fn permit_of(claim: &Claim, limit: &ToolConcurrency, tool: &RegisteredTool) -> (PermitName, Holder) {
    let task = &claim.task;
    let caller = task.work.caller.clone().unwrap_or_else(Caller::anonymous);
    let name = limit.name(tool.name(), &caller, &task.work.arguments);
    (name, Holder { id: task.id.to_string(), fence: task.attempt, order: task.created_at_ms })
}
