//! The servers under test: the bench's catalog and settings, a presa server started in this process (embedded or on Redis), the `serve` subcommand, and the fairness rows on fresh servers.

use super::*;

/// The `serve` subcommand: see [`Command::Serve`].
pub(super) async fn serve(args: ServeArgs) {
    let mut config = bench_config();
    if args.max_listen_streams > 0 {
        config = config.with(|c| {
            c.max_listen_streams = args.max_listen_streams;
            c.max_listen_streams_per_scope = 0;
        });
    }
    let running = match &args.redis_url {
        None => {
            let memory = Arc::new(MemoryStore::new());
            start_with(Backend::new(memory), None, config, 1).await
        }
        Some(url) => {
            let redis = RedisConfig::new(url.clone()).with_prefix(format!("presa-bench-{}", unique_prefix()));
            let store =
                Arc::new(RedisStore::connect(redis).await.unwrap_or_else(|e| panic!("connecting to {url}: {e}")));
            start_with(Backend::new(store), None, config, 1).await
        }
    };
    println!("{}", running.url);
    let mut sink = Vec::new();
    let _ = tokio::io::AsyncReadExt::read_to_end(&mut tokio::io::stdin(), &mut sink).await;
}

/// The bench's catalog (see the module docs).
pub(super) fn catalog() -> Catalog {
    let text = json!({ "type": "object", "properties": { "text": { "type": "string" } } });
    let echo = |args: &Value| ToolOutput::text(args["text"].as_str().unwrap_or_default());
    Catalog::builder()
        .tool(Tool::new("echo", "Echoes `text` (JSON reply).", text.clone(), move |_ctx, args: Value| async move {
            Ok(echo(&args))
        }))
        .tool(Tool::new(
            "echo_progress",
            "Sends one progress notification, then echoes `text` (SSE reply).",
            text,
            move |ctx: ToolContext, args: Value| async move {
                ctx.progress(1.0, Some(1.0), None);
                Ok(echo(&args))
            },
        ))
        .tool(
            Tool::new("noop_task", "A task that completes at once.", json!({ "type": "object" }), |_ctx, _| async {
                COMPLETED.fetch_add(1, Ordering::Relaxed);
                Ok(ToolOutput::text("done"))
            })
            .policy(TaskPolicy::Required),
        )
        .tool(
            Tool::new(
                "wait_task",
                "A task that awaits 1 ms (as any real work does: its run is watched meanwhile), then completes.",
                json!({ "type": "object" }),
                |_ctx, _| async {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    COMPLETED.fetch_add(1, Ordering::Relaxed);
                    Ok(ToolOutput::text("done"))
                },
            )
            .policy(TaskPolicy::Required),
        )
        .tool(
            Tool::new(
                "stamp_task",
                "A task that records when a worker picked it up (`t`: send time), then completes.",
                json!({ "type": "object", "properties": { "t": { "type": "integer" } } }),
                |_ctx, args: Value| async move {
                    stamp(&PICKUPS, args["t"].as_u64());
                    Ok(ToolOutput::text("done"))
                },
            )
            .policy(TaskPolicy::Required),
        )
        .tool(
            Tool::new(
                "sleep_task",
                "A task that holds its worker slot for `ms`, then completes.",
                json!({ "type": "object", "properties": { "ms": { "type": "integer" } } }),
                |_ctx, args: Value| async move {
                    tokio::time::sleep(Duration::from_millis(args["ms"].as_u64().unwrap_or(0))).await;
                    Ok(ToolOutput::text("done"))
                },
            )
            .policy(TaskPolicy::Required),
        )
        .tool(
            Tool::new(
                "park",
                "A task that asks for one input, then completes.",
                json!({ "type": "object" }),
                |ctx: ToolContext, _| async move {
                    let ask = json!({ "method": "elicitation/create", "params": { "message": "Go on?",
                        "requestedSchema": { "type": "object", "properties": { "t": { "type": "integer" } } } } });
                    let answer = ctx.input("go", ask).await?;
                    stamp(&RESUMES, answer["content"]["t"].as_u64());
                    Ok(ToolOutput::text(answer["action"].as_str().unwrap_or("?")))
                },
            )
            .policy(TaskPolicy::Required),
        )
        .build()
        .expect("the bench catalog is valid")
}

