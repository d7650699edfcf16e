//! The stored layout of a task (`lua/task.lua`, `src/record.rs`): a hash of
//! `rev`, `attempt`, `status` and `doc`; string records of an earlier
//! release read and turned into hashes by their next write, keeping their
//! expiry; hashes written by hand read and written like new ones; a key
//! holding no record. And the byte quota's (`lua/bytes.lua`): a task's `q`
//! and its scope's buckets, beside the reservations of an earlier release.

mod common;

use std::{collections::HashMap, time::Duration};

use common::{NO_LIMITS, TestRedis, config, new_task, raw, stored};
use presa_store::{Cas, NewTask, Scope, Task, TaskStore, WorkQueue, Writer, util::now_ms};
use presa_store_redis::RedisStore;
use presa_tasks::{Event, apply};
use redis::AsyncCommands;
use serde_json::json;

const LONG: Duration = Duration::from_secs(30);
const PATIENCE: Duration = Duration::from_secs(5);

fn next(task: &Task, event: Event) -> Task {
    apply(task, &event, now_ms()).unwrap().unwrap()
}

fn expiring() -> NewTask {
    NewTask { ttl_ms: Some(600_000), ..new_task() }
}

async fn kind(c: &mut redis::aio::MultiplexedConnection, key: &str) -> String {
    redis::cmd("TYPE").arg(key).query_async(c).await.unwrap()
}

