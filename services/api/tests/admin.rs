//! The admin API (`/admin/v1`, docs/admin.md) over real HTTP, every route on
//! the memory store and on Redis: who may call it (401, 403, the two scopes),
//! tenant isolation (a tenant admin never sees another tenant's task, not
//! even its count), stable pagination while tasks are created, the actions
//! (cancel, retry now, replay, discard, drain) and the live event stream.
//!
//! Each case is written once against a [`Rig`] and instantiated per backend
//! by `admin_cases!`. The servers here run no worker, so tasks stay queued
//! until a case moves them itself; but `retry_now_runs_a_waiting_task_again`,
//! whose server has a worker and a tool that fails transiently.

use std::{sync::Arc, time::Duration};

use presa_http::{Authenticated, Authenticator, Caller, HttpConfig, Refusal};
use presa_server::{Core, Node, Server, ServerConfig, StateCodec};
use presa_store::{Backend, CreateLimits, NewTask, Scope, Task, memory::MemoryStore};
use presa_store_redis::{RedisConfig, RedisStore};
use presa_tasks::Work;
use presa_testkit::redis::{TestRedis, unique_prefix};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// Bearer tokens of the cases: the token names the caller.
#[derive(Debug)]
struct Tokens;

fn caller_of(token: &str) -> Option<(Caller, Option<Duration>)> {
    let c = |tenant: &str, subject: &str, scopes: &[&str]| {
        Caller::new(tenant, subject, scopes.iter().map(ToString::to_string).collect())
    };
    Some(match token {
        "root" => (c("ops", "root", &["presa:admin"]), None),
        "acme-admin" => (c("acme", "carol", &["presa:tenant-admin"]), None),
        "globex-admin" => (c("globex", "gus", &["presa:tenant-admin"]), None),
        "alice" => (c("acme", "alice", &["deploy"]), None),
        "brief-root" => (c("ops", "root", &["presa:admin"]), Some(Duration::from_millis(1_500))),
        _ => return None,
    })
}

#[async_trait::async_trait]
impl Authenticator for Tokens {
    async fn authenticate(&self, parts: &axum::http::request::Parts) -> Result<Caller, Refusal> {
        Ok(self.authenticate_until(parts).await?.caller)
    }

    async fn authenticate_until(&self, parts: &axum::http::request::Parts) -> Result<Authenticated, Refusal> {
        let challenge = presa_http::Challenge::default();
        let token = challenge.bearer(parts)?;
        let (caller, lasts) = caller_of(token).ok_or_else(|| challenge.invalid_token("unknown token"))?;
        let expires_at = lasts.map(|d| std::time::SystemTime::now() + d);
        Ok(Authenticated { expires_at, ..Authenticated::new(caller) })
    }
}

/// A server on `backend` with the admin API, and a client for it.
struct Rig {
    base: String,
    backend: Backend,
    http: reqwest::Client,
    stop: CancellationToken,
    _keep: Option<Arc<TestRedis>>,
}

impl Drop for Rig {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn memory() -> Rig {
    serve(Backend::new(Arc::new(MemoryStore::with_partitions(4))), None).await
}

async fn redis() -> Rig {
    let redis = Arc::new(TestRedis::start().await);
    let config = RedisConfig::new(redis.url()).with_prefix(unique_prefix()).with_partitions(4);
    let store = RedisStore::connect(config).await.expect("connect to the test Redis");
    serve(Backend::new(Arc::new(store)), Some(redis)).await
}

async fn serve(backend: Backend, keep: Option<Arc<TestRedis>>) -> Rig {
    let core = Core::new(ServerConfig::default(), presa_demo::catalog().expect("catalog"), backend.clone());
    serve_core(core, backend, keep).await
}

async fn serve_core(core: Core, backend: Backend, keep: Option<Arc<TestRedis>>) -> Rig {
    let server = Server::new(core, StateCodec::new(b"test-secret"));
    let router = presa_http::router(
        server,
        HttpConfig::default().with(|c| {
            c.access.authenticator = Arc::new(Tokens);
        }),
    );
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await.expect("bind");
    let base = format!("http://{}/admin/v1", listener.local_addr().expect("address"));
    let stop = CancellationToken::new();
    let shutdown = stop.clone();
    tokio::spawn(presa_http::serve(listener, router, async move { shutdown.cancelled().await }));
    Rig { base, backend, http: reqwest::Client::new(), stop, _keep: keep }
}

impl Rig {
    async fn send(
        &self,
        method: reqwest::Method,
        token: Option<&str>,
        path: &str,
    ) -> (u16, Value, reqwest::header::HeaderMap) {
        let mut req = self.http.request(method, format!("{}{path}", self.base)).header("X-Presa-Admin", "test");
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        let resp = req.send().await.expect("request");
        let (status, headers) = (resp.status().as_u16(), resp.headers().clone());
        let text = resp.text().await.expect("body");
        let body =
            if text.is_empty() { Value::Null } else { serde_json::from_str(&text).unwrap_or(json!({ "raw": text })) };
        (status, body, headers)
    }

    async fn get(&self, token: &str, path: &str) -> (u16, Value) {
        let (status, body, _) = self.send(reqwest::Method::GET, Some(token), path).await;
        (status, body)
    }

    async fn post(&self, token: &str, path: &str) -> (u16, Value) {
        let (status, body, _) = self.send(reqwest::Method::POST, Some(token), path).await;
        (status, body)
    }

