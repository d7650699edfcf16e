//! Test harness: Redis-store helpers on top of `presa_testkit::redis`, which
//! provides the server itself (`PRESA_TEST_REDIS_URL`, testcontainers, or a
//! spawned `redis-server`; each test under its own key prefix, so tests run in
//! parallel without FLUSHDB).

#![allow(dead_code, unreachable_pub)]

use std::{sync::Arc, time::Duration};

use presa_store::{Backend, CreateLimits, NewTask, Scope, Task, TaskId, wrapped::Wrapped};
use presa_store_redis::{
    RedisConfig, RedisStore,
    record::{FIELDS, Record},
};
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

/// A fresh, isolated backend on a fresh (or the shared) Redis.
pub async fn make_store() -> Backend {
    make_store_keeping_dead_letters(presa_store::dead::DEFAULT_DEAD_LETTER_TTL).await
}

/// [`make_store`], keeping dead letters `ttl` after their task died.
pub async fn make_store_keeping_dead_letters(ttl: Duration) -> Backend {
    let redis = Arc::new(TestRedis::start().await);
    let store = RedisStore::connect(config(&redis).with_dead_letter_ttl(ttl)).await.expect("connect to the test Redis");
    // The store keeps its Redis server alive, as a `dyn TaskStore` must.
    Backend::new(Arc::new(Wrapped::new(Arc::new(store)).keeping(redis)))
}

/// A fresh, isolated backend on the shared test cluster (cluster mode).
pub async fn make_cluster_store() -> Backend {
    make_cluster_store_keeping_dead_letters(presa_store::dead::DEFAULT_DEAD_LETTER_TTL).await
}

/// [`make_cluster_store`], keeping dead letters `ttl` after their task died.
pub async fn make_cluster_store_keeping_dead_letters(ttl: Duration) -> Backend {
    let cfg = RedisConfig::new(presa_testkit::redis_cluster::cluster_urls())
        .with_cluster(true)
        .with_prefix(unique_prefix())
        .with_partitions(8)
        .with_op_timeout(Duration::from_secs(2))
        .with_dead_letter_ttl(ttl);
    Backend::new(Arc::new(RedisStore::connect(cfg).await.expect("connect to the test cluster")))
}

/// A raw connection for inspecting keys.
pub async fn raw(redis: &TestRedis) -> redis::aio::MultiplexedConnection {
    redis::Client::open(redis.url()).unwrap().get_multiplexed_async_connection().await.unwrap()
}

/// A task's stored record (its hash's fields): rev, attempt, status and the doc.
pub async fn stored(redis: &TestRedis, store: &RedisStore, id: &TaskId) -> (u64, u64, String, Task) {
    let key = store.keys().task(id).unwrap();
    let values: Vec<Option<Vec<u8>>> =
        redis::cmd("HMGET").arg(key).arg(&FIELDS).query_async(&mut raw(redis).await).await.unwrap();
    let r = Record::from_hash(&values).expect("a task record");
    (r.rev, r.attempt, r.status.to_owned(), serde_json::from_slice(r.doc).unwrap())
}

/// The tasks in `scope`'s active set, by their score (its expiry), in
/// order: its members but the pad `admit.lua` keeps beside them (the one
/// member that is no task id).
pub async fn active_tasks(redis: &TestRedis, store: &RedisStore, scope: &Scope) -> Vec<(String, f64)> {
    let members: Vec<(String, f64)> = redis::cmd("ZRANGE")
        .arg(store.keys().scope_active(scope))
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(&mut raw(redis).await)
        .await
        .unwrap();
    members.into_iter().filter(|(m, _)| store.keys().partition_of(&TaskId::from_wire(m)).is_some()).collect()
}