/// A record as another writer would store it.
enum Written {
    String(String),
    Hash([(&'static str, String); 4]),
}

/// Replace the record at `key` by `value`, keeping its expiry; returns the
/// time it had left (-1: none).
async fn rewrite(c: &mut redis::aio::MultiplexedConnection, key: &str, value: Written) -> i64 {
    let ttl: i64 = c.pttl(key).await.unwrap();
    let _: () = c.del(key).await.unwrap();
    let _: () = match value {
        Written::String(string) => c.set(key, string).await.unwrap(),
        Written::Hash(fields) => c.hset_multiple(key, &fields).await.unwrap(),
    };
    if ttl > 0 {
        let _: () = c.pexpire(key, ttl).await.unwrap();
    }
    ttl
}

#[tokio::test]
async fn a_new_task_is_a_hash_of_rev_attempt_status_and_doc() {
    let redis = TestRedis::start().await;
    let store = RedisStore::connect(config(&redis)).await.unwrap();
    let task = store.create(expiring(), NO_LIMITS).await.unwrap();
    let key = store.keys().task(&task.id).unwrap();
    let mut c = raw(&redis).await;
    assert_eq!(kind(&mut c, &key).await, "hash");
    let mut fields: HashMap<String, String> = c.hgetall(&key).await.unwrap();
    let doc: Task = serde_json::from_str(&fields.remove("doc").expect("a doc")).unwrap();
    assert_eq!(doc, task);
    let want = [("rev", "1"), ("attempt", "0"), ("status", "working")];
    assert_eq!(fields, want.map(|(f, v)| (f.to_owned(), v.to_owned())).into());

    // Its writes keep it a hash, with its expiry.
    let ttl: i64 = c.pttl(&key).await.unwrap();
    let claim = store.claim("w1", 1, LONG, PATIENCE).await.unwrap().remove(0);
    let done = next(&claim.task, Event::Complete(json!({"content": []})));
    assert_eq!(store.transition(&done, claim.writer()).await.unwrap(), Cas::Applied(done.clone()));
    assert_eq!(stored(&redis, &store, &task.id).await, (3, 1, "completed".into(), done));
    let left: i64 = c.pttl(&key).await.unwrap();
    assert!(left > 0 && left <= ttl, "expiry kept: {left} of {ttl} ms");
}

/// A string record (`"<rev> <attempt> <status>\n<doc>"`, the layout of an
/// earlier release) is read, and the first write of its task, by a claim or
/// a transition, turns it into a hash with the time it had left.
#[tokio::test]
async fn a_string_record_is_read_and_its_next_write_makes_it_a_hash() {
    let redis = TestRedis::start().await;
    let store = RedisStore::connect(config(&redis)).await.unwrap();
    let mut c = raw(&redis).await;
    let as_string = |t: &Task| Written::String(format!("1 0 working\n{}", serde_json::to_string(t).unwrap()));

    let task = store.create(expiring(), NO_LIMITS).await.unwrap();
    let key = store.keys().task(&task.id).unwrap();
    let ttl = rewrite(&mut c, &key, as_string(&task)).await;
    assert_eq!(kind(&mut c, &key).await, "string");
    assert_eq!(store.get(&Scope::anonymous(), &task.id).await.unwrap(), Some(task.clone()));
    let claim = store.claim("w1", 1, LONG, PATIENCE).await.unwrap().remove(0);
    assert_eq!((claim.task.id.clone(), claim.task.attempt), (task.id.clone(), 1));
    assert_eq!(kind(&mut c, &key).await, "hash", "the claim rewrote the record");
    let left: i64 = c.pttl(&key).await.unwrap();
    assert!(left > 0 && left <= ttl, "expiry kept: {left} of {ttl} ms");
    assert_eq!(stored(&redis, &store, &task.id).await, (2, 1, "working".into(), claim.task.clone()));

    // A client's transition converts one too; a record without expiry stays so.
    let forever = store.create(new_task(), NO_LIMITS).await.unwrap();
    let key = store.keys().task(&forever.id).unwrap();
    assert_eq!(rewrite(&mut c, &key, as_string(&forever)).await, -1);
    let cancelled = next(&forever, Event::Cancel);
    assert_eq!(store.transition(&cancelled, Writer::Client).await.unwrap(), Cas::Applied(cancelled.clone()));
    assert_eq!(kind(&mut c, &key).await, "hash");
    assert_eq!(c.pttl::<_, i64>(&key).await.unwrap(), -1, "still no expiry");
    assert_eq!(stored(&redis, &store, &forever.id).await, (2, 0, "cancelled".into(), cancelled));
}

/// Hashes written before the string layout are this layout: read, claimed
/// and written like new ones, still a hash with its expiry.
#[tokio::test]
async fn a_hash_written_by_hand_reads_claims_and_finishes() {
    let redis = TestRedis::start().await;
    let store = RedisStore::connect(config(&redis)).await.unwrap();
    let task = store.create(expiring(), NO_LIMITS).await.unwrap();
    let key = store.keys().task(&task.id).unwrap();
    let mut c = raw(&redis).await;
    let fields = [
        ("doc", serde_json::to_string(&task).unwrap()),
        ("rev", "1".into()),
        ("attempt", "0".into()),
        ("status", "working".into()),
    ];
    let ttl = rewrite(&mut c, &key, Written::Hash(fields)).await;
    assert_eq!(store.get(&Scope::anonymous(), &task.id).await.unwrap(), Some(task.clone()));

    let claim = store.claim("w1", 1, LONG, PATIENCE).await.unwrap().remove(0);
    assert_eq!((claim.task.id.clone(), claim.task.attempt), (task.id.clone(), 1));
    assert_eq!(kind(&mut c, &key).await, "hash");
    let left: i64 = c.pttl(&key).await.unwrap();
    assert!(left > 0 && left <= ttl, "expiry kept: {left} of {ttl} ms");
    assert_eq!(stored(&redis, &store, &task.id).await, (2, 1, "working".into(), claim.task.clone()));

    let done = next(&claim.task, Event::Complete(json!({"ok": true})));
    assert_eq!(store.transition(&done, claim.writer()).await.unwrap(), Cas::Applied(done.clone()));
    assert_eq!(stored(&redis, &store, &task.id).await.2, "completed");
}

/// A value at a task's key that is not a task record is reported as corrupt
/// by reads, and scripts treat it as no task (nothing is overwritten).
#[tokio::test]
async fn a_key_holding_no_task_record_reads_as_corrupt() {
    let redis = TestRedis::start().await;
    let store = RedisStore::connect(config(&redis)).await.unwrap();
    let task = store.create(new_task(), NO_LIMITS).await.unwrap();
    let key = store.keys().task(&task.id).unwrap();
    let mut c = raw(&redis).await;
    let _: () = c.set(&key, "not a record").await.unwrap();
    let err = store.get(&Scope::anonymous(), &task.id).await.unwrap_err();
    assert!(err.to_string().contains("corrupt"), "{err}");
    let write = next(&task, Event::SetMessage("x".into()));
    assert_eq!(store.transition(&write, Writer::Client).await.unwrap(), Cas::Conflict(None));
    let value: String = c.get(&key).await.unwrap();
    assert_eq!(value, "not a record");
}

/// The byte quota counts a task in its own hash (`q` = "<bytes>:<bucket>")
/// and in its scope's bucket hash (the bucket and the total), with no entry
/// per task in the scope (`bytes.lua`): a write that grows the task moves
/// both to its new size; the scope's hash expires at its latest bucket's
/// end, at or just after the task's expiry.
#[tokio::test]
async fn a_tasks_byte_reservation_is_its_bucket_and_its_own_q_field() {
    let redis = TestRedis::start().await;
    let store = RedisStore::connect(config(&redis)).await.unwrap();
    let limits = presa_store::CreateLimits { max_bytes_per_scope: Some(1 << 20), ..NO_LIMITS };
    let task = store.create(expiring(), limits).await.unwrap();
    let buckets = store.keys().scope_bytes_buckets(&task.scope);
    let key = store.keys().task(&task.id).unwrap();
    let mut c = raw(&redis).await;
    let size: u64 = redis::cmd("HSTRLEN").arg(&key).arg("doc").query_async(&mut c).await.unwrap();
    let q: String = c.hget(&key, "q").await.unwrap();
    let (counted, bucket) = q.split_once(':').unwrap();
    assert_eq!(counted.parse::<u64>().unwrap(), size, "counted at its size");
    let bucket: u64 = bucket.parse().unwrap();
    let expiry = task.created_at_ms + 600_000;
    // A 64th of its lifetime at most (600 s / 64, rounded down to a power of two: 8,192 ms).
    assert!(bucket >= expiry && bucket < expiry + 8192, "bucket {bucket} ends just after the expiry {expiry}");
    let scope: HashMap<String, u64> = c.hgetall(&buckets).await.unwrap();
    assert_eq!(scope, HashMap::from([(bucket.to_string(), size), ("total".into(), size)]));
    let expires: i64 = redis::cmd("PEXPIRETIME").arg(&buckets).query_async(&mut c).await.unwrap();
    assert_eq!(expires, bucket as i64, "the scope's hash lasts until its latest bucket ends");
    for legacy in legacy_byte_keys(&buckets) {
        assert!(!c.exists::<_, bool>(&legacy).await.unwrap(), "{legacy} is not written any more");
    }

    let claim = store.claim("w1", 1, LONG, PATIENCE).await.unwrap().remove(0);
    let done = next(&claim.task, Event::Complete(json!({ "content": [{ "type": "text", "text": "done" }] })));
    assert!(matches!(store.transition(&done, claim.writer()).await.unwrap(), Cas::Applied(_)));
    let final_size: u64 = redis::cmd("HSTRLEN").arg(&key).arg("doc").query_async(&mut c).await.unwrap();
    assert!(final_size > size, "the result grew the task");
    let q: String = c.hget(&key, "q").await.unwrap();
    assert_eq!(q, format!("{final_size}:{bucket}"), "counted at its final size, in the same bucket");
    let scope: HashMap<String, u64> = c.hgetall(&buckets).await.unwrap();
    assert_eq!(scope, HashMap::from([(bucket.to_string(), final_size), ("total".into(), final_size)]));
}

/// The names of a scope's byte reservations in the layout before the
/// buckets (`bytes`, `bytes_sizes`, `bytes_total`), from its buckets' key.
fn legacy_byte_keys(buckets: &str) -> [String; 3] {
    let bytes = buckets.strip_suffix("_q").expect("the buckets' key ends in _q");
    [bytes.to_owned(), format!("{bytes}_sizes"), format!("{bytes}_total")]
}

/// Reservations in the layout before the buckets (one entry a task in the
/// scope's `bytes`, `bytes_sizes` and `bytes_total`, written by the release
/// before the previous one) are neither counted nor touched: a rolling
/// upgrade is from the previous release, which never writes them
/// (docs/redis.md, "Rolling upgrades").
#[tokio::test]
async fn reservations_of_the_layout_before_the_buckets_are_not_counted() {
    let redis = TestRedis::start().await;
    let store = RedisStore::connect(config(&redis)).await.unwrap();
    let mut c = raw(&redis).await;
    let old = store.create(expiring(), NO_LIMITS).await.unwrap();
    let old_key = store.keys().task(&old.id).unwrap();
    let one: u64 = redis::cmd("HSTRLEN").arg(&old_key).arg("doc").query_async(&mut c).await.unwrap();
    let buckets = store.keys().scope_bytes_buckets(&old.scope);
    let [reservations, sizes, total] = legacy_byte_keys(&buckets);
    let expiry = old.created_at_ms + 600_000;
    let _: () = c.zadd(&reservations, old.id.as_str(), expiry).await.unwrap();
    let _: () = c.hset(&sizes, old.id.as_str(), 100 * one).await.unwrap();
    let _: () = c.set(&total, 100 * one).await.unwrap();

    // Room for two and a half tasks: two new ones fit, a third does not;
    // the hundred tasks' worth in the old layout count nothing.
    let limits = presa_store::CreateLimits { max_bytes_per_scope: Some(2 * one + one / 2), ..NO_LIMITS };
    store.create(expiring(), limits).await.expect("a first new task fits");
    store.create(expiring(), limits).await.expect("a second new task fits");
    let refused = store.create(expiring(), limits).await;
    assert!(
        matches!(refused, Err(presa_store::StoreError::Capacity { limit: presa_store::Limit::MaxBytesPerScope })),
        "the buckets alone count: {refused:?}"
    );

    // The old task (no `q`) ends: nothing is counted for it anywhere.
    let mut claims = store.claim("w1", 3, LONG, PATIENCE).await.unwrap();
    let claim = claims.remove(claims.iter().position(|c| c.task.id == old.id).unwrap());
    let done = next(&claim.task, Event::Complete(json!({ "content": [{ "type": "text", "text": "done" }] })));
    assert!(matches!(store.transition(&done, claim.writer()).await.unwrap(), Cas::Applied(_)));
    assert!(!c.hexists::<_, _, bool>(&old_key, "q").await.unwrap(), "an old task gets no `q`");
    let counted: u64 = c.hget(&buckets, "total").await.unwrap();
    assert_eq!(counted, 2 * one, "the two new tasks");
    let members: Vec<(String, f64)> = c.zrange_withscores(&reservations, 0, -1).await.unwrap();
    assert_eq!(members, vec![(old.id.to_string(), expiry as f64)], "the old layout is left as it was");
    let size: u64 = c.hget(&sizes, old.id.as_str()).await.unwrap();
    assert_eq!(size, 100 * one);
    let legacy_total: u64 = c.get(&total).await.unwrap();
    assert_eq!(legacy_total, 100 * one);
}
