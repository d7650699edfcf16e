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
    HttpConfig::default().with(|c| {
        c.access.authenticator = std::sync::Arc::new(HeaderScopes);
    })
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

/// An embedded server with `--auth tokens` (one token, `good-token`) and `limits`.
async fn with_a_token(limits: ServeLimits) -> (Embedded, tempfile::TempDir) {
    use presa_auth::tokens::{StaticTokens, token_digest};
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens");
    std::fs::write(&file, format!("{} acme alice\n", token_digest("good-token"))).unwrap();
    let tokens = StaticTokens::load(&file, presa_http::Challenge::default()).unwrap();
    let http = HttpConfig::default().with(|c| {
        c.access.authenticator = std::sync::Arc::new(tokens);
    });
    (embedded_limited(ServerConfig::default(), http, 0, limits).await, dir)
}

/// A POST /mcp without a token on `conn`; returns the answer's head.
async fn post_without_token(conn: &mut TcpStream) -> String {
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#;
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(head.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 2048];
    let n = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut buf)).await.expect("no answer").unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// With `--max-connections 100`: 100 tokenless connections (each refused
/// with 401, then kept open by the client) and then 100 silent ones do not
/// delay an authenticated request or `/healthz`: a 401 closes its
/// connection, and a new connection at the limit closes an idle one.
#[tokio::test]
async fn tokenless_connections_do_not_delay_others() {
    let (srv, _dir) = with_a_token(ServeLimits { max_connections: 100, ..ServeLimits::default() }).await;
    tokenless_connections_do_not_delay(&srv.url, "good-token").await;
}

/// The same on an API pod over Redis (`presa-api --redis-url`, `--auth tokens`).
#[tokio::test]
async fn tokenless_connections_do_not_delay_others_on_redis() {
    let redis = TestRedis::start().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens");
    std::fs::write(&file, format!("{} acme alice\n", presa_auth::tokens::token_digest("good-token"))).unwrap();
    let prefix = format!("edge{}", std::process::id());
    let args = [
        "--redis-url",
        redis.url(),
        "--redis-prefix",
        &prefix,
        "--auth",
        "tokens",
        "--tokens-file",
        file.to_str().unwrap(),
        "--max-connections",
        "100",
    ];
    let pod = Pod::start("api", std::path::Path::new(env!("CARGO_BIN_EXE_presa-api")), free_port(), &args, &[]).await;
    tokenless_connections_do_not_delay(&pod.url, "good-token").await;
}

/// The scenario of the two tests above, against the MCP endpoint `url` (at
/// most 100 connections) where `token` is valid.
async fn tokenless_connections_do_not_delay(url: &str, token: &str) {
    let addr = addr_of(url);
    let mut refused = Vec::new();
    for _ in 0..100 {
        let mut conn = TcpStream::connect(&addr).await.unwrap();
        let head = post_without_token(&mut conn).await.to_ascii_lowercase();
        assert!(head.starts_with("http/1.1 401"), "{head}");
        assert!(head.contains("connection: close"), "a 401 closes its connection: {head}");
        refused.push(conn);
    }
    for conn in refused.iter_mut().take(10) {
        assert!(closed_within(conn, 2).await, "a refused connection stayed open");
    }
    let mut silent = Vec::new();
    for _ in 0..100 {
        silent.push(TcpStream::connect(&addr).await.unwrap());
    }
    let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
    let started = Instant::now();
    let health = http.get(url.replace("/mcp", "/healthz")).send().await.expect("/healthz answered");
    assert_eq!(health.status(), 200);
    let authenticated = Client { http, ..Client::new(url, json!({})) }.with_bearer(token);
    let (status, listed) = authenticated.send("tools/list", json!({})).await;
    assert_eq!(status, 200, "{listed}");
    assert!(started.elapsed() < Duration::from_secs(2), "waited {:?} behind tokenless connections", started.elapsed());
    // The silent connections made room: the oldest ones were closed.
    assert!(closed_within(&mut silent[0], 2).await, "the oldest silent connection is still open");
}

