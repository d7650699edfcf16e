//! Redis Sentinel: a store that finds its primary through Sentinels follows
//! a failover without a restart. Real processes: a primary, a replica and
//! three Sentinels (`presa_testkit::redis_sentinel`); the primary is killed
//! with SIGKILL and the replica promoted.

mod common;

use std::time::{Duration, Instant};

use common::{NO_LIMITS, new_task, unique_prefix};
use futures::StreamExt;
use presa_store::{EventBus, Scope, TaskStore, WorkQueue};
use presa_store_redis::{RedisConfig, RedisStore, SentinelConfig};
use presa_testkit::redis_sentinel::{MASTER, TestSentinel};

const LEASE: Duration = Duration::from_secs(30);

/// Whether these tests can run: `redis-server` on PATH (saying so when not).
fn sentinels_can_run() -> bool {
    let found = std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|p| p.join("redis-server").is_file()));
    if !found {
        eprintln!("SKIPPED: the Sentinel tests need redis-server on PATH (apt-get install redis-server)");
    }
    found
}

/// A store of a fresh prefix over `partitions`, finding the primary through
/// the Sentinels `list` (1 s per command).
fn through(list: &str, partitions: u16) -> RedisConfig {
    RedisConfig::sentinel(SentinelConfig::new(list, MASTER))
        .with_prefix(unique_prefix())
        .with_partitions(partitions)
        .with_op_timeout(Duration::from_secs(1))
}

async fn raw(port: u16) -> redis::aio::MultiplexedConnection {
    redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap().get_multiplexed_async_connection().await.unwrap()
}

/// The next event of `stream` within `limit`.
async fn next_event(stream: &mut presa_store::EventStream, limit: Duration) -> Option<String> {
    tokio::time::timeout(limit, stream.next()).await.ok().flatten().and_then(Result::ok)
}

