//! Group commit (`batch.rs`): concurrent creates and a worker's concluding
//! writes share script calls, each write still answered as if alone. On a
//! current-thread runtime, futures joined together all queue before the
//! flush task runs, so they form batches deterministically (the default
//! `batch_max`, 64). Each test runs its own `redis-server`, whose
//! `INFO commandstats` counts the script calls.

mod common;

use std::{collections::HashSet, time::Duration};

use common::{TestRedis, active_tasks, config, raw};
use futures::future::join_all;
use presa_store::{
    Cas, CreateLimits, Created, Idempotency, Limit, NewTask, Scope, Status, StoreError, TaskStore, WorkQueue,
    util::now_ms,
};
use presa_store_redis::{RedisStore, keys::GROUP};
use presa_tasks::{Event, Work, apply};
use redis::AsyncCommands;

const LONG: Duration = Duration::from_secs(30);
const PATIENCE: Duration = Duration::from_secs(5);

fn in_scope(subject: &str) -> NewTask {
    NewTask {
        scope: Scope { tenant: "acme".into(), subject: subject.into(), endpoint: None },
        work: Work { tool: "echo".into(), ..Work::default() },
        ttl_ms: Some(60_000),
        poll_interval_ms: None,
        status_message: None,
    }
}

/// EVALSHA calls the server ran so far (`INFO commandstats`).
async fn evalsha_calls(redis: &TestRedis) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query_async(&mut raw(redis).await).await.unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

/// Entries in the store's work streams (queued or pending).
async fn work_entries(redis: &TestRedis, store: &RedisStore) -> usize {
    let mut c = raw(redis).await;
    let mut total = 0;
    for p in 0..store.keys().partitions() {
        let len: usize = c.xlen(store.keys().work(p)).await.unwrap();
        total += len;
    }
    total
}

/// A private server and a store on it whose batch scripts are loaded (a
/// batch of two creates and one of their two concludes ran), so EVALSHA
/// counts are not inflated by NOSCRIPT retries. No work is left.
async fn warm(partitions: u16) -> (TestRedis, RedisStore) {
    let redis = TestRedis::spawn();
    let store = RedisStore::connect(config(&redis).with_partitions(partitions)).await.unwrap();
    let warmup = join_all((0..2).map(|_| store.create(in_scope("warmup"), CreateLimits::NONE))).await;
    assert!(warmup.iter().all(Result::is_ok), "{warmup:?}");
    let mut claims = Vec::new();
    while claims.len() < 2 {
        claims.extend(store.claim("warmup", 2 - claims.len(), LONG, PATIENCE).await.unwrap());
    }
    let dones: Vec<_> = claims.iter().map(|c| apply(&c.task, &Event::Cancel, now_ms()).unwrap().unwrap()).collect();
    let concluded = join_all(dones.iter().zip(&claims).map(|(done, c)| store.conclude(done, c))).await;
    assert!(concluded.iter().all(|r| matches!(r, Ok(Cas::Applied(_)))), "{concluded:?}");
    assert_eq!(work_entries(&redis, &store).await, 0);
    (redis, store)
}

#[tokio::test]
async fn concurrent_creates_share_script_calls_and_each_gets_its_own_task() {
    let (redis, store) = warm(4).await;
    let before = (evalsha_calls(&redis).await, work_entries(&redis, &store).await);
    let limits =
        CreateLimits { max_active_per_scope: Some(1000), max_bytes_per_scope: Some(1 << 30), ..CreateLimits::NONE };
    let created = join_all((0..200).map(|i| store.create(in_scope(&format!("s{}", i % 7)), limits))).await;
    let calls = evalsha_calls(&redis).await - before.0;
    let tasks: Vec<_> = created.into_iter().map(Result::unwrap).collect();
    let ids: HashSet<_> = tasks.iter().map(|t| t.id.clone()).collect();
    assert_eq!(ids.len(), 200, "distinct ids");
    for t in &tasks {
        let stored = store.get(&t.scope, &t.id).await.unwrap().expect("every task is stored");
        assert_eq!(stored.status, Status::Working);
    }
    assert_eq!(work_entries(&redis, &store).await - before.1, 200, "one work entry each");
    eprintln!("200 concurrent creates: {calls} EVALSHA calls");
    // 64 at most a call: four calls; a few more if the flush ran early.
    assert!(calls <= 10, "200 creates took {calls} script calls");
}

