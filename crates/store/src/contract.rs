//! The behavioural contract every [`TaskStore`] passes, written once against
//! the trait and run against each backend with [`store_contract_tests!`](crate::store_contract_tests).
//!
//! Each case is a `pub async fn(Arc<dyn TaskStore>)` (or, for the event
//! bus, `pub async fn(Arc<dyn EventBus>)`) that panics on a violation. New states always come from the reducer ([`apply`]), never
//! from hand-edited status fields. Timings are generous: the suite must
//! pass on a loaded two-core machine, so it asserts orderings and upper
//! bounds, never tight durations.
//!
//! ```no_run
//! mod contract {
//!     use std::sync::Arc;
//!     use presa_store::{TaskStore, memory::MemoryStore};
//!     use presa_store::Backend;
//!     presa_store::store_contract_tests!(
//!         || async { Backend::new(Arc::new(MemoryStore::new())) },
//!         |ttl| async move { Backend::new(Arc::new(MemoryStore::new().with_dead_letter_ttl(ttl))) }
//!     );
//! }
//! ```
//!
//! The calling crate needs `tokio` (with `macros` and `rt-multi-thread`).
//!
//! The admin cases live in [`admin`] (they take the whole backend). The
//! dead-letter cases live in [`dead`]; one of them needs a store made
//! with a short dead-letter retention, hence the macro's second factory.

use std::{
    collections::{BTreeMap, HashSet},
    sync::Arc,
    time::{Duration, Instant},
};

use futures::StreamExt;
use presa_tasks::{Caller, Event, NewTask, Scope, Status, Task, TaskId, Work, apply, wire::GetView};
use serde_json::{Value, json};

mod admin;
mod dead;
pub use admin::*;
pub use dead::*;

use crate::{
    Cas, Claim, CreateLimits, Created, EventBus, Idempotency, PartitionStats, SessionLimits, Shares, StoreError,
    TaskStore, TaskStream, Writer, util::now_ms,
};

/// Expands to one `#[tokio::test]` per contract case.
///
/// `$make` is called once per test, as a zero-argument function returning a
/// future of [`Backend`](crate::Backend); every call must give an isolated
/// backend (for Redis: a fresh key prefix). `$make_with_dead_letter_ttl`
/// likewise, given a [`Duration`], for a backend that keeps dead letters
/// that long ([`dead::SHORT_DEAD_LETTER_TTL`]). The calling crate needs `tokio`.
#[macro_export]
macro_rules! store_contract_tests {
    ($make:expr, $make_with_dead_letter_ttl:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn dead_letters_expire_after_their_retention() {
            let backend: $crate::Backend = ($make_with_dead_letter_ttl)($crate::contract::SHORT_DEAD_LETTER_TTL).await;
            $crate::contract::dead_letters_expire_after_their_retention(backend.store).await
        }
        $crate::store_contract_tests!(@cases $make, store;
            a_poison_conclusion_records_one_dead_letter,
            dead_letters_are_listed_per_tenant_and_paged_stably,
            a_dead_letter_replays_once,
            a_discarded_dead_letter_is_gone,
            create_then_get_resolves_immediately,
            get_is_scoped_and_load_is_not,
            get_view_is_the_reducers_view_after_every_transition,
            unknown_id_is_none,
            ttl_expiry_hides_the_task,
            no_ttl_never_expires,
            cas_applies_at_the_right_revision_only,
            terminal_is_immutable,
            cancel_racing_completion_has_one_winner,
            claim_returns_created_work_then_waits,
            lapsed_lease_is_recovered_and_fenced,
            a_checkpoint_reaches_the_next_claim,
            renew_on_a_lost_claim_is_false,
            release_makes_work_claimable_at_once,
            a_scope_without_room_is_skipped_not_waited_behind,
            claim_drops_work_of_cancelled_tasks,
            remove_work_removes_the_work,
            conclude_removes_the_work_of_the_write_that_ends_the_task,
            watch_delivers_committed_snapshots_of_watched_ids,
            capacity_limit_per_scope,
            admission_counts_are_exact,
            max_queued_refuses_retryably_and_stores_nothing,
            byte_quota_per_scope,
            a_tasks_growth_counts_against_its_scopes_byte_quota,
            an_idempotency_key_makes_one_task,
            concurrent_creates_under_one_key_make_one_task,
            a_refused_create_keeps_nothing_of_other_limits,
            input_round_trip,
            work_stats_count_queued_and_pending_work,
            failed_is_terminal_and_keeps_its_error,
            session_state_is_shared_per_session_and_expires,
            session_state_is_counted_and_capped,
            sessions_holding_state_are_capped_per_scope_and_in_all,
        );
        $crate::store_contract_tests!(@whole $make;
            task_listings_are_newest_first_filtered_and_tenant_scoped,
            task_listing_pages_are_stable_under_concurrent_creates,
            expired_tasks_leave_listings,
            heartbeats_list_live_nodes_and_drains_reach_them,
        );
        $crate::store_contract_tests!(@cases $make, bus;
            bus_events_reach_every_subscriber,
            bus_subscribers_see_only_later_events,
            bus_events_are_bounded_in_size,
            a_lagging_bus_subscriber_is_ended,
            topic_messages_reach_only_their_topic,
        );
    };
    (@whole $make:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let backend: $crate::Backend = ($make)().await;
                $crate::contract::$case(backend).await
            }
        )*
    };
    (@cases $make:expr, $half:ident; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let backend: $crate::Backend = ($make)().await;
                $crate::contract::$case(backend.$half).await
            }
        )*
    };
}

