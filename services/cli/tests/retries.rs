//! A task whose every try fails transiently, end to end through `presa`
//! against an embedded presa-api: it fails after its tool's attempts
//! (`flaky_job`: 4), its dead letter says so, and `presa admin replay` runs
//! it again as a new task that goes through its tries afresh.

mod common;

use std::time::Duration;

use common::{detached, embedded, presa};
use serde_json::Value;

async fn admin_json(url: &str, args: &[&str]) -> Value {
    let mut all = vec!["admin", "--json"];
    all.extend_from_slice(args);
    let out = presa(url, &all).await;
    assert_eq!(out.code, 0, "{out}");
    serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// The admin view of task `id` once `pred` holds (30 s at most).
async fn wait_task(url: &str, id: &str, pred: impl Fn(&Value) -> bool) -> Value {
    for _ in 0..300 {
        let task = admin_json(url, &["task", id]).await;
        if pred(&task) {
            return task;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("task {id} never got there: {}", admin_json(url, &["task", id]).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exhausted_tries_leave_a_dead_letter_that_presa_admin_replay_runs_again() {
    let api = embedded().await;
    let id = detached(&api.url, &["flaky_job", "failures=99"]).await;
    let failed = wait_task(&api.url, &id, |t| t["status"] == "failed").await;
    let message = failed["statusMessage"].as_str().unwrap_or_default();
    assert!(message.contains("attempt 4 of 4") && message.contains("simulated outage on try 4"), "{failed}");

    let letters = presa(&api.url, &["admin", "dead-letters", "--tenant", "local"]).await;
    assert!(letters.stdout.contains(&id) && letters.stdout.contains("attempt 4 of 4 failed"), "{letters}");
    let replay = presa(&api.url, &["admin", "replay", &id, "--tenant", "local"]).await;
    assert!(replay.stdout.starts_with("replayed as task p"), "{replay}");
    let new_id = replay.stdout.trim().rsplit(' ').next().unwrap().to_string();
    assert_ne!(new_id, id);
    // The replay runs again from its first try: it is put off after it (its
    // log of failed tries shows it; the status message that says so may last
    // only a moment, full jitter can make the first delay 0 ms)...
    wait_task(&api.url, &new_id, |t| {
        t["retries"]["log"][0]["number"] == 1
            && t["retries"]["log"][0]["reason"].as_str().is_some_and(|r| r.contains("simulated outage on try 1"))
    })
    .await;
    // ...and, the outage going on, ends the same way with a letter of its own.
    wait_task(&api.url, &new_id, |t| t["status"] == "failed").await;
    let letters = admin_json(&api.url, &["dead-letters", "--tenant", "local"]).await;
    let ids: Vec<&str> =
        letters["deadLetters"].as_array().unwrap().iter().filter_map(|l| l["taskId"].as_str()).collect();
    assert!(ids.contains(&id.as_str()) && ids.contains(&new_id.as_str()), "{letters}");
}
