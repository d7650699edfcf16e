//! The 2025-11-25 era across `presa-api` processes on one Redis, as behind a
//! round-robin balancer without session affinity: a session issued by one
//! pod serves on another, a tool call's elicitation answered through the
//! other pod reaches the handler, and a `DELETE` on one ends it on both;
//! and what a session costs an API pod and Redis stays bounded (answers are
//! not fanned out to every subscriber, subscriptions are checked and capped).

use std::{path::PathBuf, time::Duration};

use futures::StreamExt;
use presa_testkit::{
    Client, LegacyClient, Pod, TestRedis, free_port, legacy::events, next_within, redis::unique_prefix,
};
use serde_json::json;

/// The environment of an API pod on `redis` under `prefix`, with the shared state secret.
fn pod_env<'a>(redis: &'a TestRedis, prefix: &'a str) -> [(&'static str, &'a str); 3] {
    [
        ("PRESA_REDIS_URL", redis.url()),
        ("PRESA_REDIS_PREFIX", prefix),
        ("PRESA_STATE_SECRET", "legacy-pods-test-secret-at-least-32-bytes"),
    ]
}

fn api_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_presa-worker")).with_file_name("presa-api")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elicitation_answer_posted_to_pod_b_completes_the_call_on_pod_a() {
    let redis = TestRedis::start().await;
    let prefix = unique_prefix();
    let env = pod_env(&redis, &prefix);
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

/// Resident memory of process `pid`, in bytes.
fn rss_of(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the pod's status");
    let kib = status.lines().find_map(|l| l.strip_prefix("VmRSS:")).and_then(|v| v.split_whitespace().next());
    kib.and_then(|k| k.parse::<u64>().ok()).expect("VmRSS") * 1024
}

/// Bytes Redis uses (`INFO memory`'s `used_memory`).
fn redis_used(redis: &TestRedis) -> u64 {
    let info = redis.cli(&["INFO", "memory"]);
    info.lines().find_map(|l| l.strip_prefix("used_memory:")).and_then(|v| v.trim().parse().ok()).expect("used_memory")
}

/// PUBLISH `n` list changes on `channel`, through one `redis-cli` pipe.
fn publish_many(redis: &TestRedis, channel: &str, n: usize) {
    use std::io::Write;
    let cli = presa_testkit::redis::redis_server_binary().replace("redis-server", "redis-cli");
    let mut child = std::process::Command::new(cli)
        .args(["-h", "127.0.0.1", "-p", &redis.port().to_string()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("redis-cli");
    let mut stdin = child.stdin.take().expect("its stdin");
    for _ in 0..n {
        writeln!(stdin, "PUBLISH {channel} notifications/tools/list_changed").expect("a command");
    }
    drop(stdin);
    assert!(child.wait().expect("redis-cli ran").success());
}

/// On Redis, as the hostile review tried it: a listen stream stalled with
/// notifications it does not read, then 150 answers of 1 MiB posted in a
/// legacy session, move the API pod's memory by a bounded amount (they go
/// to the session's own topic, which nobody waits on, never to the
/// broadcast the stalled stream reads); and 40 subscriptions to 4 MiB URIs
/// store nothing in Redis (before: +166 MB).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_listener_and_large_payloads_cost_a_bounded_amount_on_redis() {
    let redis = TestRedis::spawn();
    let prefix = unique_prefix();
    let env = pod_env(&redis, &prefix);
    let pod = Pod::start("api", &api_bin(), free_port(), &[], &env).await;
    let url = format!("{}/mcp", pod.base());
    let (status, mut stalled) = Client::new(&url, json!({})).listen(json!({ "toolsListChanged": true })).await;
    assert_eq!(status, 200);
    assert_eq!(next_within(&mut stalled, 10).await["method"], "notifications/subscriptions/acknowledged");
    publish_many(&redis, &format!("{prefix}:bus"), 60_000);
    let c = LegacyClient::connect(&url, json!({ "elicitation": {} }), None).await;
    let blob = "a".repeat(1024 * 1024);
    let answer = |i: usize| json!({ "jsonrpc": "2.0", "id": format!("presa-x-{i}"), "result": { "blob": blob } });
    for i in 0..5 {
        assert_eq!(c.raw(&answer(i)).await.status, 202, "{}", pod.log());
    }
    let (pod_before, redis_before) = (rss_of(pod.pid()), redis_used(&redis));
    for i in 0..150 {
        assert_eq!(c.raw(&answer(i)).await.status, 202);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pod_after = rss_of(pod.pid());
    println!(
        "Redis mode, 150 answers of 1 MiB with a stalled listener: API pod RSS {} -> {} MiB",
        pod_before >> 20,
        pod_after >> 20
    );
    assert!(pod_after < pod_before + (64 << 20), "the pod grew from {pod_before} to {pod_after} bytes");

    let huge = format!("test://template/{}/data", "x".repeat(4 * 1024 * 1024 - 100));
    for _ in 0..40 {
        let a = c.request("resources/subscribe", json!({ "uri": huge })).await;
        assert_eq!(a.messages[0]["error"]["data"]["limit"], "max_subscription_uri_bytes", "{:?}", a.messages);
        let a = c.request("resources/subscribe", json!({ "uri": "test://nowhere" })).await;
        assert_eq!(a.messages[0]["error"]["code"], -32002, "{:?}", a.messages);
    }
    let redis_after = redis_used(&redis);
    println!(
        "Redis mode, then 40 subscriptions to 4 MiB URIs: Redis used_memory {} -> {} KiB",
        redis_before >> 10,
        redis_after >> 10
    );
    assert!(redis_after < redis_before + (4 << 20), "Redis grew from {redis_before} to {redis_after} bytes");
    drop(stalled);
}