/// No limits on create.
const NO_LIMITS: CreateLimits =
    CreateLimits { max_active_per_scope: None, max_bytes_per_scope: None, max_queued_per_partition: None };
/// A lease that never lapses during a test.
const LONG_LEASE: Duration = Duration::from_secs(30);
/// A lease that lapses quickly; tests sleep [`PAST_SHORT_LEASE`] after it.
const SHORT_LEASE: Duration = Duration::from_millis(200);
/// Sleep that outlasts [`SHORT_LEASE`].
const PAST_SHORT_LEASE: Duration = Duration::from_millis(300);
/// How long a claim may wait when the test expects nothing to claim.
const EMPTY_WAIT: Duration = Duration::from_millis(300);
/// Upper bound for anything expected "at once" (generous for loaded CI).
const PATIENCE: Duration = Duration::from_secs(5);

fn scope(subject: &str) -> Scope {
    Scope { tenant: "contract".into(), subject: subject.into() }
}

fn new_task(scope: &Scope, ttl_ms: Option<u64>) -> NewTask {
    NewTask {
        scope: scope.clone(),
        work: Work {
            tool: "echo".into(),
            arguments: json!({"text": "hello"}),
            client_capabilities: json!({"elicitation": {}}).as_object().cloned().unwrap_or_default(),
            input_responses: None,
            trace: BTreeMap::from([(
                "traceparent".to_string(),
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".to_string(),
            )]),
            caller: Some(Caller { scope: scope.clone(), scopes: Some(vec!["deploy".into()]) }),
            replay_of: None,
            worker: None,
        },
        ttl_ms,
        poll_interval_ms: Some(100),
        status_message: None,
    }
}

async fn create(store: &Arc<dyn TaskStore>, scope: &Scope) -> Task {
    store.create(new_task(scope, Some(60_000)), NO_LIMITS).await.expect("create")
}

fn result() -> Value {
    json!({"content": [{"type": "text", "text": "done"}], "isError": false})
}

/// The reducer's next state; the event must change the task.
fn next(task: &Task, event: Event) -> Task {
    apply(task, &event, now_ms()).expect("a valid event").expect("an event that changes the task")
}

/// Apply `event` and commit it; the CAS must succeed.
async fn commit(store: &Arc<dyn TaskStore>, task: &Task, event: Event, writer: Writer) -> Task {
    let next = next(task, event);
    match store.transition(&next, writer).await.expect("transition") {
        Cas::Applied(stored) => {
            assert_eq!(stored, next, "the stored task is what was written");
            stored
        }
        Cas::Conflict(current) => panic!("expected the CAS to apply, got a conflict: {current:?}"),
    }
}

async fn load(store: &Arc<dyn TaskStore>, id: &TaskId) -> Task {
    store.load(id).await.expect("load").expect("task exists")
}

async fn claim(store: &Arc<dyn TaskStore>, worker: &str, lease: Duration, wait: Duration) -> Vec<Claim> {
    store.claim(worker, 10, lease, wait).await.expect("claim")
}

/// Claim every work item there is (as `w1`, without waiting); the tasks'
/// ids. A task claimed twice fails the test.
async fn claim_all(store: &Arc<dyn TaskStore>) -> HashSet<TaskId> {
    let mut claimed = HashSet::new();
    loop {
        let claims = claim(store, "w1", LONG_LEASE, EMPTY_WAIT).await;
        if claims.is_empty() {
            return claimed;
        }
        for c in claims {
            assert!(claimed.insert(c.task.id.clone()), "claimed twice: {c:?}");
        }
    }
}

/// Exactly one claim, waiting up to [`PATIENCE`].
async fn claim_one(store: &Arc<dyn TaskStore>, worker: &str, lease: Duration) -> Claim {
    let mut claims = store.claim(worker, 1, lease, PATIENCE).await.expect("claim");
    assert_eq!(claims.len(), 1, "expected one claim, got {claims:?}");
    claims.remove(0)
}

async fn assert_nothing_to_claim(store: &Arc<dyn TaskStore>, worker: &str) {
    let claims = claim(store, worker, LONG_LEASE, EMPTY_WAIT).await;
    assert!(claims.is_empty(), "expected no work, got {claims:?}");
}

async fn next_snapshot(stream: &mut TaskStream, within: Duration) -> Option<Task> {
    tokio::time::timeout(within, stream.next()).await.ok().flatten()
}

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
    let intruders = [scope("mallory"), Scope { tenant: "elsewhere".into(), subject: "alice".into() }];
    for intruder in &intruders {
        let got = store.get(intruder, &task.id).await.expect("get");
        assert_eq!(got, None, "{intruder:?} must not see the task");
    }
    assert!(store.get(&owner, &task.id).await.expect("get").is_some());
    assert_eq!(load(&store, &task.id).await, task);
}

