//! [`RedisStore`]: connecting, and the record side of [`TaskStore`] (create,
//! read, compare-and-set, watch) plus the [`EventBus`]. Work claims live in
//! `work/`, creating in `create.rs`, reads and compare-and-set writes in
//! `task.rs`, round trips in `call.rs`, the per-scope limit in `limits.rs`.

use std::sync::Arc;

use futures::StreamExt;
use presa_store::{
    Cas, Claim, CreateLimits, Created, DeadLetter, DeadLetterFilter, DeadLetterPage, DeadLetters, EventBus,
    EventStream, GetView, Idempotency, NewTask, PartitionStats, Scope, StoreError, Task, TaskId, TaskStore, TaskStream,
    WorkQueue, Writer,
};
use redis::Value;

use crate::{
    RedisConfig, RedisStoreError,
    conn::{Endpoint, Healing, Target, Verbosity},
    hub::Hub,
    keys::Keys,
    task::decode,
    topology::Topology,
};

/// The Redis-backed task store and event bus. Cheap to clone (shared inner).
#[derive(Debug, Clone)]
pub struct RedisStore {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) cfg: RedisConfig,
    pub(crate) keys: Keys,
    pub(crate) conn: Healing,
    /// Standalone or cluster, and what only that one needs.
    pub(crate) topology: Topology,
    /// Connections confirming writes with `WAIT` (replicated durability only).
    pub(crate) confirming: Option<crate::durability::Confirming>,
    /// How connections reach Redis (with Sentinel: where the primary is found).
    pub(crate) endpoint: Endpoint,
    pub(crate) hub: Hub,
    /// What spans say about where commands go.
    pub(crate) target: Target,
    /// The work queue's read side: partition rotation, drained cursors.
    pub(crate) reader: crate::work::Reader,
    /// The epoch this process saw, and the last data loss it detected.
    pub(crate) epoch: crate::epoch::EpochState,
    /// When the work queue last looked for lapsed leases and held work.
    pub(crate) recovery: crate::work::Recovery,
    /// The tasks this process runs, watched through the claimed channels.
    pub(crate) claimed: crate::claimed::Claimed,
}

impl RedisStore {
    /// Connect, and make sure every partition stream has its consumer group.
    /// Fails within about `op_timeout` when Redis is unreachable.
    /// Use [`open`](Self::open) to start without Redis.
    pub async fn connect(cfg: RedisConfig) -> Result<RedisStore, RedisStoreError> {
        let store = Self::open(cfg)?;
        store.ensure_groups().await?;
        Ok(store)
    }

    /// The store, without reaching Redis yet (only a bad configuration
    /// fails): the first command connects, and every command after a lost
    /// connection reconnects. For pods that start unready while Redis is
    /// down; the consumer groups are made by the first claim that misses them.
    ///
    /// `rediss://` uses rustls with the *ring* provider, installed here as
    /// the process default unless the process installed one already.
    pub fn open(cfg: RedisConfig) -> Result<RedisStore, RedisStoreError> {
        cfg.validate()?;
        // redis-rs builds its TLS config from the process-default provider.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let endpoint = Endpoint::resolve(&cfg)?;
        let conn = Healing::new(&cfg, &endpoint);
        let topology = Topology::open(&cfg, &endpoint)?;
        crate::metrics::register();
        let store = RedisStore {
            inner: Arc::new(Inner {
                keys: Keys::new(cfg.prefix.clone(), cfg.partitions),
                hub: Hub::spawn(&cfg, endpoint.clone()),
                target: Target::new(&cfg, &endpoint),
                conn,
                topology,
                confirming: crate::durability::Confirming::new(&cfg, &endpoint),
                endpoint,
                reader: Default::default(),
                epoch: Default::default(),
                recovery: Default::default(),
                claimed: Default::default(),
                cfg,
            }),
        };
        if let Some(sentinels) = store.inner.endpoint.sentinels() {
            tokio::spawn(crate::sentinel::watch(sentinels.clone(), Arc::downgrade(&store.inner)));
        }
        Ok(store)
    }

    /// The key layout this store uses.
    pub fn keys(&self) -> &Keys {
        &self.inner.keys
    }

