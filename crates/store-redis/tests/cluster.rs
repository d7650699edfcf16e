//! Cluster mode against a local 3-master Redis Cluster: the shared contract
//! suite, plus a check that tasks really spread over slots on different nodes.
//! Every script touches one slot (the task's partition tag); events use
//! sharded pub/sub; claims read each partition stream on its own node.
//! And a replica failover: on a private cluster with a replica per primary,
//! one shard's primary is SIGKILLed and the same store object follows the
//! promoted replica.

mod common;

presa_store::store_contract_tests!(common::make_cluster_store, common::make_cluster_store_keeping_dead_letters);

mod spread {
    use std::{collections::HashSet, time::Duration};

    use futures::{StreamExt, future::join_all};
    use presa_store::{Cas, CreateLimits, NewTask, Scope, util::now_ms};
    use presa_tasks::{Event, Work, apply};

    /// A task of the anonymous scope living a minute.
    fn new_task() -> NewTask {
        NewTask {
            scope: Scope::anonymous(),
            work: Work::default(),
            ttl_ms: Some(60_000),
            poll_interval_ms: None,
            status_message: None,
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tasks_on_every_node_are_created_claimed_and_watched() {
        let store = super::common::make_cluster_store().await.work;
        let limits =
            CreateLimits { max_active_per_scope: Some(100), max_bytes_per_scope: None, max_queued_per_partition: None };
        let mut tasks = Vec::new();
        for _ in 0..40 {
            tasks.push(store.create(new_task(), limits).await.unwrap());
        }
        let partitions: HashSet<u16> = tasks.iter().filter_map(|t| t.id.partition()).collect();
        assert!(partitions.len() >= 4, "40 tasks over 8 partitions: {partitions:?}");
        let ids: Vec<_> = tasks.iter().map(|t| t.id.clone()).collect();
        let mut watch = store.watch(&ids).await.unwrap();
        let mut claimed = HashSet::new();
        while claimed.len() < tasks.len() {
            let claims = store.claim("w", 16, Duration::from_secs(30), Duration::from_secs(5)).await.unwrap();
            assert!(!claims.is_empty(), "work missing: {} of {}", claimed.len(), tasks.len());
            for c in claims {
                let done = apply(&c.task, &Event::Cancel, now_ms()).unwrap().unwrap();
                assert!(matches!(store.transition(&done, c.writer()).await.unwrap(), Cas::Applied(_)));
                store.remove_work(&c).await.unwrap();
                assert!(claimed.insert(c.task.id));
            }
        }
        // Two snapshots per task (claim, cancel), from every node's shard.
        let mut seen = HashSet::new();
        while seen.len() < tasks.len() {
            let t = tokio::time::timeout(Duration::from_secs(5), watch.next())
                .await
                .expect("snapshots from every shard")
                .unwrap();
            if t.status.is_terminal() {
                seen.insert(t.id);
            }
        }
    }

    /// A claim reads the partitions without taking more than it asks for:
    /// what it does not claim stays new, for the next claim at once (over-
    /// delivered entries used to be handed back and wait for the next
    /// lapsed-lease pass).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_small_claim_leaves_the_rest_new_for_the_next_one() {
        let store = super::common::make_cluster_store().await.work;
        let lease = Duration::from_secs(30);
        // A claim on the empty queue looks for lapsed leases, so the next
        // look is a second away: what follows must not depend on it.
        assert!(store.claim("w0", 1, lease, Duration::ZERO).await.unwrap().is_empty());
        let limits =
            CreateLimits { max_active_per_scope: Some(100), max_bytes_per_scope: None, max_queued_per_partition: None };
        for _ in 0..40 {
            store.create(new_task(), limits).await.unwrap();
        }
        let first = store.claim("w1", 3, lease, Duration::from_secs(5)).await.unwrap();
        assert_eq!(first.len(), 3);
        let rest = store.claim("w2", 64, lease, Duration::ZERO).await.unwrap();
        assert_eq!(rest.len(), 37, "every task not claimed first is there for the next claim");
    }

    /// A worker's concludes that wait together (on a current-thread
    /// runtime, joined futures all queue before the flush runs) are grouped
    /// by partition, one script call per slot: every one is written and its
    /// work entry acked.
    #[tokio::test]
    async fn concurrent_concludes_over_every_partition_are_all_written() {
        let store = super::common::make_cluster_store().await.work;
        let lease = Duration::from_secs(30);
        let mut tasks = Vec::new();
        for _ in 0..40 {
            tasks.push(store.create(new_task(), CreateLimits::NONE).await.unwrap());
        }
        let partitions: HashSet<u16> = tasks.iter().filter_map(|t| t.id.partition()).collect();
        assert!(partitions.len() >= 4, "40 tasks over 8 partitions: {partitions:?}");
        let mut claims = Vec::new();
        for _ in 0..20 {
            if claims.len() == tasks.len() {
                break;
            }
            claims.extend(store.claim("w", 64, lease, Duration::from_secs(5)).await.unwrap());
        }
        assert_eq!(claims.len(), tasks.len());
        let dones: Vec<_> = claims.iter().map(|c| apply(&c.task, &Event::Cancel, now_ms()).unwrap().unwrap()).collect();
        let results = join_all(dones.iter().zip(&claims).map(|(done, c)| store.conclude(done, c))).await;
        for r in &results {
            assert!(matches!(r, Ok(Cas::Applied(_))), "{r:?}");
        }
        let stats = store.work_stats().await.unwrap();
        assert_eq!(stats.iter().map(|p| p.queued + p.pending).sum::<u64>(), 0, "every work entry acked: {stats:?}");
        for t in &tasks {
            assert_eq!(store.load(&t.id).await.unwrap().unwrap().status, presa_store::Status::Cancelled);
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_waiting_claim_is_woken_by_new_work() {
        let store = super::common::make_cluster_store().await.work;
        let waiter = {
            let store = store.clone();
            tokio::spawn(async move {
                let started = std::time::Instant::now();
                let claims = store.claim("w", 1, Duration::from_secs(30), Duration::from_secs(20)).await.unwrap();
                (claims, started.elapsed())
            })
        };
        tokio::time::sleep(Duration::from_millis(500)).await;
        let created = std::time::Instant::now();
        let task = store.create(super::common::new_task(), super::common::NO_LIMITS).await.unwrap();
        let (claims, waited) = waiter.await.unwrap();
        if std::env::var_os("PRESA_PRINT_WAKE_LATENCY").is_some() {
            eprintln!("woken {:?} after the create (waited {waited:?})", created.elapsed());
        }
        assert_eq!(claims.len(), 1);
        assert_eq!(claims[0].task.id, task.id);
        assert!(waited < Duration::from_secs(15), "woke late: {waited:?}");
    }
}

mod failover {
    use std::time::{Duration, Instant};

    use presa_store::{Scope, TaskStore, WorkQueue, Writer};
    use presa_store_redis::{RedisConfig, RedisStore};
    use presa_testkit::redis_cluster::TestCluster;

    use super::common::{NO_LIMITS, new_task, unique_prefix};

    const LEASE: Duration = Duration::from_secs(30);

    async fn raw(port: u16) -> redis::aio::MultiplexedConnection {
        let url = format!("redis://127.0.0.1:{port}");
        redis::Client::open(url).unwrap().get_multiplexed_async_connection().await.unwrap()
    }

    /// The tasks of a shard survive the SIGKILL of its primary (they were
    /// replicated first), and the store that wrote them, without a restart,
    /// reads them from the promoted replica (MOVED, a refreshed slot map)
    /// and creates and claims new work there; the killed node comes back as
    /// a replica.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_store_follows_a_replica_promotion_in_its_shard() {
        let mut cluster = tokio::task::block_in_place(|| TestCluster::spawn(3, 1));
        let cfg = RedisConfig::new(cluster.urls())
            .with_cluster(true)
            .with_prefix(unique_prefix())
            .with_partitions(8)
            .with_op_timeout(Duration::from_secs(1));
        let store = RedisStore::connect(cfg).await.expect("connect to the cluster");
        let scope = Scope::anonymous();

        // Before: tasks on every shard, all claimed.
        let mut tasks = Vec::new();
        for _ in 0..24 {
            tasks.push(store.create(new_task(), NO_LIMITS).await.unwrap());
        }
        let mut claimed = 0;
        while claimed < tasks.len() {
            let claims = store.claim("w1", 64, LEASE, Duration::from_secs(2)).await.unwrap();
            assert!(!claims.is_empty(), "claimed {claimed} of {}", tasks.len());
            claimed += claims.len();
        }
        // The shard of the first task's partition, and its tasks.
        let tag = |p: u16| format!("{{p{p:02}}}");
        let partition = tasks[0].id.partition().unwrap();
        let slot = cluster.slot_of(&tag(partition));
        let old = cluster.primary_of_slot(slot).expect("a primary serves the slot");
        let on_shard: Vec<_> =
            tasks.iter().filter(|t| cluster.primary_of_key(&tag(t.id.partition().unwrap())) == Some(old)).collect();
        // Replication is asynchronous: a write on this connection, then WAIT
        // for the replica to have it (and so everything before it).
        let mut con = raw(old).await;
        let fence = format!("{}:{}:fence", store.keys().prefix(), tag(partition));
        let _: i64 = redis::cmd("INCR").arg(&fence).query_async(&mut con).await.unwrap();
        let replicas: i64 = redis::cmd("WAIT").arg(1).arg(5000).query_async(&mut con).await.unwrap();
        assert_eq!(replicas, 1, "the replica acknowledged the writes");

        tokio::task::block_in_place(|| cluster.kill_node(old));
        let killed = Instant::now();

        // The same store, no restart: it reads the shard's tasks again once
        // the replica is promoted.
        let mut errors = 0;
        let back = loop {
            assert!(killed.elapsed() < Duration::from_secs(30), "the store did not reach the promoted replica in 30 s");
            match store.get(&scope, &on_shard[0].id).await {
                Ok(Some(task)) => break task,
                Ok(None) => panic!("the replicated task is gone after the failover"),
                Err(_) => errors += 1,
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let recovered = killed.elapsed();
        assert_eq!(back.attempt, 1, "the claim replicated too");
        let new = tokio::task::block_in_place(|| cluster.wait_for_failover(slot, old, Duration::from_secs(10)))
            .expect("the replica was promoted");
        for t in &on_shard {
            let task = store.get(&scope, &t.id).await.unwrap().expect("every replicated task of the shard");
            assert_eq!((task.id.clone(), task.attempt), (t.id.clone(), 1));
        }
        eprintln!(
            "[cluster] primary 127.0.0.1:{old} (slot {slot}, {} tasks) SIGKILLed; replica 127.0.0.1:{new} promoted; \
             the store read the shard's tasks again after {recovered:?} ({errors} failed reads meanwhile)",
            on_shard.len()
        );

        // New work on the promoted replica: created there, claimed from there.
        let fresh = loop {
            let task = store.create(new_task(), NO_LIMITS).await.unwrap();
            if task.id.partition() == Some(partition) {
                break task;
            }
        };
        let key = store.keys().task(&fresh.id).unwrap();
        let on_new: bool = redis::cmd("EXISTS").arg(&key).query_async(&mut raw(new).await).await.unwrap();
        assert!(on_new, "the new task is on the promoted replica");
        let deadline = Instant::now() + Duration::from_secs(10);
        let claim = loop {
            assert!(Instant::now() < deadline, "the new task on the promoted replica was never claimed");
            let claims = store.claim("w2", 64, LEASE, Duration::from_secs(2)).await.unwrap();
            if let Some(c) = claims.into_iter().find(|c| c.task.id == fresh.id) {
                break c;
            }
        };
        let done = presa_tasks::apply(&claim.task, &presa_tasks::Event::Cancel, presa_store::util::now_ms())
            .unwrap()
            .expect("a claimed task can be cancelled");
        assert!(matches!(store.transition(&done, Writer::Client).await.unwrap(), presa_store::Cas::Applied(_)));

        // The killed node, restarted, rejoins as the new primary's replica.
        tokio::task::block_in_place(|| cluster.restart_node(old)).expect("the old primary rejoins as a replica");
        assert_eq!(cluster.primary_of_slot(slot), Some(new));
    }
}
