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
    // The gateway's own flags first: the upstreams decide the catalog and
    // the default concurrency of the process's own flags, parsed after.
    let own = if worker { parse_args::<WorkerCli>(&args).gateway } else { parse_args::<ApiCli>(&args).gateway };
    let Some(gateway) = start(&own).await else { return ExitCode::from(2) };
    // A process takes no more tasks than its upstream connections can run, unless told otherwise.
    let args = with_default_concurrency(args, gateway.capacity());
    let pools = gateway.pools().to_vec();
    let app = app(gateway);
    let code = if worker {
        app.worker_from(parse_args::<WorkerCli>(&args).worker).await
    } else {
        app.api_from(parse_args::<ApiCli>(&args).api).await
    };
    Gateway::drain(&pools).await;
    code
}

/// The app serving the gateway's catalog, which follows the upstreams' lists from now on.
fn app(gateway: Gateway) -> App {
    let app = App::with_cell("presa-gateway", env!("CARGO_PKG_VERSION"), gateway.catalog.clone())
        .ready_when(gateway.ready_check());
    gateway.follow();
    app
}

/// `args` with `--concurrency <capacity>` added when neither the flag nor
/// `PRESA_CONCURRENCY` sets it.
fn with_default_concurrency(mut args: Vec<OsString>, capacity: usize) -> Vec<OsString> {
    let given = std::env::var_os("PRESA_CONCURRENCY").is_some()
        || args.iter().any(|a| a.to_str().is_some_and(|a| a == "--concurrency" || a.starts_with("--concurrency=")));
    if !given {
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
