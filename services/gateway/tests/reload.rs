//! Changing the gateway's config live (`services/gateway/src/reload.rs`),
//! embedded, in front of the Python server written with the official `mcp`
//! SDK over stdio (`tests/gateway/upstream.py`).
//!
//! While 20 tasks of a slow tool run, the config file is rewritten to hide
//! `add` and the process gets `SIGHUP`: every task completes, `tools/list`
//! stops listing `add` within 5 s, a call to it is refused like a call to a
//! tool that does not exist, and a listen stream is told
//! `notifications/tools/list_changed`. Then a broken file (bad TOML, then a
//! pin on an argument the tool does not have) is refused with its reason
//! logged, and the catalog of the running config keeps serving.

mod common;

use std::time::{Duration, Instant};

use common::{gateway_bin, python_upstream};
use presa_testkit::{Client, Pod, free_port, next_within, task_id, tasks_caps};
use serde_json::{Value, json};

fn names(c: &Value) -> Vec<String> {
    c["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str().map(str::to_string)).collect()
}

async fn listed(c: &Client) -> Vec<String> {
    names(&c.ok("tools/list", json!({})).await)
}

/// The JSON-RPC error of a `tools/call` expected to be refused.
async fn refused(c: &Client, name: &str) -> Value {
    c.err("tools/call", json!({ "name": name, "arguments": { "a": 1, "b": 2 } })).await.1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_hides_a_tool_while_tasks_run_and_a_broken_config_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let command = serde_json::to_string(&python_upstream()).unwrap();
    let upstream = format!("[[upstream]]\nname = \"py\"\ncommand = {command}\npool = 4\n");
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, &upstream).unwrap();
    let args = ["--gateway-config", path.to_str().unwrap(), "--upstream-settle-ms", "0"];
    let gw = Pod::start("gw", &gateway_bin(), free_port(), &args, &[]).await;
    let url = format!("{}/mcp", gw.base());
    let (plain, tasks) = (Client::new(&url, json!({})), Client::new(&url, tasks_caps()));
    assert!(listed(&plain).await.contains(&"add".to_string()));
    let (status, mut stream) = plain.listen(json!({ "toolsListChanged": true })).await;
    assert_eq!(status, 200);
    assert_eq!(next_within(&mut stream, 5).await["method"], "notifications/subscriptions/acknowledged");

    let mut ids = Vec::new();
    for _ in 0..20 {
        ids.push(task_id(&tasks.call_tool("slow_idempotent", json!({ "steps": 5, "step_ms": 200 })).await));
    }
    std::fs::write(&path, format!("{upstream}hide = [\"add\"]\n")).unwrap();
    gw.signal("HUP");
    let n = next_within(&mut stream, 5).await;
    assert_eq!(n["method"], "notifications/tools/list_changed", "{n}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while listed(&plain).await.contains(&"add".to_string()) {
        assert!(Instant::now() < deadline, "add still listed 5 s after the reload\n{}", gw.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let unknown = refused(&plain, "no_such_tool").await;
    let hidden = refused(&plain, "add").await;
    let message = |e: &Value, name: &str| e["message"].as_str().unwrap_or_default().replace(name, "<tool>");
    assert_eq!(hidden["code"], unknown["code"], "{hidden}");
    assert_eq!(message(&hidden, "add"), message(&unknown, "no_such_tool"), "a hidden tool is an unknown one");
    gw.wait_log("gateway config reloaded", Duration::from_secs(5)).await;

    // Broken files are refused, the reason logged; the running catalog serves on.
    let broken = [
        (format!("{upstream}hide = [\"add\"\n"), "TOML"),
        (format!("{upstream}[[upstream.tool]]\nmatch = \"pid\"\npin = {{ missing = 1 }}\n"), "missing"),
    ];
    for (i, (text, says)) in broken.iter().enumerate() {
        std::fs::write(&path, text).unwrap();
        gw.signal("HUP");
        let deadline = Instant::now() + Duration::from_secs(5);
        while gw.log().matches("gateway config reload refused").count() <= i {
            assert!(Instant::now() < deadline, "no refusal logged\n{}", gw.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let refusal = gw.log().lines().rfind(|l| l.contains("reload refused")).unwrap_or_default().to_string();
        assert!(refusal.contains(says), "{says}: {refusal}");
    }
    let now = listed(&plain).await;
    assert!(!now.contains(&"add".to_string()) && now.contains(&"pid".to_string()), "{now:?}");
    assert!(plain.call_tool("pid", json!({})).await["isError"] != true);

    for id in &ids {
        let terminal =
            |t: &Value| ["completed", "failed", "cancelled"].contains(&t["status"].as_str().unwrap_or_default());
        let done = tasks.wait_task_for(id, "done", Duration::from_secs(30), terminal).await;
        assert_eq!(done["status"], "completed", "{done}");
    }
}
