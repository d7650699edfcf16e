//! The work queue's tests that need its insides (the rest are in `tests/`).

use std::{collections::HashSet, time::Duration};

use presa_store::{Cas, CreateLimits, NewTask, Scope, Task, TaskStore, Writer};
use presa_testkit::redis::{TestRedis, unique_prefix};

use presa_store::{TaskId, util::now_ms};
use presa_tasks::{Event, apply};
use redis::Value;

use super::{
    Entry,
    attempt::{Claimed, Pending},
};
use crate::config::RedisConfig;
use crate::{
    conn::Verbosity,
    keys::GROUP,
    record::{decode, encode},
    store::RedisStore,
};

const LEASE: Duration = Duration::from_secs(30);

fn new_task() -> NewTask {
    NewTask {
        scope: Scope::anonymous(),
        work: Default::default(),
        ttl_ms: None,
        poll_interval_ms: None,
        status_message: None,
    }
}

/// Everything `take` knows before the script: the entry, its task as read, as claimed.
async fn pending(store: &RedisStore, e: Entry) -> Pending {
    let id = TaskId::from_wire(e.task.as_deref().unwrap());
    let key = store.keys().task(&id).unwrap();
    let doc = store.queue().records.read_doc_text(&key).await.unwrap();
    let (expected, next) = store.queue().next_claimed("w", &e, &id, doc.as_deref()).await.unwrap().unwrap();
    Pending { entry: e, id, key, expected, next }
}

/// A store of one partition (on a Redis that lives as long as the first half).
async fn one_partition() -> (TestRedis, RedisStore) {
    let redis = TestRedis::start().await;
    let cfg = RedisConfig::new(redis.url()).with_prefix(unique_prefix()).with_partitions(1);
    let store = RedisStore::connect(cfg).await.unwrap();
    (redis, store)
}

/// `n` new tasks, read by worker `w1` and made ready to claim (see [`pending`]).
async fn read_group(store: &RedisStore, n: usize) -> Vec<Pending> {
    for _ in 0..n {
        store.create(new_task(), CreateLimits::NONE).await.unwrap();
    }
    let (entries, _) = store.queue().read_new("w1", n, LEASE, None).await.unwrap();
    assert_eq!(entries.len(), n);
    let mut group = Vec::new();
    for e in entries {
        group.push(pending(store, e).await);
    }
    group
}

/// After a wait, only the partitions it woke on are read; the others keep
/// the cursors the wait started from, so what they got meanwhile wakes
/// the next wait at once instead of being skipped.
#[tokio::test]
async fn a_read_after_a_wait_looks_at_the_woken_partitions_and_keeps_the_other_cursors() {
    let redis = TestRedis::start().await;
    let cfg = RedisConfig::new(redis.url()).with_prefix(unique_prefix()).with_partitions(4);
    let store = RedisStore::connect(cfg).await.unwrap();
    let (none, start) = store.queue().read_new("w", 10, LEASE, None).await.unwrap();
    assert!(none.is_empty());
    assert_eq!(start.len(), 4, "every stream drained: a cursor each");
    // Tasks until two partitions have some.
    let mut created = Vec::new();
    while created.iter().map(|t: &Task| t.id.partition()).collect::<HashSet<_>>().len() < 2 {
        created.push(store.create(new_task(), CreateLimits::NONE).await.unwrap());
    }
    let part = |t: &Task| store.keys().partition_of(&t.id).unwrap();
    let (a, b) = (part(&created[0]), part(created.iter().find(|t| part(t) != part(&created[0])).unwrap()));
    let in_part = |p: u16| created.iter().filter(|t| part(t) == p).map(|t| t.id.to_string()).collect::<HashSet<_>>();

    let (got, cursors) = store.queue().read_new("w", 10, LEASE, Some((vec![a], start.clone()))).await.unwrap();
    assert_eq!(got.iter().filter_map(|e| e.task.clone()).collect::<HashSet<_>>(), in_part(a));
    assert_eq!(cursors.len(), 4);
    for ((p, before), (q, after)) in start.iter().zip(&cursors) {
        assert_eq!(p, q);
        assert_eq!(before == after, *p != a, "only partition {a}'s cursor moves");
    }
    // The wait from those cursors wakes on b (and not on a, read up to its end).
    let woken = store.queue().wait_new(&cursors, Duration::from_secs(5)).await.unwrap().expect("b has new entries");
    assert!(woken.contains(&b) && !woken.contains(&a), "{woken:?}");
    let (got, _) = store.queue().read_new("w", 10, LEASE, Some((woken, cursors))).await.unwrap();
    let rest: HashSet<String> = created.iter().filter(|t| part(t) != a).map(|t| t.id.to_string()).collect();
    assert_eq!(got.iter().filter_map(|e| e.task.clone()).collect::<HashSet<_>>(), rest);
}