#[tokio::test]
async fn a_create_refused_in_a_batch_leaves_the_others_written() {
    let (redis, store) = warm(4).await;
    let limits = CreateLimits { max_active_per_scope: Some(2), ..CreateLimits::NONE };
    let before = (evalsha_calls(&redis).await, work_entries(&redis, &store).await);
    let results =
        join_all(["a", "a", "a", "b"].into_iter().map(|subject| store.create(in_scope(subject), limits))).await;
    assert_eq!(evalsha_calls(&redis).await - before.0, 1, "one script call for the four");
    assert!(results[0].is_ok() && results[1].is_ok() && results[3].is_ok(), "{results:?}");
    assert!(
        matches!(results[2], Err(StoreError::Capacity { limit: Limit::MaxActiveTasksPerScope })),
        "the third of scope a is over its limit: {:?}",
        results[2]
    );
    assert_eq!(work_entries(&redis, &store).await - before.1, 3, "the refused create wrote no work");
    let active = active_tasks(&redis, &store, &in_scope("a").scope).await;
    assert_eq!(active.len(), 2, "the refused create left no admission");
}

/// The creates of a batch into one stream count it once (`create.lua`
/// knows its length from its own XADDs): the bound on queued work holds
/// exactly, as it would for creates one at a time.
#[tokio::test]
async fn a_batch_of_creates_fills_a_stream_to_its_bound_and_no_further() {
    let (redis, store) = warm(1).await;
    let limits = CreateLimits { max_queued_per_partition: Some(3), ..CreateLimits::NONE };
    let first = store.create(in_scope("a"), limits).await;
    assert!(first.is_ok(), "{first:?}");
    let before = evalsha_calls(&redis).await;
    let results = join_all((0..4).map(|_| store.create(in_scope("a"), limits))).await;
    assert_eq!(evalsha_calls(&redis).await - before, 1, "one script call for the four");
    assert!(results[0].is_ok() && results[1].is_ok(), "{results:?}");
    for full in &results[2..] {
        assert!(matches!(full, Err(StoreError::QueueFull)), "the stream holds 3: {full:?}");
    }
    assert_eq!(work_entries(&redis, &store).await, 3, "three queued, no more");
}

#[tokio::test]
async fn keyed_creates_in_one_batch_make_one_task_and_replay_it() {
    let (redis, store) = warm(4).await;
    let new = in_scope("a");
    let key = Idempotency::new(&new.scope, "same-request", &new.work);
    let before = (evalsha_calls(&redis).await, work_entries(&redis, &store).await);
    let results = join_all((0..5).map(|_| store.create_idempotent(new.clone(), CreateLimits::NONE, Some(&key)))).await;
    assert_eq!(evalsha_calls(&redis).await - before.0, 1, "one script call for the five");
    let results: Vec<Created> = results.into_iter().map(Result::unwrap).collect();
    assert!(matches!(results[0], Created::New(_)), "the first creates");
    let id = &results[0].task().id;
    for r in &results[1..] {
        assert!(matches!(r, Created::Replayed(t) if &t.id == id), "the others replay the first's task: {r:?}");
    }
    assert_eq!(work_entries(&redis, &store).await - before.1, 1, "one task, one work entry");
}

