//! Crash recovery, fencing and graceful shutdown with real processes:
//! `presa-api` and `presa-worker` binaries over a real Redis.
//!
//! Each test gets its own key prefix, so tests share one Redis safely.

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use presa_testkit::{Client, Pod, TestRedis, free_port, redis::unique_prefix, tasks_caps};
use serde_json::{Value, json};

struct Cluster {
    redis: TestRedis,
    prefix: String,
}

fn worker_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_presa-worker"))
}

fn api_bin() -> PathBuf {
    worker_bin().with_file_name("presa-api")
}

impl Cluster {
    async fn new() -> Cluster {
        Cluster { redis: TestRedis::start().await, prefix: unique_prefix() }
    }

    /// A cluster on a private `redis-server` the test may stop or restart.
    fn with_private_redis() -> Cluster {
        Cluster { redis: TestRedis::spawn(), prefix: unique_prefix() }
    }

    fn env(&self) -> Vec<(&str, &str)> {
        vec![
            ("PRESA_REDIS_URL", self.redis.url()),
            ("PRESA_REDIS_PREFIX", self.prefix.as_str()),
            ("PRESA_STATE_SECRET", "cluster-test-secret-at-least-32-bytes-long"),
        ]
    }

    async fn api(&self, name: &str, args: &[&str]) -> Pod {
        Pod::start(name, &api_bin(), free_port(), args, &self.env()).await
    }

    async fn worker(&self, name: &str, lease_ms: u64, args: &[&str]) -> Pod {
        let lease = lease_ms.to_string();
        let mut all = vec!["--worker-id", name, "--lease-ms", &lease];
        all.extend_from_slice(args);
        Pod::start(name, &worker_bin(), free_port(), &all, &self.env()).await
    }
}

fn task_id(created: &Value) -> String {
    assert_eq!(created["resultType"], "task", "{created}");
    created["taskId"].as_str().unwrap().to_string()
}

fn is_terminal(t: &Value) -> bool {
    ["completed", "failed", "cancelled"].contains(&t["status"].as_str().unwrap_or_default())
}

/// A worker SIGKILLed mid-run: the task completes on another worker within
/// the lease plus the run time plus a few seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_run_completes_on_another_worker() {
    let cluster = Cluster::new().await;
    let api = cluster.api("api", &[]).await;
    let w1 = cluster.worker("w1", 2000, &[]).await;
    let c = Client::new(&api.url, tasks_caps());
    let id = task_id(&c.call_tool("slow_compute", json!({ "seconds": 2, "label": "crash" })).await);
    c.wait_task(&id, "running on w1", |t| t["statusMessage"].as_str().is_some_and(|m| m.starts_with("Computing")))
        .await;
    let w2 = cluster.worker("w2", 2000, &[]).await;
    w1.signal("KILL");
    let killed = Instant::now();
    let done = c.wait_task_for(&id, "terminal", Duration::from_secs(20), is_terminal).await;
    assert_eq!(done["status"], "completed", "{done}\nw2 log:\n{}", w2.log());
    assert_eq!(done["result"]["content"][0]["text"], "Completed crash");
    // lease (2 s) + run (2 s) + claim polling and slack
    assert!(killed.elapsed() < Duration::from_secs(12), "recovery took {:?}", killed.elapsed());
}

/// An `input_required` task whose worker dies completes after one
/// `tasks/update`: the worker that takes over replays the recorded answer
/// instead of asking again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_task_survives_its_worker_and_is_not_asked_twice() {
    let cluster = Cluster::new().await;
    let api = cluster.api("api", &[]).await;
    let w1 = cluster.worker("w1", 1500, &[]).await;
    let c = Client::new(&api.url, tasks_caps());
    let id = task_id(&c.call_tool("deploy_release", json!({ "version": "9.9.9", "step_seconds": 0.2 })).await);
    let parked = c.wait_status(&id, "input_required").await;
    assert!(parked["inputRequests"]["approve-9.9.9"].is_object(), "{parked}");
    let _w2 = cluster.worker("w2", 1500, &[]).await;
    w1.signal("KILL");
    let answer = json!({ "approve-9.9.9": { "action": "accept", "content": { "approve": true } } });
    c.ok("tasks/update", json!({ "taskId": id, "inputResponses": answer })).await;
    // From now on the task must never ask again.
    let deadline = Instant::now() + Duration::from_secs(20);
    let done = loop {
        let t = c.get_task(&id).await;
        assert_ne!(t["status"], "input_required", "the client was asked twice: {t}");
        if is_terminal(&t) {
            break t;
        }
        assert!(Instant::now() < deadline, "never finished: {t}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["content"][0]["text"], "Released 9.9.9 to production");
}

/// Killing one API pod loses no task: every task created through it
/// completes and is readable through the other pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_an_api_pod_loses_no_task() {
    let cluster = Cluster::new().await;
    let api1 = cluster.api("api1", &[]).await;
    let api2 = cluster.api("api2", &[]).await;
    let _w = cluster.worker("w1", 5000, &[]).await;
    let via1 = Client::new(&api1.url, tasks_caps());
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(task_id(&via1.call_tool("slow_compute", json!({ "seconds": 1, "label": format!("t{i}") })).await));
    }
    api1.signal("KILL");
    let via2 = Client::new(&api2.url, tasks_caps());
    for (i, id) in ids.iter().enumerate() {
        let t = via2.wait_task_for(id, "completed", Duration::from_secs(20), is_terminal).await;
        assert_eq!(t["status"], "completed", "{t}");
        assert_eq!(t["result"]["content"][0]["text"], format!("Completed t{i}"));
    }
}

