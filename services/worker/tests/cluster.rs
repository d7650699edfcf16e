//! Crash recovery, fencing and graceful shutdown with real processes:
//! `presa-api` and `presa-worker` binaries over a real Redis.
//!
//! Each test gets its own key prefix, so tests share one Redis safely. The
//! crash tests (worker SIGKILL, API pod SIGKILL, input replay after a worker
//! death) run twice: on a single Redis and with the pods in Redis Cluster mode
//! on a local 3-master cluster (`presa_testkit::redis_cluster`).

use std::{
    path::PathBuf,
    time::{Duration, Instant},
};

use presa_testkit::{
    Client, Pod, TestRedis, free_port, redis::unique_prefix, redis_cluster::cluster_urls, task_id, tasks_caps,
};
use serde_json::{Value, json};

struct Cluster {
    /// The single Redis; `None`: the pods run in Redis Cluster mode on the local cluster.
    redis: Option<TestRedis>,
    prefix: String,
    /// The URL pods use (the server's, or with a user's credentials; the
    /// cluster's seed URLs, comma-separated).
    url: String,
}

fn worker_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_presa-worker"))
}

fn api_bin() -> PathBuf {
    worker_bin().with_file_name("presa-api")
}

impl Cluster {
    async fn new() -> Cluster {
        let redis = TestRedis::start().await;
        Cluster { url: redis.url().to_string(), redis: Some(redis), prefix: unique_prefix() }
    }

    /// Pods in Redis Cluster mode (`PRESA_REDIS_CLUSTER`) on the local 3-master
    /// cluster this test binary shares, under the test's own prefix.
    fn on_redis_cluster() -> Cluster {
        let url = tokio::task::block_in_place(cluster_urls);
        Cluster { url, redis: None, prefix: unique_prefix() }
    }

    /// A cluster on a private `redis-server` the test may stop or restart.
    fn with_private_redis() -> Cluster {
        let redis = TestRedis::spawn();
        Cluster { url: redis.url().to_string(), redis: Some(redis), prefix: unique_prefix() }
    }

    /// A cluster on a private `redis-server` keeping an AOF, written to disk
    /// as `appendfsync` says (`everysec`, `always`).
    fn with_aof(appendfsync: &str) -> Cluster {
        let redis = TestRedis::spawn_with(&["--appendonly", "yes", "--appendfsync", appendfsync]);
        Cluster { url: redis.url().to_string(), redis: Some(redis), prefix: unique_prefix() }
    }

    /// The single Redis (tests that stop, restart or reconfigure it).
    fn redis(&mut self) -> &mut TestRedis {
        self.redis.as_mut().expect("a single Redis, not the cluster")
    }

    /// A private server whose pods log in as the ACL user `presa`.
    fn with_acl_user() -> Cluster {
        let redis = TestRedis::spawn();
        redis.cli(&["ACL", "SETUSER", "presa", "on", ">presa-secret", "~*", "&*", "+@all"]);
        Cluster {
            url: format!("redis://presa:presa-secret@127.0.0.1:{}", redis.port()),
            redis: Some(redis),
            prefix: unique_prefix(),
        }
    }

    fn env(&self) -> Vec<(&str, &str)> {
        vec![
            ("PRESA_REDIS_URL", self.url.as_str()),
            ("PRESA_REDIS_PREFIX", self.prefix.as_str()),
            ("PRESA_STATE_SECRET", "cluster-test-secret-at-least-32-bytes-long"),
            ("PRESA_REDIS_CLUSTER", if self.redis.is_none() { "true" } else { "false" }),
        ]
    }

    async fn api(&self, name: &str, args: &[&str]) -> Pod {
        Pod::start(name, &api_bin(), free_port(), args, &self.env()).await
    }

    async fn worker(&self, name: &str, lease_ms: u64, args: &[&str]) -> Pod {
        self.faulty_worker(name, lease_ms, args, None).await
    }

    /// A worker with a `PRESA_FAULT` injected (see `crates/store-redis/src/work.rs`).
    async fn faulty_worker(&self, name: &str, lease_ms: u64, args: &[&str], fault: Option<&str>) -> Pod {
        let lease = lease_ms.to_string();
        let mut all = vec!["--worker-id", name, "--lease-ms", &lease];
        all.extend_from_slice(args);
        let mut env = self.env();
        env.extend(fault.map(|f| ("PRESA_FAULT", f)));
        Pod::start(name, &worker_bin(), free_port(), &all, &env).await
    }
}

/// Create a `slow_compute` task and wait until a worker runs it; its id.
async fn running(c: &Client, seconds: u64, label: &str) -> String {
    let id = task_id(&c.call_tool("slow_compute", json!({ "seconds": seconds, "label": label })).await);
    c.wait_task(&id, "running", |t| t["statusMessage"].as_str().is_some_and(|m| m.starts_with("Computing"))).await;
    id
}

fn is_terminal(t: &Value) -> bool {
    ["completed", "failed", "cancelled"].contains(&t["status"].as_str().unwrap_or_default())
}

