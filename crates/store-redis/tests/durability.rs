//! `Durability::Replicated`: a create and a task's last write are
//! acknowledged only once a replica confirmed them (`WAIT`). Real processes:
//! a primary and a replica (`--replicaof`), the replica paused with SIGSTOP
//! to make it miss its confirmations.

mod common;

use std::time::{Duration, Instant};

use common::{NO_LIMITS, TestRedis, config, new_task};
use presa_store::{Cas, Created, Idempotency, StoreError, TaskStore, WorkQueue, Writer};
use presa_store_redis::{Durability, RedisStore};
use presa_tasks::{Event, apply};
use serde_json::json;

const WAIT: Duration = Duration::from_millis(300);
const LEASE: Duration = Duration::from_secs(30);

/// A primary and a replica that has synced with it.
fn primary_and_replica() -> (TestRedis, TestRedis) {
    let primary = TestRedis::spawn();
    let port = primary.port().to_string();
    let replica = TestRedis::spawn_with(&["--replicaof", "127.0.0.1", &port]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !replica.cli(&["INFO", "replication"]).contains("master_link_status:up") {
        assert!(Instant::now() < deadline, "the replica did not sync with its primary");
        std::thread::sleep(Duration::from_millis(50));
    }
    (primary, replica)
}

/// Whether `key` exists on `redis`.
fn exists(redis: &TestRedis, key: &str) -> bool {
    redis.cli(&["EXISTS", key]).trim() == "1"
}

fn unconfirmed(r: &Result<impl std::fmt::Debug, StoreError>) -> bool {
    matches!(r, Err(StoreError::Unconfirmed { acked: 0, wanted: 1 }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicated_writes_are_acknowledged_once_a_replica_has_them() {
    let (primary, replica) = primary_and_replica();
    let replicated = Durability::Replicated { replicas: 1, timeout: WAIT };
    let store = RedisStore::connect(config(&primary).with_durability(replicated)).await.unwrap();
    let key_of = |id| store.keys().task(id).unwrap();

    // Confirmed: the replica has the task the moment the create returns.
    let request = new_task();
    let first = store.create_idempotent(request.clone(), NO_LIMITS, None).await.unwrap().into_task();
    assert!(exists(&replica, &key_of(&first.id)), "a confirmed create is on the replica");

    // The replica stops confirming: the create is refused, retryably, after WAIT's timeout...
    replica.signal("STOP");
    let key = Idempotency::new(&request.scope, "create-1", &request.work);
    let started = Instant::now();
    let refused = store.create_idempotent(request.clone(), NO_LIMITS, Some(&key)).await;
    assert!(unconfirmed(&refused), "{refused:?}");
    assert!(refused.as_ref().is_err_and(StoreError::is_retryable));
    assert!(started.elapsed() >= WAIT, "refused only after WAIT's timeout: {:?}", started.elapsed());
    // ... and so is its retry, which makes no second task (the primary kept
    // the first). Meanwhile the pod's other commands do not wait behind the
    // WAIT: it runs on a connection of its own.
    let retry = store.create_idempotent(request.clone(), NO_LIMITS, Some(&key));
    let read = async {
        tokio::time::sleep(WAIT / 6).await;
        let started = Instant::now();
        assert!(store.get(&request.scope, &first.id).await.unwrap().is_some());
        started.elapsed()
    };
    let (again, read_took) = tokio::join!(retry, read);
    assert!(unconfirmed(&again), "{again:?}");
    assert!(read_took < WAIT / 2, "a read waited {read_took:?} behind a WAIT");
    let tasks = primary.cli(&["--scan", "--pattern", &format!("{}:*:task:*", store.keys().prefix())]);
    assert_eq!(tasks.lines().count(), 2, "one task per create, the retry made none: {tasks}");

    // A worker's outcome is kept (it is on the primary; a failover that loses
    // it brings the work back); a client's cancel is answered as unconfirmed.
    // Claims rotate over partitions: take both tasks' work, then tell them apart.
    let mut claims = Vec::new();
    while claims.len() < 2 {
        claims.extend(store.claim("w1", 2, LEASE, Duration::from_secs(1)).await.unwrap());
    }
    let (claim, second) = match claims.iter().position(|c| c.task.id == first.id) {
        Some(0) => (claims[0].clone(), claims[1].clone()),
        Some(_) => (claims[1].clone(), claims[0].clone()),
        None => panic!("the first task's work was not claimed: {claims:?}"),
    };
    let result = json!({"content": [], "isError": false});
    let done = apply(&claim.task, &Event::Complete(result), presa_store::util::now_ms()).unwrap().unwrap();
    assert!(matches!(store.conclude(&done, &claim).await, Ok(Cas::Applied(_))), "a worker's outcome is kept");
    let cancelled = apply(&second.task, &Event::Cancel, presa_store::util::now_ms()).unwrap().unwrap();
    let cancel = store.transition(&cancelled, Writer::Client).await;
    assert!(unconfirmed(&cancel), "{cancel:?}");

    // The replica is back: the retry under the key returns the task, now confirmed.
    replica.signal("CONT");
    let replayed = store.create_idempotent(request, NO_LIMITS, Some(&key)).await.unwrap();
    let Created::Replayed(task) = replayed else { panic!("the retry returns the first try's task: {replayed:?}") };
    assert_eq!(task.id, second.task.id);
    assert!(exists(&replica, &key_of(&task.id)), "a confirmed replay is on the replica");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_replicas_than_there_are_is_never_confirmed() {
    let (primary, _replica) = primary_and_replica();
    let two = Durability::Replicated { replicas: 2, timeout: WAIT };
    let store = RedisStore::connect(config(&primary).with_durability(two)).await.unwrap();
    let refused = store.create_idempotent(new_task(), NO_LIMITS, None).await;
    assert!(matches!(refused, Err(StoreError::Unconfirmed { acked: 1, wanted: 2 })), "{refused:?}");
}

#[tokio::test]
async fn replicated_durability_is_checked() {
    let redis = TestRedis::spawn();
    for (durability, why) in [
        (Durability::Replicated { replicas: 0, timeout: WAIT }, "at least one replica"),
        (Durability::Replicated { replicas: 1, timeout: Duration::ZERO }, "positive timeout"),
    ] {
        let err = RedisStore::open(config(&redis).with_durability(durability)).unwrap_err();
        assert!(err.to_string().contains(why), "{err}");
    }
}

/// Calls of `command` the server ran so far (`INFO commandstats`).
fn calls(redis: &TestRedis, command: &str) -> u64 {
    let prefix = format!("cmdstat_{command}:calls=");
    redis
        .cli(&["INFO", "commandstats"])
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()).and_then(|rest| rest.split(',').next()).map(str::to_owned))
        .map_or(0, |n| n.parse().unwrap())
}

/// Group commit: creates that wait together (joined on a current-thread
/// runtime, they all queue before the flush runs) are one script call and
/// one `WAIT`, whose confirmation, or its lack, is each create's.
#[tokio::test]
async fn a_batch_of_creates_is_confirmed_by_one_wait() {
    let (primary, replica) = primary_and_replica();
    let replicated = Durability::Replicated { replicas: 1, timeout: WAIT };
    let store = RedisStore::connect(config(&primary).with_durability(replicated)).await.unwrap();
    let batch = |n| futures::future::join_all((0..n).map(|_| store.create_idempotent(new_task(), NO_LIMITS, None)));
    let warmup = batch(2).await;
    assert!(warmup.iter().all(Result::is_ok), "the batch script is loaded: {warmup:?}");

    let before = (calls(&primary, "evalsha"), calls(&primary, "wait"));
    let created = batch(5).await;
    let after = (calls(&primary, "evalsha"), calls(&primary, "wait"));
    assert_eq!((after.0 - before.0, after.1 - before.1), (1, 1), "one script call and one WAIT for five creates");
    for c in created {
        let id = c.unwrap().into_task().id;
        assert!(exists(&replica, &store.keys().task(&id).unwrap()), "every create of the batch is on the replica");
    }

    replica.signal("STOP");
    let refused = batch(3).await;
    replica.signal("CONT");
    assert!(refused.iter().all(unconfirmed), "an unconfirmed batch is each create's error: {refused:?}");
}
