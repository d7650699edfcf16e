//! Tests of the memory store's own behaviour (its caps in tasks and bytes,
//! the purge, its bus's queues); the contract suite runs in `mod.rs`.

use std::time::Duration;

use futures::StreamExt;
use presa_tasks::{Event, NewTask, Scope, Task, Work, apply};

use super::{MemoryStore, record_size};
use crate::{
    bus::EventBus, claim::Cas, claim::Writer, error::StoreError, limits::BUS_QUEUE, limits::CreateLimits,
    queue::WorkQueue, records::TaskStore, util::now_ms,
};
use presa_protocol::Limit;

fn new_task(ttl_ms: Option<u64>) -> NewTask {
    NewTask { scope: Scope::anonymous(), work: Work::default(), ttl_ms, poll_interval_ms: None, status_message: None }
}

#[tokio::test]
async fn a_full_store_refuses_new_tasks_until_old_ones_expire() {
    let store = MemoryStore::new().with_max_tasks(2);
    let new = |ttl| NewTask {
        scope: Scope::anonymous(),
        work: Work::default(),
        ttl_ms: Some(ttl),
        poll_interval_ms: None,
        status_message: None,
    };
    store.create(new(100), NO_LIMITS).await.unwrap();
    store.create(new(60_000), NO_LIMITS).await.unwrap();
    let full = store.create(new(60_000), NO_LIMITS).await.unwrap_err();
    assert!(matches!(full, StoreError::Capacity { limit: Limit::MaxTasks }), "{full:?}");
    tokio::time::sleep(Duration::from_millis(150)).await;
    store.create(new(60_000), NO_LIMITS).await.expect("the expired task made room");
}

#[tokio::test]
async fn memory_is_capped_in_bytes() {
    let one = record_size(&Task::new(crate::util::new_task_id(1), new_task(Some(60_000)), 0));
    let store = MemoryStore::new().with_max_bytes(2 * one + one / 2);
    store.create(new_task(Some(100)), NO_LIMITS).await.unwrap();
    store.create(new_task(Some(60_000)), NO_LIMITS).await.unwrap();
    store.create(new_task(Some(60_000)), NO_LIMITS).await.unwrap();
    assert!(store.bytes() >= 2 * one + one / 2);
    let full = store.create(new_task(Some(60_000)), NO_LIMITS).await.unwrap_err();
    assert!(matches!(full, StoreError::Capacity { limit: Limit::MaxMemoryBytes }), "{full:?}");
    assert!(full.is_retryable());
    tokio::time::sleep(Duration::from_millis(150)).await;
    store.create(new_task(Some(60_000)), NO_LIMITS).await.expect("the expired task made room");
    let held = store.state().sizes.values().map(|(_, n)| n).sum::<usize>();
    assert_eq!(store.bytes(), held);
}

const NO_LIMITS: CreateLimits =
    CreateLimits { max_active_per_scope: None, max_bytes_per_scope: None, max_queued_per_partition: None };

#[tokio::test]
async fn events_reach_every_subscriber() {
    let store = MemoryStore::new();
    store.publish("before anyone listens").await.unwrap();
    let mut a = store.subscribe().await.unwrap();
    let mut b = store.subscribe().await.unwrap();
    store.publish("list_changed").await.unwrap();
    assert_eq!(a.next().await.unwrap().unwrap(), "list_changed");
    assert_eq!(b.next().await.unwrap().unwrap(), "list_changed");
}

#[tokio::test]
async fn a_stalled_subscriber_holds_at_most_its_bound() {
    let store = MemoryStore::new();
    let mut stalled = store.subscribe().await.unwrap();
    let event = "x".repeat(crate::limits::MAX_EVENT_BYTES);
    for _ in 0..1000 {
        store.publish(&event).await.unwrap();
        assert!(store.queued_event_bytes() <= BUS_QUEUE.max_bytes);
    }
    assert_eq!(store.queued_event_bytes(), 0, "ended, its queue freed");
    assert!(matches!(stalled.next().await, Some(Err(StoreError::Lagged))));
    assert!(stalled.next().await.is_none());
    assert!(store.subscribers().topics.is_empty(), "the ended subscriber is forgotten");
}

#[tokio::test]
async fn claims_are_broadcast_to_watchers() {
    let store = MemoryStore::new();
    let task = store.create(new_task(Some(60_000)), NO_LIMITS).await.unwrap();
    let mut watch = store.watch(std::slice::from_ref(&task.id)).await.unwrap();
    let claims = store.claim("w", 1, Duration::from_secs(30), Duration::ZERO).await.unwrap();
    let seen = watch.next().await.unwrap();
    assert_eq!(seen, claims[0].task);
    assert_eq!((seen.attempt, seen.revision), (1, 2));
}

