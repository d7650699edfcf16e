//! The reducer's tests: every status × event pair, what finishing drops, deferred tries.

use super::*;
use crate::{id::TaskId, model::NewTask, model::Scope};
use proptest::prelude::*;
use serde_json::json;

fn task_in(status: Status) -> Task {
    let mut t = Task::new(
        TaskId::from_random(1, [9; 16]),
        NewTask {
            scope: Scope::anonymous(),
            work: Work::default(),
            ttl_ms: Some(60_000),
            poll_interval_ms: Some(100),
            status_message: None,
        },
        1_000,
    );
    t.status = status;
    if status == Status::InputRequired {
        let req = json!({"method": "elicitation/create"});
        t.input_requests.insert("a".into(), req.clone());
        t.issued_inputs.insert("a".into(), req);
    }
    t
}

/// A finished task keeps what `tasks/get` answers with and its tool's name;
/// what only a run needs is dropped, whichever way it ends.
#[test]
fn finishing_drops_what_only_a_run_needs() {
    let done = [Event::Complete(json!({ "content": [] })), Event::Fail(json!({ "code": -1 })), Event::Cancel];
    for event in done {
        let mut before = task_in(Status::InputRequired);
        before.work = Work {
            tool: "deploy".into(),
            arguments: json!({ "version": "1.4.0" }),
            client_capabilities: json!({ "elicitation": {} }).as_object().cloned().unwrap(),
            input_responses: Some(serde_json::Map::new()),
            trace: BTreeMap::from([("traceparent".to_string(), "00-ab-cd-01".to_string())]),
            caller: Some(crate::model::Caller::anonymous()),
            replay_of: Some(TaskId::from_wire("p00.dead")),
            worker: Some("w-1".into()),
        };
        before.input_responses.insert("b".into(), json!({ "action": "accept" }));
        before.checkpoint = Some(json!({ "step": 2 }));
        before.retries.failed = 1;
        before.poll_interval_ms = Some(500);
        before.history.push(crate::model::StatusChange { status: Status::InputRequired, at_ms: 1_500 });
        let after = apply(&before, &event, 2_000).unwrap().unwrap();
        // What `tasks/get` and an operator read is kept as it was.
        assert_eq!(
            (&after.id, &after.scope, after.created_at_ms, after.ttl_ms),
            (&before.id, &before.scope, 1_000, before.ttl_ms)
        );
        assert_eq!(
            (after.poll_interval_ms, after.attempt, after.revision),
            (Some(500), before.attempt, before.revision + 1)
        );
        assert_eq!((&after.history, &after.retries), (&before.history, &before.retries), "{event:?}");
        assert_eq!(after.checkpoint, None);
        assert!(after.status.is_terminal());
        let kept = Work { tool: "deploy".into(), replay_of: before.work.replay_of.clone(), ..Work::default() };
        assert_eq!(after.work, kept, "{event:?}");
        assert!(after.input_requests.is_empty() && after.issued_inputs.is_empty());
        assert!(after.input_responses.is_empty());
        assert_eq!(after.result.is_some(), matches!(event, Event::Complete(_)));
        assert_eq!(after.error.is_some(), matches!(event, Event::Fail(_)));
    }
}

