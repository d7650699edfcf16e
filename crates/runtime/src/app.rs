//! [`App`]: a deployable presa server (a catalog, a name, a version) and its
//! entry points. A server's `main` is a few lines:
//!
//! ```no_run
//! use presa_runtime::App;
//! use presa_server::Catalog;
//!
//! #[tokio::main]
//! async fn main() -> std::process::ExitCode {
//!     let catalog = Catalog::builder().build(); // .tool(Tool::typed(...)) ...
//!     App::new("my-server", env!("CARGO_PKG_VERSION"), catalog).run().await
//! }
//! ```
//!
//! `run` is the API process (embedded without `--redis-url`, an API pod with
//! it) unless the first argument is `worker`: then it is a worker process.
//! Both get every flag and environment variable of the shipped `presa-api` and
//! `presa-worker`, `--print-config`, `/healthz`, `/readyz`, `/metrics`, OTLP
//! traces, graceful shutdown and Redis Cluster mode.

use std::{ffi::OsString, process::ExitCode, sync::Arc};

use presa_server::{Catalog, CatalogCell, catalog::CatalogError};

use crate::{
    api::ApiArgs,
    checked::{Checked, ExtraReady},
    config,
    error::RuntimeError,
    storage::StorageError,
    worker::WorkerArgs,
};

/// A deployable server: its catalog and identity (`serverInfo`).
#[derive(Debug)]
pub struct App {
    pub(crate) name: String,
    pub(crate) version: String,
    pub(crate) instructions: Option<String>,
    pub(crate) catalog: Result<CatalogCell, CatalogError>,
    pub(crate) ready: Option<ExtraReady>,
    pub(crate) upstreams: Option<Arc<dyn presa_server::UpstreamSource>>,
    pub(crate) endpoints: presa_server::Endpoints,
}

impl App {
    /// A server called `name` (its `serverInfo.name`, the prefix of its
    /// telemetry service names) at `version`, serving `catalog`.
    pub fn new(name: impl Into<String>, version: impl Into<String>, catalog: Result<Catalog, CatalogError>) -> Self {
        App {
            name: name.into(),
            version: version.into(),
            instructions: None,
            catalog: catalog.map(Into::into),
            ready: None,
            upstreams: None,
            endpoints: presa_server::Endpoints::default(),
        }
    }

    /// A server whose catalog may be replaced while it runs (presa-gateway
    /// follows its upstream's): every replacement is served from the next
    /// request on, and announced as `notifications/{tools,prompts,resources}/list_changed`
    /// to every `subscriptions/listen` stream of the cluster.
    pub fn with_cell(name: impl Into<String>, version: impl Into<String>, catalog: CatalogCell) -> Self {
        App {
            name: name.into(),
            version: version.into(),
            instructions: None,
            catalog: Ok(catalog),
            ready: None,
            upstreams: None,
            endpoints: presa_server::Endpoints::default(),
        }
    }

    /// Also report ready (`/readyz`, both processes) only while `check`
    /// answers `true`: a dependency of the tools themselves, such as
    /// presa-gateway's upstream servers.
    pub fn ready_when(mut self, check: presa_http::ReadyCheck) -> Self {
        self.ready = Some(ExtraReady(check));
        self
    }

    /// Report `source`'s upstream servers in this process's heartbeats (the
    /// admin API's `/admin/v1/upstreams`), and restart their connections
    /// when an operator asks (presa-gateway's pools).
    pub fn report_upstreams(mut self, source: Arc<dyn presa_server::UpstreamSource>) -> Self {
        self.upstreams = Some(source);
        self
    }

    /// Also serve these virtual servers at `/mcp/<name>` (and, as they say,
    /// the whole catalog at `/mcp` or not): presa-gateway's `[[server]]` tables.
    pub fn endpoints(mut self, endpoints: presa_server::Endpoints) -> Self {
        self.endpoints = endpoints;
        self
    }

    /// `server/discover` instructions for clients.
    pub fn instructions(mut self, text: impl Into<String>) -> Self {
        self.instructions = Some(text.into());
        self
    }

    /// The API process, or with a first argument `worker`, the worker process.
    pub async fn run(self) -> ExitCode {
        match Process::from_args(std::env::args_os().collect()) {
            (Process::Worker, args) => self.worker_with(args).await,
            (Process::Api, args) => self.api_with(args).await,
        }
    }

    /// The API process (`presa-api`): embedded without `--redis-url`, an API pod with it.
    pub async fn api(self) -> ExitCode {
        self.api_with(std::env::args_os().collect()).await
    }

    /// The worker process (`presa-worker`): runs tasks queued in Redis.
    pub async fn worker(self) -> ExitCode {
        self.worker_with(std::env::args_os().collect()).await
    }

    async fn api_with(self, args: Vec<OsString>) -> ExitCode {
        self.api_from(parse(&args)).await
    }

    async fn worker_with(self, args: Vec<OsString>) -> ExitCode {
        self.worker_from(parse(&args)).await
    }

    /// The API process with flags parsed by the caller: a server with flags of
    /// its own flattens [`ApiArgs`] into its parser (see [`parse_args`]).
    pub async fn api_from(self, args: ApiArgs) -> ExitCode {
        crate::alloc::return_freed_memory();
        report(async { crate::api::run(self.checked()?, args).await }.await)
    }

