//! presa-gateway in front of `@modelcontextprotocol/server-everything`, the
//! reference TypeScript server (npm; not written by presa), over stdio and in
//! its Streamable HTTP mode, driven by presa's test client over 2026-07-28.

mod common;

use std::{
    process::{Child, Command, Stdio},
    time::Duration,
};

use common::{embedded, fixtures, gateway_bin};
use presa_gateway::{
    catalog,
    config::{Endpoint, Timings, UpstreamConfig},
    pool::Pool,
};
use presa_testkit::{Client, Pod, TASKS, free_port, task_id};
use serde_json::{Value, json};

/// A client that declares the Tasks extension and every client capability.
fn client(url: &str) -> Client {
    Client::new(url, json!({ "elicitation": {}, "sampling": {}, "roots": {}, "extensions": { TASKS: {} } }))
}

/// The single input request of a task parked on input.
fn only_request(task: &Value) -> (String, Value) {
    let requests = task["inputRequests"].as_object().unwrap_or_else(|| panic!("no inputRequests: {task}"));
    assert_eq!(requests.len(), 1, "{task}");
    let (k, v) = requests.iter().next().unwrap();
    (k.clone(), v.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_list_is_the_upstream_s_own() {
    let f = fixtures();
    let (_gw, url) = embedded("gw", &f.everything_stdio, &[], &[]).await;
    let ours = client(&url).ok("tools/list", json!({})).await["tools"].as_array().cloned().unwrap();

    // The upstream's own listing, asked directly.
    let argv = shlex::split(&f.everything_stdio).unwrap();
    let up = UpstreamConfig {
        name: "everything".into(),
        endpoint: Endpoint::Stdio { argv, env: Default::default(), inherit: Vec::new(), cwd: None },
        prefix: String::new(),
        pool: 1,
        protocol: Default::default(),
        breaker: None,
        shape: Default::default(),
    };
    let timings = Timings {
        call_timeout: Duration::from_secs(30),
        wait: Duration::from_secs(30),
        connect_timeout: Duration::from_secs(30),
        settle: Duration::ZERO,
        cancel_grace: Duration::ZERO,
        status_interval: Duration::ZERO,
        refresh: None,
    };
    let pool = Pool::new(&up, &timings);
    let theirs = catalog::list(&pool, timings.call_timeout).await.unwrap().tools;
    pool.drain().await;

    assert!(theirs.len() >= 10, "server-everything lists its tools: {theirs:?}");
    assert_eq!(ours.len(), theirs.len());
    for (o, t) in ours.iter().zip(&theirs) {
        for field in ["name", "title", "description", "inputSchema", "outputSchema", "annotations"] {
            assert_eq!(o.get(field), t.get(field), "{field} of {}", t["name"]);
        }
        assert!(o["execution"]["taskSupport"].is_string(), "{o}");
    }
    let names: Vec<&str> = ours.iter().filter_map(|t| t["name"].as_str()).collect();
    for expected in ["get-sum", "trigger-long-running-operation", "trigger-elicitation-request", "get-roots-list"] {
        assert!(names.contains(&expected), "{expected} in {names:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompts_and_resources_are_proxied() {
    let (_gw, url) = embedded("gw", &fixtures().everything_stdio, &[], &[]).await;
    let c = Client::new(&url, json!({}));
    let prompts = c.ok("prompts/list", json!({})).await;
    assert!(prompts.to_string().contains("args-prompt"), "{prompts}");
    let got = c.ok("prompts/get", json!({ "name": "args-prompt", "arguments": { "city": "Lisbon" } })).await;
    assert!(got["messages"].to_string().contains("Lisbon"), "{got}");
    let (_, missing) = c.send("prompts/get", json!({ "name": "args-prompt", "arguments": {} })).await;
    assert!(missing["error"].to_string().contains("city"), "a missing required argument is refused: {missing}");

    let resources = c.ok("resources/list", json!({})).await;
    let uri = resources["resources"][0]["uri"].as_str().expect("a resource").to_string();
    let read = c.ok("resources/read", json!({ "uri": uri })).await;
    assert_eq!(read["contents"][0]["uri"], uri.as_str(), "{read}");
    let templates = c.ok("resources/templates/list", json!({})).await;
    assert!(templates["resourceTemplates"].as_array().is_some_and(|t| !t.is_empty()), "{templates}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_running_operation_is_a_task_whose_status_shows_its_progress() {
    let (_gw, url) = embedded("gw", &fixtures().everything_stdio, &[], &[]).await;
    let c = client(&url);
    let mut messages = Vec::new();
    let created = c.call_tool("trigger-long-running-operation", json!({ "duration": 2, "steps": 4 })).await;
    let id = task_id(&created);
    loop {
        let t = c.get_task(&id).await;
        if let Some(m) = t["statusMessage"].as_str()
            && messages.last() != Some(&m.to_string())
        {
            messages.push(m.to_string());
        }
        if t["status"] == "completed" {
            let text = t["result"]["content"][0]["text"].as_str().unwrap_or_default();
            assert!(text.contains("Long running operation completed"), "{t}");
            break;
        }
        assert!(messages.len() < 100 && t["status"] == "working", "{t}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        messages.iter().any(|m| m == "1/4" || m == "2/4" || m == "3/4"),
        "the status followed the upstream's progress: {messages:?}"
    );
    // The last progress usually lands before the result; rmcp hands each
    // notification to a task of its own, so it may arrive just after it.
    assert!(matches!(messages.last().map(String::as_str), Some("4/4" | "3/4")), "{messages:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elicitation_parks_the_task_until_tasks_update_answers_it() {
    let (_gw, url) = embedded("gw", &fixtures().everything_stdio, &[], &[]).await;
    let c = client(&url);
    let id = task_id(&c.call_tool("trigger-elicitation-request", json!({})).await);
    let parked = c.wait_status(&id, "input_required").await;
    let (key, request) = only_request(&parked);
    assert_eq!(request["method"], "elicitation/create", "{request}");
    assert!(request["params"]["requestedSchema"]["properties"]["name"].is_object(), "{request}");
    let answer = json!({ "action": "accept", "content": { "name": "Ada Lovelace" } });
    c.ok("tasks/update", json!({ "taskId": id, "inputResponses": { key.clone(): answer } })).await;
    let done = c.wait_status(&id, "completed").await;
    assert!(done["result"].to_string().contains("Ada Lovelace"), "{done}");
    assert_eq!(done["result"]["isError"], Value::Null, "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sampling_and_roots_requests_become_input_requests() {
    let (_gw, url) = embedded("gw", &fixtures().everything_stdio, &[], &[]).await;
    let c = client(&url);

    let id = task_id(&c.call_tool("trigger-sampling-request", json!({ "prompt": "the answer?" })).await);
    let (key, request) = only_request(&c.wait_status(&id, "input_required").await);
    assert_eq!(request["method"], "sampling/createMessage", "{request}");
    assert!(request["params"]["messages"].to_string().contains("the answer?"), "{request}");
    let sampled =
        json!({ "role": "assistant", "content": { "type": "text", "text": "forty-two" }, "model": "test-model" });
    c.ok("tasks/update", json!({ "taskId": id, "inputResponses": { key: sampled } })).await;
    let done = c.wait_status(&id, "completed").await;
    assert!(done["result"].to_string().contains("forty-two"), "{done}");

    let id = task_id(&c.call_tool("get-roots-list", json!({})).await);
    let (key, request) = only_request(&c.wait_status(&id, "input_required").await);
    assert_eq!(request["method"], "roots/list", "{request}");
    let roots = json!({ "roots": [{ "uri": "file:///srv/project", "name": "project" }] });
    c.ok("tasks/update", json!({ "taskId": id, "inputResponses": { key: roots } })).await;
    let done = c.wait_status(&id, "completed").await;
    assert!(done["result"].to_string().contains("file:///srv/project"), "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_sum_stays_a_plain_fast_call() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("gateway.toml");
    let cmd = fixtures().everything_stdio;
    std::fs::write(
        &config,
        format!("[[upstream]]\nname = \"everything\"\ncommand = {cmd:?}\n\n[[tool]]\nmatch = \"get-s?m\"\npolicy = \"sync\"\n"),
    )
    .unwrap();
    let gw = Pod::start("gw", &gateway_bin(), free_port(), &["--gateway-config", config.to_str().unwrap()], &[]).await;
    let url = format!("{}/mcp", gw.base());
    // Even a client that declared Tasks gets the result itself.
    let r = client(&url).call_tool("get-sum", json!({ "a": 2, "b": 3 })).await;
    assert_eq!(r["resultType"], "complete", "{r}");
    assert_eq!(r["content"][0]["text"], "The sum of 2 and 3 is 5.", "{r}");
    // Arguments are checked against the upstream's schema before anything runs.
    let (_, bad) = client(&url).send("tools/call", json!({ "name": "get-sum", "arguments": { "a": "two" } })).await;
    assert!(bad.to_string().contains("a"), "{bad}");
    assert!(bad["error"].is_object() || bad["result"]["isError"] == true, "{bad}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_task_after_ms_fast_calls_stay_plain_and_slow_ones_become_tasks() {
    let (_gw, url) = embedded("gw", &fixtures().everything_stdio, &["--task-after-ms", "1500"], &[]).await;
    let c = client(&url);
    let fast = c.call_tool("get-sum", json!({ "a": 1, "b": 2 })).await;
    assert_eq!(fast["resultType"], "complete", "{fast}");
    assert_eq!(fast["content"][0]["text"], "The sum of 1 and 2 is 3.", "{fast}");
    let slow = c.call_tool("trigger-long-running-operation", json!({ "duration": 4, "steps": 2 })).await;
    let id = task_id(&slow);
    let done = c.wait_task_for(&id, "completed", Duration::from_secs(20), |t| t["status"] == "completed").await;
    assert!(done["result"].to_string().contains("Long running operation completed"), "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_call_asks_its_question_by_mrtr_and_the_retry_finishes_it() {
    let (_gw, url) = embedded("gw", &fixtures().everything_stdio, &[], &[]).await;
    // No Tasks extension: the call runs in the request.
    let c = Client::new(&url, json!({ "elicitation": {} }));
    let first = c.call_tool("trigger-elicitation-request", json!({})).await;
    assert_eq!(first["resultType"], "input_required", "{first}");
    let (key, request) = {
        let r = first["inputRequests"].as_object().expect("inputRequests");
        let (k, v) = r.iter().next().unwrap();
        (k.clone(), v.clone())
    };
    assert_eq!(request["method"], "elicitation/create");
    let mut retry = json!({
        "name": "trigger-elicitation-request",
        "arguments": {},
        "inputResponses": { key: { "action": "accept", "content": { "name": "Grace Hopper" } } },
    });
    if let Some(state) = first.get("requestState") {
        retry["requestState"] = state.clone();
    }
    let done = c.ok("tools/call", retry).await;
    assert_eq!(done["resultType"], "complete", "{done}");
    assert!(done.to_string().contains("Grace Hopper"), "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_long_operation_ends_it_cancelled_and_the_gateway_goes_on() {
    let (gw, url) = embedded("gw", &fixtures().everything_stdio, &["--upstream-cancel-grace-ms", "500"], &[]).await;
    let c = client(&url);
    let id = task_id(&c.call_tool("trigger-long-running-operation", json!({ "duration": 60, "steps": 60 })).await);
    c.wait_task(&id, "working with progress", |t| t["statusMessage"].as_str().is_some_and(|m| m.contains("/60"))).await;
    c.ok("tasks/cancel", json!({ "taskId": id })).await;
    let t = c.wait_status(&id, "cancelled").await;
    assert_eq!(t["status"], "cancelled");
    // server-everything ignores notifications/cancelled and goes on sending
    // progress: its connection must serve no other call (it is closed after
    // the grace period), so a new operation shows only its own progress.
    let id = task_id(&c.call_tool("trigger-long-running-operation", json!({ "duration": 2, "steps": 2 })).await);
    let mut seen = Vec::new();
    loop {
        let t = c.get_task(&id).await;
        if let Some(m) = t["statusMessage"].as_str() {
            seen.push(m.to_string());
        }
        if t["status"] != "working" {
            assert_eq!(t["status"], "completed", "{t}");
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!seen.iter().any(|m| m.contains("/60")), "the cancelled call's progress leaked: {seen:?}");
    let r = Client::new(&url, json!({})).call_tool("get-sum", json!({ "a": 1, "b": 1 })).await;
    assert_eq!(r["content"][0]["text"], "The sum of 1 and 1 is 2.", "{r}\n{}", gw.log());
}

/// server-everything's Streamable HTTP mode on a free port.
struct HttpUpstream {
    child: Child,
    url: String,
}

impl Drop for HttpUpstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn http_upstream() -> HttpUpstream {
    let port = free_port();
    let argv = shlex::split(&fixtures().everything_http).unwrap();
    let child = Command::new(&argv[0])
        .args(&argv[1..])
        .env("PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting server-everything streamableHttp");
    let up = HttpUpstream { child, url: format!("http://127.0.0.1:{port}/mcp") };
    for _ in 0..200 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return up;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("server-everything streamableHttp never listened on {port}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamable_http_upstream_serves_plain_calls_and_tasks() {
    let up = http_upstream().await;
    let gw = Pod::start("gw", &gateway_bin(), free_port(), &["--upstream-url", &up.url], &[]).await;
    let url = format!("{}/mcp", gw.base());
    let c = client(&url);
    let tools = c.ok("tools/list", json!({})).await;
    assert!(tools.to_string().contains("trigger-long-running-operation"), "{tools}");
    let plain = Client::new(&url, json!({})).call_tool("get-sum", json!({ "a": 20, "b": 22 })).await;
    assert_eq!(plain["content"][0]["text"], "The sum of 20 and 22 is 42.", "{plain}");
    let id = task_id(&c.call_tool("trigger-long-running-operation", json!({ "duration": 1, "steps": 2 })).await);
    let done = c.wait_status(&id, "completed").await;
    assert!(done["result"].to_string().contains("Long running operation completed"), "{done}");
    let id = task_id(&c.call_tool("trigger-elicitation-request", json!({})).await);
    let (key, _) = only_request(&c.wait_status(&id, "input_required").await);
    c.ok("tasks/update", json!({ "taskId": id, "inputResponses": { key: { "action": "decline" } } })).await;
    let done = c.wait_status(&id, "completed").await;
    assert!(done["result"].to_string().to_lowercase().contains("decline"), "{done}\n{}", gw.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_cannot_start_is_refused_at_start_with_its_reason() {
    let out = Command::new(gateway_bin())
        .args(["--upstream-command", "/nonexistent/mcp-server --stdio", "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/mcp-server"), "{err}");
    let out = Command::new(gateway_bin()).args(["--listen", "127.0.0.1:0"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no upstream"), "{}", String::from_utf8_lossy(&out.stderr));
}
