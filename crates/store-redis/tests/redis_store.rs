//! Redis-specific behaviour of the store, beyond the shared contract: the
//! key layout (a task's own record: `layout.rs`), scripts' edge cases, lease mechanics, pub/sub fan-out and
//! reconnects, the per-scope limit's repair, queue statistics, and failing
//! fast when Redis is unreachable or hangs.

mod common;

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    time::{Duration, Instant},
};

use common::{TestRedis, active_tasks, config, raw, stored};
use futures::StreamExt;
use presa_store::{
    Cas, CreateLimits, EventBus, Idempotency, NewTask, Scope, Status, StoreError, Task, TaskId, TaskStore, WorkQueue,
    Writer, util::now_ms,
};
use presa_store_redis::{RedisConfig, RedisStore, RedisStoreError, keys::GROUP};
use presa_tasks::{Event, Work, apply};
use redis::AsyncCommands;
use serde_json::json;

const NO_LIMITS: CreateLimits =
    CreateLimits { max_active_per_scope: None, max_bytes_per_scope: None, max_queued_per_partition: None };

/// Only the per-scope active-task limit, at `n`.
fn active_limit(n: u64) -> CreateLimits {
    CreateLimits { max_active_per_scope: Some(n), max_bytes_per_scope: None, max_queued_per_partition: None }
}
const LONG: Duration = Duration::from_secs(30);
const PATIENCE: Duration = Duration::from_secs(5);

fn owner() -> Scope {
    Scope { tenant: "acme".into(), subject: "alice".into(), endpoint: None }
}

fn new_task(ttl_ms: Option<u64>) -> NewTask {
    NewTask {
        scope: owner(),
        work: Work {
            tool: "echo".into(),
            // Values JSON round trips must keep exactly (no cjson in Lua).
            arguments: json!({"big": 9007199254740993u64, "empty": [], "obj": {}, "f": 0.1}),
            client_capabilities: Default::default(),
            input_responses: None,
            trace: BTreeMap::new(),
            caller: None,
            replay_of: None,
            worker: None,
        },
        ttl_ms,
        poll_interval_ms: Some(500),
        status_message: None,
    }
}

fn next(task: &Task, event: Event) -> Task {
    apply(task, &event, now_ms()).unwrap().unwrap()
}

async fn store_on(redis: &TestRedis) -> RedisStore {
    RedisStore::connect(config(redis)).await.expect("connect")
}

#[tokio::test]
async fn create_stores_fields_expiry_and_one_work_entry() {
    let redis = TestRedis::start().await;
    let store = store_on(&redis).await;
    let task = store.create(new_task(Some(60_000)), NO_LIMITS).await.unwrap();
    let (rev, attempt, status, doc) = stored(&redis, &store, &task.id).await;
    assert_eq!((rev, attempt, status.as_str()), (1, 0, "working"));
    assert_eq!(doc, task);
    assert_eq!(doc.work.arguments["big"], json!(9007199254740993u64));

    let mut c = raw(&redis).await;
    let key = store.keys().task(&task.id).unwrap();
    let expire_at: i64 = redis::cmd("PEXPIRETIME").arg(&key).query_async(&mut c).await.unwrap();
    assert_eq!(expire_at as u64, task.created_at_ms + 60_000);

    let p = task.id.partition().unwrap();
    let entries: redis::streams::StreamRangeReply = c.xrange_all(store.keys().work(p)).await.unwrap();
    assert_eq!(entries.ids.len(), 1);
    assert_eq!(entries.ids[0].get::<String>("task").as_deref(), Some(task.id.as_str()));
    // The key layout: every key of the task carries its partition's tag.
    let tag = format!("{{p{p:02}}}");
    assert!(key.contains(&tag) && store.keys().work(p).contains(&tag));
    assert!(store.keys().events(&task.id).unwrap().contains(&tag));

    let forever = store.create(new_task(None), NO_LIMITS).await.unwrap();
    let ttl: i64 = c.pttl(store.keys().task(&forever.id).unwrap()).await.unwrap();
    assert_eq!(ttl, -1, "no ttl: no expiry");
}

#[tokio::test]
async fn redis_reaps_expired_tasks_and_reads_hide_them_first() {
    let redis = TestRedis::start().await;
    let store = store_on(&redis).await;
    let task = store.create(new_task(Some(300)), NO_LIMITS).await.unwrap();
    let key = store.keys().task(&task.id).unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(store.get(&owner(), &task.id).await.unwrap(), None);
    let exists: bool = raw(&redis).await.exists(&key).await.unwrap();
    assert!(!exists, "PEXPIREAT made Redis the reaper");
    // Its work entry is dropped by the next claim, not returned.
    let claims = store.claim("w", 5, LONG, Duration::from_millis(100)).await.unwrap();
    assert!(claims.is_empty());
    let len: usize = raw(&redis).await.xlen(store.keys().work(task.id.partition().unwrap())).await.unwrap();
    assert_eq!(len, 0, "the dead task's entry was acked and deleted");
}

#[tokio::test]
async fn ids_that_name_no_partition_are_unknown() {
    let redis = TestRedis::start().await;
    let store = store_on(&redis).await; // 4 partitions
    for id in [
        TaskId::from_random(4, [1; 16]),
        TaskId::from_random(999, [1; 16]),
        TaskId::from_wire("p01"),
        TaskId::from_wire("{p01}.AAAAAAAAAAAAAAAAAAAAAA"),
        TaskId::from_wire(""),
    ] {
        assert_eq!(store.load(&id).await.unwrap(), None, "{id}");
        let phantom = Task::new(id.clone(), new_task(None), now_ms());
        let write = next(&phantom, Event::Cancel);
        assert_eq!(store.transition(&write, Writer::Client).await.unwrap(), Cas::Conflict(None));
    }
    let mut watch = store.watch(&[TaskId::from_wire("nope")]).await.unwrap();
    let none = tokio::time::timeout(Duration::from_millis(100), watch.next()).await;
    assert!(none.is_err(), "an unknown id never changes");
}

