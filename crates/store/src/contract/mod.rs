//! The behavioural contract every store passes ([`TaskStore`], [`WorkQueue`],
//! [`DeadLetters`](crate::DeadLetters) and the others), written once against
//! the trait and run against each backend with [`store_contract_tests!`](crate::store_contract_tests).
//!
//! Each case takes the trait it is about and panics on a violation: the
//! records' cases an `Arc<dyn TaskStore>`, the work queue's an
//! `Arc<dyn WorkQueue>` (which is a `TaskStore` too: it creates the work it
//! claims), the dead letters' an `Arc<dyn WorkQueue>` (to bury tasks) and
//! an `Arc<dyn DeadLetters>`, the event bus's an `Arc<dyn EventBus>`, legacy
//! sessions' an `Arc<dyn SessionStore>`, the admin ones the whole
//! [`Backend`](crate::Backend). New states always come from the reducer ([`apply`]), never
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
//! The cases live by area: `tasks` (records; those that write as a worker
//! take the queue), `work` (claims and leases), `quota` (limits),
//! `idempotency`, `rates` and `breakers` (they take the [`Rates`](crate::Rates)
//! and the [`Breakers`](crate::Breakers)), `bus` (they take the
//! [`EventBus`](crate::EventBus)), `sessions` (they take the
//! [`SessionStore`](crate::SessionStore)), `admin` (they take the whole
//! backend) and `dead` (dead letters; one of them needs a store made
//! with a short dead-letter retention, hence the macro's second factory).
//! This file holds the macro and the helpers the cases share.

use std::{
    collections::{BTreeMap, HashSet},
    sync::Arc,
    time::Duration,
};

use futures::StreamExt;
use presa_tasks::{Caller, Event, NewTask, Scope, Task, TaskId, Work, apply};
use serde_json::{Value, json};

mod admin;
mod breakers;
mod bus;
mod dead;
mod delayed;
mod idempotency;
mod permits;
mod quota;
mod rates;
mod sessions;
mod tasks;
mod work;
pub use admin::*;
pub use breakers::*;
pub use bus::*;
pub use dead::*;
pub use delayed::*;
pub use idempotency::*;
pub use permits::*;
pub use quota::*;
pub use rates::*;
pub use sessions::*;
pub use tasks::*;
pub use work::*;

