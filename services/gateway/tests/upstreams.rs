//! The gateway's upstreams in the admin API (`GET /admin/v1/upstreams`,
//! `POST /admin/v1/upstreams/{name}/restart`), embedded, in front of the
//! Python server written with the official `mcp` SDK over stdio
//! (`tests/gateway/upstream.py`), behind `--auth tokens`.
//!
//! A few calls (one answering `isError`) show up, once the next heartbeat
//! carries them, as the upstream `py` ready with its pool, its tool count,
//! its catalog version and calls and errors per tool. A restart is refused
//! without the admin scope, accepted with it (audited), lets a call in
//! flight finish, bumps the restart count, and the next call runs on a new
//! child process.
//!
//! On Redis, an API pod and a worker (each with its own pool): the API pod's
//! view has a row for each, and a restart asked of the API pod reaches the
//! worker through the event bus.

mod common;

use std::time::{Duration, Instant};

use common::{Cluster, admin_and_user_tokens, gateway_toml, gateway_with_tokens, python_upstream};
use presa_testkit::Client;
use serde_json::{Value, json};

/// How long a figure may take to show (a heartbeat every 5 s).
const SHOWS_WITHIN: Duration = Duration::from_secs(20);

/// An admin request as a program sends it (with the `X-Presa-Admin` mark a
/// state-changing one needs).
async fn send(method: reqwest::Method, url: String, token: Option<&str>) -> (u16, Value) {
    let mut req = reqwest::Client::new().request(method, url).header("x-presa-admin", "1");
    if let Some(token) = token {
        req = req.bearer_auth(token);
    }
    let resp = req.send().await.expect("request");
    (resp.status().as_u16(), resp.json().await.unwrap_or(Value::Null))
}

/// The upstream `py` as the admin API shows it, once `pred` holds.
async fn py_once(base: &str, pred: impl Fn(&Value) -> bool) -> Value {
    upstream_once(base, "py", pred).await
}