    /// The configuration it was built with.
    pub fn config(&self) -> &RedisConfig {
        &self.inner.cfg
    }

    /// Round-trip to Redis (for readiness probes).
    pub async fn ping(&self) -> Result<(), RedisStoreError> {
        self.query::<Value>(Verbosity::Debug, &redis::cmd("PING")).await.map(|_| ())
    }

    /// Whether Redis accepts writes: a tiny expiring `SET`, refused (`OOM
    /// command not allowed`) when Redis is at `maxmemory` with `noeviction`.
    pub async fn probe_write(&self) -> Result<(), RedisStoreError> {
        let probe = redis::cmd("SET").arg(self.inner.keys.ready_probe()).arg(1).arg("PX").arg(10_000).to_owned();
        self.query::<Value>(Verbosity::Debug, &probe).await.map(|_| ())
    }

    /// With Sentinel: why no primary was found lately (the Sentinels name
    /// none, or one that is gone or read-only: a failover in progress; or
    /// no Sentinel answers), while none was found since. `None` otherwise.
    /// For `/readyz`, whose writes fail meanwhile.
    pub fn failover_trouble(&self) -> Option<String> {
        self.inner.endpoint.trouble()
    }

    /// How long since Redis last answered one of this store's commands
    /// (since the store was opened when it never did): the liveness signal.
    pub fn silent_for(&self) -> std::time::Duration {
        self.inner.conn.silent_for()
    }
}

#[async_trait::async_trait]
impl TaskStore for RedisStore {
    async fn create_idempotent(
        &self,
        new: NewTask,
        limits: CreateLimits,
        idempotency: Option<&Idempotency>,
    ) -> Result<Created, StoreError> {
        self.create_task(new, limits, idempotency).await
    }

    async fn get(&self, scope: &Scope, id: &TaskId) -> Result<Option<Task>, StoreError> {
        Ok(self.read(id).await?.filter(|t| &t.scope == scope))
    }

    async fn get_view(&self, scope: &Scope, id: &TaskId) -> Result<Option<GetView>, StoreError> {
        Ok(self.read_view(id).await?.filter(|v| &v.scope == scope))
    }

    async fn load(&self, id: &TaskId) -> Result<Option<Task>, StoreError> {
        Ok(self.read(id).await?)
    }

    async fn transition_within(&self, next: &Task, writer: Writer, quota: Option<u64>) -> Result<Cas, StoreError> {
        self.write(next, writer, None, quota, None).await
    }

    async fn watch_claimed(&self, id: &TaskId) -> Result<TaskStream, StoreError> {
        self.inner.claimed.start(&self.inner.hub, &self.inner.keys).await?;
        Ok(self.inner.claimed.watch(id))
    }

    async fn watch(&self, ids: &[TaskId]) -> Result<TaskStream, StoreError> {
        let channels: Vec<String> = ids.iter().filter_map(|id| self.inner.keys.events(id)).collect();
        if channels.is_empty() {
            // Ids that name no task never change.
            return Ok(Box::pin(futures::stream::pending()));
        }
        let sub = self.inner.hub.subscribe(channels).await?;
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
}

#[async_trait::async_trait]
impl WorkQueue for RedisStore {
    async fn conclude(&self, next: &Task, claim: &Claim) -> Result<Cas, StoreError> {
        // A receipt that is not this store's (never, from its own claims)
        // leaves the work to the claims that find the task ended.
        let entry = self.locate(claim).ok().map(|(_, _, entry)| entry);
        self.write(next, claim.writer(), entry.as_deref(), None, None).await
    }

    async fn conclude_dead(&self, next: &Task, claim: &Claim, reason: &str) -> Result<Cas, StoreError> {
        let entry = self.locate(claim).ok().map(|(_, _, entry)| entry);
        let letter = next.status.is_terminal().then(|| DeadLetter::of(claim, reason, next.updated_at_ms));
        self.write(next, claim.writer(), entry.as_deref(), None, letter.as_ref()).await
    }