    async fn delete(&self, token: &str, path: &str) -> (u16, Value) {
        let (status, body, _) = self.send(reqwest::Method::DELETE, Some(token), path).await;
        (status, body)
    }

    /// A queued task of `tenant`/`subject` running `tool`.
    async fn create(&self, tenant: &str, subject: &str, tool: &str) -> Task {
        let scope = Scope { tenant: tenant.into(), subject: subject.into(), endpoint: None };
        let new = NewTask {
            scope: scope.clone(),
            work: Work {
                tool: tool.into(),
                arguments: json!({ "seconds": 1 }),
                caller: Some(Caller { scope, scopes: Some(Vec::new()) }),
                ..Work::default()
            },
            ttl_ms: Some(600_000),
            poll_interval_ms: None,
            status_message: None,
        };
        let task = self.backend.store.create(new, CreateLimits::NONE).await.expect("create");
        // Distinct creation times keep "newest first" one order.
        tokio::time::sleep(Duration::from_millis(2)).await;
        task
    }

    /// Every task id of a listing at `query`, page by page (`limit` each).
    async fn all_task_ids(&self, token: &str, query: &str, limit: usize) -> Vec<String> {
        let (mut ids, mut cursor) = (Vec::new(), String::new());
        for _ in 0..100 {
            let (status, page) = self.get(token, &format!("/tasks?{query}&limit={limit}{cursor}")).await;
            assert_eq!(status, 200, "{page}");
            ids.extend(
                page["tasks"].as_array().expect("tasks").iter().map(|t| t["taskId"].as_str().unwrap().to_string()),
            );
            match page["next"].as_str() {
                Some(next) => cursor = format!("&cursor={next}"),
                None => return ids,
            }
        }
        panic!("the listing never ended");
    }
}

fn error_code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or("")
}

/// No token is 401, a token without either admin scope 403 with a challenge
/// naming the admin scope, a tenant admin is kept out of the cluster's
/// routes and other tenants, and bad input is a 400 that says what is wrong.
async fn refusals(rig: Rig) {
    let (status, body, headers) = rig.send(reqwest::Method::GET, None, "/tasks").await;
    assert_eq!((status, error_code(&body)), (401, "unauthorized"), "{body}");
    assert!(headers.get("www-authenticate").is_some());
    let (status, body, headers) = rig.send(reqwest::Method::GET, Some("alice"), "/tasks").await;
    assert_eq!((status, error_code(&body)), (403, "forbidden"), "{body}");
    let challenge = headers.get("www-authenticate").expect("a challenge").to_str().unwrap();
    assert!(challenge.contains("insufficient_scope") && challenge.contains("presa:admin"), "{challenge}");
    let (status, _) = rig.get("nobody", "/whoami").await;
    assert_eq!(status, 401, "an unknown token");

    for path in ["/cluster", "/queues", "/tenants", "/limits"] {
        let (status, body) = rig.get("acme-admin", path).await;
        assert_eq!((status, error_code(&body)), (403, "forbidden"), "{path}: {body}");
    }
    let (status, _) = rig.post("acme-admin", "/workers/w-1/drain").await;
    assert_eq!(status, 403);
    for path in ["/tasks?tenant=globex", "/dead-letters?tenant=globex"] {
        let (status, body) = rig.get("acme-admin", path).await;
        assert_eq!((status, error_code(&body)), (403, "forbidden"), "{path}: {body}");
    }

    let bad = [
        ("/tasks?colour=red", "colour"),
        ("/tasks?status=done", "status must be"),
        ("/tasks?limit=0", "limit must be 1 to 100"),
        ("/tasks?limit=101", "limit must be 1 to 100"),
        ("/tasks?createdAfterMs=yesterday", "createdAfterMs must be a whole number"),
        ("/tasks?cursor=nonsense", "cursor"),
        ("/dead-letters", "tenant is required"),
    ];
    for (path, says) in bad {
        let (status, body) = rig.get("root", path).await;
        assert_eq!((status, error_code(&body)), (400, "bad_request"), "{path}: {body}");
        assert!(body["error"]["message"].as_str().unwrap_or("").contains(says), "{path}: {body}");
    }
    for edge in ["/tasks?createdBeforeMs=0", "/tasks?createdAfterMs=18446744073709551615"] {
        let (status, body) = rig.get("root", edge).await;
        assert_eq!((status, &body["tasks"]), (200, &json!([])), "{edge}: nothing, not a store error: {body}");
    }
    let (status, body) = rig.get("root", "/tasks/p00.nope").await;
    assert_eq!((status, error_code(&body)), (404, "not_found"), "{body}");
    let (status, body) = rig.get("root", "/no/such/route").await;
    assert_eq!((status, error_code(&body)), (404, "not_found"), "{body}");
    let (status, body) = rig.post("root", "/workers/nobody/drain").await;
    assert_eq!((status, error_code(&body)), (404, "not_found"), "{body}");

    let (status, me) = rig.get("acme-admin", "/whoami").await;
    assert_eq!((status, me), (200, json!({ "tenant": "acme", "subject": "carol", "role": "tenant-admin" })));
    let (_, me) = rig.get("root", "/whoami").await;
    assert_eq!(me["role"], "admin");
}