/// A worker SIGKILLed mid-run: the task completes on another worker within
/// the lease plus the run time plus a few seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_run_completes_on_another_worker() {
    sigkill_mid_run_completes_on_another_worker_on(Cluster::new().await).await;
}

/// The same in Redis Cluster mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_run_completes_on_another_worker_on_redis_cluster() {
    sigkill_mid_run_completes_on_another_worker_on(Cluster::on_redis_cluster()).await;
}

async fn sigkill_mid_run_completes_on_another_worker_on(cluster: Cluster) {
    let api = cluster.api("api", &[]).await;
    let w1 = cluster.worker("w1", 2000, &[]).await;
    let c = Client::new(&api.url, tasks_caps());
    let id = running(&c, 2, "crash").await;
    let w2 = cluster.worker("w2", 2000, &[]).await;
    w1.signal("KILL");
    let killed = Instant::now();
    let done = c.wait_task_for(&id, "terminal", Duration::from_secs(20), is_terminal).await;
    assert_eq!(done["status"], "completed", "{done}\nw2 log:\n{}", w2.log());
    assert_eq!(done["result"]["content"][0]["text"], "Completed crash");
    // lease (2 s) + run (2 s) + claim polling and slack
    assert!(killed.elapsed() < Duration::from_secs(12), "recovery took {:?}", killed.elapsed());
}

/// Recovery bound, worst instant: a worker that dies right after work was
/// delivered to it (woken from its blocking wait), before it claimed it.
/// Another worker completes the task within one lease (2 s) plus slack, not
/// after `max_lease` (10 minutes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_dying_between_delivery_and_claim_is_recovered_within_a_lease() {
    let cluster = Cluster::new().await;
    let api = cluster.api("api", &[]).await;
    let mut w1 = cluster.faulty_worker("w1", 2000, &[], Some("exit-after-read")).await;
    let c = Client::new(&api.url, tasks_caps());
    let id = task_id(&c.call_tool("slow_compute", json!({ "seconds": 0, "label": "unclaimed" })).await);
    let died = died_before_claiming(&mut w1, Duration::from_secs(10)).await;
    assert_eq!(c.get_task(&id).await["statusMessage"], "Task accepted", "nobody claimed it yet");
    // one lease (2 s) + slack
    completes_on_a_new_worker(&cluster, &c, &id, 2000, died, Duration::from_secs(15)).await;
}

/// Wait for a `PRESA_FAULT=exit-…` worker to exit at its fault point; when it did.
async fn died_before_claiming(w: &mut Pod, within: Duration) -> Instant {
    let status = w.wait_exit(within).await;
    assert_eq!(status.code(), Some(86), "{} must die before claiming:\n{}", w.name, w.log());
    Instant::now()
}

/// Start a fresh worker and check it completes `id` within `bound` of `died`.
async fn completes_on_a_new_worker(
    cluster: &Cluster,
    c: &Client,
    id: &str,
    lease_ms: u64,
    died: Instant,
    bound: Duration,
) {
    let w = cluster.worker("rescuer", lease_ms, &[]).await;
    let done = c.wait_task_for(id, "terminal", Duration::from_secs(30), is_terminal).await;
    assert_eq!(done["status"], "completed", "{done}\nrescuer log:\n{}", w.log());
    assert!(died.elapsed() < bound, "recovery took {:?} (lease {lease_ms} ms)", died.elapsed());
}

/// Recovery bound, the recovering side: a worker that dies right after it
/// took over a dead worker's lapsed work, before claiming it, leaves that
/// work recoverable again one lease later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_dying_between_recovery_and_claim_is_recovered_within_a_lease() {
    let cluster = Cluster::new().await;
    let api = cluster.api("api", &[]).await;
    let w1 = cluster.worker("w1", 5000, &[]).await;
    let c = Client::new(&api.url, tasks_caps());
    let id = running(&c, 1, "twice").await;
    // w2 must be up before w1's lease lapses, even on a busy machine.
    let mut w2 = cluster.faulty_worker("w2", 5000, &[], Some("exit-after-recover")).await;
    w1.signal("KILL");
    let died = died_before_claiming(&mut w2, Duration::from_secs(20)).await;
    // one lease (5 s) + run (1 s) + slack
    completes_on_a_new_worker(&cluster, &c, &id, 5000, died, Duration::from_secs(20)).await;
}