/// The fairness rows on fresh servers with default quotas and shares (see `fairness.rs`).
pub(super) async fn fairness_rows(redis: Option<&Running>, secs: Duration) {
    let scoped = || {
        HttpConfig::default().with(|c| {
            c.access.authenticator = Arc::new(presa_testkit::HeaderScopes);
        })
    };
    let memory = Arc::new(MemoryStore::new());
    let fair = start_http(Backend::new(memory), None, ServerConfig::default(), 1, scoped()).await;
    fairness::rows(&fair, "embedded", secs).await;
    drop(fair);
    let url = redis.and_then(|r| r.redis_url.as_ref()).map(|u| u.0.as_str());
    if url.is_some()
        && let Some(fair) = start_redis_with(url, ServerConfig::default(), 1, scoped()).await
    {
        fairness::rows(&fair, "Redis", secs).await;
    }
}

/// A server with its worker on a loopback port; stopped when dropped.
#[derive(Debug)]
pub(super) struct Running {
    pub(super) url: String,
    /// The Redis it runs on, and its key prefix.
    pub(super) redis_url: Option<(String, String)>,
    pub(super) server: Server,
    pub(super) stop: CancellationToken,
    /// The spawned Redis behind it, killed after the server stops.
    pub(super) _redis: Option<TestRedis>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The bench's server settings: no per-scope limit on tasks, listen streams
/// or in-request calls (one principal drives every row, and the round trips
/// measure speed, not admission).
pub(super) fn bench_config() -> ServerConfig {
    ServerConfig::default().with(|c| {
        c.max_active_tasks_per_scope = None;
        c.max_listen_streams_per_scope = 0;
        c.max_inflight_calls_per_scope = 0;
    })
}

pub(super) async fn start(backend: Backend, redis: Option<TestRedis>) -> Running {
    start_with(backend, redis, bench_config(), 1).await
}

/// A server with `workers` in-process worker pools (each as one `presa-worker` would run).
pub(super) async fn start_with(
    backend: Backend,
    redis: Option<TestRedis>,
    config: ServerConfig,
    workers: usize,
) -> Running {
    start_http(backend, redis, config, workers, HttpConfig::default()).await
}

/// [`start_with`] with `http` settings (the fairness rows name their callers
/// with `x-test-scope`: presa_testkit's `HeaderScopes`).
pub(super) async fn start_http(
    backend: Backend,
    redis: Option<TestRedis>,
    config: ServerConfig,
    workers: usize,
    http: HttpConfig,
) -> Running {
    let core = Core::new(config, catalog(), backend);
    let server = Server::new(core.clone(), StateCodec::new(b"presa-bench"));
    let stop = CancellationToken::new();
    for _ in 0..workers {
        tokio::spawn(Worker::new(core.clone(), WorkerConfig::default()).run(stop.clone()));
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
    let url = format!("http://{}/mcp", listener.local_addr().expect("a bound listener"));
    let router = presa_http::router(server.clone(), http);
    let shutdown = stop.clone();
    tokio::spawn(presa_http::serve(listener, router, async move { shutdown.cancelled().await }));
    Running { url, server, stop, _redis: redis, redis_url: None }
}

/// A Redis-backed server (unique key prefix), when a Redis is given or `redis-server` is on PATH.
pub(super) async fn start_redis(url: Option<&str>) -> Option<Running> {
    start_redis_with(url, bench_config(), 1, HttpConfig::default()).await
}

pub(super) async fn start_redis_with(
    url: Option<&str>,
    config: ServerConfig,
    workers: usize,
    http: HttpConfig,
) -> Option<Running> {
    start_redis_indexed(url, config, workers, http, true).await
}

/// [`start_redis_with`], its store indexing tasks for the admin listing or not.
pub(super) async fn start_redis_indexed(
    url: Option<&str>,
    config: ServerConfig,
    workers: usize,
    http: HttpConfig,
    task_index: bool,
) -> Option<Running> {
    let on_path =
        std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("redis-server").is_file()));
    let spawned = match url {
        None if on_path => Some(TestRedis::spawn()),
        _ => None,
    };
    let url = url.map(str::to_string).or_else(|| spawned.as_ref().map(|r| r.url().to_string()))?;
    let prefix = format!("presa-bench-{}", unique_prefix());
    let server_config = config;
    let config = RedisConfig::new(url.clone()).with_prefix(prefix.clone()).with_task_index(task_index);
    let store = Arc::new(RedisStore::connect(config).await.unwrap_or_else(|e| panic!("connecting to {url}: {e}")));
    let how = if spawned.is_some() { "spawned redis-server" } else { "given" };
    println!("Redis: {url} ({how}), key prefix {prefix}, {workers} worker pool(s)");
    let mut running = start_http(Backend::new(store), spawned, server_config, workers, http).await;
    running.redis_url = Some((url, prefix));
    Some(running)
}
