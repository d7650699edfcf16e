//! presa-gateway as a cluster on Redis (an API pod and worker pods, each with
//! its own upstream pool) while workers are SIGKILLed mid-call:
//!
//! - a Python server written with the official `mcp` SDK: the idempotent
//!   tool completes on another worker, the other fails with the clear error,
//!   and the upstream really ran each call as often as the policy says;
//! - presa-api itself as a Tasks-speaking upstream: the worker that takes
//!   over follows the same upstream task (the upstream ran the tool once).

mod common;

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use common::{Cluster, gateway_bin, python_upstream};
use presa_testkit::{Client, Pod, free_port, task_id, tasks_caps};
use serde_json::{Value, json};

fn is_terminal(t: &Value) -> bool {
    ["completed", "failed", "cancelled"].contains(&t["status"].as_str().unwrap_or_default())
}

fn runs(file: &std::path::Path, tool: &str) -> usize {
    std::fs::read_to_string(file).unwrap_or_default().lines().filter(|l| *l == tool).count()
}

/// Start `tool` as a task on the only worker, wait until the upstream
/// reports progress, start a second worker and SIGKILL the first. The call
/// runs 8 s (40 steps of 200 ms): the second worker's start (its process and
/// its Python upstream) took about 3 s with the whole suite on 2 cores, and
/// a call of 3 s then ended on the first worker before it was killed.
async fn kill_mid_call(cluster: &Cluster, c: &Client, upstream: &[&str], tool: &str) -> (String, Pod) {
    let w1 = cluster.worker("w1", upstream).await;
    let id = task_id(&c.call_tool(tool, json!({ "steps": 40, "step_ms": 200 })).await);
    c.wait_task_for(&id, "running upstream", Duration::from_secs(20), |t| {
        t["statusMessage"].as_str().is_some_and(|m| m.starts_with("step "))
    })
    .await;
    let w2 = cluster.worker("w2", upstream).await;
    w1.signal("KILL");
    (id, w2)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_worker_s_idempotent_call_runs_again_and_a_non_idempotent_one_fails_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let runs_file = dir.path().join("runs");
    let runs_path = runs_file.to_str().unwrap().to_string();
    let cluster = Cluster::new(&[("PRESA_TEST_RUNS_FILE", &runs_path)]).await;
    let cmd = python_upstream();
    // The child sees none of the gateway's environment unless it is named.
    let upstream = ["--upstream-command", cmd.as_str(), "--upstream-inherit-env", "PRESA_TEST_RUNS_FILE"];
    let (_api, url) = cluster.api(&upstream).await;
    let c = Client::new(&url, tasks_caps());

    let (id, w2) = kill_mid_call(&cluster, &c, &upstream, "slow_idempotent").await;
    let done = c.wait_task_for(&id, "terminal", Duration::from_secs(30), is_terminal).await;
    assert_eq!(done["status"], "completed", "{done}\nw2:\n{}", w2.log());
    assert_eq!(done["result"]["content"][0]["text"], "done 40", "{done}");
    assert_eq!(runs(&runs_file, "slow_idempotent"), 2, "called again on the second worker");
    drop(w2);

    let (id, w2) = kill_mid_call(&cluster, &c, &upstream, "slow_unsafe").await;
    let done = c.wait_task_for(&id, "terminal", Duration::from_secs(30), is_terminal).await;
    assert_eq!(done["status"], "failed", "{done}\nw2:\n{}", w2.log());
    let message = done["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("was lost") && message.contains("not called again"), "{done}");
    assert_eq!(done["error"]["data"]["retryable"], true, "{done}");
    // Give a wrong second run the time it would need to show up.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(runs(&runs_file, "slow_unsafe"), 1, "never called a second time");

    // Nothing is stuck: the surviving worker goes on serving.
    let id = task_id(&c.call_tool("slow_idempotent", json!({ "steps": 1, "step_ms": 10 })).await);
    let done = c.wait_task_for(&id, "terminal", Duration::from_secs(20), is_terminal).await;
    assert_eq!(done["status"], "completed", "{done}\nw2:\n{}", w2.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_server_s_question_parks_the_task_on_redis_and_any_pod_answers_it() {
    let cluster = Cluster::new(&[]).await;
    let cmd = python_upstream();
    let upstream = ["--upstream-command", cmd.as_str()];
    let (_api, url) = cluster.api(&upstream).await;
    let _w1 = cluster.worker("w1", &upstream).await;
    let c = Client::new(&url, tasks_caps());
    let id = task_id(&c.call_tool("ask_name", json!({})).await);
    let parked = c.wait_status(&id, "input_required").await;
    let (key, request) =
        parked["inputRequests"].as_object().unwrap().iter().next().map(|(k, v)| (k.clone(), v.clone())).unwrap();
    assert_eq!(request["params"]["message"], "What is your name?", "{request}");
    // A second API pod answers: nothing of the task lives in the first.
    let (_api2, url2) = cluster.api(&upstream).await;
    let c2 = Client::new(&url2, tasks_caps());
    c2.ok(
        "tasks/update",
        json!({ "taskId": id, "inputResponses": { key: { "action": "accept", "content": { "name": "Ada" } } } }),
    )
    .await;
    let done = c.wait_status(&id, "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "hello Ada", "{done}");
    // A plain call through the cluster's API pod.
    let plain = Client::new(&url2, json!({})).call_tool("add", json!({ "a": 40, "b": 2 })).await;
    assert_eq!(plain["content"][0]["text"], "42", "{plain}");
}

fn presa_api_bin() -> PathBuf {
    gateway_bin().with_file_name("presa-api")
}

/// `presa_tasks_created_total` of a presa process.
async fn tasks_created(pod: &Pod) -> u64 {
    let text = reqwest::get(format!("{}/metrics", pod.base())).await.unwrap().text().await.unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("presa_tasks_created_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_takes_over_follows_the_upstream_s_own_task() {
    // presa-api (embedded, the demo catalog) is the upstream: it speaks
    // 2026-07-28 with Tasks, so the gateway's call becomes its task.
    let upstream_pod = Pod::start("upstream", &presa_api_bin(), free_port(), &[], &[]).await;
    let upstream_url = format!("{}/mcp", upstream_pod.base());
    let cluster = Cluster::new(&[]).await;
    let upstream = ["--upstream-url", upstream_url.as_str()];
    let (_api, url) = cluster.api(&upstream).await;
    let w1 = cluster.worker("w1", &upstream).await;
    let c = Client::new(&url, tasks_caps());
    let id = task_id(&c.call_tool("slow_compute", json!({ "seconds": 4, "label": "resumed" })).await);
    // The upstream task's status message reaches presa's task.
    c.wait_task_for(&id, "running upstream", Duration::from_secs(20), |t| {
        t["statusMessage"].as_str().is_some_and(|m| m.starts_with("Computing resumed"))
    })
    .await;
    assert_eq!(tasks_created(&upstream_pod).await, 1);
    let w2 = cluster.worker("w2", &upstream).await;
    w1.signal("KILL");
    let killed = Instant::now();
    let done = c.wait_task_for(&id, "terminal", Duration::from_secs(30), is_terminal).await;
    assert_eq!(done["status"], "completed", "{done}\nw2:\n{}", w2.log());
    assert_eq!(done["result"]["content"][0]["text"], "Completed resumed", "{done}");
    assert!(w2.log().contains("resuming the upstream's task"), "{}", w2.log());
    assert_eq!(tasks_created(&upstream_pod).await, 1, "the upstream ran the tool once");
    assert!(killed.elapsed() < Duration::from_secs(20));
}

/// The catalog follows the upstream: a tool the upstream adds at run time
/// is listed once it says `notifications/tools/list_changed`, and every
/// listen stream of the cluster hears about it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_catalog_follows_the_upstream_s_list_changed() {
    let cluster = Cluster::new(&[]).await;
    let cmd = python_upstream();
    // One child per process, so the call and the listing meet the same upstream.
    let upstream = ["--upstream-command", cmd.as_str(), "--upstream-pool", "1"];
    let (_api, url) = cluster.api(&upstream).await;
    let c = Client::new(&url, json!({}));
    let (status, mut stream) = c.listen(json!({ "toolsListChanged": true })).await;
    assert_eq!(status, 200);
    let ack = presa_testkit::next_within(&mut stream, 5).await;
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged", "{ack}");
    let names = |tools: &Value| -> Vec<String> {
        tools["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str().map(str::to_string)).collect()
    };
    assert!(!names(&c.ok("tools/list", json!({})).await).contains(&"late_tool".to_string()));
    // A plain call runs in the API pod, on its own child.
    let r = c.call_tool("register_extra", json!({ "name": "late_tool" })).await;
    assert_eq!(r["content"][0]["text"], "registered late_tool", "{r}");
    let n = presa_testkit::next_within(&mut stream, 10).await;
    assert_eq!(n["method"], "notifications/tools/list_changed", "{n}");
    let listed = names(&c.ok("tools/list", json!({})).await);
    assert!(listed.contains(&"late_tool".to_string()), "{listed:?}");
    let r = c.call_tool("late_tool", json!({})).await;
    assert_eq!(r["content"][0]["text"], "extra late_tool", "{r}");
}

/// The upstream never sees the caller's token; with
/// `--upstream-forward-identity` it is told who the caller is in `_meta`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_caller_s_identity_reaches_the_upstream_only_when_asked() {
    let cmd = python_upstream();
    let (_plain, url) = common::embedded("gw", &cmd, &[], &[]).await;
    let r = Client::new(&url, json!({})).call_tool("whoami", json!({})).await;
    assert_eq!(r["content"][0]["text"], "nobody", "{r}");
    let (_told, url) = common::embedded("gw", &cmd, &["--upstream-forward-identity"], &[]).await;
    let r = Client::new(&url, json!({})).call_tool("whoami", json!({})).await;
    assert_eq!(r["content"][0]["text"], "local/anonymous", "{r}");
}

/// Poll `/readyz` every 100 ms until it answers `status` or `within` has
/// passed; the last status seen.
async fn readyz_becomes(pod: &Pod, status: u16, within: Duration) -> u16 {
    let deadline = Instant::now() + within;
    loop {
        let seen = reqwest::get(format!("{}/readyz", pod.base())).await.unwrap().status().as_u16();
        if seen == status || Instant::now() >= deadline {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `/readyz` follows the upstream: an upstream that dies and cannot be
/// started again makes the pod unready; once it starts again, ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_follows_the_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let flag = dir.path().join("may-start");
    std::fs::write(&flag, "").unwrap();
    let marker = dir.path().display().to_string();
    // Starts only while the flag file exists; the marker names its process.
    let cmd = format!("sh -c 'test -f {} && exec {} --marker {marker}'", flag.display(), python_upstream());
    let (gw, url) = common::embedded("gw", &cmd, &["--upstream-settle-ms", "0"], &[]).await;
    assert_eq!(readyz_becomes(&gw, 200, Duration::ZERO).await, 200);
    std::fs::remove_file(&flag).unwrap();
    // The child's command line starts with python (the gateway's own names the marker too).
    let pattern = format!(r"^\S*python\S* \S*upstream.py --marker {marker}");
    let killed = std::process::Command::new("pkill").args(["-KILL", "-f", &pattern]).status().unwrap();
    assert!(killed.success(), "the upstream process was found and killed");
    // The next call finds the upstream gone and cannot start another.
    let (_, failed) = Client::new(&url, json!({}))
        .send("tools/call", json!({ "name": "add", "arguments": { "a": 1, "b": 1 } }))
        .await;
    assert!(failed.to_string().contains("upstream"), "{failed}");
    assert_eq!(readyz_becomes(&gw, 503, Duration::from_secs(5)).await, 503, "{}", gw.log());
    std::fs::write(&flag, "").unwrap();
    let status = readyz_becomes(&gw, 200, Duration::from_secs(20)).await;
    assert_eq!(status, 200, "{}", gw.log());
    let r = Client::new(&url, json!({})).call_tool("add", json!({ "a": 2, "b": 2 })).await;
    assert_eq!(r["content"][0]["text"], "4", "{r}");
}

/// A connection serves one call after another: the same upstream process
/// answers sequential calls (none is started per call).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_are_reused_call_after_call() {
    let (_gw, url) = common::embedded("gw", &python_upstream(), &["--upstream-pool", "1"], &[]).await;
    let c = Client::new(&url, json!({}));
    let mut pids = std::collections::BTreeSet::new();
    for _ in 0..5 {
        let r = c.call_tool("pid", json!({})).await;
        pids.insert(r["content"][0]["text"].as_str().unwrap_or_default().to_string());
    }
    assert_eq!(pids.len(), 1, "one upstream process for five calls: {pids:?}");
}
