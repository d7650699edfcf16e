//! What an operator may read and do (the admin API's logic, without HTTP;
//! `docs/admin.md`): list and inspect tasks across owners, cancel them,
//! make a task's delayed retry due now, replay or discard dead letters, see
//! the cluster, its queues and circuit breakers, drain a worker.
//!
//! Every call names its [`Operator`]: an admin of the whole cluster, or of
//! one tenant. A tenant admin's reads are confined to its tenant before they
//! reach the store, and another tenant's task or letter answers exactly like
//! one that does not exist ([`AdminError::NotFound`]): it never learns that
//! it exists, nor how many there are. The cluster, the queues and drains
//! belong to the cluster's admins only ([`AdminError::Forbidden`]).
//!
//! Every action (cancel, retry now, replay, discard, drain, restart an upstream) is logged on the target
//! `presa::audit` with the operator, the action, its target and its outcome,
//! and counted when it took effect (`presa_admin_actions_total{action}`).
//! A tenant's quota use (`usage`) is read from its tasks, one scan at a time;
//! the tools' limits and their permits in use (`limits`) from the store;
//! the last minutes of the cluster's figures (`history`) from a ring this
//! process samples ([`History`]); the gateway's upstreams (`upstreams`)
//! from the heartbeats of the live registry, added up per upstream.

mod gateway;
mod history;
mod limits;
mod upstreams;
mod usage;

use std::{sync::Arc, time::Duration};

use presa_store::{
    DeadLetter, DeadLetterFilter, DeadLetterPage, NodeInfo, PartitionStats, Replayed, StoreError, Task, TaskFilter,
    TaskId, TaskPage, Writer,
};
use presa_tasks::{Caller, Event};
use presa_telemetry::metrics;

pub use gateway::ConfigView;
pub use history::{
    DEFAULT_HISTORY_EVERY, DEFAULT_HISTORY_WINDOW, History, MAX_HISTORY_POINTS, MIN_HISTORY_EVERY, Point,
};
pub use limits::ToolLimits;
pub use upstreams::{MAX_UPSTREAM_NAME, UpstreamView};
use usage::UsageCache;
pub use usage::{DEFAULT_USAGE_CACHE, MAX_USAGE_TASKS, PrincipalUsage, Usage};

use crate::{
    core::Core,
    store_io::{TaskWriter, UpdateError, Updated, WriteLimits, store_call},
};

/// How far an operator reaches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reach {
    /// Every tenant, the cluster and its queues.
    Cluster,
    /// This tenant's tasks, dead letters and usage only.
    Tenant(String),
}

/// Who is operating, and how far they reach.
#[derive(Debug, Clone)]
pub struct Operator {
    /// The authenticated caller (for the audit log).
    pub caller: Caller,
    /// What they may see and act on.
    pub reach: Reach,
}

