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

use presa_tasks::{Status, Task, TaskId};
use serde::{Deserialize, Serialize};

use crate::StoreError;

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

/// A task's place in the listing order (creation time, then id), as a
/// cursor that orders as text too (Redis orders it so): the time in
/// [`TIME_DIGITS`] base-36 digits (lower case, zero-padded), `.`, the id.
pub fn task_cursor(task: &Task) -> String {
    cursor_of(task.created_at_ms, &task.id)
}

/// Base-36 digits of a cursor's time: up to year 5000 in 9, 11 bytes fewer
/// per indexed task than decimal.
pub const TIME_DIGITS: usize = 9;

/// The cursor of task `id` created at `created_at_ms`.
pub fn cursor_of(created_at_ms: u64, id: &TaskId) -> String {
    format!("{}.{id}", time_key(created_at_ms))
}

/// `ms` as a cursor's time: what every cursor of a task created at `ms`
/// starts with, and a bound of a listing by creation time.
pub fn time_key(ms: u64) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = [b'0'; TIME_DIGITS];
    // 36^9 ms is year 5150; a later time is held to the largest key.
    let mut n = ms.min(36u64.pow(TIME_DIGITS as u32) - 1);
    for digit in out.iter_mut().rev() {
        *digit = DIGITS[(n % 36) as usize];
        n /= 36;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether `cursor` is one [`task_cursor`] could have made (a listing
/// refuses any other: it would start nowhere sensible).
pub fn is_cursor(cursor: &str) -> bool {
    cursor.split_once('.').is_some_and(|(time, id)| {
        time.len() == TIME_DIGITS
            && time.bytes().all(|b| b.is_ascii_digit() || b.is_ascii_lowercase())
            && !id.is_empty()
    })
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
    /// Tasks it finished `completed` since it started.
    #[serde(default)]
    pub completed: u64,
    /// Tasks it finished `failed` since it started.
    #[serde(default)]
    pub failed: u64,
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
    fn cursors_order_as_text_and_bad_ones_are_told_apart() {
        let (a, b) = (cursor_of(999, &TaskId::from_wire("p01.b")), cursor_of(1_000, &TaskId::from_wire("p00.a")));
        assert!(a < b, "an earlier task sorts first as text: {a} {b}");
        assert!(is_cursor(&a));
        let times = [0, 35, 36, 1_764_860_000_000, 1_764_860_000_001, u64::MAX];
        for pair in times.windows(2) {
            assert!(time_key(pair[0]) < time_key(pair[1]), "{pair:?}");
        }
        assert_eq!((time_key(0).as_str(), time_key(36).as_str()), ("000000000", "000000010"));
        for bad in ["", "12.x", "00000000A.x", "000000001.", "000000001", "0000000001.x"] {
            assert!(!is_cursor(bad), "{bad:?}");
        }
        assert_eq!((task_page_limit(0), task_page_limit(7), task_page_limit(10_000)), (1, 7, MAX_TASK_PAGE));
    }
}
