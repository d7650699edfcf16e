//! [`Admin::usage`]: a tenant's use of its principals' quotas, read from
//! its live tasks, one scan at a time per process and kept a while
//! ([`Admin::with_usage_cache`]), since a scan costs thousands of store reads.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use presa_store::TaskFilter;

use super::{Admin, AdminError, Operator};
use crate::store_io::store_call;

/// Tasks a usage report reads at most (then it says it is partial).
pub const MAX_USAGE_TASKS: usize = 5_000;

/// One principal's use of its quotas ([`Admin::usage`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PrincipalUsage {
    /// The principal.
    pub subject: String,
    /// Its live tasks (any status, not expired).
    pub live: u64,
    /// Those not ended: what `--max-active-tasks-per-scope` counts.
    pub active: u64,
    /// Its live tasks' size, serialised: what `--max-bytes-per-scope` counts.
    pub bytes: u64,
    /// Live tasks by status (`working`, `completed`…).
    pub by_status: std::collections::BTreeMap<&'static str, u64>,
}

/// A tenant's usage per principal, against the per-principal quotas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Usage {
    /// The tenant.
    pub tenant: String,
    /// Its principals with live tasks, most active first.
    pub principals: Vec<PrincipalUsage>,
    /// `--max-active-tasks-per-scope` (`None`: no limit).
    pub max_active_per_principal: Option<u64>,
    /// `--max-bytes-per-scope` (`None`: no limit).
    pub max_bytes_per_principal: Option<u64>,
    /// Tasks read.
    pub scanned: usize,
    /// Whether every live task was read (`false`: the tenant has more than
    /// [`MAX_USAGE_TASKS`], and the figures cover the newest).
    pub complete: bool,
    /// When the tasks were read, Unix ms (an answer may be this old: see
    /// [`Admin::with_usage_cache`]).
    pub as_of_ms: u64,
}

/// The default of [`Admin::with_usage_cache`]: a tenant's usage is read at
/// most once in 5 s per process.
pub const DEFAULT_USAGE_CACHE: Duration = Duration::from_secs(5);

/// Usage answers kept for a while, and the one scan running at a time: a
/// scan reads up to [`MAX_USAGE_TASKS`] tasks (tens of thousands of store
/// commands on Redis), so repeated or concurrent `/usage` calls must not
/// each cost that.
#[derive(Debug)]
pub(super) struct UsageCache {
    fresh_for: Duration,
    scan: tokio::sync::Mutex<()>,
    answers: std::sync::Mutex<HashMap<String, (Instant, Usage)>>,
}

impl UsageCache {
    pub(super) fn new(fresh_for: Duration) -> Self {
        UsageCache { fresh_for, scan: tokio::sync::Mutex::new(()), answers: Default::default() }
    }

    fn fresh(&self, tenant: &str) -> Option<Usage> {
        let answers = self.answers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        answers.get(tenant).filter(|(at, _)| at.elapsed() < self.fresh_for).map(|(_, u)| u.clone())
    }

    fn keep(&self, usage: &Usage) {
        let mut answers = self.answers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        answers.retain(|_, (at, _)| at.elapsed() < self.fresh_for);
        answers.insert(usage.tenant.clone(), (Instant::now(), usage.clone()));
    }
}

impl Admin {
    /// `tenant`'s use of its principals' quotas, read from its live tasks
    /// (newest first, at most [`MAX_USAGE_TASKS`]).
    pub async fn usage(&self, op: &Operator, tenant: Option<String>) -> Result<Usage, AdminError> {
        let tenant = op.one_tenant(tenant)?;
        if let Some(kept) = self.usage.fresh(&tenant) {
            return Ok(kept);
        }
        let _scan = self.usage.scan.lock().await;
        // Another call may have scanned this tenant while this one waited.
        if let Some(kept) = self.usage.fresh(&tenant) {
            return Ok(kept);
        }
        let usage = self.scan_usage(tenant).await?;
        self.usage.keep(&usage);
        Ok(usage)
    }

    async fn scan_usage(&self, tenant: String) -> Result<Usage, AdminError> {
        let as_of_ms = presa_store::util::now_ms();
        let filter = TaskFilter { tenant: Some(tenant.clone()), ..TaskFilter::default() };
        let mut by_subject: HashMap<String, PrincipalUsage> = HashMap::new();
        let (mut scanned, mut before, mut complete) = (0, None::<String>, false);
        while scanned < MAX_USAGE_TASKS {
            let page = self.core.admin().list_tasks(&filter, before.as_deref(), presa_store::admin::MAX_TASK_PAGE);
            let page = store_call("list_tasks", page).await?;
            for task in &page.tasks {
                let entry = by_subject.entry(task.scope.subject.clone()).or_default();
                entry.live += 1;
                entry.active += u64::from(!task.status.is_terminal());
                entry.bytes += presa_tasks::json_len(task) as u64;
                *entry.by_status.entry(task.status.as_str()).or_default() += 1;
            }
            scanned += page.tasks.len();
            match page.next {
                Some(next) => before = Some(next),
                None => {
                    complete = true;
                    break;
                }
            }
        }
        let mut principals: Vec<PrincipalUsage> =
            by_subject.into_iter().map(|(subject, u)| PrincipalUsage { subject, ..u }).collect();
        principals.sort_by(|a, b| b.active.cmp(&a.active).then(b.live.cmp(&a.live)).then(a.subject.cmp(&b.subject)));
        let config = self.core.config();
        Ok(Usage {
            tenant,
            principals,
            max_active_per_principal: config.max_active_tasks_per_scope,
            max_bytes_per_principal: config.max_bytes_per_scope,
            scanned,
            complete,
            as_of_ms,
        })
    }
}