impl Operator {
    /// The role's name in answers: `admin` or `tenant-admin`.
    pub fn role(&self) -> &'static str {
        match self.reach {
            Reach::Cluster => "admin",
            Reach::Tenant(_) => "tenant-admin",
        }
    }

    /// The tenant a read asked for (`asked`), within reach: a tenant admin
    /// gets its own (asked or not); another is [`AdminError::Forbidden`].
    fn tenant(&self, asked: Option<String>) -> Result<Option<String>, AdminError> {
        match (&self.reach, asked) {
            (Reach::Cluster, asked) => Ok(asked),
            (Reach::Tenant(own), None) => Ok(Some(own.clone())),
            (Reach::Tenant(own), Some(asked)) if asked == *own => Ok(Some(asked)),
            (Reach::Tenant(_), Some(asked)) => {
                self.refused("read another tenant", &asked);
                Err(AdminError::Forbidden("a tenant admin sees its own tenant only".into()))
            }
        }
    }

    /// [`Operator::tenant`] for a read of one tenant: a cluster admin must name it.
    fn one_tenant(&self, asked: Option<String>) -> Result<String, AdminError> {
        self.tenant(asked)?.ok_or_else(|| AdminError::BadRequest("tenant is required".into()))
    }

    /// Whether `tenant`'s data is within reach (else it reads as absent).
    fn sees(&self, tenant: &str) -> bool {
        match &self.reach {
            Reach::Cluster => true,
            Reach::Tenant(own) if own == tenant => true,
            Reach::Tenant(_) => {
                // Answered like an unknown id; the attempt is still recorded.
                self.refused("reach another tenant's task", tenant);
                false
            }
        }
    }

    fn cluster_only(&self) -> Result<(), AdminError> {
        match self.reach {
            Reach::Cluster => Ok(()),
            Reach::Tenant(_) => {
                self.refused("use a cluster route", "cluster");
                Err(AdminError::Forbidden("the cluster view needs the admin scope".into()))
            }
        }
    }

    /// A tenant admin tried to go past its tenant: recorded at WARN on
    /// `presa::audit` (the caller's answer says nothing more than before).
    fn refused(&self, attempt: &str, target: &str) {
        let scope = &self.caller.scope;
        tracing::warn!(
            target: "presa::audit",
            tenant = %scope.tenant,
            subject = %scope.subject,
            role = self.role(),
            attempt,
            target_id = target,
            "admin request refused: outside the caller's tenant"
        );
    }

    /// An action on `target`, logged with its `outcome`, and counted
    /// (`presa_admin_actions_total{action}`) when it `took_effect`.
    fn audit(&self, action: &'static str, target: &str, outcome: &str, took_effect: bool) {
        if took_effect {
            metrics::admin_action(action);
        }
        let scope = &self.caller.scope;
        tracing::info!(
            target: "presa::audit",
            tenant = %scope.tenant,
            subject = %scope.subject,
            role = self.role(),
            action,
            target_id = target,
            outcome,
            "admin action"
        );
    }
}

/// Why an admin call was refused.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// Bad input (a filter, a cursor, a missing tenant): say which.
    #[error("{0}")]
    BadRequest(String),
    /// Out of the operator's reach.
    #[error("{0}")]
    Forbidden(String),
    /// No such thing within reach.
    #[error("{0} not found")]
    NotFound(&'static str),
    /// The target cannot take the action any more (a task that ended).
    #[error("{0}")]
    Conflict(String),
    /// The store failed (retryable when [`StoreError::is_retryable`]).
    #[error(transparent)]
    Store(StoreError),
}

impl From<StoreError> for AdminError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::BadCursor(_) => AdminError::BadRequest(e.to_string()),
            e => AdminError::Store(e),
        }
    }
}

/// The admin operations on one [`Core`].
#[derive(Debug, Clone)]
pub struct Admin {
    core: Core,
    usage: Arc<UsageCache>,
    history: Option<Arc<History>>,
}

impl Admin {
    /// Operations on `core`'s backend.
    pub fn new(core: Core) -> Self {
        Admin::with_usage_cache(core, DEFAULT_USAGE_CACHE)
    }

    /// Operations on `core`'s backend, a tenant's usage answered from a scan
    /// at most `fresh_for` old (one scan at a time per process; zero: every
    /// call scans, still one at a time).
    pub fn with_usage_cache(core: Core, fresh_for: Duration) -> Self {
        Admin { core, usage: Arc::new(UsageCache::new(fresh_for)), history: None }
    }

    /// Answer [`Admin::history`] from `history` (sampled by [`History::run`]).
    pub fn with_history(mut self, history: Arc<History>) -> Self {
        self.history = Some(history);
        self
    }

    /// The cluster's figures over the last minutes, oldest first (none
    /// without [`Admin::with_history`]), and the history they come from.
    pub fn history(&self, op: &Operator) -> Result<(Vec<Point>, Option<&History>), AdminError> {
        op.cluster_only()?;
        let history = self.history.as_deref();
        Ok((history.map(History::points).unwrap_or_default(), history))
    }

