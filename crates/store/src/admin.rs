//! What an operator reads and steers beyond one task (the admin API,
//! `docs/admin.md`): a listing of tasks across owners, and the registry of
//! live processes (API pods, workers) with their heartbeats and drains.
//!
//! - [`AdminStore::list_tasks`]: newest first, filtered by tenant (always
//!   for a tenant admin), subject, status, tool and creation time, in stable
//!   cursor pages of at most [`MAX_TASK_PAGE`]. A backend keeps an index per
//!   tenant that lives no longer than the tasks it names (Redis: a sorted
//!   set per tenant and partition, written by the create script, expiring
//!   with its last task and pruned on each create).
//! - [`AdminStore::heartbeat`] / [`AdminStore::nodes`]: every process says
//!   every few seconds who it is and what it holds; one that stops is
//!   forgotten once its heartbeat's time to live runs out.
//! - [`AdminStore::drain`]: a worker asked to drain learns it from its next
//!   heartbeat's answer, finishes what it holds and claims nothing new.

use presa_tasks::{Status, Task};
use serde::{Deserialize, Serialize};

use crate::error::StoreError;

/// The most tasks one page of [`AdminStore::list_tasks`] holds, whatever
/// the caller asks for.
pub const MAX_TASK_PAGE: usize = 100;

/// A page size as asked, held to `1..=MAX_TASK_PAGE`.
pub fn task_page_limit(asked: usize) -> usize {
    asked.clamp(1, MAX_TASK_PAGE)
}

/// Which tasks a listing returns. Every field narrows it; `tenant: None`
/// (every tenant) is for an admin of the whole cluster only.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskFilter {
    /// Only this tenant's tasks.
    pub tenant: Option<String>,
    /// Only this subject's tasks (of any tenant the filter admits).
    pub subject: Option<String>,
    /// Only tasks in this status.
    pub status: Option<Status>,
    /// Only tasks running this tool.
    pub tool: Option<String>,
    /// Only tasks created at or after this time, Unix ms.
    pub created_from_ms: Option<u64>,
    /// Only tasks created before this time, Unix ms.
    pub created_before_ms: Option<u64>,
}

impl TaskFilter {
    /// Whether `task` passes every field of the filter.
    pub fn admits(&self, task: &Task) -> bool {
        self.tenant.as_ref().is_none_or(|t| *t == task.scope.tenant)
            && self.subject.as_ref().is_none_or(|s| *s == task.scope.subject)
            && self.status.is_none_or(|s| s == task.status)
            && self.tool.as_ref().is_none_or(|t| *t == task.work.tool)
            && self.created_from_ms.is_none_or(|from| task.created_at_ms >= from)
            && self.created_before_ms.is_none_or(|before| task.created_at_ms < before)
    }
}

/// A place in a task listing's order, newest first: a time (Unix ms), a
/// sequence number within it, then the task id. Written `<ms>-<seq>.<id>`:
/// the memory store places a task at its creation time (sequence 0), Redis
/// at its index entry's stream id (the time Redis indexed the create).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cursor {
    /// Unix ms.
    pub ms: u64,
    /// Order within the millisecond.
    pub seq: u64,
    /// The task id.
    pub id: String,
}

impl Cursor {
    /// The place of `task` by its creation time.
    pub fn of(task: &Task) -> Cursor {
        Cursor { ms: task.created_at_ms, seq: 0, id: task.id.as_str().to_string() }
    }

    /// A cursor as [`Cursor`]'s `Display` wrote it; `None` for anything else
    /// (a listing refuses it: it would start nowhere sensible).
    pub fn parse(text: &str) -> Option<Cursor> {
        let (at, id) = text.split_once('.')?;
        let (ms, seq) = at.split_once('-')?;
        let number = |s: &str| s.bytes().all(|b| b.is_ascii_digit()).then(|| s.parse::<u64>().ok()).flatten();
        (!id.is_empty()).then_some(())?;
        Some(Cursor { ms: number(ms)?, seq: number(seq)?, id: id.to_string() })
    }

    /// A listing's `before`, parsed: [`StoreError::BadCursor`] for one that
    /// [`Cursor::parse`] refuses.
    pub fn read(before: Option<&str>) -> Result<Option<Cursor>, StoreError> {
        before.map(|b| Cursor::parse(b).ok_or_else(|| StoreError::BadCursor(b.to_string()))).transpose()
    }
}

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}.{}", self.ms, self.seq, self.id)
    }
}

