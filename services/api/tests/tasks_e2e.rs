//! The Tasks extension end to end over real HTTP against the embedded
//! server: notifications, cancellation races, TTL expiry, scopes, limits.

use std::time::Duration;

use futures::StreamExt;
use presa_server::ServerConfig;
use presa_testkit::*;
use serde_json::{Value, json};

/// Subscribe, then watch one task go working → input_required → working →
/// completed, each state pushed as `notifications/tasks` with the full
/// DetailedTask and the subscription id.
#[tokio::test]
async fn listen_pushes_every_change_of_a_watched_task() {
    let srv = embedded(ServerConfig::default()).await;
    let c = Client::new(&srv.url, tasks_caps());
    let id = task_id(&c.call_tool("deploy_release", json!({ "version": "2.0.0", "step_seconds": 0.3 })).await);
    let (status, mut stream) = c.listen(json!({ "taskIds": [id] })).await;
    assert_eq!(status, 200);
    let ack = next_within(&mut stream, 5).await;
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(ack["params"]["notifications"]["taskIds"], json!([id]));
    assert_eq!(ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 77);

    let mut seen: Vec<String> = Vec::new();
    let mut answered = false;
    while seen.last().map(String::as_str) != Some("completed") {
        let n = next_within(&mut stream, 10).await;
        assert_eq!(n["method"], "notifications/tasks", "{n}");
        let p = &n["params"];
        assert_eq!(p["taskId"], id.as_str());
        assert_eq!(p["_meta"]["io.modelcontextprotocol/subscriptionId"], 77);
        assert!(p.get("resultType").is_none());
        let status = p["status"].as_str().unwrap().to_string();
        match status.as_str() {
            "input_required" => {
                assert_eq!(p["inputRequests"]["approve-2.0.0"]["method"], "elicitation/create");
                if !answered {
                    answered = true;
                    let ack = c
                        .ok(
                            "tasks/update",
                            json!({ "taskId": id, "inputResponses": {
                                "approve-2.0.0": { "action": "accept", "content": { "approve": true } } } }),
                        )
                        .await;
                    assert_eq!(ack["resultType"], "complete");
                }
            }
            "completed" => assert_eq!(p["result"]["content"][0]["text"], "Released 2.0.0 to production"),
            "working" => assert!(p.get("result").is_none() && p.get("inputRequests").is_none()),
            other => panic!("unexpected status {other}: {n}"),
        }
        if seen.last() != Some(&status) {
            seen.push(status);
        }
    }
    assert_eq!(seen, ["working", "input_required", "working", "completed"]);
}

/// Unknown and other-scope ids are dropped silently from the acknowledgement.
#[tokio::test]
async fn listen_drops_unknown_and_inaccessible_ids() {
    let srv = embedded(ServerConfig::default()).await;
    let alice = Client::new(&srv.url, tasks_caps()).with_scope("alice");
    let bob = Client::new(&srv.url, tasks_caps()).with_scope("bob");
    let mine = task_id(&alice.call_tool("slow_compute", json!({ "seconds": 30, "label": "a" })).await);
    let theirs = task_id(&bob.call_tool("slow_compute", json!({ "seconds": 30, "label": "b" })).await);
    let (_, mut stream) = alice.listen(json!({ "taskIds": [mine, theirs, "p00.nope", mine] })).await;
    let ack = next_within(&mut stream, 5).await;
    assert_eq!(ack["params"]["notifications"]["taskIds"], json!([mine]));
    // The other scope's task never shows up on this stream.
    let first = next_within(&mut stream, 5).await;
    assert_eq!(first["params"]["taskId"], mine.as_str());
    bob.ok("tasks/cancel", json!({ "taskId": theirs })).await;
    alice.ok("tasks/cancel", json!({ "taskId": mine })).await;
    let next = next_within(&mut stream, 5).await;
    assert_eq!(next["params"]["taskId"], mine.as_str());
    assert_eq!(next["params"]["status"], "cancelled");
}

/// `taskIds` without the Tasks declaration is -32021; bad lists are -32602.
#[tokio::test]
async fn listen_validates_task_ids() {
    let srv = embedded(ServerConfig::default()).await;
    let plain = Client::new(&srv.url, json!({}));
    let (status, e) = plain.err("subscriptions/listen", json!({ "notifications": { "taskIds": ["x"] } })).await;
    assert_eq!((status, e["code"].as_i64()), (400, Some(-32021)));
    assert_eq!(e["data"]["requiredCapabilities"]["extensions"][TASKS], json!({}));
    let c = Client::new(&srv.url, tasks_caps());
    let too_many: Vec<String> = (0..101).map(|i| format!("id{i}")).collect();
    for bad in [json!(too_many), json!("x"), json!([""]), json!(["x".repeat(257)]), json!([1])] {
        let (status, e) = c.err("subscriptions/listen", json!({ "notifications": { "taskIds": bad } })).await;
        assert_eq!((status, e["code"].as_i64()), (400, Some(-32602)), "{bad}");
    }
}

