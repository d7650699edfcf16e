//! What a call run inside its request must pass before its handler runs:
//! its tool's rate, a permit of its concurrency limit and its circuit
//! breaker ([`Server::admit_in_request`], used by `call.rs`).

use presa_protocol::Limit;
use presa_store::Take;
use presa_telemetry::metrics;
use serde_json::Value;

use super::{Admitted, Server};
use crate::{breaker::Guard, catalog::RegisteredTool, concurrency::HeldPermit, error::ServerError};

impl Server {
    /// What a call run inside its request must pass before it runs, in
    /// order: its tool's rate (past it, refused with when to try again), a
    /// permit of its concurrency limit (waited for up to `permit_wait`, then
    /// refused), and its circuit breaker (open: refused at once). Holds the
    /// permit and the breaker's guard for the run.
    pub(super) async fn admit_in_request(
        &self,
        tool: &RegisteredTool,
        name: &str,
        req: &Admitted,
        arguments: &Value,
    ) -> Result<(Option<HeldPermit>, Option<Guard>), ServerError> {
        if let Some(rate) = tool.rate()
            && let Some(wait) = rate.take(self.core().rates().as_ref(), name, &req.caller, Take::Now).await
        {
            metrics::refusal(Limit::ToolRate);
            let retry_after_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1);
            return Err(ServerError::RateLimited { limit: Limit::ToolRate, retry_after_ms });
        }
        let permit = match tool.concurrency() {
            None => None,
            Some(limit) => {
                let permit_name = limit.name(name, &req.caller, arguments);
                let patience = self.core().config().permit_wait;
                let Some(hold) = limit.admit_call(self.core().permits(), permit_name, patience).await else {
                    metrics::refusal(Limit::ToolConcurrency);
                    let retry_after_ms = Limit::ToolConcurrency.retry_after_ms().unwrap_or(1_000);
                    return Err(ServerError::RateLimited { limit: Limit::ToolConcurrency, retry_after_ms });
                };
                Some(hold.hold(self.core().work().clone()))
            }
        };
        let guard = crate::breaker::admit(self.core().breakers(), tool).await.or_refuse()?;
        Ok((permit, guard))
    }
}