/// Fencing at the read: a worker stalled between delivery and its claim for
/// longer than a lease loses the entry to the worker that recovered it; when
/// it resumes, its claim is refused and the outcome stands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reader_stalled_past_a_lease_loses_the_entry() {
    let cluster = Cluster::new().await;
    let api = cluster.api("api", &[]).await;
    // Stalled long enough for w2 to start and recover even on a busy machine.
    let w1 = cluster.faulty_worker("w1", 1500, &[], Some("stall-after-read:10000")).await;
    let c = Client::new(&api.url, tasks_caps());
    let id = task_id(&c.call_tool("slow_compute", json!({ "seconds": 0, "label": "late" })).await);
    let created = Instant::now();
    let w2 = cluster.worker("w2", 1500, &[]).await;
    let done = c.wait_task_for(&id, "terminal", Duration::from_secs(30), is_terminal).await;
    assert_eq!(done["status"], "completed", "{done}\nw2 log:\n{}\nw1 log:\n{}", w2.log(), w1.log());
    // w1 resumes (10 s after its read) and must not claim or run the task.
    tokio::time::sleep(Duration::from_secs(11).saturating_sub(created.elapsed())).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(c.get_task(&id).await, done, "the late reader changed the task\nw1 log:\n{}", w1.log());
    let log = w1.log();
    assert!(log.contains("stalling before the claim"), "{log}");
    assert!(!log.contains("task finished"), "the late reader ran the task:\n{log}");
}

/// An `input_required` task whose worker dies completes after one
/// `tasks/update`: the worker that takes over replays the recorded answer
/// instead of asking again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_task_survives_its_worker_and_is_not_asked_twice() {
    parked_task_survives_its_worker_and_is_not_asked_twice_on(Cluster::new().await).await;
}

/// The same in Redis Cluster mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_task_survives_its_worker_and_is_not_asked_twice_on_redis_cluster() {
    parked_task_survives_its_worker_and_is_not_asked_twice_on(Cluster::on_redis_cluster()).await;
}

async fn parked_task_survives_its_worker_and_is_not_asked_twice_on(cluster: Cluster) {
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
    killing_an_api_pod_loses_no_task_on(Cluster::new().await).await;
}

/// The same in Redis Cluster mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_an_api_pod_loses_no_task_on_redis_cluster() {
    killing_an_api_pod_loses_no_task_on(Cluster::on_redis_cluster()).await;
}

async fn killing_an_api_pod_loses_no_task_on(cluster: Cluster) {
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
    let id = running(&c, 2, "fence").await;
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
    let id = running(&c, 2, "handover").await;
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

    cluster.redis().signal("STOP");
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

    cluster.redis().signal("CONT");
    let id = recover(&c, "after-stop").await;
    assert!(!id.is_empty());
    assert_eq!(reqwest::get(&readyz).await.unwrap().status().as_u16(), 200);

    // A restart that lost every key (no persistence): new work flows again.
    cluster.redis().restart();
    recover(&c, "after-restart").await;
}

/// A worker whose Redis user is removed (its connections are closed, every
/// reconnect is refused) and restored recovers on its own: claims run again
/// without a restart, as do the API pod's requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_redis_user_then_restored_pods_recover() {
    let mut cluster = Cluster::with_acl_user();
    let api = cluster.api("api", &["--redis-timeout-ms", "500"]).await;
    let w = cluster.worker("w1", 2000, &["--redis-timeout-ms", "500"]).await;
    let c = Client::new(&api.url, tasks_caps());
    recover(&c, "before").await;

    cluster.redis().cli(&["ACL", "DELUSER", "presa"]);
    let (status, e) = c.send("tools/call", json!({ "name": "slow_compute", "arguments": { "seconds": 0 } })).await;
    assert_eq!(status, 503, "{e}");
    assert_eq!(e["error"]["data"]["retryable"], true, "{e}");
    // Long enough for every connection to have been refused a few times.
    tokio::time::sleep(Duration::from_secs(3)).await;
    cluster.redis().cli(&["ACL", "SETUSER", "presa", "on", ">presa-secret", "~*", "&*", "+@all"]);
    recover(&c, "after-acl").await;
    assert_eq!(reqwest::get(format!("{}/readyz", w.base())).await.unwrap().status().as_u16(), 200);
}