    /// A page of tasks passing `filter` (its tenant held to the operator's reach).
    pub async fn tasks(
        &self,
        op: &Operator,
        mut filter: TaskFilter,
        before: Option<&str>,
        limit: usize,
    ) -> Result<TaskPage, AdminError> {
        filter.tenant = op.tenant(filter.tenant.take())?;
        if let Some(b) = before
            && presa_store::admin::Cursor::parse(b).is_none()
        {
            return Err(AdminError::BadRequest("cursor is not one a listing returned".into()));
        }
        Ok(store_call("list_tasks", self.core.admin().list_tasks(&filter, before, limit)).await?)
    }

    /// Task `id` with its dead letter, if within reach.
    pub async fn task(&self, op: &Operator, id: &TaskId) -> Result<(Task, Option<DeadLetter>), AdminError> {
        let task = store_call("load", self.core.store().load(id))
            .await?
            .filter(|t| op.sees(&t.scope.tenant))
            .ok_or(AdminError::NotFound("task"))?;
        let letter = store_call("dead_letter", self.core.dead_letters().dead_letter(&task.scope.tenant, id)).await?;
        Ok((task, letter))
    }

    /// Cancel task `id` as its owner's `tasks/cancel` would.
    pub async fn cancel(&self, op: &Operator, id: &TaskId) -> Result<Task, AdminError> {
        let outcome = self.cancel_within_reach(op, id).await;
        op.audit("cancel", id.as_str(), task_action_said(&outcome, "cancelled", "already ended"), outcome.is_ok());
        outcome
    }

    async fn cancel_within_reach(&self, op: &Operator, id: &TaskId) -> Result<Task, AdminError> {
        let (task, _) = self.task(op, id).await?;
        let limits = WriteLimits::task(self.core.config().max_task_bytes);
        let store = self.core.store().as_ref();
        match TaskWriter::new(store, Writer::Client, limits).guessing(Some(&task)).write(id, &Event::Cancel).await {
            Ok(Updated::Applied(t)) => Ok(t),
            Ok(Updated::Unchanged(t)) => {
                Err(AdminError::Conflict(format!("the task has ended ({})", t.status.as_str())))
            }
            Ok(Updated::Gone | Updated::Fenced) => Err(AdminError::NotFound("task")),
            Err(UpdateError::Store(e)) => Err(e.into()),
            Err(e) => Err(AdminError::Store(StoreError::Corrupt(e.to_string()))),
        }
    }

    /// Make task `id`'s next try due now (an operator's "retry now", once
    /// the upstream it failed on is fixed): its work, waiting out a failed
    /// try's backoff, is queued at once and a worker claims it like any
    /// other. The task as it was read (its record changes when a worker
    /// claims the work). [`AdminError::Conflict`] when its work is not
    /// waiting for a retry: the task has ended, its work is queued or
    /// running, or it waits for its turn under its tool's rate (made due, it
    /// would run past the rate).
    pub async fn retry_now(&self, op: &Operator, id: &TaskId) -> Result<Task, AdminError> {
        let outcome = self.retry_within_reach(op, id).await;
        op.audit("retry_now", id.as_str(), task_action_said(&outcome, "due now", "not waiting"), outcome.is_ok());
        outcome
    }

    async fn retry_within_reach(&self, op: &Operator, id: &TaskId) -> Result<Task, AdminError> {
        let (task, _) = self.task(op, id).await?;
        if task.status.is_terminal() {
            return Err(AdminError::Conflict(format!("the task has ended ({})", task.status.as_str())));
        }
        if task.retries.turn_reserved && task.retries.due_at_ms.is_some() {
            // Its run is already counted against its tool's rate: made due now,
            // it would start before its turn, past the rate.
            return Err(AdminError::Conflict(
                "the task is waiting for its turn under its tool's rate, not for a retry".into(),
            ));
        }
        if store_call("retry_now", self.core.work().retry_now(id)).await? {
            Ok(task)
        } else {
            Err(AdminError::Conflict(format!(
                "the task is not waiting for a retry ({}: its work is queued or running)",
                task.status.as_str()
            )))
        }
    }

