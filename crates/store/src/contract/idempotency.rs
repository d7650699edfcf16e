//! The idempotency half of the contract ([`crate::idempotency`]): a key
//! makes one task, even under concurrent creates.

use std::{collections::HashSet, sync::Arc, time::Duration};

use presa_tasks::TaskId;
use serde_json::json;

use super::{NO_LIMITS, claim_all, new_task, scope};
use crate::{
    error::StoreError, idempotency::Created, idempotency::Idempotency, limits::CreateLimits, queue::WorkQueue,
};

/// A create under an idempotency key: the same key and request return the
/// first task (no second work item, even with the scope at its limit now),
/// the same key with other arguments is refused (not retryable), another
/// principal's same key is its own, and once the task expires the key makes
/// a new one.
pub async fn an_idempotency_key_makes_one_task(store: Arc<dyn WorkQueue>) {
    let (owner, other) = (scope("heidi"), scope("ivan"));
    let request = new_task(&owner, Some(60_000));
    let key = Idempotency::new(&owner, "create-1", &request.work);
    let one = CreateLimits { max_active_per_scope: Some(1), ..CreateLimits::NONE };
    let first = match store.create_idempotent(request.clone(), one, Some(&key)).await.expect("create") {
        Created::New(task) => task,
        replayed @ Created::Replayed(_) => panic!("a new key makes a new task: {replayed:?}"),
    };
    let again = store.create_idempotent(request.clone(), one, Some(&key)).await.expect("retry");
    assert_eq!(again, Created::Replayed(first.clone()), "a retry at the scope's limit returns the first task");
    let fresh = store.create_idempotent(request.clone(), one, None).await;
    assert!(matches!(fresh, Err(StoreError::Capacity { .. })), "the scope is at its limit: {fresh:?}");

    let mut changed = request.clone();
    changed.work.arguments = json!({"text": "bye"});
    let reused = store
        .create_idempotent(changed.clone(), NO_LIMITS, Some(&Idempotency::new(&owner, "create-1", &changed.work)))
        .await;
    assert!(matches!(reused, Err(StoreError::KeyReused)), "{reused:?}");
    assert!(reused.is_err_and(|e| !e.is_retryable()));

    let theirs = new_task(&other, Some(60_000));
    let their_key = Idempotency::new(&other, "create-1", &theirs.work);
    let created = store.create_idempotent(theirs, NO_LIMITS, Some(&their_key)).await.expect("create");
    assert!(matches!(&created, Created::New(t) if t.id != first.id && t.scope == other), "{created:?}");
    assert_eq!(claim_all(&store).await.len(), 2, "one work item per task, none for the replay");

    let short = new_task(&owner, Some(300));
    let short_key = Idempotency::new(&owner, "create-2", &short.work);
    let before = store.create_idempotent(short.clone(), NO_LIMITS, Some(&short_key)).await.expect("create");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = store.create_idempotent(short, NO_LIMITS, Some(&short_key)).await.expect("create");
    assert!(
        matches!((&before, &after), (Created::New(a), Created::New(b)) if a.id != b.id),
        "an expired task's key makes a new task: {before:?} then {after:?}"
    );
}

/// Eight concurrent creates under one key (a client retrying while its first
/// try is still in flight) make one task: one is new, seven replay it.
pub async fn concurrent_creates_under_one_key_make_one_task(store: Arc<dyn WorkQueue>) {
    let owner = scope("judy");
    let request = new_task(&owner, Some(60_000));
    let key = Idempotency::new(&owner, "racing", &request.work);
    let limits =
        CreateLimits { max_active_per_scope: Some(100), max_bytes_per_scope: Some(1 << 30), ..CreateLimits::NONE };
    let tries = (0..8).map(|_| {
        let (store, request, key) = (store.clone(), request.clone(), key.clone());
        tokio::spawn(async move { store.create_idempotent(request, limits, Some(&key)).await.expect("create") })
    });
    let mut outcomes = Vec::new();
    for t in tries {
        outcomes.push(t.await.expect("join"));
    }
    let ids: HashSet<TaskId> = outcomes.iter().map(|c| c.task().id.clone()).collect();
    assert_eq!(ids.len(), 1, "one task: {outcomes:?}");
    assert_eq!(outcomes.iter().filter(|c| matches!(c, Created::New(_))).count(), 1, "{outcomes:?}");
    assert_eq!(claim_all(&store).await.len(), 1, "one work item");
    // The seven replays hold no admission: 99 more fit under the limit of 100.
    for _ in 0..99 {
        store
            .create(
                new_task(&owner, Some(60_000)),
                CreateLimits { max_active_per_scope: Some(100), ..CreateLimits::NONE },
            )
            .await
            .expect("room");
    }
}