    async fn claim_fair(
        &self,
        worker: &str,
        max: usize,
        lease: std::time::Duration,
        wait: std::time::Duration,
        shares: &presa_store::Shares,
    ) -> Result<Vec<Claim>, StoreError> {
        // Run in its own task so that a caller dropping this future (say, a
        // worker shutting down mid-wait) strands nothing: entries delivered
        // to a claim nobody receives would otherwise sit until `max_lease`.
        // The task stops waiting once the caller is gone and releases
        // whatever it had claimed by then.
        // A worker watches what it runs through the claimed channels: subscribed
        // before its first claim, so nothing published after a claim is missed.
        if let Err(e) = self.inner.claimed.start(&self.inner.hub, &self.inner.keys).await {
            tracing::warn!(error = %e, "could not watch the claimed channels; runs re-read their tasks on a timer");
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let store = self.clone();
        let worker = worker.to_owned();
        let shares = shares.clone();
        tokio::spawn(async move {
            let result = store.claim_work(&worker, max, lease, wait, &shares, &|| tx.is_closed()).await;
            if let Err(Ok(claims)) = tx.send(result) {
                for claim in claims {
                    if let Err(e) = store.release_work(&claim).await {
                        tracing::warn!(error = %e, "could not release an unreceived claim");
                    }
                }
            }
        });
        rx.await.map_err(|_| StoreError::Unavailable("claim task stopped".into()))?.map_err(StoreError::from)
    }

    async fn renew(&self, claim: &Claim, lease: std::time::Duration) -> Result<bool, StoreError> {
        Ok(self.renew_work(claim, lease).await?)
    }

    async fn remove_work(&self, claim: &Claim) -> Result<(), StoreError> {
        Ok(self.remove_claimed_work(claim).await?)
    }

    async fn release(&self, claim: &Claim) -> Result<(), StoreError> {
        Ok(self.release_work(claim).await?)
    }

    async fn work_stats(&self) -> Result<Vec<PartitionStats>, StoreError> {
        Ok(self.partition_stats().await?)
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
        self.list_dead(filter, after, limit).await
    }

    async fn dead_letter(&self, tenant: &str, id: &TaskId) -> Result<Option<DeadLetter>, StoreError> {
        self.read_dead(tenant, id).await
    }

    async fn mark_dead_letter_replayed(
        &self,
        tenant: &str,
        id: &TaskId,
        new: &TaskId,
    ) -> Result<Option<TaskId>, StoreError> {
        self.mark_dead(tenant, id, new).await
    }

    async fn discard_dead_letter(&self, tenant: &str, id: &TaskId) -> Result<bool, StoreError> {
        self.discard_dead(tenant, id).await
    }
}

#[async_trait::async_trait]
impl EventBus for RedisStore {
    async fn publish(&self, event: &str) -> Result<(), StoreError> {
        presa_store::check_event(event)?;
        self.publish_on(self.inner.keys.bus(), event).await
    }

    async fn subscribe(&self) -> Result<EventStream, StoreError> {
        self.events_of(self.inner.keys.bus(), presa_store::BUS_QUEUE).await
    }

    async fn publish_to(&self, topic: &str, message: &str) -> Result<(), StoreError> {
        self.publish_on(self.inner.keys.topic(topic), message).await
    }

    async fn subscribe_to(&self, topic: &str) -> Result<EventStream, StoreError> {
        self.events_of(self.inner.keys.topic(topic), presa_store::TOPIC_QUEUE).await
    }
}

impl RedisStore {
    async fn publish_on(&self, channel: String, message: &str) -> Result<(), StoreError> {
        let cmd = redis::cmd(self.publish_cmd()).arg(channel).arg(message).to_owned();
        self.query::<Value>(Verbosity::Info, &cmd).await?;
        Ok(())
    }

    /// The messages of `channel` through a queue of `limits` that ends its subscriber when it lags.
    async fn events_of(
        &self,
        channel: String,
        limits: presa_store::fanout::QueueLimits,
    ) -> Result<EventStream, StoreError> {
        let sub = self.inner.hub.subscribe_with(vec![channel], limits, presa_store::fanout::Overflow::End).await?;
        Ok(Box::pin(sub.map(|d| d.map(|d| String::from_utf8_lossy(&d.payload).into_owned()))))
    }
}
