//! How a [`RedisStore`] serves each trait of `presa-store`: by delegating
//! every operation to the part it is about, under the same name
//! (`release` is `Queue::release` is `release.lua`). The only logic here
//! is what joins two parts: a worker's concluding write is the records'
//! compare-and-set carrying the queue's work entry (and, for a poison task,
//! its dead letter).

use std::{collections::HashMap, time::Duration};

use presa_store::{
    AdminStore, Cas, Claim, CreateLimits, Created, DeadLetter, DeadLetterFilter, DeadLetterPage, DeadLetters, EventBus,
    EventStream, GetView, Idempotency, NewTask, NodeInfo, PartitionStats, Scope, SessionLimits, SessionStore,
    SessionWrite, Shares, StoreError, Task, TaskFilter, TaskId, TaskPage, TaskStore, TaskStream, WorkQueue, Writer,
};

use super::RedisStore;

#[async_trait::async_trait]
impl TaskStore for RedisStore {
    async fn create_idempotent(
        &self,
        new: NewTask,
        limits: CreateLimits,
        idempotency: Option<&Idempotency>,
    ) -> Result<Created, StoreError> {
        self.parts.records.create_idempotent(new, limits, idempotency).await
    }

    async fn get(&self, scope: &Scope, id: &TaskId) -> Result<Option<Task>, StoreError> {
        Ok(self.parts.records.read(id).await?.filter(|t| &t.scope == scope))
    }

    async fn get_view(&self, scope: &Scope, id: &TaskId) -> Result<Option<GetView>, StoreError> {
        Ok(self.parts.records.read_view(id).await?.filter(|v| &v.scope == scope))
    }

    async fn load(&self, id: &TaskId) -> Result<Option<Task>, StoreError> {
        Ok(self.parts.records.read(id).await?)
    }

    async fn transition_within(&self, next: &Task, writer: Writer, quota: Option<u64>) -> Result<Cas, StoreError> {
        self.parts.records.transition(next, writer, None, quota, None).await
    }

    async fn watch(&self, ids: &[TaskId]) -> Result<TaskStream, StoreError> {
        Ok(self.parts.records.watch(ids).await?)
    }

    async fn watch_claimed(&self, id: &TaskId) -> Result<TaskStream, StoreError> {
        Ok(self.parts.queue.watch_claimed(id).await?)
    }
}

#[async_trait::async_trait]
impl WorkQueue for RedisStore {
    async fn claim_fair(
        &self,
        worker: &str,
        max: usize,
        lease: Duration,
        wait: Duration,
        shares: &Shares,
    ) -> Result<Vec<Claim>, StoreError> {
        self.parts.queue.claim_fair(worker, max, lease, wait, shares).await
    }

    async fn renew(&self, claim: &Claim, lease: Duration) -> Result<bool, StoreError> {
        Ok(self.parts.queue.renew(claim, lease).await?)
    }

    async fn remove_work(&self, claim: &Claim) -> Result<(), StoreError> {
        Ok(self.parts.queue.remove_work(claim).await?)
    }

    async fn conclude(&self, next: &Task, claim: &Claim) -> Result<Cas, StoreError> {
        let entry = self.parts.queue.entry_of(claim);
        self.parts.records.transition(next, claim.writer(), entry.as_deref(), None, None).await
    }

    async fn conclude_owned(&self, next: Box<Task>, claim: &Claim) -> Result<Cas, StoreError> {
        let (entry, writer) = (self.parts.queue.entry_of(claim), claim.writer());
        self.parts.records.transition(next, writer, entry.as_deref(), None, None).await
    }

    async fn conclude_dead(&self, next: &Task, claim: &Claim, reason: &str) -> Result<Cas, StoreError> {
        let entry = self.parts.queue.entry_of(claim);
        let letter = next.status.is_terminal().then(|| DeadLetter::of(claim, reason, next.updated_at_ms));
        self.parts.records.transition(next, claim.writer(), entry.as_deref(), None, letter.as_ref()).await
    }

    async fn defer(&self, next: &Task, claim: &Claim, due_at_ms: u64) -> Result<Cas, StoreError> {
        Ok(self.parts.queue.defer(next, claim, due_at_ms).await?)
    }

    async fn retry_now(&self, id: &TaskId) -> Result<bool, StoreError> {
        Ok(self.parts.queue.retry_now(id).await?)
    }

    async fn release(&self, claim: &Claim) -> Result<(), StoreError> {
        Ok(self.parts.queue.release(claim).await?)
    }

    async fn work_stats(&self) -> Result<Vec<PartitionStats>, StoreError> {
        Ok(self.parts.queue.work_stats().await?)
    }
}

#[async_trait::async_trait]
impl DeadLetters for RedisStore {
    async fn dead_letters(
        &self,
        filter: &DeadLetterFilter,
        after: Option<&str>,
        limit: usize,
    ) -> Result<DeadLetterPage, StoreError> {
        self.parts.letters.dead_letters(filter, after, limit).await
    }