/// One page of a task listing.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TaskPage {
    /// The tasks, newest first.
    pub tasks: Vec<Task>,
    /// Where the next (older) page starts (pass it as `before`); `None`:
    /// this was the last.
    pub next: Option<String>,
}

/// A live process, as its last heartbeat described it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeInfo {
    /// Unique per process run (a new one at every start).
    pub id: String,
    /// `api`, `worker` or `gateway`.
    pub role: String,
    /// The presa version it runs.
    pub version: String,
    /// When it started, Unix ms.
    pub started_at_ms: u64,
    /// When it sent this heartbeat, Unix ms.
    pub heartbeat_at_ms: u64,
    /// Work it runs now (a worker's slots in use; 0 for an API pod).
    pub slots_in_use: u64,
    /// Work it may run at once (0 for an API pod).
    pub slots: u64,
    /// The tools it serves.
    pub tools: Vec<String>,
    /// Whether it was asked to drain (it claims nothing new).
    #[serde(default)]
    pub draining: bool,
    /// Tasks it created since it started (an API pod's or an embedded
    /// process's `tools/call`s that made a task; 0 for a worker).
    #[serde(default)]
    pub created: u64,
    /// Tasks it finished `completed` since it started.
    #[serde(default)]
    pub completed: u64,
    /// Tasks it finished `failed` since it started.
    #[serde(default)]
    pub failed: u64,
    /// A gateway process's upstreams (none for other processes; absent from
    /// older heartbeats), bounded by [`crate::upstreams::bounded`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upstreams: Vec<crate::upstreams::UpstreamReport>,
    /// A gateway process's config file as it serves it (`None` for other
    /// processes and older heartbeats).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<crate::upstreams::ConfigReport>,
}

/// Reads and acts of the admin API that no single task's owner makes.
#[async_trait::async_trait]
pub trait AdminStore: Send + Sync + std::fmt::Debug + 'static {
    /// Up to [`task_page_limit`]`(limit)` live tasks passing `filter`, newest
    /// first, older than the cursor `before` (a [`TaskPage::next`], or
    /// `None` for the newest). Pages are stable: a task created after the
    /// listing began is newer than every cursor, so it never appears on a
    /// later page. A page may hold fewer tasks than `limit` (filtered out,
    /// or expired while read) and still have a `next`; only `next: None`
    /// ends the listing.
    async fn list_tasks(&self, filter: &TaskFilter, before: Option<&str>, limit: usize)
    -> Result<TaskPage, StoreError>;

    /// The tenants that have live tasks (or had, until their index expires), sorted.
    async fn tenants(&self) -> Result<Vec<String>, StoreError>;

    /// Record `node`'s heartbeat, to be forgotten `ttl` from now unless
    /// another comes. Answers whether the node was asked to drain.
    async fn heartbeat(&self, node: &NodeInfo, ttl: std::time::Duration) -> Result<bool, StoreError>;

    /// Every node whose heartbeat has not run out, with `draining` as asked.
    async fn nodes(&self) -> Result<Vec<NodeInfo>, StoreError>;

    /// Ask node `id` to drain; the node as last seen (now `draining`), or
    /// `None` when no live node has that id. Asking again changes nothing.
    async fn drain(&self, id: &str) -> Result<Option<NodeInfo>, StoreError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_read_back_order_by_time_then_sequence_then_id_and_bad_ones_are_told_apart() {
        let c = |ms, seq, id: &str| Cursor { ms, seq, id: id.into() };
        let ordered = [c(999, 7, "p09.z"), c(1_000, 0, "p00.b"), c(1_000, 0, "p01.a"), c(1_000, 1, "p00.a")];
        for pair in ordered.windows(2) {
            assert!(pair[0] < pair[1], "{pair:?}");
        }
        for cursor in &ordered {
            assert_eq!(Cursor::parse(&cursor.to_string()).as_ref(), Some(cursor));
        }
        for bad in ["", "12.x", "12-x.y", "-1.x", "1-1.", "1-1", "1.2-3", "+1-2.x", "99999999999999999999999-1.x"] {
            assert_eq!(Cursor::parse(bad), None, "{bad:?}");
        }
        assert_eq!((task_page_limit(0), task_page_limit(7), task_page_limit(10_000)), (1, 7, MAX_TASK_PAGE));
    }
}
