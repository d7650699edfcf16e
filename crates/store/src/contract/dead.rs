//! The dead-letter half of the contract ([`crate::dead`]): a poison task's
//! concluding write records one letter, listing is per tenant and pages
//! stably, replay runs it again once, discard removes it, and a letter
//! expires after the store's retention.

use std::{sync::Arc, time::Duration};

use presa_tasks::{Event, Scope, Status, Task, TaskId};
use serde_json::json;

use super::{
    EMPTY_WAIT, LONG_LEASE, NO_LIMITS, PAST_SHORT_LEASE, SHORT_LEASE, claim_one, create, load, new_task, next,
};
use crate::{
    claim::Cas,
    dead::DeadLetter,
    dead::DeadLetterFilter,
    dead::DeadLetters,
    dead::{DeadLetterPage, MAX_DEAD_LETTER_PAGE},
    error::StoreError,
    limits::CreateLimits,
    queue::WorkQueue,
};

/// The retention the [`dead_letters_expire_after_their_retention`] store is made with.
pub const SHORT_DEAD_LETTER_TTL: Duration = Duration::from_millis(1_000);

fn owner(tenant: &str, subject: &str) -> Scope {
    Scope { tenant: tenant.into(), subject: subject.into(), endpoint: None }
}

fn failure() -> Event {
    Event::Fail(json!({"code": -32603, "message": "Task failed after repeated attempts"}))
}

/// Create a task of `scope`, claim it (the store holds no other work) and
/// conclude it as poison; the failed task and the claim it died under.
async fn bury(store: &Arc<dyn WorkQueue>, scope: &Scope) -> (Task, crate::claim::Claim) {
    let task = create(store, scope).await;
    let claim = claim_one(store, "w1", LONG_LEASE).await;
    assert_eq!(claim.task.id, task.id, "the only work is this task's");
    let dead = next(&claim.task, failure());
    let cas = store.conclude_dead(&dead, &claim, "exhausted 1 deliveries").await.expect("conclude_dead");
    assert_eq!(cas, Cas::Applied(dead.clone()));
    (dead, claim)
}

/// Every letter `filter` lists, page by page (`limit` a page).
async fn list_all(letters: &Arc<dyn DeadLetters>, filter: &DeadLetterFilter, limit: usize) -> Vec<DeadLetter> {
    let (mut all, mut after) = (Vec::new(), None::<String>);
    for _ in 0..100 {
        let page = letters.dead_letters(filter, after.as_deref(), limit).await.expect("dead_letters");
        assert!(page.letters.len() <= limit, "a page holds at most its limit");
        all.extend(page.letters);
        match page.next {
            Some(next) => after = Some(next),
            None => return all,
        }
    }
    panic!("the listing never ended");
}

fn ids(letters: &[DeadLetter]) -> Vec<TaskId> {
    letters.iter().map(|l| l.id.clone()).collect()
}

/// The write that ends a poison task records exactly one letter, holding
/// what a replay needs (the work as claimed, without its trace context), the
/// reason, the deliveries and attempts, and the time of death; the work is
/// gone with the write. A refused write (a stale holder, a task already
/// ended) records nothing.
pub async fn a_poison_conclusion_records_one_dead_letter(store: Arc<dyn WorkQueue>, letters: Arc<dyn DeadLetters>) {
    let scope = owner("acme", "alice");
    let task = create(&store, &scope).await;
    // Delivered twice: the first holder's lease lapsed.
    let stale = claim_one(&store, "w1", SHORT_LEASE).await;
    tokio::time::sleep(PAST_SHORT_LEASE).await;
    let claim = claim_one(&store, "w2", LONG_LEASE).await;
    assert_eq!((claim.task.id.clone(), claim.deliveries), (task.id.clone(), 2));
    let late = next(&stale.task, failure());
    assert!(matches!(store.conclude_dead(&late, &stale, "late").await.expect("stale"), Cas::Conflict(_)));
    assert_eq!(
        letters.dead_letter("acme", &task.id).await.expect("dead_letter"),
        None,
        "a refused write records nothing"
    );

    let dead = next(&claim.task, failure());
    let cas = store.conclude_dead(&dead, &claim, "exhausted 2 deliveries").await.expect("conclude_dead");
    assert_eq!(cas, Cas::Applied(dead.clone()));
    assert_eq!(load(&store, &task.id).await.status, Status::Failed);
    assert!(store.claim("w3", 10, LONG_LEASE, EMPTY_WAIT).await.expect("claim").is_empty(), "the work went with it");

    let mut work = new_task(&scope, None).work;
    work.trace.clear();
    let expected = DeadLetter {
        id: task.id.clone(),
        scope: scope.clone(),
        work,
        ttl_ms: Some(60_000),
        poll_interval_ms: Some(100),
        reason: "exhausted 2 deliveries".into(),
        deliveries: 2,
        attempts: 2,
        died_at_ms: dead.updated_at_ms,
        replayed_as: None,
    };
    assert_eq!(letters.dead_letter("acme", &task.id).await.expect("dead_letter"), Some(expected.clone()));
    let page = letters.dead_letters(&DeadLetterFilter::tenant("acme"), None, 10).await.expect("dead_letters");
    assert_eq!(page, DeadLetterPage { letters: vec![expected.clone()], next: None });

    // Ended already: a second ending write is refused and records nothing more.
    let again = next(&claim.task, Event::Fail(json!({"code": -1})));
    assert!(matches!(store.conclude_dead(&again, &claim, "again").await.expect("again"), Cas::Conflict(_)));
    assert_eq!(list_all(&letters, &DeadLetterFilter::tenant("acme"), 10).await, vec![expected]);
}

