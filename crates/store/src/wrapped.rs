//! [`Wrapped`]: a store that answers exactly as another one does, for tests
//! that need a store to keep something alive beside it (the Redis server it
//! runs on) or to hand every watcher snapshots of their own first (a late
//! delivery, as a shared subscription may make). Written once so that tests
//! do not each spell out the whole trait.

use std::{any::Any, collections::HashMap, fmt, sync::Arc, time::Duration};

use futures::StreamExt;

use crate::{
    GetView, NewTask, Scope, Task, TaskId, bus::EventBus, bus::EventStream, claim::Cas, claim::Claim,
    claim::PartitionStats, claim::Writer, dead::DeadLetter, dead::DeadLetterFilter, dead::DeadLetterPage,
    dead::DeadLetters, error::StoreError, limits::CreateLimits, queue::WorkQueue, records::TaskStore,
    records::TaskStream, session::SessionLimits, session::SessionStore, session::SessionWrite, shares::Shares,
};

/// `inner`, plus what a test needs around it.
pub struct Wrapped<S> {
    inner: Arc<S>,
    /// Snapshots every `watch` delivers before the inner store's.
    first_on_watch: Vec<Task>,
    /// Kept alive as long as the store is.
    _keep: Option<Arc<dyn Any + Send + Sync>>,
}

impl<S> fmt::Debug for Wrapped<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Wrapped").finish_non_exhaustive()
    }
}

impl<S> Wrapped<S> {
    /// A store answering as `inner`.
    pub fn new(inner: Arc<S>) -> Self {
        Wrapped { inner, first_on_watch: Vec::new(), _keep: None }
    }

    /// Keep `value` alive with the store.
    pub fn keeping(mut self, value: Arc<dyn Any + Send + Sync>) -> Self {
        self._keep = Some(value);
        self
    }

    /// Have every `watch` (and `watch_claimed`) deliver `snapshots` first,
    /// whatever ids it watches.
    pub fn first_on_watch(mut self, snapshots: Vec<Task>) -> Self {
        self.first_on_watch = snapshots;
        self
    }

    /// `live`, after the snapshots every watch delivers first.
    fn first_then(&self, live: TaskStream) -> TaskStream {
        if self.first_on_watch.is_empty() {
            return live;
        }
        Box::pin(futures::stream::iter(self.first_on_watch.clone()).chain(live))
    }
}

#[async_trait::async_trait]
impl<S: TaskStore> TaskStore for Wrapped<S> {
    async fn create_idempotent(
        &self,
        new: NewTask,
        limits: CreateLimits,
        idempotency: Option<&crate::idempotency::Idempotency>,
    ) -> Result<crate::idempotency::Created, StoreError> {
        self.inner.create_idempotent(new, limits, idempotency).await
    }
    async fn get(&self, scope: &Scope, id: &TaskId) -> Result<Option<Task>, StoreError> {
        self.inner.get(scope, id).await
    }
    async fn get_view(&self, scope: &Scope, id: &TaskId) -> Result<Option<GetView>, StoreError> {
        self.inner.get_view(scope, id).await
    }
    async fn load(&self, id: &TaskId) -> Result<Option<Task>, StoreError> {
        self.inner.load(id).await
    }
    async fn transition_within(&self, next: &Task, writer: Writer, quota: Option<u64>) -> Result<Cas, StoreError> {
        self.inner.transition_within(next, writer, quota).await
    }
    async fn watch(&self, ids: &[TaskId]) -> Result<TaskStream, StoreError> {
        Ok(self.first_then(self.inner.watch(ids).await?))
    }
    async fn watch_claimed(&self, id: &TaskId) -> Result<TaskStream, StoreError> {
        Ok(self.first_then(self.inner.watch_claimed(id).await?))
    }
}

#[async_trait::async_trait]
impl<S: WorkQueue> WorkQueue for Wrapped<S> {
    async fn claim_fair(
        &self,
        worker: &str,
        max: usize,
        lease: Duration,
        wait: Duration,
        shares: &Shares,
    ) -> Result<Vec<Claim>, StoreError> {
        self.inner.claim_fair(worker, max, lease, wait, shares).await
    }
    async fn renew(&self, claim: &Claim, lease: Duration) -> Result<bool, StoreError> {
        self.inner.renew(claim, lease).await
    }
    async fn remove_work(&self, claim: &Claim) -> Result<(), StoreError> {
        self.inner.remove_work(claim).await
    }
    async fn conclude(&self, next: &Task, claim: &Claim) -> Result<Cas, StoreError> {
        self.inner.conclude(next, claim).await
    }
    async fn conclude_owned(&self, next: Box<Task>, claim: &Claim) -> Result<Cas, StoreError> {
        self.inner.conclude_owned(next, claim).await
    }
    async fn defer(&self, next: &Task, claim: &Claim, due_at_ms: u64) -> Result<Cas, StoreError> {
        self.inner.defer(next, claim, due_at_ms).await
    }
    async fn retry_now(&self, id: &TaskId) -> Result<bool, StoreError> {
        self.inner.retry_now(id).await
    }
    async fn release(&self, claim: &Claim) -> Result<(), StoreError> {
        self.inner.release(claim).await
    }
    async fn conclude_dead(&self, next: &Task, claim: &Claim, reason: &str) -> Result<Cas, StoreError> {
        self.inner.conclude_dead(next, claim, reason).await
    }
    async fn work_stats(&self) -> Result<Vec<PartitionStats>, StoreError> {
        self.inner.work_stats().await
    }
}