/// `get_view` of the stored task is exactly [`GetView::of`] the task the
/// reducer produced (and `get` returns), whatever the last write was.
async fn assert_view_is(store: &Arc<dyn TaskStore>, owner: &Scope, expected: &Task) {
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
pub async fn get_view_is_the_reducers_view_after_every_transition(store: Arc<dyn TaskStore>) {
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
pub async fn ttl_expiry_hides_the_task(store: Arc<dyn TaskStore>) {
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
pub async fn terminal_is_immutable(store: Arc<dyn TaskStore>) {
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
pub async fn cancel_racing_completion_has_one_winner(store: Arc<dyn TaskStore>) {
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

/// A claim returns created work (attempt 1, delivery 1) and bumps the
/// revision, so writes computed before it are refused; with nothing left a
/// claim blocks for about `wait` and returns empty.
pub async fn claim_returns_created_work_then_waits(store: Arc<dyn TaskStore>) {
    let owner = scope("alice");
    let task = create(&store, &owner).await;
    let claimed = claim_one(&store, "w1", LONG_LEASE).await;
    assert_eq!(claimed.task.id, task.id);
    assert_eq!(claimed.task.attempt, 1);
    assert_eq!(claimed.task.revision, task.revision + 1, "a claim bumps the revision");
    assert_eq!(claimed.deliveries, 1);
    assert_eq!(
        claimed.task.work,
        Work { worker: Some("w1".into()), ..task.work.clone() },
        "the claim names its worker"
    );
    assert_eq!(claimed.writer(), Writer::Worker { attempt: 1 });
    assert_eq!(load(&store, &task.id).await, claimed.task);
    // Because the claim moved the revision, a client write computed before
    // it cannot put the old attempt back.
    let stale = next(&task, Event::SetMessage("before the claim".into()));
    let cas = store.transition(&stale, Writer::Client).await.expect("transition");
    assert_eq!(cas, Cas::Conflict(Some(claimed.task.clone())));

    let started = Instant::now();
    let more = claim(&store, "w2", LONG_LEASE, EMPTY_WAIT).await;
    let waited = started.elapsed();
    assert!(more.is_empty(), "leased work is not claimed again: {more:?}");
    assert!(waited >= EMPTY_WAIT / 2, "claim must block, not spin: {waited:?}");
    assert!(waited < EMPTY_WAIT + PATIENCE, "claim overran its wait: {waited:?}");
}

/// A lapsed lease is recovered by another worker (attempt 2, delivery 2), and
/// the first worker's fence is then refused while the new one writes.
pub async fn lapsed_lease_is_recovered_and_fenced(store: Arc<dyn TaskStore>) {
    let owner = scope("alice");
    let task = create(&store, &owner).await;
    let first = claim_one(&store, "w1", SHORT_LEASE).await;
    assert_eq!((first.task.attempt, first.deliveries), (1, 1));
    tokio::time::sleep(PAST_SHORT_LEASE).await;
    let second = claim_one(&store, "w2", LONG_LEASE).await;
    assert_eq!(second.task.id, task.id);
    assert_eq!((second.task.attempt, second.deliveries), (2, 2));

    let current = load(&store, &task.id).await;
    assert_eq!(current.attempt, 2);
    let write = next(&current, Event::SetMessage("late".into()));
    let cas = store.transition(&write, first.writer()).await.expect("transition");
    assert_eq!(cas, Cas::Conflict(Some(current.clone())), "the old attempt is fenced off");
    let cas = store.transition(&write, second.writer()).await.expect("transition");
    assert_eq!(cas, Cas::Applied(write));
}

/// A worker's checkpoint is stored with the task and comes back with the
/// claim of the worker that takes the task over; a fenced-off worker's does not land.
pub async fn a_checkpoint_reaches_the_next_claim(store: Arc<dyn TaskStore>) {
    let owner = scope("alice");
    let task = create(&store, &owner).await;
    let first = claim_one(&store, "w1", SHORT_LEASE).await;
    assert_eq!(first.task.checkpoint, None);
    let saved = json!({ "upstreamTask": "t-42", "done": ["a", "b"] });
    commit(&store, &first.task, Event::Checkpoint(saved.clone()), first.writer()).await;
    tokio::time::sleep(PAST_SHORT_LEASE).await;
    let second = claim_one(&store, "w2", LONG_LEASE).await;
    assert_eq!(second.task.id, task.id);
    assert_eq!(second.task.checkpoint.as_ref(), Some(&saved));
    let current = load(&store, &task.id).await;
    let late = next(&current, Event::Checkpoint(json!({ "upstreamTask": "t-stale" })));
    let cas = store.transition(&late, first.writer()).await.expect("transition");
    assert!(matches!(cas, Cas::Conflict(_)), "the lost worker's checkpoint is refused: {cas:?}");
    assert_eq!(load(&store, &task.id).await.checkpoint.as_ref(), Some(&saved));
    // What the client sees never carries it.
    let view = store.get(&owner, &task.id).await.expect("get").expect("visible");
    let wire = Value::Object(presa_tasks::wire::get_result(&view)).to_string();
    assert!(!wire.contains("t-42") && !wire.contains("checkpoint"), "{wire}");
}

/// `renew` holds a live claim and reports a lost one.
pub async fn renew_on_a_lost_claim_is_false(store: Arc<dyn TaskStore>) {
    let owner = scope("alice");
    create(&store, &owner).await;
    let first = claim_one(&store, "w1", SHORT_LEASE).await;
    assert!(store.renew(&first, SHORT_LEASE).await.expect("renew"));
    tokio::time::sleep(PAST_SHORT_LEASE).await;
    let second = claim_one(&store, "w2", LONG_LEASE).await;
    assert!(!store.renew(&first, LONG_LEASE).await.expect("renew"), "lost to w2");
    assert!(store.renew(&second, LONG_LEASE).await.expect("renew"));
}

/// Released work is claimable by another worker at once, without waiting out the lease.
pub async fn release_makes_work_claimable_at_once(store: Arc<dyn TaskStore>) {
    let owner = scope("alice");
    let task = create(&store, &owner).await;
    let first = claim_one(&store, "w1", LONG_LEASE).await;
    store.release(&first).await.expect("release");
    // LONG_LEASE exceeds PATIENCE: only a real release makes this succeed.
    let second = claim_one(&store, "w2", LONG_LEASE).await;
    assert_eq!(second.task.id, task.id);
    assert_eq!(second.task.attempt, 2, "every claim bumps the attempt");
    assert!(!store.renew(&first, LONG_LEASE).await.expect("renew"));
}

/// Fair shares: the work of a scope without room stays queued (unclaimed,
/// its attempt untouched) while the work queued behind it is claimed, and a
/// claim with room for the scope takes it later, as a first delivery.
pub async fn a_scope_without_room_is_skipped_not_waited_behind(store: Arc<dyn TaskStore>) {
    let (alice, bob) = (scope("alice"), scope("bob"));
    for _ in 0..5 {
        create(&store, &alice).await;
    }
    let bobs = create(&store, &bob).await;
    let first = store.claim_fair("w1", 10, LONG_LEASE, PATIENCE, &Shares::capped(2)).await.expect("claim");
    let of = |claims: &[Claim], who: &Scope| claims.iter().filter(|c| &c.task.scope == who).count();
    assert_eq!(of(&first, &alice), 2, "alice gets her share: {first:?}");
    assert_eq!(of(&first, &bob), 1, "bob's task behind alice's backlog is claimed at once");
    assert!(first.iter().any(|c| c.task.id == bobs.id));
    let stats = store.work_stats().await.expect("stats");
    if !stats.is_empty() {
        let sum = |f: fn(&PartitionStats) -> u64| stats.iter().map(f).sum::<u64>();
        assert_eq!((sum(|p| p.queued), sum(|p| p.pending)), (3, 3), "skipped work counts as queued: {stats:?}");
    }
    // While alice is at her share, nothing of hers is claimed.
    let full = Shares::capped(2).with_held(alice.clone(), 2);
    let none = store.claim_fair("w2", 10, LONG_LEASE, EMPTY_WAIT, &full).await.expect("claim");
    assert!(none.is_empty(), "alice has no room: {none:?}");
    // With room (another worker), the rest is claimed, each a first delivery.
    let mut rest = HashSet::new();
    let until = Instant::now() + PATIENCE;
    while rest.len() < 3 && Instant::now() < until {
        for c in store.claim_fair("w2", 10, LONG_LEASE, EMPTY_WAIT, &Shares::capped(2)).await.expect("claim") {
            assert_eq!(c.task.scope, alice);
            assert_eq!((c.task.attempt, c.deliveries), (1, 1), "skipped work was never claimed: {c:?}");
            assert!(rest.insert(c.task.id.clone()), "claimed twice: {c:?}");
        }
    }
    assert_eq!(rest.len(), 3, "alice's remaining work was claimed");
    assert_nothing_to_claim(&store, "w3").await;
}

/// Work of a cancelled task is dropped, whether queued or recovered from a lapsed lease.
pub async fn claim_drops_work_of_cancelled_tasks(store: Arc<dyn TaskStore>) {
    let owner = scope("alice");
    let queued = create(&store, &owner).await;
    commit(&store, &queued, Event::Cancel, Writer::Client).await;
    assert_nothing_to_claim(&store, "w1").await;

    let running = create(&store, &owner).await;
    let claimed = claim_one(&store, "w1", SHORT_LEASE).await;
    assert_eq!(claimed.task.id, running.id);
    commit(&store, &claimed.task, Event::Cancel, Writer::Client).await;
    tokio::time::sleep(PAST_SHORT_LEASE).await;
    assert_nothing_to_claim(&store, "w2").await;
}

/// `finish` removes the work: nothing to claim even after the lease would lapse.
pub async fn remove_work_removes_the_work(store: Arc<dyn TaskStore>) {
    let owner = scope("alice");
    create(&store, &owner).await;
    let done = claim_one(&store, "w1", SHORT_LEASE).await;
    commit(&store, &done.task, Event::Complete(result()), done.writer()).await;
    store.remove_work(&done).await.expect("remove_work");
    // A task that is not terminal, so only `finish` keeps it from re-delivery.
    let task = create(&store, &owner).await;
    let abandoned = claim_one(&store, "w1", SHORT_LEASE).await;
    assert_eq!(abandoned.task.id, task.id);
    store.remove_work(&abandoned).await.expect("remove_work");
    tokio::time::sleep(PAST_SHORT_LEASE).await;
    assert_nothing_to_claim(&store, "w2").await;
    assert_eq!(load(&store, &task.id).await.status, Status::Working);
}

/// `conclude`: a worker's write that ends its task also removes the work; a
/// write that does not end it leaves the work held, and a stale holder's
/// write is refused and removes nothing.
pub async fn conclude_removes_the_work_of_the_write_that_ends_the_task(store: Arc<dyn TaskStore>) {
    let totals = |stats: Vec<PartitionStats>| {
        (stats.iter().map(|p| p.queued).sum::<u64>(), stats.iter().map(|p| p.pending).sum::<u64>())
    };
    let owner = scope("alice");
    create(&store, &owner).await;
    let held = claim_one(&store, "w1", SHORT_LEASE).await;
    let said = next(&held.task, Event::SetMessage("half way".into()));
    assert_eq!(store.conclude(&said, &held).await.expect("conclude"), Cas::Applied(said.clone()));
    assert_eq!(totals(store.work_stats().await.expect("work_stats")), (0, 1), "not ended: still held");
    let done = next(&said, Event::Complete(result()));
    assert_eq!(store.conclude(&done, &held).await.expect("conclude"), Cas::Applied(done.clone()));
    assert_eq!(load(&store, &done.id).await, done);
    assert_eq!(totals(store.work_stats().await.expect("work_stats")), (0, 0), "ended: the work is gone");
    tokio::time::sleep(PAST_SHORT_LEASE).await;
    assert_nothing_to_claim(&store, "w2").await;

    // A holder whose lease lapsed and was taken over.
    let task = create(&store, &owner).await;
    let stale = claim_one(&store, "w1", SHORT_LEASE).await;
    tokio::time::sleep(PAST_SHORT_LEASE).await;
    let current = claim_one(&store, "w2", LONG_LEASE).await;
    assert_eq!((current.task.id.clone(), current.task.attempt), (task.id.clone(), stale.task.attempt + 1));
    let late = next(&stale.task, Event::Complete(result()));
    assert!(matches!(store.conclude(&late, &stale).await.expect("conclude"), Cas::Conflict(_)));
    assert_eq!(totals(store.work_stats().await.expect("work_stats")), (0, 1), "the new holder keeps its work");
    let done = next(&current.task, Event::Complete(result()));
    assert_eq!(store.conclude(&done, &current).await.expect("conclude"), Cas::Applied(done.clone()));
    assert_eq!(totals(store.work_stats().await.expect("work_stats")), (0, 0));
}

/// A watch delivers committed snapshots of the watched ids, and only those.
pub async fn watch_delivers_committed_snapshots_of_watched_ids(store: Arc<dyn TaskStore>) {
    let owner = scope("alice");
    let watched = create(&store, &owner).await;
    let other = create(&store, &owner).await;
    let mut stream = store.watch(std::slice::from_ref(&watched.id)).await.expect("watch");
    commit(&store, &other, Event::SetMessage("other".into()), Writer::Client).await;
    let committed = commit(&store, &watched, Event::SetMessage("mine".into()), Writer::Client).await;
    let deadline = Instant::now() + PATIENCE;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let seen = next_snapshot(&mut stream, left).await.expect("the committed snapshot is delivered");
        assert_eq!(seen.id, watched.id, "only watched ids are delivered");
        if seen == committed {
            break;
        }
    }
    let other_next = load(&store, &other.id).await;
    commit(&store, &other_next, Event::Cancel, Writer::Client).await;
    if let Some(seen) = next_snapshot(&mut stream, EMPTY_WAIT).await {
        panic!("nothing was committed on the watched task, got {seen:?}");
    }
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
        matches!(refused, Err(StoreError::Capacity { limit: "max_bytes_per_scope" })),
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
pub async fn a_tasks_growth_counts_against_its_scopes_byte_quota(store: Arc<dyn TaskStore>) {
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
        matches!(refused, Err(StoreError::Capacity { limit: crate::BYTES_LIMIT })),
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
        matches!(full, Err(StoreError::Capacity { limit: crate::BYTES_LIMIT })),
        "the 5,000-byte result counts against the quota: {full:?}"
    );
    let cancelled = next(&other, Event::Cancel);
    let cas = store.transition_within(&cancelled, Writer::Client, Some(quota)).await.expect("cancel");
    assert_eq!(cas, Cas::Applied(cancelled), "a cancel lands over the quota");
}

/// A create under an idempotency key: the same key and request return the
/// first task (no second work item, even with the scope at its limit now),
/// the same key with other arguments is refused (not retryable), another
/// principal's same key is its own, and once the task expires the key makes
/// a new one.
pub async fn an_idempotency_key_makes_one_task(store: Arc<dyn TaskStore>) {
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
pub async fn concurrent_creates_under_one_key_make_one_task(store: Arc<dyn TaskStore>) {
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
            matches!(refused, Err(StoreError::Capacity { limit: "max_bytes_per_scope" })),
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
    assert!(matches!(full, Err(StoreError::Capacity { limit: "max_active_tasks_per_scope" })), "{full:?}");
}

/// At most `max_active_per_scope` live tasks per scope; a refused create
/// stores nothing; a terminal task frees its slot.
pub async fn capacity_limit_per_scope(store: Arc<dyn TaskStore>) {
    let limits =
        CreateLimits { max_active_per_scope: Some(2), max_bytes_per_scope: None, max_queued_per_partition: None };
    let owner = scope("alice");
    let neighbour = scope("bob");
    let make = |s: &Scope| store.create(new_task(s, Some(60_000)), limits);
    let first = make(&owner).await.expect("first create");
    let second = make(&owner).await.expect("second create");
    let refused = make(&owner).await;
    assert!(
        matches!(refused, Err(StoreError::Capacity { limit: "max_active_tasks_per_scope" })),
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
async fn create_at_once(
    store: &Arc<dyn TaskStore>,
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
            Err(StoreError::Capacity { limit: "max_active_tasks_per_scope" }) => {}
            Err(e) => panic!("unexpected refusal: {e:?}"),
        }
    }
    admitted
}

/// The per-scope limit admits exactly up to the limit: under concurrent
/// creates, again exactly as many as ended after tasks turn terminal, and
/// again exactly as many as expired after tasks expire.
pub async fn admission_counts_are_exact(store: Arc<dyn TaskStore>) {
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
pub async fn max_queued_refuses_retryably_and_stores_nothing(store: Arc<dyn TaskStore>) {
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
    assert!(matches!(refused, Err(StoreError::Capacity { limit: "max_active_tasks_per_scope" })), "{refused:?}");

    // And no work: exactly the admitted tasks' work is there.
    let claimed = claim_all(&store).await;
    let expected: HashSet<TaskId> = admitted.iter().map(|t| t.id.clone()).chain([last.id]).collect();
    assert_eq!(claimed, expected);
}

/// The worker parks on input, the client answers, the worker sees the answer and finishes.
pub async fn input_round_trip(store: Arc<dyn TaskStore>) {
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

/// `work_stats` lists every partition once: created work is queued, claimed
/// work pending (each with the age of its oldest item), released work queued
/// again, finished work gone.
pub async fn work_stats_count_queued_and_pending_work(store: Arc<dyn TaskStore>) {
    let totals = |stats: &[PartitionStats]| {
        // A partition has an oldest queued item exactly when it has queued items.
        for p in stats {
            assert_eq!(p.oldest_queued_age_ms.is_some(), p.queued > 0, "{stats:?}");
            assert!(p.oldest_queued_age_ms.is_none_or(|age| age < 60_000), "age since enqueue, in ms: {stats:?}");
        }
        (stats.iter().map(|p| p.queued).sum::<u64>(), stats.iter().map(|p| p.pending).sum::<u64>())
    };
    let stats = store.work_stats().await.expect("work_stats");
    let partitions: Vec<u16> = stats.iter().map(|p| p.partition).collect();
    assert!(!partitions.is_empty(), "every partition is listed, idle ones too");
    assert_eq!(partitions, (0..partitions.len() as u16).collect::<Vec<_>>(), "each partition once, in order");
    assert!(stats.iter().all(|p| *p == PartitionStats { partition: p.partition, ..Default::default() }), "{stats:?}");

    let owner = scope("alice");
    for _ in 0..3 {
        create(&store, &owner).await;
    }
    let stats = store.work_stats().await.expect("work_stats");
    assert_eq!(totals(&stats), (3, 0), "{stats:?}");
    assert!(stats.iter().all(|p| p.oldest_pending_age_ms.is_none()), "{stats:?}");

    let claimed = claim_one(&store, "w1", LONG_LEASE).await;
    let stats = store.work_stats().await.expect("work_stats");
    assert_eq!(stats.len(), partitions.len());
    assert_eq!(totals(&stats), (2, 1), "{stats:?}");
    for p in &stats {
        let busy = Some(p.partition) == claimed.task.id.partition();
        assert_eq!(p.pending, u64::from(busy), "{stats:?}");
        match p.oldest_pending_age_ms {
            Some(age) => assert!(busy && age < 60_000, "age since enqueue, in ms: {stats:?}"),
            None => assert!(!busy, "a pending item has an age: {stats:?}"),
        }
    }

    store.release(&claimed).await.expect("release");
    let stats = store.work_stats().await.expect("work_stats");
    assert_eq!(totals(&stats), (3, 0), "released work waits for a worker again: {stats:?}");
    assert!(stats.iter().all(|p| p.oldest_pending_age_ms.is_none()), "{stats:?}");

    let claimed = claim_one(&store, "w1", LONG_LEASE).await;
    assert_eq!(totals(&store.work_stats().await.expect("work_stats")), (2, 1));
    commit(&store, &claimed.task, Event::Complete(result()), claimed.writer()).await;
    store.remove_work(&claimed).await.expect("remove_work");
    let stats = store.work_stats().await.expect("work_stats");
    assert_eq!(totals(&stats), (2, 0), "finished work leaves the statistics: {stats:?}");
    assert!(stats.iter().all(|p| p.oldest_pending_age_ms.is_none()), "{stats:?}");
}

/// A worker's failure is terminal like completion: `failed` with its
/// JSON-RPC error (its message as the status message), no result, no
/// outstanding input; later writes are refused and the work is not redelivered.
pub async fn failed_is_terminal_and_keeps_its_error(store: Arc<dyn TaskStore>) {
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

/// Legacy session state: fields set and removed per session, other sessions
/// (and other owners' sessions of the same id) untouched, everything gone
/// once the TTL of the last write passes; ending keeps only the end mark.
pub async fn session_state_is_shared_per_session_and_expires(store: Arc<dyn TaskStore>) {
    let long = Duration::from_secs(60);
    let (alice, bob) = (scope("alice"), scope("bob"));
    let none = SessionLimits::NONE;
    assert!(store.session_state(&alice, "s1").await.expect("read").is_empty());
    store.set_session_field(&alice, "s1", "logLevel", Some("debug"), long, none).await.expect("set");
    store.set_session_field(&alice, "s1", "sub:test://a", Some("1"), long, none).await.expect("set");
    store.set_session_field(&alice, "s2", "ended", Some("1"), long, none).await.expect("set");
    let s1 = store.session_state(&alice, "s1").await.expect("read");
    assert_eq!(s1.get("logLevel").map(String::as_str), Some("debug"));
    assert_eq!(s1.get("sub:test://a").map(String::as_str), Some("1"));
    assert!(!s1.contains_key("ended"), "another session's field: {s1:?}");
    assert!(store.session_state(&bob, "s1").await.expect("read").is_empty(), "another owner's");
    store.set_session_field(&alice, "s1", "sub:test://a", None, long, none).await.expect("remove");
    let s1 = store.session_state(&alice, "s1").await.expect("read");
    assert_eq!(s1.len(), 1, "{s1:?}");
    store.end_session(&alice, "s1", "ended", long, none).await.expect("end");
    let s1 = store.session_state(&alice, "s1").await.expect("read");
    assert_eq!(s1.into_iter().collect::<Vec<_>>(), vec![("ended".to_string(), "1".to_string())]);
    let short = Duration::from_millis(50);
    store.set_session_field(&alice, "s3", "logLevel", Some("info"), short, none).await.expect("set");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(store.session_state(&alice, "s3").await.expect("read").is_empty(), "expired");
    assert_eq!(store.session_state(&alice, "s2").await.expect("read").len(), 1);
}

/// A session's fields and bytes are counted: a write past either limit
/// stores nothing and names the limit; removals and rewrites that do not
/// grow always fit.
pub async fn session_state_is_counted_and_capped(store: Arc<dyn TaskStore>) {
    let long = Duration::from_secs(60);
    let owner = scope("alice");
    let limits = SessionLimits { max_fields: Some(2), max_bytes: Some(40), ..SessionLimits::NONE };
    let set = |field: &'static str, value: &'static str| {
        let (store, owner) = (store.clone(), owner.clone());
        async move { store.set_session_field(&owner, "s", field, Some(value), long, limits).await }
    };
    set("a", "1").await.expect("2 bytes");
    set("b", "1").await.expect("4 bytes");
    let full = set("c", "1").await.expect_err("a third field");
    assert!(matches!(full, StoreError::Capacity { limit: crate::SESSION_FIELDS_LIMIT }), "{full:?}");
    set("a", "2").await.expect("a rewrite adds no field");
    let big = set("b", "0123456789012345678901234567890123456789").await.expect_err("over 40 bytes");
    assert!(matches!(big, StoreError::Capacity { limit: crate::SESSION_BYTES_LIMIT }), "{big:?}");
    let state = store.session_state(&owner, "s").await.expect("read");
    assert_eq!(state.get("b").map(String::as_str), Some("1"), "the refused write stored nothing");
    assert_eq!(state.len(), 2);
    store.set_session_field(&owner, "s", "a", None, long, limits).await.expect("removal");
    set("c", "0123456789012345678901234567890").await.expect("room again: 2 + 32 bytes");

    // Only the fields named with the counted prefix count for max_fields.
    let subs = SessionLimits { max_fields: Some(1), counted_prefix: "sub:", ..SessionLimits::NONE };
    let set = |field: &'static str| {
        let (store, owner) = (store.clone(), owner.clone());
        async move { store.set_session_field(&owner, "t", field, Some("1"), long, subs).await }
    };
    set("logLevel").await.expect("not counted");
    set("sub:a").await.expect("the one counted field");
    let full = set("sub:b").await.expect_err("a second counted field");
    assert!(matches!(full, StoreError::Capacity { limit: crate::SESSION_FIELDS_LIMIT }), "{full:?}");
    set("ended").await.expect("not counted");
    store.set_session_field(&owner, "t", "sub:a", None, long, subs).await.expect("removal");
    set("sub:b").await.expect("room again");
    store.end_session(&owner, "t", "ended", long, subs).await.expect("end");
    set("sub:c").await.expect("ending dropped the counted fields");
}

/// Sessions holding state are capped per scope and in all; a session without
/// state costs nothing, an expired one frees its place, and writes to a
/// session already holding state are not refused for the count.
pub async fn sessions_holding_state_are_capped_per_scope_and_in_all(store: Arc<dyn TaskStore>) {
    let long = Duration::from_secs(60);
    let limits = SessionLimits { max_per_scope: Some(2), max_sessions: Some(3), ..SessionLimits::NONE };
    let (alice, bob, carol) = (scope("alice"), scope("bob"), scope("carol"));
    let write = |owner: &Scope, session: &str, ttl: Duration| {
        let (store, owner, session) = (store.clone(), owner.clone(), session.to_string());
        async move { store.set_session_field(&owner, &session, "logLevel", Some("info"), ttl, limits).await }
    };
    let capped = SessionLimits { max_bytes: Some(4), ..limits };
    let big = store.set_session_field(&alice, "a0", "logLevel", Some("debug"), long, capped).await;
    assert!(matches!(big, Err(StoreError::Capacity { limit: crate::SESSION_BYTES_LIMIT })), "{big:?}");
    write(&alice, "a1", long).await.expect("alice's first (the refused write took no place)");
    write(&alice, "a2", Duration::from_millis(100)).await.expect("alice's second");
    let full = write(&alice, "a3", long).await.expect_err("alice's third");
    assert!(matches!(full, StoreError::Capacity { limit: crate::SESSIONS_PER_SCOPE_LIMIT }), "{full:?}");
    assert!(full.is_retryable());
    write(&alice, "a1", long).await.expect("a session already counted");
    let ended = store.end_session(&alice, "a3", "ended", long, limits).await.expect_err("ending counts too");
    assert!(matches!(ended, StoreError::Capacity { limit: crate::SESSIONS_PER_SCOPE_LIMIT }), "{ended:?}");
    write(&bob, "b1", long).await.expect("bob's first");
    let all = write(&carol, "c1", long).await.expect_err("the store holds 3");
    assert!(matches!(all, StoreError::Capacity { limit: crate::SESSIONS_LIMIT }), "{all:?}");
    assert!(store.session_state(&carol, "c1").await.expect("read").is_empty(), "nothing stored");
    tokio::time::sleep(Duration::from_millis(400)).await;
    write(&carol, "c1", long).await.expect("alice's short session expired: room in all");
    write(&alice, "a3", long).await.expect_err("the store is full again");
    store.set_session_field(&alice, "a2", "logLevel", None, long, limits).await.expect("a removal always fits");
}

async fn next_event(events: &mut crate::EventStream) -> Option<String> {
    tokio::time::timeout(PATIENCE, events.next()).await.ok().flatten().map(|e| e.expect("an event, not an error"))
}

/// Every subscriber gets every event published after it subscribed, in order.
pub async fn bus_events_reach_every_subscriber(bus: Arc<dyn EventBus>) {
    let mut first = bus.subscribe().await.expect("subscribe");
    let mut second = bus.subscribe().await.expect("subscribe");
    let events = ["notifications/tools/list_changed", "notifications/prompts/list_changed"];
    for event in events {
        bus.publish(event).await.expect("publish");
    }
    for subscriber in [&mut first, &mut second] {
        for event in events {
            assert_eq!(next_event(subscriber).await.as_deref(), Some(event));
        }
    }
}

/// A subscription starts empty: what was published before it is not replayed,
/// and dropping one subscriber does not disturb another.
pub async fn bus_subscribers_see_only_later_events(bus: Arc<dyn EventBus>) {
    bus.publish("notifications/resources/list_changed").await.expect("publish");
    let early = bus.subscribe().await.expect("subscribe");
    let mut late = bus.subscribe().await.expect("subscribe");
    drop(early);
    bus.publish("notifications/tools/list_changed").await.expect("publish");
    assert_eq!(next_event(&mut late).await.as_deref(), Some("notifications/tools/list_changed"));
    let more = tokio::time::timeout(EMPTY_WAIT, late.next()).await;
    assert!(more.is_err(), "nothing else was published: {more:?}");
}

/// The broadcast carries notices, not payloads: an event over
/// `MAX_EVENT_BYTES` is refused and reaches nobody.
pub async fn bus_events_are_bounded_in_size(bus: Arc<dyn EventBus>) {
    let mut events = bus.subscribe().await.expect("subscribe");
    let big = "x".repeat(crate::MAX_EVENT_BYTES + 1);
    let refused = bus.publish(&big).await.expect_err("too large");
    assert!(matches!(refused, StoreError::TooLarge { what: "event", .. }), "{refused:?}");
    assert!(!refused.is_retryable());
    bus.publish(&big[..crate::MAX_EVENT_BYTES]).await.expect("at the limit");
    assert_eq!(next_event(&mut events).await.map(|e| e.len()), Some(crate::MAX_EVENT_BYTES));
}

/// A subscriber that stops reading is ended once it falls behind its
/// queue's bound: it reads fewer than were published, then `Lagged`, then
/// the end; a subscriber that keeps up goes on.
pub async fn a_lagging_bus_subscriber_is_ended(bus: Arc<dyn EventBus>) {
    let mut stalled = bus.subscribe().await.expect("subscribe");
    let mut reader = bus.subscribe().await.expect("subscribe");
    let event = "e".repeat(4096);
    let n = crate::BUS_QUEUE.max_bytes / event.len() + 8;
    for i in 0..n {
        bus.publish(&event).await.expect("publish");
        assert!(next_event(&mut reader).await.is_some(), "the reader keeps up ({i})");
    }
    let mut read = 0;
    let end = loop {
        match tokio::time::timeout(PATIENCE, stalled.next()).await.expect("an end, not a hang") {
            Some(Ok(_)) => read += 1,
            other => break other,
        }
    };
    assert!(matches!(end, Some(Err(StoreError::Lagged))), "{end:?}");
    assert!(read < n, "it read {read} of {n}: ended before the last");
    assert!(stalled.next().await.is_none(), "the end after Lagged");
    bus.publish("after").await.expect("publish");
    assert_eq!(next_event(&mut reader).await.as_deref(), Some("after"));
}

/// A topic's messages (any size) reach that topic's subscribers only, never
/// the broadcast's.
pub async fn topic_messages_reach_only_their_topic(bus: Arc<dyn EventBus>) {
    let mut everyone = bus.subscribe().await.expect("subscribe");
    let mut mine = bus.subscribe_to("session-a").await.expect("subscribe");
    let mut other = bus.subscribe_to("session-b").await.expect("subscribe");
    let payload = "p".repeat(256 * 1024);
    bus.publish_to("session-a", &payload).await.expect("publish");
    bus.publish_to("nobody", "dropped").await.expect("no subscriber is fine");
    assert_eq!(next_event(&mut mine).await.map(|m| m.len()), Some(payload.len()));
    for s in [&mut everyone, &mut other] {
        let more = tokio::time::timeout(EMPTY_WAIT, s.next()).await;
        assert!(more.is_err(), "another topic's message: {more:?}");
    }
}
