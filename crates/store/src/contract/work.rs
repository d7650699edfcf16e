//! The work half of the contract: claims (and their fence), lapsed leases
//! recovered, checkpoints handed on, renew, release, fair shares, work of
//! finished tasks dropped or removed, watches, and the queue statistics.

use std::{collections::HashSet, sync::Arc, time::Instant};

use presa_tasks::{Event, Scope, Status, Work};
use serde_json::{Value, json};

use super::{
    EMPTY_WAIT, LONG_LEASE, PAST_SHORT_LEASE, PATIENCE, SHORT_LEASE, assert_nothing_to_claim, claim, claim_one, commit,
    create, load, next, next_snapshot, result, scope,
};
use crate::{
    claim::Cas, claim::Claim, claim::PartitionStats, claim::Writer, queue::WorkQueue, records::TaskStore,
    shares::Shares,
};

/// A claim returns created work (attempt 1, delivery 1) and bumps the
/// revision, so writes computed before it are refused; with nothing left a
/// claim blocks for about `wait` and returns empty.
pub async fn claim_returns_created_work_then_waits(store: Arc<dyn WorkQueue>) {
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
pub async fn lapsed_lease_is_recovered_and_fenced(store: Arc<dyn WorkQueue>) {
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
pub async fn a_checkpoint_reaches_the_next_claim(store: Arc<dyn WorkQueue>) {
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
pub async fn renew_on_a_lost_claim_is_false(store: Arc<dyn WorkQueue>) {
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
pub async fn release_makes_work_claimable_at_once(store: Arc<dyn WorkQueue>) {
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
pub async fn a_scope_without_room_is_skipped_not_waited_behind(store: Arc<dyn WorkQueue>) {
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
pub async fn claim_drops_work_of_cancelled_tasks(store: Arc<dyn WorkQueue>) {
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
pub async fn remove_work_removes_the_work(store: Arc<dyn WorkQueue>) {
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
pub async fn conclude_removes_the_work_of_the_write_that_ends_the_task(store: Arc<dyn WorkQueue>) {
    let totals = |stats: Vec<PartitionStats>| {
        (stats.iter().map(|p| p.queued).sum::<u64>(), stats.iter().map(|p| p.pending).sum::<u64>())
    };
    let owner = scope("alice");
    create(&store, &owner).await;
    let held = claim_one(&store, "w1", SHORT_LEASE).await;
    let said = next(&held.task, Event::SetMessage("half way".into()));
    assert_eq!(store.conclude(&said, &held).await.expect("conclude"), Cas::Applied(said.clone()));
    assert_eq!(totals(store.work_stats().await.expect("work_stats")), (0, 1), "not ended: still held");
    // Given up by the writer (`conclude_owned`): the same answer, the same write.
    let done = next(&said, Event::Complete(result()));
    let given = Box::new(done.clone());
    assert_eq!(store.conclude_owned(given, &held).await.expect("conclude"), Cas::Applied(done.clone()));
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
    let given = Box::new(late.clone());
    assert!(matches!(store.conclude_owned(given, &stale).await.expect("conclude"), Cas::Conflict(_)));
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

/// `work_stats` lists every partition once: created work is queued, claimed
/// work pending (each with the age of its oldest item), released work queued
/// again, finished work gone.
pub async fn work_stats_count_queued_and_pending_work(store: Arc<dyn WorkQueue>) {
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
