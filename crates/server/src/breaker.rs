//! Circuit breakers on what a tool calls ([`ToolBreaker`], `Tool::breaker`):
//! after `failures` transient failures within a window, the breaker opens
//! for a cool-down, and nobody in the cluster calls through it until one
//! probe call finds what it calls back. Its state is the store's
//! (`presa_store::Breakers`: `breaker.lua` on Redis), so one worker's
//! discovery spares the others.
//!
//! Before a run (`admit`): a closed breaker lets it pass; an open one
//! refuses it: a task's work is put off until the breaker may let it
//! through (no try counted, no worker held, a status message saying so:
//! `crate::worker`), a call run inside its request gets a fast retryable
//! `-32603` (HTTP 503, `Retry-After`, `data.limit: "circuit_open"`); after
//! the cool-down the first run is the probe. After the run (`run`): a
//! transient failure ([`ToolError::transient`], or a handler's
//! `ToolContext::upstream_failed`) is reported as a failure; the probe's
//! success closes the breaker. A breaker named after an upstream
//! ([`ToolBreaker::upstream`]) is shared by every tool naming it: the
//! gateway gives each `[[upstream]]` one.

use std::{sync::Arc, time::Duration};

use presa_protocol::{codes, jsonrpc::ErrorObject};
use presa_store::{BreakerPolicy, BreakerView, Breakers, Change, Check, Report, StoreError};
use presa_telemetry::metrics;
use serde_json::{Value, json};

use crate::{
    catalog::Catalog,
    catalog::RegisteredTool,
    context::ToolContext,
    error::ServerError,
    output::ToolError,
    output::ToolOutput,
    store_io::store_call,
    tool::{ToolHandler, run_handler},
};

pub use crate::tool_breaker::{MAX_FAILURES, ToolBreaker};

/// What a check before a run decided.
pub(crate) enum Admission {
    /// Run, reporting to the guard afterwards (`None`: the tool has no breaker).
    Run(Option<Guard>),
    /// The circuit is open.
    Open(Open),
}

/// A refusal by an open circuit.
pub(crate) struct Open {
    /// What is failing, in words.
    pub(crate) what: String,
    /// The breaker's name.
    pub(crate) name: String,
    /// How long until the breaker may let a run through.
    pub(crate) retry_in: Duration,
}

impl Open {
    /// How long a task waits: until the breaker may let it through, and up
    /// to a fifth more, so that waiting tasks do not all come back at once.
    pub(crate) fn task_wait(&self, jitter: f64) -> Duration {
        self.retry_in + self.retry_in.mul_f64(jitter.clamp(0.0, 1.0) / 5.0)
    }

    /// The fast, retryable refusal of a call run inside its request.
    pub(crate) fn refusal(&self) -> ServerError {
        metrics::refusal(presa_store::Limit::CircuitOpen);
        let ms = u64::try_from(self.retry_in.as_millis()).unwrap_or(u64::MAX).max(1);
        let message = format!("{} is failing (circuit open); try again in {} s", self.what, ms.div_ceil(1000));
        let data = json!({ "retryable": true, "retryAfterMs": ms, "limit": "circuit_open", "breaker": self.name });
        ServerError::Rpc(ErrorObject::with_data(codes::INTERNAL_ERROR, message, data))
    }
}

/// A run let through by a breaker, reporting how it ended.
pub(crate) struct Guard {
    breakers: Arc<dyn Breakers>,
    name: String,
    policy: BreakerPolicy,
    token: String,
    probe: bool,
}

/// Check `tool`'s breaker, if it has one, before a run. A store that fails
/// lets the run through (the breaker spares what the tool calls; it must
/// not stop the tool on its own).
pub(crate) async fn admit(breakers: &Arc<dyn Breakers>, tool: &RegisteredTool) -> Admission {
    let Some(breaker) = tool.breaker() else { return Admission::Run(None) };
    let (name, policy) = (breaker.name(tool.name()).to_string(), breaker.policy());
    let token = format!("{:016x}", rand::random::<u64>());
    let probe = match store_call("check_breaker", breakers.check_breaker(&name, policy, &token)).await {
        Ok((Check::Pass, _)) => false,
        Ok((Check::Probe, _)) => {
            tracing::info!(breaker = %name, "circuit half-open: this run is the probe");
            true
        }
        Ok((Check::Open { retry_in }, _)) => {
            return Admission::Open(Open { what: breaker.what(tool.name()), name, retry_in });
        }
        Err(e) => {
            tracing::warn!(error = %e, breaker = %name, "checking the circuit breaker failed; running anyway");
            false
        }
    };
    Admission::Run(Some(Guard { breakers: breakers.clone(), name, policy, token, probe }))
}

impl Admission {
    /// For a call run inside its request: the guard, or the fast refusal.
    pub(crate) fn or_refuse(self) -> Result<Option<Guard>, ServerError> {
        match self {
            Admission::Run(guard) => Ok(guard),
            Admission::Open(open) => Err(open.refusal()),
        }
    }
}

/// Run `handler` (see `run_handler`), then tell `guard`'s breaker how it ended.
pub(crate) async fn run(
    guard: Option<Guard>,
    handler: &dyn ToolHandler,
    ctx: ToolContext,
    arguments: Value,
) -> Result<ToolOutput, ToolError> {
    let Some(guard) = guard else { return run_handler(handler, ctx, arguments).await };
    let out = run_handler(handler, ctx.clone(), arguments).await;
    guard.report(&out, &ctx).await;
    out
}

