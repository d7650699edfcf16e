//! The operations measured: raw `tools/call` and `tasks/get` requests, task and input round trips through MCP clients, and the listen fan-out.

use super::*;

/// One keep-alive connection sending prepared `tools/call` bodies (JSON or SSE replies).
#[derive(Debug, Clone)]
pub(super) struct Raw {
    pub(super) http: reqwest::Client,
    pub(super) url: String,
}

impl Raw {
    pub(super) fn pool(url: &str, n: usize) -> Arc<Vec<Raw>> {
        let client = || reqwest::Client::builder().tcp_nodelay(true).build().expect("an HTTP client");
        Arc::new((0..n).map(|_| Raw { http: client(), url: url.into() }).collect())
    }

    /// Send `body` (a call of `tool`); the reply must be SSE when `sse`, else JSON.
    pub(super) async fn call(&self, tool: &str, body: String, sse: bool) -> Duration {
        self.post("tools/call", tool, body, sse, "\"result\"").await.latency
    }

    /// Send `body` (`method`, `Mcp-Name: name`); the reply must be HTTP 200 holding `expect`,
    /// SSE when `sse`, else JSON. A retryable refusal (503, 429) is reported as refused.
    pub(super) async fn post(&self, method: &str, name: &str, body: String, sse: bool, expect: &str) -> Sample {
        let t = Instant::now();
        let resp = (self.http.post(&self.url))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", method)
            .header("mcp-name", name)
            .body(body)
            .send()
            .await
            .expect("request sent");
        let status = resp.status().as_u16();
        let ctype = resp.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
        let text = resp.text().await.expect("a reply body");
        if matches!(status, 503 | 429) && text.contains("retry") {
            return Sample { latency: t.elapsed(), refused: true, ..Sample::default() };
        }
        let ok = status == 200 && ctype.contains("event-stream") == sse && text.contains(expect);
        assert!(ok, "{method} {name}: HTTP {status} {ctype}: {text}");
        Sample { latency: t.elapsed(), ..Sample::default() }
    }
}

/// `tools/call tool` on connection i, the same body every time.
/// The `_meta` every raw request carries (rmcp requires `clientInfo` too; presa accepts it).
pub(super) fn raw_meta(caps: Value) -> Value {
    json!({ "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": { "name": "presa-bench", "version": "0" },
        "io.modelcontextprotocol/clientCapabilities": caps })
}

pub(super) fn echo_op(pool: &Arc<Vec<Raw>>, tool: &'static str, sse: bool) -> Op {
    let mut meta = raw_meta(json!({}));
    meta["progressToken"] = json!("p1");
    let params = json!({ "name": tool, "arguments": { "text": "hello" }, "_meta": meta });
    let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params }).to_string();
    let pool = pool.clone();
    op(move |i| {
        let (pool, body) = (pool.clone(), body.clone());
        async move { Sample { latency: pool[i].call(tool, body, sse).await, ..Sample::default() } }
    })
}

/// `tasks/get` of `ids[i]` (a completed task) on connection i.
pub(super) fn get_op(pool: &Arc<Vec<Raw>>, ids: &[String]) -> Op {
    let bodies: Arc<Vec<(String, String)>> = Arc::new(
        ids.iter()
            .map(|id| {
                let params = json!({ "taskId": id, "_meta": raw_meta(tasks_caps()) });
                (id.clone(), json!({ "jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": params }).to_string())
            })
            .collect(),
    );
    let pool = pool.clone();
    op(move |i| {
        let (pool, bodies) = (pool.clone(), bodies.clone());
        async move { pool[i].post("tasks/get", &bodies[i].0, bodies[i].1.clone(), false, "\"completed\"").await }
    })
}

/// Create a task of `tool` on connection i (JSON reply); `stamped`: arguments carry the send time.
pub(super) fn create_op(pool: &Arc<Vec<Raw>>, tool: &'static str, stamped: bool) -> Op {
    let pool = pool.clone();
    op(move |i| {
        let pool = pool.clone();
        async move {
            let args = if stamped { json!({ "t": now_us() }) } else { json!({}) };
            let params = json!({ "name": tool, "arguments": args, "_meta": raw_meta(tasks_caps()) });
            let body = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params }).to_string();
            pool[i].post("tools/call", tool, body, false, "\"taskId\"").await
        }
    })
}