/// Liveness: a pod whose Redis stops answering for longer than
/// `--store-liveness-ms` fails `/healthz` (503, so Kubernetes restarts it);
/// before that, and again once Redis answers, `/healthz` is 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_fails_after_store_liveness_and_recovers() {
    let mut cluster = Cluster::with_private_redis();
    let args = ["--redis-timeout-ms", "300", "--store-liveness-ms", "1500"];
    let api = cluster.api("api", &args).await;
    let w = cluster.worker("w1", 2000, &args).await;
    let probes = [format!("{}/healthz", api.base()), format!("{}/healthz", w.base())];
    for p in &probes {
        assert_eq!(reqwest::get(p).await.unwrap().status().as_u16(), 200, "{p}");
    }
    cluster.redis().signal("STOP");
    for p in &probes {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let status = reqwest::get(p).await.unwrap().status().as_u16();
            if status == 503 {
                break;
            }
            assert_eq!(status, 200);
            assert!(Instant::now() < deadline, "{p} never failed with Redis stopped");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    cluster.redis().signal("CONT");
    for p in &probes {
        let deadline = Instant::now() + Duration::from_secs(15);
        while reqwest::get(p).await.unwrap().status().as_u16() != 200 {
            assert!(Instant::now() < deadline, "{p} never recovered");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let c = Client::new(&api.url, tasks_caps());
    recover(&c, "alive").await;
}

/// Start unready, not dead: with Redis down both pods start, are alive
/// (`/healthz` 200), unready (`/readyz` 503) and answer requests with a
/// retryable -32603 (HTTP 503); they serve as soon as Redis answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_start_unready_with_redis_down_and_serve_once_it_answers() {
    let mut cluster = Cluster::with_private_redis();
    cluster.redis().kill();
    let args = ["--redis-timeout-ms", "300"];
    let api = Pod::start_unready("api", &api_bin(), free_port(), &args, &cluster.env()).await;
    let mut wargs = vec!["--worker-id", "w1", "--lease-ms", "2000"];
    wargs.extend_from_slice(&args);
    let w = Pod::start_unready("w1", &worker_bin(), free_port(), &wargs, &cluster.env()).await;
    for pod in [&api, &w] {
        let r = reqwest::get(format!("{}/readyz", pod.base())).await.unwrap();
        assert_eq!(r.status().as_u16(), 503, "{}", pod.name);
    }
    let c = Client::new(&api.url, tasks_caps());
    let (status, e) = c.err("tools/call", json!({ "name": "slow_compute", "arguments": { "seconds": 0 } })).await;
    assert_eq!(status, 503, "{e}");
    assert_eq!(e["code"], -32603);
    assert_eq!(e["data"]["retryable"], true);

    cluster.redis().restart();
    recover(&c, "after-start").await;
    for pod in [&api, &w] {
        let r = reqwest::get(format!("{}/readyz", pod.base())).await.unwrap();
        assert_eq!(r.status().as_u16(), 200, "{}", pod.name);
    }
}

/// Data loss is visible: after a FLUSHALL, and again after a restart
/// without persistence, both pods report it (`/readyz` detail, the
/// `presa_store_data_loss_total` metric, an error log); the lost task stays
/// unknown (never recreated) and new tasks run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_data_loss_is_detected_and_reported() {
    let mut cluster = Cluster::with_private_redis();
    let args = ["--store-epoch-check-ms", "200", "--redis-timeout-ms", "500"];
    let api = cluster.api("api", &args).await;
    let w = cluster.worker("w1", 2000, &args).await;
    let c = Client::new(&api.url, tasks_caps());
    let lost = recover(&c, "before").await;
    for pod in [&api, &w] {
        assert_eq!(reqwest::get(format!("{}/readyz", pod.base())).await.unwrap().text().await.unwrap(), "ready");
    }

    cluster.redis().cli(&["FLUSHALL"]);
    wait_for_loss_count(&[&api, &w], 1).await;
    let (status, e) = c.err("tasks/get", json!({ "taskId": lost })).await;
    assert_eq!((status, e["code"].as_i64()), (400, Some(-32602)), "a lost task stays unknown: {e}");
    recover(&c, "after-flush").await;

    cluster.redis().restart();
    wait_for_loss_count(&[&api, &w], 2).await;
    recover(&c, "after-restart").await;
    for pod in [&api, &w] {
        let body = reqwest::get(format!("{}/readyz", pod.base())).await.unwrap().text().await.unwrap();
        assert!(body.starts_with("ready; Redis lost its data"), "{}: {body}", pod.name);
        assert!(pod.log().contains("Redis lost its data"), "{}:\n{}", pod.name, pod.log());
    }
}

