//! The delayed half of the work contract ([`WorkQueue::defer`],
//! [`WorkQueue::retry_now`]): work put off waits without a worker, counted
//! apart, and comes back as a fresh try; only the claim's holder may put it
//! off; an operator may make it due now; a task that ends while its work
//! waits never runs again.

use std::{sync::Arc, time::Duration};

use presa_tasks::{Event, Status, Task};

use super::{
    EMPTY_WAIT, LONG_LEASE, PAST_SHORT_LEASE, PATIENCE, SHORT_LEASE, assert_nothing_to_claim, claim_one, commit,
    create, load, new_task, next, scope,
};
use crate::{
    claim::Cas, claim::Claim, claim::Writer, error::StoreError, limits::CreateLimits, queue::WorkQueue, util::now_ms,
};
use presa_protocol::Limit;

/// The write that puts `claim`'s try off until `due_at_ms`.
fn deferral(claim: &Claim, due_at_ms: u64) -> Task {
    let reason = "upstream 503".to_string();
    next(&claim.task, Event::Defer { failed: true, reason, message: "attempt 1 failed; next soon".into(), due_at_ms })
}

/// How much delayed work every partition holds, and whether any is late.
async fn delayed(store: &Arc<dyn WorkQueue>) -> u64 {
    store.work_stats().await.expect("work_stats").iter().map(|p| p.delayed).sum()
}

/// Deferred work is not claimable until it is due, is counted as delayed
/// meanwhile, then comes back as the next try's first delivery (the fence
/// still moves on).
pub async fn deferred_work_waits_then_runs_as_a_new_try(store: Arc<dyn WorkQueue>) {
    let task = create(&store, &scope("alice")).await;
    let first = claim_one(&store, "w1", LONG_LEASE).await;
    let due = now_ms() + 700;
    let put_off = deferral(&first, due);
    assert_eq!(store.defer(&put_off, &first, due).await.expect("defer"), Cas::Applied(put_off.clone()));
    let stored = load(&store, &task.id).await;
    assert_eq!(stored, put_off);
    assert_eq!((stored.status, stored.retries.due_at_ms), (Status::Working, Some(due)));
    assert_eq!(delayed(&store).await, 1, "waiting work is counted as delayed");
    let queued: u64 = store.work_stats().await.expect("work_stats").iter().map(|p| p.queued + p.pending).sum();
    assert_eq!(queued, 0, "waiting work holds no place in the queue nor a worker");
    assert_nothing_to_claim(&store, "w2").await;
    let again = claim_one(&store, "w2", LONG_LEASE).await;
    assert!(now_ms() >= due, "claimed before it was due");
    assert_eq!(again.task.id, task.id);
    assert_eq!((again.task.attempt, again.deliveries, again.task.try_number()), (2, 1, 2));
    assert_eq!(again.task.retries.due_at_ms, None);
    assert_eq!(delayed(&store).await, 0);
    // The new try is a claim like any other: the old holder is fenced off.
    let late = next(&first.task, Event::SetMessage("late".into()));
    assert!(matches!(store.transition(&late, first.writer()).await.expect("transition"), Cas::Conflict(_)));
}

/// Only the claim's holder puts work off: a holder whose lease lapsed and
/// was taken over moves nothing.
pub async fn a_stale_holder_cannot_defer(store: Arc<dyn WorkQueue>) {
    let task = create(&store, &scope("alice")).await;
    let first = claim_one(&store, "w1", SHORT_LEASE).await;
    tokio::time::sleep(PAST_SHORT_LEASE).await;
    let second = claim_one(&store, "w2", LONG_LEASE).await;
    let due = now_ms();
    let stale = deferral(&first, due);
    assert!(matches!(store.defer(&stale, &first, due).await.expect("defer"), Cas::Conflict(_)));
    assert_eq!(load(&store, &task.id).await, second.task, "nothing written");
    assert_eq!(delayed(&store).await, 0, "nothing moved to the delayed work");
    assert!(store.renew(&second, LONG_LEASE).await.expect("renew"), "the holder still holds its work");
}

/// An operator's "retry now" makes waiting work due at once; work that is
/// not waiting is left alone.
pub async fn retry_now_makes_waiting_work_due(store: Arc<dyn WorkQueue>) {
    let task = create(&store, &scope("alice")).await;
    let first = claim_one(&store, "w1", LONG_LEASE).await;
    assert!(!store.retry_now(&task.id).await.expect("retry_now"), "running work is not waiting");
    let due = now_ms() + 3_600_000;
    store.defer(&deferral(&first, due), &first, due).await.expect("defer");
    assert_nothing_to_claim(&store, "w2").await;
    assert!(store.retry_now(&task.id).await.expect("retry_now"));
    let started = std::time::Instant::now();
    let again = claim_one(&store, "w2", LONG_LEASE).await;
    assert_eq!(again.task.id, task.id);
    assert!(started.elapsed() < PATIENCE, "claimed at once, not an hour later");
    assert!(!store.retry_now(&task.id).await.expect("retry_now"), "no longer waiting");
}

/// A task cancelled while its work waits ends at once and its work never
/// runs: when it comes due, no claim returns it.
pub async fn a_task_cancelled_while_waiting_never_runs(store: Arc<dyn WorkQueue>) {
    let task = create(&store, &scope("alice")).await;
    let first = claim_one(&store, "w1", LONG_LEASE).await;
    let due = now_ms() + 300;
    let put_off = deferral(&first, due);
    store.defer(&put_off, &first, due).await.expect("defer");
    let cancelled = commit(&store, &put_off, Event::Cancel, Writer::Client).await;
    assert_eq!(cancelled.status, Status::Cancelled);
    tokio::time::sleep(Duration::from_millis(400)).await;
    let claims = store.claim("w2", 10, LONG_LEASE, EMPTY_WAIT * 3).await.expect("claim");
    assert!(claims.is_empty(), "a cancelled task's work ran again: {claims:?}");
    assert_eq!(load(&store, &task.id).await.status, Status::Cancelled);
}

/// Waiting work is a live task of its owner's: it counts against the
/// owner's active tasks (a create past the limit is refused while it
/// waits) and frees its place only when it ends.
pub async fn waiting_work_counts_against_its_owners_active_tasks(store: Arc<dyn WorkQueue>) {
    let limits =
        CreateLimits { max_active_per_scope: Some(1), max_bytes_per_scope: None, max_queued_per_partition: None };
    let owner = scope("alice");
    let task = store.create(new_task(&owner, Some(60_000)), limits).await.expect("create");
    let first = claim_one(&store, "w1", LONG_LEASE).await;
    let due = now_ms() + 3_600_000;
    let put_off = deferral(&first, due);
    store.defer(&put_off, &first, due).await.expect("defer");
    let refused = store.create(new_task(&owner, Some(60_000)), limits).await;
    assert!(
        matches!(refused, Err(StoreError::Capacity { limit: Limit::MaxActiveTasksPerScope })),
        "a waiting task holds its owner's place: {refused:?}"
    );
    commit(&store, &put_off, Event::Cancel, Writer::Client).await;
    store.create(new_task(&owner, Some(60_000)), limits).await.expect("the cancelled waiting task freed it");
    assert_eq!(load(&store, &task.id).await.status, Status::Cancelled);
}
