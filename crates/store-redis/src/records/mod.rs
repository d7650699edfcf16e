//! [`Records`]: the task records part of the store, what
//! [`presa_store::TaskStore`] is about. It owns the record scripts:
//! creating a task with its work entry (`create.rs`: `create.lua`, or
//! `create_scoped.lua` where one script may take the scope's keys), reads
//! (here: the doc of `record.rs`'s layout, or only the `tasks/get` view),
//! the compare-and-set write (`write.rs`: `transition.lua`, or
//! `conclude_dead.lua` with a dead letter), watches of committed snapshots,
//! and the scope steps a cluster runs around them: the active-task limit
//! (`limits.rs`: `admit.lua`) and the byte quota (`quota.rs`: `quota.lua`,
//! `resize.lua`). Concurrent creates (standalone) and a worker's
//! concluding writes are group-committed (`group.rs`: `batch.lua` over
//! `create_scoped.lua` or `transition.lua`).

use std::sync::Arc;

use futures::StreamExt;
use presa_store::{GetView, Task, TaskId, TaskStream, util::now_ms};

use crate::{
    batch::Batcher,
    conn::Verbosity,
    error::RedisStoreError,
    link::Link,
    record::{decode, decode_live, doc_start},
};

mod create;
mod group;
mod limits;
mod quota;
mod write;

pub(crate) use write::Transitioned;

use group::Scripted;
use std::sync::LazyLock;

use crate::scripts::{BYTES, GROUP, Lua, TASK_BYTES, TASK_IDEMPOTENCY, composed, function, lua, script};

// The records' scripts (see `scripts.rs`), each named as its operation.
script!(@ TASK_IDEMPOTENCY, CREATE, "create.lua", Info, "Create a task and XADD its work entry, unless the task (or its idempotency key) exists.");
script!(@ TASK_IDEMPOTENCY, REPLAY, "replay.lua", Info, "A keyed create's first step on a cluster: the task its idempotency key made, if any.");
script!(@ TASK_BYTES, TRANSITION, "transition.lua", Info, "Compare-and-set a task (rev, fence, not terminal), publish it, count its bytes.");
script!(@ GROUP, ADMIT, "admit.lua", Info, "Add a task to its scope's active set unless the set is at the limit.");
script!(@ GROUP, FORGET, "forget.lua", Info, "Remove a task from its scope's active set (cluster).");
script!(@ BYTES, QUOTA, "quota.lua", Info, "Reserve a new task's bytes under its scope's byte quota unless it would be exceeded.");
script!(@ BYTES, RESIZE, "resize.lua", Info, "Count a task at its new size under its scope's byte quota (cluster), refusing growth past it.");
/// `create_scoped.lua`'s preludes: `task.lua`, `bytes.lua` (whose
/// `quota_reserve` is `quota.lua`'s step), `idempotency.lua` and the bodies
/// of `admit.lua` and `create.lua`, each as a local function of its own
/// KEYS and ARGV.
fn create_scoped_preludes() -> Vec<String> {
    vec![
        TASK_BYTES.to_owned(),
        lua!("idempotency.lua").to_owned(),
        function("admit", lua!("admit.lua")),
        function("create", lua!("create.lua")),
    ]
}
/// `create_scoped.lua` behind its preludes ([`create_scoped_preludes`]).
static CREATE_SCOPED: LazyLock<Lua> = LazyLock::new(|| {
    composed("create_scoped", &[create_scoped_preludes(), vec![lua!("create_scoped.lua").to_owned()]].concat())
});
/// `batch.lua` over `create_scoped.lua` (as the function `each`, behind its
/// preludes): a batch of creates (`group.rs`).
static CREATE_BATCH: LazyLock<Lua> = LazyLock::new(|| {
    let each = vec![function("each", lua!("create_scoped.lua")), lua!("batch.lua").to_owned()];
    composed("create_batch", &[create_scoped_preludes(), each].concat())
});
/// `batch.lua` over `transition.lua` (as the function `each`, behind
/// `task.lua` and `bytes.lua`): a batch of a worker's concluding writes (`group.rs`).
static TRANSITION_BATCH: LazyLock<Lua> = LazyLock::new(|| {
    composed(
        "transition_batch",
        &[TASK_BYTES.to_owned(), function("each", lua!("transition.lua")), lua!("batch.lua").to_owned()],
    )
});