/// Wait (15 s at most) until every pod's `presa_store_data_loss_total` is `count`.
async fn wait_for_loss_count(pods: &[&Pod], count: u64) {
    for pod in pods {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let metrics = reqwest::get(format!("{}/metrics", pod.base())).await.unwrap().text().await.unwrap();
            let seen = metrics
                .lines()
                .find_map(|l| l.strip_prefix("presa_store_data_loss_total "))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .unwrap_or(0.0);
            if seen as u64 >= count {
                break;
            }
            assert!(Instant::now() < deadline, "{} never reported data loss #{count}:\n{}", pod.name, pod.log());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The durability promise, measured: with AOF `appendfsync everysec`, Redis
/// SIGKILLed under a steady stream of creates and restarted from its AOF
/// keeps every task whose create was acknowledged more than one second
/// before the kill, and each of them runs to completion. (Later ones may be
/// lost: that second is what `everysec` risks.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aof_everysec_keeps_tasks_acknowledged_a_second_before_redis_is_killed() {
    let mut cluster = Cluster::with_aof("everysec");
    let args = ["--redis-timeout-ms", "500"];
    let api = cluster.api("api", &args).await;
    let _w = cluster.worker("w1", 2000, &args).await;
    let c = Client::new(&api.url, tasks_caps());
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let creator = {
        let (c, stop) = (Client::new(&api.url, tasks_caps()), stop.clone());
        tokio::spawn(async move {
            let mut acked = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let (status, v) = c
                    .send(
                        "tools/call",
                        json!({ "name": "slow_compute", "arguments": { "seconds": 0.3, "label": "aof" } }),
                    )
                    .await;
                if status == 200 {
                    acked.push((task_id(&v["result"]), Instant::now()));
                } else {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            acked
        })
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    let killed = Instant::now();
    cluster.redis().restart();
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let acked = creator.await.unwrap();
    let promised: Vec<&String> =
        acked.iter().filter(|(_, at)| *at + Duration::from_secs(1) < killed).map(|(id, _)| id).collect();
    assert!(promised.len() >= 10, "too few creates before the kill: {}", promised.len());
    for id in &promised {
        let t = c.wait_task_for(id, "completed after the restart", Duration::from_secs(60), is_terminal).await;
        assert_eq!(t["status"], "completed", "{t}");
    }
    let mut late = (0, 0);
    for (id, at) in &acked {
        if *at + Duration::from_secs(1) >= killed && *at < killed {
            late.0 += 1;
            late.1 += usize::from(c.send("tasks/get", json!({ "taskId": id })).await.0 == 200);
        }
    }
    eprintln!(
        "aof: {} creates acknowledged over 1 s before the kill, all completed; {} within its last second, {} of them kept",
        promised.len(),
        late.0,
        late.1
    );
    assert!(!api.log().contains("Redis lost its data"), "an AOF restart is not a data loss:\n{}", api.log());
}

/// Redis frozen (SIGSTOP) while a handler finishes: its writes time out, and
/// the worker waits the outage out (up to a lease) instead of dropping the
/// outcome, so the task completes once, without a re-run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outcome_written_while_redis_is_frozen_is_kept_not_rerun() {
    let mut cluster = Cluster::with_private_redis();
    let api = cluster.api("api", &[]).await;
    // Short command timeouts, so the frozen Redis fails the writes instead of delaying them.
    let worker = cluster.worker("w1", 6000, &["--redis-timeout-ms", "300"]).await;
    let c = Client::new(&api.url, tasks_caps());
    let id = running(&c, 1, "frozen").await;
    // The handler sleeps 1 s from here, then writes its outcome into the frozen Redis.
    cluster.redis().signal("STOP");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    cluster.redis().signal("CONT");
    let t = c.wait_task_for(&id, "completed", Duration::from_secs(20), is_terminal).await;
    assert_eq!(t["status"], "completed", "{t}");
    // The worker logs "task finished" just after the write a poll may already see.
    let log = worker.wait_log("task finished", Duration::from_secs(5)).await;
    assert!(log.contains("retrying the task write"), "no write met the frozen Redis:\n{log}");
    assert!(!log.contains("could not record the outcome"), "the outcome was dropped:\n{log}");
    assert_eq!(log.matches("task finished").count(), 1, "the handler ran again:\n{log}");
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

/// On Redis with the real worker binary: tasks parked on input give their
/// slot back, so a worker whose every slot once held a parked task still
/// runs a new 0-second task at once; the parked ones still resume (their
/// leases are renewed meanwhile: a 1.5 s lease outlived by the wait).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_tasks_do_not_hold_the_workers_slots() {
    let cluster = Cluster::new().await;
    let api = cluster.api("api", &[]).await;
    let _w = cluster.worker("w", 1500, &["--concurrency", "4"]).await;
    let c = Client::new(&api.url, tasks_caps());
    let mut parked = Vec::new();
    for i in 0..4 {
        parked.push(task_id(&c.call_tool("confirm_delete", json!({ "filename": format!("f{i}") })).await));
    }
    for id in &parked {
        c.wait_status(id, "input_required").await;
    }
    let id = task_id(&c.call_tool("slow_compute", json!({ "seconds": 0, "label": "new" })).await);
    let done = c.wait_task_for(&id, "completed", Duration::from_secs(5), |t| t["status"] == "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "Completed new");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let answer = json!({ "confirm-delete": { "action": "accept", "content": { "confirm": true } } });
    c.ok("tasks/update", json!({ "taskId": parked[0], "inputResponses": answer })).await;
    let resumed = c.wait_status(&parked[0], "completed").await;
    assert_eq!(resumed["result"]["content"][0]["text"], "Delete confirmed: true");
}

/// An API pod with `--auth jwt` (tenant from the `org` claim) on `cluster`,
/// and a client maker: a client with a token for `sub` in org `acme`.
async fn jwt_api(cluster: &Cluster) -> (Pod, impl Fn(&str) -> Client, tempfile::TempDir) {
    use presa_testkit::jwt::{Key, TestIssuer};
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
    let url = api.url.clone();
    let as_user = move |sub: &str| {
        let mut claims = issuer.claims(sub, &["deploy"]);
        claims["org"] = json!("acme");
        Client::new(&url, tasks_caps()).with_bearer(&issuer.sign(Key::Ec, &claims))
    };
    (api, as_user, dir)
}

/// On Redis with worker pods and `--auth jwt`: another principal's task
/// answers exactly like an unknown one, and the worker's handler sees its
/// creator (`ctx.caller()`, tenant from `--jwt-tenant-claim`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_are_private_to_their_principal_on_redis() {
    let cluster = Cluster::new().await;
    let (api, as_user, _dir) = jwt_api(&cluster).await;
    let _worker = cluster.worker("w1", 2000, &[]).await;
    let (alice, bob) = (as_user("alice"), as_user("bob"));
    presa_testkit::principals::tasks_stay_with_their_principal(&alice, &bob, "acme", "alice").await;
    // Without a token: 401 before anything else.
    let (status, _) = Client::new(&api.url, tasks_caps()).send("tools/list", json!({})).await;
    assert_eq!(status, 401);
}

/// On Redis with two worker pods and `--auth jwt`: Alice's 40 long tasks,
/// created first, are ten times both workers' slots; she gets her share of
/// each worker (one of four), the rest of hers stays queued (held, not
/// claimed), and Bob's 0-second task created after them runs at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_principal_with_a_long_backlog_does_not_starve_another_on_redis() {
    let cluster = Cluster::new().await;
    let (_api, as_user, _dir) = jwt_api(&cluster).await;
    let _w1 = cluster.worker("w1", 2000, &["--concurrency", "4"]).await;
    let _w2 = cluster.worker("w2", 2000, &["--concurrency", "4"]).await;
    let (alice, bob) = (as_user("alice"), as_user("bob"));
    let mut backlog = Vec::new();
    for i in 0..40 {
        backlog
            .push(task_id(&alice.call_tool("slow_compute", json!({ "seconds": 600, "label": format!("a{i}") })).await));
    }
    let id = task_id(&bob.call_tool("slow_compute", json!({ "seconds": 0, "label": "bob" })).await);
    let done = bob.wait_task_for(&id, "completed", Duration::from_secs(10), |t| t["status"] == "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "Completed bob");
    for id in [&backlog[0], &backlog[39]] {
        assert_eq!(alice.get_task(id).await["status"], "working", "Alice still holds her backlog");
    }
}

/// A retry storm does not starve anyone: Alice's 40 tasks keep failing
/// their tries (1 s each, put off and claimed again and again) on two
/// workers of 4 slots; her work comes back through the same fair shares
/// as new work, so Bob's tasks created in the middle of it run at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_principals_retry_storm_does_not_starve_another_on_redis() {
    let cluster = Cluster::new().await;
    let (_api, as_user, _dir) = jwt_api(&cluster).await;
    let _w1 = cluster.worker("w1", 2000, &["--concurrency", "4"]).await;
    let _w2 = cluster.worker("w2", 2000, &["--concurrency", "4"]).await;
    let (alice, bob) = (as_user("alice"), as_user("bob"));
    let mut storm = Vec::new();
    for _ in 0..40 {
        storm.push(task_id(&alice.call_tool("flaky_job", json!({ "failures": 3, "seconds": 1.0 })).await));
    }
    alice.wait_task(&storm[0], "retrying", |t| t["statusMessage"].as_str().is_some_and(|m| m.contains("failed"))).await;
    for i in 0..3 {
        let label = format!("bob{i}");
        let id = task_id(&bob.call_tool("slow_compute", json!({ "seconds": 0, "label": label })).await);
        let done = bob.wait_task_for(&id, "completed", Duration::from_secs(10), |t| t["status"] == "completed").await;
        assert_eq!(done["result"]["content"][0]["text"], format!("Completed {label}"));
    }
    let working = alice.get_task(&storm[39]).await;
    assert_eq!(working["status"], "working", "Alice's storm was still going: {working}");
}

/// What the admin API of `api` shows of task `id` (`GET /admin/v1/tasks/{id}`,
/// allowed on loopback without authentication): what is never on the MCP
/// wire, its fencing attempt and its tries (`retries.log`, `dueAtMs`) among it.
async fn admin_view(api: &Pod, id: &str) -> Value {
    let url = format!("{}/admin/v1/tasks/{id}", api.base());
    let resp = reqwest::get(&url).await.unwrap_or_else(|e| panic!("{url}: {e}"));
    assert_eq!(resp.status(), 200, "{url}");
    resp.json().await.unwrap_or_else(|e| panic!("{url}: {e}"))
}

/// A `flaky_job` that fails twice (created on one API pod, watched from the
/// other, run by two workers) completes on its third try; between tries it
/// is `working`, saying which attempt failed and when the next comes; each
/// try waited at least its chosen delay, and each delay was within its cap
/// (0.5 s, then 1 s: `demo::FLAKY_RETRY`). A permanent error fails at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flaky_task_completes_on_its_third_try_across_pods() {
    let cluster = Cluster::new().await;
    let (a, b) = (cluster.api("api-a", &[]).await, cluster.api("api-b", &[]).await);
    let _w1 = cluster.worker("w1", 2000, &[]).await;
    let _w2 = cluster.worker("w2", 2000, &[]).await;
    let on_a = Client::new(&a.url, tasks_caps());
    let on_b = Client::new(&b.url, tasks_caps());
    let id = task_id(&on_a.call_tool("flaky_job", json!({ "failures": 2, "seconds": 0.2 })).await);
    let waiting = on_b
        .wait_task(&id, "waiting after its first try", |t| {
            t["statusMessage"].as_str().is_some_and(|m| m.starts_with("attempt 1 of 4 failed"))
        })
        .await;
    assert_eq!(waiting["status"], "working", "{waiting}");
    let message = waiting["statusMessage"].as_str().unwrap();
    assert!(message.contains("(simulated outage on try 1); next in"), "{message}");
    let done = on_b.wait_task_for(&id, "completed", Duration::from_secs(30), is_terminal).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["content"][0]["text"], "Succeeded on try 3", "{done}");
    let record = admin_view(&b, &id).await;
    let log = record["retries"]["log"].as_array().expect("a log of failed tries").clone();
    assert_eq!(log.len(), 2, "{record}");
    let at = |i: usize| log[i]["atMs"].as_u64().unwrap();
    let delay = |i: usize| log[i]["delayMs"].as_u64().unwrap();
    assert!(delay(0) <= 500 && delay(1) <= 1000, "delays within their caps: {log:?}");
    // Each next try ran 0.2 s, so it failed no sooner than its delay plus that.
    assert!(at(1) >= at(0) + delay(0) + 200, "the second try waited its delay: {log:?}");
    assert!(record["updatedAtMs"].as_u64().unwrap() >= at(1) + delay(1) + 200, "{record}");
    // A permanent failure (no retry asked) fails at once, its one try logged nowhere.
    let doomed = task_id(&on_a.call_tool("protocol_error_job", json!({})).await);
    let failed = on_b.wait_task_for(&doomed, "failed", Duration::from_secs(10), is_terminal).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    assert_eq!(admin_view(&a, &doomed).await["retries"]["failed"], 0, "no try was put off");
}