#[tokio::test]
async fn a_wait_reply_names_its_partitions_in_either_protocol() {
    let redis = TestRedis::start().await;
    let cfg = RedisConfig::new(redis.url()).with_prefix(unique_prefix()).with_partitions(4);
    let store = RedisStore::connect(cfg).await.unwrap();
    let cursors: Vec<(u16, String)> = (0..4).map(|p| (p, "0-0".to_string())).collect();
    let stream = |p: u16| Value::BulkString(store.keys().work(p).into_bytes());
    let resp2 = Value::Array(vec![
        Value::Array(vec![stream(2), Value::Array(vec![])]),
        Value::Array(vec![stream(0), Value::Array(vec![])]),
    ]);
    assert_eq!(store.queue().woken(&cursors, resp2), Some(vec![2, 0]));
    let resp3 = Value::Map(vec![(stream(3), Value::Array(vec![]))]);
    assert_eq!(store.queue().woken(&cursors, resp3), Some(vec![3]));
    assert_eq!(store.queue().woken(&cursors, Value::Nil), None, "a timeout");
    let unknown = Value::Array(vec![Value::Array(vec![Value::BulkString(b"other".to_vec()), Value::Nil])]);
    assert_eq!(store.queue().woken(&cursors, unknown), None);
}

/// A batch with a stale member: one entry taken over by another worker
/// (as a recovery would), one whose task moved after it was read. The
/// batch claims the good one, drops the taken one and reports the moved
/// one, exactly as single `claim.lua` runs answer for the same entries.
#[tokio::test]
async fn a_stale_entry_in_a_batch_is_refused_as_a_single_claim_is() {
    let (_redis, store) = one_partition().await;
    let group = read_group(&store, 3).await;
    // The second entry is taken over by w2; the third task moves on.
    let stream = store.keys().work(0);
    let taken: Value = store
        .queue()
        .link
        .query(Verbosity::Info, redis::cmd("XCLAIM").arg(&stream).arg(GROUP).arg("w2").arg(0).arg(&group[1].entry.id))
        .await
        .unwrap();
    assert!(matches!(taken, Value::Array(ref a) if a.len() == 1), "{taken:?}");
    let current = store.load(&group[2].id).await.unwrap().unwrap();
    let moved = apply(&current, &Event::SetMessage("moved".into()), now_ms()).unwrap().unwrap();
    assert!(matches!(store.transition(&moved, Writer::Client).await.unwrap(), Cas::Applied(_)));

    let replies = store.queue().claim_batch("w1", &group, LEASE).await.unwrap();
    assert!(matches!(replies[0], Claimed::Yes));
    assert!(matches!(replies[1], Claimed::Dropped), "a taken-over entry is not claimed");
    let Claimed::Moved(Some(doc)) = &replies[2] else { panic!("the moved task is reported") };
    assert_eq!(decode(doc.as_bytes()).unwrap(), moved, "with its current doc");

    // The fence moved for the claimed task only.
    let stored = |i: usize| store.load(&group[i].id);
    assert_eq!(stored(0).await.unwrap().unwrap().attempt, 1);
    assert_eq!(stored(1).await.unwrap().unwrap().attempt, 0, "the taken-over task is untouched");
    assert_eq!(stored(2).await.unwrap().unwrap(), moved, "the moved task is untouched");

    // Single claims of the same two stale entries answer the same.
    for (i, want_dropped) in [(1, true), (2, false)] {
        let p = &group[i];
        let mut inv = super::CLAIM.prepare_invoke();
        inv.key(&p.key)
            .key(&stream)
            .key(store.keys().events(&p.id).unwrap())
            .key(store.keys().claimed(p.entry.partition))
            .arg(GROUP)
            .arg(&p.entry.id)
            .arg("w1")
            .arg(p.expected)
            .arg(encode(&p.next).unwrap())
            .arg(p.next.revision)
            .arg(p.next.attempt)
            .arg(store.queue().lease_idle(LEASE))
            .arg(store.queue().link.topology.publish_cmd());
        let single: Vec<Value> = store.queue().link.invoke(&inv).await.unwrap();
        match Claimed::from_reply(&single).unwrap() {
            Claimed::Dropped => assert!(want_dropped, "entry {i}"),
            Claimed::Moved(Some(d)) => assert!(!want_dropped && d == *doc, "entry {i}"),
            _ => panic!("entry {i}: a single claim answered differently"),
        }
    }
    // The moved one is then claimed from its current doc (the retry path).
    let p = &group[2];
    let claim = store.queue().claim_entry("w1", p, Some(doc.clone()), LEASE).await.unwrap().unwrap();
    assert_eq!(claim.task.attempt, 1);
    assert_eq!(claim.task.status_message.as_deref(), Some("moved"));
}

