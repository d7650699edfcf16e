//! Changing the gateway's config live (`services/gateway/src/reload.rs`),
//! embedded, in front of the Python server written with the official `mcp`
//! SDK over stdio (`tests/gateway/upstream.py`).
//!
//! While 20 tasks of a slow tool run, the config file is rewritten to hide
//! `add` and a reload is asked through the admin API
//! (`POST /admin/v1/gateway/reload`, refused without the admin scope):
//! every task completes, `tools/list` stops listing `add` within 5 s, a call
//! to it is refused like a call to a tool that does not exist, a listen
//! stream is told `notifications/tools/list_changed`, and
//! `GET /admin/v1/gateway/config` shows the new version. Then a broken file
//! (bad TOML through the admin API, a pin on an argument the tool does not
//! have through `SIGHUP`) is refused: the admin API shows the refusal and its
//! reason, the version stays, and the running config's catalog keeps serving.
//! Last, a second upstream added to the file is started, listed and served
//! under its prefix after a reload.
//!
//! On Redis, a reload asked of the API pod reaches the worker too.

mod common;

use std::time::{Duration, Instant};

use common::{
    Cluster, admin_and_user_tokens, gateway_bin, gateway_toml, python_over_http, python_toml, python_upstream,
};
use presa_testkit::{Client, Pod, free_port, next_within, task_id, tasks_caps};
use serde_json::{Value, json};

