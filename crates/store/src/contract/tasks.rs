//! The record half of the contract: a created task resolves at once and
//! only for its owner, `get_view` is the reducer's view, expiry hides a
//! task, compare-and-set applies at the right revision only, terminal
//! tasks never change, a cancel racing a completion has one winner, and the
//! input round trip and a failure end as the reducer says.

use std::{
    collections::BTreeMap,
    sync::Arc,
    time::{Duration, Instant},
};

use presa_tasks::{Event, Scope, Status, Task, TaskId, apply, wire::GetView};
use serde_json::json;

use super::{
    LONG_LEASE, NO_LIMITS, PAST_SHORT_LEASE, PATIENCE, SHORT_LEASE, assert_nothing_to_claim, claim_one, commit, create,
    load, new_task, next, result, scope,
};
use crate::{claim::Cas, claim::Writer, queue::WorkQueue, records::TaskStore, util::now_ms};

/// A created task resolves at once: `working`, revision 1, attempt 0.
pub async fn create_then_get_resolves_immediately(store: Arc<dyn TaskStore>) {
    let owner = scope("alice");
    let new = new_task(&owner, Some(60_000));
    let created = store.create(new.clone(), NO_LIMITS).await.expect("create");
    assert_eq!(created.status, Status::Working);
    assert_eq!((created.revision, created.attempt), (1, 0));
    assert_eq!(created.scope, owner);
    assert_eq!(created.work, new.work);
    assert_eq!(created.ttl_ms, Some(60_000));
    assert_eq!(created.poll_interval_ms, Some(100));
    assert!(created.id.partition().is_some(), "{}", created.id);
    let got = store.get(&owner, &created.id).await.expect("get");
    assert_eq!(got.as_ref(), Some(&created));
    assert_eq!(load(&store, &created.id).await, created);
    let other = create(&store, &owner).await;
    assert_ne!(other.id, created.id, "ids are unique");
}

/// Another scope's task reads as unknown; a worker's `load` ignores scope.
pub async fn get_is_scoped_and_load_is_not(store: Arc<dyn TaskStore>) {
    let owner = scope("alice");
    let task = create(&store, &owner).await;
    let intruders = [scope("mallory"), Scope { tenant: "elsewhere".into(), subject: "alice".into(), endpoint: None }];
    for intruder in &intruders {
        let got = store.get(intruder, &task.id).await.expect("get");
        assert_eq!(got, None, "{intruder:?} must not see the task");
    }
    assert!(store.get(&owner, &task.id).await.expect("get").is_some());
    assert_eq!(load(&store, &task.id).await, task);
}

/// A task made on a virtual server's endpoint belongs to that endpoint: the
/// same principal reads it as unknown on another endpoint and on the root
/// one (`get` and `get_view` alike); its active-task count is the
/// principal's, whatever endpoint (one active task allowed: a second create on
/// another endpoint is refused).
pub async fn a_tasks_endpoint_is_part_of_its_owner(store: Arc<dyn TaskStore>) {
    let on = |e: &str| scope("alice").on_endpoint(Some(e.to_string()));
    let task = create(&store, &on("a")).await;
    assert_eq!(task.scope.endpoint.as_deref(), Some("a"));
    for other in [on("b"), scope("alice")] {
        assert_eq!(store.get(&other, &task.id).await.expect("get"), None, "{other:?} must not see the task");
        assert_eq!(store.get_view(&other, &task.id).await.expect("get_view"), None, "{other:?}");
    }
    assert_eq!(store.get(&on("a"), &task.id).await.expect("get").as_ref(), Some(&task));
    assert!(store.get_view(&on("a"), &task.id).await.expect("get_view").is_some());
    let root = create(&store, &scope("alice")).await;
    assert_eq!(store.get(&on("a"), &root.id).await.expect("get"), None, "a root task is unknown on an endpoint");

    let one = crate::CreateLimits { max_active_per_scope: Some(1), ..NO_LIMITS };
    let single = |e: &str| scope("carol").on_endpoint(Some(e.to_string()));
    store.create(new_task(&single("a"), Some(60_000)), one).await.expect("carol's first task");
    let refused = store.create(new_task(&single("b"), Some(60_000)), one).await;
    assert!(
        matches!(refused, Err(crate::StoreError::Capacity { limit: crate::Limit::MaxActiveTasksPerScope })),
        "the principal's limit spans endpoints: {refused:?}"
    );
}