/// A claim right after the read keeps the lease the read set (no second
/// XCLAIM), and one whose delivery is older than an eighth of a lease
/// starts a new lease: the worker renews a third of a lease after its
/// claim, so a lease kept that way never lapses under a live worker.
#[tokio::test]
async fn a_claim_keeps_a_fresh_deliverys_lease_and_starts_a_stale_ones_anew() {
    let (_redis, store) = one_partition().await;
    let group = read_group(&store, 2).await;
    let stream = store.keys().work(0);
    let at_delivery = store.queue().lease_idle(LEASE);
    // The second delivery's reader stalled past an eighth of the lease.
    let stale = at_delivery + (LEASE / 8).as_millis() as u64 + 1_000;
    let mut stall = redis::cmd("XCLAIM");
    stall.arg(&stream).arg(GROUP).arg("w1").arg(0).arg(&group[1].entry.id).arg("IDLE").arg(stale).arg("JUSTID");
    let _: Value = store.queue().link.query(Verbosity::Info, &stall).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;

    let replies = store.queue().claim_batch("w1", &group, LEASE).await.unwrap();
    assert!(replies.iter().all(|r| matches!(r, Claimed::Yes)), "both claimed");
    let idle = |entry: String| {
        let stream = stream.clone();
        let store = &store;
        async move {
            let mut cmd = redis::cmd("XPENDING");
            cmd.arg(&stream).arg(GROUP).arg(&entry).arg(&entry).arg(1);
            let reply: redis::streams::StreamPendingCountReply =
                store.queue().link.query(Verbosity::Info, &cmd).await.unwrap();
            (reply.ids[0].consumer.clone(), reply.ids[0].last_delivered_ms as u64)
        }
    };
    let (holder, fresh) = idle(group[0].entry.id.clone()).await;
    assert_eq!(holder, "w1");
    assert!(fresh >= at_delivery + 50, "the fresh delivery's lease runs from its read: idle {fresh} ms");
    let (holder, renewed) = idle(group[1].entry.id.clone()).await;
    assert_eq!(holder, "w1");
    assert!(renewed < at_delivery + 1_000, "the stale delivery got a new lease: idle {renewed} ms, not {stale}");
}

/// A read delivering several entries of one stream leases every one of them
/// (`read.lua` sets their idle time with one XCLAIM a stream): each is
/// pending for the reader, delivered once, at idle H - lease or more; and it
/// hands each entry's doc over, `Some(None)` for a task that is gone.
#[tokio::test]
async fn a_read_leases_every_entry_it_delivers_and_brings_their_docs() {
    let (_redis, store) = one_partition().await;
    let mut tasks = Vec::new();
    for _ in 0..3 {
        tasks.push(store.create(new_task(), CreateLimits::NONE).await.unwrap());
    }
    let gone = store.keys().task(&tasks[1].id).unwrap();
    let _: Value = store.queue().link.query(Verbosity::Info, redis::cmd("DEL").arg(&gone)).await.unwrap();
    let at_delivery = store.queue().lease_idle(LEASE);
    let (entries, _) = store.queue().read_new("w1", 3, LEASE, None).await.unwrap();
    assert_eq!(entries.len(), 3);
    let docs: Vec<Option<Task>> =
        entries.iter().map(|e| e.doc.clone().unwrap().map(|d| decode(d.as_bytes()).unwrap())).collect();
    assert_eq!(docs, vec![Some(tasks[0].clone()), None, Some(tasks[2].clone())]);

    let mut cmd = redis::cmd("XPENDING");
    cmd.arg(store.keys().work(0)).arg(GROUP).arg("-").arg("+").arg(10);
    let pending: redis::streams::StreamPendingCountReply =
        store.queue().link.query(Verbosity::Info, &cmd).await.unwrap();
    assert_eq!(pending.ids.len(), 3);
    for (p, e) in pending.ids.iter().zip(&entries) {
        assert_eq!((p.id.as_str(), p.consumer.as_str(), p.times_delivered), (e.id.as_str(), "w1", 1));
        assert!(p.last_delivered_ms as u64 >= at_delivery, "leased at delivery: idle {} ms", p.last_delivered_ms);
    }
}

