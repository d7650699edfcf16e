//! [`TaskIndex`]: the admin index part of the store, the task-listing half
//! of [`presa_store::AdminStore`] ([`presa_store::admin`]; the process
//! registry is `nodes.rs`).
//!
//! - Task listings: `create.lua` adds every task to its tenant's index in
//!   its partition, `{prefix}:{pNN}:ix:<hex tenant>`, a stream (one entry per
//!   create, `t` = the task id: a few dozen bytes, where a sorted set's
//!   member costs over a hundred), and the tenant to the partition's
//!   `{prefix}:{pNN}:ixt`. An index expires a little after the last task it names, and
//!   each create drops its two oldest entries whose task is gone, so it holds
//!   about its live tasks. A listing's cursor is an entry's stream id and its
//!   task id (`<ms>-<seq>.<id>`); it asks every partition for its next
//!   cursors (`list_tasks.lua`, one slot each), merges them, reads only the
//!   page's tasks, and filters on what the index does not know (subject,
//!   status, tool), reading further pages (a bounded number of rounds) while
//!   the page is not full. Creation times are Redis's (when it indexed the
//!   create), within a clock skew of the tasks' `createdAt`.
//! - With [`RedisConfig::task_index`](crate::RedisConfig::task_index) off,
//!   creates skip the index and listings answer `StoreError::Unsupported`.

use std::sync::Arc;

use presa_store::{
    StoreError, Task, TaskFilter, TaskPage,
    admin::{Cursor, task_page_limit},
    util::now_ms,
};

use crate::{error::RedisStoreError, keys::Keys, link::Link, records::Records, scripts::script};

// The index's script (see `scripts.rs`), named as its operation.
script!(
    LIST_TASKS,
    "list_tasks.lua",
    "One partition's next cursors of an admin task listing, newest first, dropping expired members."
);

/// The admin task index, over the store's [`Link`], reading the listed
/// tasks from the [`Records`].
#[derive(Debug, Clone)]
pub(crate) struct TaskIndex {
    link: Arc<Link>,
    records: Records,
}

/// Index pages a listing reads at most to fill one page of filtered tasks.
const MAX_ROUNDS: usize = 8;

impl TaskIndex {
    pub(crate) fn new(link: Arc<Link>, records: Records) -> TaskIndex {
        TaskIndex { link, records }
    }

    /// Whether creates index tasks (`--task-index`); listings need it.
    fn indexed(&self) -> Result<(), StoreError> {
        if self.link.cfg.task_index {
            return Ok(());
        }
        Err(StoreError::Unsupported("tasks are not indexed here (--task-index off): no task listing".into()))
    }

    /// Up to `n` index cursors of `filter`'s tenant (or every tenant), newest
    /// first, after `after` (older than it); and whether more follow.
    async fn index_page(
        &self,
        filter: &TaskFilter,
        after: &Bound,
        n: usize,
    ) -> Result<(Vec<Cursor>, bool), StoreError> {
        let keys = &self.link.keys;
        let tenant = filter.tenant.as_deref().map(Keys::tenant_word).unwrap_or_default();
        let lower = filter.created_from_ms.map_or_else(|| "-".to_string(), |ms| ms.to_string());
        let (upper, tied) = after.arguments();
        let now = now_ms();
        let parts = (0..keys.partitions()).map(|p| {
            let mut inv = LIST_TASKS.prepare_invoke();
            inv.key(keys.task_tenants(p))
                .arg(keys.task_index_prefix(p))
                .arg(&tenant)
                .arg(&upper)
                .arg(&lower)
                .arg(n + 1)
                .arg(keys.task_prefix(p))
                .arg(now)
                .arg(&tied);
            async move { self.link.invoke::<Vec<String>>(&inv).await }
        });
        let found = futures::future::try_join_all(parts).await?.into_iter().flatten();
        let mut cursors = Vec::new();
        for text in found {
            cursors.push(
                Cursor::parse(&text).ok_or_else(|| RedisStoreError::Corrupt(format!("task index entry {text:?}")))?,
            );
        }
        cursors.sort_unstable_by(|a, b| b.cmp(a));
        let more = cursors.len() > n;
        cursors.truncate(n);
        Ok((cursors, more))
    }