#[tokio::test]
async fn two_processes_share_tasks_work_and_events() {
    let redis = TestRedis::start().await;
    let cfg = config(&redis);
    let api = RedisStore::connect(cfg.clone()).await.unwrap();
    let worker = RedisStore::connect(cfg).await.unwrap();
    let mut events = worker.subscribe().await.unwrap();
    let task = api.create(new_task(None), NO_LIMITS).await.unwrap();
    assert_eq!(worker.load(&task.id).await.unwrap(), Some(task.clone()));
    let mut watch = api.watch(std::slice::from_ref(&task.id)).await.unwrap();
    let claim = worker.claim("w1", 1, LONG, PATIENCE).await.unwrap().remove(0);
    // The claim itself is a committed change (attempt and rev bumped).
    let seen = tokio::time::timeout(PATIENCE, watch.next()).await.unwrap();
    assert_eq!(seen, Some(claim.task.clone()));
    let done = next(&claim.task, Event::Complete(json!({"content": []})));
    assert_eq!(worker.transition(&done, claim.writer()).await.unwrap(), Cas::Applied(done.clone()));
    let seen = tokio::time::timeout(PATIENCE, watch.next()).await.unwrap();
    assert_eq!(seen, Some(done.clone()));
    assert_eq!(seen.unwrap().result, Some(json!({"content": []})));
    api.publish("notifications/tools/list_changed").await.unwrap();
    let event = tokio::time::timeout(PATIENCE, events.next()).await.unwrap().map(Result::unwrap);
    assert_eq!(event.as_deref(), Some("notifications/tools/list_changed"));
}

#[tokio::test]
async fn claim_keeps_hash_fields_and_doc_consistent_and_fences() {
    let redis = TestRedis::start().await;
    let store = store_on(&redis).await;
    let task = store.create(new_task(None), NO_LIMITS).await.unwrap();
    let claim = store.claim("w1", 1, LONG, PATIENCE).await.unwrap().remove(0);
    assert_eq!((claim.task.attempt, claim.task.revision), (1, 2));
    let p = task.id.partition().unwrap();
    assert!(claim.receipt.starts_with(&format!("{p}/")), "{}", claim.receipt);
    let (rev, attempt, _, doc) = stored(&redis, &store, &task.id).await;
    assert_eq!((attempt, rev), (1, 2));
    assert_eq!(doc, claim.task);

    // A worker write with another attempt is refused even at the right revision.
    let write = next(&claim.task, Event::SetMessage("x".into()));
    let cas = store.transition(&write, Writer::Worker { attempt: 7 }).await.unwrap();
    assert_eq!(cas, Cas::Conflict(Some(claim.task.clone())));
    let cas = store.transition(&write, claim.writer()).await.unwrap();
    assert_eq!(cas, Cas::Applied(write.clone()));
    assert_eq!(stored(&redis, &store, &task.id).await.0, 3);
}

#[tokio::test]
async fn renew_extends_the_holders_lease() {
    let redis = TestRedis::start().await;
    let store = store_on(&redis).await;
    store.create(new_task(None), NO_LIMITS).await.unwrap();
    let lease = Duration::from_millis(600);
    let held = store.claim("w1", 1, lease, PATIENCE).await.unwrap().remove(0);
    // Keep renewing past several leases: nobody else may take it.
    let until = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < until {
        assert!(store.renew(&held, lease).await.unwrap());
        let stolen = store.claim("w2", 1, LONG, Duration::ZERO).await.unwrap();
        assert!(stolen.is_empty(), "a renewed lease was recovered: {stolen:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // A long renewal outlives a short-lease recovery attempt…
    assert!(store.renew(&held, LONG).await.unwrap());
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(store.claim("w2", 1, Duration::from_millis(1), Duration::ZERO).await.unwrap().is_empty());
    // …and once it lapses (lease 0 = at once) another worker takes over.
    assert!(store.renew(&held, Duration::ZERO).await.unwrap());
    let taken = store.claim("w2", 1, LONG, PATIENCE).await.unwrap();
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].deliveries, 2);
    assert!(!store.renew(&held, LONG).await.unwrap(), "w1 lost it");
}

#[tokio::test]
async fn a_stale_holder_cannot_finish_or_release_new_work() {
    let redis = TestRedis::start().await;
    let store = store_on(&redis).await;
    let task = store.create(new_task(None), NO_LIMITS).await.unwrap();
    let old = store.claim("a", 1, Duration::from_millis(1), PATIENCE).await.unwrap().remove(0);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let new = store.claim("b", 1, LONG, PATIENCE).await.unwrap().remove(0);
    assert_eq!(new.task.attempt, 2);
    store.remove_work(&old).await.unwrap();
    store.release(&old).await.unwrap();
    assert!(store.renew(&new, LONG).await.unwrap(), "b still holds it");
    assert!(
        store.claim("c", 1, LONG, Duration::from_millis(200)).await.unwrap().is_empty(),
        "the stale release did not hand b's work out"
    );
    let mut c = raw(&redis).await;
    let len: usize = c.xlen(store.keys().work(task.id.partition().unwrap())).await.unwrap();
    assert_eq!(len, 1, "the stale finish did not remove b's work");
    store.remove_work(&new).await.unwrap();
    let len: usize = c.xlen(store.keys().work(task.id.partition().unwrap())).await.unwrap();
    assert_eq!(len, 0);
}

#[tokio::test]
async fn claim_never_returns_more_than_max_and_hands_back_the_rest() {
    let redis = TestRedis::start().await;
    let store = store_on(&redis).await;
    let mut ids = HashSet::new();
    for _ in 0..12 {
        ids.insert(store.create(new_task(None), NO_LIMITS).await.unwrap().id);
    }
    // Standalone reads exactly `max`: nothing else was delivered (pending).
    let first = store.claim("w", 5, LONG, Duration::ZERO).await.unwrap();
    assert_eq!(first.len(), 5);
    let mut c = raw(&redis).await;
    let mut pending = 0;
    for p in 0..store.keys().partitions() {
        let reply: redis::streams::StreamPendingReply = c.xpending(store.keys().work(p), GROUP).await.unwrap();
        pending += reply.count();
    }
    assert_eq!(pending, 5, "only the claimed entries were delivered");
    let mut seen: HashSet<TaskId> = first.into_iter().map(|c| c.task.id).collect();
    loop {
        let claims = store.claim("w", 5, LONG, Duration::from_millis(200)).await.unwrap();
        assert!(claims.len() <= 5, "{} claims", claims.len());
        if claims.is_empty() {
            break;
        }
        for c in claims {
            assert_eq!(c.task.attempt, 1, "handed-back extras were never claimed");
            assert!(seen.insert(c.task.id.clone()), "claimed twice");
        }
    }
    assert_eq!(seen, ids);
}