/// A task waiting for its next try survives losing everything: both
/// workers and its API pod SIGKILLed, Redis killed and restarted from its
/// AOF; new pods then run the try when it is due, and it completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_task_survives_every_process_and_a_redis_restart() {
    let mut cluster = Cluster::with_aof("always");
    let args = ["--redis-timeout-ms", "500"];
    let mut api = cluster.api("api", &args).await;
    let mut w1 = cluster.worker("w1", 2000, &args).await;
    let mut w2 = cluster.worker("w2", 2000, &args).await;
    let c = Client::new(&api.url, tasks_caps());
    let id = task_id(&c.call_tool("flaky_job", json!({ "failures": 1, "retryAfterMs": 6000 })).await);
    let waiting =
        c.wait_task(&id, "waiting", |t| t["statusMessage"].as_str().is_some_and(|m| m.contains("next in 6 s"))).await;
    assert_eq!(waiting["status"], "working", "{waiting}");
    let due = admin_view(&api, &id).await["retries"]["dueAtMs"].as_u64().expect("a due time while waiting");
    for pod in [&mut w1, &mut w2, &mut api] {
        pod.signal("KILL");
        pod.wait_exit(Duration::from_secs(5)).await;
    }
    cluster.redis().restart();
    let api = cluster.api("api-2", &args).await;
    let _w3 = cluster.worker("w3", 2000, &args).await;
    let c = Client::new(&api.url, tasks_caps());
    let done = c.wait_task_for(&id, "completed", Duration::from_secs(30), is_terminal).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["content"][0]["text"], "Succeeded on try 2", "{done}");
    let record = admin_view(&api, &id).await;
    assert!(record["updatedAtMs"].as_u64().unwrap() >= due, "not run before it was due: {record}");
}

