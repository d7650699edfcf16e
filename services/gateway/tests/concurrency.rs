//! A `[[tool]]` rule's `concurrency` on a gateway cluster (Redis, an API pod
//! and two worker pods, each with its own pool of 4 Python `mcp` SDK
//! children): the upstream's own log of its calls (`exclusive` in
//! `tests/gateway/upstream.py`) shows it never runs more than the limit at
//! once, though the pools could run 8, and every task completes.

mod common;

use std::{path::Path, time::Duration};

use common::{Cluster, python_upstream};
use presa_testkit::{Client, task_id, tasks_caps};
use serde_json::json;

/// The upstream's record of `exclusive`'s calls: (label, start, end), unix seconds.
fn spans(dir: &Path) -> Vec<(String, f64, f64)> {
    let text = std::fs::read_to_string(dir.join("exclusive.spans")).unwrap_or_default();
    let mut open: Vec<(String, f64)> = Vec::new();
    let mut done = Vec::new();
    for line in text.lines() {
        let w: Vec<&str> = line.split(' ').collect();
        let [what, label, at, _pid] = w[..] else { panic!("a line is `<what> <label> <time> <pid>`: {line:?}") };
        let at: f64 = at.parse().expect("a time");
        match what {
            "start" => open.push((label.to_string(), at)),
            _ => {
                let i = open.iter().position(|(l, _)| l == label).expect("a start before its end");
                let (label, start) = open.remove(i);
                done.push((label, start, at));
            }
        }
    }
    assert!(open.is_empty(), "calls that never ended: {open:?}");
    done
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rules_concurrency_bounds_the_calls_the_upstream_runs_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let calls = dir.path().join("calls");
    std::fs::create_dir_all(&calls).unwrap();
    let command = serde_json::to_string(&python_upstream()).unwrap();
    let config = format!(
        r#"
[[upstream]]
name = "py"
command = {command}
inherit_env = ["PRESA_TEST_FLAKY_DIR"]
pool = 4

[[tool]]
match = "exclusive"
policy = "required"
concurrency = {{ limit = 2 }}
"#
    );
    let path = dir.path().join("gateway.toml");
    std::fs::write(&path, config).unwrap();
    let cluster = Cluster::new(&[("PRESA_TEST_FLAKY_DIR", calls.to_str().unwrap())]).await;
    let flags = ["--gateway-config", path.to_str().unwrap(), "--upstream-settle-ms", "0"];
    let _w1 = cluster.worker("w1", &flags).await;
    let _w2 = cluster.worker("w2", &flags).await;
    let (api, url) = cluster.api(&flags).await;
    let c = Client::new(&url, tasks_caps());
    let mut ids = Vec::new();
    for i in 0..8 {
        let args = json!({ "seconds": 0.5, "label": format!("c{i}") });
        ids.push(task_id(&c.call_tool("exclusive", args).await));
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    for id in &ids {
        let done = c.wait_task_for(id, "completed", Duration::from_secs(60), |t| t["status"] != "working").await;
        assert_eq!(done["status"], "completed", "{done}\n{}", api.log());
    }
    let mut runs = spans(&calls);
    assert_eq!(runs.len(), 8, "each task called the upstream once: {runs:?}");
    runs.sort_by(|a, b| a.0.cmp(&b.0));
    let most = runs.iter().map(|(_, s, _)| runs.iter().filter(|(_, s2, e2)| s2 <= s && s < e2).count()).max();
    assert_eq!(most, Some(2), "the upstream ran at most 2 at once: {runs:?}");
    // (Permits go in creation order, but not the upstream's starts: a pool
    // starting a new Python child takes longer than one already running.)
}
