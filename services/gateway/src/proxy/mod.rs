//! [`ProxyTool`]: the presa tool handler that runs one upstream tool. The same
//! code runs a plain call (inside the request) and a task (on a worker):
//!
//! - a connection comes from the upstream's [`Pool`] (the call waits for one);
//! - upstream progress and log lines become the task's status message
//!   (at most one per `status_interval`, the last one always kept) and, in a
//!   plain call, progress notifications on the request's stream;
//! - upstream questions (`elicitation/create`, `sampling/createMessage`,
//!   `roots/list`, or a 2026-07-28 upstream's `InputRequiredResult`) become
//!   presa input requests under keys from their position in the call and a
//!   digest of their content ([`question_key`]), so a re-run asks the same
//!   questions under the same keys and gets the recorded answers;
//! - a 2026-07-28 upstream that answers with its own task is followed with
//!   `tasks/get`, its questions answered with `tasks/update`;
//! - `tasks/cancel` sends `notifications/cancelled` (or `tasks/cancel`) and
//!   closes the connection after a grace period if the upstream keeps going;
//! - a task claimed again after its worker was lost calls the upstream again
//!   only for a tool that is safe to repeat ([`Rerun`]).
//!
//! By part: `call` runs one call on a connection (its rounds and the events
//! of each), `questions` keys and asks the upstream's questions,
//! `upstream_task` follows an upstream task, `status` turns progress and
//! log lines into status messages, `answer` shapes results and errors.

use std::sync::Arc;

use presa_server::{ToolContext, ToolError, ToolHandler, ToolOutput};
use serde_json::Value;
use tokio::time::Instant;

use crate::{
    config::{Rerun, Timings},
    pool::Pool,
};

mod answer;
mod call;
mod questions;
mod status;
mod upstream_task;

use answer::lost_worker_error;
pub use answer::{MAX_ERROR_MESSAGE_BYTES, cap_message, upstream_error};
use call::Call;
pub use questions::question_key;

/// The `_meta` key of the caller's identity (`--upstream-forward-identity`).
pub const CALLER_META: &str = "dev.presa/caller";

/// The checkpoint key of the upstream task a call became.
const UPSTREAM_TASK: &str = "upstreamTask";

/// Most MRTR rounds one call may take with a 2026-07-28 upstream.
const MAX_ROUNDS: usize = 32;

/// One upstream tool served by presa.
#[derive(Debug)]
pub struct ProxyTool {
    /// Where the tool lives.
    pub pool: Arc<Pool>,
    /// Its name upstream (without presa's prefix).
    pub upstream_name: String,
    /// Whether a re-run after a lost worker calls the upstream again.
    pub rerun_allowed: bool,
    /// Timings.
    pub timings: Timings,
    /// Whether calls carry the caller's tenant and subject in `_meta`.
    pub forward_identity: bool,
}

impl ProxyTool {
    /// Whether a tool with these annotations may be called again under `rerun`.
    pub fn may_rerun(rerun: Rerun, annotations: &Value) -> bool {
        let hint = |k: &str| annotations.get(k).and_then(Value::as_bool) == Some(true);
        match rerun {
            Rerun::Always => true,
            Rerun::Never => false,
            Rerun::Auto => hint("readOnlyHint") || hint("idempotentHint"),
        }
    }
}

#[async_trait::async_trait]
impl ToolHandler for ProxyTool {
    async fn call(&self, ctx: ToolContext, arguments: Value) -> Result<ToolOutput, ToolError> {
        // A run that already handed the call to an upstream task resumes
        // following that task, whatever the tool: nothing is called again.
        let resume = ctx.checkpoint().and_then(|c| c[UPSTREAM_TASK].as_str()).map(str::to_string);
        if resume.is_none() && ctx.attempt().is_some_and(|a| a > 1) && !self.rerun_allowed {
            metrics::counter!("presa_gateway_reruns_refused_total", "upstream" => self.pool.name().to_string())
                .increment(1);
            return Err(lost_worker_error(&self.upstream_name));
        }
        let cancel = ctx.cancellation();
        let lease = tokio::select! {
            lease = self.pool.get() => lease.map_err(|e| upstream_error(&self.pool, e))?,
            _ = cancel.cancelled() => return Err(ToolError::Cancelled),
        };
        let started = Instant::now();
        let upstream = self.pool.name().to_string();
        let mut call = Call { tool: self, ctx: &ctx, asked: 0, told_roots: false };
        let out = match resume {
            Some(task_id) => {
                tracing::info!(upstream = %upstream, upstream_task = %task_id, "resuming the upstream's task");
                call.follow_task(lease, task_id).await
            }
            None => call.run(lease, arguments).await,
        };
        let outcome = match &out {
            Ok(ToolOutput::Complete(v)) if v["isError"] == true => "tool_error",
            Ok(_) => "ok",
            Err(ToolError::Cancelled) => "cancelled",
            Err(ToolError::NeedInput(_)) => "input_required",
            Err(_) => "error",
        };
        metrics::counter!("presa_gateway_upstream_calls_total", "upstream" => upstream.clone(), "outcome" => outcome)
            .increment(1);
        metrics::histogram!("presa_gateway_upstream_call_seconds", "upstream" => upstream)
            .record(started.elapsed().as_secs_f64());
        out
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn only_tools_safe_to_repeat_run_again() {
        let idem = json!({ "idempotentHint": true });
        let ro = json!({ "readOnlyHint": true });
        let unsafe_ = json!({ "idempotentHint": false, "destructiveHint": true });
        assert!(ProxyTool::may_rerun(Rerun::Auto, &idem));
        assert!(ProxyTool::may_rerun(Rerun::Auto, &ro));
        assert!(!ProxyTool::may_rerun(Rerun::Auto, &unsafe_));
        assert!(!ProxyTool::may_rerun(Rerun::Auto, &Value::Null));
        assert!(ProxyTool::may_rerun(Rerun::Always, &unsafe_));
        assert!(!ProxyTool::may_rerun(Rerun::Never, &idem));
    }
}
