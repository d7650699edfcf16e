//! The lease keeper of a running task: renews the claim while the handler
//! runs and stops the handler when the claim is lost or the task ends.

use std::{sync::Arc, time::Duration};

use futures::StreamExt;
use presa_store::{Claim, WorkQueue};
use tokio_util::sync::CancellationToken;

use crate::{
    snapshots::Snapshots,
    store_io::{Verbosity, store_call, store_call_at},
};

/// Renew the lease every third of it; fire `cancel` when the claim is lost
/// or the task turns terminal (seen through the watch or a re-read). The
/// claim is shared with the run (not a copy of its task per run).
pub(super) async fn keep_lease(
    store: Arc<dyn WorkQueue>,
    claim: Arc<Claim>,
    lease: Duration,
    cancel: CancellationToken,
) {
    let id = claim.task.id.clone();
    let changes = match store_call("watch", store.watch_claimed(&id)).await {
        Ok(s) => s,
        Err(_) => futures::stream::pending().boxed(),
    };
    let tick = lease / 3;
    let writer = claim.writer();
    let stop = |t: &presa_tasks::Task| !writer.may_continue(t);
    // Only a snapshot newer than the claim can end the run: one from before
    // it (a late delivery on a subscription this pod already had) names an
    // earlier attempt and would fence the run out.
    let mut snapshots = Snapshots::new(changes, claim.task.revision);
    // A fixed deadline, not a sleep started anew each turn: a handler that
    // changes its task more often than `tick` (a status message per upstream
    // progress line) would otherwise keep the renewal from ever running.
    let mut renew_at = tokio::time::Instant::now() + tick;
    loop {
        tokio::select! {
            task = snapshots.next() => if stop(&task) {
                break;
            },
            _ = tokio::time::sleep_until(renew_at) => {
                renew_at = tokio::time::Instant::now() + tick;
                match store_call_at(Verbosity::Debug, "renew", store.renew(&claim, lease)).await {
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(e) => tracing::warn!(error = %e, "lease renewal failed"),
                }
                match store_call_at(Verbosity::Debug, "load", store.load(&id)).await {
                    Ok(Some(t)) if stop(&t) => break,
                    Ok(None) => break,
                    _ => {}
                }
            }
        }
    }
    cancel.cancel();
}