#[tokio::test]
async fn claim_drops_entries_whose_task_vanished() {
    let redis = TestRedis::start().await;
    let store = store_on(&redis).await;
    let task = store.create(new_task(None), NO_LIMITS).await.unwrap();
    let mut c = raw(&redis).await;
    let _: () = c.del(store.keys().task(&task.id).unwrap()).await.unwrap();
    assert!(store.claim("w", 1, LONG, Duration::from_millis(200)).await.unwrap().is_empty());
    let stream = store.keys().work(task.id.partition().unwrap());
    let len: usize = c.xlen(&stream).await.unwrap();
    assert_eq!(len, 0);
    let pending: redis::streams::StreamPendingReply = c.xpending(&stream, GROUP).await.unwrap();
    assert_eq!(pending.count(), 0);
}

#[tokio::test]
async fn a_waiting_claim_wakes_on_new_work_and_does_not_block_other_commands() {
    let redis = TestRedis::start().await;
    let store = store_on(&redis).await;
    let waiter = {
        let store = store.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let claims = store.claim("w", 1, LONG, Duration::from_secs(20)).await.unwrap();
            (claims, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The blocked read holds its own connection: this answers at once.
    let started = Instant::now();
    let task = store.create(new_task(None), NO_LIMITS).await.unwrap();
    assert!(store.load(&task.id).await.unwrap().is_some());
    assert!(started.elapsed() < Duration::from_secs(1), "{:?}", started.elapsed());
    let (claims, waited) = waiter.await.unwrap();
    assert_eq!(claims.len(), 1);
    assert_eq!(claims[0].task.id, task.id);
    assert!(waited < Duration::from_secs(10), "woke late: {waited:?}");
}

#[tokio::test]
async fn a_claim_after_a_drained_read_gets_what_was_created_in_between() {
    let redis = TestRedis::start().await;
    let store = store_on(&redis).await;
    let first = store.create(new_task(None), NO_LIMITS).await.unwrap();
    // Delivers one of up to four: every stream is drained, the cursors kept.
    let claims = store.claim("w", 4, LONG, Duration::from_secs(20)).await.unwrap();
    assert_eq!(claims.iter().map(|c| &c.task.id).collect::<Vec<_>>(), [&first.id]);
    let later: HashSet<TaskId> = [
        store.create(new_task(None), NO_LIMITS).await.unwrap().id,
        store.create(new_task(None), NO_LIMITS).await.unwrap().id,
    ]
    .into();
    // The next claim waits from those cursors: the two entries after them wake it.
    let started = Instant::now();
    let claims = store.claim("w", 4, LONG, Duration::from_secs(20)).await.unwrap();
    let got: HashSet<TaskId> = claims.into_iter().map(|c| c.task.id).collect();
    assert_eq!(got, later);
    assert!(started.elapsed() < Duration::from_secs(10), "woke late: {:?}", started.elapsed());
    // And with nothing new, a claim that may not wait returns empty.
    assert!(store.claim("w", 4, LONG, Duration::ZERO).await.unwrap().is_empty());
}

#[tokio::test]
async fn lost_consumer_groups_and_script_cache_heal_themselves() {
    let redis = TestRedis::spawn(); // disturbs the whole server
    let store = store_on(&redis).await;
    let mut c = raw(&redis).await;
    for p in 0..store.keys().partitions() {
        let _: () =
            redis::cmd("XGROUP").arg("DESTROY").arg(store.keys().work(p)).arg(GROUP).query_async(&mut c).await.unwrap();
    }
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query_async(&mut c).await.unwrap();
    let task = store.create(new_task(None), NO_LIMITS).await.unwrap();
    let claims = store.claim("w", 1, LONG, PATIENCE).await.unwrap();
    assert_eq!(claims.len(), 1, "groups re-created from id 0");
    assert_eq!(claims[0].task.id, task.id);
}

#[tokio::test]
async fn watchers_share_one_subscription_and_unsubscribe_when_dropped() {
    let redis = TestRedis::start().await;
    let store = store_on(&redis).await;
    let task = store.create(new_task(None), NO_LIMITS).await.unwrap();
    let channel = store.keys().events(&task.id).unwrap();
    let mut a = store.watch(std::slice::from_ref(&task.id)).await.unwrap();
    let b = store.watch(std::slice::from_ref(&task.id)).await.unwrap();
    let mut c = raw(&redis).await;
    let numsub = |c: &mut redis::aio::MultiplexedConnection| {
        let channel = channel.clone();
        let mut c = c.clone();
        async move {
            let v: (String, u64) = redis::cmd("PUBSUB").arg("NUMSUB").arg(&channel).query_async(&mut c).await.unwrap();
            v.1
        }
    };
    assert_eq!(numsub(&mut c).await, 1, "one connection for every watcher");
    drop(b);
    let changed = next(&task, Event::SetMessage("one".into()));
    store.transition(&changed, Writer::Client).await.unwrap();
    assert_eq!(tokio::time::timeout(PATIENCE, a.next()).await.unwrap(), Some(changed));
    drop(a);
    let deadline = Instant::now() + PATIENCE;
    while numsub(&mut c).await != 0 {
        assert!(Instant::now() < deadline, "the last watcher unsubscribed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn watches_resubscribe_after_the_connection_drops() {
    let redis = TestRedis::spawn(); // disturbs the whole server
    let store = store_on(&redis).await;
    let mut task = store.create(new_task(None), NO_LIMITS).await.unwrap();
    let mut watch = store.watch(std::slice::from_ref(&task.id)).await.unwrap();
    let mut c = raw(&redis).await;
    let _: u64 = redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("pubsub").query_async(&mut c).await.unwrap();
    // Keep committing until a snapshot arrives again (lost ones are fine).
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut n = 0;
    loop {
        assert!(Instant::now() < deadline, "no snapshot after the reconnect");
        n += 1;
        let changed = next(&task, Event::SetMessage(format!("m{n}")));
        assert!(matches!(store.transition(&changed, Writer::Client).await.unwrap(), Cas::Applied(_)));
        task = changed;
        if let Ok(Some(seen)) = tokio::time::timeout(Duration::from_millis(300), watch.next()).await {
            assert_eq!(seen.id, task.id);
            break;
        }
    }
}

/// The scope set is scored by expiry: an expired member is dropped on the
/// next admission without reading its task, and a member left behind by a
/// crash (terminal task, no removal) counts until its task's expiry: the
/// refusal itself reads no task.
#[tokio::test]
async fn the_scope_limit_drops_members_by_expiry_only() {
    let redis = TestRedis::start().await;
    let store = store_on(&redis).await;
    let limits = active_limit(2);
    let a = store.create(new_task(Some(60_000)), limits).await.unwrap();
    let b = store.create(new_task(Some(60_000)), limits).await.unwrap();
    assert!(matches!(store.create(new_task(None), limits).await, Err(StoreError::Capacity { .. })));
    let set = store.keys().scope_active(&owner());
    let mut c = raw(&redis).await;
    let score: f64 = c.zscore(&set, b.id.as_str()).await.unwrap();
    assert_eq!(score as u64, b.expires_at_ms().unwrap(), "members are scored by their task's expiry");
    // `b` turns terminal without its removal (as if the process died right
    // after the CAS): it keeps counting until it expires.
    let mut cancelled = b.clone();
    cancelled.status = Status::Cancelled;
    let record = format!("{} {} cancelled\n{}", b.revision, b.attempt, serde_json::to_string(&cancelled).unwrap());
    let _: () = redis::cmd("SET")
        .arg(store.keys().task(&b.id).unwrap())
        .arg(record)
        .arg("KEEPTTL")
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(matches!(store.create(new_task(None), limits).await, Err(StoreError::Capacity { .. })));
    // `a`'s expiry passes: dropped by score on the next admission.
    let _: () = c.zadd(&set, a.id.as_str(), 1).await.unwrap();
    let d = store.create(new_task(None), limits).await.expect("a expired");
    assert!(matches!(store.create(new_task(None), limits).await, Err(StoreError::Capacity { .. })));
    let members: Vec<String> = active_tasks(&redis, &store, &owner()).await.into_iter().map(|(m, _)| m).collect();
    assert_eq!(members, vec![b.id.to_string(), d.id.to_string()], "a never-expiring task sorts last");
    let ttl: i64 = c.pttl(&set).await.unwrap();
    assert_eq!(ttl, -1, "a task that never expires makes the set persist");
    // Zero means none at all.
    let zero = active_limit(0);
    assert!(matches!(store.create(new_task(None), zero).await, Err(StoreError::Capacity { .. })));
}

/// A scope's active set holds a pad beside its tasks (`admit.lua`), which
/// keeps it a skiplist and is never counted: a set the previous release
/// left without it (a listpack) gets it at the next admission and counts
/// exactly as before; the write that ends the last task deletes the set,
/// pad and all.
#[tokio::test]
async fn the_active_sets_pad_is_not_counted_and_leaves_with_the_last_task() {
    let redis = TestRedis::start().await;
    let store = store_on(&redis).await;
    let limits = active_limit(2);
    let set = store.keys().scope_active(&owner());
    let mut c = raw(&redis).await;
    // A task admitted by a pod of the previous release: no pad.
    let old = store.create(new_task(Some(60_000)), NO_LIMITS).await.unwrap();
    let _: () = c.zadd(&set, old.id.as_str(), old.expires_at_ms().unwrap()).await.unwrap();
    let _: () = redis::cmd("PEXPIREAT").arg(&set).arg(old.expires_at_ms().unwrap()).query_async(&mut c).await.unwrap();
    let encoding: String = redis::cmd("OBJECT").arg("ENCODING").arg(&set).query_async(&mut c).await.unwrap();
    assert_eq!(encoding, "listpack");

    let new = store.create(new_task(Some(60_000)), limits).await.expect("one task of two: admitted");
    assert!(matches!(store.create(new_task(Some(60_000)), limits).await, Err(StoreError::Capacity { .. })));
    let members: Vec<String> = active_tasks(&redis, &store, &owner()).await.into_iter().map(|(m, _)| m).collect();
    assert_eq!(members, vec![old.id.to_string(), new.id.to_string()]);
    let card: usize = c.zcard(&set).await.unwrap();
    assert_eq!(card, 3, "the two tasks and the pad");
    let encoding: String = redis::cmd("OBJECT").arg("ENCODING").arg(&set).query_async(&mut c).await.unwrap();
    assert_eq!(encoding, "skiplist");

    // Both end (each write alone): the set goes with the last one.
    for task in [&old, &new] {
        let cancelled = next(task, Event::Cancel);
        assert!(matches!(store.transition(&cancelled, Writer::Client).await.unwrap(), Cas::Applied(_)));
    }
    assert!(!c.exists::<_, bool>(&set).await.unwrap(), "a set left with its pad alone is deleted");
    store.create(new_task(Some(60_000)), limits).await.expect("room again");
    store.create(new_task(Some(60_000)), limits).await.expect("for two");
}

/// Bounded growth: tasks in every state (completed, cancelled, running,
/// never claimed), under a per-scope limit and byte quota, leave no key
/// behind once their TTL passed and workers drained the streams: SCAN of the
/// prefix finds only the (empty) partition streams and the epoch key; the
/// scope's active set and its byte-quota hash expire with its tasks.
#[tokio::test]
async fn expired_tasks_leave_no_key_behind() {
    let redis = TestRedis::start().await;
    let store = store_on(&redis).await;
    store.check_epoch().await.unwrap();
    let limits = CreateLimits {
        max_active_per_scope: Some(100),
        max_bytes_per_scope: Some(1 << 30),
        max_queued_per_partition: None,
    };
    let ttl = 1500;
    let mut tasks = Vec::new();
    for n in 0..8 {
        // Half are keyed creates: their idempotency records must go with them.
        let request = new_task(Some(ttl));
        let key = (n % 2 == 0).then(|| Idempotency::new(&request.scope, &format!("key-{n}"), &request.work));
        tasks.push(store.create_idempotent(request, limits, key.as_ref()).await.unwrap().into_task());
    }
    // Two completed, two cancelled, two claimed and abandoned, two never claimed.
    let claims = store.claim("w", 4, Duration::from_secs(1), PATIENCE).await.unwrap();
    assert_eq!(claims.len(), 4);
    for c in &claims[..2] {
        let done = next(&c.task, Event::Complete(json!({"content": []})));
        assert!(matches!(store.transition(&done, c.writer()).await.unwrap(), Cas::Applied(_)));
        store.remove_work(c).await.unwrap();
    }
    let claimed: HashSet<_> = claims.iter().map(|c| c.task.id.clone()).collect();
    for t in tasks.iter().filter(|t| !claimed.contains(&t.id)).take(2) {
        let cancelled = next(t, Event::Cancel);
        assert!(matches!(store.transition(&cancelled, Writer::Client).await.unwrap(), Cas::Applied(_)));
    }
    // A process's registry entry, asked to drain: the registry's keys go with its last heartbeat.
    use presa_store::AdminStore;
    let node = presa_store::NodeInfo {
        id: "node-1".into(),
        role: "worker".into(),
        version: "test".into(),
        started_at_ms: 0,
        heartbeat_at_ms: 0,
        slots_in_use: 0,
        slots: 1,
        tools: Vec::new(),
        draining: false,
        created: 0,
        completed: 0,
        failed: 0,
        upstreams: Vec::new(),
        config: None,
    };
    store.heartbeat(&node, Duration::from_millis(ttl)).await.unwrap();
    assert!(store.drain("node-1").await.unwrap().is_some());
    let mut c = raw(&redis).await;
    let prefix = format!("{}:*", store.keys().prefix());
    let active = store.keys().scope_active(&owner());
    assert!(c.exists::<_, bool>(&active).await.unwrap(), "the scope's set exists while its tasks live");
    let buckets = store.keys().scope_bytes_buckets(&owner());
    let left: i64 = c.pttl(&buckets).await.unwrap();
    // At its latest bucket's end: a 64th of the task's lifetime at most (bytes.lua).
    let within = (ttl + ttl / 64) as i64;
    assert!(left > 0 && left <= within, "{buckets} expires with the scope's last task, in {left} ms");

    tokio::time::sleep(Duration::from_millis(ttl + 500)).await;
    // Workers drain what is left (entries of expired tasks are dropped).
    assert!(store.claim("w2", 16, LONG, Duration::ZERO).await.unwrap().is_empty());
    let scanned: Vec<redis::RedisResult<String>> = c.scan_match::<_, String>(&prefix).await.unwrap().collect().await;
    let mut leftover: Vec<String> = scanned.into_iter().collect::<Result<_, _>>().unwrap();
    leftover.sort();
    let streams: HashSet<String> = store.keys().all_work().into_iter().collect();
    let epoch = store.keys().epoch();
    for key in &leftover {
        if streams.contains(key) {
            // A partition stream: kept, but empty (abandoned leases lapsed,
            // so their entries were recovered and dropped too).
            let len: usize = c.xlen(key).await.unwrap();
            assert_eq!(len, 0, "{key} still holds work");
        } else {
            assert_eq!(key, &epoch, "leftover key: {key} (all: {leftover:?})");
        }
    }
    assert!(!c.exists::<_, bool>(&active).await.unwrap(), "the scope's set outlived its tasks");
    assert!(!c.exists::<_, bool>(&buckets).await.unwrap(), "{buckets} outlived the tasks it counts");
}

/// A principal with one task: the write that ends it counts its final size
/// in its bucket (bytes.lua); the scope's hash keeps expiring with the task,
/// or it would outlive the principal forever.
#[tokio::test]
async fn a_one_task_principals_byte_keys_expire_after_it_ends() {
    let redis = TestRedis::start().await;
    let store = store_on(&redis).await;
    let limits =
        CreateLimits { max_active_per_scope: None, max_bytes_per_scope: Some(1 << 30), max_queued_per_partition: None };
    let ttl = 60_000;
    store.create_idempotent(new_task(Some(ttl)), limits, None).await.unwrap();
    let claims = store.claim("w", 1, Duration::from_secs(30), PATIENCE).await.unwrap();
    let done = next(&claims[0].task, Event::Complete(json!({"content": []})));
    assert!(matches!(store.transition(&done, claims[0].writer()).await.unwrap(), Cas::Applied(_)));
    store.remove_work(&claims[0]).await.unwrap();
    let mut c = raw(&redis).await;
    let buckets = store.keys().scope_bytes_buckets(&owner());
    let left: i64 = c.pttl(&buckets).await.unwrap();
    assert!(left > 0 && left <= (ttl + ttl / 64) as i64, "{buckets} expires with the task, not in {left} ms");
}

/// A failover seen from the client: the server turns into a read-only
/// replica (writes fail with a retryable READONLY) and back into a primary;
/// the same store writes again without being re-created, and claims work.
#[tokio::test]
async fn readonly_after_a_failover_is_retryable_and_recovers() {
    let redis = TestRedis::spawn();
    let primary = TestRedis::spawn();
    let store = RedisStore::connect(config(&redis).with_op_timeout(Duration::from_millis(500))).await.unwrap();
    store.create(new_task(None), NO_LIMITS).await.unwrap();
    redis.cli(&["REPLICAOF", "127.0.0.1", &primary.port().to_string()]);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match store.create(new_task(None), NO_LIMITS).await {
            Err(e) => {
                assert!(e.is_retryable(), "{e}");
                break;
            }
            Ok(_) => assert!(Instant::now() < deadline, "writes never failed on a replica"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    redis.cli(&["REPLICAOF", "NO", "ONE"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    let task = loop {
        match store.create(new_task(None), NO_LIMITS).await {
            Ok(t) => break t,
            Err(e) => assert!(Instant::now() < deadline, "never recovered: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // Its work is claimed like any other (the consumer groups are re-made
    // if the replica sync dropped them).
    let claims = store.claim("w", 16, LONG, PATIENCE).await.unwrap();
    assert!(claims.iter().any(|c| c.task.id == task.id), "{claims:?}");
}

/// Whether `fut` finished (with anything) within `limit`.
async fn finishes_within<T>(limit: Duration, fut: impl Future<Output = T>) -> T {
    let started = Instant::now();
    let out = tokio::time::timeout(limit, fut).await.unwrap_or_else(|_| panic!("still running after {limit:?}"));
    assert!(started.elapsed() <= limit);
    out
}

fn unavailable<T: std::fmt::Debug>(r: Result<T, StoreError>) {
    match r {
        Err(e @ StoreError::Unavailable(_)) => assert!(e.is_retryable()),
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

#[tokio::test]
async fn connecting_to_nothing_fails_fast() {
    let op = Duration::from_millis(500);
    // Refused: nobody listens.
    let cfg = RedisConfig::new(format!("redis://127.0.0.1:{}", common::free_port())).with_op_timeout(op);
    let err = finishes_within(op * 4, RedisStore::connect(cfg)).await.unwrap_err();
    assert!(err.is_retryable(), "{err}");
    // Black hole: the kernel accepts, nobody ever answers.
    let hole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let cfg = RedisConfig::new(format!("redis://{}", hole.local_addr().unwrap())).with_op_timeout(op);
    let err = finishes_within(op * 4, RedisStore::connect(cfg)).await.unwrap_err();
    assert!(matches!(err, RedisStoreError::Timeout(_)) || err.is_retryable(), "{err}");
    let bad = RedisConfig::new("redis://127.0.0.1:1").with_prefix("a{b}");
    assert!(matches!(RedisStore::connect(bad).await, Err(RedisStoreError::Config(_))));
}

#[tokio::test]
async fn a_hung_or_dead_redis_fails_every_operation_fast_and_recovers() {
    let mut redis = TestRedis::spawn();
    let op = Duration::from_millis(500);
    let store = RedisStore::connect(config(&redis).with_op_timeout(op)).await.unwrap();
    let task = store.create(new_task(None), NO_LIMITS).await.unwrap();
    let claim = store.claim("w", 1, LONG, PATIENCE).await.unwrap().remove(0);
    let mut watch = store.watch(std::slice::from_ref(&task.id)).await.unwrap();

    // Hung: the process is stopped, connections stay open and silent.
    redis.signal("STOP");
    let bound = op * 4;
    unavailable(finishes_within(bound, store.create(new_task(None), NO_LIMITS)).await);
    unavailable(finishes_within(bound, store.get(&owner(), &task.id)).await);
    unavailable(finishes_within(bound, store.load(&task.id)).await);
    let write = next(&claim.task, Event::SetMessage("x".into()));
    unavailable(finishes_within(bound, store.transition(&write, claim.writer())).await);
    unavailable(finishes_within(bound, store.claim("w2", 1, LONG, Duration::from_millis(100))).await);
    unavailable(finishes_within(bound, store.renew(&claim, LONG)).await);
    unavailable(finishes_within(bound, store.release(&claim)).await);
    unavailable(finishes_within(bound, store.remove_work(&claim)).await);
    unavailable(finishes_within(bound * 2, store.watch(&[TaskId::from_random(1, [3; 16])])).await.map(|_| ()));
    unavailable(finishes_within(bound, store.publish("x")).await);

    // Back: the same store works again without being rebuilt.
    redis.signal("CONT");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match store.transition(&write, claim.writer()).await {
            Ok(cas) => {
                assert_eq!(cas, Cas::Applied(write.clone()));
                break;
            }
            Err(e) => {
                assert!(Instant::now() < deadline, "never recovered: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    assert!(store.renew(&claim, LONG).await.unwrap());
    // The existing watch sees changes again (after its reconnect, if any).
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut current = write;
    let mut n = 0;
    loop {
        assert!(Instant::now() < deadline, "the watch never resumed");
        n += 1;
        let changed = next(&current, Event::SetMessage(format!("again {n}")));
        if let Ok(Cas::Applied(t)) = store.transition(&changed, claim.writer()).await {
            current = t;
        }
        if let Ok(Some(seen)) = tokio::time::timeout(Duration::from_millis(300), watch.next()).await {
            assert_eq!(seen.id, task.id);
            break;
        }
    }

    // Dead: the server is gone for good.
    redis.kill();
    unavailable(finishes_within(bound, store.load(&task.id)).await);
    unavailable(finishes_within(bound, store.create(new_task(None), NO_LIMITS)).await);
    unavailable(finishes_within(bound * 2, store.claim("w", 1, LONG, Duration::from_millis(100))).await);
}

#[tokio::test]
async fn a_restarted_empty_redis_is_used_again_without_reconnecting_by_hand() {
    let mut redis = TestRedis::spawn();
    let store = store_on(&redis).await;
    let before = store.create(new_task(None), NO_LIMITS).await.unwrap();
    let mut events = store.subscribe().await.unwrap();
    redis.restart();
    // Everything was lost (no persistence); the store heals: scripts are
    // reloaded on NOSCRIPT, groups re-created on NOGROUP, connections re-opened.
    let deadline = Instant::now() + Duration::from_secs(15);
    let task = loop {
        match store.create(new_task(None), NO_LIMITS).await {
            Ok(t) => break t,
            Err(e) => {
                assert!(Instant::now() < deadline, "create never worked again: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    assert_eq!(store.load(&before.id).await.unwrap(), None);
    let claims = store.claim("w", 5, LONG, PATIENCE).await.unwrap();
    assert_eq!(claims.len(), 1);
    assert_eq!(claims[0].task.id, task.id);
    // The event bus subscription comes back by itself.
    loop {
        assert!(Instant::now() < deadline, "the bus never resumed");
        store.publish("after restart").await.unwrap();
        if let Ok(Some(e)) = tokio::time::timeout(Duration::from_millis(300), events.next()).await {
            assert_eq!(e.unwrap(), "after restart");
            break;
        }
    }
}

#[tokio::test]
async fn a_claim_dropped_while_waiting_strands_no_work() {
    let redis = TestRedis::start().await;
    let store = store_on(&redis).await;
    // The caller gives up while the claim blocks on the streams…
    let gave_up =
        tokio::time::timeout(Duration::from_millis(300), store.claim("leaving", 1, LONG, Duration::from_secs(20)))
            .await;
    assert!(gave_up.is_err());
    // …and work arriving now may be delivered to that orphaned read. It must
    // still reach a live worker at once, not after max_lease.
    let task = store.create(new_task(None), NO_LIMITS).await.unwrap();
    let claims = store.claim("staying", 1, LONG, PATIENCE).await.unwrap();
    assert_eq!(claims.len(), 1, "the work was stranded");
    assert_eq!(claims[0].task.id, task.id);
    assert!(claims[0].task.attempt <= 2, "{:?}", claims[0].task);
}

#[tokio::test]
async fn work_stats_count_without_lag_and_without_a_group() {
    let redis = TestRedis::start().await;
    let store = RedisStore::connect(config(&redis).with_partitions(1)).await.unwrap();
    for _ in 0..4 {
        store.create(new_task(None), NO_LIMITS).await.unwrap();
    }
    let held = store.claim("w", 1, LONG, Duration::ZERO).await.unwrap();
    assert_eq!(held.len(), 1);
    let stats = store.work_stats().await.unwrap();
    assert_eq!((stats[0].queued, stats[0].pending), (3, 1));

    // Deleting a never-delivered entry makes Redis 7.0 report `lag` as nil:
    // the statistics then count (XLEN - pending) instead.
    let mut c = raw(&redis).await;
    let work = store.keys().work(0);
    let entries: redis::streams::StreamRangeReply = c.xrange_all(&work).await.unwrap();
    let undelivered = entries.ids.last().unwrap().id.clone();
    let _: u64 = c.xdel(&work, &[&undelivered]).await.unwrap();
    let groups: Vec<HashMap<String, redis::Value>> =
        redis::cmd("XINFO").arg("GROUPS").arg(&work).query_async(&mut c).await.unwrap();
    eprintln!("lag after XDEL (nil: the fallback is exercised): {:?}", groups[0].get("lag"));
    let stats = store.work_stats().await.unwrap();
    assert_eq!((stats[0].queued, stats[0].pending), (2, 1), "{stats:?}");

    // A lost group (the claimers re-create it from the start): everything is queued.
    let _: u64 = redis::cmd("XGROUP").arg("DESTROY").arg(&work).arg(GROUP).query_async(&mut c).await.unwrap();
    let stats = store.work_stats().await.unwrap();
    assert_eq!((stats[0].queued, stats[0].pending, stats[0].oldest_pending_age_ms), (3, 0, None), "{stats:?}");
}

/// A one-partition store holding two queued tasks created 300 ms apart, and the older one
/// (the work-stats tests age entries against it).
async fn two_queued_300ms_apart(redis: &TestRedis) -> (RedisStore, Task) {
    let store = RedisStore::connect(config(redis).with_partitions(1)).await.unwrap();
    let first = store.create(new_task(None), NO_LIMITS).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    store.create(new_task(None), NO_LIMITS).await.unwrap();
    (store, first)
}

#[tokio::test]
async fn work_stats_keep_lapsed_leases_pending_and_age_them_by_enqueue_time() {
    let redis = TestRedis::start().await;
    let (store, first) = two_queued_300ms_apart(&redis).await;
    let held = store.claim("w", 2, Duration::from_millis(100), Duration::ZERO).await.unwrap();
    assert_eq!(held.len(), 2);
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Both leases lapsed: still pending (awaiting recovery), not queued.
    let stats = store.work_stats().await.unwrap();
    assert_eq!((stats[0].queued, stats[0].pending), (0, 2), "{stats:?}");
    let age = stats[0].oldest_pending_age_ms.unwrap();
    assert!((450..60_000).contains(&age), "the oldest entry's age since its create: {age} ms");
    // Handing back the older one: the newer is now the oldest held.
    let older = held.iter().find(|c| c.task.id == first.id).unwrap();
    store.release(older).await.unwrap();
    let stats = store.work_stats().await.unwrap();
    assert_eq!((stats[0].queued, stats[0].pending), (1, 1), "{stats:?}");
    let newer_age = stats[0].oldest_pending_age_ms.unwrap();
    assert!(newer_age < age, "{newer_age} < {age}");
}

#[tokio::test]
async fn work_stats_age_the_oldest_queued_item_new_or_handed_back() {
    let redis = TestRedis::start().await;
    let (store, first) = two_queued_300ms_apart(&redis).await;
    let stats = store.work_stats().await.unwrap();
    assert_eq!((stats[0].queued, stats[0].pending), (2, 0), "{stats:?}");
    let age = stats[0].oldest_queued_age_ms.unwrap();
    assert!((300..60_000).contains(&age), "the first create's age: {age} ms");
    // The first is claimed: the second, newer, is the oldest waiting.
    let held = store.claim("w", 1, LONG, Duration::ZERO).await.unwrap();
    assert_eq!(held[0].task.id, first.id);
    let stats = store.work_stats().await.unwrap();
    assert_eq!((stats[0].queued, stats[0].pending), (1, 1), "{stats:?}");
    assert!(stats[0].oldest_queued_age_ms.unwrap() < age, "{stats:?}");
    // Handed back, the first waits again, and is the oldest again.
    store.release(&held[0]).await.unwrap();
    let stats = store.work_stats().await.unwrap();
    assert_eq!((stats[0].queued, stats[0].pending), (2, 0), "{stats:?}");
    assert!(stats[0].oldest_queued_age_ms.unwrap() >= age, "{stats:?}");
    // Both claimed: nothing waits.
    let mut held = Vec::new();
    for _ in 0..50 {
        held.extend(store.claim("w", 2 - held.len(), LONG, Duration::from_millis(100)).await.unwrap());
        if held.len() == 2 {
            break;
        }
    }
    assert_eq!(held.len(), 2);
    let stats = store.work_stats().await.unwrap();
    assert_eq!((stats[0].queued, stats[0].pending, stats[0].oldest_queued_age_ms), (0, 2, None), "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_stats_take_one_round_trip_per_partition() {
    let redis = TestRedis::start().await;
    let store = RedisStore::connect(config(&redis).with_partitions(16)).await.unwrap();
    let creates = (0..2000).map(|_| store.create(new_task(None), NO_LIMITS));
    futures::future::try_join_all(creates).await.unwrap();
    let mut held = 0;
    while held < 500 {
        held += store.claim("w", 100, LONG, Duration::ZERO).await.unwrap().len();
    }
    let mut samples = Vec::new();
    for _ in 0..50 {
        let started = Instant::now();
        let stats = store.work_stats().await.unwrap();
        samples.push(started.elapsed());
        assert_eq!(stats.len(), 16);
        assert_eq!(stats.iter().map(|p| p.queued + p.pending).sum::<u64>(), 2000);
        assert_eq!(stats.iter().map(|p| p.pending).sum::<u64>(), held as u64);
    }
    samples.sort();
    eprintln!(
        "work_stats, 16 partitions, 2000 entries ({held} pending): median {:?}, p90 {:?}, max {:?}",
        samples[25], samples[45], samples[49]
    );
    assert!(samples[25] < Duration::from_millis(500), "{samples:?}");
}

/// At `maxmemory` (noeviction) Redis refuses writes with `OOM command not
/// allowed`: a create fails with a retryable error, nothing is stored, and
/// the readiness write probe fails until memory is available again.
#[tokio::test]
async fn writes_refused_at_maxmemory_are_retryable_and_fail_the_probe() {
    let redis = TestRedis::spawn();
    let store = store_on(&redis).await;
    store.probe_write().await.expect("a fresh Redis accepts writes");
    let mut admin = raw(&redis).await;
    let _: () = redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg(1).query_async(&mut admin).await.unwrap();
    let refused = store.create(new_task(None), NO_LIMITS).await.unwrap_err();
    assert!(refused.is_retryable(), "{refused:?}");
    assert!(refused.to_string().contains("OOM"), "{refused}");
    assert!(store.probe_write().await.is_err(), "not ready while writes are refused");
    let _: () = redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg(0).query_async(&mut admin).await.unwrap();
    store.probe_write().await.expect("ready again");
    store.create(new_task(None), NO_LIMITS).await.expect("creates again");
}

/// A lapsed lease behind a long run of live ones in the pending list is still
/// recovered: one `XAUTOCLAIM` looks at no more than ten times its COUNT, so
/// `recover.lua` goes on from the cursor it returns.
#[tokio::test]
async fn a_lapsed_lease_behind_many_live_ones_is_recovered() {
    let redis = TestRedis::start().await;
    let store = RedisStore::connect(config(&redis).with_partitions(1)).await.expect("connect");
    for _ in 0..40 {
        store.create(new_task(None), NO_LIMITS).await.unwrap();
    }
    let live = store.claim("w1", 40, LONG, PATIENCE).await.unwrap();
    assert_eq!(live.len(), 40);
    let lapsing = store.create(new_task(None), NO_LIMITS).await.unwrap();
    let short = store.claim("w2", 1, Duration::from_millis(1), PATIENCE).await.unwrap();
    assert_eq!(short[0].task.id, lapsing.id);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let taken = store.claim("w3", 1, LONG, PATIENCE).await.unwrap();
    assert_eq!(taken.len(), 1, "the lapsed lease behind 40 live ones was not found");
    assert_eq!((taken[0].task.id.clone(), taken[0].deliveries), (lapsing.id, 2));
}

/// Creates index each task for the admin listing in its tenant's sorted set
/// (expiring with the task); with the index off they write none, and a
/// listing says why it cannot answer instead of answering empty.
#[tokio::test]
async fn the_task_index_is_written_with_the_task_or_not_at_all() {
    use presa_store::{AdminStore, TaskFilter};
    let redis = TestRedis::start().await;
    let mut c = raw(&redis).await;
    let on = store_on(&redis).await;
    let task = on.create(new_task(Some(60_000)), CreateLimits::NONE).await.unwrap();
    let partition = on.keys().partition_of(&task.id).unwrap();
    let index = on.keys().task_index(partition, "acme");
    let entries: redis::streams::StreamRangeReply = c.xrange_all(&index).await.unwrap();
    let ids: Vec<Option<String>> = entries.ids.iter().map(|e| e.get::<String>("t")).collect();
    assert_eq!(ids, vec![Some(task.id.to_string())], "one entry naming the task");
    let left: i64 = c.pttl(&index).await.unwrap();
    assert!(left > 60_000 && left <= 66_000, "the index expires a tenth of its lifetime after its task: {left} ms");
    let page = on.list_tasks(&TaskFilter::default(), None, 10).await.unwrap();
    assert_eq!(page.tasks.iter().map(|t| t.id.clone()).collect::<Vec<_>>(), vec![task.id.clone()]);

    let off = RedisStore::connect(config(&redis).with_task_index(false)).await.unwrap();
    let unindexed = off.create(new_task(Some(60_000)), CreateLimits::NONE).await.unwrap();
    let partition = off.keys().partition_of(&unindexed.id).unwrap();
    let none: bool = c.exists(off.keys().task_index(partition, "acme")).await.unwrap();
    assert!(!none, "no index key without the index");
    assert!(off.get(&owner(), &unindexed.id).await.unwrap().is_some(), "the task itself is there");
    for refused in [off.list_tasks(&TaskFilter::default(), None, 10).await.map(|_| ()), off.tenants().await.map(|_| ())]
    {
        let e = refused.unwrap_err();
        assert!(matches!(&e, StoreError::Unsupported(m) if m.contains("--task-index off")), "{e}");
        assert!(!e.is_retryable());
    }
}

/// The index drops its oldest entries while their tasks are gone, a few
/// creates at a time: tasks that went (here deleted, as expiry would) leave
/// no entries behind once enough new tasks came.
#[tokio::test]
async fn the_task_index_drops_the_entries_of_tasks_that_are_gone() {
    let redis = TestRedis::start().await;
    let mut c = raw(&redis).await;
    let store = RedisStore::connect(config(&redis).with_partitions(1)).await.unwrap();
    let mut gone = Vec::new();
    for _ in 0..20 {
        gone.push(store.create(new_task(Some(60_000)), CreateLimits::NONE).await.unwrap());
    }
    for task in &gone {
        let _: () = c.del(store.keys().task(&task.id).unwrap()).await.unwrap();
    }
    // One create in eight looks (by its random id), dropping up to sixteen:
    // 200 creates miss the 20 only if fewer than two of them look (p < 1e-9).
    let mut live = Vec::new();
    for _ in 0..200 {
        live.push(store.create(new_task(Some(60_000)), CreateLimits::NONE).await.unwrap().id.to_string());
    }
    let index = store.keys().task_index(0, "acme");
    let entries: redis::streams::StreamRangeReply = c.xrange_all(&index).await.unwrap();
    let named: Vec<String> = entries.ids.iter().filter_map(|e| e.get::<String>("t")).collect();
    assert_eq!(named, live, "exactly the live tasks, oldest first");
}