#[async_trait::async_trait]
impl<S: DeadLetters> DeadLetters for Wrapped<S> {
    async fn dead_letters(
        &self,
        filter: &DeadLetterFilter,
        after: Option<&str>,
        limit: usize,
    ) -> Result<DeadLetterPage, StoreError> {
        self.inner.dead_letters(filter, after, limit).await
    }
    async fn dead_letter(&self, tenant: &str, id: &TaskId) -> Result<Option<DeadLetter>, StoreError> {
        self.inner.dead_letter(tenant, id).await
    }
    async fn mark_dead_letter_replayed(
        &self,
        tenant: &str,
        id: &TaskId,
        new: &TaskId,
    ) -> Result<Option<TaskId>, StoreError> {
        self.inner.mark_dead_letter_replayed(tenant, id, new).await
    }
    async fn discard_dead_letter(&self, tenant: &str, id: &TaskId) -> Result<bool, StoreError> {
        self.inner.discard_dead_letter(tenant, id).await
    }
}

#[async_trait::async_trait]
impl<S: SessionStore> SessionStore for Wrapped<S> {
    async fn write_session(
        &self,
        owner: &Scope,
        session: &str,
        write: SessionWrite<'_>,
        ttl: Duration,
        limits: SessionLimits,
    ) -> Result<(), StoreError> {
        self.inner.write_session(owner, session, write, ttl, limits).await
    }
    async fn session_state(&self, owner: &Scope, session: &str) -> Result<HashMap<String, String>, StoreError> {
        self.inner.session_state(owner, session).await
    }
}

#[async_trait::async_trait]
impl<S: EventBus> EventBus for Wrapped<S> {
    async fn publish(&self, event: &str) -> Result<(), StoreError> {
        self.inner.publish(event).await
    }
    async fn subscribe(&self) -> Result<EventStream, StoreError> {
        self.inner.subscribe().await
    }
    async fn publish_to(&self, topic: &str, message: &str) -> Result<(), StoreError> {
        self.inner.publish_to(topic, message).await
    }
    async fn subscribe_to(&self, topic: &str) -> Result<EventStream, StoreError> {
        self.inner.subscribe_to(topic).await
    }
}

#[async_trait::async_trait]
impl<S: crate::admin::AdminStore> crate::admin::AdminStore for Wrapped<S> {
    async fn list_tasks(
        &self,
        filter: &crate::admin::TaskFilter,
        before: Option<&str>,
        limit: usize,
    ) -> Result<crate::admin::TaskPage, StoreError> {
        self.inner.list_tasks(filter, before, limit).await
    }
    async fn tenants(&self) -> Result<Vec<String>, StoreError> {
        self.inner.tenants().await
    }
    async fn heartbeat(&self, node: &crate::admin::NodeInfo, ttl: Duration) -> Result<bool, StoreError> {
        self.inner.heartbeat(node, ttl).await
    }
    async fn nodes(&self) -> Result<Vec<crate::admin::NodeInfo>, StoreError> {
        self.inner.nodes().await
    }
    async fn drain(&self, id: &str) -> Result<Option<crate::admin::NodeInfo>, StoreError> {
        self.inner.drain(id).await
    }
}

#[async_trait::async_trait]
impl<S: crate::rates::Rates> crate::rates::Rates for Wrapped<S> {
    async fn take_rate(
        &self,
        key: &str,
        rate: crate::rates::Rate,
        how: crate::rates::Take,
    ) -> Result<crate::rates::Taken, StoreError> {
        self.inner.take_rate(key, rate, how).await
    }
}

#[async_trait::async_trait]
impl<S: crate::breakers::Breakers> crate::breakers::Breakers for Wrapped<S> {
    async fn check_breaker(
        &self,
        name: &str,
        policy: crate::breakers::BreakerPolicy,
        token: &str,
    ) -> Result<(crate::breakers::Check, crate::breakers::Circuit), StoreError> {
        self.inner.check_breaker(name, policy, token).await
    }
    async fn report_breaker(
        &self,
        name: &str,
        policy: crate::breakers::BreakerPolicy,
        token: &str,
        report: crate::breakers::Report,
    ) -> Result<(crate::breakers::Circuit, crate::breakers::Change), StoreError> {
        self.inner.report_breaker(name, policy, token, report).await
    }
    async fn read_breaker(
        &self,
        name: &str,
        policy: crate::breakers::BreakerPolicy,
    ) -> Result<crate::breakers::BreakerView, StoreError> {
        self.inner.read_breaker(name, policy).await
    }
}

#[async_trait::async_trait]
impl<S: crate::permits::Permits> crate::permits::Permits for Wrapped<S> {
    async fn acquire_permit(
        &self,
        name: &crate::permits::PermitName,
        holder: &crate::permits::Holder,
        terms: crate::permits::PermitTerms,
    ) -> Result<crate::permits::Acquired, StoreError> {
        self.inner.acquire_permit(name, holder, terms).await
    }

    async fn renew_permit(
        &self,
        name: &crate::permits::PermitName,
        holder: &crate::permits::Holder,
        terms: crate::permits::PermitTerms,
    ) -> Result<bool, StoreError> {
        self.inner.renew_permit(name, holder, terms).await
    }

    async fn release_permit(
        &self,
        name: &crate::permits::PermitName,
        holder: &crate::permits::Holder,
        terms: crate::permits::PermitTerms,
    ) -> Result<crate::permits::Released, StoreError> {
        self.inner.release_permit(name, holder, terms).await
    }

    async fn permit_usage(&self, limit: &str) -> Result<Vec<crate::permits::PermitUsage>, StoreError> {
        self.inner.permit_usage(limit).await
    }
}