/// `get_view` of the stored task is exactly [`GetView::of`] the task the
/// reducer produced (and `get` returns), whatever the last write was.
async fn assert_view_is<S: TaskStore + ?Sized>(store: &Arc<S>, owner: &Scope, expected: &Task) {
    let view = store.get_view(owner, &expected.id).await.expect("get_view");
    assert_eq!(
        view,
        Some(GetView::of(expected)),
        "after reaching {:?} at revision {}",
        expected.status,
        expected.revision
    );
    let full = store.get(owner, &expected.id).await.expect("get");
    assert_eq!(full.as_ref(), Some(expected));
}

/// `get_view` answers what a full decode would after creation, a claim, a
/// message, an input request and its answer, and each terminal status; it
/// is scoped like `get` and misses unknown ids.
pub async fn get_view_is_the_reducers_view_after_every_transition(store: Arc<dyn WorkQueue>) {
    let owner = scope("alice");
    let created = create(&store, &owner).await;
    assert_view_is(&store, &owner, &created).await;
    let claimed = claim_one(&store, "w1", LONG_LEASE).await;
    assert_eq!(claimed.task.id, created.id);
    assert_view_is(&store, &owner, &claimed.task).await;
    let worker = claimed.writer();
    let said = commit(&store, &claimed.task, Event::SetMessage("halfway \"there\" \u{e9}".into()), worker).await;
    assert_view_is(&store, &owner, &said).await;
    let request = json!({"method": "elicitation/create", "params": {"message": "Proceed?"}});
    let asked =
        commit(&store, &said, Event::RequestInput(BTreeMap::from([("confirm".to_string(), request)])), worker).await;
    assert_eq!(asked.status, Status::InputRequired);
    assert_view_is(&store, &owner, &asked).await;
    let answer = BTreeMap::from([("confirm".to_string(), json!({"action": "accept", "content": {}}))]);
    let answered = commit(&store, &asked, Event::ProvideInput(answer), Writer::Client).await;
    assert_view_is(&store, &owner, &answered).await;
    // A result whose `_meta` carries the v1 related-task key, which the projection drops.
    let related = json!({"content": [], "_meta": {"io.modelcontextprotocol/related-task": {"taskId": "x"}, "k": 1}});
    let done = commit(&store, &answered, Event::Complete(related), worker).await;
    assert_eq!(done.status, Status::Completed);
    assert_view_is(&store, &owner, &done).await;

    let failing = store.create(new_task(&owner, None), NO_LIMITS).await.expect("create");
    assert_view_is(&store, &owner, &failing).await;
    let failed =
        commit(&store, &failing, Event::Fail(json!({"code": -32000, "message": "nope"})), Writer::Client).await;
    assert_view_is(&store, &owner, &failed).await;
    let cancelling = create(&store, &owner).await;
    let cancelled = commit(&store, &cancelling, Event::Cancel, Writer::Client).await;
    assert_eq!(cancelled.status, Status::Cancelled);
    assert_view_is(&store, &owner, &cancelled).await;

    for id in [&done.id, &failed.id, &cancelled.id] {
        assert_eq!(store.get_view(&scope("mallory"), id).await.expect("get_view"), None, "scoped like get");
    }
    let unknown = TaskId::from_random(0, [0x5a; 16]);
    assert_eq!(store.get_view(&owner, &unknown).await.expect("get_view"), None);
    assert_eq!(store.get_view(&owner, &TaskId::from_wire("not-a-task-id")).await.expect("get_view"), None);
}

/// Unknown ids read as `None`, and a transition on one is refused with no current task.
pub async fn unknown_id_is_none(store: Arc<dyn TaskStore>) {
    let owner = scope("alice");
    let phantom_id = TaskId::from_random(0, [0x5a; 16]);
    for id in [phantom_id.clone(), TaskId::from_wire("tasks-conformance-nonexistent-12345")] {
        assert_eq!(store.get(&owner, &id).await.expect("get"), None);
        assert_eq!(store.load(&id).await.expect("load"), None);
    }
    let phantom = Task::new(phantom_id, new_task(&owner, Some(60_000)), now_ms());
    let write = next(&phantom, Event::SetMessage("hello?".into()));
    for writer in [Writer::Client, Writer::Worker { attempt: 0 }] {
        let cas = store.transition(&write, writer).await.expect("transition");
        assert_eq!(cas, Cas::Conflict(None));
    }
    assert_eq!(store.load(&write.id).await.expect("load"), None, "nothing was created");
}

