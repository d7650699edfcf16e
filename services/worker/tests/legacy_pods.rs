//! The 2025-11-25 era across `presa-api` processes on one Redis, as behind a
//! round-robin balancer without session affinity: a session issued by one
//! pod serves on another, a tool call's elicitation answered through the
//! other pod reaches the handler, and a `DELETE` on one ends it on both.

use std::{path::PathBuf, time::Duration};

use futures::StreamExt;
use presa_testkit::{LegacyClient, Pod, TestRedis, free_port, legacy::events, redis::unique_prefix};
use serde_json::json;

fn api_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_presa-worker")).with_file_name("presa-api")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elicitation_answer_posted_to_pod_b_completes_the_call_on_pod_a() {
    let redis = TestRedis::start().await;
    let prefix = unique_prefix();
    let env = [
        ("PRESA_REDIS_URL", redis.url()),
        ("PRESA_REDIS_PREFIX", prefix.as_str()),
        ("PRESA_STATE_SECRET", "legacy-pods-test-secret-at-least-32-bytes"),
    ];
    let a = Pod::start("api-a", &api_bin(), free_port(), &[], &env).await;
    let b = Pod::start("api-b", &api_bin(), free_port(), &[], &env).await;
    let (url_a, url_b) = (format!("{}/mcp", a.base()), format!("{}/mcp", b.base()));

    // Initialized on A; B serves the same session (nothing of it lives in a pod).
    let on_a = LegacyClient::connect(&url_a, json!({ "elicitation": {} }), None).await;
    let on_b = on_a.at(&url_b);
    let listed = on_b.request("tools/list", json!({})).await;
    assert_eq!(listed.status, 200, "{:?}\n{}", listed.messages, b.log());
    assert_eq!(on_b.request("logging/setLevel", json!({ "level": "info" })).await.status, 200);

    // The call runs on A and asks on A's stream; the answer goes to B.
    let call = json!({ "jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": { "name": "test_elicitation", "arguments": { "message": "Name and email?" } } });
    let mut stream = events(on_a.start(&call).await);
    let ask =
        tokio::time::timeout(Duration::from_secs(10), stream.next()).await.unwrap().expect("a request on A's stream");
    assert_eq!(ask["method"], "elicitation/create", "{ask}");
    let answer = json!({ "jsonrpc": "2.0", "id": ask["id"],
        "result": { "action": "accept", "content": { "username": "pod-b", "email": "b@example.com" } } });
    let posted = on_b.raw(&answer).await;
    assert_eq!(posted.status, 202, "{:?}\n{}", posted.messages, b.log());
    let done = tokio::time::timeout(Duration::from_secs(10), stream.next()).await.unwrap().expect("the call's result");
    assert_eq!(done["id"], 5, "{done}\n{}", a.log());
    let text = done["result"]["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.contains("action=accept") && text.contains("pod-b"), "{done}");

    // DELETE through B ends the session on A too.
    assert_eq!(on_b.delete().await, 200);
    assert_eq!(on_a.request("ping", json!({})).await.status, 404);
}
