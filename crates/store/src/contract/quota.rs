//! The limits half of the contract: a scope's active tasks and bytes, a
//! partition's queue, counted exactly under concurrent creates, and a
//! refused create keeps nothing.

use std::{
    collections::{BTreeMap, HashSet},
    sync::Arc,
    time::Duration,
};

use presa_tasks::{Event, Scope, Task, TaskId};
use serde_json::json;

use super::{
    LONG_LEASE, NO_LIMITS, PATIENCE, claim, claim_all, claim_one, commit, load, new_task, next, result, scope,
};
use crate::{claim::Cas, claim::Writer, error::StoreError, limits::CreateLimits, queue::WorkQueue, records::TaskStore};
use presa_protocol::Limit;

/// At most `max_active_per_scope` live tasks per scope; a refused create
/// stores nothing; a terminal task frees its slot.
pub async fn capacity_limit_per_scope(store: Arc<dyn WorkQueue>) {
    let limits =
        CreateLimits { max_active_per_scope: Some(2), max_bytes_per_scope: None, max_queued_per_partition: None };
    let owner = scope("alice");
    let neighbour = scope("bob");
    let make = |s: &Scope| store.create(new_task(s, Some(60_000)), limits);
    let first = make(&owner).await.expect("first create");
    let second = make(&owner).await.expect("second create");
    let refused = make(&owner).await;
    assert!(
        matches!(refused, Err(StoreError::Capacity { limit: Limit::MaxActiveTasksPerScope })),
        "the third create is refused: {refused:?}"
    );
    assert!(refused.is_err_and(|e| e.is_retryable()));
    let bobs = make(&neighbour).await.expect("the limit is per scope");
    commit(&store, &first, Event::Cancel, Writer::Client).await;
    let third = make(&owner).await.expect("a terminal task frees its slot");

    // The refused create enqueued nothing: exactly the live tasks' work is there.
    let claimed = claim_all(&store).await;
    let expected: HashSet<TaskId> = [second.id, bobs.id, third.id].into();
    assert_eq!(claimed, expected);
}

/// Run `n` creates in `scope` at once under `limits`; returns the admitted
/// tasks. Every refusal must be the per-scope limit.
async fn create_at_once<S: TaskStore + ?Sized>(
    store: &Arc<S>,
    scope: &Scope,
    ttl_ms: u64,
    limits: CreateLimits,
    n: usize,
) -> Vec<Task> {
    let creates = (0..n).map(|_| {
        let store = store.clone();
        let new = new_task(scope, Some(ttl_ms));
        tokio::spawn(async move { store.create(new, limits).await })
    });
    let mut admitted = Vec::new();
    for outcome in futures::future::join_all(creates).await {
        match outcome.expect("create task") {
            Ok(task) => admitted.push(task),
            Err(StoreError::Capacity { limit: Limit::MaxActiveTasksPerScope }) => {}
            Err(e) => panic!("unexpected refusal: {e:?}"),
        }
    }
    admitted
}

/// The per-scope limit admits exactly up to the limit: under concurrent
/// creates, again exactly as many as ended after tasks turn terminal, and
/// again exactly as many as expired after tasks expire.
pub async fn admission_counts_are_exact(store: Arc<dyn WorkQueue>) {
    let limits =
        CreateLimits { max_active_per_scope: Some(5), max_bytes_per_scope: None, max_queued_per_partition: None };
    let owner = scope("alice");
    let admitted = create_at_once(&store, &owner, 60_000, limits, 20).await;
    assert_eq!(admitted.len(), 5, "exactly the limit is admitted under concurrent creates");
    assert!(create_at_once(&store, &owner, 60_000, limits, 4).await.is_empty(), "the scope is full");

    // Two end (cancelled and completed): exactly two more get in.
    commit(&store, &admitted[0], Event::Cancel, Writer::Client).await;
    let mut claimed = None;
    while claimed.is_none() {
        let claims = claim(&store, "w1", LONG_LEASE, PATIENCE).await;
        assert!(!claims.is_empty(), "the scope's work is claimable");
        claimed = claims.into_iter().find(|c| c.task.id == admitted[1].id);
    }
    let claimed = claimed.expect("claimed");
    commit(&store, &claimed.task, Event::Complete(result()), claimed.writer()).await;
    let more = create_at_once(&store, &owner, 60_000, limits, 10).await;
    assert_eq!(more.len(), 2, "exactly the ended tasks' slots are reused");
    // An ended task ending again (a refused CAS) frees nothing more.
    let late = next(&admitted[0], Event::Cancel);
    assert!(matches!(store.transition(&late, Writer::Client).await.expect("transition"), Cas::Conflict(_)));
    assert!(create_at_once(&store, &owner, 60_000, limits, 4).await.is_empty(), "still full");

    // Expiry: three short-lived tasks fill a neighbour's limit of three, and
    // once they expire exactly three more get in.
    let three =
        CreateLimits { max_active_per_scope: Some(3), max_bytes_per_scope: None, max_queued_per_partition: None };
    let neighbour = scope("bob");
    assert_eq!(create_at_once(&store, &neighbour, 300, three, 8).await.len(), 3);
    assert!(create_at_once(&store, &neighbour, 60_000, three, 2).await.is_empty(), "full before the expiry");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(create_at_once(&store, &neighbour, 60_000, three, 8).await.len(), 3, "expired tasks free their slots");
    assert!(create_at_once(&store, &owner, 60_000, limits, 2).await.is_empty(), "the owner's scope is untouched");
}

