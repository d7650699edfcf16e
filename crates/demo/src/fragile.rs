//! `fragile_job`: a tool whose "upstream" fails on demand, behind a circuit
//! breaker (`Tool::breaker`), for the breaker's tests and demos.
//!
//! Its upstream is a directory the operator names in `PRESA_DEMO_FRAGILE_DIR`
//! (unset: the tool answers an error saying so). Each call appends one line,
//! the call's time in Unix ms, to `calls.log` there, so a test sees every
//! call the upstream received from any process; while a file `down` exists
//! there, the call fails in a way worth trying again, as a dead upstream's
//! would. Three such failures within 10 s open the breaker for 2 s: tasks
//! then wait, plain calls get 503, and one probe call every 2 s finds out
//! whether `down` is gone.

use std::{io::Write, path::PathBuf, time::Duration};

use presa_server::{
    CatalogBuilder, NoArgs, RetryPolicy, TaskPolicy, Tool, ToolBreaker, ToolContext, ToolError, ToolOutput,
};

/// The environment variable naming `fragile_job`'s upstream directory.
pub const FRAGILE_DIR_ENV: &str = "PRESA_DEMO_FRAGILE_DIR";

/// `fragile_job`'s breaker: open after 3 failures within 10 s, for 2 s; a probe holds 10 s.
pub fn fragile_breaker() -> ToolBreaker {
    ToolBreaker::after(3)
        .within(Duration::from_secs(10))
        .cool_down(Duration::from_secs(2))
        .probe_lease(Duration::from_secs(10))
}

/// `fragile_job`'s retries: 10 tries, 200 ms to 1 s apart.
pub const FRAGILE_RETRY: RetryPolicy =
    RetryPolicy::attempts(10).backoff(Duration::from_millis(200), Duration::from_secs(1));

/// Register `fragile_job`.
pub fn register(b: CatalogBuilder) -> CatalogBuilder {
    b.tool(
        Tool::typed(
            "fragile_job",
            "Calls its upstream (the directory PRESA_DEMO_FRAGILE_DIR names: each call is a line of its \
             calls.log; while a file `down` is there, the call fails transiently), behind a circuit \
             breaker: 3 failures within 10 s open it for 2 s, then one probe call decides.",
            fragile_job,
        )
        .policy(TaskPolicy::Optional)
        .retry(FRAGILE_RETRY)
        .breaker(fragile_breaker()),
    )
}

async fn fragile_job(_ctx: ToolContext, _: NoArgs) -> Result<ToolOutput, ToolError> {
    let Some(dir) = std::env::var_os(FRAGILE_DIR_ENV).map(PathBuf::from) else {
        return Ok(ToolOutput::error(format!("fragile_job has no upstream: set {FRAGILE_DIR_ENV} to a directory")));
    };
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_millis();
    let logged = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("calls.log"))
        .and_then(|mut f| f.write_all(format!("{now}\n").as_bytes()));
    if let Err(e) = logged {
        return Err(ToolError::transient(format!("the upstream is unreachable: {e}")));
    }
    if dir.join("down").exists() {
        return Err(ToolError::transient("the upstream is down"));
    }
    Ok(ToolOutput::text(format!("The upstream answered at {now}")))
}