/// `tasks/cancel` of a task waiting for its next try ends it `cancelled` at
/// once, and its work never runs again: once it is due, no worker claims it
/// (the record's fencing attempt does not move).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_waiting_task_ends_it_and_it_never_runs_again() {
    let cluster = Cluster::new().await;
    let api = cluster.api("api", &[]).await;
    let _w1 = cluster.worker("w1", 2000, &[]).await;
    let _w2 = cluster.worker("w2", 2000, &[]).await;
    let c = Client::new(&api.url, tasks_caps());
    let id = task_id(&c.call_tool("flaky_job", json!({ "failures": 1, "retryAfterMs": 1500 })).await);
    c.wait_task(&id, "waiting", |t| t["statusMessage"].as_str().is_some_and(|m| m.starts_with("attempt 1 of 4"))).await;
    let attempt = admin_view(&api, &id).await["attempt"].clone();
    c.ok("tasks/cancel", json!({ "taskId": id })).await;
    let cancelled = c.get_task(&id).await;
    assert_eq!(cancelled["status"], "cancelled", "at once: {cancelled}");
    tokio::time::sleep(Duration::from_millis(3000)).await;
    let after = c.get_task(&id).await;
    assert_eq!(after["status"], "cancelled", "{after}");
    assert_eq!(admin_view(&api, &id).await["attempt"], attempt, "no worker claimed the cancelled task's work");
}

