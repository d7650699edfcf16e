//! A tool's concurrency limit, embedded (`exclusive_job`: 2 at once): tasks
//! past it wait in line, saying so, and run in the order created, never
//! more than 2 at once by the tool's own account of its runs; a plain call
//! past it waits `permit_wait`, then gets 429 with `Retry-After`.

use std::time::Duration;

use presa_server::ServerConfig;
use presa_testkit::*;
use serde_json::{Value, json};

/// A completed `exclusive_job`'s run, from its own result: (start, end), Unix ms.
fn run_of(done: &Value) -> (u64, u64) {
    let text = done["result"]["content"][0]["text"].as_str().expect("a text result");
    let mut words = text.split_whitespace();
    let start = words.nth(3).and_then(|w| w.parse().ok()).expect("a start time");
    let end = words.nth(1).and_then(|w| w.parse().ok()).expect("an end time");
    (start, end)
}

/// The most runs going on at once.
fn most_at_once(runs: &[(u64, u64)]) -> usize {
    runs.iter().map(|&(s, _)| runs.iter().filter(|&&(s2, e2)| s2 <= s && s < e2).count()).max().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tools_concurrency_holds_tasks_in_line_and_refuses_plain_calls_past_it() {
    let config = ServerConfig::default().with(|c| {
        c.permit_wait = Duration::from_millis(300);
    });
    let srv = embedded(config).await;
    let c = Client::new(&srv.url, tasks_caps());
    let mut ids = Vec::new();
    for i in 0..8 {
        let args = json!({ "seconds": 0.4, "label": format!("run-{i}") });
        ids.push(task_id(&c.call_tool("exclusive_job", args).await));
        // Creation order is by the millisecond: a pause keeps each its own.
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    let waiting = c
        .wait_task(&ids[7], "waiting in line", |t| {
            t["statusMessage"]
                .as_str()
                .is_some_and(|m| m.starts_with("waiting for a permit of exclusive_job (2 at once"))
        })
        .await;
    assert_eq!(waiting["status"], "working", "{waiting}");
    // A plain call past the limit waits 300 ms, then is refused.
    let plain = Client::new(&srv.url, json!({}));
    let asked = std::time::Instant::now();
    let (status, retry_after, error) =
        plain.refused("tools/call", json!({ "name": "exclusive_job", "arguments": {} })).await;
    assert!(asked.elapsed() >= Duration::from_millis(300), "{:?}", asked.elapsed());
    assert_eq!((status, retry_after.as_deref()), (429, Some("1")), "{error}");
    assert_eq!((&error["code"], &error["data"]["limit"]), (&json!(-32023), &json!("tool_concurrency")), "{error}");
    let mut runs = Vec::new();
    for id in &ids {
        let done = c.wait_task_for(id, "completed", Duration::from_secs(30), |t| t["status"] != "working").await;
        assert_eq!(done["status"], "completed", "{done}");
        assert_eq!(done["retries"]["failed"].as_u64().unwrap_or(0), 0, "no try counted");
        runs.push(run_of(&done));
    }
    assert_eq!(most_at_once(&runs), 2, "{runs:?}");
    for (i, a) in runs.iter().enumerate() {
        for b in runs.iter().skip(i + 2) {
            assert!(a.0 <= b.0, "run {i} started after one created two later: {runs:?}");
        }
    }
    // Once the line is empty, a plain call runs at once.
    let (status, answer) = plain.send("tools/call", json!({ "name": "exclusive_job", "arguments": {} })).await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer["result"]["content"][0]["text"].as_str().is_some_and(|t| t.starts_with("Ran")), "{answer}");
}