/// Upstream `name` as the admin API shows it, once `pred` holds.
async fn upstream_once(base: &str, name: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + SHOWS_WITHIN;
    loop {
        let (status, view) = send(reqwest::Method::GET, format!("{base}/admin/v1/upstreams"), Some("ops-token")).await;
        assert_eq!(status, 200, "{view}");
        let py = view["upstreams"].as_array().and_then(|all| all.iter().find(|u| u["name"] == name)).cloned();
        if let Some(py) = py.filter(|p| pred(p)) {
            return py;
        }
        assert!(Instant::now() < deadline, "the upstream never showed as expected: {view}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn text(result: &Value) -> String {
    result["content"][0]["text"].as_str().unwrap_or_default().to_string()
}

fn tool<'a>(py: &'a Value, name: &str) -> &'a Value {
    py["tools"].as_array().and_then(|t| t.iter().find(|x| x["tool"] == name)).unwrap_or(&Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_shows_an_upstreams_calls_and_restarts_its_connections() {
    let dir = tempfile::tempdir().unwrap();
    let flaky = dir.path().join("calls");
    std::fs::create_dir_all(&flaky).unwrap();
    let tokens = admin_and_user_tokens(dir.path());
    let command = serde_json::to_string(&python_upstream()).unwrap();
    let config = format!(
        "[[upstream]]\nname = \"py\"\ncommand = {command}\ninherit_env = [\"PRESA_TEST_FLAKY_DIR\"]\npool = 2\n"
    );
    let env = [("PRESA_TEST_FLAKY_DIR", flaky.to_str().unwrap())];
    let gw = gateway_with_tokens(&gateway_toml(dir.path(), &config), &tokens, &env).await;
    let base = gw.base();
    let c = Client::new(format!("{base}/mcp"), json!({})).with_bearer("user-token");

    assert_eq!(text(&c.call_tool("add", json!({ "a": 1, "b": 2 })).await), "3");
    assert_eq!(text(&c.call_tool("add", json!({ "a": 2, "b": 2 })).await), "4");
    let failed = c.call_tool("flaky_error", json!({ "fail_times": 5 })).await;
    assert_eq!(failed["isError"], true, "{failed}");
    let before = text(&c.call_tool("pid", json!({})).await);

    let py = py_once(&base, |p| p["calls"] == 4).await;
    assert_eq!(
        (py["state"].as_str(), py["pool"].as_u64(), py["catalogVersion"].as_u64()),
        (Some("ready"), Some(2), Some(1)),
        "{py}"
    );
    assert!(py["toolCount"].as_u64().is_some_and(|n| n >= 10), "{py}");
    assert_eq!((tool(&py, "add")["calls"].as_u64(), tool(&py, "add")["errors"].as_u64()), (Some(2), Some(0)), "{py}");
    let flaky_error = tool(&py, "flaky_error");
    assert_eq!((flaky_error["calls"].as_u64(), flaky_error["errors"].as_u64()), (Some(1), Some(1)), "{py}");
    assert_eq!((py["errors"].as_u64(), py["restarts"].as_u64()), (Some(1), Some(0)), "{py}");
    let rows = py["processes"].as_array().unwrap();
    assert_eq!((rows.len(), rows[0]["role"].as_str()), (1, Some("embedded")), "{py}");

    // Refused without the admin scope, without a token, or without the
    // mark a web page cannot send; an unknown upstream is 404.
    let restart = format!("{base}/admin/v1/upstreams/py/restart");
    let unmarked = reqwest::Client::new().post(&restart).bearer_auth("ops-token").send().await.unwrap();
    assert_eq!(unmarked.status().as_u16(), 403, "a POST without X-Presa-Admin or a JSON body");
    assert_eq!(send(reqwest::Method::POST, restart.clone(), Some("user-token")).await.0, 403);
    assert_eq!(send(reqwest::Method::POST, restart.clone(), None).await.0, 401);
    assert_eq!(send(reqwest::Method::GET, format!("{base}/admin/v1/upstreams"), Some("user-token")).await.0, 403);
    let (status, body) =
        send(reqwest::Method::POST, format!("{base}/admin/v1/upstreams/nope/restart"), Some("ops-token")).await;
    assert_eq!(status, 404, "{body}");

    // A slow call in flight during the restart: it finishes on its connection.
    let slow = {
        let c = c.clone();
        tokio::spawn(async move { c.call_tool("slow_idempotent", json!({ "steps": 8, "step_ms": 250 })).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (status, body) = send(reqwest::Method::POST, restart, Some("ops-token")).await;
    assert_eq!((status, body["upstream"].as_str()), (202, Some("py")), "{body}");
    assert_eq!(body["nodes"].as_array().map(Vec::len), Some(1), "{body}");
    gw.wait_log("restart_upstream", Duration::from_secs(5)).await;
    let slow = slow.await.unwrap();
    assert!(text(&slow) == "done 8" && slow["isError"] != true, "{slow}");
    let py = py_once(&base, |p| p["restarts"] == 1).await;
    assert_eq!(py["state"], "ready", "{py}");

    // Calls keep working, on a new child.
    assert_eq!(text(&c.call_tool("add", json!({ "a": 3, "b": 4 })).await), "7");
    let after = text(&c.call_tool("pid", json!({})).await);
    assert_ne!(before, after, "a new child after the restart\n{}", gw.log());
}

/// The row of the process in `role` in an upstream's view.
fn row<'a>(u: &'a Value, role: &str) -> &'a Value {
    u["processes"].as_array().and_then(|p| p.iter().find(|r| r["role"] == role)).unwrap_or(&Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_every_process_reports_its_pool_and_a_restart_reaches_the_worker() {
    let cluster = Cluster::new(&[]).await;
    let command = python_upstream();
    let upstream = ["--upstream-command", command.as_str(), "--upstream-settle-ms", "0"];
    let (api, url) = cluster.api(&upstream).await;
    let worker = cluster.worker("w1", &upstream).await;
    let base = api.base();
    let c = Client::new(&url, json!({}));
    assert_eq!(text(&c.call_tool("add", json!({ "a": 1, "b": 2 })).await), "3");
    let before = text(&c.call_tool("pid", json!({})).await);

    // One upstream, whatever its name: a row from the API pod and one from the worker.
    let (_, view) = send(reqwest::Method::GET, format!("{base}/admin/v1/upstreams"), None).await;
    let name = view["upstreams"][0]["name"].as_str().unwrap_or_default().to_string();
    let u = upstream_once(&base, &name, |u| u["calls"] == 2 && !row(u, "worker").is_null()).await;
    assert_eq!(
        (row(&u, "api")["state"].as_str(), row(&u, "worker")["state"].as_str()),
        (Some("ready"), Some("ready")),
        "{u}"
    );
    assert_eq!(row(&u, "worker")["node"], "w1", "{u}");
    let (_, cluster_view) = send(reqwest::Method::GET, format!("{base}/admin/v1/cluster"), None).await;
    let nodes = cluster_view["nodes"].as_array().cloned().unwrap_or_default();
    assert!(nodes.len() == 2 && nodes.iter().all(|n| n.get("upstreams").is_none()), "not in /cluster: {cluster_view}");

    let (status, body) = send(reqwest::Method::POST, format!("{base}/admin/v1/upstreams/{name}/restart"), None).await;
    assert_eq!(status, 202, "{body}");
    assert!(body["nodes"].as_array().is_some_and(|n| n.len() == 2 && n.contains(&json!("w1"))), "{body}");
    let u = upstream_once(&base, &name, |u| row(u, "api")["restarts"] == 1 && row(u, "worker")["restarts"] == 1).await;
    assert_eq!(u["restarts"], 2, "{u}\n{}", worker.log());
    let after = text(&c.call_tool("pid", json!({})).await);
    assert_ne!(before, after, "a new child after the restart");
    assert_eq!(text(&c.call_tool("add", json!({ "a": 2, "b": 5 })).await), "7");
}