/// Fencing: a worker stalled past its lease (SIGSTOP, then SIGCONT) cannot
/// overwrite the outcome written by the worker that took over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_worker_cannot_overwrite_the_takeover_outcome() {
    let cluster = Cluster::new().await;
    let api = cluster.api("api", &[]).await;
    let w1 = cluster.worker("w1", 1500, &[]).await;
    let c = Client::new(&api.url, tasks_caps());
    let id = task_id(&c.call_tool("slow_compute", json!({ "seconds": 2, "label": "fence" })).await);
    c.wait_task(&id, "running on w1", |t| t["statusMessage"].as_str().is_some_and(|m| m.starts_with("Computing")))
        .await;
    w1.signal("STOP");
    let w2 = cluster.worker("w2", 1500, &[]).await;
    let done = c.wait_task_for(&id, "terminal", Duration::from_secs(20), is_terminal).await;
    assert_eq!(done["status"], "completed", "{done}\nw2:\n{}", w2.log());
    // w1 wakes up with its handler finished and its lease long gone.
    w1.signal("CONT");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = c.get_task(&id).await;
    assert_eq!(after, done, "the stalled worker changed the outcome");
    let log = w1.log();
    assert!(
        log.contains("taken over") || log.contains("claim") || !log.contains("task finished"),
        "w1 must not record an outcome:\n{log}"
    );
}

/// SIGTERM to a worker mid-task: after its grace period it hands the work
/// back, and another worker completes it long before the lease would lapse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_worker_hands_work_back_at_once() {
    let cluster = Cluster::new().await;
    let api = cluster.api("api", &[]).await;
    let lease_ms = 60_000;
    let mut w1 = cluster.worker("w1", lease_ms, &["--grace-ms", "300"]).await;
    let c = Client::new(&api.url, tasks_caps());
    let id = task_id(&c.call_tool("slow_compute", json!({ "seconds": 2, "label": "handover" })).await);
    c.wait_task(&id, "running on w1", |t| t["statusMessage"].as_str().is_some_and(|m| m.starts_with("Computing")))
        .await;
    let _w2 = cluster.worker("w2", lease_ms, &[]).await;
    w1.signal("TERM");
    let stopped = Instant::now();
    let status = w1.wait_exit(Duration::from_secs(10)).await;
    assert!(status.success(), "w1 exit: {status}\n{}", w1.log());
    let done = c.wait_task_for(&id, "terminal", Duration::from_secs(20), is_terminal).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert!(stopped.elapsed() < Duration::from_secs(15), "took {:?}, the lease is 60 s", stopped.elapsed());
    assert!(w1.log().contains("handing unfinished work back"), "{}", w1.log());
}

/// SIGTERM to an API pod: its in-flight requests still complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_api_finishes_in_flight_requests() {
    let cluster = Cluster::new().await;
    let mut api = cluster.api("api", &["--grace-ms", "10000"]).await;
    // Without the Tasks declaration slow_compute runs inside the request.
    let c = Client::new(&api.url, json!({}));
    let call =
        tokio::spawn(async move { c.call_tool("slow_compute", json!({ "seconds": 1.5, "label": "inflight" })).await });
    tokio::time::sleep(Duration::from_millis(400)).await;
    api.signal("TERM");
    let result = call.await.expect("the in-flight request completed");
    assert_eq!(result["content"][0]["text"], "Completed inflight");
    let status = api.wait_exit(Duration::from_secs(10)).await;
    assert!(status.success(), "api exit: {status}\n{}", api.log());
}

