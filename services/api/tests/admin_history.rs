//! `GET /admin/v1/history` (docs/admin.md, the console's charts) over real
//! HTTP, on the memory store and on Redis: tasks created through `/mcp`
//! show in the points' `created` and their queue in `queued` while no
//! worker runs; once one does, `completed` rises and the queue empties; the
//! ring never holds more than its window; and the route is the admin API's:
//! 401 without a token, 403 without the admin scope (a tenant admin
//! included) and for a cross-site page's `Origin`. Two API pods on one Redis
//! draw the same curve: the same instants, the same creations and queue.

use std::{sync::Arc, time::Duration};

use presa_http::{Authenticated, Authenticator, Caller, HttpConfig, Refusal};
use presa_server::{Core, Node, Server, ServerConfig, StateCodec, Worker, WorkerConfig};
use presa_store::{Backend, memory::MemoryStore};
use presa_store_redis::{RedisConfig, RedisStore};
use presa_testkit::{
    client::{Client, task_id, tasks_caps},
    redis::{TestRedis, unique_prefix},
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// The tokens of the cases: the token names the caller.
#[derive(Debug)]
struct Tokens;

#[async_trait::async_trait]
impl Authenticator for Tokens {
    async fn authenticate(&self, parts: &axum::http::request::Parts) -> Result<Caller, Refusal> {
        let challenge = presa_http::Challenge::default();
        let token = challenge.bearer(parts)?;
        let scopes = |s: &[&str]| s.iter().map(ToString::to_string).collect();
        match token {
            "root" => Ok(Caller::new("ops", "root", scopes(&["presa:admin"]))),
            "acme-admin" => Ok(Caller::new("acme", "carol", scopes(&["presa:tenant-admin"]))),
            "alice" => Ok(Caller::new("acme", "alice", scopes(&[]))),
            _ => Err(challenge.invalid_token("unknown token")),
        }
    }

    async fn authenticate_until(&self, parts: &axum::http::request::Parts) -> Result<Authenticated, Refusal> {
        Ok(Authenticated::new(self.authenticate(parts).await?))
    }
}

/// Sampled every 100 ms.
const EVERY: Duration = Duration::from_millis(100);
/// Points the cases keep: 30 s (the creates may take a while on a busy machine).
const POINTS: usize = 300;

struct Rig {
    origin: String,
    core: Core,
    node: Node,
    stop: CancellationToken,
    _keep: Option<Arc<TestRedis>>,
}

impl Drop for Rig {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// A server on `backend` keeping `points` points, whose process heartbeats
/// every 100 ms, and no worker yet.
async fn serve(backend: Backend, keep: Option<Arc<TestRedis>>, points: usize) -> Rig {
    serve_as("history-node", backend, keep, points).await
}

/// [`serve`] as the process `node_id`.
async fn serve_as(node_id: &str, backend: Backend, keep: Option<Arc<TestRedis>>, points: usize) -> Rig {
    let core = Core::new(ServerConfig::default(), presa_demo::catalog().expect("catalog"), backend);
    let server = Server::new(core.clone(), StateCodec::new(b"test-secret"));
    let http = HttpConfig::default().with(|c| {
        c.access.authenticator = Arc::new(Tokens);
        c.admin.history_every = EVERY;
        c.admin.history_window = EVERY * points as u32;
    });
    let router = presa_http::router(server, http);
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.expect("bind");
    let origin = format!("http://{}", listener.local_addr().expect("address"));
    let stop = CancellationToken::new();
    let shutdown = stop.clone();
    tokio::spawn(presa_http::serve(listener, router, async move { shutdown.cancelled().await }));
    let node = Node::new(node_id, "embedded", 8);
    tokio::spawn(node.clone().heartbeat_every(EVERY, core.clone(), stop.clone()));
    Rig { origin, core, node, stop, _keep: keep }
}

impl Rig {
    async fn history(&self, token: Option<&str>, origin: Option<&str>) -> (u16, Value) {
        let mut req = reqwest::Client::new().get(format!("{}/admin/v1/history", self.origin));
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        if let Some(origin) = origin {
            req = req.header("origin", origin);
        }
        let resp = req.send().await.expect("request");
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    /// The history once `pred` holds of it (10 s at most).
    async fn history_until(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let (status, h) = self.history(Some("root"), None).await;
            assert_eq!(status, 200, "{h}");
            if pred(&h) {
                return h;
            }
            assert!(tokio::time::Instant::now() < deadline, "the history never showed {what}: {h}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn points(h: &Value) -> &Vec<Value> {
    h["points"].as_array().expect("points")
}

fn sum(h: &Value, field: &str) -> u64 {
    points(h).iter().filter_map(|p| p[field].as_u64()).sum()
}

fn latest(h: &Value, field: &str) -> u64 {
    points(h).last().and_then(|p| p[field].as_u64()).unwrap_or(0)
}

async fn history_shows_the_work(rig: Rig) {
    // Its first sample is the counters' baseline: what was created before it is not counted.
    rig.history_until("a first point", |h| !points(h).is_empty()).await;
    let ids = create(&rig, 5).await;
    let client = Client::new(format!("{}/mcp", rig.origin), tasks_caps()).with_bearer("alice");
    // No worker yet: the five are created and queued.
    let h = rig.history_until("5 created and 5 queued", |h| sum(h, "created") >= 5 && latest(h, "queued") == 5).await;
    assert_eq!(h["intervalMs"], 100, "{h}");
    assert_eq!(h["capacity"], POINTS, "{h}");
    assert!(latest(&h, "oldestQueuedAgeMs") > 0, "the oldest queued age shows: {h}");
    assert_eq!(sum(&h, "completed"), 0, "{h}");

    let config = WorkerConfig { claim_wait: Duration::from_millis(200), ..WorkerConfig::default() };
    tokio::spawn(Worker::new(rig.core.clone(), config).with_node(rig.node.clone()).run(rig.stop.clone()));
    for id in &ids {
        client.wait_status(id, "completed").await;
    }
    let h = rig
        .history_until("5 completed, the queue empty", |h| sum(h, "completed") >= 5 && latest(h, "queued") == 0)
        .await;
    let p = points(&h).last().expect("a point");
    assert_eq!((p["spanMs"].as_u64(), p["slots"].as_u64()), (Some(100), Some(8)), "{h}");
    let at: Vec<u64> = points(&h).iter().map(|p| p["atMs"].as_u64().expect("atMs")).collect();
    assert!(at.windows(2).all(|w| w[0] < w[1] && w[0] % 100 == 0), "points on the interval, oldest first: {at:?}");
}

/// The ring holds its window, never more.
async fn history_is_bounded(rig: Rig) {
    tokio::time::sleep(EVERY * 15).await;
    let (_, h) = rig.history(Some("root"), None).await;
    assert_eq!((points(&h).len(), h["capacity"].as_u64()), (10, Some(10)), "{h}");
}

/// Creates `n` quick tasks as alice through `rig`'s `/mcp`; their ids.
async fn create(rig: &Rig, n: usize) -> Vec<String> {
    let client = Client::new(format!("{}/mcp", rig.origin), tasks_caps()).with_bearer("alice");
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(task_id(&client.call_tool("slow_compute", json!({ "seconds": 0, "label": format!("h{i}") })).await));
    }
    ids
}

async fn history_is_the_admins(rig: Rig) {
    let (status, body) = rig.history(None, None).await;
    assert_eq!((status, body["error"]["code"].as_str()), (401, Some("unauthorized")), "{body}");
    for token in ["alice", "acme-admin"] {
        let (status, body) = rig.history(Some(token), None).await;
        assert_eq!((status, body["error"]["code"].as_str()), (403, Some("forbidden")), "{token}: {body}");
    }
    let (status, _) = rig.history(Some("root"), Some("https://evil.example")).await;
    assert_eq!(status, 403, "a page of another origin");
    let (status, body) = rig.history(Some("root"), Some(&rig.origin.clone())).await;
    assert_eq!(status, 200, "{body}");
}

async fn memory() -> Rig {
    memory_keeping(POINTS).await
}

async fn memory_keeping(points: usize) -> Rig {
    serve(Backend::new(Arc::new(MemoryStore::with_partitions(4))), None, points).await
}

async fn redis() -> Rig {
    let redis = Arc::new(TestRedis::start().await);
    let config = RedisConfig::new(redis.url()).with_prefix(unique_prefix()).with_partitions(4);
    let store = RedisStore::connect(config).await.expect("connect to the test Redis");
    serve(Backend::new(Arc::new(store)), Some(redis), POINTS).await
}

#[tokio::test]
async fn memory_history_shows_the_work() {
    history_shows_the_work(memory().await).await;
}

#[tokio::test]
async fn memory_history_is_the_admins() {
    history_is_the_admins(memory().await).await;
}

#[tokio::test]
async fn memory_history_is_bounded() {
    history_is_bounded(memory_keeping(10).await).await;
}

#[tokio::test]
async fn redis_history_shows_the_work() {
    history_shows_the_work(redis().await).await;
}

/// Two API pods on one Redis, the tasks created through one: both histories
/// sample the same instants and show the same five creations and queue.
#[tokio::test]
async fn redis_two_pods_draw_the_same_curve() {
    let redis = Arc::new(TestRedis::start().await);
    let config = RedisConfig::new(redis.url()).with_prefix(unique_prefix()).with_partitions(4);
    let store = |c: RedisConfig| async move { Backend::new(Arc::new(RedisStore::connect(c).await.expect("connect"))) };
    let a = serve_as("pod-a", store(config.clone()).await, Some(redis), POINTS).await;
    let b = serve_as("pod-b", store(config).await, None, POINTS).await;
    for pod in [&a, &b] {
        pod.history_until("a first point", |h| !points(h).is_empty()).await;
    }
    create(&a, 5).await;
    let shown = |h: &Value| sum(h, "created") >= 5 && latest(h, "queued") == 5;
    let (ha, hb) = (a.history_until("the five on a", shown).await, b.history_until("the five on b", shown).await);
    assert_eq!((sum(&ha, "created"), sum(&hb, "created")), (5, 5), "a: {ha}\nb: {hb}");
    let at = |h: &Value| points(h).iter().map(|p| p["atMs"].as_u64().expect("atMs")).collect::<Vec<_>>();
    let (at_a, at_b) = (at(&ha), at(&hb));
    let common: Vec<u64> = at_a.iter().copied().filter(|t| at_b.contains(t)).collect();
    assert!(common.len() >= 2, "the pods sample the same instants: {at_a:?} {at_b:?}");
    let queued_at = |h: &Value, t: u64| points(h).iter().find(|p| p["atMs"] == t).map(|p| p["queued"].clone());
    let last = *common.last().expect("a common instant");
    assert_eq!(queued_at(&ha, last), queued_at(&hb, last), "the same queue at {last}");
}