/// A tenant admin sees its own tenant's tasks and nothing of another's: not
/// in listings (whatever the filter), not by id (404 like an unknown id), not
/// to cancel; a cluster admin sees both, and the tenants.
async fn tenant_isolation(rig: Rig) {
    let mine = rig.create("acme", "alice", "slow_compute").await;
    let theirs = rig.create("globex", "eve", "slow_compute").await;
    let (status, page) = rig.get("acme-admin", "/tasks").await;
    assert_eq!(status, 200, "{page}");
    let ids: Vec<&str> = page["tasks"].as_array().unwrap().iter().map(|t| t["taskId"].as_str().unwrap()).collect();
    assert_eq!(ids, vec![mine.id.as_str()], "only acme's");
    assert_eq!(page["tasks"][0]["tenant"], "acme");
    for filter in ["subject=eve", "tool=slow_compute", "status=working"] {
        let ids = rig.all_task_ids("acme-admin", filter, 10).await;
        assert!(!ids.contains(&theirs.id.as_str().to_string()), "{filter}: {ids:?}");
    }
    let (status, _) = rig.get("acme-admin", &format!("/tasks/{}", theirs.id)).await;
    assert_eq!(status, 404, "another tenant's task reads as unknown");
    let (status, _) = rig.post("acme-admin", &format!("/tasks/{}/cancel", theirs.id)).await;
    assert_eq!(status, 404);
    let (status, detail) = rig.get("globex-admin", &format!("/tasks/{}", theirs.id)).await;
    assert_eq!((status, detail["status"].as_str()), (200, Some("working")), "not cancelled: {detail}");

    let everyone = rig.all_task_ids("root", "", 10).await;
    assert_eq!(everyone, vec![theirs.id.to_string(), mine.id.to_string()], "newest first");
    let (_, tenants) = rig.get("root", "/tenants").await;
    assert_eq!(tenants, json!({ "tenants": ["acme", "globex"] }));
    let (_, globex) = rig.get("root", "/tasks?tenant=globex").await;
    assert_eq!(globex["tasks"].as_array().unwrap().len(), 1);
}

/// Paging through a tenant's tasks while others create returns every task
/// that existed before exactly once, and none created since.
async fn pagination_is_stable_under_concurrent_creates(rig: Rig) {
    let mut before = std::collections::HashSet::new();
    for _ in 0..12 {
        before.insert(rig.create("acme", "alice", "slow_compute").await.id.to_string());
    }
    let (mut seen, mut cursor) = (Vec::new(), String::new());
    loop {
        let (status, page) = rig.get("acme-admin", &format!("/tasks?limit=5{cursor}")).await;
        assert_eq!(status, 200, "{page}");
        assert!(page["tasks"].as_array().unwrap().len() <= 5);
        seen.extend(page["tasks"].as_array().unwrap().iter().map(|t| t["taskId"].as_str().unwrap().to_string()));
        rig.create("acme", "bob", "slow_compute").await;
        match page["next"].as_str() {
            Some(next) => cursor = format!("&cursor={next}"),
            None => break,
        }
    }
    let unique: std::collections::HashSet<String> = seen.iter().cloned().collect();
    assert_eq!(unique.len(), seen.len(), "no task twice");
    assert_eq!(unique, before);
}

/// An admin cancels a live task (the owner sees it cancelled); a second
/// cancel is a 409; the task page shows its record.
async fn cancel_and_task_detail(rig: Rig) {
    let task = rig.create("acme", "alice", "slow_compute").await;
    let claims = rig.backend.work.claim("w-7", 1, Duration::from_secs(30), Duration::from_millis(500)).await.unwrap();
    assert_eq!(claims.len(), 1);
    let (status, detail) = rig.get("acme-admin", &format!("/tasks/{}", task.id)).await;
    assert_eq!(status, 200, "{detail}");
    assert_eq!((detail["status"].as_str(), detail["tool"].as_str()), (Some("working"), Some("slow_compute")));
    assert_eq!((detail["inputRequests"].clone(), detail["deadLetter"].clone()), (json!([]), Value::Null));
    assert_eq!(
        (detail["worker"].as_str(), detail["history"].clone()),
        (Some("w-7"), json!([])),
        "held, never changed status"
    );
    let (status, done) = rig.post("acme-admin", &format!("/tasks/{}/cancel", task.id)).await;
    assert_eq!((status, done["task"]["status"].as_str()), (200, Some("cancelled")), "{done}");
    let (_, ended) = rig.get("acme-admin", &format!("/tasks/{}", task.id)).await;
    assert_eq!(ended["history"].as_array().map(Vec::len), Some(1), "{ended}");
    assert_eq!(ended["history"][0]["status"], "cancelled");
    assert_eq!(ended["history"][0]["atMs"], ended["updatedAtMs"]);
    assert_eq!(ended["worker"], Value::Null, "a finished task is held by no one");
    let stored = rig.backend.store.get(&task.scope, &task.id).await.unwrap().expect("the task");
    assert_eq!(stored.status, presa_store::Status::Cancelled, "the owner sees it cancelled");
    let (status, body) = rig.post("root", &format!("/tasks/{}/cancel", task.id)).await;
    assert_eq!((status, error_code(&body)), (409, "conflict"), "{body}");
}

