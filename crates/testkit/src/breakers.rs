//! The circuit-breaker scenario, on the demo's `fragile_job` (3 failures
//! within 10 s open its breaker for 2 s), run against any set of API pods
//! that share one store and whose processes have `PRESA_DEMO_FRAGILE_DIR`
//! set to the [`Upstream`]'s directory: embedded (one `presa-api`) or a
//! cluster (API pods and workers on Redis).
//!
//! The upstream dies: three plain calls fail (retryable), and the fourth is
//! refused at once by the open breaker (503, `Retry-After`, `circuit_open`)
//! without reaching it. Tasks then wait (`working`, "circuit open"), none
//! fails, and the upstream, by its own log, receives no call but one probe
//! per cool-down. It comes back: every task completes, a plain call passes.
//! `/readyz` answers 200 throughout.

use std::{path::PathBuf, time::Duration};

use serde_json::{Value, json};

use crate::{Client, task_id, tasks_caps};

/// `fragile_job`'s cool-down (`presa_demo::fragile::fragile_breaker`).
const COOL_DOWN_MS: u64 = 2_000;

/// `fragile_job`'s upstream: a directory whose `calls.log` has a line (Unix
/// ms) per call received, and that is down while it holds a file `down`.
#[derive(Debug)]
pub struct Upstream {
    dir: tempfile::TempDir,
}

impl Default for Upstream {
    fn default() -> Self {
        Upstream::new()
    }
}

impl Upstream {
    /// A new upstream, up.
    pub fn new() -> Self {
        Upstream { dir: tempfile::tempdir().expect("a temporary directory") }
    }

    /// The directory (the value of `PRESA_DEMO_FRAGILE_DIR`).
    pub fn dir(&self) -> &str {
        self.dir.path().to_str().expect("a UTF-8 temporary path")
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Kill it (`up`: false) or bring it back.
    pub fn set_up(&self, up: bool) {
        if up {
            std::fs::remove_file(self.path("down")).expect("remove down");
        } else {
            std::fs::write(self.path("down"), b"").expect("write down");
        }
    }

    /// The calls it received, Unix ms, in order.
    pub fn calls(&self) -> Vec<u64> {
        let log = std::fs::read_to_string(self.path("calls.log")).unwrap_or_default();
        log.lines().map(|l| l.parse().expect("a call's time")).collect()
    }
}

/// What the scenario saw, for the caller's own checks.
#[derive(Debug)]
pub struct Seen {
    /// The refusal of the plain call the open breaker turned away.
    pub refusal: Value,
    /// How many tasks waited and completed.
    pub tasks: usize,
    /// The calls the upstream received while down (Unix ms): the three
    /// failures that opened the breaker, then the probes.
    pub calls_while_down: Vec<u64>,
}

/// Run the scenario on the API pods at `apis` (MCP URLs; calls and tasks
/// go to each in turn), with `upstream` up.
pub async fn open_wait_and_recover(apis: &[String], upstream: &Upstream) -> Seen {
    let plain: Vec<Client> = apis.iter().map(|u| Client::new(u.as_str(), json!({}))).collect();
    let tasks: Vec<Client> = apis.iter().map(|u| Client::new(u.as_str(), tasks_caps())).collect();
    let call = json!({ "name": "fragile_job" });
    upstream.set_up(false);
    // Three failures reach the upstream and open the breaker.
    for i in 0..3 {
        let (status, _, e) = plain[i % plain.len()].refused("tools/call", call.clone()).await;
        assert_eq!(status, 503, "failure {}: {e}", i + 1);
        assert_eq!(e["data"]["retryable"], true, "{e}");
        assert!(e["message"].as_str().is_some_and(|m| m.contains("the upstream is down")), "{e}");
    }
    assert_eq!(upstream.calls().len(), 3, "three calls reached it");
    // The next is refused fast, without reaching it.
    let (status, retry_after, refusal) = plain[3 % plain.len()].refused("tools/call", call.clone()).await;
    assert_eq!((status, refusal["code"].as_i64()), (503, Some(-32603)), "{refusal}");
    assert_eq!(
        (&refusal["data"]["limit"], &refusal["data"]["breaker"]),
        (&json!("circuit_open"), &json!("fragile_job"))
    );
    assert_eq!(refusal["data"]["retryable"], true, "{refusal}");
    let after_ms = refusal["data"]["retryAfterMs"].as_u64().expect("retryAfterMs");
    assert!(after_ms > 0 && after_ms <= COOL_DOWN_MS, "{refusal}");
    assert!(matches!(retry_after.as_deref(), Some("1" | "2")), "Retry-After {retry_after:?}");
    let message = refusal["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("tool 'fragile_job' is failing (circuit open); try again in"), "{message}");
    assert_eq!(upstream.calls().len(), 3, "the refusal did not reach it");
    let opened_at = upstream.calls()[2];
    ready_everywhere(apis).await;
    // Tasks wait, saying why, holding no try back from anyone.
    let mut ids = Vec::new();
    for i in 0..8 {
        ids.push(task_id(&tasks[i % tasks.len()].call_tool("fragile_job", json!({})).await));
    }
    for id in &ids {
        let t = tasks[0]
            .wait_task_for(id, "waiting for the circuit", Duration::from_secs(10), |t| {
                t["statusMessage"].as_str().is_some_and(|m| m.contains("circuit open"))
            })
            .await;
        assert_eq!(t["status"], "working", "{t}");
        let m = t["statusMessage"].as_str().unwrap_or_default();
        assert!(m.starts_with("tool 'fragile_job' is failing (circuit open); trying again in"), "{m}");
    }
    // Three cool-downs with the upstream dead: only probes reach it, one a cool-down at most.
    tokio::time::sleep(Duration::from_millis(3 * COOL_DOWN_MS)).await;
    ready_everywhere(apis).await;
    let calls = upstream.calls();
    let now = now_ms();
    let probes = &calls[3..];
    assert!(probes.len() as u64 <= (now - opened_at) / COOL_DOWN_MS + 1, "more than a probe a cool-down: {calls:?}");
    for pair in calls[2..].windows(2) {
        assert!(pair[1] - pair[0] >= COOL_DOWN_MS - 100, "a probe came within a cool-down of a failure: {calls:?}");
    }
    for id in &ids {
        let t = tasks[0].get_task(id).await;
        assert_eq!(t["status"], "working", "none fails while the circuit is open: {t}");
    }
    // It comes back: the next probe closes the breaker, and every task completes.
    upstream.set_up(true);
    let calls_while_down = calls;
    for id in &ids {
        let t = tasks[1 % tasks.len()]
            .wait_task_for(id, "completed", Duration::from_secs(20), |t| t["status"] != "working")
            .await;
        assert_eq!(t["status"], "completed", "{t}");
    }
    let (status, _, e) = plain[0].refused("tools/call", call).await;
    assert_eq!(status, 200, "a plain call passes again: {e}");
    Seen { refusal, tasks: ids.len(), calls_while_down }
}

/// `/readyz` of every API pod answers 200 (an open breaker is no reason to restart a pod).
async fn ready_everywhere(apis: &[String]) {
    for url in apis {
        let readyz = url.replace("/mcp", "/readyz");
        let status = reqwest::get(&readyz).await.map_or(0, |r| r.status().as_u16());
        assert_eq!(status, 200, "{readyz}");
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_millis() as u64
}