fn names(c: &Value) -> Vec<String> {
    c["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str().map(str::to_string)).collect()
}

async fn listed(c: &Client) -> Vec<String> {
    names(&c.ok("tools/list", json!({})).await)
}

/// An admin request (with the `X-Presa-Admin` mark a state-changing one needs), with `token` unless empty.
async fn admin(method: reqwest::Method, url: String, token: &str) -> (u16, Value) {
    let mut req = reqwest::Client::new().request(method, url).header("x-presa-admin", "1");
    if !token.is_empty() {
        req = req.bearer_auth(token);
    }
    let resp = req.send().await.expect("request");
    (resp.status().as_u16(), resp.json().await.unwrap_or(Value::Null))
}

/// The embedded process's config as `GET /admin/v1/gateway/config` shows it, once `pred` holds (a heartbeat every 5 s).
async fn config_once(base: &str, pred: impl Fn(&Value) -> bool) -> Value {
    configs_once(base, "ops-token", |all| all.len() == 1 && pred(&all[0])).await.remove(0)
}

/// Every process's config as `GET /admin/v1/gateway/config` shows it, once `pred` holds.
async fn configs_once(base: &str, token: &str, pred: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, view) = admin(reqwest::Method::GET, format!("{base}/admin/v1/gateway/config"), token).await;
        assert_eq!(status, 200, "{view}");
        let all = view["processes"].as_array().cloned().unwrap_or_default();
        if pred(&all) {
            return all;
        }
        assert!(Instant::now() < deadline, "the config never showed as expected: {view}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The JSON-RPC error of a `tools/call` expected to be refused.
async fn refused(c: &Client, name: &str) -> Value {
    c.err("tools/call", json!({ "name": name, "arguments": { "a": 1, "b": 2 } })).await.1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_hides_a_tool_while_tasks_run_refuses_a_broken_config_and_adds_an_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = admin_and_user_tokens(dir.path());
    let command = serde_json::to_string(&python_upstream()).unwrap();
    let upstream = format!("[[upstream]]\nname = \"py\"\ncommand = {command}\npool = 4\n");
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, &upstream).unwrap();
    let args = ["--gateway-config", path.to_str().unwrap(), "--upstream-settle-ms", "0"];
    let auth = ["--auth", "tokens", "--tokens-file", tokens.to_str().unwrap()];
    let gw = Pod::start("gw", &gateway_bin(), free_port(), &[&args[..], &auth].concat(), &[]).await;
    let base = gw.base();
    let url = format!("{base}/mcp");
    let plain = Client::new(&url, json!({})).with_bearer("user-token");
    let tasks = Client::new(&url, tasks_caps()).with_bearer("user-token");
    let first = config_once(&base, |p| p["version"].is_string()).await;
    assert!(first["lastRefusal"].is_null(), "{first}");
    let reload = format!("{base}/admin/v1/gateway/reload");
    assert!(listed(&plain).await.contains(&"add".to_string()));
    let (status, mut stream) = plain.listen(json!({ "toolsListChanged": true })).await;
    assert_eq!(status, 200);
    assert_eq!(next_within(&mut stream, 5).await["method"], "notifications/subscriptions/acknowledged");

    let mut ids = Vec::new();
    for _ in 0..20 {
        ids.push(task_id(&tasks.call_tool("slow_idempotent", json!({ "steps": 5, "step_ms": 200 })).await));
    }
    std::fs::write(&path, format!("{upstream}hide = [\"add\"]\n")).unwrap();
    assert_eq!(admin(reqwest::Method::POST, reload.clone(), "user-token").await.0, 403, "admins only");
    let (status, body) = admin(reqwest::Method::POST, reload.clone(), "ops-token").await;
    assert_eq!((status, body["nodes"].as_array().map(Vec::len)), (202, Some(1)), "{body}");
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
    gw.wait_log("reload_gateway", Duration::from_secs(5)).await;
    let applied = config_once(&base, |p| p["version"] != first["version"]).await;
    assert!(applied["lastRefusal"].is_null() && applied["loadedAtMs"].as_u64() >= first["loadedAtMs"].as_u64());

    // Broken files are refused, the reason logged; the running catalog serves on.
    let broken = [
        (format!("{upstream}hide = [\"add\"\n"), "TOML"),
        (format!("{upstream}[[upstream.tool]]\nmatch = \"pid\"\npin = {{ missing = 1 }}\n"), "missing"),
    ];
    for (i, (text, says)) in broken.iter().enumerate() {
        std::fs::write(&path, text).unwrap();
        if i == 0 {
            assert_eq!(admin(reqwest::Method::POST, reload.clone(), "ops-token").await.0, 202);
        } else {
            gw.signal("HUP");
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while gw.log().matches("gateway config reload refused").count() <= i {
            assert!(Instant::now() < deadline, "no refusal logged\n{}", gw.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let refusal = gw.log().lines().rfind(|l| l.contains("reload refused")).unwrap_or_default().to_string();
        assert!(refusal.contains(says), "{says}: {refusal}");
        let shown = config_once(&base, |p| p["lastRefusal"]["reason"].as_str().is_some_and(|r| r.contains(says))).await;
        assert_eq!(shown["version"], applied["version"], "the running config is kept: {shown}");
        assert!(shown["lastRefusal"]["atMs"].as_u64().is_some(), "{shown}");
    }
    let now = listed(&plain).await;
    assert!(!now.contains(&"add".to_string()) && now.contains(&"pid".to_string()), "{now:?}");
    assert!(plain.call_tool("pid", json!({})).await["isError"] != true);

    // A second upstream added: started, listed, served under its prefix.
    let second = format!("[[upstream]]\nname = \"two\"\ncommand = {command}\nprefix = \"two_\"\npool = 1\n");
    std::fs::write(&path, format!("{upstream}hide = [\"add\"]\n{second}")).unwrap();
    assert_eq!(admin(reqwest::Method::POST, reload.clone(), "ops-token").await.0, 202);
    let n = next_within(&mut stream, 15).await;
    assert_eq!(n["method"], "notifications/tools/list_changed", "{n}\n{}", gw.log());
    let now = listed(&plain).await;
    assert!(now.contains(&"two_pid".to_string()) && now.contains(&"two_add".to_string()), "{now:?}");
    assert!(!now.contains(&"add".to_string()), "{now:?}");
    let r = plain.call_tool("two_pid", json!({})).await;
    assert!(r["isError"] != true, "{r}");
    let grown = config_once(&base, |p| p["version"] != applied["version"]).await;
    assert!(grown["lastRefusal"]["reason"].is_string(), "the last refusal stays shown: {grown}");

    for id in &ids {
        let terminal =
            |t: &Value| ["completed", "failed", "cancelled"].contains(&t["status"].as_str().unwrap_or_default());
        let done = tasks.wait_task_for(id, "done", Duration::from_secs(30), terminal).await;
        assert_eq!(done["status"], "completed", "{done}");
    }
}

/// On Redis, one reload asked of the API pod reaches the worker through the
/// event bus: each process reads its own copy of the file (here the same
/// path) and both show the new version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_a_reload_asked_of_the_api_pod_reaches_the_worker() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = python_toml(1);
    let path = gateway_toml(dir.path(), &upstream);
    let cluster = Cluster::new(&[]).await;
    let args = ["--gateway-config", path.to_str().unwrap(), "--upstream-settle-ms", "0"];
    let (api, url) = cluster.api(&args).await;
    let worker = cluster.worker("w1", &args).await;
    let base = api.base();
    let first = configs_once(&base, "", |all| all.len() == 2).await;
    assert_eq!(first[0]["version"], first[1]["version"], "{first:?}");

    std::fs::write(&path, format!("{upstream}hide = [\"add\"]\n")).unwrap();
    let (status, body) = admin(reqwest::Method::POST, format!("{base}/admin/v1/gateway/reload"), "").await;
    assert_eq!(status, 202, "{body}");
    assert!(body["nodes"].as_array().is_some_and(|n| n.len() == 2 && n.contains(&json!("w1"))), "{body}");
    worker.wait_log("gateway config reloaded", Duration::from_secs(10)).await;
    let after =
        configs_once(&base, "", |all| all.len() == 2 && all.iter().all(|p| p["version"] != first[0]["version"])).await;
    assert_eq!(after[0]["version"], after[1]["version"], "{after:?}");
    assert!(!listed(&Client::new(&url, json!({}))).await.contains(&"add".to_string()));
}

/// The text of a tool call's first content block.
fn text(r: &Value) -> String {
    r["content"][0]["text"].as_str().unwrap_or_default().to_string()
}

/// Whether process `pid` still runs (a zombie, exited but not yet reaped, counts as gone).
fn alive(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z')))
}

/// A reload that removes upstream `gone` and changes `py`'s environment
/// while a slow task runs on each: both tasks complete on the pools they
/// started on; `gone`'s tools leave `tools/list` at once (listen streams are
/// told) and a call to one is an unknown tool's; the next call to `py`
/// reaches a child started with the new environment; each old pool drains,
/// and its children exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_removes_one_upstream_and_changes_another_while_their_calls_run() {
    let dir = tempfile::tempdir().unwrap();
    let command = serde_json::to_string(&python_upstream()).unwrap();
    let py = |label: &str| {
        format!("[[upstream]]\nname = \"py\"\ncommand = {command}\npool = 2\nenv = {{ LABEL = \"{label}\" }}\n")
    };
    let gone = format!("[[upstream]]\nname = \"gone\"\ncommand = {command}\nprefix = \"gone_\"\npool = 1\n");
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, format!("{}{gone}", py("v1"))).unwrap();
    let args = ["--gateway-config", path.to_str().unwrap(), "--upstream-settle-ms", "0"];
    let gw = Pod::start("gw", &gateway_bin(), free_port(), &args, &[]).await;
    let url = format!("{}/mcp", gw.base());
    let plain = Client::new(&url, json!({}));
    let tasks = Client::new(&url, tasks_caps());
    let env = |r: &Value| serde_json::from_str::<Value>(&text(r)).unwrap_or_default()["LABEL"].clone();
    assert_eq!(env(&plain.call_tool("environment", json!({})).await), "v1");
    let old_children =
        [text(&plain.call_tool("pid", json!({})).await), text(&plain.call_tool("gone_pid", json!({})).await)];
    assert!(old_children.iter().all(|p| alive(p)), "{old_children:?}");
    let (_, mut stream) = plain.listen(json!({ "toolsListChanged": true })).await;
    assert_eq!(next_within(&mut stream, 5).await["method"], "notifications/subscriptions/acknowledged");
    let slow = json!({ "steps": 10, "step_ms": 300 });
    let on_gone = task_id(&tasks.call_tool("gone_slow_idempotent", slow.clone()).await);
    let on_py = task_id(&tasks.call_tool("slow_idempotent", slow).await);
    let started = |id: &str| {
        let (tasks, id) = (&tasks, id.to_string());
        async move { tasks.wait_task_for(&id, "running", Duration::from_secs(10), |t| t["status"] == "working").await }
    };
    started(&on_gone).await;
    started(&on_py).await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    std::fs::write(&path, py("v2")).unwrap();
    let asked = Instant::now();
    gw.signal("HUP");
    let n = next_within(&mut stream, 10).await;
    assert_eq!(n["method"], "notifications/tools/list_changed", "{n}\n{}", gw.log());
    let now = listed(&plain).await;
    assert!(!now.iter().any(|t| t.starts_with("gone_")) && now.contains(&"pid".to_string()), "{now:?}");
    println!("gone's tools left tools/list {:?} after the SIGHUP", asked.elapsed());
    let unknown = refused(&plain, "no_such_tool").await;
    let removed = refused(&plain, "gone_add").await;
    let message = |e: &Value, name: &str| e["message"].as_str().unwrap_or_default().replace(name, "<tool>");
    assert_eq!(removed["code"], unknown["code"], "{removed}");
    assert_eq!(message(&removed, "gone_add"), message(&unknown, "no_such_tool"), "a removed tool is an unknown one");
    assert_eq!(env(&plain.call_tool("environment", json!({})).await), "v2", "a new call reaches the changed upstream");
    let now_child = text(&plain.call_tool("pid", json!({})).await);
    assert!(!old_children.contains(&now_child), "a new child: {now_child} {old_children:?}");

    for id in [&on_gone, &on_py] {
        let terminal =
            |t: &Value| ["completed", "failed", "cancelled"].contains(&t["status"].as_str().unwrap_or_default());
        let done = tasks.wait_task_for(id, "done", Duration::from_secs(30), terminal).await;
        assert_eq!(done["status"], "completed", "the call in flight finishes on its old pool: {done}\n{}", gw.log());
    }
    let drained = gw.wait_log("retired pool drained", Duration::from_secs(10)).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while drained.matches("retired pool drained").count() < 2 && gw.log().matches("retired pool drained").count() < 2 {
        assert!(Instant::now() < deadline, "both old pools drain\n{}", gw.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while old_children.iter().any(|p| alive(p)) {
        assert!(Instant::now() < deadline, "the old children exit: {old_children:?}\n{}", gw.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(alive(&now_child), "the new child serves on");
    assert!(!gw.log().contains("reload refused"), "{}", gw.log());
}

/// On Redis, 2 gateway API pods and 2 gateway workers: while 20 tasks of a
/// slow tool run, the file hides `add` and adds an upstream (over Streamable HTTP), and one reload
/// is asked through one pod. Every task completes; each API pod serves the
/// new `tools/list` within 5 s of the ask (each one's time printed) and its
/// listen stream is told `notifications/tools/list_changed`. Then a broken
/// file is refused by all four processes, and the catalog they serve stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_every_pod_serves_a_reload_within_5_s_and_every_process_refuses_a_broken_one() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = python_toml(5);
    let path = gateway_toml(dir.path(), &upstream);
    let port = free_port();
    let _http_upstream = python_over_http(port, dir.path()).await;
    let cluster = Cluster::new(&[]).await;
    let args = ["--gateway-config", path.to_str().unwrap(), "--upstream-settle-ms", "0"];
    let (api1, url1) = cluster.api(&args).await;
    let (api2, url2) = cluster.api(&args).await;
    let workers = [cluster.worker("w1", &args).await, cluster.worker("w2", &args).await];
    let base = api1.base();
    let first = configs_once(&base, "", |all| all.len() == 4).await;
    let clients = [Client::new(&url1, json!({})), Client::new(&url2, json!({}))];
    let mut streams = Vec::new();
    for c in &clients {
        assert!(listed(c).await.contains(&"add".to_string()));
        let (status, mut stream) = c.listen(json!({ "toolsListChanged": true })).await;
        assert_eq!(status, 200);
        assert_eq!(next_within(&mut stream, 5).await["method"], "notifications/subscriptions/acknowledged");
        streams.push(stream);
    }
    let tasks = Client::new(&url1, tasks_caps());
    let mut ids = Vec::new();
    for _ in 0..20 {
        ids.push(task_id(&tasks.call_tool("slow_idempotent", json!({ "steps": 10, "step_ms": 500 })).await));
    }
    // The workers' connections started (10 children), half the tasks running, half queued.
    tokio::time::sleep(Duration::from_millis(3500)).await;

    // The added upstream is the same server over Streamable HTTP, running
    // already: what is timed is the reload reaching every pod, not a child's
    // start (a Python SDK child takes seconds of CPU on a loaded machine).
    let url = format!("http://127.0.0.1:{port}/mcp");
    let second = format!("[[upstream]]\nname = \"two\"\nurl = \"{url}\"\nprefix = \"two_\"\npool = 1\n");
    std::fs::write(&path, format!("{upstream}hide = [\"add\"]\n{second}")).unwrap();
    let asked = Instant::now();
    let (status, body) = admin(reqwest::Method::POST, format!("{base}/admin/v1/gateway/reload"), "").await;
    assert_eq!((status, body["nodes"].as_array().map(Vec::len)), (202, Some(4)), "{body}");
    let serves_new = |names: &[String]| !names.contains(&"add".to_string()) && names.contains(&"two_pid".to_string());
    let took = futures::future::join_all(clients.iter().map(|c| async move {
        while !serves_new(&listed(c).await) {
            if asked.elapsed() > Duration::from_secs(20) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        asked.elapsed()
    }))
    .await;
    for (i, t) in took.iter().enumerate() {
        println!("API pod {}: the new tools/list served {} ms after the reload was asked", i + 1, t.as_millis());
    }
    for (i, (t, pod)) in took.iter().zip([&api1, &api2]).enumerate() {
        let log = pod.log();
        let said = log.lines().filter(|l| l.contains("reload") || l.contains("upstream")).collect::<Vec<_>>();
        assert!(*t <= Duration::from_secs(5), "API pod {} took {t:?}\n{}", i + 1, said.join("\n"));
    }
    for (i, stream) in streams.iter_mut().enumerate() {
        let n = next_within(stream, 10).await;
        assert_eq!(n["method"], "notifications/tools/list_changed", "API pod {}: {n}", i + 1);
    }
    for w in &workers {
        w.wait_log("gateway config reloaded", Duration::from_secs(10)).await;
    }
    let applied = configs_once(&base, "", |all| {
        all.len() == 4 && all.iter().all(|p| p["version"] != first[0]["version"] && p["version"] == all[0]["version"])
    })
    .await;
    for id in &ids {
        let terminal =
            |t: &Value| ["completed", "failed", "cancelled"].contains(&t["status"].as_str().unwrap_or_default());
        let done = tasks.wait_task_for(id, "done", Duration::from_secs(60), terminal).await;
        assert_eq!(done["status"], "completed", "{done}");
    }
    let r = clients[1].call_tool("two_pid", json!({})).await;
    assert!(r["isError"] != true, "the added upstream serves: {r}");

    std::fs::write(&path, format!("{upstream}hide = [\"add\"\n")).unwrap();
    let (status, _) = admin(reqwest::Method::POST, format!("{base}/admin/v1/gateway/reload"), "").await;
    assert_eq!(status, 202);
    let refused = configs_once(&base, "", |all| {
        all.len() == 4 && all.iter().all(|p| p["lastRefusal"]["reason"].as_str().is_some_and(|r| r.contains("TOML")))
    })
    .await;
    for p in &refused {
        assert_eq!(p["version"], applied[0]["version"], "the running config is kept: {p}");
    }
    for c in &clients {
        assert!(serves_new(&listed(c).await), "the old catalog serves on");
    }
    let r = clients[0].call_tool("two_add", json!({ "a": 2, "b": 3 })).await;
    assert!(r["isError"] != true, "{r}");
}
