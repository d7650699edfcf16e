//! `presa-gateway`: presa in front of an existing MCP server. Every flag of
//! `presa-api` (or, after `worker`, of `presa-worker`) plus the upstream's
//! (`--upstream-command`, `--upstream-url`, `--gateway-config`, …).

use std::{ffi::OsString, process::ExitCode};

use clap::Parser;
use presa_gateway::{Gateway, config::GatewayArgs};
use presa_runtime::{ApiArgs, App, WorkerArgs, parse_args};

/// The API process (embedded without `--redis-url`).
#[derive(Debug, Parser)]
#[command(name = "presa-gateway", version, about = "Durable MCP tasks for the tools of an existing MCP server.")]
struct ApiCli {
    #[command(flatten)]
    gateway: GatewayArgs,
    #[command(flatten)]
    api: ApiArgs,
}

/// `presa-gateway worker …`: a worker pod.
#[derive(Debug, Parser)]
#[command(name = "presa-gateway worker", version, about = "Runs the upstream calls of tasks queued in Redis.")]
struct WorkerCli {
    #[command(flatten)]
    gateway: GatewayArgs,
    #[command(flatten)]
    worker: WorkerArgs,
}

// jemalloc as the allocator: the binary's choice (see presa_runtime::use_jemalloc).
presa_runtime::use_jemalloc!();

#[tokio::main]
async fn main() -> ExitCode {
    // HTTPS upstreams (feature `tls`): rustls with ring, the provider the rest of presa uses.
    #[cfg(feature = "tls")]
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut args: Vec<OsString> = std::env::args_os().collect();
    let worker = args.get(1).is_some_and(|a| a == "worker");
    if worker {
        args.remove(1);
    }
    // A process takes no more tasks than its upstream connections can run,
    // unless told otherwise: the default goes in before the flags are parsed,
    // so `--print-config` shows it too.
    let args = with_default_concurrency(args);
    let (own, run): (GatewayArgs, Run) = if worker {
        let cli: WorkerCli = parse_args(&args);
        (cli.gateway, Run::Worker(Box::new(cli.worker)))
    } else {
        let cli: ApiCli = parse_args(&args);
        (cli.gateway, Run::Api(Box::new(cli.api)))
    };
    let Some(gateway) = start(&own).await else { return ExitCode::from(2) };
    let pools = gateway.pools().to_vec();
    let app = app(gateway);
    let code = match run {
        Run::Worker(args) => app.worker_from(*args).await,
        Run::Api(args) => app.api_from(*args).await,
    };
    Gateway::drain(&pools).await;
    code
}

/// Which process this is, with its flags (parsed once, at start).
#[derive(Debug)]
enum Run {
    Api(Box<ApiArgs>),
    Worker(Box<WorkerArgs>),
}

/// Only the gateway's own flags, read leniently (the rest are parsed after).
#[derive(Debug, Parser)]
#[command(ignore_errors = true, disable_help_flag = true, disable_version_flag = true)]
struct Own {
    #[command(flatten)]
    gateway: GatewayArgs,
}

/// The app serving the gateway's catalog, which follows the upstreams' lists from now on.
fn app(gateway: Gateway) -> App {
    let app = App::with_cell("presa-gateway", env!("CARGO_PKG_VERSION"), gateway.catalog.clone())
        .ready_when(gateway.ready_check());
    gateway.follow();
    app
}

/// `args` with `--concurrency <upstream connections>` added when neither the
/// flag nor `PRESA_CONCURRENCY` sets it (and the upstreams are configured right;
/// if not, starting says why).
fn with_default_concurrency(mut args: Vec<OsString>) -> Vec<OsString> {
    let given = std::env::var_os("PRESA_CONCURRENCY").is_some()
        || args.iter().any(|a| a.to_str().is_some_and(|a| a == "--concurrency" || a.starts_with("--concurrency=")));
    let capacity = Own::try_parse_from(&args)
        .ok()
        .and_then(|own| own.gateway.resolve().ok())
        .map(|config| config.upstreams.iter().map(|u| u.pool).sum::<usize>());
    if let (false, Some(capacity)) = (given, capacity) {
        args.push(format!("--concurrency={capacity}").into());
    }
    args
}

/// Reach every upstream; on failure say why and give up.
async fn start(args: &GatewayArgs) -> Option<Gateway> {
    let config = match args.resolve() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return None;
        }
    };
    match Gateway::start(&config).await {
        Ok(g) => Some(g),
        Err(e) => {
            eprintln!("error: {e}");
            None
        }
    }
}
