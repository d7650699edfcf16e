//! The task record's tests: stored docs, scope keys, callers.

use super::*;

#[test]
fn json_len_is_the_serialised_length() {
    let v = serde_json::json!({ "a": "é\n", "b": [1, 2.5, null], "c": { "d": true } });
    assert_eq!(json_len(&v), serde_json::to_vec(&v).unwrap().len());
}

#[test]
fn scope_keys_never_collide() {
    let scope = |t: &str, s: &str| Scope { tenant: t.into(), subject: s.into(), endpoint: None };
    assert_ne!(scope("a/b", "c").key(), scope("a", "b/c").key());
    assert_ne!(scope("a\",\"b", "c").key(), scope("a", "b\",\"c").key());
    assert_eq!(scope("acme", "alice").key(), r#"["acme","alice"]"#);
}

/// An endpoint is part of a scope (its key, its equality) but not of its
/// principal; a root scope is stored exactly as before endpoints existed.
#[test]
fn an_endpoint_is_part_of_the_scope_not_of_the_principal() {
    let root = Scope::new("acme", "alice");
    let on_a = root.clone().on_endpoint(Some("a".into()));
    assert_eq!(on_a.key(), r#"["acme","alice","a"]"#);
    assert_ne!(on_a, root);
    assert_ne!(on_a, root.clone().on_endpoint(Some("b".into())));
    assert_eq!(on_a.principal(), root);
    assert_eq!(serde_json::to_value(&root).unwrap(), serde_json::json!({ "tenant": "acme", "subject": "alice" }));
    let stored = serde_json::json!({ "tenant": "acme", "subject": "alice", "endpoint": "a" });
    assert_eq!(serde_json::to_value(&on_a).unwrap(), stored);
    assert_eq!(serde_json::from_value::<Scope>(stored).unwrap(), on_a);
}

#[test]
fn work_without_a_caller_still_reads() {
    let old: Work = serde_json::from_value(serde_json::json!({ "tool": "t", "arguments": {} })).unwrap();
    assert_eq!(old.caller, None);
    let caller = Caller::new("acme", "alice", vec!["deploy".into()]);
    let new = Work { caller: Some(caller.clone()), ..old };
    let back: Work = serde_json::from_value(serde_json::to_value(&new).unwrap()).unwrap();
    assert_eq!(back.caller, Some(caller));
}

#[test]
fn stored_docs_leave_out_what_is_empty_and_read_back_whole() {
    let work = Work {
        tool: "t".into(),
        arguments: serde_json::json!({}),
        caller: Some(Caller::anonymous()),
        ..Work::default()
    };
    let new =
        NewTask { scope: Scope::anonymous(), work, ttl_ms: Some(60_000), poll_interval_ms: None, status_message: None };
    let task = Task::new(TaskId::from_random(0, [7; 16]), new, 1);
    let doc = serde_json::to_string(&task).unwrap();
    for absent in ["input_requests", "issued_inputs", "input_responses", "client_capabilities", "scopes", "null"] {
        assert!(!doc.contains(absent), "{absent} in {doc}");
    }
    assert_eq!(serde_json::from_str::<Task>(&doc).unwrap(), task);
    // Records written before the trim, with every field spelled out, still read.
    let mut old = serde_json::to_value(&task).unwrap();
    for map in ["input_requests", "issued_inputs", "input_responses"] {
        old[map] = serde_json::json!({});
    }
    old["work"]["client_capabilities"] = serde_json::json!({});
    old["work"]["caller"]["scopes"] = Value::Null;
    assert_eq!(serde_json::from_value::<Task>(old).unwrap(), task);
}

#[test]
fn anonymous_callers_pass_every_scope_check() {
    assert!(Caller::anonymous().missing(&["deploy".into()]).is_empty());
    let c = Caller::new("t", "s", vec!["read".into()]);
    assert_eq!(c.missing(&["read".into(), "deploy".into()]), ["deploy"]);
}