#[test]
fn the_reader_rotates_its_partitions_and_hands_drained_cursors_out_once() {
    let reader = super::Reader::default();
    assert_eq!(reader.rotated(3), vec![0, 1, 2]);
    assert_eq!(reader.rotated(3), vec![1, 2, 0]);
    assert_eq!(reader.rotation(), 2);
    assert_eq!(reader.take_drained(), None);
    reader.keep_drained(&[(1, "5-0".into())]);
    assert_eq!(reader.take_drained(), Some(vec![(1, "5-0".to_string())]));
    assert_eq!(reader.take_drained(), None, "a claim waits from them once");
}

#[test]
fn recovery_is_due_once_per_interval_whichever_claim_asks() {
    let recovery = super::Recovery::default();
    assert!(recovery.recovery_due(LEASE), "never looked: due");
    assert!(!recovery.recovery_due(LEASE), "just looked");
    assert!(recovery.unhold_due(), "held work has its own clock");
    assert!(!recovery.unhold_due());
}

/// A look that took all it asked for leaves a backlog behind it: the next
/// claim looks again at once, until a look comes back short.
#[test]
fn recovery_is_due_again_at_once_while_looks_come_back_full() {
    let recovery = super::Recovery::default();
    assert!(recovery.recovery_due(LEASE));
    recovery.swept(8, 8);
    assert!(recovery.recovery_due(LEASE), "a full look: due again at once");
    recovery.swept(8, 8);
    assert!(recovery.recovery_due(LEASE), "and again");
    recovery.swept(8, 3);
    assert!(!recovery.recovery_due(LEASE), "a short look: back to the interval");
    recovery.swept(0, 0);
    assert!(!recovery.recovery_due(LEASE), "asking for nothing is no backlog");
}

/// Make entry `id` of `stream` look abandoned by a vanished consumer, its
/// lease lapsed (idle past `max_lease`), as a killed worker leaves it.
async fn strand(store: &RedisStore, stream: &str, id: &str) {
    let idle = store.queue().link.cfg.max_lease.as_millis() as u64 + 1_000;
    let mut cmd = redis::cmd("XCLAIM");
    cmd.arg(stream).arg(GROUP).arg("gone").arg(0).arg(id).arg("IDLE").arg(idle).arg("JUSTID");
    let _: Value = store.queue().link.query(Verbosity::Info, &cmd).await.unwrap();
}

/// Each look for lapsed leases goes on where the last stopped (the cursor
/// kept in Redis), so a lapsed entry behind a long run of live ones is
/// found by looks that each examine a bounded slice of the pending list,
/// and one ahead of the cursor is found when the sweep wraps to the head.
#[tokio::test]
async fn recovery_sweeps_past_live_entries_and_wraps_to_the_head() {
    let (_redis, store) = one_partition().await;
    let live = read_group(&store, 300).await;
    let behind = read_group(&store, 1).await.remove(0);
    let _after = read_group(&store, 100).await;
    let stream = store.keys().work(0);
    strand(&store, &stream, &behind.entry.id).await;
    // One entry a look (`XAUTOCLAIM … COUNT 1` examines at most 10): the
    // lapsed entry, 100 live ones after it, is 30 slices deep. A look that started at the head each
    // time (8 slices) would never reach it.
    let mut looks = 0;
    let found = loop {
        looks += 1;
        assert!(looks <= 40, "the lapsed entry behind 300 live ones was not found in {looks} looks");
        let got = store.queue().recover("w2", 1, LEASE).await.unwrap();
        assert!(got.len() <= 1);
        if let Some(e) = got.into_iter().next() {
            break e;
        }
    };
    assert_eq!(found.id, behind.entry.id, "only the lapsed entry is taken");
    assert_eq!(found.task, Some(behind.id.to_string()));
    assert!(looks >= 25, "each look examined a bounded slice: found in {looks} looks");

    // An entry near the head lapses now, behind the sweep's cursor (still
    // 100 entries short of the end): the sweep reaches the end and wraps to it.
    strand(&store, &stream, &live[3].entry.id).await;
    let cursor: Option<String> =
        store.queue().link.query(Verbosity::Info, redis::cmd("GET").arg(store.keys().recovery(0))).await.unwrap();
    assert!(cursor.is_some(), "the sweep stopped past the head");
    let mut looks = 0;
    let found = loop {
        looks += 1;
        assert!(looks <= 40, "the sweep never wrapped to the lapsed entry at the head");
        if let Some(e) = store.queue().recover("w2", 1, LEASE).await.unwrap().into_iter().next() {
            break e;
        }
    };
    assert_eq!(found.id, live[3].entry.id);
    // Nothing else is lapsed: whole sweeps take nothing.
    for _ in 0..90 {
        assert!(store.queue().recover("w2", 1, LEASE).await.unwrap().is_empty(), "live entries are never taken");
    }
}