/// The task records, over the store's [`Link`].
#[derive(Debug, Clone)]
pub(crate) struct Records {
    link: Arc<Link>,
    /// Where the scope's steps of a create or a write run, fixed by the topology.
    scope_steps: ScopeSteps,
    /// Group commit of creates (`create_scoped.lua` calls; standalone only,
    /// a cluster's creates run in steps), `None` with `batch_max` 1.
    creates: Option<Batcher<Scripted>>,
    /// Group commit of a worker's concluding writes (`transition.lua`
    /// calls), `None` with `batch_max` 1.
    concludes: Option<Batcher<Scripted>>,
}

/// Where the scope's steps (the active-task limit, the byte quota) of a
/// create or a write run: fixed when the records are built, by the
/// [`Topology`](crate::topology::Topology).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ScopeSteps {
    /// In the task's own script (standalone: one script may take the
    /// scope's keys and the task's).
    InScript,
    /// As scripts of their own around the task's (a cluster: the scope's
    /// keys live in another slot than the task's).
    Around,
}

impl Records {
    pub(crate) fn new(link: Arc<Link>) -> Records {
        let scope_steps = if link.topology.spans_slots() { ScopeSteps::InScript } else { ScopeSteps::Around };
        let creates = match scope_steps {
            ScopeSteps::InScript => Scripted::batcher(&link, &CREATE_SCOPED, &CREATE_BATCH),
            ScopeSteps::Around => None,
        };
        let concludes = Scripted::batcher(&link, &TRANSITION, &TRANSITION_BATCH);
        Records { link, scope_steps, creates, concludes }
    }

    /// The stored task (any scope); `None` when gone or expired.
    pub(crate) async fn read(&self, id: &TaskId) -> Result<Option<Task>, RedisStoreError> {
        let Some(key) = self.link.keys.task(id) else {
            return Ok(None);
        };
        decode_live(self.read_doc(&key).await?.as_deref())
    }

    /// What `tasks/get` needs of the stored task (any scope): only the
    /// fields of the view are decoded. `None` when gone or expired.
    pub(crate) async fn read_view(&self, id: &TaskId) -> Result<Option<GetView>, RedisStoreError> {
        let Some(key) = self.link.keys.task(id) else {
            return Ok(None);
        };
        let Some(doc) = self.read_doc(&key).await? else {
            return Ok(None);
        };
        let view = GetView::from_doc(&doc).map_err(|e| RedisStoreError::Corrupt(e.to_string()))?;
        Ok((!view.is_expired(now_ms())).then_some(view))
    }

    /// Committed snapshots of the tasks `ids`, from now on (ids that name
    /// no task never change).
    pub(crate) async fn watch(&self, ids: &[TaskId]) -> Result<TaskStream, RedisStoreError> {
        let channels: Vec<String> = ids.iter().filter_map(|id| self.link.keys.events(id)).collect();
        if channels.is_empty() {
            return Ok(Box::pin(futures::stream::pending()));
        }
        let sub = self.link.hub.subscribe(channels).await?;
        Ok(Box::pin(sub.filter_map(|d| async move {
            let d = d.ok()?;
            match decode(&d.payload) {
                Ok(task) => Some(task),
                Err(e) => {
                    tracing::warn!(channel = %d.channel, error = %e, "undecodable task snapshot");
                    None
                }
            }
        })))
    }

    /// The doc of the task at `key`; `None` when there is no task there.
    async fn read_doc(&self, key: &str) -> Result<Option<Vec<u8>>, RedisStoreError> {
        match self.link.query(Verbosity::Info, redis::cmd("HGET").arg(key).arg("doc")).await {
            // A string record of an earlier release.
            Err(RedisStoreError::Redis(e)) if e.code() == Some("WRONGTYPE") => {}
            other => return other,
        }
        let value: Option<Vec<u8>> = self.link.query(Verbosity::Info, redis::cmd("GET").arg(key)).await?;
        let Some(mut value) = value else {
            return Ok(None);
        };
        let Some(start) = doc_start(&value) else {
            return Err(RedisStoreError::Corrupt(format!("{key} holds no task record")));
        };
        value.drain(..start);
        Ok(Some(value))
    }

    /// [`Self::read_doc`], as text.
    pub(crate) async fn read_doc_text(&self, key: &str) -> Result<Option<String>, RedisStoreError> {
        let doc = self.read_doc(key).await?;
        doc.map(String::from_utf8).transpose().map_err(|e| RedisStoreError::Corrupt(format!("{key}: {e}")))
    }
}