/// A deferred try keeps the task working, logs the failure, and counts
/// the next try's claims afresh; the log keeps only the last tries.
#[test]
fn a_deferred_try_counts_its_claims_afresh() {
    let claim = |t: &Task| apply(t, &Event::Claimed { worker: "w".into() }, 2_000).unwrap().unwrap();
    let defer = |t: &Task, at: u64| {
        let e = Event::Defer { failed: true, reason: "503".into(), message: "waiting".into(), due_at_ms: at + 500 };
        apply(t, &e, at).unwrap().unwrap()
    };
    let once = claim(&claim(&task_in(Status::Working)));
    assert_eq!((once.deliveries(), once.try_number()), (2, 1), "a lost worker's claim counts");
    let put_off = defer(&once, 3_000);
    assert_eq!(put_off.status, Status::Working);
    assert_eq!(put_off.status_message.as_deref(), Some("waiting"));
    assert_eq!(put_off.retries.due_at_ms, Some(3_500));
    assert_eq!(
        put_off.retries.log,
        [crate::model::FailedTry { number: 1, at_ms: 3_000, reason: "503".into(), delay_ms: 500 }]
    );
    assert_eq!(put_off.work.worker, None);
    let again = claim(&put_off);
    assert_eq!((again.deliveries(), again.try_number(), again.retries.due_at_ms), (1, 2, None));
    let mut t = again;
    for n in 0..crate::model::MAX_TRIES_KEPT as u64 + 3 {
        t = claim(&defer(&t, 4_000 + n));
    }
    assert_eq!(t.retries.log.len(), crate::model::MAX_TRIES_KEPT);
    assert_eq!(t.retries.log.last().map(|f| f.number), Some(t.try_number() - 1));
    // A run put off before it started (a rate) is no failed try, but its
    // claims count afresh too.
    let waits = Event::Defer { failed: false, reason: "rate".into(), message: "later".into(), due_at_ms: 9_000 };
    let held_back = apply(&claim(&claim(&t)), &waits, 5_000).unwrap().unwrap();
    assert_eq!((held_back.retries.failed, &held_back.retries.log), (t.retries.failed, &t.retries.log));
    assert!(held_back.retries.turn_reserved && claim(&held_back).retries.turn_reserved, "kept by the claim");
    assert_eq!(claim(&held_back).deliveries(), 1);
    assert!(!defer(&claim(&held_back), 6_000).retries.turn_reserved, "a failed try takes a turn again");
    // A run held back by an open circuit is no failed try either, and
    // holds no turn: when it comes back it takes one (a turn it had is gone).
    let wait = Event::Wait { message: "circuit open".into(), due_at_ms: 9_000 };
    let waiting = apply(&claim(&held_back), &wait, 6_000).unwrap().unwrap();
    assert_eq!((waiting.retries.failed, &waiting.retries.log), (t.retries.failed, &t.retries.log));
    assert!(!waiting.retries.turn_reserved, "no turn held");
    assert_eq!((waiting.retries.due_at_ms, waiting.status_message.as_deref()), (Some(9_000), Some("circuit open")));
    assert_eq!(claim(&waiting).deliveries(), 1);
}

/// Every status × event pair, with the expected next status (`None`: no-op).
#[test]
fn every_state_event_pair() {
    use Status::*;
    let expected = |s: Status, e: &Event| -> Option<Status> {
        if s.is_terminal() {
            return None;
        }
        match (s, e) {
            (s, Event::Claimed { .. }) => Some(s),
            (Working, Event::RequestInput(_)) => Some(InputRequired),
            (InputRequired, Event::RequestInput(_)) => None, // same key, same request: idempotent
            (Working, Event::ProvideInput(_)) => None,       // nothing outstanding
            (InputRequired, Event::ProvideInput(_)) => Some(Working),
            (s, Event::SetMessage(_) | Event::Checkpoint(_)) => Some(s),
            (_, Event::Complete(_)) => Some(Completed),
            (_, Event::Fail(_)) => Some(Failed),
            (_, Event::Cancel) => Some(Cancelled),
            (_, Event::Defer { .. } | Event::Wait { .. }) => Some(Working),
            _ => unreachable!(),
        }
    };
    for status in Status::ALL {
        for event in Event::samples() {
            let before = task_in(status);
            let got = apply(&before, &event, 2_000).unwrap();
            assert_eq!(got.as_ref().map(|t| t.status), expected(status, &event), "{status:?} × {event:?}");
            if let Some(after) = got {
                assert_eq!(after.revision, before.revision + 1);
                let claimed = u64::from(matches!(event, Event::Claimed { .. }));
                assert_eq!(after.attempt, before.attempt + claimed, "only a claim moves the fence");
                assert_eq!(after.updated_at_ms, 2_000);
                assert_eq!(after.created_at_ms, before.created_at_ms);
                if after.status.is_terminal() {
                    assert!(after.input_requests.is_empty());
                }
            }
        }
    }
}

