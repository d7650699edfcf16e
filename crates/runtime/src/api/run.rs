//! The life of an API process: checks its flags, starts telemetry, storage,
//! the dispatcher, the HTTP server(s) and (embedded) the worker pool, and
//! drains on SIGTERM/SIGINT.

use std::time::Duration;

use presa_http::{HttpConfig, LegacyConfig, ServeLimits};
use presa_server::{Core, Server, ServerConfig, StateCodec, Worker, WorkerConfig};
use tokio_util::sync::CancellationToken;

use super::ApiArgs;
use crate::{
    RuntimeError, Storage, Switch,
    app::Checked,
    auth::{allowed_hosts, check_admin, check_listen, check_state_secret},
    shutdown_signal,
};

/// Run an API process for `app` with `args` until SIGTERM/SIGINT and its drain.
pub(crate) async fn run(app: Checked, args: ApiArgs) -> Result<(), RuntimeError> {
    let secret = args.state_secret()?;
    let secret = secret.as_deref();
    check_listen(&args.auth, args.listen)?;
    check_admin(&args.auth, args.admin_listen.unwrap_or(args.listen), args.admin == Switch::On)?;
    if let Some(s) = secret {
        check_state_secret(s).map_err(|source| match &args.state_secret_file {
            Some(path) => RuntimeError::StateSecretFile { source, path: path.clone() },
            None => RuntimeError::Refused(source),
        })?;
    }
    let telemetry = crate::telemetry(&format!("{}-api", app.name), args.log_format)?;

    let state = match secret {
        Some(s) => StateCodec::new(s.as_bytes()),
        None => {
            tracing::warn!(
                "PRESA_STATE_SECRET is not set: using a random per-process key; \
                 several API pods would not accept each other's requestState"
            );
            StateCodec::random()
        }
    };
    let config = ServerConfig {
        task_ttl_ms: args.task_ttl_ms.0,
        poll_interval_ms: Some(args.poll_interval_ms),
        max_task_input_bytes: args.max_task_input_bytes,
        max_idempotency_key_bytes: args.max_idempotency_key_bytes,
        max_task_bytes: args.max_task_bytes,
        max_bytes_per_scope: (args.max_bytes_per_scope > 0).then_some(args.max_bytes_per_scope),
        max_result_bytes: args.max_result_bytes,
        max_active_tasks_per_scope: (args.max_active_tasks_per_scope > 0).then_some(args.max_active_tasks_per_scope),
        max_queued_per_partition: (args.max_queued > 0).then_some(args.max_queued),
        max_listen_streams: args.max_listen_streams,
        max_listen_streams_per_scope: args.max_listen_streams_per_scope,
        max_inflight_calls: args.max_inflight_calls,
        max_inflight_calls_per_scope: args.max_inflight_calls_per_scope,
        call_timeout: (args.call_timeout_ms > 0).then(|| Duration::from_millis(args.call_timeout_ms)),
        permit_wait: Duration::from_millis(args.permit_wait_ms),
        ..app.server_config()
    };
    let storage = Storage::from_args(&args.redis, args.max_tasks, args.max_memory_bytes)
        .await?
        .also_ready(app.ready.clone().map(|r| r.0));
    if storage.durable {
        tracing::info!("Redis mode: this pod serves requests; worker pods run the tools");
    } else {
        tracing::warn!("embedded mode: tasks live in this process's memory and are lost when it stops");
        let quota = usize::try_from(args.max_bytes_per_scope).unwrap_or(usize::MAX);
        tracing::info!(
            max_tasks = args.max_tasks,
            max_memory_bytes = args.max_memory_bytes,
            principals_at_their_byte_quota = args.max_memory_bytes.checked_div(quota),
            "embedded mode: finished tasks are evicted (oldest first, heaviest principal first) when memory \
             or --max-tasks is full, so they never hold a place another principal's new task needs"
        );
    }
    let tool_scopes: Vec<String> = app.catalog.load().tools().flat_map(|t| t.scopes().to_vec()).collect();
    let auth = args.auth.build(&tool_scopes).await.map_err(|e| RuntimeError::Config(e.to_string()))?;
    tracing::info!(auth = ?args.auth.auth, metadata = ?auth.resource_metadata, "authentication");
    let mut core = Core::new(config, app.catalog, storage.backend.clone());
    if let Some(artifacts) = args.artifacts.open(!storage.durable)? {
        core = core.with_artifacts(artifacts);
    }
    crate::announce_catalog_changes(&core);
    let server = Server::new(core.clone(), state);

    let grace = Duration::from_millis(args.grace_ms);
    let stop_worker = CancellationToken::new();
    // This process in the registry: an API pod, or (embedded) the worker too.
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "presa".into());
    let node_id = format!("{host}-{}-{}", if storage.durable { "api" } else { "embedded" }, std::process::id());
    let node = if storage.durable {
        presa_server::Node::new(node_id, "api", 0)
    } else {
        presa_server::Node::new(node_id, "embedded", args.concurrency)
    };
    tokio::spawn(node.clone().heartbeat(core.clone(), stop_worker.clone()));
    let retry = args.retry.policy()?;
    let worker = (!storage.durable).then(|| {
        let config = WorkerConfig {
            id: node.id().to_string(),
            concurrency: args.concurrency,
            max_parked: args.max_parked,
            max_running_per_scope: args.shares.max_running_per_scope,
            max_parked_per_scope: args.shares.max_parked_per_scope,
            retry,
            grace,
            ..WorkerConfig::default()
        };
        tokio::spawn(Worker::new(core, config).with_node(node).run(stop_worker.clone()))
    });

    let http = HttpConfig {
        allowed_origins: args.allowed_origins.clone(),
        allowed_hosts: allowed_hosts(&args.allowed_hosts, args.listen),
        max_token_bytes: args.max_token_bytes,
        max_body_bytes: args.max_body_bytes,
        ready: Some(storage.ready.clone()),
        ready_detail: Some(storage.ready_detail.clone()),
        live: Some(storage.live.clone()),
        metrics: Some(telemetry.metrics.clone()),
        // With Redis, presa-worker pods report the shared work queue.
        queue_metrics: !storage.durable,
        authenticator: auth.authenticator,
        challenge: auth.challenge,
        resource_metadata: auth.resource_metadata,
        legacy: LegacyConfig {
            enabled: args.legacy == Switch::On,
            session_ttl: Duration::from_secs(args.legacy_session_ttl_secs.max(1)),
            max_subscription_uri_bytes: args.max_subscription_uri_bytes,
            max_subscriptions_per_session: args.max_subscriptions_per_session,
            max_session_bytes: args.max_legacy_session_bytes,
            max_sessions_per_scope: args.max_legacy_sessions_per_scope,
            max_sessions: args.max_legacy_sessions,
            ..LegacyConfig::default()
        },
        admin: presa_http::admin::AdminConfig {
            enabled: args.admin == Switch::On,
            admin_scope: args.admin_scope.clone(),
            tenant_admin_scope: args.tenant_admin_scope.clone(),
            max_streams: args.admin_max_streams,
            max_streams_per_tenant: args.admin_max_streams_per_tenant,
            usage_cache: Duration::from_millis(args.admin_usage_cache_ms),
            own_listener: args.admin_listen.is_some(),
        },
        ..HttpConfig::default()
    };
    let admin_http = (args.admin == Switch::On)
        .then(|| {
            args.admin_listen
                .map(|at| (at, HttpConfig { allowed_hosts: allowed_hosts(&args.allowed_hosts, at), ..http.clone() }))
        })
        .flatten();
    let router = presa_http::router(server.clone(), http);
    let listener = tokio::net::TcpListener::bind(args.listen).await.map_err(|e| RuntimeError::Bind(args.listen, e))?;
    let address = listener.local_addr().map_err(|e| RuntimeError::Bind(args.listen, e))?;
    tracing::info!(%address, "{}-api serving MCP at /mcp", app.name);

    let shutdown = server.shutdown_token();
    let on_signal = shutdown.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        tracing::info!("shutting down: closing listen streams, finishing in-flight requests");
        on_signal.cancel();
    });
    let limits = ServeLimits {
        header_read_timeout: Duration::from_millis(args.header_read_timeout_ms),
        body_read_timeout: Duration::from_millis(args.body_read_timeout_ms),
        idle_timeout: Duration::from_millis(args.idle_timeout_ms),
        max_connections: args.max_connections,
        probe_connections: args.probe_connections,
    };
    if let Some((at, admin_http)) = admin_http {
        let admin = tokio::net::TcpListener::bind(at).await.map_err(|e| RuntimeError::Bind(at, e))?;
        let address = admin.local_addr().map_err(|e| RuntimeError::Bind(at, e))?;
        tracing::info!(%address, "serving the admin API at /admin/v1");
        let router = presa_http::admin_router(server.clone(), admin_http);
        tokio::spawn(presa_http::serve_with(admin, router, limits, shutdown.clone().cancelled_owned()));
    }
    let serve = presa_http::serve_with(listener, router, limits, shutdown.clone().cancelled_owned());
    let grace_elapsed = async {
        shutdown.cancelled().await;
        tokio::time::sleep(grace).await;
    };
    tokio::select! {
        r = serve => r.map_err(RuntimeError::Serve)?,
        _ = grace_elapsed => tracing::warn!("grace period elapsed with requests still in flight"),
    }
    stop_worker.cancel();
    if let Some(worker) = worker {
        let _ = tokio::time::timeout(grace + Duration::from_secs(1), worker).await;
        // Embedded: the tasks die with the process, and so do their artifacts.
        args.artifacts.remove_embedded_dir();
    }
    tracing::info!("stopped");
    Ok(())
}