/// `max_queued_per_partition`: a create into a partition whose work queue
/// is full is refused (retryable), and leaves nothing behind: no task, no
/// work, no admission under the scope's limit.
pub async fn max_queued_refuses_retryably_and_stores_nothing(store: Arc<dyn WorkQueue>) {
    let owner = scope("alice");
    let one_each = CreateLimits {
        max_active_per_scope: Some(100_000),
        max_bytes_per_scope: Some(1 << 40),
        max_queued_per_partition: Some(1),
    };
    // Ids pick their partition at random: with one item per partition, a
    // refusal comes at the latest once every partition holds one.
    let mut admitted = Vec::new();
    let mut refusals = 0;
    while refusals < 3 {
        assert!(admitted.len() <= usize::from(u16::MAX), "no refusal after {} creates", admitted.len());
        match store.create(new_task(&owner, Some(60_000)), one_each).await {
            Ok(task) => admitted.push(task),
            Err(e) => {
                assert!(matches!(e, StoreError::QueueFull), "{e:?}");
                assert!(e.is_retryable());
                refusals += 1;
            }
        }
    }
    let partitions: HashSet<Option<u16>> = admitted.iter().map(|t| t.id.partition()).collect();
    assert_eq!(partitions.len(), admitted.len(), "at most one work item per partition");

    // The refused creates hold no admission and no bytes: exactly one more
    // fits under both limits (every task of this shape has the same size).
    let n = admitted.len() as u64;
    let one = serde_json::to_vec(&admitted[0]).expect("json").len() as u64;
    let exact = CreateLimits {
        max_active_per_scope: Some(n + 1),
        max_bytes_per_scope: Some((n + 1) * one + one / 2),
        max_queued_per_partition: None,
    };
    let last = store.create(new_task(&owner, Some(60_000)), exact).await.expect("one slot and its bytes left");
    let refused = store.create(new_task(&owner, Some(60_000)), exact).await;
    assert!(matches!(refused, Err(StoreError::Capacity { limit: Limit::MaxActiveTasksPerScope })), "{refused:?}");

    // And no work: exactly the admitted tasks' work is there.
    let claimed = claim_all(&store).await;
    let expected: HashSet<TaskId> = admitted.iter().map(|t| t.id.clone()).chain([last.id]).collect();
    assert_eq!(claimed, expected);
}

/// At most `max_bytes_per_scope` bytes of task records per scope (a task
/// counts from its creation until it expires); a refused create is retryable;
/// other scopes are unaffected; expiry frees the bytes.
pub async fn byte_quota_per_scope(store: Arc<dyn TaskStore>) {
    let (owner, neighbour) = (scope("carol"), scope("dave"));
    let probe = store.create(new_task(&scope("sizer"), Some(60_000)), NO_LIMITS).await.expect("create");
    let one = serde_json::to_vec(&probe).expect("json").len() as u64;
    let limits = CreateLimits {
        max_active_per_scope: None,
        max_bytes_per_scope: Some(2 * one + one / 2),
        max_queued_per_partition: None,
    };
    let make = |s: &Scope, ttl: u64| store.create(new_task(s, Some(ttl)), limits);
    make(&owner, 300).await.expect("first create");
    make(&owner, 60_000).await.expect("second create");
    let refused = make(&owner, 60_000).await;
    assert!(
        matches!(refused, Err(StoreError::Capacity { limit: Limit::MaxBytesPerScope })),
        "the third create is over the quota: {refused:?}"
    );
    assert!(refused.is_err_and(|e| e.is_retryable()));
    make(&neighbour, 60_000).await.expect("the quota is per scope");
    tokio::time::sleep(Duration::from_millis(500)).await;
    make(&owner, 60_000).await.expect("an expired task frees its bytes");
}