    /// The worker process with flags parsed by the caller (see [`App::api_from`]).
    pub async fn worker_from(self, args: WorkerArgs) -> ExitCode {
        crate::alloc::return_freed_memory();
        report(async { crate::worker::run(self.checked()?, args).await }.await)
    }

    /// The app with its catalog known to be valid.
    fn checked(self) -> Result<Checked, RuntimeError> {
        let catalog = self.catalog?;
        Ok(Checked {
            name: self.name,
            version: self.version,
            instructions: self.instructions,
            catalog,
            ready: self.ready,
            upstreams: self.upstreams,
            endpoints: self.endpoints,
        })
    }
}

/// Which process a command line asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Process {
    /// The API process (`presa-api`; embedded without `--redis-url`).
    Api,
    /// A worker process (`presa-worker`): the first argument is `worker`.
    Worker,
}

impl Process {
    /// The process `args` (the program first) asks for, and its arguments
    /// without the `worker` that chose it.
    pub fn from_args(mut args: Vec<OsString>) -> (Process, Vec<OsString>) {
        if args.get(1).is_some_and(|a| a == "worker") {
            args.remove(1);
            (Process::Worker, args)
        } else {
            (Process::Api, args)
        }
    }
}

/// Defaults a server gives the runtime's own flags in place of the
/// runtime's: they apply before parsing, so a flag or its environment
/// variable still overrides them and `--print-config` shows them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Defaults {
    /// `--concurrency` (`PRESA_CONCURRENCY`): tool handlers a process runs at once.
    pub concurrency: Option<usize>,
}

impl Defaults {
    /// `--concurrency` defaults to `n`.
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = Some(n);
        self
    }

    /// `cmd` with these defaults on the flags it has.
    fn apply(&self, cmd: clap::Command) -> clap::Command {
        match self.concurrency {
            Some(n) if cmd.get_arguments().any(|a| a.get_id() == "concurrency") => {
                cmd.mut_arg("concurrency", |a| a.default_value(n.to_string()))
            }
            _ => cmd,
        }
    }
}

/// Parse `T` from `args` (named after the binary) and the environment,
/// with `--print-config` and errors that name flag and variable; see
/// [`config::load_from`]. A server with flags of its own parses a struct that
/// flattens [`ApiArgs`] or [`WorkerArgs`] beside them, then calls
/// [`App::api_from`] or [`App::worker_from`].
pub fn parse_args<T: clap::Parser>(args: &[OsString]) -> T {
    parse(args)
}

/// [`parse_args`] with the server's own `defaults` for the runtime's flags.
pub fn parse_args_with<T: clap::Parser>(args: &[OsString], defaults: &Defaults) -> T {
    config::load_from::<T>(defaults.apply(named_command::<T>(args)), args)
}

fn parse<T: clap::Parser>(args: &[OsString]) -> T {
    config::load_from::<T>(named_command::<T>(args), args)
}

/// `T`'s command, named after the binary that runs it.
fn named_command<T: clap::Parser>(args: &[OsString]) -> clap::Command {
    let bin = args
        .first()
        .and_then(|a| std::path::Path::new(a).file_name())
        .map_or_else(|| T::command().get_name().to_string(), |n| n.to_string_lossy().into_owned());
    T::command().name(bin)
}

/// The process's exit: 0; 2 with the reason on stderr for settings that do
/// not work together or a secret file that cannot be used; else 1 with the error.
fn report(result: Result<(), RuntimeError>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // Settings that do not work together: a usage error, like an invalid flag.
        Err(
            e @ (RuntimeError::Config(_)
            | RuntimeError::Auth(_)
            | RuntimeError::Artifacts(_)
            | RuntimeError::Refused(_)
            | RuntimeError::StateSecretFile { .. }
            | RuntimeError::SecretFile(_)
            | RuntimeError::Storage(StorageError::SecretFile(_))),
        ) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            tracing::error!(error = %e, "stopped with an error");
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, clap::Parser)]
    struct Demo {
        #[arg(long, env = "PRESA_TEST_DEFAULTS_CONCURRENCY", default_value_t = 64)]
        concurrency: usize,
    }

    fn args(a: &[&str]) -> Vec<OsString> {
        a.iter().map(OsString::from).collect()
    }

    #[test]
    fn a_servers_defaults_apply_unless_a_flag_says_otherwise() {
        let three = Defaults::default().concurrency(3);
        assert_eq!(parse_args_with::<Demo>(&args(&["demo"]), &three).concurrency, 3);
        assert_eq!(parse_args_with::<Demo>(&args(&["demo", "--concurrency=5"]), &three).concurrency, 5);
        assert_eq!(parse_args_with::<Demo>(&args(&["demo"]), &Defaults::default()).concurrency, 64);
    }

    #[test]
    fn worker_as_first_argument_chooses_the_worker_process() {
        assert_eq!(Process::from_args(args(&["s", "worker", "--x"])), (Process::Worker, args(&["s", "--x"])));
        assert_eq!(Process::from_args(args(&["s", "--x", "worker"])), (Process::Api, args(&["s", "--x", "worker"])));
    }
}