/// A poison task's dead letter is listed for its tenant, replayed once (a
/// second replay answers the same task), shown on the dead task's page, and
/// discarded once.
async fn dead_letters_replay_and_discard(rig: Rig) {
    let task = rig.create("acme", "alice", "slow_compute").await;
    let claims = rig.backend.work.claim("w-1", 1, Duration::from_secs(30), Duration::from_millis(500)).await.unwrap();
    let [claim] = claims.as_slice() else { panic!("one claim: {claims:?}") };
    let failure = presa_tasks::Event::Fail(json!({ "code": -32603, "message": "Task failed after repeated attempts" }));
    let dead = presa_tasks::apply(&claim.task, &failure, presa_store::util::now_ms()).unwrap().unwrap();
    rig.backend.work.conclude_dead(&dead, claim, "exhausted 6 deliveries").await.unwrap();

    let (status, page) = rig.get("acme-admin", "/dead-letters").await;
    assert_eq!(status, 200, "{page}");
    let letter = &page["deadLetters"][0];
    assert_eq!(
        (letter["taskId"].as_str(), letter["reason"].as_str()),
        (Some(task.id.as_str()), Some("exhausted 6 deliveries"))
    );
    assert_eq!((letter["tool"].as_str(), letter["replayedAs"].clone()), (Some("slow_compute"), Value::Null));
    let (_, none) = rig.get("globex-admin", "/dead-letters").await;
    assert_eq!(none["deadLetters"], json!([]), "globex has none");
    let (status, _) = rig.post("globex-admin", &format!("/dead-letters/{}/replay", task.id)).await;
    assert_eq!(status, 404, "not globex's letter");

    let (status, first) = rig.post("root", &format!("/dead-letters/{}/replay?tenant=acme", task.id)).await;
    assert_eq!((status, first["first"].as_bool()), (200, Some(true)), "{first}");
    let (_, again) = rig.post("acme-admin", &format!("/dead-letters/{}/replay", task.id)).await;
    assert_eq!((again["taskId"].clone(), again["first"].as_bool()), (first["taskId"].clone(), Some(false)));
    let replay = first["taskId"].as_str().unwrap();
    let (_, detail) = rig.get("acme-admin", &format!("/tasks/{replay}")).await;
    assert_eq!((detail["replayOf"].as_str(), detail["status"].as_str()), (Some(task.id.as_str()), Some("working")));
    let (_, dead_page) = rig.get("acme-admin", &format!("/tasks/{}", task.id)).await;
    assert_eq!(
        (dead_page["status"].as_str(), dead_page["deadLetter"]["replayedAs"].as_str()),
        (Some("failed"), Some(replay))
    );

    let (status, _) = rig.delete("acme-admin", &format!("/dead-letters/{}", task.id)).await;
    assert_eq!(status, 204);
    let (status, _) = rig.delete("acme-admin", &format!("/dead-letters/{}", task.id)).await;
    assert_eq!(status, 404, "gone");
}

/// The cluster view lists heartbeating nodes; a drain reaches the node's
/// next heartbeat; the queues count the queued work.
async fn cluster_queues_and_drain(rig: Rig) {
    let node = Node::new("w-drain-me", "worker", 8);
    assert!(
        !rig.backend.admin.heartbeat(&node.report(vec!["slow_compute".into()]), Duration::from_secs(30)).await.unwrap()
    );
    rig.create("acme", "alice", "slow_compute").await;
    rig.create("globex", "eve", "slow_compute").await;

    let (status, cluster) = rig.get("root", "/cluster").await;
    assert_eq!(status, 200, "{cluster}");
    let listed = &cluster["nodes"][0];
    assert_eq!(
        (listed["id"].as_str(), listed["role"].as_str(), listed["slots"].as_u64()),
        (Some("w-drain-me"), Some("worker"), Some(8))
    );
    assert_eq!((listed["tools"].clone(), listed["draining"].as_bool()), (json!(["slow_compute"]), Some(false)));

    let (status, queues) = rig.get("root", "/queues").await;
    assert_eq!(status, 200, "{queues}");
    assert_eq!(
        (queues["total"]["queued"].as_u64(), queues["partitions"].as_array().map(Vec::len)),
        (Some(2), Some(4)),
        "{queues}"
    );
    assert!(queues["total"]["oldestQueuedAgeMs"].is_u64(), "{queues}");
    assert_eq!(
        (&queues["total"]["delayed"], &queues["partitions"][0]["oldestDueAgeMs"]),
        (&json!(0), &Value::Null),
        "nothing waits out a retry: {queues}"
    );

    let (status, drained) = rig.post("root", "/workers/w-drain-me/drain").await;
    assert_eq!((status, drained["node"]["draining"].as_bool()), (200, Some(true)), "{drained}");
    assert!(
        rig.backend.admin.heartbeat(&node.report(Vec::new()), Duration::from_secs(30)).await.unwrap(),
        "told to drain"
    );
    let (_, cluster) = rig.get("root", "/cluster").await;
    assert_eq!(cluster["nodes"][0]["draining"], true);
}

