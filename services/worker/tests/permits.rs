//! A tool's concurrency limit on a cluster: two API pods and two workers on
//! Redis, `exclusive_job` limited to 2 at once, checked by the tool's own
//! record of its runs (`PRESA_DEMO_RUNS_DIR`), not by presa's counters.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use presa_testkit::{
    Client, Pod, TestRedis, free_port, redis::unique_prefix, redis_cluster::cluster_urls, task_id, tasks_caps,
};
use serde_json::json;

/// A worker's lease (and so its permits'), ms.
const LEASE_MS: u64 = 2_000;

struct Cluster {
    /// The single Redis; `None`: the pods run in Redis Cluster mode on the local cluster.
    redis: Option<TestRedis>,
    url: String,
    prefix: String,
    runs: tempfile::TempDir,
}

fn worker_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_presa-worker"))
}

impl Cluster {
    async fn new() -> Cluster {
        let redis = TestRedis::start().await;
        let runs = tempfile::tempdir().expect("a runs directory");
        Cluster { url: redis.url().to_string(), redis: Some(redis), prefix: unique_prefix(), runs }
    }

    /// Pods in Redis Cluster mode on the local 3-master cluster, under the test's own prefix.
    fn on_redis_cluster() -> Cluster {
        let url = tokio::task::block_in_place(cluster_urls);
        Cluster { url, redis: None, prefix: unique_prefix(), runs: tempfile::tempdir().expect("a runs directory") }
    }

    fn env(&self) -> Vec<(&str, &str)> {
        vec![
            ("PRESA_REDIS_URL", self.url.as_str()),
            ("PRESA_REDIS_PREFIX", self.prefix.as_str()),
            ("PRESA_STATE_SECRET", "cluster-test-secret-at-least-32-bytes-long"),
            ("PRESA_DEMO_RUNS_DIR", self.runs.path().to_str().expect("a UTF-8 path")),
            ("PRESA_PERMIT_WAIT_MS", "300"),
            ("PRESA_REDIS_CLUSTER", if self.redis.is_none() { "true" } else { "false" }),
        ]
    }

    async fn api(&self, name: &str) -> Pod {
        Pod::start(name, &worker_bin().with_file_name("presa-api"), free_port(), &[], &self.env()).await
    }

    async fn worker(&self, name: &str) -> Pod {
        let args = ["--worker-id", name, "--lease-ms", &LEASE_MS.to_string()];
        Pod::start(name, &worker_bin(), free_port(), &args, &self.env()).await
    }

    /// The tool's record: each label's runs, (pid, start, end) in Unix ms
    /// (`end` None: it never ended).
    fn runs(&self) -> BTreeMap<String, Vec<(u32, u64, Option<u64>)>> {
        record(self.runs.path())
    }
}

fn record(dir: &Path) -> BTreeMap<String, Vec<(u32, u64, Option<u64>)>> {
    let text = std::fs::read_to_string(dir.join("exclusive_job.log")).unwrap_or_default();
    let mut runs: BTreeMap<String, Vec<(u32, u64, Option<u64>)>> = BTreeMap::new();
    for line in text.lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        let (pid, at) = (w[2].parse().expect("a pid"), w[3].parse().expect("a time"));
        let mine = runs.entry(w[1].to_string()).or_default();
        match w[0] {
            "start" => mine.push((pid, at, None)),
            _ => {
                if let Some(run) = mine.iter_mut().rev().find(|r| r.0 == pid && r.2.is_none()) {
                    run.2 = Some(at);
                }
            }
        }
    }
    runs
}

/// The most runs going on at once; a run that never ended ends at `cut` (its process was killed then).
fn most_at_once(runs: &[(u64, u64)]) -> usize {
    runs.iter().map(|&(s, _)| runs.iter().filter(|&&(s2, e2)| s2 <= s && s < e2).count()).max().unwrap_or(0)
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as u64
}

/// 20 tasks of `exclusive_job` (2 at once), created on two API pods and run
/// by two workers: by the tool's own record, never more than 2 run at once,
/// all complete, each once, in the order created (none starts before a
/// task created two or more before it); a plain call past the limit waits
/// `--permit-wait-ms` and gets 429 `tool_concurrency` with `Retry-After`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_tasks_of_a_tool_limited_to_two_run_two_at_once_in_creation_order() {
    twenty_tasks_two_at_once(Cluster::new().await).await;
}

/// The same with the pods in Redis Cluster mode: a limit's keys share one slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_tasks_two_at_once_on_redis_cluster() {
    twenty_tasks_two_at_once(Cluster::on_redis_cluster()).await;
}

