//! Fair shares between principals over real HTTP against the embedded server:
//! one principal's parked tasks, open connections, in-request calls or quota
//! never stop another's work.

use std::time::{Duration, Instant};

use presa_http::{HttpConfig, ServeLimits};
use presa_server::ServerConfig;
use presa_testkit::*;
use serde_json::json;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

/// The test embedded server's HTTP settings: callers named by `x-test-scope`.
fn http() -> HttpConfig {
    HttpConfig { authenticator: std::sync::Arc::new(HeaderScopes), ..HttpConfig::default() }
}

/// A's 64 tasks parked on input (as many as the worker's default
/// concurrency) do not hold the worker: B's 0-second task completes at once.
#[tokio::test]
async fn parked_tasks_do_not_hold_worker_slots() {
    let srv = embedded(ServerConfig::default()).await;
    let a = Client::new(&srv.url, tasks_caps()).with_scope("a");
    let mut parked = Vec::new();
    for i in 0..64 {
        parked.push(task_id(&a.call_tool("confirm_delete", json!({ "filename": format!("f{i}") })).await));
    }
    for id in &parked {
        a.wait_status(id, "input_required").await;
    }
    let b = Client::new(&srv.url, tasks_caps()).with_scope("b");
    let started = Instant::now();
    let id = task_id(&b.call_tool("slow_compute", json!({ "seconds": 0, "label": "b" })).await);
    let done = b.wait_task_for(&id, "completed", Duration::from_secs(5), |t| t["status"] == "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "Completed b");
    assert!(started.elapsed() < Duration::from_secs(5), "B waited behind A's parked tasks");
    // The parked tasks still resume when answered.
    let answer = json!({ "confirm-delete": { "action": "accept", "content": { "confirm": true } } });
    a.ok("tasks/update", json!({ "taskId": parked[0], "inputResponses": answer })).await;
    assert_eq!(a.wait_status(&parked[0], "completed").await["result"]["content"][0]["text"], "Delete confirmed: true");
}

fn addr_of(url: &str) -> String {
    url.trim_start_matches("http://").trim_end_matches("/mcp").to_string()
}

/// Read from `conn` until the server closes it (EOF or reset), `secs` at most.
async fn closed_within(conn: &mut TcpStream, secs: u64) -> bool {
    let mut buf = [0u8; 1024];
    let read_to_end = async {
        loop {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(secs), read_to_end).await.is_ok()
}

/// A's 1,000 slow connections (silent, or dribbling their headers) do not
/// stop `/healthz` or B's requests, and each is closed by the header timeout.
#[tokio::test]
async fn slow_connections_do_not_starve_others() {
    let limits = ServeLimits { header_read_timeout: Duration::from_secs(2), ..ServeLimits::default() };
    let srv = embedded_limited(ServerConfig::default(), http(), 0, limits).await;
    let addr = addr_of(&srv.url);
    let mut slow = Vec::new();
    for _ in 0..1000 {
        slow.push(TcpStream::connect(&addr).await.expect("connect"));
    }
    // Half of them dribble a request head, a byte every 100 ms (for 20 s at most).
    let mut dribblers = Vec::new();
    for mut conn in slow.split_off(500) {
        dribblers.push(tokio::spawn(async move {
            for b in
                b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n".iter().cycle().take(200)
            {
                if conn.write_all(&[*b]).await.is_err() {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            false
        }));
    }
    let http = reqwest::Client::new();
    let health = http.get(srv.url.replace("/mcp", "/healthz")).send().await.expect("healthz");
    assert_eq!(health.status(), 200);
    let b = Client::new(&srv.url, tasks_caps()).with_scope("b");
    let id = task_id(&b.call_tool("slow_compute", json!({ "seconds": 0, "label": "b" })).await);
    b.wait_status(&id, "completed").await;
    // The silent ones are closed by the header timeout, the dribblers too.
    for conn in slow.iter_mut().take(20) {
        assert!(closed_within(conn, 10).await, "a silent connection outlived the header timeout");
    }
    for d in dribblers {
        assert!(d.await.unwrap(), "a dribbling connection outlived the header timeout");
    }
}

/// `Content-Length: 10000000000`: 413 at once, without sending (or reading) a body.
#[tokio::test]
async fn declared_oversize_body_gets_413_at_once() {
    let srv = embedded(ServerConfig::default()).await;
    let mut conn = TcpStream::connect(addr_of(&srv.url)).await.unwrap();
    conn.write_all(
        b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 10000000000\r\n\r\n",
    )
    .await
    .unwrap();
    let mut head = vec![0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut head)).await.expect("no answer").unwrap();
    let head = String::from_utf8_lossy(&head[..n]);
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");
}

/// A result over `max_result_bytes` ends the task `failed`, saying why; no truncation.
#[tokio::test]
async fn oversized_result_fails_the_task_with_a_clear_message() {
    let srv = embedded(ServerConfig { max_result_bytes: 300, ..ServerConfig::default() }).await;
    let c = Client::new(&srv.url, tasks_caps());
    let id = task_id(&c.call_tool("slow_compute", json!({ "seconds": 0, "label": "x".repeat(400) })).await);
    let failed = c.wait_status(&id, "failed").await;
    assert!(failed.get("result").is_none(), "{failed}");
    let message = failed["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("300-byte limit (max_result_bytes)"), "{failed}");
}

/// A task bigger than `max_task_bytes` is refused with -32602 and nothing
/// stored; an answer that would grow a task past it is refused the same way.
#[tokio::test]
async fn oversized_tasks_and_answers_are_refused() {
    let srv = embedded(ServerConfig { max_task_bytes: 2048, ..ServerConfig::default() }).await;
    let c = Client::new(&srv.url, tasks_caps());
    let (status, e) =
        c.err("tools/call", json!({ "name": "slow_compute", "arguments": { "label": "x".repeat(3000) } })).await;
    assert_eq!((status, e["code"].as_i64()), (400, Some(-32602)), "{e}");
    assert!(e["message"].as_str().unwrap().contains("max_task_bytes"), "{e}");

    let id = task_id(&c.call_tool("confirm_delete", json!({ "filename": "a" })).await);
    c.wait_status(&id, "input_required").await;
    let big =
        json!({ "confirm-delete": { "action": "accept", "content": { "confirm": true, "note": "n".repeat(3000) } } });
    let (status, e) = c.err("tasks/update", json!({ "taskId": id, "inputResponses": big })).await;
    assert_eq!((status, e["code"].as_i64()), (400, Some(-32602)), "{e}");
    assert!(e["message"].as_str().unwrap().contains("max_task_bytes"), "{e}");
    assert_eq!(c.get_task(&id).await["status"], "input_required", "nothing was stored");
    let small = json!({ "confirm-delete": { "action": "accept", "content": { "confirm": true } } });
    c.ok("tasks/update", json!({ "taskId": id, "inputResponses": small })).await;
    c.wait_status(&id, "completed").await;
}

/// A at its active-task quota: A is refused (retryable), B still creates.
#[tokio::test]
async fn a_principal_at_its_quota_does_not_stop_another() {
    let srv = embedded(ServerConfig { max_active_tasks_per_scope: Some(3), ..ServerConfig::default() }).await;
    let a = Client::new(&srv.url, tasks_caps()).with_scope("a");
    for i in 0..3 {
        task_id(&a.call_tool("slow_compute", json!({ "seconds": 30, "label": format!("a{i}") })).await);
    }
    let (status, e) = a.err("tools/call", json!({ "name": "slow_compute", "arguments": { "seconds": 30 } })).await;
    assert_eq!(status, 503);
    assert_eq!(e["data"]["retryable"], true);
    let b = Client::new(&srv.url, tasks_caps()).with_scope("b");
    let id = task_id(&b.call_tool("slow_compute", json!({ "seconds": 0, "label": "b" })).await);
    b.wait_status(&id, "completed").await;
}

/// Listen streams are bounded per principal: A at its limit gets a
/// retryable -32603 (HTTP 503), B still listens.
#[tokio::test]
async fn listen_streams_are_bounded_per_principal() {
    let config = ServerConfig { max_listen_streams_per_scope: 2, ..ServerConfig::default() };
    let srv = embedded(config).await;
    let a = Client::new(&srv.url, json!({})).with_scope("a");
    let mut open = Vec::new();
    for _ in 0..2 {
        let (status, mut s) = a.listen(json!({ "toolsListChanged": true })).await;
        assert_eq!(status, 200);
        assert_eq!(next_within(&mut s, 5).await["method"], "notifications/subscriptions/acknowledged");
        open.push(s);
    }
    let (status, e) = a.err("subscriptions/listen", json!({ "notifications": { "toolsListChanged": true } })).await;
    assert_eq!(status, 503);
    assert_eq!(e["data"], json!({ "retryable": true, "limit": "max_listen_streams_per_scope" }));
    let b = Client::new(&srv.url, json!({})).with_scope("b");
    let (status, mut s) = b.listen(json!({ "toolsListChanged": true })).await;
    assert_eq!(status, 200);
    assert_eq!(next_within(&mut s, 5).await["method"], "notifications/subscriptions/acknowledged");
}

/// A kept-alive connection with no request is closed after the idle timeout;
/// a body that does not arrive in time fails its request.
#[tokio::test]
async fn idle_connections_and_slow_bodies_are_cut() {
    let limits = ServeLimits {
        idle_timeout: Duration::from_millis(500),
        body_read_timeout: Duration::from_millis(500),
        ..ServeLimits::default()
    };
    let srv = embedded_limited(ServerConfig::default(), http(), 0, limits).await;
    let mut conn = TcpStream::connect(addr_of(&srv.url)).await.unwrap();
    conn.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").await.unwrap();
    let mut buf = vec![0u8; 256];
    let n = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut buf)).await.expect("no answer").unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    assert!(closed_within(&mut conn, 5).await, "an idle kept-alive connection outlived the idle timeout");

    let mut conn = TcpStream::connect(addr_of(&srv.url)).await.unwrap();
    conn.write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"jsonrpc\"")
        .await
        .unwrap();
    let n = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut buf)).await.expect("no answer").unwrap();
    let head = String::from_utf8_lossy(&buf[..n]);
    assert!(head.starts_with("HTTP/1.1 4"), "a late body fails its request: {head}");
}