/// The event stream sends an `overview` with the queues to a cluster admin,
/// the time alone to a tenant admin, and ends when the credential expires.
async fn events_stream(rig: Rig) {
    use futures::StreamExt;
    rig.create("acme", "alice", "slow_compute").await;
    let open = |token: &'static str| {
        let req = rig.http.get(format!("{}/events", rig.base)).bearer_auth(token);
        async move {
            let resp = req.send().await.expect("events");
            assert_eq!(resp.status(), 200);
            eventsource_stream::Eventsource::eventsource(resp.bytes_stream())
        }
    };
    let mut root = open("brief-root").await;
    let first =
        tokio::time::timeout(Duration::from_secs(5), root.next()).await.expect("an event").expect("open").expect("ok");
    assert_eq!(first.event, "overview");
    let data: Value = serde_json::from_str(&first.data).unwrap();
    assert_eq!(data["queues"]["queued"], 1, "{data}");
    assert_eq!(data["partitions"].as_array().map(Vec::len), Some(4), "each partition's queues: {data}");
    assert_eq!(data["queues"]["delayed"], 0, "{data}");
    let ended =
        tokio::time::timeout(Duration::from_secs(10), async { while let Some(Ok(_)) = root.next().await {} }).await;
    assert!(ended.is_ok(), "the stream ends with its credential");

    let mut tenant = open("acme-admin").await;
    let first = tokio::time::timeout(Duration::from_secs(5), tenant.next())
        .await
        .expect("an event")
        .expect("open")
        .expect("ok");
    let data: Value = serde_json::from_str(&first.data).unwrap();
    assert!(data["nowMs"].is_u64() && data.get("queues").is_none() && data.get("nodes").is_none(), "{data}");

    // One tenant's admins hold at most their share (2 by default): the
    // third is refused, while another tenant's admin and the cluster's still get one.
    let _second = open("acme-admin").await;
    let third = rig.http.get(format!("{}/events", rig.base)).bearer_auth("acme-admin").send().await.unwrap();
    assert_eq!(third.status(), 503, "past acme's share");
    let said: Value = third.json().await.unwrap();
    assert!(said["error"]["message"].as_str().unwrap_or("").contains("admin_max_streams_per_tenant"), "{said}");
    let _globex = open("globex-admin").await;
    let _root = open("root").await;
    drop(tenant);
}

/// Usage per principal of a tenant: live and active tasks, bytes, by
/// status, against the quotas; a tenant admin gets its own only.
async fn usage_per_principal(rig: Rig) {
    rig.create("acme", "alice", "slow_compute").await;
    let done = rig.create("acme", "alice", "slow_compute").await;
    rig.create("acme", "bob", "slow_compute").await;
    rig.create("globex", "eve", "slow_compute").await;
    let cancelled =
        presa_tasks::apply(&done, &presa_tasks::Event::Cancel, presa_store::util::now_ms()).unwrap().unwrap();
    rig.backend.store.transition(&cancelled, presa_store::Writer::Client).await.unwrap();

    let (status, usage) = rig.get("acme-admin", "/usage").await;
    assert_eq!(status, 200, "{usage}");
    assert_eq!(
        (usage["tenant"].as_str(), usage["complete"].as_bool(), usage["scanned"].as_u64()),
        (Some("acme"), Some(true), Some(3))
    );
    let alice = &usage["principals"][0];
    assert_eq!(
        (alice["subject"].as_str(), alice["live"].as_u64(), alice["active"].as_u64()),
        (Some("alice"), Some(2), Some(1)),
        "{usage}"
    );
    assert_eq!(alice["byStatus"], json!({ "cancelled": 1, "working": 1 }));
    assert!(alice["bytes"].as_u64().unwrap_or(0) > 100, "{alice}");
    // A scan costs up to thousands of store reads: a second call within the
    // cache's 5 s is answered from the first, not from a new scan.
    rig.create("acme", "carl", "slow_compute").await;
    let (_, again) = rig.get("root", "/usage?tenant=acme").await;
    assert_eq!((again["scanned"].as_u64(), &again["asOfMs"]), (Some(3), &usage["asOfMs"]), "{again}");
    assert_eq!(usage["principals"][1]["subject"], "bob");
    assert_eq!(usage["principals"].as_array().map(Vec::len), Some(2), "no globex principal: {usage}");
    assert!(usage["limits"]["maxActiveTasksPerPrincipal"].is_u64(), "the default quota: {usage}");
    let (status, _) = rig.get("acme-admin", "/usage?tenant=globex").await;
    assert_eq!(status, 403);
    let (status, body) = rig.get("root", "/usage").await;
    assert_eq!((status, error_code(&body)), (400, "bad_request"), "a cluster admin names the tenant");
    let (_, globex) = rig.get("root", "/usage?tenant=globex").await;
    assert_eq!(globex["principals"][0]["subject"], "eve");
}

/// A catalog of `flaky`, whose first try fails transiently and asks to be
/// tried again in a minute (its later tries complete), `hang`, which runs
/// until cancelled, and `metered`, which may start once an hour.
fn retry_catalog() -> presa_server::Catalog {
    use presa_server::{Catalog, RetryPolicy, TaskPolicy, Tool, ToolContext, ToolError, ToolOutput};
    let flaky = Tool::new(
        "flaky",
        "Fails its first try.",
        json!({ "type": "object" }),
        |ctx: ToolContext, _: Value| async move {
            let number = ctx.try_number().unwrap_or(1);
            if number == 1 {
                return Err(ToolError::retry_after(Duration::from_secs(60), "upstream 503"));
            }
            Ok(ToolOutput::text(format!("succeeded on try {number}")))
        },
    )
    .policy(TaskPolicy::Required)
    .retry(RetryPolicy::attempts(3).backoff(Duration::from_secs(60), Duration::from_secs(60)));
    let hang = Tool::new(
        "hang",
        "Runs until cancelled.",
        json!({ "type": "object" }),
        |ctx: ToolContext, _: Value| async move {
            ctx.sleep(Duration::from_secs(3600)).await?;
            Ok(ToolOutput::text("done"))
        },
    )
    .policy(TaskPolicy::Required);
    let metered =
        Tool::new("metered", "Once an hour.", json!({ "type": "object" }), |_: ToolContext, _: Value| async {
            Ok(ToolOutput::text("metered"))
        })
        .policy(TaskPolicy::Required)
        .rate(presa_server::ToolRate::per_second(1.0 / 3600.0));
    Catalog::builder().tool(flaky).tool(hang).tool(metered).build().expect("catalog")
}