/// A cancel racing a completion ends with exactly one terminal outcome,
/// consistent on every read, and stays that way.
#[tokio::test]
async fn cancel_racing_completion_has_one_outcome() {
    let srv = embedded(ServerConfig::default()).await;
    let c = Client::new(&srv.url, tasks_caps());
    let mut outcomes = std::collections::BTreeMap::<String, u32>::new();
    for i in 0..20u64 {
        let id = task_id(&c.call_tool("slow_compute", json!({ "seconds": 0.02, "label": "race" })).await);
        tokio::time::sleep(Duration::from_millis(i % 5 * 6)).await;
        c.ok("tasks/cancel", json!({ "taskId": id })).await;
        let t = c
            .wait_task(&id, "terminal", |t| {
                ["completed", "cancelled", "failed"].contains(&t["status"].as_str().unwrap())
            })
            .await;
        let status = t["status"].as_str().unwrap().to_string();
        match status.as_str() {
            "completed" => assert_eq!(t["result"]["content"][0]["text"], "Completed race"),
            "cancelled" => assert!(t.get("result").is_none() && t.get("error").is_none()),
            other => panic!("a race must not fail the task: {other}"),
        }
        tokio::time::sleep(Duration::from_millis(60)).await;
        let again = c.get_task(&id).await;
        assert_eq!(again["status"], status.as_str(), "terminal status changed");
        assert_eq!(again["lastUpdatedAt"], t["lastUpdatedAt"]);
        *outcomes.entry(status).or_default() += 1;
    }
    assert_eq!(outcomes.values().sum::<u32>(), 20);
}

/// After ttlMs the task is gone: -32602 on every task method.
#[tokio::test]
async fn expired_tasks_are_unknown() {
    let srv = embedded(ServerConfig::default().with(|c| {
        c.task_ttl_ms = Some(400);
    }))
    .await;
    let c = Client::new(&srv.url, tasks_caps());
    let created = c.call_tool("slow_compute", json!({ "seconds": 0, "label": "ttl" })).await;
    assert_eq!(created["ttlMs"], 400);
    let id = task_id(&created);
    c.wait_status(&id, "completed").await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    for (method, extra) in [
        ("tasks/get", json!({})),
        ("tasks/cancel", json!({})),
        ("tasks/update", json!({ "inputResponses": { "k": { "action": "accept" } } })),
    ] {
        let mut params = json!({ "taskId": id });
        params.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        let (status, e) = c.err(method, params).await;
        assert_eq!((status, e["code"].as_i64()), (400, Some(-32602)), "{method}");
    }
}

/// `ttlMs: null` (never expire) is allowed.
#[tokio::test]
async fn null_ttl_is_sent_as_null() {
    let srv = embedded(ServerConfig::default().with(|c| {
        c.task_ttl_ms = None;
    }))
    .await;
    let c = Client::new(&srv.url, tasks_caps());
    let created = c.call_tool("slow_compute", json!({ "seconds": 0, "label": "forever" })).await;
    assert!(created.get("ttlMs").is_some_and(Value::is_null), "{created}");
    let id = task_id(&created);
    assert!(c.wait_status(&id, "completed").await["ttlMs"].is_null());
}

/// Another scope's task answers exactly like an unknown one, on every method,
/// and is left untouched.
#[tokio::test]
async fn other_scopes_cannot_see_or_touch_a_task() {
    let srv = embedded(ServerConfig::default()).await;
    let alice = Client::new(&srv.url, tasks_caps()).with_scope("alice");
    let eve = Client::new(&srv.url, tasks_caps()).with_scope("eve");
    let id = task_id(&alice.call_tool("confirm_delete", json!({ "filename": "secret.txt" })).await);
    alice.wait_status(&id, "input_required").await;
    let answer = json!({ "confirm-delete": { "action": "accept", "content": { "confirm": true } } });
    for (method, params) in [
        ("tasks/get", json!({ "taskId": id })),
        ("tasks/update", json!({ "taskId": id, "inputResponses": answer })),
        ("tasks/cancel", json!({ "taskId": id })),
    ] {
        let (status, theirs) = eve.err(method, params.clone()).await;
        let mut unknown = params;
        unknown["taskId"] = json!("p00.AAAAAAAAAAAAAAAAAAAAAA");
        let (ustatus, none) = eve.err(method, unknown).await;
        assert_eq!((status, &theirs), (ustatus, &none), "{method}: other scope must look unknown");
        assert_eq!(theirs["code"], -32602);
    }
    let t = alice.get_task(&id).await;
    assert_eq!(t["status"], "input_required", "eve's update or cancel must not apply");
    alice.ok("tasks/cancel", json!({ "taskId": id })).await;
}