/// A listing sees one tenant's letters (one subject's when asked), oldest
/// death first; another tenant sees none and can neither read, replay nor
/// discard them. Pages are held to their limit (and to
/// [`MAX_DEAD_LETTER_PAGE`]), and stable: a letter recorded between pages
/// comes last, none is seen twice or missed.
pub async fn dead_letters_are_listed_per_tenant_and_paged_stably(
    store: Arc<dyn WorkQueue>,
    letters: Arc<dyn DeadLetters>,
) {
    let (alice, bob, eve) = (owner("acme", "alice"), owner("acme", "bob"), owner("evil", "alice"));
    let mut acme = Vec::new();
    for scope in [&alice, &bob, &alice, &eve, &bob, &alice] {
        let (dead, _) = bury(&store, scope).await;
        if scope.tenant == "acme" {
            acme.push(dead.id);
        }
    }
    let everyone = list_all(&letters, &DeadLetterFilter::tenant("acme"), 100).await;
    let mut by_death = everyone.clone();
    by_death.sort_by_key(|l| (l.died_at_ms, l.id.clone()));
    assert_eq!(everyone, by_death, "oldest death first");
    let mut listed = ids(&everyone);
    listed.sort();
    acme.sort();
    assert_eq!(listed, acme, "exactly acme's letters");
    let alices = list_all(&letters, &DeadLetterFilter::scope(&alice), 100).await;
    assert_eq!(alices.len(), 3);
    assert!(alices.iter().all(|l| l.scope == alice));
    let evils = list_all(&letters, &DeadLetterFilter::tenant("evil"), 100).await;
    assert_eq!(evils.len(), 1);
    assert!(list_all(&letters, &DeadLetterFilter::tenant("nobody"), 100).await.is_empty());
    assert!(list_all(&letters, &DeadLetterFilter::tenant("acm"), 100).await.is_empty(), "no prefix match");

    // Another tenant cannot touch acme's letters.
    let theirs = &everyone[0].id;
    assert_eq!(letters.dead_letter("evil", theirs).await.expect("dead_letter"), None);
    assert!(!letters.discard_dead_letter("evil", theirs).await.expect("discard"));
    assert_eq!(letters.replay_dead_letter("evil", theirs, NO_LIMITS).await.expect("replay"), None);
    assert_eq!(letters.dead_letter("acme", theirs).await.expect("dead_letter").as_ref(), Some(&everyone[0]));

    // Pages of two: a letter recorded meanwhile comes last.
    let filter = DeadLetterFilter::tenant("acme");
    let first = letters.dead_letters(&filter, None, 2).await.expect("page 1");
    assert_eq!(first.letters, everyone[..2]);
    // Dying a millisecond later than every other (the order is time of death, then id).
    tokio::time::sleep(Duration::from_millis(5)).await;
    let (late, _) = bury(&store, &bob).await;
    let rest = {
        let mut rest = Vec::new();
        let mut after = first.next.clone();
        while let Some(at) = after {
            let page = letters.dead_letters(&filter, Some(&at), 2).await.expect("next page");
            assert!(page.letters.len() <= 2);
            rest.extend(page.letters);
            after = page.next;
        }
        rest
    };
    assert_eq!(ids(&rest[..3]), ids(&everyone[2..]));
    assert_eq!(ids(&rest[3..]), vec![late.id], "recorded between pages: last");
    // A limit of 0 asks for the smallest page, one past the cap for the cap.
    let one = letters.dead_letters(&filter, None, 0).await.expect("limit 0");
    assert_eq!((one.letters.len(), one.next.is_some()), (1, true));
    let capped = letters.dead_letters(&filter, None, MAX_DEAD_LETTER_PAGE + 1).await.expect("over the cap");
    assert_eq!((capped.letters.len(), capped.next), (6, None));
}

