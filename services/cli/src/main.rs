//! `presa`: a command-line client for MCP servers with the Tasks extension.
//!
//! Modules: [`commands`] runs each subcommand; [`follow`] follows tasks to
//! the end (live display, input answering, Ctrl-C); [`input`] answers input
//! requests (from `--answer`, or by prompting); [`output`] renders results;
//! [`live`] draws the status lines; [`admin`] is `presa admin …`, presa's
//! admin API.

use std::{path::PathBuf, process::ExitCode};

use clap::{Args, Parser, Subcommand};

mod admin;
mod commands;
mod follow;
mod input;
mod live;
mod output;

/// Exit codes (documented in `presa --help`).
pub(crate) mod exit {
    pub(crate) const OK: u8 = 0;
    pub(crate) const TOOL_ERROR: u8 = 1;
    pub(crate) const USAGE: u8 = 2;
    pub(crate) const FAILED: u8 = 3;
    pub(crate) const CANCELLED: u8 = 4;
    pub(crate) const INPUT_REQUIRED: u8 = 5;
    pub(crate) const CONNECTION: u8 = 6;
    /// The server lost a task this call made (unknown before its TTL ran out).
    pub(crate) const LOST: u8 = 7;
    /// `presa admin`: the target cannot take the action (a task that has ended).
    pub(crate) const CONFLICT: u8 = 8;
    /// Ctrl-C, the task left running.
    pub(crate) const INTERRUPTED: u8 = 130;
}

const AFTER_HELP: &str = "\
Exit codes: 0 completed, 1 the tool reported an error (isError), 2 usage (bad arguments, unknown task),
3 the task failed, 4 the task was cancelled, 5 input required (with --no-input, or without a terminal),
6 connection or authorization error, 7 the server lost the task this call made (unknown before its TTL),
8 (presa admin) the target cannot take the action (a task that has ended), 130 interrupted with the task
left running. presa admin: 2 also for an unknown task, letter or worker (404) and a refused filter (400).";

/// A command-line client for MCP servers (revision 2026-07-28) with the Tasks extension.
#[derive(Debug, Parser)]
#[command(name = "presa", version, after_help = AFTER_HELP)]
pub(crate) struct Cli {
    /// The MCP endpoint.
    #[arg(long, env = "PRESA_URL", default_value = "http://127.0.0.1:8080/mcp", global = true)]
    pub(crate) url: String,
    /// A bearer token sent with every request.
    #[arg(long, env = "PRESA_TOKEN", hide_env_values = true, global = true)]
    pub(crate) token: Option<String>,
    /// Print JSON for scripts: the final result (one JSON per line for `watch`).
    #[arg(long, env = "PRESA_JSON", global = true)]
    pub(crate) json: bool,
    /// Also tell how tasks are followed (subscribed, stream dropped, polling) on stderr.
    #[arg(long, short, env = "PRESA_VERBOSE", global = true)]
    pub(crate) verbose: bool,
    /// Never use subscriptions/listen; poll tasks/get at pollIntervalMs.
    #[arg(long, env = "PRESA_POLL", global = true)]
    pub(crate) poll: bool,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Show what the server is and supports (server/discover).
    Discover,
    /// List the tools with their descriptions and arguments.
    Tools,
    /// Call a tool; follow the task it may become, answering its questions.
    Call(CallArgs),
    /// Show a task.
    Get {
        /// The task id.
        id: String,
        #[command(flatten)]
        files: FileArgs,
    },
    /// Follow tasks until each ends, a line each.
    Watch(WatchArgs),
    /// Answer a task's input requests: KEY=JSON, e.g. approve-1.0='{"action":"accept","content":{"approve":true}}'.
    Answer {
        /// The task id.
        id: String,
        /// KEY=JSON answers (an ElicitResult for an elicitation).
        #[arg(required = true, value_name = "KEY=JSON")]
        answers: Vec<String>,
    },
    /// Cancel a task.
    Cancel {
        /// The task id.
        id: String,
    },
    /// See and steer a presa cluster through its admin API (needs a token with the presa:admin or
    /// presa:tenant-admin scope).
    Admin(admin::AdminArgs),
}

#[derive(Debug, Args)]
pub(crate) struct InputArgs {
    /// Answer an input request without asking: KEY=JSON (repeatable).
    #[arg(long = "answer", env = "PRESA_ANSWER", value_name = "KEY=JSON")]
    pub(crate) answers: Vec<String>,
    /// Never prompt: an unanswered input request exits with code 5, printing the task id and the question.
    #[arg(long, env = "PRESA_NO_INPUT")]
    pub(crate) no_input: bool,
}

#[derive(Debug, Args)]
pub(crate) struct FileArgs {
    /// Where images, audio and artifacts (big results, downloaded streaming) of results are saved.
    #[arg(long, env = "PRESA_OUTPUT_DIR", default_value = ".")]
    pub(crate) output_dir: PathBuf,
}

#[derive(Debug, Args)]
pub(crate) struct CallArgs {
    /// The tool name.
    pub(crate) tool: String,
    /// Arguments as key=value, typed from the tool's inputSchema (numbers, booleans; arrays and objects as JSON).
    #[arg(value_name = "KEY=VALUE")]
    pub(crate) assignments: Vec<String>,
    /// All arguments as a JSON object, or @file to read it from a file (key=value pairs are applied on top).
    #[arg(long, env = "PRESA_ARGS", value_name = "JSON|@FILE")]
    pub(crate) args: Option<String>,
    /// Print the task id and exit instead of following the task.
    #[arg(long, env = "PRESA_DETACH")]
    pub(crate) detach: bool,
    #[command(flatten)]
    pub(crate) input: InputArgs,
    #[command(flatten)]
    pub(crate) files: FileArgs,
}

#[derive(Debug, Args)]
pub(crate) struct WatchArgs {
    /// The task ids.
    #[arg(required = true)]
    pub(crate) ids: Vec<String>,
    #[command(flatten)]
    pub(crate) input: InputArgs,
    #[command(flatten)]
    pub(crate) files: FileArgs,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("presa: cannot start: {e}");
            return ExitCode::from(exit::CONNECTION);
        }
    };
    let code = runtime.block_on(commands::run(cli));
    // Blocking prompt threads must not keep the process alive.
    runtime.shutdown_background();
    match code {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            let code = error_code(&e);
            eprintln!("presa: {e:#}");
            ExitCode::from(code)
        }
    }
}

/// The exit code of a failure.
fn error_code(e: &anyhow::Error) -> u8 {
    if let Some(UsageError(_)) = e.downcast_ref() {
        return exit::USAGE;
    }
    match e.downcast_ref::<presa_client::Error>() {
        Some(presa_client::Error::UnknownTask { .. }) => exit::USAGE,
        Some(presa_client::Error::Admin { status: 400 | 404, .. }) => exit::USAGE,
        Some(presa_client::Error::Admin { status: 409, .. }) => exit::CONFLICT,
        Some(presa_client::Error::Rpc { code: -32602 | -32601, .. }) => exit::USAGE,
        _ => exit::CONNECTION,
    }
}

/// A mistake in the command line (exit code 2).
#[derive(Debug)]
pub(crate) struct UsageError(pub(crate) String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Fail with a usage error.
pub(crate) fn usage(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(UsageError(msg.into()))
}