    /// A page of dead letters of `tenant` (required of a cluster admin; a
    /// tenant admin's own by default), optionally one subject's.
    pub async fn dead_letters(
        &self,
        op: &Operator,
        tenant: Option<String>,
        subject: Option<String>,
        after: Option<&str>,
        limit: usize,
    ) -> Result<DeadLetterPage, AdminError> {
        let tenant = op.one_tenant(tenant)?;
        let filter = DeadLetterFilter { tenant, subject };
        Ok(store_call("dead_letters", self.core.dead_letters().dead_letters(&filter, after, limit)).await?)
    }

    /// Run `tenant`'s dead letter of task `id` again (once: a second replay
    /// answers the first one's task).
    pub async fn replay(&self, op: &Operator, tenant: Option<String>, id: &TaskId) -> Result<Replayed, AdminError> {
        let tenant = op.one_tenant(tenant)?;
        let limits = self.core.config().create_limits();
        let outcome =
            store_call("replay_dead_letter", self.core.dead_letters().replay_dead_letter(&tenant, id, limits))
                .await
                .map_err(AdminError::from)
                .and_then(|r| r.ok_or(AdminError::NotFound("dead letter")));
        let said = match &outcome {
            Ok(r) => format!("replayed as {}{}", r.task, if r.first { "" } else { " (before)" }),
            Err(e) => e.to_string(),
        };
        op.audit("replay", id.as_str(), &said, outcome.as_ref().is_ok_and(|r| r.first));
        outcome
    }

    /// Remove `tenant`'s dead letter of task `id`.
    pub async fn discard(&self, op: &Operator, tenant: Option<String>, id: &TaskId) -> Result<(), AdminError> {
        let tenant = op.one_tenant(tenant)?;
        let removed =
            store_call("discard_dead_letter", self.core.dead_letters().discard_dead_letter(&tenant, id)).await;
        let outcome = match removed {
            Ok(true) => Ok(()),
            Ok(false) => Err(AdminError::NotFound("dead letter")),
            Err(e) => Err(e.into()),
        };
        op.audit("discard", id.as_str(), if outcome.is_ok() { "discarded" } else { "refused" }, outcome.is_ok());
        outcome
    }

    /// Ask worker `id` to drain.
    pub async fn drain(&self, op: &Operator, id: &str) -> Result<NodeInfo, AdminError> {
        op.cluster_only()?;
        let outcome = store_call("drain", self.core.admin().drain(id))
            .await
            .map_err(AdminError::from)
            .and_then(|n| n.ok_or(AdminError::NotFound("node")));
        op.audit("drain", id, if outcome.is_ok() { "draining" } else { "refused" }, outcome.is_ok());
        outcome
    }

    /// Every live process.
    pub async fn cluster(&self, op: &Operator) -> Result<Vec<NodeInfo>, AdminError> {
        op.cluster_only()?;
        Ok(store_call("nodes", self.core.admin().nodes()).await?)
    }

    /// The work queue of every partition.
    pub async fn queues(&self, op: &Operator) -> Result<Vec<PartitionStats>, AdminError> {
        op.cluster_only()?;
        Ok(store_call("work_stats", self.core.work().work_stats()).await?)
    }

    /// Every circuit breaker of the catalog, as the store holds it.
    pub async fn breakers(&self, op: &Operator) -> Result<Vec<crate::breaker::BreakerInfo>, AdminError> {
        op.cluster_only()?;
        Ok(crate::breaker::read_all(self.core.breakers().as_ref(), &self.core.catalog()).await?)
    }

    /// The tenants with live tasks.
    pub async fn tenants(&self, op: &Operator) -> Result<Vec<String>, AdminError> {
        op.cluster_only()?;
        Ok(store_call("tenants", self.core.admin().tenants()).await?)
    }
}

/// What the audit line of an action on a task says of its `outcome`:
/// `done`, "not found", `conflict` (the task is in no state for it) or "failed".
fn task_action_said<T>(outcome: &Result<T, AdminError>, done: &'static str, conflict: &'static str) -> &'static str {
    match outcome {
        Ok(_) => done,
        Err(AdminError::NotFound(_)) => "not found",
        Err(AdminError::Conflict(_)) => conflict,
        Err(_) => "failed",
    }
}