#[tokio::test]
async fn ids_name_a_partition_in_range() {
    let store = MemoryStore::with_partitions(4);
    for _ in 0..32 {
        let t = store.create(new_task(None), NO_LIMITS).await.unwrap();
        assert!(t.id.partition().is_some_and(|p| p < 4), "{}", t.id);
    }
    assert!(format!("{store:?}").contains("tasks: 32"));
}

#[tokio::test]
async fn expired_tasks_are_purged_on_create() {
    let store = MemoryStore::new();
    let gone = store.create(new_task(Some(1)), NO_LIMITS).await.unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    store.state().last_purge_ms = 0;
    store.create(new_task(None), NO_LIMITS).await.unwrap();
    let s = store.state();
    assert!(!s.tasks.contains_key(&gone.id));
    assert!(!s.work.contains_key(&gone.id));
    assert!(!s.queue.contains(&gone.id));
    assert_eq!(s.tasks.len(), 1);
}

#[tokio::test]
async fn a_stale_holder_cannot_finish_or_release_new_work() {
    let store = MemoryStore::new();
    store.create(new_task(Some(60_000)), NO_LIMITS).await.unwrap();
    let lease = Duration::from_millis(1);
    let old = store.claim("a", 1, lease, Duration::ZERO).await.unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    let new = store.claim("b", 1, Duration::from_secs(30), Duration::from_secs(2)).await.unwrap();
    assert_eq!(new[0].task.attempt, 2);
    store.remove_work(&old[0]).await.unwrap();
    store.release(&old[0]).await.unwrap();
    assert!(store.renew(&new[0], Duration::from_secs(30)).await.unwrap());
    assert!(store.state().queue.is_empty());
    // The current holder completes and finishes: the work is gone.
    let done = apply(&new[0].task, &Event::Cancel, now_ms()).unwrap().unwrap();
    assert!(matches!(store.transition(&done, Writer::Client).await.unwrap(), Cas::Applied(_)));
    store.remove_work(&new[0]).await.unwrap();
    assert!(store.state().work.is_empty());
}

/// One principal's finished tasks never keep another from creating: a full
/// store evicts the oldest finished task of the scope holding the most
/// bytes. Running tasks are never evicted: a store full of them refuses.
#[tokio::test]
async fn a_full_store_evicts_the_heaviest_principals_finished_tasks_never_running_ones() {
    let scope = |s: &str| Scope { tenant: "t".into(), subject: s.into(), endpoint: None };
    let new = |s: &str| NewTask { scope: scope(s), ..new_task(Some(600_000)) };
    let store = MemoryStore::new().with_max_tasks(4);
    let mut done = Vec::new();
    for _ in 0..3 {
        let t = store.create(new("heavy"), NO_LIMITS).await.unwrap();
        let cancelled = apply(&t, &Event::Cancel, now_ms()).unwrap().unwrap();
        assert!(matches!(store.transition(&cancelled, Writer::Client).await.unwrap(), Cas::Applied(_)));
        done.push(t.id);
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let light = store.create(new("light"), NO_LIMITS).await.unwrap();
    // Full (4 of 4): the light principal's next task takes the heavy one's oldest finished place.
    let next = store.create(new("light"), NO_LIMITS).await.expect("a finished task made room");
    assert!(store.load(&done[0]).await.unwrap().is_none(), "the oldest finished task went");
    assert!(store.load(&done[1]).await.unwrap().is_some(), "only as many as needed");
    assert!(store.load(&light.id).await.unwrap().is_some() && store.load(&next.id).await.unwrap().is_some());
    // The heavy principal's own new task evicts its own finished ones too.
    store.create(new("heavy"), NO_LIMITS).await.unwrap();
    store.create(new("heavy"), NO_LIMITS).await.unwrap();
    assert_eq!(store.state().tasks.len(), 4);
    assert!(store.state().tasks.values().all(|t| !t.status.is_terminal()), "every finished task evicted");
    // Four running tasks: nothing can be evicted, so the store refuses.
    let full = store.create(new("light"), NO_LIMITS).await.unwrap_err();
    assert!(matches!(full, StoreError::Capacity { limit: Limit::MaxTasks }), "{full:?}");
    let held = store.state().sizes.values().map(|(_, n)| n).sum::<usize>();
    assert_eq!(store.bytes(), held, "eviction keeps the byte count");
}
