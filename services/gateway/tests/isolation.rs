//! What one caller does through the gateway stays that caller's, and
//! cannot stall the gateway for others, against the Python upstream written
//! with the official `mcp` SDK (`tests/gateway/upstream.py`):
//!
//! - a question an upstream asks during one tenant's `prompts/get` never
//!   reaches another tenant's task, and that tenant's answer never comes back
//!   in the prompt (each upstream request has a connection to itself);
//! - 600 concurrent slow `resources/read`s neither stop `/healthz` nor grow
//!   the gateway's threads, and it serves again once their clients are gone;
//!   a read whose client left closes its connection instead of reusing it;
//! - a stdio upstream sees none of the gateway's environment beyond what its
//!   configuration names;
//! - an answer an upstream cuts short fails its call at once.

mod common;

use std::time::{Duration, Instant};

use common::{gateway_bin, python_upstream};
use presa_testkit::{Client, Pod, TestRedis, free_port, task_id, tasks_caps};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// A `--tokens-file` naming each `(token, tenant, subject)`.
fn tokens_file(dir: &std::path::Path, tokens: &[(&str, &str, &str)]) -> String {
    let path = dir.join("tokens");
    let lines: String = tokens
        .iter()
        .map(|(token, tenant, subject)| {
            let digest: String = Sha256::digest(token.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
            format!("{digest} {tenant} {subject}\n")
        })
        .collect();
    std::fs::write(&path, lines).unwrap();
    path.display().to_string()
}

/// The text of a prompt's first message.
fn prompt_text(prompt: &Value) -> String {
    prompt["messages"][0]["content"]["text"].as_str().unwrap_or_default().to_string()
}

/// Alice (tenant acme) has a task parked on the upstream's question; Bob
/// (tenant globex) gets a prompt whose upstream asks a question and logs a
/// line meanwhile. Bob's question and log line never reach Alice's task; Bob's
/// question gets the gateway's fixed answer (declined), never Alice's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_s_question_never_reaches_another_tenant_s_task() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = tokens_file(dir.path(), &[("alice-token", "acme", "alice"), ("bob-token", "globex", "bob")]);
    let (_gw, url) = common::embedded(
        "gw",
        &python_upstream(),
        &["--upstream-pool", "2", "--upstream-settle-ms", "100", "--auth", "tokens", "--tokens-file", &tokens],
        &[],
    )
    .await;
    let alice = Client::new(&url, tasks_caps()).with_bearer("alice-token");
    let bob = Client::new(&url, json!({ "elicitation": {} })).with_bearer("bob-token");

    let id = task_id(&alice.call_tool("ask_name", json!({})).await);
    let parked = alice.wait_status(&id, "input_required").await;
    let asked: Vec<String> = parked["inputRequests"].as_object().unwrap().keys().cloned().collect();
    assert_eq!(asked.len(), 1, "{parked}");

    let bob_prompt = tokio::spawn(async move { bob.send("prompts/get", json!({ "name": "city_prompt" })).await });
    // Whatever Bob's upstream request sends, Alice's task must not show it.
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline && !bob_prompt.is_finished() {
        let task = alice.get_task(&id).await;
        let keys: Vec<&String> = task["inputRequests"].as_object().map(|o| o.keys().collect()).unwrap_or_default();
        assert_eq!(keys, asked.iter().collect::<Vec<_>>(), "Bob's question reached Alice's task: {task}");
        let status = task["statusMessage"].as_str().unwrap_or_default();
        assert!(!status.contains("city_prompt"), "Bob's log line became Alice's status: {task}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, reply) = tokio::time::timeout(Duration::from_secs(20), bob_prompt)
        .await
        .expect("Bob's prompt is answered on its own (not held for another caller's call)")
        .unwrap();
    assert_eq!(status, 200, "{reply}");
    assert_eq!(prompt_text(&reply["result"]), "city decline", "{reply}");

    // Alice answers her own question; it is hers alone.
    alice
        .ok(
            "tasks/update",
            json!({ "taskId": id, "inputResponses": { &asked[0]: { "action": "accept", "content": { "name": "Ada" } } } }),
        )
        .await;
    let done = alice.wait_status(&id, "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "hello Ada", "{done}");
    // Bob again: still declined, never Alice's answer.
    let bob = Client::new(&url, json!({ "elicitation": {} })).with_bearer("bob-token");
    let again = bob.ok("prompts/get", json!({ "name": "city_prompt" })).await;
    assert_eq!(prompt_text(&again), "city decline", "{again}");
}

/// `Threads:` of a process, from /proc.
fn threads(pid: u32) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status.lines().find_map(|l| l.strip_prefix("Threads:")).and_then(|n| n.trim().parse().ok()).unwrap()
}

/// 600 clients read a resource that takes 30 s, at once, from one scope with
/// no per-scope cap: the reads wait for the four upstream connections without
/// holding a thread each, `/healthz` answers within a second all along, and
/// once the clients have given up the gateway serves again at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slow_reads_neither_freeze_the_gateway_nor_grow_its_threads() {
    let (gw, url) = common::embedded(
        "gw",
        &python_upstream(),
        &[
            "--upstream-pool",
            "4",
            "--upstream-settle-ms",
            "0",
            "--upstream-wait-ms",
            "2000",
            "--upstream-cancel-grace-ms",
            "200",
            "--max-inflight-calls-per-scope",
            "0",
        ],
        &[],
    )
    .await;
    let before = threads(gw.pid());
    let impatient = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
    let reader = Client { http: impatient, ..Client::new(&url, json!({})) };
    let reads: Vec<_> = (0..600)
        .map(|_| {
            let reader = reader.clone();
            tokio::spawn(async move { reader.try_send("resources/read", json!({ "uri": "slow://sleep/30000" })).await })
        })
        .collect();
    let health = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
    let mut most = before;
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        let asked = Instant::now();
        let status = health.get(format!("{}/healthz", gw.base())).send().await.map(|r| r.status().as_u16());
        let took = asked.elapsed();
        assert_eq!(status.ok(), Some(200), "/healthz answers under 600 slow reads\n{}", gw.log());
        assert!(took < Duration::from_secs(1), "/healthz took {took:?} under 600 slow reads");
        most = most.max(threads(gw.pid()));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut busy = 0;
    for read in reads {
        match read.await.unwrap() {
            // Refused at once, retryably: no connection was free within --upstream-wait-ms.
            Ok((_, v)) if v["error"]["data"]["retryable"] == true => busy += 1,
            Ok((_, v)) => panic!("a read cannot have finished: {v}"),
            // The client gave up (its 5 s timeout).
            Err(_) => {}
        }
    }
    assert!(most <= 64, "the gateway grew from {before} to {most} threads");
    assert!(busy >= 500, "most reads were told the upstream is busy: {busy}");
    // The clients are gone: their reads stop, the connections they held are
    // closed after the cancel grace, and the gateway serves again promptly.
    let gone = Instant::now();
    let fresh = Client::new(&url, json!({}));
    loop {
        let (status, v) = fresh.send("resources/read", json!({ "uri": "slow://sleep/10" })).await;
        if status == 200 {
            assert_eq!(v["result"]["contents"][0]["text"], "slept 10", "{v}");
            break;
        }
        assert!(gone.elapsed() < Duration::from_secs(10), "not serving again: {v}\n{}", gw.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let r = fresh.call_tool("add", json!({ "a": 1, "b": 2 })).await;
    assert_eq!(r["content"][0]["text"], "3", "{r}");
    assert!(threads(gw.pid()) <= 64);
}

/// A read whose client gave up while the upstream still works on it does not
/// hand its connection back as if idle: the upstream is told to stop and the
/// connection closed, so the next call runs on a fresh upstream process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_read_s_connection_is_closed_not_reused() {
    let args = ["--upstream-pool", "1", "--upstream-settle-ms", "0", "--upstream-cancel-grace-ms", "200"];
    let (gw, url) = common::embedded("gw", &python_upstream(), &args, &[]).await;
    let c = Client::new(&url, json!({}));
    let pid = |r: Value| r["content"][0]["text"].as_str().unwrap_or_default().to_string();
    let first = pid(c.call_tool("pid", json!({})).await);
    let impatient = reqwest::Client::builder().timeout(Duration::from_millis(1500)).build().unwrap();
    let reader = Client { http: impatient, ..c.clone() };
    let gave_up = reader.try_send("resources/read", json!({ "uri": "slow://sleep/30000" })).await;
    assert!(gave_up.is_err(), "the client gave up before the read ended: {gave_up:?}");
    let next = pid(c.call_tool("pid", json!({})).await);
    assert!(
        !next.is_empty() && next != first,
        "the abandoned connection was reused ({first} then {next})\n{}",
        gw.log()
    );
}

/// A stdio upstream gets what its configuration names (`--upstream-env`,
/// `--upstream-inherit-env`), `PATH` and `HOME`, and none of the gateway's
/// own environment: no `PRESA_*` variable, no Redis URL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_upstream_sees_only_the_environment_it_is_given() {
    let redis = TestRedis::start().await;
    let redis_url = redis.url().to_string();
    let env = [
        ("PRESA_REDIS_URL", redis_url.as_str()),
        ("PRESA_REDIS_PREFIX", "isolation-env"),
        ("PRESA_STATE_SECRET", "gateway-isolation-secret-at-least-32-bytes"),
        ("PASSED_THROUGH", "by name"),
        ("NOT_PASSED", "gateway only"),
    ];
    let cmd = python_upstream();
    let args = [
        "--upstream-command",
        cmd.as_str(),
        "--upstream-env",
        "GIVEN=by value",
        "--upstream-inherit-env",
        "PASSED_THROUGH",
    ];
    let api = Pod::start("api", &gateway_bin(), free_port(), &args, &env).await;
    let r = Client::new(format!("{}/mcp", api.base()), json!({})).call_tool("environment", json!({})).await;
    let seen: Value = serde_json::from_str(r["content"][0]["text"].as_str().unwrap()).unwrap();
    let seen = seen.as_object().unwrap();
    assert_eq!(seen["GIVEN"], "by value", "{seen:?}");
    assert_eq!(seen["PASSED_THROUGH"], "by name", "{seen:?}");
    assert!(seen.contains_key("PATH"), "{seen:?}");
    assert!(!seen.contains_key("NOT_PASSED"), "{seen:?}");
    assert!(!seen.keys().any(|k| k.starts_with("PRESA_")), "{seen:?}");
    assert!(!seen.values().any(|v| v.as_str().is_some_and(|v| v.contains("redis://"))), "{seen:?}");
    assert!(!seen.values().any(|v| v.as_str().is_some_and(|v| v.contains("isolation-secret"))), "{seen:?}");
}

/// An upstream whose answer is cut short (not even JSON) fails that call at
/// once, saying why, instead of leaving it to wait out the upstream call
/// timeout; the gateway serves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unparseable_answer_fails_its_call_at_once() {
    let (gw, url) = common::embedded("gw", &python_upstream(), &["--upstream-settle-ms", "0"], &[]).await;
    let c = Client::new(&url, json!({}));
    let asked = Instant::now();
    let call = c.send("tools/call", json!({ "name": "broken_answer" }));
    let Ok((_, reply)) = tokio::time::timeout(Duration::from_secs(10), call).await else {
        panic!("the call did not fail at once:\n{}", gw.log());
    };
    assert!(asked.elapsed() < Duration::from_secs(10));
    let message = reply["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("not valid MCP"), "{reply}");
    let r = c.call_tool("add", json!({ "a": 20, "b": 22 })).await;
    assert_eq!(r["content"][0]["text"], "42", "{r}");
}