/// A claim made in place is the claim `apply` makes from a copy, whatever
/// the task's status (a finished task is not claimed), also of work that waited.
#[test]
fn a_claim_in_place_is_the_claim_apply_makes() {
    for status in [Status::Working, Status::InputRequired, Status::Completed, Status::Failed, Status::Cancelled] {
        let mut t = task_in(status);
        t.attempt = 3;
        t.retries.due_at_ms = Some(1_500);
        t.work.arguments = json!({ "n": 1 });
        let from_copy = apply(&t, &Event::Claimed { worker: "w-9".into() }, 2_000).unwrap();
        assert_eq!(claim(t, "w-9", 2_000), from_copy, "{status:?}");
    }
}

/// The history gets one entry per status change, at the change's time;
/// claims, messages and checkpoints add none. A claim names its worker.
#[test]
fn history_records_status_changes_only_and_claims_name_their_worker() {
    let t = task_in(Status::Working);
    let t = apply(&t, &Event::Claimed { worker: "w-1".into() }, 1_100).unwrap().unwrap();
    assert_eq!((t.work.worker.as_deref(), t.history.len()), (Some("w-1"), 0));
    let ask = BTreeMap::from([("k".to_string(), json!({ "method": "elicitation/create" }))]);
    let t = apply(&t, &Event::RequestInput(ask), 1_200).unwrap().unwrap();
    let t = apply(&t, &Event::SetMessage("waiting".into()), 1_250).unwrap().unwrap();
    let t = apply(&t, &Event::ProvideInput(BTreeMap::from([("k".to_string(), json!({}))])), 1_300).unwrap().unwrap();
    let t = apply(&t, &Event::Claimed { worker: "w-2".into() }, 1_350).unwrap().unwrap();
    let t = apply(&t, &Event::Complete(json!({ "content": [] })), 1_400).unwrap().unwrap();
    let stored: Vec<(Status, u64)> = t.history.iter().map(|h| (h.status, h.at_ms)).collect();
    assert_eq!(stored, vec![(Status::InputRequired, 1_200), (Status::Working, 1_300)], "the end is not stored");
    let told: Vec<(Status, u64)> = t.status_history().iter().map(|h| (h.status, h.at_ms)).collect();
    assert_eq!(told, vec![(Status::InputRequired, 1_200), (Status::Working, 1_300), (Status::Completed, 1_400)]);
    assert_eq!(t.work.worker, None, "a finished task names no holder");
    let simple = apply(&task_in(Status::Working), &Event::Cancel, 1_500).unwrap().unwrap();
    assert!(simple.history.is_empty(), "a task that just ends stores no history: its record does not grow");
    let end = crate::model::StatusChange { status: Status::Cancelled, at_ms: 1_500 };
    assert_eq!(simple.status_history(), vec![end.clone()]);
    let stored_its_end = Task { history: vec![end.clone()], ..simple };
    assert_eq!(stored_its_end.status_history(), vec![end], "an end stored already is told once");
}

#[test]
fn partial_fulfilment_keeps_the_other_key() {
    let mut t = task_in(Status::Working);
    let reqs = BTreeMap::from([
        ("first".to_string(), json!({"method": "elicitation/create", "params": {"message": "1"}})),
        ("second".to_string(), json!({"method": "elicitation/create", "params": {"message": "2"}})),
    ]);
    t = apply(&t, &Event::RequestInput(reqs), 2).unwrap().unwrap();
    let answer = BTreeMap::from([
        ("first".to_string(), json!({"action": "accept"})),
        ("unknown".to_string(), json!({"ignored": true})),
    ]);
    t = apply(&t, &Event::ProvideInput(answer), 3).unwrap().unwrap();
    assert_eq!(t.status, Status::InputRequired);
    assert_eq!(t.input_requests.keys().collect::<Vec<_>>(), ["second"]);
    assert_eq!(t.input_responses.keys().collect::<Vec<_>>(), ["first"]);
    assert!(!t.input_responses.contains_key("unknown"));
    // Answering "first" again changes nothing.
    let again = BTreeMap::from([("first".to_string(), json!({"action": "decline"}))]);
    assert_eq!(apply(&t, &Event::ProvideInput(again), 4).unwrap(), None);
    let last = BTreeMap::from([("second".to_string(), json!({"action": "accept"}))]);
    t = apply(&t, &Event::ProvideInput(last), 5).unwrap().unwrap();
    assert_eq!(t.status, Status::Working);
}

