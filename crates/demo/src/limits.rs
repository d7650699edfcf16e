//! `exclusive_job`: a tool limited to 2 runs at once across the cluster
//! (`Tool::concurrency`), which keeps its own record of when it ran, so a
//! test can check the limit by the tool's account rather than presa's.
//!
//! With `PRESA_DEMO_RUNS_DIR` set, each run appends `start <label> <pid>
//! <unix ms>` when it starts and `end <label> <pid> <unix ms>` when it ends
//! to `exclusive_job.log` in that directory (appends of one short line are
//! atomic, whichever process writes them).

use std::{io::Write, time::Duration};

use presa_server::{CatalogBuilder, TaskPolicy, Tool, ToolConcurrency, ToolContext, ToolError};
use schemars::JsonSchema;
use serde::Deserialize;

/// The variable naming the directory `exclusive_job` records its runs in.
pub const RUNS_DIR_VAR: &str = "PRESA_DEMO_RUNS_DIR";

/// How many `exclusive_job` runs may go on at once across the cluster.
pub const EXCLUSIVE_LIMIT: u32 = 2;

/// Register `exclusive_job`.
pub fn register(b: CatalogBuilder) -> CatalogBuilder {
    b.tool(
        Tool::typed(
            "exclusive_job",
            "Runs `seconds`, at most 2 at once across the cluster: a task \
             past it waits in line in the order created, a plain call waits a moment, then gets 429.",
            exclusive_job,
        )
        .policy(TaskPolicy::Optional)
        .concurrency(ToolConcurrency::limit(EXCLUSIVE_LIMIT)),
    )
}

/// The arguments of `exclusive_job`.
#[derive(Debug, Deserialize, JsonSchema)]
struct Exclusive {
    /// How long it runs.
    #[serde(default)]
    #[schemars(range(min = 0, max = 600))]
    seconds: f64,
    /// A name for the run in its record.
    #[serde(default)]
    #[schemars(length(max = 64))]
    label: String,
}

async fn exclusive_job(ctx: ToolContext, args: Exclusive) -> Result<String, ToolError> {
    let label = if args.label.is_empty() { "-".to_string() } else { args.label.replace(char::is_whitespace, "_") };
    record("start", &label);
    let started = unix_ms();
    if args.seconds > 0.0 {
        ctx.sleep(Duration::from_secs_f64(args.seconds)).await?;
    }
    record("end", &label);
    Ok(format!("Ran {label} from {started} to {}", unix_ms()))
}

/// Append one line of the run's record, when a directory is named.
fn record(what: &str, label: &str) {
    let Some(dir) = std::env::var_os(RUNS_DIR_VAR) else { return };
    let line = format!("{what} {label} {} {}\n", std::process::id(), unix_ms());
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(std::path::Path::new(&dir).join("exclusive_job.log"));
    if let Err(e) = file.and_then(|mut f| f.write_all(line.as_bytes())) {
        tracing::warn!(error = %e, "exclusive_job could not record its run");
    }
}

fn unix_ms() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_millis()
}