use crate::{
    claim::Cas, claim::Claim, claim::Writer, limits::CreateLimits, queue::WorkQueue, records::TaskStore,
    records::TaskStream, util::now_ms,
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
            $crate::contract::dead_letters_expire_after_their_retention(backend.work, backend.dead).await
        }
        $crate::store_contract_tests!(@cases $make, store;
            create_then_get_resolves_immediately,
            get_is_scoped_and_load_is_not,
            a_tasks_endpoint_is_part_of_its_owner,
            unknown_id_is_none,
            no_ttl_never_expires,
            cas_applies_at_the_right_revision_only,
            watch_delivers_committed_snapshots_of_watched_ids,
            byte_quota_per_scope,
            a_refused_create_keeps_nothing_of_other_limits,
        );
        $crate::store_contract_tests!(@cases $make, work;
            get_view_is_the_reducers_view_after_every_transition,
            ttl_expiry_hides_the_task,
            terminal_is_immutable,
            cancel_racing_completion_has_one_winner,
            input_round_trip,
            failed_is_terminal_and_keeps_its_error,
            claim_returns_created_work_then_waits,
            lapsed_lease_is_recovered_and_fenced,
            a_checkpoint_reaches_the_next_claim,
            renew_on_a_lost_claim_is_false,
            release_makes_work_claimable_at_once,
            a_scope_without_room_is_skipped_not_waited_behind,
            claim_drops_work_of_cancelled_tasks,
            remove_work_removes_the_work,
            conclude_removes_the_work_of_the_write_that_ends_the_task,
            work_stats_count_queued_and_pending_work,
            deferred_work_waits_then_runs_as_a_new_try,
            a_stale_holder_cannot_defer,
            retry_now_makes_waiting_work_due,
            a_task_cancelled_while_waiting_never_runs,
            waiting_work_counts_against_its_owners_active_tasks,
            capacity_limit_per_scope,
            admission_counts_are_exact,
            max_queued_refuses_retryably_and_stores_nothing,
            a_tasks_growth_counts_against_its_scopes_byte_quota,
            an_idempotency_key_makes_one_task,
            concurrent_creates_under_one_key_make_one_task,
        );
        $crate::store_contract_tests!(@dead $make;
            a_poison_conclusion_records_one_dead_letter,
            dead_letters_are_listed_per_tenant_and_paged_stably,
            a_dead_letter_replays_once,
            a_discarded_dead_letter_is_gone,
        );
        $crate::store_contract_tests!(@cases $make, sessions;
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
        $crate::store_contract_tests!(@cases $make, rates;
            a_rate_admits_its_burst_then_one_per_interval,
            reservations_get_a_turn_each,
        );
        $crate::store_contract_tests!(@cases $make, breakers;
            a_breaker_opens_after_its_failures_within_the_window_only,
            an_open_breaker_refuses_then_lets_exactly_one_probe_through,
            the_probes_success_closes_it_and_its_failure_reopens_it,
            a_lost_probe_frees_the_half_open_state_after_its_lease,
        );
        $crate::store_contract_tests!(@cases $make, permits;
            permits_admit_at_most_n_in_creation_order,
            a_lapsed_lease_frees_its_permit,
            a_stale_holder_cannot_renew_or_release,
            a_dropped_waiter_does_not_block_the_line,
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
    (@dead $make:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let backend: $crate::Backend = ($make)().await;
                $crate::contract::$case(backend.work, backend.dead).await
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
    Scope { tenant: "contract".into(), subject: subject.into(), endpoint: None }
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

async fn create<S: TaskStore + ?Sized>(store: &Arc<S>, scope: &Scope) -> Task {
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
async fn commit<S: TaskStore + ?Sized>(store: &Arc<S>, task: &Task, event: Event, writer: Writer) -> Task {
    let next = next(task, event);
    match store.transition(&next, writer).await.expect("transition") {
        Cas::Applied(stored) => {
            assert_eq!(stored, next, "the stored task is what was written");
            stored
        }
        Cas::Conflict(current) => panic!("expected the CAS to apply, got a conflict: {current:?}"),
    }
}

async fn load<S: TaskStore + ?Sized>(store: &Arc<S>, id: &TaskId) -> Task {
    store.load(id).await.expect("load").expect("task exists")
}

async fn claim(store: &Arc<dyn WorkQueue>, worker: &str, lease: Duration, wait: Duration) -> Vec<Claim> {
    store.claim(worker, 10, lease, wait).await.expect("claim")
}

/// Claim every work item there is (as `w1`, without waiting); the tasks'
/// ids. A task claimed twice fails the test.
async fn claim_all(store: &Arc<dyn WorkQueue>) -> HashSet<TaskId> {
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
async fn claim_one(store: &Arc<dyn WorkQueue>, worker: &str, lease: Duration) -> Claim {
    let mut claims = store.claim(worker, 1, lease, PATIENCE).await.expect("claim");
    assert_eq!(claims.len(), 1, "expected one claim, got {claims:?}");
    claims.remove(0)
}

async fn assert_nothing_to_claim(store: &Arc<dyn WorkQueue>, worker: &str) {
    let claims = claim(store, worker, LONG_LEASE, EMPTY_WAIT).await;
    assert!(claims.is_empty(), "expected no work, got {claims:?}");
}

async fn next_snapshot(stream: &mut TaskStream, within: Duration) -> Option<Task> {
    tokio::time::timeout(within, stream.next()).await.ok().flatten()
}