/// A task is gone once its TTL passed: `get`, `load`, `transition` and `claim` all miss it.
pub async fn ttl_expiry_hides_the_task(store: Arc<dyn WorkQueue>) {
    let owner = scope("alice");
    let started = Instant::now();
    let task = store.create(new_task(&owner, Some(150)), NO_LIMITS).await.expect("create");
    let got = store.get(&owner, &task.id).await.expect("get");
    // Only meaningful while we are surely inside the 150 ms lifetime.
    if started.elapsed() < Duration::from_millis(100) {
        assert_eq!(got, Some(task.clone()), "visible before it expires");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let deadline = Instant::now() + PATIENCE;
    loop {
        let got = store.get(&owner, &task.id).await.expect("get");
        let loaded = store.load(&task.id).await.expect("load");
        let view = store.get_view(&owner, &task.id).await.expect("get_view");
        if got.is_none() && loaded.is_none() && view.is_none() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "task still visible long after its ttl: get={got:?} load={loaded:?} view={view:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let late = next(&task, Event::Complete(result()));
    let cas = store.transition(&late, Writer::Client).await.expect("transition");
    assert_eq!(cas, Cas::Conflict(None), "an expired task cannot be written");
    assert_nothing_to_claim(&store, "w1").await;
}

/// `ttl_ms: None` never expires.
pub async fn no_ttl_never_expires(store: Arc<dyn TaskStore>) {
    let owner = scope("alice");
    let task = store.create(new_task(&owner, None), NO_LIMITS).await.expect("create");
    assert_eq!(task.ttl_ms, None);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(store.get(&owner, &task.id).await.expect("get"), Some(task.clone()));
    assert_eq!(load(&store, &task.id).await, task);
}

/// A CAS applies over revision `n - 1` and is refused with a stale revision.
pub async fn cas_applies_at_the_right_revision_only(store: Arc<dyn TaskStore>) {
    let owner = scope("alice");
    let created = create(&store, &owner).await;
    let updated = commit(&store, &created, Event::SetMessage("step 1".into()), Writer::Client).await;
    assert_eq!(updated.revision, 2);
    assert_eq!(updated.status_message.as_deref(), Some("step 1"));
    assert_eq!(load(&store, &created.id).await, updated);

    // Computed from the old snapshot: revision 2 again, which is taken.
    let stale = next(&created, Event::Cancel);
    let cas = store.transition(&stale, Writer::Client).await.expect("transition");
    assert_eq!(cas, Cas::Conflict(Some(updated.clone())));
    // A revision from the future is refused too.
    let mut ahead = next(&updated, Event::SetMessage("step 2".into()));
    ahead.revision += 1;
    let cas = store.transition(&ahead, Writer::Client).await.expect("transition");
    assert_eq!(cas, Cas::Conflict(Some(updated.clone())));
    assert_eq!(load(&store, &created.id).await, updated, "conflicts write nothing");
}

/// Once terminal, a task never changes again, whatever revision a write carries.
pub async fn terminal_is_immutable(store: Arc<dyn WorkQueue>) {
    let owner = scope("alice");
    create(&store, &owner).await;
    let claimed = claim_one(&store, "w1", LONG_LEASE).await;
    let before = claimed.task.clone();
    let done = commit(&store, &before, Event::Complete(result()), claimed.writer()).await;
    assert_eq!(done.status, Status::Completed);

    let stale = next(&before, Event::Cancel);
    let cas = store.transition(&stale, Writer::Client).await.expect("transition");
    assert_eq!(cas, Cas::Conflict(Some(done.clone())));
    // Even at the next revision, a terminal task refuses writes.
    let mut forged = next(&before, Event::Cancel);
    forged.revision = done.revision + 1;
    for writer in [Writer::Client, claimed.writer()] {
        let cas = store.transition(&forged, writer).await.expect("transition");
        assert_eq!(cas, Cas::Conflict(Some(done.clone())));
    }
    assert_eq!(apply(&done, &Event::Cancel, now_ms()), Ok(None));
    assert_eq!(load(&store, &done.id).await, done);
}

/// Concurrent client cancels and worker completions: exactly one terminal
/// outcome persists; every other writer ends in a no-op.
pub async fn cancel_racing_completion_has_one_winner(store: Arc<dyn WorkQueue>) {
    const RACERS: usize = 8;
    const MAX_TRIES: usize = 1_000;
    let owner = scope("alice");
    create(&store, &owner).await;
    let claimed = claim_one(&store, "w1", LONG_LEASE).await;
    let id = claimed.task.id.clone();
    let barrier = Arc::new(tokio::sync::Barrier::new(2 * RACERS));
    let mut racers = Vec::new();
    for i in 0..2 * RACERS {
        let (event, writer) =
            if i % 2 == 0 { (Event::Cancel, Writer::Client) } else { (Event::Complete(result()), claimed.writer()) };
        let (store, barrier, id) = (store.clone(), barrier.clone(), id.clone());
        racers.push(tokio::spawn(async move {
            barrier.wait().await;
            let mut conflicts = 0;
            for _ in 0..MAX_TRIES {
                let current = load(&store, &id).await;
                let Some(next) = apply(&current, &event, now_ms()).expect("valid event") else {
                    return (None, conflicts);
                };
                match store.transition(&next, writer).await.expect("transition") {
                    Cas::Applied(stored) => return (Some(stored), conflicts),
                    Cas::Conflict(_) => conflicts += 1,
                }
            }
            panic!("no outcome after {MAX_TRIES} tries");
        }));
    }
    let mut winners = Vec::new();
    for racer in racers {
        let (won, _conflicts) = racer.await.expect("racer");
        winners.extend(won);
    }
    assert_eq!(winners.len(), 1, "exactly one writer wins: {winners:?}");
    let winner = winners.remove(0);
    assert!(winner.status.is_terminal());
    assert_eq!(winner.revision, claimed.task.revision + 1);
    assert_eq!(load(&store, &id).await, winner, "the winner's outcome persists");
}

/// The worker parks on input, the client answers, the worker sees the answer and finishes.
pub async fn input_round_trip(store: Arc<dyn WorkQueue>) {
    let owner = scope("alice");
    create(&store, &owner).await;
    let claimed = claim_one(&store, "w1", LONG_LEASE).await;
    let id = claimed.task.id.clone();
    let request = json!({"method": "elicitation/create", "params": {"message": "Proceed?"}});
    let parked = commit(
        &store,
        &claimed.task,
        Event::RequestInput(BTreeMap::from([("confirm".to_string(), request.clone())])),
        claimed.writer(),
    )
    .await;
    assert_eq!(parked.status, Status::InputRequired);
    assert_eq!(parked.input_requests.get("confirm"), Some(&request));

    let seen = store.get(&owner, &id).await.expect("get").expect("the owner sees the task");
    assert_eq!(seen, parked);
    let answer = json!({"action": "accept", "content": {"ok": true}});
    let resumed = commit(
        &store,
        &seen,
        Event::ProvideInput(BTreeMap::from([("confirm".to_string(), answer.clone())])),
        Writer::Client,
    )
    .await;
    assert_eq!(resumed.status, Status::Working);

    let reloaded = load(&store, &id).await;
    assert_eq!(reloaded, resumed);
    assert!(reloaded.input_requests.is_empty());
    assert_eq!(reloaded.input_responses.get("confirm"), Some(&answer));
    assert_eq!(reloaded.attempt, claimed.task.attempt, "the client does not move the fence");
    let done = commit(&store, &reloaded, Event::Complete(result()), claimed.writer()).await;
    assert_eq!(done.status, Status::Completed);
}

/// A worker's failure is terminal like completion: `failed` with its
/// JSON-RPC error (its message as the status message), no result, no
/// outstanding input; later writes are refused and the work is not redelivered.
pub async fn failed_is_terminal_and_keeps_its_error(store: Arc<dyn WorkQueue>) {
    let owner = scope("alice");
    let task = create(&store, &owner).await;
    let claimed = claim_one(&store, "w1", SHORT_LEASE).await;
    assert_eq!(claimed.task.id, task.id);
    let parked = commit(
        &store,
        &claimed.task,
        Event::RequestInput(BTreeMap::from([("q".to_string(), json!({"method": "elicitation/create"}))])),
        claimed.writer(),
    )
    .await;
    let error = json!({"code": -32603, "message": "Internal error"});
    let failed = commit(&store, &parked, Event::Fail(error.clone()), claimed.writer()).await;
    let got = store.get(&owner, &task.id).await.expect("get").expect("the failed task is readable");
    assert_eq!(got, failed);
    assert_eq!(got.status, Status::Failed);
    assert_eq!(got.error, Some(error));
    assert_eq!(got.result, None);
    assert_eq!(got.status_message.as_deref(), Some("Internal error"));
    assert!(got.input_requests.is_empty(), "a terminal task asks nothing");
    // Terminal: the reducer changes nothing, and a forged later write is refused.
    for event in [Event::Complete(result()), Event::Cancel, Event::SetMessage("late".into())] {
        assert_eq!(apply(&got, &event, now_ms()).expect("valid"), None, "{event:?}");
    }
    let mut forged = got.clone();
    forged.revision += 1;
    forged.status = Status::Completed;
    forged.error = None;
    forged.result = Some(result());
    for writer in [Writer::Client, claimed.writer()] {
        assert!(matches!(store.transition(&forged, writer).await.expect("transition"), Cas::Conflict(_)));
    }
    assert_eq!(load(&store, &task.id).await, failed, "the failure stands");
    // Its lapsed work is dropped, never handed to another worker.
    tokio::time::sleep(PAST_SHORT_LEASE).await;
    assert_nothing_to_claim(&store, "w2").await;
}