/// A replay creates a new task for the same owner, tool, arguments and
/// caller, naming the dead one, and marks the letter; a second replay (also
/// one racing the first) answers the same task and creates nothing. The
/// create's limits apply: a refused replay leaves the letter as it was.
pub async fn a_dead_letter_replays_once(store: Arc<dyn WorkQueue>, letters: Arc<dyn DeadLetters>) {
    let scope = owner("acme", "alice");
    let (dead, _) = bury(&store, &scope).await;
    let letter = letters.dead_letter("acme", &dead.id).await.expect("dead_letter").expect("a letter");

    // At its scope's active-task limit, the replay is refused like any create.
    let full = CreateLimits { max_active_per_scope: Some(1), ..NO_LIMITS };
    let held = store.create(new_task(&scope, Some(60_000)), full).await.expect("create");
    let refused = letters.replay_dead_letter("acme", &dead.id, full).await;
    assert!(matches!(refused, Err(StoreError::Capacity { .. })), "{refused:?}");
    assert_eq!(letters.dead_letter("acme", &dead.id).await.expect("dead_letter"), Some(letter.clone()));
    let busy = claim_one(&store, "w1", LONG_LEASE).await;
    assert_eq!(busy.task.id, held.id);
    let done = next(&busy.task, Event::Cancel);
    assert!(matches!(store.conclude(&done, &busy).await.expect("conclude"), Cas::Applied(_)));

    // (Without limits: on a cluster a racing keyed create may meet the
    // limit before it finds the other's task, as any create may.)
    let (a, b) = tokio::join!(
        letters.replay_dead_letter("acme", &dead.id, NO_LIMITS),
        letters.replay_dead_letter("acme", &dead.id, NO_LIMITS)
    );
    let (a, b) = (a.expect("replay").expect("a letter"), b.expect("replay").expect("a letter"));
    assert_eq!(a.task, b.task, "racing replays make one task");
    assert_eq!(u8::from(a.first) + u8::from(b.first), 1, "one of them made it");
    let replayed = store.get(&scope, &a.task).await.expect("get").expect("the new task");
    assert_ne!(replayed.id, dead.id);
    assert_eq!((replayed.status, replayed.scope.clone()), (Status::Working, scope.clone()));
    assert_eq!(replayed.work.replay_of.as_ref(), Some(&dead.id), "it names what it replays");
    let mut work = replayed.work.clone();
    work.replay_of = None;
    assert_eq!(work, letter.work, "same tool, arguments, caller and capabilities");
    assert_eq!(replayed.ttl_ms, letter.ttl_ms);

    let marked = letters.dead_letter("acme", &dead.id).await.expect("dead_letter").expect("still listed");
    assert_eq!(marked, DeadLetter { replayed_as: Some(a.task.clone()), ..letter });
    let again = letters.replay_dead_letter("acme", &dead.id, NO_LIMITS).await.expect("again").expect("a letter");
    assert_eq!((again.task, again.first), (a.task.clone(), false));
    // One new task to run, and no other.
    let claim = claim_one(&store, "w2", LONG_LEASE).await;
    assert_eq!(claim.task.id, a.task);
    assert!(store.claim("w2", 10, LONG_LEASE, EMPTY_WAIT).await.expect("claim").is_empty());
}

/// Discard removes a letter: it is neither read, listed nor replayed after.
pub async fn a_discarded_dead_letter_is_gone(store: Arc<dyn WorkQueue>, letters: Arc<dyn DeadLetters>) {
    let scope = owner("acme", "alice");
    let (kept, _) = bury(&store, &scope).await;
    let (dead, _) = bury(&store, &scope).await;
    assert!(letters.discard_dead_letter("acme", &dead.id).await.expect("discard"));
    assert_eq!(letters.dead_letter("acme", &dead.id).await.expect("dead_letter"), None);
    assert_eq!(ids(&list_all(&letters, &DeadLetterFilter::scope(&scope), 10).await), vec![kept.id]);
    assert!(!letters.discard_dead_letter("acme", &dead.id).await.expect("discard twice"));
    assert_eq!(letters.replay_dead_letter("acme", &dead.id, NO_LIMITS).await.expect("replay"), None);
}

/// A store made with a dead-letter retention of [`SHORT_DEAD_LETTER_TTL`]
/// forgets a letter once it passed: not read, listed nor replayed.
pub async fn dead_letters_expire_after_their_retention(store: Arc<dyn WorkQueue>, letters: Arc<dyn DeadLetters>) {
    let scope = owner("acme", "alice");
    let (dead, _) = bury(&store, &scope).await;
    assert!(letters.dead_letter("acme", &dead.id).await.expect("dead_letter").is_some());
    tokio::time::sleep(SHORT_DEAD_LETTER_TTL + Duration::from_millis(500)).await;
    assert_eq!(letters.dead_letter("acme", &dead.id).await.expect("dead_letter"), None);
    assert!(list_all(&letters, &DeadLetterFilter::tenant("acme"), 10).await.is_empty());
    assert_eq!(letters.replay_dead_letter("acme", &dead.id, NO_LIMITS).await.expect("replay"), None);
    // A letter recorded after the others expired is listed alone.
    let (fresh, _) = bury(&store, &scope).await;
    assert_eq!(ids(&list_all(&letters, &DeadLetterFilter::tenant("acme"), 10).await), vec![fresh.id]);
}