#[tokio::test]
async fn a_stale_conclude_in_a_batch_conflicts_alone() {
    // One partition: the claims below take tasks in creation order.
    let (redis, store) = warm(1).await;
    // The middle task's first holder loses its lease to b: its fence is stale.
    let stale_task = store.create(in_scope("a"), CreateLimits::NONE).await.unwrap();
    let stale = store.claim("a", 1, Duration::from_millis(1), PATIENCE).await.unwrap().remove(0);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let fresh = store.claim("b", 1, LONG, PATIENCE).await.unwrap().remove(0);
    assert_eq!((&fresh.task.id, fresh.task.attempt), (&stale_task.id, 2));
    let first = store.create(in_scope("a"), CreateLimits::NONE).await.unwrap();
    let third = store.create(in_scope("a"), CreateLimits::NONE).await.unwrap();
    let claims = store.claim("w", 2, LONG, PATIENCE).await.unwrap();
    assert_eq!(claims.iter().map(|c| &c.task.id).collect::<Vec<_>>(), vec![&first.id, &third.id]);
    assert_eq!(work_entries(&redis, &store).await, 3);

    let batch = [&claims[0], &stale, &claims[1]];
    let nexts: Vec<_> = batch
        .iter()
        .map(|c| apply(&c.task, &Event::Complete(serde_json::json!({"ok": true})), now_ms()).unwrap().unwrap())
        .collect();
    let before = evalsha_calls(&redis).await;
    let results = join_all(nexts.iter().zip(batch).map(|(next, c)| store.conclude(next, c))).await;
    assert_eq!(evalsha_calls(&redis).await - before, 1, "one script call for the three");
    assert!(matches!(results[0], Ok(Cas::Applied(_))), "{:?}", results[0]);
    assert!(
        matches!(&results[1], Ok(Cas::Conflict(Some(stored))) if stored.attempt == 2 && stored.status == Status::Working),
        "the stale write is refused with what is stored: {:?}",
        results[1]
    );
    assert!(matches!(results[2], Ok(Cas::Applied(_))), "{:?}", results[2]);
    for t in [&first, &third] {
        assert_eq!(store.get(&t.scope, &t.id).await.unwrap().unwrap().status, Status::Completed);
    }
    assert_eq!(work_entries(&redis, &store).await, 1, "the written two acked and deleted their work; b's stays");
    assert!(store.renew(&fresh, LONG).await.unwrap(), "b still holds its work");
    let done = apply(&fresh.task, &Event::Cancel, now_ms()).unwrap().unwrap();
    assert!(matches!(store.conclude(&done, &fresh).await.unwrap(), Cas::Applied(_)));
    assert_eq!(work_entries(&redis, &store).await, 0);
}

#[tokio::test]
async fn batch_max_one_runs_each_write_alone() {
    let redis = TestRedis::spawn();
    let store = RedisStore::connect(config(&redis).with_batch_max(1)).await.unwrap();
    store.create(in_scope("warmup"), CreateLimits::NONE).await.unwrap();
    let before = evalsha_calls(&redis).await;
    let created = join_all((0..5).map(|_| store.create(in_scope("a"), CreateLimits::NONE))).await;
    assert!(created.iter().all(Result::is_ok), "{created:?}");
    assert_eq!(evalsha_calls(&redis).await - before, 5, "one script call each");
}

/// The bytes a task's scope counts it at, from the `q` field of its hash.
async fn counted(redis: &TestRedis, store: &RedisStore, id: &presa_store::TaskId) -> u64 {
    let q: String = raw(redis).await.hget(store.keys().task(id).unwrap(), "q").await.unwrap();
    q.split(':').next().unwrap().parse().unwrap()
}

/// A scope's byte buckets: (`total`, the sum of the buckets).
async fn bucket_sums(redis: &TestRedis, store: &RedisStore, scope: &Scope) -> (u64, u64) {
    let all: Vec<(String, u64)> = raw(redis).await.hgetall(store.keys().scope_bytes_buckets(scope)).await.unwrap();
    let total = all.iter().find(|(f, _)| f == "total").map_or(0, |(_, n)| *n);
    (total, all.iter().filter(|(f, _)| f != "total").map(|(_, n)| n).sum())
}