/// Past the per-scope limit: -32023 with `retryable`, `retryAfterMs` and
/// the limit, HTTP 429, and nothing stored; other scopes are unaffected.
#[tokio::test]
async fn capacity_limit_is_retryable_and_stores_nothing() {
    let srv = embedded(ServerConfig::default().with(|c| {
        c.max_active_tasks_per_scope = Some(2);
    }))
    .await;
    let c = Client::new(&srv.url, tasks_caps()).with_scope("busy");
    let a = task_id(&c.call_tool("slow_compute", json!({ "seconds": 30, "label": "1" })).await);
    task_id(&c.call_tool("slow_compute", json!({ "seconds": 30, "label": "2" })).await);
    let (status, e) = c.err("tools/call", json!({ "name": "slow_compute", "arguments": { "seconds": 30 } })).await;
    assert_eq!(status, 429);
    assert_eq!(e["code"], -32023);
    assert_eq!(e["data"], json!({ "retryable": true, "retryAfterMs": 1000, "limit": "max_active_tasks_per_scope" }));
    let other = Client::new(&srv.url, tasks_caps()).with_scope("idle");
    task_id(&other.call_tool("slow_compute", json!({ "seconds": 0, "label": "ok" })).await);
    c.ok("tasks/cancel", json!({ "taskId": a })).await;
    task_id(&c.call_tool("slow_compute", json!({ "seconds": 0, "label": "3" })).await);
}

/// Oversized task input is refused before anything is stored.
#[tokio::test]
async fn task_input_size_is_bounded() {
    let srv = embedded(ServerConfig::default().with(|c| {
        c.max_task_input_bytes = 1024;
    }))
    .await;
    let c = Client::new(&srv.url, tasks_caps());
    let (status, e) =
        c.err("tools/call", json!({ "name": "slow_compute", "arguments": { "label": "x".repeat(2000) } })).await;
    assert_eq!((status, e["code"].as_i64()), (400, Some(-32602)));
    assert!(e["message"].as_str().unwrap().contains("1024"));
}

/// Task methods validate their params before any lookup.
#[tokio::test]
async fn task_methods_validate_params() {
    let srv = embedded(ServerConfig::default()).await;
    let c = Client::new(&srv.url, tasks_caps());
    let plain = Client::new(&srv.url, json!({}));
    for m in ["tasks/get", "tasks/update", "tasks/cancel"] {
        let (_, e) = plain.err(m, json!({ "taskId": "gate-test", "inputResponses": {} })).await;
        assert_eq!(e["code"], -32021, "{m} undeclared");
        let (_, e) = c.err(m, json!({ "taskId": "" })).await;
        assert_eq!(e["code"], -32602, "{m} empty id");
        let (_, e) = c.err(m, json!({ "taskId": "x".repeat(300) })).await;
        assert_eq!(e["code"], -32602, "{m} long id");
    }
    let id = task_id(&c.call_tool("slow_compute", json!({ "seconds": 30 })).await);
    for bad in [json!(null), json!([]), json!({ "k": 1 }), json!({ "": {} })] {
        let (_, e) = c.err("tasks/update", json!({ "taskId": id, "inputResponses": bad })).await;
        assert_eq!(e["code"], -32602, "{bad}");
    }
    // Unknown keys are ignored, and acked.
    let ack =
        c.ok("tasks/update", json!({ "taskId": id, "inputResponses": { "unknown-key": { "ignored": true } } })).await;
    assert_eq!(ack["resultType"], "complete");
    for k in ["taskId", "status", "result", "error", "inputRequests"] {
        assert!(ack.get(k).is_none(), "{k}");
    }
    c.ok("tasks/cancel", json!({ "taskId": id })).await;
    assert_eq!(c.wait_status(&id, "cancelled").await["status"], "cancelled");
    // Cancelling a terminal task is an idempotent ack.
    assert_eq!(c.ok("tasks/cancel", json!({ "taskId": id })).await["resultType"], "complete");
}