/// One MCP client (its own connection) per load loop, declaring the Tasks extension.
pub(super) fn task_clients(url: &str, n: usize) -> Arc<Vec<Client>> {
    Arc::new((0..n).map(|_| Client::new(url, tasks_caps())).collect())
}

/// Call `tool` (arguments `{"text": "hello"}`, which every bench tool takes) and return the id of the task it became.
pub(super) async fn create(c: &Client, tool: &str) -> String {
    let r = c.call_tool(tool, json!({ "text": "hello" })).await;
    r["taskId"].as_str().unwrap_or_else(|| panic!("{tool} did not become a task: {r}")).to_string()
}

/// `tasks/get` at once, then every [`POLL`], until the task is `status`; returns the gets sent.
pub(super) async fn poll_until(c: &Client, id: &str, status: &str) -> u64 {
    let mut polls = 0;
    loop {
        polls += 1;
        let t = c.get_task(id).await;
        if t["status"] == status {
            return polls;
        }
        assert!(matches!(t["status"].as_str(), Some("working" | "input_required")), "task {id}: {t}");
        tokio::time::sleep(POLL).await;
    }
}

pub(super) fn task_op(clients: &Arc<Vec<Client>>, tool: &'static str) -> Op {
    let clients = clients.clone();
    op(move |i| {
        let clients = clients.clone();
        async move {
            let (c, t) = (&clients[i], Instant::now());
            let id = create(c, tool).await;
            let polls = poll_until(c, &id, "completed").await;
            Sample { latency: t.elapsed(), polls, ..Sample::default() }
        }
    })
}

pub(super) fn input_op(clients: &Arc<Vec<Client>>) -> Op {
    let clients = clients.clone();
    op(move |i| {
        let clients = clients.clone();
        async move {
            let (c, t) = (&clients[i], Instant::now());
            let id = create(c, "park").await;
            let mut polls = poll_until(c, &id, "input_required").await;
            let answered = Instant::now();
            let content = json!({ "t": now_us() });
            let answer =
                json!({ "taskId": id, "inputResponses": { "go": { "action": "accept", "content": content } } });
            c.ok("tasks/update", answer).await;
            polls += poll_until(c, &id, "completed").await;
            Sample { latency: t.elapsed(), polls, tail: Some(answered.elapsed()), refused: false }
        }
    })
}

/// Open `listeners` listen streams, publish one `tools/list_changed` per round; returns
/// (time until all streams received it, per round; time of each single delivery).
pub(super) async fn fan_out(server: &Running, listeners: usize, budget: Duration) -> (Vec<Duration>, Vec<Duration>) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut readers = tokio::task::JoinSet::new();
    for _ in 0..listeners {
        let (status, mut stream) =
            Client::new(server.url.clone(), json!({})).listen(json!({ "toolsListChanged": true })).await;
        let ack = next_within(&mut stream, 5).await;
        assert!(status == 200 && ack["method"] == "notifications/subscriptions/acknowledged", "listen: {ack}");
        let tx = tx.clone();
        readers.spawn(async move {
            while let Some(m) = stream.next().await {
                if m["method"] == "notifications/tools/list_changed" && tx.send(Instant::now()).is_err() {
                    return;
                }
            }
        });
    }
    let (mut all, mut each) = (Vec::new(), Vec::new());
    let deadline = Instant::now() + budget;
    while all.len() < FAN_OUT_ROUNDS && Instant::now() < deadline {
        let t0 = Instant::now();
        server.server.core().bus().publish("notifications/tools/list_changed").await.expect("publish list_changed");
        let mut last = t0;
        for _ in 0..listeners {
            let at = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await;
            let at = at.expect("every stream within 5 s").expect("readers alive");
            each.push(at - t0);
            last = last.max(at);
        }
        all.push(last - t0);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    readers.shutdown().await;
    (all, each)
}