/// Redis unreachable: requests fail promptly with a retryable -32603 (HTTP
/// 503) instead of hanging, `/readyz` reports it, and the pods recover on
/// their own once Redis is back, including after a restart that lost everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_outage_is_retryable_and_pods_recover() {
    let mut cluster = Cluster::with_private_redis();
    let api = cluster.api("api", &["--redis-timeout-ms", "500"]).await;
    let _w = cluster.worker("w1", 2000, &["--redis-timeout-ms", "500"]).await;
    let c = Client::new(&api.url, tasks_caps());
    let readyz = api.url.replace("/mcp", "/readyz");
    let id = task_id(&c.call_tool("slow_compute", json!({ "seconds": 0, "label": "before" })).await);
    c.wait_status(&id, "completed").await;

    cluster.redis.signal("STOP");
    for (method, params) in [
        ("tools/call", json!({ "name": "slow_compute", "arguments": { "seconds": 0 } })),
        ("tasks/get", json!({ "taskId": id })),
    ] {
        let started = Instant::now();
        let (status, e) = c.err(method, params).await;
        assert_eq!(status, 503, "{method}: {e}");
        assert_eq!(e["code"], -32603);
        assert_eq!(e["data"]["retryable"], true);
        assert!(started.elapsed() < Duration::from_secs(5), "{method} took {:?}", started.elapsed());
    }
    let r = reqwest::get(&readyz).await.unwrap();
    assert_eq!(r.status().as_u16(), 503);

    cluster.redis.signal("CONT");
    let id = recover(&c, "after-stop").await;
    assert!(!id.is_empty());
    assert_eq!(reqwest::get(&readyz).await.unwrap().status().as_u16(), 200);

    // A restart that lost every key (no persistence): new work flows again.
    cluster.redis.restart();
    recover(&c, "after-restart").await;
}

/// Retry creating a task until the pods are back (20 s at most), then wait for it to complete.
async fn recover(c: &Client, label: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, v) = c
            .send("tools/call", json!({ "name": "slow_compute", "arguments": { "seconds": 0, "label": label } }))
            .await;
        if status == 200 {
            let id = task_id(&v["result"]);
            let done = c.wait_task_for(&id, "terminal", Duration::from_secs(20), is_terminal).await;
            assert_eq!(done["status"], "completed", "{done}");
            return id;
        }
        assert_eq!(v["error"]["data"]["retryable"], true, "only retryable errors while recovering: {v}");
        assert!(Instant::now() < deadline, "the pods did not recover: {v}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// notifications/tasks across pods: a listen stream on api2 sees every change
/// of a task created through api1, run by a worker and answered through api1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_notifications_cross_pods() {
    let cluster = Cluster::new().await;
    let api1 = cluster.api("api1", &[]).await;
    let api2 = cluster.api("api2", &[]).await;
    let _w = cluster.worker("w1", 5000, &[]).await;
    let via1 = Client::new(&api1.url, tasks_caps());
    let via2 = Client::new(&api2.url, tasks_caps());
    let id = task_id(&via1.call_tool("deploy_release", json!({ "version": "3.0.0", "step_seconds": 0.3 })).await);
    let (status, mut stream) = via2.listen(json!({ "taskIds": [id] })).await;
    assert_eq!(status, 200);
    let ack = presa_testkit::next_within(&mut stream, 5).await;
    assert_eq!(ack["params"]["notifications"]["taskIds"], json!([id]));
    let mut seen: Vec<String> = Vec::new();
    while seen.last().map(String::as_str) != Some("completed") {
        let n = presa_testkit::next_within(&mut stream, 15).await;
        assert_eq!(n["method"], "notifications/tasks", "{n}");
        let status = n["params"]["status"].as_str().unwrap().to_string();
        if status == "input_required" && !seen.contains(&status) {
            let answer = json!({ "approve-3.0.0": { "action": "accept", "content": { "approve": true } } });
            via1.ok("tasks/update", json!({ "taskId": id, "inputResponses": answer })).await;
        }
        if seen.last() != Some(&status) {
            seen.push(status);
        }
    }
    assert_eq!(seen, ["working", "input_required", "working", "completed"]);
}

/// On Redis with worker pods and `--auth jwt`: another principal's task
/// answers exactly like an unknown one, and the worker's handler sees its
/// creator (`ctx.caller()`, tenant from `--jwt-tenant-claim`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_are_private_to_their_principal_on_redis() {
    use presa_testkit::jwt::{Key, TestIssuer};
    let cluster = Cluster::new().await;
    let port = free_port();
    let resource = format!("http://127.0.0.1:{port}/mcp");
    let issuer = TestIssuer::new("https://issuer.test", resource.clone());
    let dir = tempfile::tempdir().unwrap();
    let jwks = dir.path().join("jwks.json");
    std::fs::write(&jwks, issuer.jwks().to_string()).unwrap();
    let args = [
        "--auth",
        "jwt",
        "--jwt-issuer",
        "https://issuer.test",
        "--resource-url",
        &resource,
        "--jwt-tenant-claim",
        "org",
        "--jwks-file",
        jwks.to_str().unwrap(),
    ];
    let api = Pod::start("api", &api_bin(), port, &args, &cluster.env()).await;
    let _worker = cluster.worker("w1", 2000, &[]).await;
    let as_user = |sub: &str| {
        let mut claims = issuer.claims(sub, &["deploy"]);
        claims["org"] = json!("acme");
        Client::new(&api.url, tasks_caps()).with_bearer(&issuer.sign(Key::Ec, &claims))
    };
    let (alice, bob) = (as_user("alice"), as_user("bob"));
    presa_testkit::principals::tasks_stay_with_their_principal(&alice, &bob, "acme", "alice").await;
    // Without a token: 401 before anything else.
    let (status, _) = Client::new(&api.url, tasks_caps()).send("tools/list", json!({})).await;
    assert_eq!(status, 401);
}
