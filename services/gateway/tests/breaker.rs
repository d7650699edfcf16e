//! presa-gateway's circuit breaker on an upstream (`[[upstream]] breaker`),
//! in front of the Python server written with the official `mcp` SDK
//! (`tests/gateway/upstream.py` over Streamable HTTP), on a cluster: Redis,
//! two gateway API pods and two gateway workers, the breaker shared by all.
//!
//! The upstream goes down (its `fragile` tool's calls answered HTTP 503, each
//! logged by the upstream itself): three failed plain calls open the breaker,
//! the next plain call, on the other pod, is refused at once (503,
//! `Retry-After`, `circuit_open`) without reaching it; tasks wait (`working`,
//! "upstream 'py' is failing (circuit open)"), none fails, and the
//! upstream's log shows one probe per cool-down at most; every pod stays
//! ready. It comes back: every task completes and a plain call passes; the
//! admin API shows the breaker closed again. Then the upstream's process
//! dies (connection refused): the breaker opens again, every pod stays ready
//! (an upstream without a breaker would make them unready), tasks wait, and
//! all complete once the process is started again.
//!
//! And embedded, over stdio: a child that exits mid-call, then a
//! replacement that cannot start, open the breaker; `/readyz` stays 200
//! (without a breaker an upstream that cannot start makes the pod unready),
//! and once the child can start again a probe call closes it.

mod common;

use std::time::Duration;

use common::{Cluster, gateway_bin, python_over_http, python_upstream};
use presa_testkit::{Client, Pod, free_port, task_id, tasks_caps};
use serde_json::{Value, json};

/// The breaker's cool-down (`cool_down_s` below), ms.
const COOL_DOWN_MS: f64 = 2_000.0;

/// The times (Unix s) of the calls of `fragile` the upstream received, from its own log.
fn calls(dir: &std::path::Path) -> Vec<f64> {
    let log = std::fs::read_to_string(dir.join("fragile.log")).unwrap_or_default();
    log.lines().map(|l| l.split(' ').nth(1).and_then(|t| t.parse().ok()).expect("a call's time")).collect()
}