#[test]
fn keys_are_unique_over_the_lifetime() {
    let t = task_in(Status::InputRequired);
    let other = BTreeMap::from([("a".to_string(), json!({"method": "roots/list"}))]);
    assert_eq!(apply(&t, &Event::RequestInput(other), 2), Err(ReduceError::KeyReused("a".into())));
    let answered = apply(&t, &Event::ProvideInput(BTreeMap::from([("a".to_string(), json!({"action": "accept"}))])), 3)
        .unwrap()
        .unwrap();
    let same = BTreeMap::from([("a".to_string(), json!({"method": "elicitation/create"}))]);
    assert_eq!(apply(&answered, &Event::RequestInput(same), 4), Err(ReduceError::KeyReused("a".into())));
    assert_eq!(apply(&answered, &Event::RequestInput(BTreeMap::new()), 4), Err(ReduceError::NoInputRequests));
}

#[test]
fn failure_message_becomes_status_message() {
    let t = apply(&task_in(Status::Working), &Event::Fail(json!({"code": -32603, "message": "Internal error"})), 2)
        .unwrap()
        .unwrap();
    assert_eq!(t.status_message.as_deref(), Some("Internal error"));
    assert!(t.result.is_none());
}

fn arb_event() -> impl Strategy<Value = Event> {
    let key = prop::sample::select(vec!["a", "b", "c"]).prop_map(str::to_string);
    let keys = prop::collection::btree_set(key, 0..3);
    prop_oneof![
        Just(Event::Claimed { worker: "w".into() }),
        keys.clone().prop_map(|ks| Event::RequestInput(
            ks.into_iter()
                .map(|k| {
                    let v = json!({"method": "elicitation/create", "k": k});
                    (k, v)
                })
                .collect()
        )),
        keys.prop_map(|ks| Event::ProvideInput(ks.into_iter().map(|k| (k, json!({"action": "accept"}))).collect())),
        "[a-z]{0,3}".prop_map(Event::SetMessage),
        "[a-z]{0,2}".prop_map(|c| Event::Checkpoint(json!({ "at": c }))),
        Just(Event::Complete(json!({"content": []}))),
        Just(Event::Fail(json!({"code": -32603, "message": "x"}))),
        Just(Event::Cancel),
    ]
}

proptest! {
    /// Any event sequence keeps the invariants.
    #[test]
    fn invariants_hold_for_any_sequence(events in prop::collection::vec(arb_event(), 0..40)) {
        let mut t = task_in(Status::Working);
        let mut terminal_at: Option<Task> = None;
        for (i, e) in events.iter().enumerate() {
            let before = t.clone();
            match apply(&t, e, 10 + i as u64) {
                Ok(Some(next)) => {
                    prop_assert!(!before.status.is_terminal());
                    prop_assert_eq!(next.revision, before.revision + 1);
                    t = next;
                }
                Ok(None) | Err(_) => prop_assert_eq!(&t, &before),
            }
            // Outstanding keys are a subset of issued keys and never answered.
            for k in t.input_requests.keys() {
                prop_assert!(t.issued_inputs.contains_key(k));
                prop_assert!(!t.input_responses.contains_key(k));
            }
            prop_assert_eq!(t.status == Status::InputRequired, !t.input_requests.is_empty());
            prop_assert_eq!(t.result.is_some(), t.status == Status::Completed);
            prop_assert_eq!(t.error.is_some(), t.status == Status::Failed);
            if let Some(frozen) = &terminal_at {
                prop_assert_eq!(&t, frozen);
            } else if t.status.is_terminal() {
                terminal_at = Some(t.clone());
            }
        }
    }
}
