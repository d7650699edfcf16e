//! Idempotent creates over real HTTP against the embedded server: a
//! `tools/call` retried with the same `Idempotency-Key` (header, or
//! `_meta["presa/idempotencyKey"]`) returns the first task; misuse is a
//! clear -32602.

use presa_server::ServerConfig;
use presa_testkit::*;
use serde_json::{Value, json};

fn call(label: &str, key_in_meta: Option<&str>) -> Value {
    let mut params = json!({ "name": "slow_compute", "arguments": { "seconds": 0, "label": label } });
    if let Some(key) = key_in_meta {
        params["_meta"] = json!({ "presa/idempotencyKey": key });
    }
    params
}

#[tokio::test]
async fn a_retried_create_with_the_same_key_returns_the_first_task() {
    let srv = embedded(ServerConfig::default()).await;
    let c = Client::new(&srv.url, tasks_caps()).with_scope("alice");
    let key = [("idempotency-key", "deploy-42")];
    let (status, first) = c.send_with_headers("tools/call", call("a", None), &key).await;
    assert_eq!(status, 200, "{first}");
    let id = task_id(&first["result"]);
    let (_, again) = c.send_with_headers("tools/call", call("a", None), &key).await;
    assert_eq!(task_id(&again["result"]), id, "the retry returns the first task: {again}");
    // The same key in `_meta` (a client that cannot set headers) is the same key.
    let (_, by_meta) = c.send("tools/call", call("a", Some("deploy-42"))).await;
    assert_eq!(task_id(&by_meta["result"]), id, "{by_meta}");
    assert_eq!(c.wait_status(&id, "completed").await["result"]["content"][0]["text"], "Completed a");
    // Without a key, or under another principal, the same call is a new task.
    let (_, unkeyed) = c.send("tools/call", call("a", None)).await;
    assert_ne!(task_id(&unkeyed["result"]), id);
    let bob = Client::new(&srv.url, tasks_caps()).with_scope("bob");
    let (_, theirs) = bob.send_with_headers("tools/call", call("a", None), &key).await;
    assert_ne!(task_id(&theirs["result"]), id, "keys are per principal: {theirs}");
    let (status, e) = bob.send("tasks/get", json!({ "taskId": id })).await;
    assert_eq!(status, 400, "bob cannot read alice's task: {e}");
}

#[tokio::test]
async fn misused_keys_are_refused() {
    let srv = embedded(ServerConfig::default().with(|c| {
        c.max_idempotency_key_bytes = 16;
    }))
    .await;
    let c = Client::new(&srv.url, tasks_caps()).with_scope("alice");
    let (status, _) = c.send_with_headers("tools/call", call("a", None), &[("idempotency-key", "k1")]).await;
    assert_eq!(status, 200);
    let refused = |v: &Value| (v["error"]["code"].as_i64(), v["error"]["message"].as_str().unwrap_or("").to_string());

    let (status, v) = c.send_with_headers("tools/call", call("other label", None), &[("idempotency-key", "k1")]).await;
    let (code, message) = refused(&v);
    assert_eq!((status, code), (400, Some(-32602)), "{v}");
    assert!(message.contains("different request"), "{message}");

    let (status, v) = c.send_with_headers("tools/call", call("a", None), &[("idempotency-key", &"k".repeat(17))]).await;
    let (code, message) = refused(&v);
    assert_eq!((status, code), (400, Some(-32602)), "{v}");
    assert!(message.contains("max_idempotency_key_bytes"), "{message}");

    let (status, v) = c.send("tools/call", call("a", Some(""))).await;
    assert_eq!((status, refused(&v).0), (400, Some(-32602)), "an empty key: {v}");

    let (status, v) = c.send_with_headers("tools/call", call("a", Some("k2")), &[("idempotency-key", "k3")]).await;
    let (code, message) = refused(&v);
    assert_eq!((status, code), (400, Some(-32602)), "{v}");
    assert!(message.contains("does not match"), "{message}");
}