/// Malformed task ids never reach a store key and answer exactly like unknown ones.
#[tokio::test]
async fn malformed_task_ids_answer_like_unknown_ones() {
    let srv = embedded(ServerConfig::default()).await;
    let c = Client::new(&srv.url, tasks_caps());
    let real = task_id(&c.call_tool("slow_compute", json!({ "seconds": 0 })).await);
    let body = &real[4..];
    for id in [
        "tasks-conformance-nonexistent-12345".to_string(),
        format!("p00.{}*", &body[..21]),
        format!("p0.{body}"),
        format!("p00.{{{}", &body[1..]),
        "p00.AAAAAAAAAAAAAAAAAAAAAB".to_string(),
    ] {
        for method in ["tasks/get", "tasks/cancel"] {
            let (status, e) = c.err(method, json!({ "taskId": id })).await;
            assert_eq!((status, e["code"].as_i64()), (400, Some(-32602)), "{method} {id}: {e}");
            assert_eq!(e["message"], "Unknown or inaccessible taskId", "{method} {id}");
        }
    }
}

/// Alice fires 100 in-request calls (no Tasks extension: they run in the
/// request): she gets her share (`max_inflight_calls_per_scope`, 10 by
/// default), the rest are refused at once with 429 and `retryAfterMs`, and
/// Bob's plain call completes within a second while hers run.
#[tokio::test]
async fn bob_is_served_while_alice_holds_her_whole_in_request_share() {
    let srv = embedded(ServerConfig::default()).await;
    let alice = Client::new(&srv.url, json!({})).with_scope("alice");
    let mut calls = Vec::new();
    for i in 0..100 {
        let alice = alice.clone();
        calls.push(tokio::spawn(async move {
            alice
                .send(
                    "tools/call",
                    json!({ "name": "slow_compute", "arguments": { "seconds": 3, "label": format!("a{i}") } }),
                )
                .await
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while srv.server.inflight_calls() < presa_server::DEFAULT_MAX_INFLIGHT_CALLS_PER_SCOPE {
        assert!(Instant::now() < deadline, "alice's calls never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let bob = Client::new(&srv.url, json!({})).with_scope("bob");
    let started = Instant::now();
    let r = bob.call_tool("slow_compute", json!({ "seconds": 0, "label": "bob" })).await;
    let waited = started.elapsed();
    println!("bob's call, alice holding her {} places: {waited:?}", srv.server.inflight_calls());
    assert_eq!(r["content"][0]["text"], "Completed bob");
    assert!(waited < Duration::from_secs(1), "bob waited {waited:?}");
    let (mut ran, mut refused) = (0, 0);
    for c in calls {
        let (status, v) = c.await.unwrap();
        if status == 429 {
            assert_eq!(v["error"]["code"], -32023, "{v}");
            assert_eq!(v["error"]["data"]["limit"], "max_inflight_calls_per_scope", "{v}");
            assert!(v["error"]["data"]["retryAfterMs"].as_u64().is_some(), "{v}");
            refused += 1;
        } else {
            assert_eq!(status, 200, "{v}");
            ran += 1;
        }
    }
    assert_eq!(ran, presa_server::DEFAULT_MAX_INFLIGHT_CALLS_PER_SCOPE, "alice's share ran, {refused} refused");
    assert_eq!(srv.server.inflight_calls(), 0);
}

/// An in-request call past `call_timeout` fails with an error naming the
/// limit, its handler cancelled, and its place given back.
#[tokio::test]
async fn an_in_request_call_past_its_deadline_fails_clearly() {
    let config = ServerConfig { call_timeout: Some(Duration::from_millis(500)), ..ServerConfig::default() };
    let srv = embedded(config).await;
    let c = Client::new(&srv.url, json!({})).with_scope("a");
    let started = Instant::now();
    let (status, e) = c.err("tools/call", json!({ "name": "slow_compute", "arguments": { "seconds": 30 } })).await;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(status, 500, "{e}");
    assert_eq!(e["code"], -32603);
    assert_eq!(e["data"], json!({ "limit": "call_timeout", "timeoutMs": 500 }));
    assert!(e["message"].as_str().unwrap().contains("timed out"), "{e}");
    assert_eq!(srv.server.inflight_calls(), 0);
    // A call within the deadline is untouched.
    let r = c.call_tool("slow_compute", json!({ "seconds": 0, "label": "quick" })).await;
    assert_eq!(r["content"][0]["text"], "Completed quick");
}