impl Guard {
    /// Report a run's end: a transient failure (or one the handler said
    /// was its upstream's) is a failure; a cancelled run reports nothing
    /// (a probe's lease then frees the half-open state); anything else
    /// means what the tool calls answered, which only a probe needs to say.
    async fn report(&self, out: &Result<ToolOutput, ToolError>, ctx: &ToolContext) {
        let report = match out {
            _ if ctx.has_upstream_failed() => Report::Failure,
            Err(ToolError::Retry(_)) => Report::Failure,
            Err(ToolError::Cancelled) => return,
            _ if !self.probe => return,
            _ => Report::Success,
        };
        let reported = self.breakers.report_breaker(&self.name, self.policy, &self.token, report);
        match store_call("report_breaker", reported).await {
            Ok((_, Change::Opened)) => {
                metrics::breaker_opened(&self.name);
                tracing::warn!(breaker = %self.name, failures = self.policy.failures,
                    window_ms = self.policy.window_ms(), cool_down_ms = self.policy.cool_down_ms(), "circuit opened");
            }
            Ok((_, Change::Reopened)) => tracing::warn!(breaker = %self.name, "the probe failed: circuit open again"),
            Ok((_, Change::Closed)) => tracing::info!(breaker = %self.name, "the probe succeeded: circuit closed"),
            Ok((_, Change::None)) => {}
            Err(e) => tracing::warn!(error = %e, breaker = %self.name, "reporting to the circuit breaker failed"),
        }
    }
}

/// One breaker of a catalog, as the store holds it.
#[derive(Debug, Clone)]
pub struct BreakerInfo {
    /// Its name.
    pub name: String,
    /// Its policy (the first tool's that names it).
    pub breaker: ToolBreaker,
    /// The tools behind it.
    pub tools: Vec<String>,
    /// Its state.
    pub view: BreakerView,
}

/// Read every breaker of `catalog` from the store, by name (the admin API, `/metrics`).
pub async fn read_all(breakers: &dyn Breakers, catalog: &Catalog) -> Result<Vec<BreakerInfo>, StoreError> {
    let mut named: Vec<(String, ToolBreaker, Vec<String>)> = Vec::new();
    for tool in catalog.tools() {
        let Some(b) = tool.breaker() else { continue };
        let name = b.name(tool.name());
        match named.iter_mut().find(|(n, ..)| n == name) {
            Some((.., tools)) => tools.push(tool.name().to_string()),
            None => named.push((name.to_string(), b.clone(), vec![tool.name().to_string()])),
        }
    }
    named.sort_by(|a, b| a.0.cmp(&b.0));
    let mut infos = Vec::with_capacity(named.len());
    for (name, breaker, tools) in named {
        let view = store_call("read_breaker", breakers.read_breaker(&name, breaker.policy())).await?;
        infos.push(BreakerInfo { name, breaker, tools, view });
    }
    Ok(infos)
}

/// Set `presa_breaker_state` of every breaker of `catalog` from the store
/// (a failure is logged and leaves the previous values).
pub(crate) async fn refresh_gauges(breakers: &dyn Breakers, catalog: &Catalog) {
    match read_all(breakers, catalog).await {
        Ok(infos) => {
            for info in infos {
                metrics::breaker_known(&info.name);
                metrics::breaker_state(&info.name, info.view.circuit.gauge());
            }
        }
        Err(e) => tracing::warn!(error = %e, "reading the circuit breakers failed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_breaker_is_the_tools_own_unless_shared_and_says_whose() {
        let own = ToolBreaker::after(0).within(Duration::ZERO).cool_down(Duration::ZERO);
        assert_eq!((own.failures, own.window, own.cool_down), (1, Duration::from_millis(1), Duration::from_millis(1)));
        assert_eq!(ToolBreaker::after(u32::MAX).failures, 1_000);
        assert_eq!((own.name("deploy"), own.what("deploy")), ("deploy", "tool 'deploy'".to_string()));
        let up = ToolBreaker::after(5).upstream("ml");
        assert_eq!((up.name("ml_train"), up.what("ml_train")), ("ml", "upstream 'ml'".to_string()));
        let shared = ToolBreaker::after(5).shared("billing");
        assert_eq!((shared.name("charge"), shared.what("charge")), ("billing", "'billing'".to_string()));
    }

    #[test]
    fn an_open_circuit_refuses_a_call_fast_and_retryably() {
        let open = Open { what: "upstream 'ml'".into(), name: "ml".into(), retry_in: Duration::from_millis(2_500) };
        let e = open.refusal().to_error_object();
        assert_eq!((e.code, e.http_status()), (codes::INTERNAL_ERROR, 503));
        assert_eq!(e.message, "upstream 'ml' is failing (circuit open); try again in 3 s");
        let data = e.data.expect("data");
        assert_eq!((data["retryable"].as_bool(), data["retryAfterMs"].as_u64()), (Some(true), Some(2_500)));
        assert_eq!((data["limit"].as_str(), data["breaker"].as_str()), (Some("circuit_open"), Some("ml")));
        assert_eq!(open.task_wait(0.0), Duration::from_millis(2_500));
        assert_eq!(open.task_wait(1.0), Duration::from_millis(3_000), "at most a fifth more");
    }
}