/// `metered_job` may run 5 times a second in bursts of 5, across the
/// cluster: 30 tasks created on two API pods and run by two workers start
/// over at least 5 s (the tool's own start times say so), never more than 10
/// in a second, and no try is counted for the wait; plain calls past the
/// rate get 429 with `Retry-After` and `-32023`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tools_rate_spreads_its_tasks_and_refuses_plain_calls_past_it() {
    let cluster = Cluster::new().await;
    let (a, b) = (cluster.api("api-a", &[]).await, cluster.api("api-b", &[]).await);
    let _w1 = cluster.worker("w1", 2000, &[]).await;
    let _w2 = cluster.worker("w2", 2000, &[]).await;
    let clients = [Client::new(&a.url, tasks_caps()), Client::new(&b.url, tasks_caps())];
    let mut ids = Vec::new();
    for i in 0..30 {
        ids.push(task_id(&clients[i % 2].call_tool("metered_job", json!({})).await));
    }
    let mut starts = Vec::new();
    for id in &ids {
        let done = clients[0].wait_task_for(id, "completed", Duration::from_secs(30), is_terminal).await;
        assert_eq!(done["status"], "completed", "{done}");
        let text = done["result"]["content"][0]["text"].as_str().unwrap().to_string();
        starts.push(text.trim_start_matches("Started at ").parse::<u64>().expect("a start time"));
        assert_eq!(admin_view(&a, id).await["retries"]["failed"], 0, "no try counted");
    }
    starts.sort_unstable();
    let span = starts[29] - starts[0];
    assert!(span >= 4_900, "30 starts at 5/s with a burst of 5 take 5 s, not {span} ms: {starts:?}");
    for w in starts.windows(11) {
        assert!(w[10] - w[0] >= 1_000, "11 starts within a second: {w:?}");
    }
    // Plain calls (no Tasks extension) past the rate are refused at once.
    let plain = Client::new(&a.url, json!({}));
    let mut refusals = Vec::new();
    for _ in 0..8 {
        let (status, retry_after, error) = plain.refused("tools/call", json!({ "name": "metered_job" })).await;
        if status != 200 {
            refusals.push((status, retry_after, error));
        }
    }
    let (status, retry_after, error) = refusals.first().cloned().expect("8 calls at once pass a burst of 5");
    assert_eq!(status, 429, "{error}");
    assert_eq!(retry_after.as_deref(), Some("1"), "{error}");
    assert_eq!((&error["code"], &error["data"]["limit"]), (&json!(-32023), &json!("tool_rate")), "{error}");
    assert!(error["data"]["retryAfterMs"].as_u64().is_some_and(|ms| ms > 0 && ms <= 1000), "{error}");
}

/// `fragile_job`'s upstream dies with two API pods and two workers on Redis:
/// three failed plain calls open its breaker for the whole cluster, the
/// next plain call on the other pod is refused at once (503, `Retry-After`),
/// tasks created on both pods wait (`working`, "circuit open", none fails)
/// while the upstream, by its own log, receives one probe per cool-down at
/// most, and all complete once it is back (`presa_testkit::breakers`).
/// The admin API shows the breaker closed again, with no failure counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_breaker_spares_the_upstream_across_the_cluster() {
    an_open_breaker_spares_the_upstream_across_the_cluster_on(Cluster::new().await).await;
}

/// The same in Redis Cluster mode (the breaker's hash in a slot of its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_breaker_spares_the_upstream_across_the_cluster_on_redis_cluster() {
    an_open_breaker_spares_the_upstream_across_the_cluster_on(Cluster::on_redis_cluster()).await;
}

async fn an_open_breaker_spares_the_upstream_across_the_cluster_on(cluster: Cluster) {
    let upstream = presa_testkit::breakers::Upstream::new();
    let mut env = cluster.env();
    env.push(("PRESA_DEMO_FRAGILE_DIR", upstream.dir()));
    let a = Pod::start("api-a", &api_bin(), free_port(), &[], &env).await;
    let b = Pod::start("api-b", &api_bin(), free_port(), &[], &env).await;
    let worker_bin = worker_bin();
    let _w1 = Pod::start("w1", &worker_bin, free_port(), &["--worker-id", "w1"], &env).await;
    let _w2 = Pod::start("w2", &worker_bin, free_port(), &["--worker-id", "w2"], &env).await;
    let seen = presa_testkit::breakers::open_wait_and_recover(&[a.url.clone(), b.url.clone()], &upstream).await;
    assert_eq!(seen.tasks, 8);
    let view: Value = reqwest::get(format!("{}/admin/v1/breakers", b.base())).await.unwrap().json().await.unwrap();
    let fragile = view["breakers"].as_array().and_then(|all| all.iter().find(|x| x["name"] == "fragile_job"));
    let fragile = fragile.unwrap_or_else(|| panic!("no fragile_job breaker: {view}"));
    assert_eq!((&fragile["state"], &fragile["failures"]), (&json!("closed"), &json!(0)), "{view}");
}