/// The long-running example: status messages per step, a confirmation
/// midway, then a structured result.
#[tokio::test]
async fn deploy_release_reports_steps_and_asks_midway() {
    let srv = embedded(ServerConfig::default()).await;
    let c = Client::new(&srv.url, tasks_caps());
    let id = task_id(&c.call_tool("deploy_release", json!({ "version": "1.2.3", "step_seconds": 0.05 })).await);
    let parked = c.wait_status(&id, "input_required").await;
    assert_eq!(parked["statusMessage"], "Waiting for approval to release 1.2.3 to production");
    let key = parked["inputRequests"].as_object().unwrap().keys().next().unwrap().clone();
    assert_eq!(key, "approve-1.2.3");
    let answer = json!({ key: { "action": "accept", "content": { "approve": true } } });
    c.ok("tasks/update", json!({ "taskId": id, "inputResponses": answer })).await;
    let done = c.wait_status(&id, "completed").await;
    assert_eq!(done["result"]["structuredContent"]["environment"], "production");
    assert_eq!(done["result"]["content"][0]["text"], "Released 1.2.3 to production");
}

/// On shutdown, listen streams end with the graceful-closure result.
#[tokio::test]
async fn shutdown_closes_listen_streams_gracefully() {
    let srv = embedded(ServerConfig::default()).await;
    let c = Client::new(&srv.url, json!({}));
    let (_, mut stream) = c.listen(json!({ "toolsListChanged": true })).await;
    assert_eq!(next_within(&mut stream, 5).await["method"], "notifications/subscriptions/acknowledged");
    c.call_tool("test_trigger_tool_change", json!({})).await;
    let changed = next_within(&mut stream, 5).await;
    assert_eq!(changed["method"], "notifications/tools/list_changed");
    assert_eq!(changed["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 77);
    srv.server.shutdown_token().cancel();
    let closing = next_within(&mut stream, 5).await;
    assert_eq!(closing["id"], 77);
    assert_eq!(closing["result"]["resultType"], "complete");
    assert_eq!(closing["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 77);
    assert!(tokio::time::timeout(Duration::from_secs(5), stream.next()).await.unwrap().is_none());
}

/// Listen streams are bounded per process: past the limit a retryable
/// -32603 (HTTP 503, the pod is full, not the caller); closing a stream frees its place.
#[tokio::test]
async fn listen_streams_are_bounded() {
    let srv = embedded(ServerConfig::default().with(|c| {
        c.max_listen_streams = 1;
    }))
    .await;
    let c = Client::new(&srv.url, json!({}));
    let (status, mut first) = c.listen(json!({ "toolsListChanged": true })).await;
    assert_eq!(status, 200);
    assert_eq!(next_within(&mut first, 5).await["method"], "notifications/subscriptions/acknowledged");
    let (status, e) = c.err("subscriptions/listen", json!({ "notifications": { "toolsListChanged": true } })).await;
    assert_eq!(status, 503);
    assert_eq!(e["data"], json!({ "retryable": true, "retryAfterMs": 1000, "limit": "max_listen_streams" }));
    drop(first);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let (status, _) = c.listen(json!({ "toolsListChanged": true })).await;
        if status == 200 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the closed stream never freed its place");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Embedded, a tool's rate (`metered_job`: 5 a second, bursts of 5) holds
/// tasks back to their turns and refuses a plain call
/// past it with 429, `Retry-After` and `-32023`.
#[tokio::test]
async fn a_tools_rate_holds_tasks_back_and_refuses_plain_calls() {
    let srv = embedded(ServerConfig::default()).await;
    let c = Client::new(&srv.url, tasks_caps());
    let mut ids = Vec::new();
    for _ in 0..12 {
        ids.push(task_id(&c.call_tool("metered_job", json!({})).await));
    }
    let mut starts = Vec::new();
    for id in &ids {
        let done = c.wait_status(id, "completed").await;
        let text = done["result"]["content"][0]["text"].as_str().unwrap();
        starts.push(text.trim_start_matches("Started at ").parse::<u64>().unwrap());
    }
    starts.sort_unstable();
    assert!(starts[11] - starts[0] >= 1_300, "7 starts past the burst at 5/s: {starts:?}");
    let plain = Client::new(&srv.url, json!({}));
    let mut refused = None;
    for _ in 0..8 {
        let (status, retry_after, error) = plain.refused("tools/call", json!({ "name": "metered_job" })).await;
        if status != 200 {
            refused = Some((status, retry_after, error));
            break;
        }
    }
    let (status, retry_after, error) = refused.expect("8 plain calls at once pass a burst of 5");
    assert_eq!((status, retry_after.as_deref()), (429, Some("1")), "{error}");
    assert_eq!(error["code"], -32023, "{error}");
}
