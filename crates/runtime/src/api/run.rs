//! The life of an API process: checks its flags, starts telemetry, storage,
//! the dispatcher, the HTTP server(s) and (embedded) the worker pool, and
//! drains on SIGTERM/SIGINT.

use std::time::Duration;

use presa_server::{Core, Server, StateCodec, Worker};
use tokio_util::sync::CancellationToken;

use super::ApiArgs;
use crate::{
    auth::{check_admin, check_listen, check_state_secret},
    checked::Checked,
    error::RuntimeError,
    process::shutdown_signal,
    storage::Storage,
    storage::Switch,
};

/// Run an API process for `app` with `args` until SIGTERM/SIGINT and its drain.
pub(crate) async fn run(app: Checked, args: ApiArgs) -> Result<(), RuntimeError> {
    let state = checked_state(&args)?;
    let telemetry = crate::process::telemetry(&format!("{}-api", app.name), args.log_format)?;
    let config = args.server_config(app.server_config());
    let storage = Storage::from_args(&args.redis, args.max_tasks, args.max_memory_bytes)
        .await?
        .also_ready(app.ready.clone().map(|r| r.0));
    say_storage(&args, &storage);
    let endpoint_scopes = app.endpoints.iter().flat_map(|e| e.scopes.clone());
    let tool_scopes: Vec<String> =
        app.catalog.load().tools().flat_map(|t| t.scopes().to_vec()).chain(endpoint_scopes).collect();
    let auth = args.auth.build(&tool_scopes).await?;
    tracing::info!(auth = ?args.auth.auth, metadata = ?auth.resource_metadata, "authentication");
    let mut core = Core::new(config, app.catalog, storage.backend.clone());
    if let Some(artifacts) = args.artifacts.open(!storage.durable)? {
        core = core.with_artifacts(artifacts);
    }
    crate::process::announce_catalog_changes(&core);
    let server = Server::new(core.clone(), state).with_endpoints(app.endpoints.clone());

    let grace = args.grace();
    let stop_worker = CancellationToken::new();
    let worker = start_node(&args, &storage, (core, app.upstreams), &stop_worker)?;

    let http = args.http_config(&storage, telemetry.metrics.clone(), auth);
    let admin_http = args.admin_listener(&http);
    let router = presa_http::router(server.clone(), http);
    let (listener, address) = crate::process::bind(args.listen).await?;
    tracing::info!(%address, "{}-api serving MCP at /mcp", app.name);

    let shutdown = server.shutdown_token();
    let on_signal = shutdown.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        tracing::info!("shutting down: closing listen streams, finishing in-flight requests");
        on_signal.cancel();
    });
    let limits = args.serve_limits();
    if let Some((at, admin_http)) = admin_http {
        let (admin, address) = crate::process::bind(at).await?;
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

/// The start-up refusals (listen address, admin API, state key), and the
/// `requestState` codec keyed with the state secret (a random key without one).
fn checked_state(args: &ApiArgs) -> Result<StateCodec, RuntimeError> {
    let secret = args.state_secret()?;
    check_listen(&args.auth, args.listen)?;
    check_admin(&args.auth, args.admin_listen.unwrap_or(args.listen), args.admin == Switch::On)?;
    let Some(secret) = secret.as_deref() else {
        tracing::warn!(
            "PRESA_STATE_SECRET is not set: using a random per-process key; \
             several API pods would not accept each other's requestState"
        );
        return Ok(StateCodec::random());
    };
    check_state_secret(secret).map_err(|source| match &args.state_secret_file {
        Some(path) => RuntimeError::StateSecretFile { source, path: path.clone() },
        None => RuntimeError::Refused(source),
    })?;
    Ok(StateCodec::new(secret.as_bytes()))
}

/// Say at start which storage this process runs on, and what that means.
fn say_storage(args: &ApiArgs, storage: &Storage) {
    if storage.durable {
        tracing::info!("Redis mode: this pod serves requests; worker pods run the tools");
        return;
    }
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

/// This process in the registry (an API pod, or embedded: the worker too),
/// heartbeating until `stop`; embedded, its worker pool, running until `stop`.
fn start_node(
    args: &ApiArgs,
    storage: &Storage,
    (core, upstreams): (Core, Option<std::sync::Arc<dyn presa_server::UpstreamSource>>),
    stop: &CancellationToken,
) -> Result<Option<tokio::task::JoinHandle<()>>, RuntimeError> {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "presa".into());
    let node_id = format!("{host}-{}-{}", if storage.durable { "api" } else { "embedded" }, std::process::id());
    let node = if storage.durable {
        presa_server::Node::new(node_id, "api", 0)
    } else {
        presa_server::Node::new(node_id, "embedded", args.pool.concurrency)
    };
    let node = match upstreams {
        Some(source) => node.with_upstreams(source),
        None => node,
    };
    tokio::spawn(node.clone().heartbeat(core.clone(), stop.clone()));
    let config = args.pool.worker_config(node.id().to_string(), args.grace())?;
    Ok((!storage.durable).then(|| tokio::spawn(Worker::new(core, config).with_node(node).run(stop.clone()))))
}