    async fn dead_letter(&self, tenant: &str, id: &TaskId) -> Result<Option<DeadLetter>, StoreError> {
        self.parts.letters.dead_letter(tenant, id).await
    }

    async fn mark_dead_letter_replayed(
        &self,
        tenant: &str,
        id: &TaskId,
        new: &TaskId,
    ) -> Result<Option<TaskId>, StoreError> {
        self.parts.letters.mark_dead_letter_replayed(tenant, id, new).await
    }

    async fn discard_dead_letter(&self, tenant: &str, id: &TaskId) -> Result<bool, StoreError> {
        self.parts.letters.discard_dead_letter(tenant, id).await
    }
}

#[async_trait::async_trait]
impl SessionStore for RedisStore {
    async fn write_session(
        &self,
        owner: &Scope,
        session: &str,
        write: SessionWrite<'_>,
        ttl: Duration,
        limits: SessionLimits,
    ) -> Result<(), StoreError> {
        self.parts.sessions.write_session(owner, session, write, ttl, limits).await
    }

    async fn session_state(&self, owner: &Scope, session: &str) -> Result<HashMap<String, String>, StoreError> {
        self.parts.sessions.session_state(owner, session).await
    }
}

#[async_trait::async_trait]
impl AdminStore for RedisStore {
    async fn list_tasks(
        &self,
        filter: &TaskFilter,
        before: Option<&str>,
        limit: usize,
    ) -> Result<TaskPage, StoreError> {
        self.parts.index.list_tasks(filter, before, limit).await
    }

    async fn tenants(&self) -> Result<Vec<String>, StoreError> {
        self.parts.index.tenants().await
    }

    async fn heartbeat(&self, node: &NodeInfo, ttl: Duration) -> Result<bool, StoreError> {
        self.parts.nodes.heartbeat(node, ttl).await
    }

    async fn nodes(&self) -> Result<Vec<NodeInfo>, StoreError> {
        self.parts.nodes.nodes().await
    }

    async fn drain(&self, id: &str) -> Result<Option<NodeInfo>, StoreError> {
        self.parts.nodes.drain(id).await
    }
}

#[async_trait::async_trait]
impl EventBus for RedisStore {
    async fn publish(&self, event: &str) -> Result<(), StoreError> {
        self.parts.bus.publish(event).await
    }

    async fn subscribe(&self) -> Result<EventStream, StoreError> {
        self.parts.bus.subscribe().await
    }

    async fn publish_to(&self, topic: &str, message: &str) -> Result<(), StoreError> {
        self.parts.bus.publish_to(topic, message).await
    }

    async fn subscribe_to(&self, topic: &str) -> Result<EventStream, StoreError> {
        self.parts.bus.subscribe_to(topic).await
    }
}

#[async_trait::async_trait]
impl presa_store::Rates for RedisStore {
    async fn take_rate(
        &self,
        key: &str,
        rate: presa_store::Rate,
        how: presa_store::Take,
    ) -> Result<presa_store::Taken, StoreError> {
        self.parts.rates.take(key, rate, how).await
    }
}

#[async_trait::async_trait]
impl presa_store::Breakers for RedisStore {
    async fn check_breaker(
        &self,
        name: &str,
        policy: presa_store::BreakerPolicy,
        token: &str,
    ) -> Result<(presa_store::Check, presa_store::Circuit), StoreError> {
        self.parts.breakers.check(name, policy, token).await
    }

    async fn report_breaker(
        &self,
        name: &str,
        policy: presa_store::BreakerPolicy,
        token: &str,
        report: presa_store::Report,
    ) -> Result<(presa_store::Circuit, presa_store::Change), StoreError> {
        self.parts.breakers.report(name, policy, token, report).await
    }

    async fn read_breaker(
        &self,
        name: &str,
        policy: presa_store::BreakerPolicy,
    ) -> Result<presa_store::BreakerView, StoreError> {
        self.parts.breakers.read(name, policy).await
    }
}

#[async_trait::async_trait]
impl presa_store::Permits for RedisStore {
    async fn acquire_permit(
        &self,
        name: &presa_store::PermitName,
        holder: &presa_store::Holder,
        terms: presa_store::PermitTerms,
    ) -> Result<presa_store::Acquired, StoreError> {
        self.parts.permits.acquire(name, holder, terms).await
    }

    async fn renew_permit(
        &self,
        name: &presa_store::PermitName,
        holder: &presa_store::Holder,
        terms: presa_store::PermitTerms,
    ) -> Result<bool, StoreError> {
        self.parts.permits.renew(name, holder, terms).await
    }

    async fn release_permit(
        &self,
        name: &presa_store::PermitName,
        holder: &presa_store::Holder,
        terms: presa_store::PermitTerms,
    ) -> Result<presa_store::Released, StoreError> {
        self.parts.permits.release(name, holder, terms).await
    }

    async fn permit_usage(&self, limit: &str) -> Result<Vec<presa_store::PermitUsage>, StoreError> {
        self.parts.permits.usage(limit).await
    }
}