/// The rig of `retry_now_runs_a_waiting_task_again`: [`retry_catalog`]
/// served on `backend` with a worker running it.
async fn with_worker(backend: Backend, keep: Option<Arc<TestRedis>>) -> Rig {
    let core = Core::new(ServerConfig::default(), retry_catalog(), backend.clone());
    let rig = serve_core(core.clone(), backend, keep).await;
    let config = presa_server::WorkerConfig {
        claim_wait: Duration::from_millis(100),
        grace: Duration::from_millis(100),
        ..presa_server::WorkerConfig::default()
    };
    tokio::spawn(presa_server::Worker::new(core, config).run(rig.stop.clone()));
    rig
}

impl Rig {
    /// Task `id`'s admin view once `done` holds of it (10 s at most).
    async fn detail_when(&self, id: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let mut detail = Value::Null;
        for _ in 0..200 {
            detail = self.get("root", &format!("/tasks/{id}")).await.1;
            if done(&detail) {
                return detail;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("task {id} never {what}: {detail}");
    }
}

/// A try that failed transiently waits a minute; the admin view shows the
/// failed try and when the next is due, the queues count it as delayed;
/// "retry now" (202) queues it at once and the task completes on its second
/// try; retrying it again (it ended), a running task, one waiting for its
/// tool's rate, another tenant's or an unknown one is refused with a JSON
/// error; a web page cannot send it.
async fn retry_now_runs_a_waiting_task_again(rig: Rig) {
    let task = rig.create("acme", "alice", "flaky").await;
    let id = task.id.as_str();
    let waiting = rig.detail_when(id, "waited", |d| d["retries"]["dueAtMs"].is_u64()).await;
    assert_eq!((waiting["status"].as_str(), waiting["retries"]["failed"].as_u64()), (Some("working"), Some(1)));
    let due = waiting["retries"]["dueAtMs"].as_u64().unwrap();
    let failed = &waiting["retries"]["log"][0];
    assert_eq!((failed["number"].as_u64(), failed["reason"].as_str()), (Some(1), Some("upstream 503")), "{waiting}");
    // A minute, from when the worker asked (the record's time is a moment later).
    let delay = failed["delayMs"].as_u64().unwrap_or(0);
    assert!((59_000..=60_000).contains(&delay), "{waiting}");
    assert_eq!(due, failed["atMs"].as_u64().unwrap() + delay, "due when it said: {waiting}");
    assert_eq!(waiting["worker"], Value::Null, "a waiting task holds no worker: {waiting}");
    let (_, listed) = rig.get("acme-admin", "/tasks").await;
    assert_eq!(listed["tasks"][0]["retries"], json!({ "failed": 1, "dueAtMs": due, "rateTurn": false }), "{listed}");
    let (_, queues) = rig.get("root", "/queues").await;
    assert_eq!(
        (queues["total"]["delayed"].as_u64(), &queues["total"]["oldestDueAgeMs"]),
        (Some(1), &Value::Null),
        "delayed, not due yet: {queues}"
    );
    let partition = usize::from(task.id.partition().unwrap_or(0));
    assert_eq!(queues["partitions"][partition]["delayed"], 1, "{queues}");

    // Refused: another tenant's admin (as unknown), an unknown id, a web page.
    let retry = format!("/tasks/{id}/retry");
    let (status, body) = rig.post("globex-admin", &retry).await;
    assert_eq!((status, error_code(&body)), (404, "not_found"), "{body}");
    let (status, body) = rig.post("root", "/tasks/p00.nope/retry").await;
    assert_eq!((status, error_code(&body)), (404, "not_found"), "{body}");
    let page = rig.http.post(format!("{}{retry}", rig.base)).bearer_auth("root").send().await.unwrap();
    assert_eq!(page.status(), 403, "neither the JSON type nor X-Presa-Admin");
    let (_, still) = rig.get("root", &format!("/tasks/{id}")).await;
    assert_eq!(still["retries"]["dueAtMs"].as_u64(), Some(due), "nothing moved it: {still}");

    let (status, answer) = rig.post("acme-admin", &retry).await;
    assert_eq!((status, answer["task"]["taskId"].as_str()), (202, Some(id)), "{answer}");
    let done = rig.detail_when(id, "completed", |d| d["status"] == "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "succeeded on try 2", "{done}");
    assert_eq!((done["retries"]["failed"].as_u64(), &done["retries"]["dueAtMs"]), (Some(1), &Value::Null), "{done}");
    assert_eq!(done["retries"]["log"].as_array().map(Vec::len), Some(1), "{done}");
    assert!(done["updatedAtMs"].as_u64().unwrap() < due, "ran well before its minute was up: {done}");

    let (status, body) = rig.post("root", &retry).await;
    assert_eq!((status, error_code(&body)), (409, "conflict"), "{body}");
    assert!(body["error"]["message"].as_str().unwrap_or("").contains("ended (completed)"), "{body}");
    let running = rig.create("acme", "alice", "hang").await;
    rig.detail_when(running.id.as_str(), "ran", |d| d["worker"].is_string()).await;
    let (status, body) = rig.post("root", &format!("/tasks/{}/retry", running.id)).await;
    assert_eq!((status, error_code(&body)), (409, "conflict"), "{body}");
    assert!(body["error"]["message"].as_str().unwrap_or("").contains("not waiting for a retry"), "{body}");
    let (_, queues) = rig.get("root", "/queues").await;
    assert_eq!(queues["total"]["delayed"], 0, "{queues}");
    let (status, _) = rig.post("root", &format!("/tasks/{}/cancel", running.id)).await;
    assert_eq!(status, 200);

    // A task waiting for its turn under its tool's rate is not waiting for a
    // retry: made due, it would run past the rate.
    let first = rig.create("acme", "alice", "metered").await;
    rig.detail_when(first.id.as_str(), "completed", |d| d["status"] == "completed").await;
    let second = rig.create("acme", "alice", "metered").await;
    let turn = rig.detail_when(second.id.as_str(), "waited for its turn", |d| d["retries"]["dueAtMs"].is_u64()).await;
    assert_eq!((&turn["retries"]["rateTurn"], &turn["retries"]["failed"]), (&json!(true), &json!(0)), "{turn}");
    let (status, body) = rig.post("root", &format!("/tasks/{}/retry", second.id)).await;
    assert_eq!((status, error_code(&body)), (409, "conflict"), "{body}");
    assert!(body["error"]["message"].as_str().unwrap_or("").contains("its turn under its tool's rate"), "{body}");
}

/// `GET /limits`: every tool's concurrency limit with its permits in use
/// and waiters per key, as the store counts them, and its rate.
async fn limits_show_permits_in_use(rig: Rig) {
    use presa_store::{Holder, PermitName, PermitTerms};
    let name = PermitName { limit: "exclusive_job".into(), key: String::new() };
    let terms = PermitTerms { permits: 2, lease: Duration::from_secs(30), waiter_ttl: Duration::from_secs(30) };
    for (i, id) in ["a", "b", "c"].into_iter().enumerate() {
        let holder = Holder { id: id.into(), fence: 1, order: i as u64 };
        rig.backend.permits.acquire_permit(&name, &holder, terms).await.expect("acquire");
    }
    let (status, body) = rig.get("root", "/limits").await;
    assert_eq!(status, 200, "{body}");
    let tools = body["tools"].as_array().expect("tools");
    let exclusive = tools.iter().find(|t| t["tool"] == "exclusive_job").expect("exclusive_job");
    assert_eq!(exclusive["concurrency"]["limit"], 2, "{body}");
    assert_eq!(exclusive["concurrency"]["keys"], json!([{ "key": "", "inUse": 2, "waiting": 1 }]), "{body}");
    let metered = tools.iter().find(|t| t["tool"] == "metered_job").expect("metered_job");
    assert_eq!((&metered["rate"]["perSecond"], &metered["concurrency"]), (&json!(5.0), &Value::Null), "{body}");
    assert!(tools.iter().all(|t| t["tool"] != "greet"), "a tool without limits is left out: {body}");
}

macro_rules! admin_cases {
    ($backend:ident: $($case:ident),* $(,)?) => {
        mod $backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(super::$backend().await).await
                }
            )*
        }
    };
}