    /// The live tasks of `cursors` with their cursor, in their order (one
    /// gone meanwhile is left out).
    async fn tasks_of(&self, cursors: &[Cursor]) -> Result<Vec<(Cursor, Task)>, StoreError> {
        let reads = cursors.iter().map(|at| async move {
            let id = presa_store::TaskId::from_wire(at.id.clone());
            Ok::<_, StoreError>(self.records.read(&id).await?.map(|t| (at.clone(), t)))
        });
        Ok(futures::future::try_join_all(reads).await?.into_iter().flatten().collect())
    }
}

/// Where a listing's next read starts: at the newest, below a cursor, or
/// below a time (the end of a creation window).
enum Bound {
    Newest,
    Cursor(Cursor),
    Before(u64),
}

impl Bound {
    /// `list_tasks.lua`'s newest bound and cursor id.
    fn arguments(&self) -> (String, String) {
        match self {
            Bound::Newest => ("+".into(), String::new()),
            Bound::Cursor(c) => (format!("{}-{}", c.ms, c.seq), c.id.clone()),
            Bound::Before(ms) => (format!("({ms}-0"), String::new()),
        }
    }
}

impl TaskIndex {
    pub(crate) async fn list_tasks(
        &self,
        filter: &TaskFilter,
        before: Option<&str>,
        limit: usize,
    ) -> Result<TaskPage, StoreError> {
        self.indexed()?;
        if filter.created_before_ms == Some(0) {
            // Nothing is created before the epoch (and "(0-0" is no stream id).
            return Ok(TaskPage { tasks: Vec::new(), next: None });
        }
        let limit = task_page_limit(limit);
        let cursor = Cursor::read(before)?;
        // The newest bound: the cursor or the creation window's end, whichever is older.
        let mut bound = match (cursor, filter.created_before_ms) {
            (Some(c), Some(ms)) if ms <= c.ms => Bound::Before(ms),
            (Some(c), _) => Bound::Cursor(c),
            (None, Some(ms)) => Bound::Before(ms),
            (None, None) => Bound::Newest,
        };
        let mut tasks = Vec::with_capacity(limit);
        for _ in 0..MAX_ROUNDS {
            let (cursors, more) = self.index_page(filter, &bound, limit).await?;
            let last_read = cursors.last().cloned();
            for (at, task) in self.tasks_of(&cursors).await? {
                if !filter.admits(&task) {
                    continue;
                }
                tasks.push(task);
                if tasks.len() == limit {
                    let rest = more || last_read.as_ref().is_some_and(|l| *l != at);
                    return Ok(TaskPage { tasks, next: rest.then(|| at.to_string()) });
                }
            }
            match (more, last_read) {
                (true, Some(last)) => bound = Bound::Cursor(last),
                _ => return Ok(TaskPage { tasks, next: None }),
            }
        }
        let next = match bound {
            Bound::Cursor(c) => Some(c.to_string()),
            _ => None,
        };
        Ok(TaskPage { tasks, next })
    }

    pub(crate) async fn tenants(&self) -> Result<Vec<String>, StoreError> {
        self.indexed()?;
        let keys = &self.link.keys;
        let now = now_ms();
        let parts = (0..keys.partitions()).map(|p| async move {
            let cmd = redis::cmd("ZRANGE")
                .arg(keys.task_tenants(p))
                .arg(format!("({now}"))
                .arg("+inf")
                .arg("BYSCORE")
                .to_owned();
            self.link.query::<Vec<String>>(crate::conn::Verbosity::Info, &cmd).await
        });
        let mut tenants: Vec<String> = futures::future::try_join_all(parts)
            .await?
            .into_iter()
            .flatten()
            .filter_map(|word| Keys::tenant_of_word(&word))
            .collect();
        tenants.sort_unstable();
        tenants.dedup();
        Ok(tenants)
    }
}
