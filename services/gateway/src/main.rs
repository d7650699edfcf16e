//! `presa-gateway`: presa in front of an existing MCP server. Every flag of
//! `presa-api` (or, after `worker`, of `presa-worker`) plus the upstream's
//! (`--upstream-command`, `--upstream-url`, `--gateway-config`, …).

use std::{ffi::OsString, process::ExitCode};

use clap::Parser;
use presa_gateway::{Gateway, config::GatewayArgs};
use presa_runtime::{ApiArgs, App, Defaults, Process, WorkerArgs, parse_args_with};

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
    let (process, args) = Process::from_args(std::env::args_os().collect());
    let defaults = defaults(&args);
    let (own, run): (GatewayArgs, Run) = match process {
        Process::Worker => {
            let cli: WorkerCli = parse_args_with(&args, &defaults);
            (cli.gateway, Run::Worker(Box::new(cli.worker)))
        }
        Process::Api => {
            let cli: ApiCli = parse_args_with(&args, &defaults);
            (cli.gateway, Run::Api(Box::new(cli.api)))
        }
    };
    let Some(gateway) = start(&own).await else { return ExitCode::from(2) };
    let own_watch = own.clone();
    let gateway = gateway.reloadable(own);
    let _watching = presa_gateway::reload::watch(&own_watch, gateway.reloader());
    #[cfg(unix)]
    if let Err(e) = presa_gateway::reload::on_sighup(gateway.reloader()) {
        tracing::warn!(error = %e, "cannot listen for SIGHUP; the config will not be reloaded on it");
    }
    let upstreams = gateway.upstreams();
    let endpoints = match gateway.endpoints() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let app = app(gateway).endpoints(endpoints);
    let code = match run {
        Run::Worker(args) => app.worker_from(*args).await,
        Run::Api(args) => app.api_from(*args).await,
    };
    upstreams.drain().await;
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
        .ready_when(gateway.ready_check())
        .report_upstreams(gateway.upstreams());
    gateway.follow();
    app
}

/// The gateway's defaults for the runtime's flags: a process takes no more
/// tasks than its upstream connections can run, so `--concurrency` defaults
/// to their number (when the upstreams are configured right; if not,
/// starting says why). A flag or `PRESA_CONCURRENCY` still overrides it, and
/// `--print-config` shows it.
fn defaults(args: &[OsString]) -> Defaults {
    let capacity = Own::try_parse_from(args)
        .ok()
        .and_then(|own| own.gateway.resolve().ok())
        .map(|config| config.upstreams.iter().map(|u| u.pool).sum::<usize>());
    match capacity {
        Some(n) => Defaults::default().concurrency(n),
        None => Defaults::default(),
    }
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
