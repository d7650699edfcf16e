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
//!   only for a tool that is safe to repeat ([`Rerun`]);
//! - in a task, a transient upstream failure (no connection, HTTP 429/5xx,
//!   a child that exited, a timeout, and what the tool's rule names) asks
//!   presa to try the call again later ([`ToolError::Retry`]), when that is
//!   safe: a failure the upstream may have received the call before is
//!   tried again only for a tool safe to repeat (see `retry`);
//! - a tool shaped by an `[[upstream.tool]]` table gets its pinned and
//!   default arguments (a call giving a pinned one is refused at the door,
//!   [`ToolHandler::check_arguments`]), and a result over its `max_output_bytes`
//!   becomes a tool error ([`CallShape`]);
//! - a failure that says the upstream is down (no connection, HTTP 5xx, a
//!   child that exited, no answer in time) counts against the upstream's
//!   circuit breaker (`[[upstream]] breaker`, run by presa around the
//!   handler), whether or not it is tried again.
//!
//! By part: `call` runs one call on a connection (its rounds and the events
//! of each), `questions` keys and asks the upstream's questions,
//! `upstream_task` follows an upstream task, `status` turns progress and
//! log lines into status messages, `answer` shapes results and errors,
//! `retry` sorts failures into those tried again and those not, `shape`
//! applies a shaped tool's arguments and output cap.

use std::sync::Arc;

use presa_server::{ArgumentsRefused, ToolContext, ToolError, ToolHandler, ToolOutput};
use serde_json::Value;
use tokio::time::Instant;

use crate::{
    config::{Rerun, Timings},
    pool::Pool,
};

mod answer;
mod call;
mod questions;
mod retry;
mod shape;
mod status;
mod upstream_task;

pub use answer::{MAX_ERROR_MESSAGE_BYTES, cap_message, upstream_error};
use answer::{lost_worker_error, not_tried_again_error, service_error};
use call::Call;
pub use questions::question_key;
pub use retry::{MAX_RETRY_AFTER, Received, RetryClass, RetryOn, Transient};
use retry::{classify_connect, classify_result, classify_service};
use rmcp::service::ServiceError;
pub use shape::CallShape;

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
    /// Whether a re-run after a lost worker calls the upstream again, and
    /// a failure the upstream may have received the call before is tried again.
    pub rerun_allowed: bool,
    /// What the tool's rule adds to the failures tried again.
    pub retry_on: RetryOn,
    /// Timings.
    pub timings: Timings,
    /// Whether calls carry the caller's tenant and subject in `_meta`.
    pub forward_identity: bool,
    /// Its pinned and default arguments and its output cap.
    pub shape: CallShape,
    /// Whether its upstream schema puts arguments in `Mcp-Param-*` headers
    /// (its calls then always go through rmcp's client, which sends them).
    pub header_params: bool,
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

    /// A failed request of a call as the error the handler returns: in a
    /// task, [`ToolError::Retry`] when the failure is transient and trying
    /// again is safe (`following`: the call is an upstream task, which a
    /// new try follows again instead of calling), the "not tried again"
    /// error when it may have reached the upstream of a tool not safe to
    /// repeat; otherwise (and in a plain call) the error as the upstream gave it.
    fn service_failure(&self, ctx: &ToolContext, e: ServiceError, following: bool) -> ToolError {
        let transient = classify_service(self.pool.name(), &e, &self.retry_on);
        self.transient(ctx, transient, following).unwrap_or_else(|| service_error(&self.pool, e))
    }

    /// What a [`Transient`] failure makes of the call (see
    /// [`service_failure`](Self::service_failure)); `None`: not one, or a plain call.
    fn transient(&self, ctx: &ToolContext, failure: Option<Transient>, following: bool) -> Option<ToolError> {
        let failure = failure?;
        // The upstream's circuit breaker counts it, tried again or not.
        if failure.class.means_down() {
            ctx.upstream_failed();
        }
        ctx.try_number()?;
        // A call given up because the task was cancelled (or its claim lost)
        // is never turned into a retry.
        if ctx.cancellation().is_cancelled() {
            return Some(ToolError::Cancelled);
        }
        let upstream = self.pool.name().to_string();
        if failure.received == Received::Maybe && !following && !self.rerun_allowed {
            tracing::warn!(upstream = %upstream, tool = %self.upstream_name, reason = %failure.reason,
                "not trying the call again: the tool is not marked idempotent or read-only");
            metrics::counter!("presa_gateway_reruns_refused_total", "upstream" => upstream).increment(1);
            return Some(not_tried_again_error(&self.upstream_name, &failure.reason));
        }
        metrics::counter!("presa_gateway_upstream_retries_total", "upstream" => upstream, "reason" => failure.class.label())
            .increment(1);
        Some(match failure.after {
            Some(after) => ToolError::retry_after(after, failure.reason),
            None => ToolError::transient(failure.reason),
        })
    }
}

#[async_trait::async_trait]
impl ToolHandler for ProxyTool {
    /// A call that gives a pinned argument is refused before it runs or is stored.
    fn check_arguments(&self, arguments: &Value) -> Result<(), ArgumentsRefused> {
        self.shape.check_arguments(arguments)
    }

    async fn call(&self, ctx: ToolContext, arguments: Value) -> Result<ToolOutput, ToolError> {
        // Refused here too: a task stored before its argument was pinned.
        let arguments = self.shape.arguments(arguments)?;
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
            lease = self.pool.get() => lease.map_err(|e| {
                let transient = classify_connect(self.pool.name(), &e, &self.retry_on);
                self.transient(&ctx, transient, false).unwrap_or_else(|| upstream_error(&self.pool, e))
            })?,
            _ = cancel.cancelled() => return Err(ToolError::Cancelled),
        };
        let started = Instant::now();
        let mut call = Call { tool: self, ctx: &ctx, asked: 0, told_roots: false, followed: false };
        let mut out = match resume {
            Some(task_id) => {
                tracing::info!(upstream = %self.pool.name(), upstream_task = %task_id, "resuming the upstream's task");
                Box::pin(call.follow_task(lease, task_id)).await
            }
            None => call.run(lease, arguments).await,
        };
        // An error result the rule names transient (a task following an
        // upstream task would only find the same result again).
        if let Ok(ToolOutput::Complete(result)) = &out
            && !call.followed
            && let Some(e) = self.transient(&ctx, classify_result(self.pool.name(), result, &self.retry_on), false)
        {
            out = Err(e);
        }
        // Capped after the retry rules had their say: a result too big is
        // the call's answer, not a failure to try again.
        let out = out.map(|o| self.shape.cap(o));
        let outcome = match &out {
            Ok(ToolOutput::Complete(v)) if v["isError"] == true => "tool_error",
            Ok(_) => "ok",
            Err(ToolError::Cancelled) => "cancelled",
            Err(ToolError::NeedInput(_)) => "input_required",
            Err(ToolError::Retry(_)) => "retry",
            Err(_) => "error",
        };
        // The admin API's calls and errors per tool (a call waiting for input is not over yet).
        if outcome != "input_required" {
            self.pool.stats().called(&self.upstream_name, matches!(outcome, "tool_error" | "retry" | "error"));
        }
        if let Err(e @ (ToolError::Rpc(_) | ToolError::Internal(_) | ToolError::Retry(_))) = &out {
            self.pool.stats().failed(&format!("{}: {e}", self.upstream_name));
        }
        self.pool.record_call(outcome, started.elapsed());
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