/// Publish `event` until the bus subscription `bus` receives it, `limit` at
/// most (a subscription made before a failover moves to the new primary).
async fn reaches_within(store: &RedisStore, bus: &mut presa_store::EventStream, event: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        assert!(Instant::now() < deadline, "the subscription got no {event:?} after the failover");
        store.publish(event).await.unwrap();
        if next_event(bus, Duration::from_millis(300)).await.as_deref() == Some(event) {
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_follows_a_sentinel_failover_without_a_restart() {
    if !sentinels_can_run() {
        return;
    }
    let mut set = TestSentinel::spawn(1, 3);
    let old = set.data_port(0);
    let cfg = through(&set.sentinel_addresses(), 4);
    let store = RedisStore::connect(cfg).await.expect("connect through the Sentinels");
    let scope = Scope::anonymous();

    // Before: a task, claimed; a claim that waited (the blocking-read pool
    // is on the old primary); a bus subscription (the hub is on it too).
    let before = store.create(new_task(), NO_LIMITS).await.unwrap();
    let claimed = store.claim("w1", 1, LEASE, Duration::from_secs(2)).await.unwrap();
    assert_eq!(claimed.iter().map(|c| &c.task.id).collect::<Vec<_>>(), vec![&before.id]);
    assert!(store.claim("w1", 1, LEASE, Duration::from_millis(300)).await.unwrap().is_empty());
    let mut bus = store.subscribe().await.unwrap();
    store.publish("before").await.unwrap();
    assert_eq!(next_event(&mut bus, Duration::from_secs(5)).await.as_deref(), Some("before"));
    assert_eq!(store.failover_trouble(), None);
    // Replication is asynchronous: make sure the replica has it (this test
    // is about reconnecting, not about what an unreplicated write costs).
    let replicas: i64 = redis::cmd("WAIT").arg(1).arg(5000).query_async(&mut raw(old).await).await.unwrap();
    assert_eq!(replicas, 1, "the replica acknowledged the writes");

    set.kill_data_node(old);
    let killed = Instant::now();

    // The same store, no restart: it reads the task again once the
    // Sentinels promoted the replica.
    let deadline = killed + Duration::from_secs(30);
    let mut trouble_seen = None;
    let mut sentinels_switched = None;
    let mut write_refused = false;
    let back = loop {
        assert!(Instant::now() < deadline, "the store did not reach a new primary within 30 s");
        if sentinels_switched.is_none() && set.primary_port().is_some_and(|p| p != old) {
            sentinels_switched = Some(killed.elapsed());
        }
        match store.get(&scope, &before.id).await {
            Ok(Some(task)) => break task,
            Ok(None) => panic!("the replicated task is gone after the failover"),
            Err(_) => {
                write_refused |= store.probe_write().await.is_err();
                if let Some(t) = store.failover_trouble() {
                    trouble_seen.get_or_insert(t);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let recovered = killed.elapsed();
    assert_eq!(back.id, before.id);
    assert_eq!(back.attempt, 1, "the claim replicated too");
    let new = set.wait_for_failover(old, Duration::from_secs(10)).expect("the Sentinels agree on the new primary");
    assert_ne!(new, old);
    assert!(write_refused, "readiness's write probe failed while there was no primary");
    let trouble = trouble_seen.expect("failover_trouble said why while there was no primary");
    assert!(trouble.contains(MASTER), "{trouble}");
    assert!(store.probe_write().await.is_ok(), "the new primary accepts writes");
    assert_eq!(store.failover_trouble(), None, "a primary was found since");
    eprintln!(
        "[sentinel] primary 127.0.0.1:{old} SIGKILLed; Sentinels named 127.0.0.1:{new} after {:?}; \
         the store read its task again after {recovered:?} (while waiting: {trouble})",
        sentinels_switched.unwrap_or(recovered)
    );

    // New tasks are created on the new primary and claimed, including by a
    // claim that waits on the blocking-read pool (which must follow).
    let after = store.create(new_task(), NO_LIMITS).await.unwrap();
    let key = store.keys().task(&after.id).unwrap();
    let on_new: bool = redis::cmd("EXISTS").arg(&key).query_async(&mut raw(new).await).await.unwrap();
    assert!(on_new, "the new task is on the promoted replica");
    let claimed = store.claim("w2", 1, LEASE, Duration::from_secs(5)).await.unwrap();
    assert_eq!(claimed.iter().map(|c| &c.task.id).collect::<Vec<_>>(), vec![&after.id]);
    let waiting = {
        let store = store.clone();
        tokio::spawn(async move { store.claim("w3", 1, LEASE, Duration::from_secs(10)).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let woke = Instant::now();
    let third = store.create(new_task(), NO_LIMITS).await.unwrap();
    let claimed = waiting.await.unwrap().unwrap();
    assert_eq!(claimed.iter().map(|c| &c.task.id).collect::<Vec<_>>(), vec![&third.id]);
    assert!(woke.elapsed() < Duration::from_secs(5), "a waiting claim woke on the new primary: {:?}", woke.elapsed());

    // Pub/sub: the subscription made before the failover was re-subscribed
    // on the new primary, and new subscriptions work.
    reaches_within(&store, &mut bus, "after", Duration::from_secs(20)).await;
    let mut topic = store.subscribe_to("fresh").await.unwrap();
    store.publish_to("fresh", "hi").await.unwrap();
    assert_eq!(next_event(&mut topic, Duration::from_secs(5)).await.as_deref(), Some("hi"));
    let mut watch = store.watch(std::slice::from_ref(&after.id)).await.unwrap();
    let done = presa_tasks::apply(
        &claimed_task(&store, &after.id).await,
        &presa_tasks::Event::SetMessage("on the new primary".into()),
        presa_store::util::now_ms(),
    )
    .unwrap()
    .expect("a running task changes");
    let _ = store.transition(&done, presa_store::Writer::Client).await.unwrap();
    let seen = tokio::time::timeout(Duration::from_secs(5), watch.next()).await.expect("a snapshot").unwrap();
    assert_eq!(seen.id, after.id);
}

async fn claimed_task(store: &RedisStore, id: &presa_store::TaskId) -> presa_store::Task {
    store.get(&Scope::anonymous(), id).await.unwrap().expect("the task")
}

/// Bad Sentinel settings fail at once, naming the problem; Sentinels that
/// do not answer fail within the bound, saying so.
#[tokio::test]
async fn sentinel_misconfiguration_fails_clearly() {
    let bad = RedisConfig::sentinel(SentinelConfig::new("not-a-port", MASTER));
    let err = RedisStore::open(bad).unwrap_err().to_string();
    assert!(err.contains("HOST:PORT"), "{err}");
    let port = common::free_port();
    let cfg = RedisConfig::sentinel(SentinelConfig::new(&format!("127.0.0.1:{port}"), MASTER))
        .with_prefix(unique_prefix())
        .with_op_timeout(Duration::from_millis(500));
    let started = Instant::now();
    let err = RedisStore::connect(cfg).await.unwrap_err().to_string();
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
    assert!(err.contains("no Redis primary") && err.contains(&port.to_string()), "{err}");
}

/// A stand-in for a Sentinel that missed a failover: it answers every
/// command with the address `127.0.0.1:port`. Returns its own port.
async fn stale_sentinel(port: u16) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let own = listener.local_addr().unwrap().port();
    let reply = format!("*2\r\n$9\r\n127.0.0.1\r\n${}\r\n{port}\r\n", port.to_string().len());
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let reply = reply.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                while matches!(socket.read(&mut buf).await, Ok(n) if n > 0) {
                    if socket.write_all(reply.as_bytes()).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    own
}

/// What a Sentinel names is checked with `ROLE`: a Sentinel naming a
/// replica (it missed a failover) is not believed, and with a good Sentinel
/// beside it the store lands on the real primary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_naming_a_replica_is_not_believed() {
    if !sentinels_can_run() {
        return;
    }
    let set = TestSentinel::spawn(1, 2);
    let stale = stale_sentinel(set.data_port(1)).await;
    let config = |list: &str| through(list, 2);
    let err = RedisStore::connect(config(&format!("127.0.0.1:{stale}"))).await.unwrap_err().to_string();
    assert!(err.contains("is a slave, not a primary"), "{err}");
    let store = RedisStore::connect(config(&format!("127.0.0.1:{stale},{}", set.sentinel_addresses())))
        .await
        .expect("the good Sentinel's answer is taken");
    let task = store.create(new_task(), NO_LIMITS).await.unwrap();
    let key = store.keys().task(&task.id).unwrap();
    let on_primary: bool = redis::cmd("EXISTS").arg(&key).query_async(&mut raw(set.data_port(0)).await).await.unwrap();
    assert!(on_primary, "the task went to the primary");
}

/// A failover while the primary stays up (`SENTINEL FAILOVER`): the store
/// moves its writes to the promoted replica within a few seconds of the
/// Sentinels naming it (not only once the old primary is demoted), and
/// pub/sub follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_follows_a_failover_of_a_live_primary() {
    if !sentinels_can_run() {
        return;
    }
    let set = TestSentinel::spawn(1, 3);
    let old = set.data_port(0);
    let cfg = through(&set.sentinel_addresses(), 2);
    let store = RedisStore::connect(cfg).await.unwrap();
    let before = store.create(new_task(), NO_LIMITS).await.unwrap();
    let mut bus = store.subscribe().await.unwrap();
    let replicas: i64 = redis::cmd("WAIT").arg(1).arg(5000).query_async(&mut raw(old).await).await.unwrap();
    assert_eq!(replicas, 1);

    set.force_failover();
    let started = Instant::now();
    let new = set.wait_for_failover(old, Duration::from_secs(20)).expect("a failover");
    let named = started.elapsed();
    // The old primary stays a primary until Sentinel demotes it (seconds
    // later), accepting writes that the demotion discards: the store must
    // leave it as soon as the Sentinels name the new one, not at the demotion.
    let (mut failures, mut on_old) = (0, 0);
    let after = loop {
        assert!(started.elapsed() < Duration::from_secs(30), "no write reached the promoted replica");
        if let Ok(task) = store.create(new_task(), NO_LIMITS).await {
            let key = store.keys().task(&task.id).unwrap();
            let on_new: bool = redis::cmd("EXISTS").arg(&key).query_async(&mut raw(new).await).await.unwrap();
            if on_new {
                break task;
            }
            on_old += 1;
        } else {
            failures += 1;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let moved = started.elapsed();
    let old_role = set.ask_data(old, &["ROLE"]).unwrap()[0].clone();
    eprintln!(
        "[sentinel] SENTINEL FAILOVER 127.0.0.1:{old} -> 127.0.0.1:{new}: Sentinels named it after {named:?}; \
         writes reached it after {moved:?} ({on_old} went to the old primary meanwhile, {failures} refused; \
         the old one is now a {old_role})"
    );
    assert!(moved < named + Duration::from_secs(4), "the store left the old primary within a few seconds");
    assert!(store.get(&Scope::anonymous(), &after.id).await.unwrap().is_some());
    assert!(store.get(&Scope::anonymous(), &before.id).await.unwrap().is_some());
    // Sentinel demotes the old primary (and disconnects its clients).
    let deadline = Instant::now() + Duration::from_secs(20);
    while set.ask_data(old, &["ROLE"]).unwrap()[0] != "slave" {
        assert!(Instant::now() < deadline, "the old primary was not demoted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    reaches_within(&store, &mut bus, "moved", Duration::from_secs(20)).await;
}