async fn twenty_tasks_two_at_once(cluster: Cluster) {
    let (a, b) = (cluster.api("api-a").await, cluster.api("api-b").await);
    let _w1 = cluster.worker("w1").await;
    let _w2 = cluster.worker("w2").await;
    let clients = [Client::new(&a.url, tasks_caps()), Client::new(&b.url, tasks_caps())];
    let mut ids = Vec::new();
    for i in 0..20 {
        let args = json!({ "seconds": 0.3, "label": format!("t{i:02}") });
        ids.push(task_id(&clients[i % 2].call_tool("exclusive_job", args).await));
        // Creation order is by the millisecond: a pause keeps each its own.
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    let plain = Client::new(&b.url, json!({}));
    let (status, retry_after, error) =
        plain.refused("tools/call", json!({ "name": "exclusive_job", "arguments": { "label": "plain" } })).await;
    assert_eq!((status, retry_after.as_deref()), (429, Some("1")), "{error}");
    assert_eq!((&error["code"], &error["data"]["limit"]), (&json!(-32023), &json!("tool_concurrency")), "{error}");
    for id in &ids {
        let done =
            clients[1].wait_task_for(id, "completed", Duration::from_secs(60), |t| t["status"] != "working").await;
        assert_eq!(done["status"], "completed", "{done}");
    }
    let runs = cluster.runs();
    assert!(!runs.contains_key("plain"), "the refused call never ran");
    let mut spans = Vec::new();
    for i in 0..20 {
        let mine = &runs[&format!("t{i:02}")];
        assert_eq!(mine.len(), 1, "t{i:02} ran once: {mine:?}");
        spans.push((mine[0].1, mine[0].2.expect("it ended")));
    }
    assert_eq!(most_at_once(&spans), 2, "{runs:?}");
    for (i, a) in spans.iter().enumerate() {
        for (j, b) in spans.iter().enumerate().skip(i + 2) {
            assert!(a.0 <= b.0, "t{i:02} started after t{j:02}, created later: {runs:?}");
        }
    }
    let pids: std::collections::HashSet<u32> = runs.values().map(|r| r[0].0).collect();
    assert_eq!(pids.len(), 2, "both workers ran some: {runs:?}");
}

/// A worker SIGKILLed while its run holds a permit: the permit frees within
/// the lease without anyone releasing it (the killed task is cancelled, so
/// it is not taken over), and the task waiting in line runs while the other
/// worker's run still holds the second permit; never more than 2 at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_held_by_a_killed_worker_frees_within_its_lease() {
    let cluster = Cluster::new().await;
    let api = cluster.api("api").await;
    let workers = [cluster.worker("w1").await, cluster.worker("w2").await];
    let c = Client::new(&api.url, tasks_caps());
    let mut ids = BTreeMap::new();
    for (label, seconds) in [("long-a", 10.0), ("long-b", 10.0), ("next", 0.5)] {
        ids.insert(label, task_id(&c.call_tool("exclusive_job", json!({ "seconds": seconds, "label": label })).await));
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let runs = loop {
        let runs = cluster.runs();
        if runs.len() == 2 {
            break runs;
        }
        assert!(std::time::Instant::now() < deadline, "two runs never started: {runs:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(!runs.contains_key("next"), "the third waits: {runs:?}");
    let victim = workers.iter().position(|w| runs["long-a"][0].0 == w.pid()).expect("long-a's worker");
    let survivor_label = "long-b";
    workers[victim].signal("KILL");
    let killed_at = now_ms();
    // Cancelled, the killed run is never taken over: its permit can only lapse.
    c.ok("tasks/cancel", json!({ "taskId": ids["long-a"] })).await;
    let done = c.wait_task_for(&ids["next"], "completed", Duration::from_secs(30), |t| t["status"] != "working").await;
    assert_eq!(done["status"], "completed", "{done}");
    let runs = cluster.runs();
    let next = runs["next"][0];
    let waited = next.1.saturating_sub(killed_at);
    // The lease (2 s), then the waiter's next look (at most a lease later), and slack.
    assert!(waited <= 2 * LEASE_MS + 2_000, "the permit came back {waited} ms after the kill: {runs:?}");
    let other = runs[survivor_label][0];
    assert!(other.2.is_none_or(|end| end > next.1), "the other permit was still held: {runs:?}");
    let mut spans: Vec<(u64, u64)> = runs
        .values()
        .flatten()
        .map(|&(_, s, e)| (s, e.unwrap_or(if s < killed_at { killed_at } else { u64::MAX })))
        .collect();
    spans.sort_unstable();
    assert_eq!(most_at_once(&spans), 2, "{runs:?}");
    assert_eq!(runs["long-a"].len(), 1, "the cancelled run never ran again: {runs:?}");
}