admin_cases!(memory: refusals, tenant_isolation, pagination_is_stable_under_concurrent_creates, cancel_and_task_detail,
    dead_letters_replay_and_discard, cluster_queues_and_drain, events_stream, usage_per_principal,
    limits_show_permits_in_use);
admin_cases!(redis: refusals, tenant_isolation, pagination_is_stable_under_concurrent_creates, cancel_and_task_detail,
    dead_letters_replay_and_discard, cluster_queues_and_drain, events_stream, usage_per_principal,
    limits_show_permits_in_use);

mod retry_now {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn memory() {
        let backend = super::Backend::new(std::sync::Arc::new(super::MemoryStore::with_partitions(4)));
        super::retry_now_runs_a_waiting_task_again(super::with_worker(backend, None).await).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis() {
        let redis = std::sync::Arc::new(super::TestRedis::start().await);
        let config = super::RedisConfig::new(redis.url()).with_prefix(super::unique_prefix()).with_partitions(4);
        let store = super::RedisStore::connect(config).await.expect("connect to the test Redis");
        let backend = super::Backend::new(std::sync::Arc::new(store));
        super::retry_now_runs_a_waiting_task_again(super::with_worker(backend, Some(redis)).await).await;
    }
}

/// The binary: `--auth tokens` with the admin scopes in the token file,
/// `--admin-listen` moving the admin API off the MCP listener, and the
/// anonymous admin API refused off loopback even with `--allow-anonymous`.
#[tokio::test]
async fn presa_api_serves_the_admin_api_where_and_to_whom_it_is_told() {
    use presa_auth::tokens::token_digest;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens");
    let lines = [
        ("ops-token", "ops root presa:admin"),
        ("user-token", "acme alice deploy"),
        ("acme-admin-token", "acme carol presa:tenant-admin"),
    ]
    .map(|(token, who)| format!("{} {who}\n", token_digest(token)))
    .concat();
    std::fs::write(&file, lines).unwrap();
    let bin = std::path::PathBuf::from(env!("CARGO_BIN_EXE_presa-api"));
    let admin_port = presa_testkit::free_port();
    let admin_at = format!("127.0.0.1:{admin_port}");
    let args = ["--auth", "tokens", "--tokens-file", file.to_str().unwrap(), "--admin-listen", &admin_at];
    let pod = presa_testkit::Pod::start("api", &bin, presa_testkit::free_port(), &args, &[]).await;
    let http = reqwest::Client::new();
    let get = |url: String, token: &'static str| {
        let req = http.get(url).bearer_auth(token);
        async move {
            let resp = req.send().await.expect("request");
            (resp.status().as_u16(), resp.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let (status, me) = get(format!("http://{admin_at}/admin/v1/whoami"), "ops-token").await;
    assert_eq!((status, me["role"].as_str()), (200, Some("admin")), "{me}\n{}", pod.log());
    let (status, _) = get(format!("http://{admin_at}/admin/v1/whoami"), "user-token").await;
    assert_eq!(status, 403, "a token without the admin scope");
    let (status, cluster) = get(format!("http://{admin_at}/admin/v1/cluster"), "ops-token").await;
    assert_eq!(status, 200, "{cluster}");
    let roles: Vec<&str> = cluster["nodes"].as_array().unwrap().iter().filter_map(|n| n["role"].as_str()).collect();
    assert_eq!(roles, vec!["embedded"], "the pod registers itself at start: {cluster}");
    // A tenant admin reaching for another tenant: refused, and recorded.
    let (status, _) = get(format!("http://{admin_at}/admin/v1/tasks?tenant=globex"), "acme-admin-token").await;
    assert_eq!(status, 403);
    pod.wait_log("outside the caller's tenant", Duration::from_secs(5)).await;
    assert!(pod.log().contains("presa::audit"), "{}", pod.log());
    let main = pod.url.trim_end_matches("/mcp");
    let (status, _) = get(format!("{main}/admin/v1/whoami"), "ops-token").await;
    assert_eq!(status, 404, "not beside /mcp when it has a listener of its own");

    let out = std::process::Command::new(&bin)
        .args(["--listen", "0.0.0.0:0", "--allow-anonymous"])
        .env_remove("PRESA_AUTH")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("admin API") && err.contains("--admin off"), "{err}");
}

/// What a web page could send to a loopback `presa-api` with the defaults
/// (`--auth none`, admin on): a cross-origin form `POST` that drains the
/// embedded worker, and a request under a rebound DNS name (`Host:
/// attacker.example`) that reads and cancels tasks. Both are refused, on the
/// admin API, the console and `/mcp`, while the same requests from a
/// program (loopback `Host`, the `X-Presa-Admin` mark) still work (and
/// only those count in `presa_admin_actions_total`).
#[tokio::test]
async fn a_web_page_cannot_drive_a_loopback_admin_api() {
    let bin = std::path::PathBuf::from(env!("CARGO_BIN_EXE_presa-api"));
    let port = presa_testkit::free_port();
    let pod = presa_testkit::Pod::start("api", &bin, port, &[], &[]).await;
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let (status, cluster) = {
        let r = http.get(format!("{base}/admin/v1/cluster")).send().await.unwrap();
        (r.status().as_u16(), r.json::<Value>().await.unwrap())
    };
    assert_eq!(status, 200, "{cluster}\n{}", pod.log());
    let node = cluster["nodes"][0]["id"].as_str().expect("the embedded node").to_string();
    let drain = format!("{base}/admin/v1/workers/{node}/drain");

    // CSRF: a form on another site posts to the drain route.
    let form = http
        .post(&drain)
        .header("Origin", "https://evil.example")
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body("x=1")
        .send()
        .await
        .unwrap();
    assert_eq!(form.status(), 403, "a foreign Origin");
    // A same-origin-looking simple request (no Origin, text/plain): a browser
    // never sends one cross-origin without Origin, but it must still not pass.
    let plain = http.post(&drain).header("Content-Type", "text/plain").body("{}").send().await.unwrap();
    assert_eq!(plain.status(), 415, "a body a form can send");
    let bare = http.post(&drain).send().await.unwrap();
    assert_eq!(bare.status(), 403, "no JSON type and no X-Presa-Admin");
    let said: Value = bare.json().await.unwrap();
    assert!(said["error"]["message"].as_str().unwrap_or("").contains("X-Presa-Admin"), "{said}");

    // DNS rebinding: the page's own name in Host, every route.
    for (method, path) in [
        (reqwest::Method::GET, "/admin/v1/tasks"),
        (reqwest::Method::GET, "/admin/v1/cluster"),
        (reqwest::Method::POST, "/admin/v1/tasks/p00.x/cancel"),
        (reqwest::Method::GET, "/console"),
        (reqwest::Method::GET, "/metrics"),
    ] {
        let r = http
            .request(method.clone(), format!("{base}{path}"))
            .header("Host", "attacker.example")
            .header("X-Presa-Admin", "1")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403, "{method} {path} under a rebound name");
    }
    let mcp = http
        .post(format!("{base}/mcp"))
        .header("Host", format!("attacker.example:{port}"))
        .header("Content-Type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(mcp.status(), 403, "/mcp under a rebound name");

    // Nothing of that drained the worker: it is not draining, and still runs tasks.
    let cluster: Value = http.get(format!("{base}/admin/v1/cluster")).send().await.unwrap().json().await.unwrap();
    assert_eq!(cluster["nodes"][0]["draining"], false, "{cluster}");
    let console = http.get(format!("{base}/console")).header("Host", format!("localhost:{port}")).send().await;
    assert_eq!(console.unwrap().status(), 200, "the console under a loopback name");
    // A program's request, marked, does what it asks.
    let ok = http.post(&drain).header("X-Presa-Admin", "1").send().await.unwrap();
    assert_eq!(ok.status(), 200, "{}", ok.text().await.unwrap_or_default());
    // Counted once (the refused attempts were not), beside the actions not taken.
    let metrics = http.get(format!("{base}/metrics")).send().await.unwrap().text().await.unwrap();
    for series in ["presa_admin_actions_total{action=\"drain\"} 1", "presa_admin_actions_total{action=\"retry_now\"} 0"]
    {
        assert!(metrics.lines().any(|l| l == series), "{series} in\n{metrics}");
    }
}
