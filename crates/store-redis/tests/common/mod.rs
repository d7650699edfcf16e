//! Test harness: Redis-store helpers on top of `presa_testkit::redis`, which
//! provides the server itself (`PRESA_TEST_REDIS_URL`, testcontainers, or a
//! spawned `redis-server`; each test under its own key prefix, so tests run in
//! parallel without FLUSHDB).

#![allow(dead_code, unreachable_pub)]

use std::{sync::Arc, time::Duration};

use presa_store::{
    Backend, Cas, Claim, CreateLimits, EventBus, EventStream, GetView, NewTask, PartitionStats, Scope, StoreError,
    Task, TaskId, TaskStore, TaskStream, Writer,
};
use presa_store_redis::{RedisConfig, RedisStore};
// Not every test binary uses every helper.
#[allow(unused_imports)]
pub use presa_testkit::redis::{TestRedis, free_port, redis_server_binary, unique_prefix};

/// No creation limits.
pub const NO_LIMITS: CreateLimits =
    CreateLimits { max_active_per_scope: None, max_bytes_per_scope: None, max_queued_per_partition: None };

/// A task with no TTL and empty work.
pub fn new_task() -> NewTask {
    NewTask {
        scope: Scope::anonymous(),
        work: presa_tasks::Work::default(),
        ttl_ms: None,
        poll_interval_ms: None,
        status_message: None,
    }
}

/// A config for `redis` under a fresh prefix, 4 partitions, 1 s timeout.
pub fn config(redis: &TestRedis) -> RedisConfig {
    RedisConfig::new(redis.url())
        .with_prefix(unique_prefix())
        .with_partitions(4)
        .with_op_timeout(Duration::from_secs(1))
}

/// A store that owns its Redis server, so a `dyn TaskStore` keeps it alive.
#[derive(Debug)]
pub struct Guarded {
    pub store: RedisStore,
    pub redis: Arc<TestRedis>,
}

#[async_trait::async_trait]
impl TaskStore for Guarded {
    async fn create(&self, new: NewTask, limits: CreateLimits) -> Result<Task, StoreError> {
        self.store.create(new, limits).await
    }
    async fn get(&self, scope: &Scope, id: &TaskId) -> Result<Option<Task>, StoreError> {
        self.store.get(scope, id).await
    }
    async fn get_view(&self, scope: &Scope, id: &TaskId) -> Result<Option<GetView>, StoreError> {
        self.store.get_view(scope, id).await
    }
    async fn load(&self, id: &TaskId) -> Result<Option<Task>, StoreError> {
        self.store.load(id).await
    }
    async fn transition(&self, next: &Task, writer: Writer) -> Result<Cas, StoreError> {
        self.store.transition(next, writer).await
    }
    async fn claim(&self, worker: &str, max: usize, lease: Duration, wait: Duration) -> Result<Vec<Claim>, StoreError> {
        self.store.claim(worker, max, lease, wait).await
    }
    async fn renew(&self, claim: &Claim, lease: Duration) -> Result<bool, StoreError> {
        self.store.renew(claim, lease).await
    }
    async fn remove_work(&self, claim: &Claim) -> Result<(), StoreError> {
        self.store.remove_work(claim).await
    }
    async fn release(&self, claim: &Claim) -> Result<(), StoreError> {
        self.store.release(claim).await
    }
    async fn watch(&self, ids: &[TaskId]) -> Result<TaskStream, StoreError> {
        self.store.watch(ids).await
    }
    async fn work_stats(&self) -> Result<Vec<PartitionStats>, StoreError> {
        self.store.work_stats().await
    }
    async fn set_session_field(
        &self,
        session: &str,
        field: &str,
        value: Option<&str>,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        self.store.set_session_field(session, field, value, ttl).await
    }
    async fn session_state(&self, session: &str) -> Result<std::collections::HashMap<String, String>, StoreError> {
        self.store.session_state(session).await
    }
}

#[async_trait::async_trait]
impl EventBus for Guarded {
    async fn publish(&self, event: &str) -> Result<(), StoreError> {
        self.store.publish(event).await
    }
    async fn subscribe(&self) -> Result<EventStream, StoreError> {
        self.store.subscribe().await
    }
}

/// A fresh, isolated backend on a fresh (or the shared) Redis.
pub async fn make_store() -> Backend {
    let redis = Arc::new(TestRedis::start().await);
    let store = RedisStore::connect(config(&redis)).await.expect("connect to the test Redis");
    Backend::new(Arc::new(Guarded { store, redis }))
}

/// A fresh, isolated backend on the shared test cluster (cluster mode).
pub async fn make_cluster_store() -> Backend {
    let cfg = RedisConfig::new(presa_testkit::redis_cluster::cluster_urls())
        .with_cluster(true)
        .with_prefix(unique_prefix())
        .with_partitions(8)
        .with_op_timeout(Duration::from_secs(2));
    Backend::new(Arc::new(RedisStore::connect(cfg).await.expect("connect to the test cluster")))
}

/// A raw connection for inspecting keys.
pub async fn raw(redis: &TestRedis) -> redis::aio::MultiplexedConnection {
    redis::Client::open(redis.url()).unwrap().get_multiplexed_async_connection().await.unwrap()
}
