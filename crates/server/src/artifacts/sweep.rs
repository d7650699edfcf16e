//! The sweeper: an artifact lives as long as its task. Every worker runs
//! [`sweep`] now and then: it lists the store, and removes every artifact
//! whose task the task store no longer has (expired, or lost with an
//! embedded process), once its newest object is older than a grace period
//! (so a write racing the task's creation is never swept). Running it on
//! several workers at once is harmless: a removal is idempotent.

use std::{
    collections::HashMap,
    time::{Duration, SystemTime},
};

use futures::TryStreamExt;
use presa_artifacts::ArtifactError;
use presa_store::TaskStore;
use presa_tasks::TaskId;
use tokio_util::sync::CancellationToken;

use super::{Artifacts, task_of, uri_key};

/// How old an orphan's newest object must be before it is swept.
pub const SWEEP_GRACE: Duration = Duration::from_secs(60);

/// What one sweep did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Swept {
    /// Tasks whose artifacts were looked at.
    pub tasks: usize,
    /// Objects removed.
    pub removed: u64,
}

/// One pass: removes the artifacts of every task `tasks` does not have, whose
/// newest object is older than `grace`.
pub async fn sweep(artifacts: &Artifacts, tasks: &dyn TaskStore, grace: Duration) -> Result<Swept, ArtifactError> {
    let store = artifacts.store();
    let mut newest: HashMap<String, SystemTime> = HashMap::new();
    let mut listed = store.list("");
    while let Some(a) = listed.try_next().await? {
        // `<owner>/<taskId>/…`: one entry per owner and task.
        if let (Some((owner, _)), Some(task)) = (a.key.split_once('/'), task_of(uri_key(&a.key))) {
            let at = newest.entry(format!("{owner}/{task}")).or_insert(a.last_modified);
            *at = (*at).max(a.last_modified);
        }
    }
    let now = SystemTime::now();
    let mut swept = Swept { tasks: newest.len(), removed: 0 };
    for (task, at) in newest {
        if now.duration_since(at).unwrap_or_default() < grace {
            continue;
        }
        match tasks.load(&TaskId::from_wire(uri_key(&task))).await {
            Ok(None) => swept.removed += store.delete_prefix(&task).await?,
            Ok(Some(_)) => {}
            Err(e) => tracing::debug!(error = %e, task, "sweeper: the task store did not answer; next time"),
        }
    }
    Ok(swept)
}

/// Runs [`sweep`] every [`Artifacts::sweep_every`] until `shutdown`.
pub async fn sweep_until(artifacts: Artifacts, tasks: std::sync::Arc<dyn TaskStore>, shutdown: CancellationToken) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(artifacts.sweep_every()) => {}
            () = shutdown.cancelled() => return,
        }
        match sweep(&artifacts, tasks.as_ref(), SWEEP_GRACE.min(artifacts.sweep_every())).await {
            Ok(s) if s.removed > 0 => tracing::info!(tasks = s.tasks, removed = s.removed, "swept expired artifacts"),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "sweeping artifacts failed; next time"),
        }
    }
}