/// A round trip's future stays small: redis-rs's futures (kilobytes) and
/// the connect path are boxed, so the futures that await them, copied
/// whole whenever they move (into an `async_trait` box, a spawned task),
/// are not kilobytes each: a task write's was 17 KB, a create's 18.5 KB.
#[tokio::test]
async fn round_trip_futures_stay_small() {
    let redis = TestRedis::start().await;
    let cfg = RedisConfig::new(redis.url()).with_prefix(unique_prefix()).with_partitions(1);
    let store = RedisStore::connect(cfg).await.unwrap();
    let task = store.create(new_task(), CreateLimits::NONE).await.unwrap();
    let inv = super::RENEW.prepare_invoke();
    let sizes = [
        ("invoke", size_of_val(&store.queue().link.invoke::<Value>(&inv)), 1024),
        ("transition", size_of_val(&store.queue().records.transition(&task, Writer::Client, None, None, None)), 2048),
        ("create", size_of_val(&store.queue().records.create_idempotent(new_task(), CreateLimits::NONE, None)), 4096),
    ];
    for (name, size, most) in sizes {
        assert!(size <= most, "the {name} future is {size} bytes, more than {most}");
    }
}

/// A worker gone for good leaves its consumer in the group (each pod has a
/// name of its own), where every `XINFO CONSUMERS` of the look for held
/// work would read it forever: once it holds nothing and has been idle past
/// H, that look drops it. A consumer that holds an entry stays, however idle.
#[tokio::test]
async fn a_gone_workers_consumer_is_dropped_once_idle_past_h() {
    let redis = TestRedis::start().await;
    let mut cfg = RedisConfig::new(redis.url()).with_prefix(unique_prefix()).with_partitions(1);
    cfg.max_lease = Duration::from_secs(1);
    let store = RedisStore::connect(cfg).await.unwrap();
    let _pending_for_w1 = read_group(&store, 1).await;
    let stream = store.keys().work(0);
    let q = store.queue();
    let create = redis::cmd("XGROUP").arg("CREATECONSUMER").arg(&stream).arg(GROUP).arg("gone-pod").to_owned();
    let _: Value = q.link.query(Verbosity::Info, &create).await.unwrap();
    let consumers = async || -> HashSet<String> {
        let info: Vec<Vec<Value>> =
            q.link.query(Verbosity::Info, redis::cmd("XINFO").arg("CONSUMERS").arg(&stream).arg(GROUP)).await.unwrap();
        info.iter().map(|c| redis::from_redis_value::<String>(c[1].clone()).unwrap()).collect()
    };
    let before = consumers().await;
    assert!(before.contains("gone-pod") && before.contains("w1"), "{before:?}");
    assert!(q.unhold("w2", 10, LEASE, &presa_store::Shares::default()).await.unwrap().is_empty());
    assert!(consumers().await.contains("gone-pod"), "not idle past H yet: kept");

    tokio::time::sleep(Duration::from_millis(1_300)).await;
    assert!(q.unhold("w2", 10, LEASE, &presa_store::Shares::default()).await.unwrap().is_empty());
    let after = consumers().await;
    assert!(!after.contains("gone-pod"), "idle past H with nothing pending: dropped ({after:?})");
    assert!(after.contains("w1"), "w1 holds an entry: kept however idle ({after:?})");
}

/// `claim_batch.lua` answers each entry without a table: every shape of
/// `claim.lua`'s reply has its flat twin.
#[test]
fn a_batch_claims_flat_replies_read_as_single_claims_tables() {
    let doc = Value::BulkString(b"{}".to_vec());
    for (flat, table) in [
        (Value::Int(1), vec![Value::Int(1)]),
        (Value::Int(-1), vec![Value::Int(-1)]),
        (Value::Int(0), vec![Value::Int(0)]),
        (doc.clone(), vec![Value::Int(0), doc]),
    ] {
        let (a, b) = (Claimed::from_batch_reply(&flat).unwrap(), Claimed::from_reply(&table).unwrap());
        let same = match (&a, &b) {
            (Claimed::Yes, Claimed::Yes) | (Claimed::Dropped, Claimed::Dropped) => true,
            (Claimed::Moved(x), Claimed::Moved(y)) => x == y,
            _ => false,
        };
        assert!(same, "{flat:?} and {table:?}");
    }
    assert!(Claimed::from_batch_reply(&Value::Int(2)).is_err());
}