/// A task counts at the size its writes leave it, not only its creation's:
/// a client's answer that would grow it past its scope's byte quota is
/// refused (retryable, nothing written) while one that fits lands; a
/// worker's result is never refused but counts, so the next create is; a
/// cancel lands even over the quota.
pub async fn a_tasks_growth_counts_against_its_scopes_byte_quota(store: Arc<dyn WorkQueue>) {
    let owner = scope("grace");
    // Sized by the first task itself (created under a quota it cannot reach).
    let roomy = CreateLimits { max_bytes_per_scope: Some(1 << 40), ..CreateLimits::NONE };
    let first = store.create(new_task(&owner, Some(60_000)), roomy).await.expect("create");
    let quota = 2 * serde_json::to_vec(&first).expect("json").len() as u64 + 1500;
    let limits = CreateLimits { max_bytes_per_scope: Some(quota), ..CreateLimits::NONE };
    let claimed = claim_one(&store, "w1", LONG_LEASE).await;
    let ask = BTreeMap::from([("confirm".to_string(), json!({"method": "elicitation/create"}))]);
    let parked = commit(&store, &claimed.task, Event::RequestInput(ask), claimed.writer()).await;
    let answer = |bytes: usize| {
        let text = "x".repeat(bytes);
        next(
            &parked,
            Event::ProvideInput(BTreeMap::from([(
                "confirm".to_string(),
                json!({"action": "accept", "content": {"text": text}}),
            )])),
        )
    };
    let refused = store.transition_within(&answer(3000), Writer::Client, Some(quota)).await;
    assert!(
        matches!(refused, Err(StoreError::Capacity { limit: Limit::MaxBytesPerScope })),
        "a 3,000-byte answer does not fit in the {quota}-byte quota: {refused:?}"
    );
    assert!(refused.is_err_and(|e| e.is_retryable()));
    assert_eq!(load(&store, &parked.id).await, parked, "a refused answer writes nothing");
    let fits = answer(200);
    let cas = store.transition_within(&fits, Writer::Client, Some(quota)).await.expect("a 200-byte answer");
    assert_eq!(cas, Cas::Applied(fits.clone()));

    let other = store.create(new_task(&owner, Some(60_000)), limits).await.expect("a second task still fits");
    let big = json!({"content": [{"type": "text", "text": "y".repeat(5000)}], "isError": false});
    commit(&store, &fits, Event::Complete(big), claimed.writer()).await;
    let full = store.create(new_task(&owner, Some(60_000)), limits).await;
    assert!(
        matches!(full, Err(StoreError::Capacity { limit: Limit::MaxBytesPerScope })),
        "the 5,000-byte result counts against the quota: {full:?}"
    );
    let cancelled = next(&other, Event::Cancel);
    let cas = store.transition_within(&cancelled, Writer::Client, Some(quota)).await.expect("cancel");
    assert_eq!(cas, Cas::Applied(cancelled), "a cancel lands over the quota");
}

/// A create refused by one limit keeps nothing it took under another: a
/// byte-quota refusal gives its admission back (one round trip or three,
/// whichever way the backend creates).
pub async fn a_refused_create_keeps_nothing_of_other_limits(store: Arc<dyn TaskStore>) {
    // Sized in another scope of the same length (a scope's own tasks may
    // count against its quota whatever limits they were created under).
    let owner = scope("frank");
    let probe = store.create(new_task(&scope("sizer"), Some(60_000)), NO_LIMITS).await.expect("create");
    let one = serde_json::to_vec(&probe).expect("json").len() as u64;
    let both = CreateLimits {
        max_active_per_scope: Some(3),
        max_bytes_per_scope: Some(one + one / 2),
        max_queued_per_partition: None,
    };
    store.create(new_task(&owner, Some(60_000)), both).await.expect("one task's bytes fit");
    for _ in 0..3 {
        let refused = store.create(new_task(&owner, Some(60_000)), both).await;
        assert!(
            matches!(refused, Err(StoreError::Capacity { limit: Limit::MaxBytesPerScope })),
            "a second task's bytes do not fit: {refused:?}"
        );
    }
    // Admitted under the active limit: only the task created under `both`. The three
    // refusals gave theirs back, so two more fit under a limit of three.
    let active_only = CreateLimits { max_active_per_scope: Some(3), ..CreateLimits::NONE };
    for _ in 0..2 {
        store.create(new_task(&owner, Some(60_000)), active_only).await.expect("the refusals hold no admission");
    }
    let full = store.create(new_task(&owner, Some(60_000)), active_only).await;
    assert!(matches!(full, Err(StoreError::Capacity { limit: Limit::MaxActiveTasksPerScope })), "{full:?}");
}