async fn ready(base: &str) -> u16 {
    reqwest::get(format!("{base}/readyz")).await.map_or(0, |r| r.status().as_u16())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstreams_breaker_spares_it_while_down_and_its_tasks_complete_once_back() {
    let dir = tempfile::tempdir().unwrap();
    let flaky = dir.path().join("calls");
    std::fs::create_dir_all(&flaky).unwrap();
    let port = free_port();
    let upstream = python_over_http(port, &flaky).await;
    let config = format!(
        r#"
[[upstream]]
name = "py"
url = "http://127.0.0.1:{port}/mcp"
breaker = {{ failures = 3, window_s = 10, cool_down_s = 2 }}

[[tool]]
match = "fragile"
retry = {{ attempts = 10, initial_ms = 200, max_ms = 1000 }}
"#
    );
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, config).unwrap();
    let args = ["--gateway-config", path.to_str().unwrap(), "--upstream-settle-ms", "0"];
    let cluster = Cluster::new(&[]).await;
    let (a, a_url) = cluster.api(&args).await;
    let (b, b_url) = cluster.api(&args).await;
    let w1 = cluster.worker("w1", &args).await;
    let _w2 = cluster.worker("w2", &args).await;
    let plain = [Client::new(&a_url, json!({})), Client::new(&b_url, json!({}))];
    let tasks = [Client::new(&a_url, tasks_caps()), Client::new(&b_url, tasks_caps())];
    let call = json!({ "name": "fragile" });

    std::fs::write(flaky.join("down"), b"").unwrap();
    for i in 0..3 {
        let (status, _, e) = plain[i % 2].refused("tools/call", call.clone()).await;
        assert_eq!((status, &e["data"]["retryable"]), (503, &json!(true)), "failure {}: {e}", i + 1);
    }
    assert_eq!(calls(&flaky).len(), 3, "three calls reached the upstream");
    let (status, retry_after, e) = plain[1].refused("tools/call", call.clone()).await;
    assert_eq!(
        (status, &e["data"]["limit"], &e["data"]["breaker"]),
        (503, &json!("circuit_open"), &json!("py")),
        "{e}"
    );
    assert!(matches!(retry_after.as_deref(), Some("1" | "2")), "Retry-After {retry_after:?}: {e}");
    assert!(e["data"]["retryAfterMs"].as_f64().is_some_and(|ms| ms > 0.0 && ms <= COOL_DOWN_MS), "{e}");
    let message = e["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("upstream 'py' is failing (circuit open); try again in"), "{message}");
    assert_eq!(calls(&flaky).len(), 3, "the refusal did not reach the upstream");
    let opened_at = calls(&flaky)[2];

    let mut ids = Vec::new();
    for i in 0..6 {
        ids.push(task_id(&tasks[i % 2].call_tool("fragile", json!({})).await));
    }
    for id in &ids {
        let t = tasks[0]
            .wait_task_for(id, "waiting for the circuit", Duration::from_secs(10), |t| {
                t["statusMessage"].as_str().is_some_and(|m| m.contains("circuit open"))
            })
            .await;
        let m = t["statusMessage"].as_str().unwrap_or_default();
        assert!(m.starts_with("upstream 'py' is failing (circuit open); trying again in"), "{t}");
    }
    // While it is down: only probes reach it, a cool-down apart; no task fails; every pod is ready.
    tokio::time::sleep(Duration::from_millis(3 * COOL_DOWN_MS as u64)).await;
    let down = calls(&flaky);
    let elapsed_ms = (now_s() - opened_at) * 1000.0;
    assert!((down.len() - 3) as f64 <= elapsed_ms / COOL_DOWN_MS + 1.0, "more than a probe a cool-down: {down:?}");
    for pair in down[2..].windows(2) {
        assert!((pair[1] - pair[0]) * 1000.0 >= COOL_DOWN_MS - 100.0, "a probe within a cool-down: {down:?}");
    }
    for id in &ids {
        let t = tasks[1].get_task(id).await;
        assert_eq!(t["status"], "working", "{t}");
    }
    for base in [a.base(), b.base(), w1.base()] {
        assert_eq!(ready(&base).await, 200, "{base}/readyz while the breaker is open");
    }
    let scrape = reqwest::get(format!("{}/metrics", w1.base())).await.unwrap().text().await.unwrap();
    let state = scrape.lines().find_map(|l| l.strip_prefix("presa_breaker_state{breaker=\"py\"} "));
    assert!(matches!(state, Some("1" | "2")), "open or half-open: {state:?}");

    // Back: the next probe closes it, and every task completes.
    std::fs::remove_file(flaky.join("down")).unwrap();
    for id in &ids {
        let t = tasks[0].wait_task_for(id, "ended", Duration::from_secs(30), |t| t["status"] != "working").await;
        assert_eq!(t["status"], "completed", "{t}\n{}", w1.log());
    }
    let (status, _, e) = plain[0].refused("tools/call", call.clone()).await;
    assert_eq!(status, 200, "a plain call passes again: {e}");
    let view: Value = reqwest::get(format!("{}/admin/v1/breakers", a.base())).await.unwrap().json().await.unwrap();
    let py = view["breakers"].as_array().and_then(|all| all.iter().find(|x| x["name"] == "py")).cloned();
    let py = py.unwrap_or_else(|| panic!("no breaker py: {view}"));
    assert_eq!(py["state"], "closed", "{py}");
    assert_eq!((py["policy"]["failures"].as_u64(), py["policy"]["coolDownMs"].as_u64()), (Some(3), Some(2_000)));
    assert!(py["tools"].as_array().is_some_and(|t| t.contains(&json!("fragile")) && t.len() > 1), "shared: {py}");

    // The process dies: refused connections open the breaker again; the pods stay ready.
    drop(upstream);
    let mut refused = None;
    for i in 0..6 {
        let (status, _, e) = plain[i % 2].refused("tools/call", call.clone()).await;
        assert_eq!(status, 503, "{e}");
        if e["data"]["limit"] == "circuit_open" {
            refused = Some(i);
            break;
        }
    }
    assert_eq!(refused, Some(3), "three refused connections open it");
    for base in [a.base(), b.base(), w1.base()] {
        assert_eq!(ready(&base).await, 200, "{base}/readyz with the upstream's process gone");
    }
    let mut ids = Vec::new();
    for i in 0..4 {
        ids.push(task_id(&tasks[i % 2].call_tool("fragile", json!({})).await));
    }
    for id in &ids {
        tasks[0]
            .wait_task_for(id, "waiting for the circuit", Duration::from_secs(10), |t| {
                t["statusMessage"].as_str().is_some_and(|m| m.contains("circuit open"))
            })
            .await;
    }
    let _upstream = python_over_http(port, &flaky).await;
    for id in &ids {
        let t = tasks[1].wait_task_for(id, "ended", Duration::from_secs(40), |t| t["status"] != "working").await;
        assert_eq!(t["status"], "completed", "{t}\n{}", w1.log());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_upstream_that_cannot_start_opens_its_breaker_and_the_pod_stays_ready() {
    let dir = tempfile::tempdir().unwrap();
    let flaky = dir.path().join("calls");
    std::fs::create_dir_all(&flaky).unwrap();
    let down = flaky.join("down");
    // The child will not start while `down` exists (a shell runs the guard, then the server).
    let script = format!("test -e {} && exit 1; exec {}", down.display(), python_upstream());
    let command = serde_json::to_string(&format!("sh -c {}", serde_json::to_string(&script).unwrap())).unwrap();
    let config = format!(
        "[[upstream]]\nname = \"py\"\ncommand = {command}\ninherit_env = [\"PRESA_TEST_FLAKY_DIR\"]\n\
         breaker = {{ failures = 2, window_s = 10, cool_down_s = 2 }}\n"
    );
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, config).unwrap();
    let args = ["--gateway-config", path.to_str().unwrap(), "--upstream-settle-ms", "0"];
    let env = [("PRESA_TEST_FLAKY_DIR", flaky.to_str().unwrap())];
    let gw = Pod::start("gw", &gateway_bin(), free_port(), &args, &env).await;
    let plain = Client::new(format!("{}/mcp", gw.base()), json!({}));
    let add = json!({ "name": "add", "arguments": { "a": 1, "b": 2 } });
    assert_eq!(plain.refused("tools/call", add.clone()).await.0, 200);

    std::fs::write(&down, b"").unwrap();
    // The child exits mid-call; its replacement cannot start: two failures open the breaker.
    let (status, _, e) = plain.refused("tools/call", json!({ "name": "exit_unsafe" })).await;
    assert_eq!(status, 503, "{e}");
    let (status, _, e) = plain.refused("tools/call", add.clone()).await;
    assert_eq!(status, 503, "no child can start: {e}\n{}", gw.log());
    let (status, retry_after, e) = plain.refused("tools/call", add.clone()).await;
    assert_eq!((status, &e["data"]["limit"]), (503, &json!("circuit_open")), "{e}\n{}", gw.log());
    assert!(retry_after.is_some(), "{e}");
    assert_eq!(ready(&gw.base()).await, 200, "the pod stays ready while its upstream cannot start");

    std::fs::remove_file(&down).unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (status, _, e) = plain.refused("tools/call", add.clone()).await;
        if status == 200 {
            break;
        }
        assert_eq!(e["data"]["limit"], "circuit_open", "only the open circuit refuses now: {e}");
        assert!(tokio::time::Instant::now() < deadline, "the breaker never closed: {e}\n{}", gw.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(ready(&gw.base()).await, 200);
}

fn now_s() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs_f64()
}