/// Calls of a batch share what is per scope or per stream (group.lua: the
/// admission's count and expiry, the byte quota's totals, the acks and set
/// removals held to the batch's end): the counts they leave must be the
/// ones the calls alone would have left.
#[tokio::test]
async fn a_batch_keeps_each_scopes_counts_exact() {
    let (redis, store) = warm(2).await;
    let limits =
        CreateLimits { max_active_per_scope: Some(1000), max_bytes_per_scope: Some(1 << 30), ..CreateLimits::NONE };
    let subjects = ["a", "b", "c"];
    let before = evalsha_calls(&redis).await;
    let created = join_all((0..30).map(|i| store.create(in_scope(subjects[i % 3]), limits))).await;
    assert!(evalsha_calls(&redis).await - before <= 3, "the creates were batched");
    let tasks: Vec<_> = created.into_iter().map(Result::unwrap).collect();
    let mut c = raw(&redis).await;
    for subject in subjects {
        let scope = in_scope(subject).scope;
        let mine: Vec<_> = tasks.iter().filter(|t| t.scope == scope).collect();
        let active = store.keys().scope_active(&scope);
        let members = active_tasks(&redis, &store, &scope).await;
        assert_eq!(members.len(), mine.len(), "{subject}: each create admitted once");
        let card: usize = c.zcard(&active).await.unwrap();
        assert_eq!(card, mine.len() + 1, "{subject}: and the pad beside them");
        let encoding: String = redis::cmd("OBJECT").arg("ENCODING").arg(&active).query_async(&mut c).await.unwrap();
        assert_eq!(encoding, "skiplist", "{subject}: the pad keeps the set a skiplist");
        let expires: i64 = redis::cmd("PEXPIRETIME").arg(&active).query_async(&mut c).await.unwrap();
        let last = members.last().unwrap().1;
        assert!(expires as f64 >= last, "{subject}: the set outlives its last task ({expires} < {last})");
        let mut bytes = 0;
        for t in &mine {
            bytes += counted(&redis, &store, &t.id).await;
        }
        assert_eq!(bucket_sums(&redis, &store, &scope).await, (bytes, bytes), "{subject}: every reservation counted");
        let ttl: i64 = c.pttl(store.keys().scope_bytes_buckets(&scope)).await.unwrap();
        assert!(ttl > 0, "{subject}: the buckets expire");
    }

    // Claimed, then concluded together: one batch a partition.
    let mut claims = Vec::new();
    while claims.len() < tasks.len() {
        claims.extend(store.claim("w", tasks.len() - claims.len(), LONG, PATIENCE).await.unwrap());
    }
    let dones: Vec<_> = claims
        .iter()
        .map(|c| {
            apply(&c.task, &Event::Complete(serde_json::json!({"result": "x".repeat(100)})), now_ms()).unwrap().unwrap()
        })
        .collect();
    let before = evalsha_calls(&redis).await;
    let concluded = join_all(dones.iter().zip(&claims).map(|(done, c)| store.conclude(done, c))).await;
    assert!(concluded.iter().all(|r| matches!(r, Ok(Cas::Applied(_)))), "{concluded:?}");
    assert!(evalsha_calls(&redis).await - before <= 3, "the concludes were batched");
    assert_eq!(work_entries(&redis, &store).await, 0, "every entry acked and deleted");
    for subject in subjects {
        let scope = in_scope(subject).scope;
        let exists: bool = c.exists(store.keys().scope_active(&scope)).await.unwrap();
        assert!(!exists, "{subject}: every ended task left the active set");
        let mut bytes = 0;
        for t in tasks.iter().filter(|t| t.scope == scope) {
            let stored = store.get(&t.scope, &t.id).await.unwrap().unwrap();
            assert_eq!(stored.status, Status::Completed);
            let size = counted(&redis, &store, &t.id).await;
            assert!(size > 100, "counted at its final size");
            bytes += size;
        }
        assert_eq!(bucket_sums(&redis, &store, &scope).await, (bytes, bytes), "{subject}: every growth counted");
    }
    for p in 0..store.keys().partitions() {
        let summary: (u64, redis::Value, redis::Value, redis::Value) =
            redis::cmd("XPENDING").arg(store.keys().work(p)).arg(GROUP).query_async(&mut c).await.unwrap();
        assert_eq!(summary.0, 0, "partition {p}: nothing left pending");
    }
}

/// A batch whose creates pass the byte quota part-way: the ones that fit
/// are reserved, the rest refused, and the scope counts exactly the former.
#[tokio::test]
async fn a_byte_quota_reached_within_a_batch_refuses_the_rest() {
    let (redis, store) = warm(2).await;
    // Tasks of one request count the same (their ids are of one length).
    let probe_limits = CreateLimits { max_bytes_per_scope: Some(1 << 30), ..CreateLimits::NONE };
    let probe = store.create(in_scope("r"), probe_limits).await.unwrap();
    let size = counted(&redis, &store, &probe.id).await;
    let scope = in_scope("r").scope;
    let mut c = raw(&redis).await;
    let _: () = c.del(store.keys().scope_bytes_buckets(&scope)).await.unwrap();
    let limits = CreateLimits { max_bytes_per_scope: Some(2 * size + size / 2), ..CreateLimits::NONE };
    let before = evalsha_calls(&redis).await;
    let results = join_all((0..5).map(|_| store.create(in_scope("r"), limits))).await;
    assert_eq!(evalsha_calls(&redis).await - before, 1, "one script call for the five");
    assert!(results[0].is_ok() && results[1].is_ok(), "{results:?}");
    for r in &results[2..] {
        assert!(matches!(r, Err(StoreError::Capacity { limit: Limit::MaxBytesPerScope })), "{r:?}");
    }
    let mut bytes = 0;
    for r in &results[..2] {
        bytes += counted(&redis, &store, &r.as_ref().unwrap().id).await;
    }
    assert_eq!(bucket_sums(&redis, &store, &scope).await, (bytes, bytes), "only the two counted");
}