/// Every connection busy with a request in flight (listen streams): the
/// probes still answer on the connections reserved for them, and any other
/// request on those gets a quick 503 with `Retry-After` instead of hanging.
#[tokio::test]
async fn probes_answer_while_every_connection_is_busy() {
    let limits = ServeLimits { max_connections: 4, probe_connections: 2, ..ServeLimits::default() };
    let srv = embedded_limited(ServerConfig::default(), http(), 0, limits).await;
    let mut streams = Vec::new();
    for i in 0..4 {
        // One HTTP client each: every stream on a connection of its own.
        let c = Client::new(&srv.url, json!({})).with_scope(&format!("s{i}"));
        let (status, mut s) = c.listen(json!({ "toolsListChanged": true })).await;
        assert_eq!(status, 200);
        assert_eq!(next_within(&mut s, 5).await["method"], "notifications/subscriptions/acknowledged");
        streams.push(s);
    }
    let base = srv.url.trim_end_matches("/mcp").to_string();
    for _ in 0..3 {
        for probe in ["/healthz", "/readyz"] {
            let http = reqwest::Client::builder().timeout(Duration::from_secs(3)).build().unwrap();
            let r = http.get(format!("{base}{probe}")).send().await.unwrap_or_else(|e| panic!("{probe}: {e}"));
            assert_eq!(r.status(), 200, "{probe}");
            assert_eq!(r.headers()["connection"], "close", "{probe}");
        }
    }
    let http = reqwest::Client::builder().timeout(Duration::from_secs(3)).build().unwrap();
    let other = Client { http, ..Client::new(&srv.url, json!({})) };
    let resp = other.http.post(&srv.url).body("{}").send().await.expect("a quick answer, not a wait");
    assert_eq!(resp.status(), 503);
    assert_eq!(resp.headers()["retry-after"], "1");
    // A stream ending frees its connection for everything again.
    drop(streams.pop());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        // Until then, the 503 (not JSON) of a probe connection.
        if let Ok((200, _)) = other.try_send("tools/list", json!({})).await {
            break;
        }
        assert!(Instant::now() < deadline, "the freed connection was never served");
        tokio::time::sleep(Duration::from_millis(50)).await;
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
    let srv = embedded(ServerConfig::default().with(|c| {
        c.max_result_bytes = 300;
    }))
    .await;
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
    let srv = embedded(ServerConfig::default().with(|c| {
        c.max_task_bytes = 2048;
    }))
    .await;
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

/// Answers count against the principal's byte quota (not only creation): an
/// answer that would take A's tasks past it is refused with 429 and nothing
/// stored, a small one lands, and B, at the same quota, is unaffected.
#[tokio::test]
async fn answers_count_against_the_byte_quota() {
    let srv = embedded(ServerConfig::default().with(|c| {
        c.max_bytes_per_scope = Some(16 * 1024);
    }))
    .await;
    let a = Client::new(&srv.url, tasks_caps()).with_scope("a");
    let id = task_id(&a.call_tool("confirm_delete", json!({ "filename": "a" })).await);
    a.wait_status(&id, "input_required").await;
    let answer = |note: usize| json!({ "confirm-delete": { "action": "accept", "content": { "confirm": true, "note": "n".repeat(note) } } });
    let (status, e) = a.err("tasks/update", json!({ "taskId": id, "inputResponses": answer(20_000) })).await;
    assert_eq!((status, e["code"].as_i64()), (429, Some(-32023)), "{e}");
    assert_eq!(e["data"]["limit"], "max_bytes_per_scope", "{e}");
    assert_eq!(a.get_task(&id).await["status"], "input_required", "nothing was stored");
    let b = Client::new(&srv.url, tasks_caps()).with_scope("b");
    let other = task_id(&b.call_tool("slow_compute", json!({ "seconds": 0, "label": "b" })).await);
    b.wait_status(&other, "completed").await;
    a.ok("tasks/update", json!({ "taskId": id, "inputResponses": answer(100) })).await;
    a.wait_status(&id, "completed").await;
}

/// `tools/call` of `tool` as `c`'s scope, expected to be refused: (HTTP
/// status, its `Retry-After`, the JSON-RPC error).
async fn refused_with_retry_after(
    c: &Client,
    tool: &str,
    arguments: serde_json::Value,
) -> (u16, Option<String>, serde_json::Value) {
    c.refused("tools/call", json!({ "name": tool, "arguments": arguments })).await
}

/// A at its active-task quota: A is refused with 429 and `Retry-After`
/// (the JSON-RPC error keeps `data.retryAfterMs`), B still creates.
#[tokio::test]
async fn a_principal_at_its_quota_does_not_stop_another() {
    let srv = embedded(ServerConfig::default().with(|c| {
        c.max_active_tasks_per_scope = Some(3);
    }))
    .await;
    let a = Client::new(&srv.url, tasks_caps()).with_scope("a");
    for i in 0..3 {
        task_id(&a.call_tool("slow_compute", json!({ "seconds": 30, "label": format!("a{i}") })).await);
    }
    let args = json!({ "seconds": 30 });
    let (status, retry_after, e) = refused_with_retry_after(&a, "slow_compute", args).await;
    assert_eq!((status, retry_after.as_deref()), (429, Some("1")), "{e}");
    assert_eq!(e["code"], -32023);
    assert_eq!(e["data"], json!({ "retryable": true, "retryAfterMs": 1000, "limit": "max_active_tasks_per_scope" }));
    let b = Client::new(&srv.url, tasks_caps()).with_scope("b");
    let id = task_id(&b.call_tool("slow_compute", json!({ "seconds": 0, "label": "b" })).await);
    b.wait_status(&id, "completed").await;
}

/// On an API pod over Redis too, a principal at its active-task quota gets
/// 429 with `Retry-After` (no worker runs: its one task stays active).
#[tokio::test]
async fn a_principal_at_its_quota_gets_429_on_redis() {
    let redis = TestRedis::start().await;
    let prefix = format!("quota{}", std::process::id());
    let args = ["--redis-url", redis.url(), "--redis-prefix", &prefix, "--max-active-tasks-per-scope", "1"];
    let pod = Pod::start("api", std::path::Path::new(env!("CARGO_BIN_EXE_presa-api")), free_port(), &args, &[]).await;
    let c = Client::new(&pod.url, tasks_caps());
    task_id(&c.call_tool("slow_compute", json!({ "seconds": 30, "label": "one" })).await);
    let (status, retry_after, e) = refused_with_retry_after(&c, "slow_compute", json!({ "seconds": 30 })).await;
    assert_eq!((status, retry_after.as_deref()), (429, Some("1")), "{e}\n{}", pod.log());
    assert_eq!(e["data"], json!({ "retryable": true, "retryAfterMs": 1000, "limit": "max_active_tasks_per_scope" }));
}

/// Listen streams are bounded per principal: A at its limit gets a
/// retryable -32023 (HTTP 429), B still listens.
#[tokio::test]
async fn listen_streams_are_bounded_per_principal() {
    let config = ServerConfig::default().with(|c| {
        c.max_listen_streams_per_scope = 2;
    });
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
    assert_eq!(status, 429);
    assert_eq!(e["data"], json!({ "retryable": true, "retryAfterMs": 1000, "limit": "max_listen_streams_per_scope" }));
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

/// A holds her whole active-task quota in 600-second tasks, more than the
/// worker's 64 slots: she gets her share of them (a quarter), the rest of
/// hers stays queued, and B's 0-second task, created after all of A's, runs
/// while every one of A's is still active.
#[tokio::test]
async fn a_principal_holding_its_whole_quota_does_not_starve_another() {
    let srv = embedded(ServerConfig::default().with(|c| {
        c.max_active_tasks_per_scope = Some(100);
    }))
    .await;
    let a = Client::new(&srv.url, tasks_caps()).with_scope("a");
    let mut held = Vec::new();
    for i in 0..100 {
        held.push(task_id(&a.call_tool("slow_compute", json!({ "seconds": 600, "label": format!("a{i}") })).await));
    }
    let b = Client::new(&srv.url, tasks_caps()).with_scope("b");
    let id = task_id(&b.call_tool("slow_compute", json!({ "seconds": 0, "label": "b" })).await);
    let done = b.wait_task_for(&id, "completed", Duration::from_secs(10), |t| t["status"] == "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "Completed b");
    for id in [&held[0], &held[99]] {
        assert_eq!(a.get_task(id).await["status"], "working", "A still holds her whole quota");
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
    let config = ServerConfig::default().with(|c| {
        c.call_timeout = Some(Duration::from_millis(500));
    });
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
