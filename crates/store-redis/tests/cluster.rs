//! Cluster mode against a local 3-master Redis Cluster: the shared contract
//! suite, plus a check that tasks really spread over slots on different nodes.
//! Every script touches one slot (the task's partition tag); events use
//! sharded pub/sub; claims read each partition stream on its own node.

mod common;

presa_store::store_contract_tests!(common::make_cluster_store, common::make_cluster_store_keeping_dead_letters);

mod spread {
    use std::{collections::HashSet, time::Duration};

    use futures::StreamExt;
    use presa_store::{Cas, CreateLimits, NewTask, Scope, util::now_ms};
    use presa_tasks::{Event, Work, apply};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tasks_on_every_node_are_created_claimed_and_watched() {
        let store = super::common::make_cluster_store().await.store;
        let new = || NewTask {
            scope: Scope::anonymous(),
            work: Work::default(),
            ttl_ms: Some(60_000),
            poll_interval_ms: None,
            status_message: None,
        };
        let limits =
            CreateLimits { max_active_per_scope: Some(100), max_bytes_per_scope: None, max_queued_per_partition: None };
        let mut tasks = Vec::new();
        for _ in 0..40 {
            tasks.push(store.create(new(), limits).await.unwrap());
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

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_waiting_claim_is_woken_by_new_work() {
        let store = super::common::make_cluster_store().await.store;
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
