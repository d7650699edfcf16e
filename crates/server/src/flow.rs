//! What a tool may ask of what it calls, across the cluster: its rate
//! ([`ToolRate`], `Tool::rate`), kept by the store (`presa_store::Rates`,
//! GCRA), so every worker and API pod shares one count. A task over the rate
//! waits: its work is put off until the rate allows it (no try counted, no
//! worker held, a status message saying so); a call run inside its request
//! is refused with `-32023` (HTTP 429) and `Retry-After`.

use std::time::Duration;

use presa_store::{Caller, Rate, Rates, Take, Taken};
use presa_telemetry::metrics;

use crate::store_io::store_call;

/// A tool's rate: `per_second` calls a second across the cluster, `burst`
/// of them at once after a quiet spell; one count for the tool, or one per
/// tenant.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct ToolRate {
    /// Calls a second (more than 0).
    pub per_second: f64,
    /// How many may come at once (at least 1).
    pub burst: u32,
    /// One count per tenant instead of one for the tool.
    pub per_tenant: bool,
}

impl ToolRate {
    /// `per_second` calls a second (at least one in a million seconds), one at a time.
    pub fn per_second(per_second: f64) -> Self {
        let per_second = if per_second.is_finite() && per_second > 1e-6 { per_second } else { 1e-6 };
        ToolRate { per_second, burst: 1, per_tenant: false }
    }

    /// Up to `burst` calls at once (at least 1).
    pub fn burst(self, burst: u32) -> Self {
        ToolRate { burst: burst.max(1), ..self }
    }

    /// One count per tenant: a tenant's calls do not use up another's.
    pub fn per_tenant(self) -> Self {
        ToolRate { per_tenant: true, ..self }
    }

    /// The store's rate.
    pub fn rate(&self) -> Rate {
        Rate::per_second(self.per_second, self.burst)
    }

    /// The name its count is kept under for a call of `tool` by `caller`.
    fn key(&self, tool: &str, caller: &Caller) -> String {
        // Tool names hold no NUL (the catalog's rule), so neither form can pass for the other.
        if self.per_tenant { format!("tenant-tool\0{tool}\0{}", caller.tenant()) } else { format!("tool\0{tool}") }
    }

    /// Take one call of `tool` by `caller` from the rate as `how` asks:
    /// `None` when it may run now, else how long until it may (its turn,
    /// when reserved). A store that fails is answered with a second's wait
    /// (the rate is not overrun blind).
    pub(crate) async fn take(&self, rates: &dyn Rates, tool: &str, caller: &Caller, how: Take) -> Option<Duration> {
        match store_call("take_rate", rates.take_rate(&self.key(tool, caller), self.rate(), how)).await {
            Ok(Taken::Admitted) => None,
            Ok(Taken::Wait(wait) | Taken::Reserved(wait)) => {
                metrics::tool_throttled(tool);
                Some(wait)
            }
            Err(e) => {
                tracing::warn!(error = %e, tool, "checking the tool's rate failed; waiting a second");
                Some(Duration::from_secs(1))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nonsense_rates_are_clamped_and_keys_say_whose_count() {
        assert_eq!(ToolRate::per_second(0.0).per_second, 1e-6);
        assert_eq!(ToolRate::per_second(f64::NAN).per_second, 1e-6);
        assert_eq!(ToolRate::per_second(5.0).burst(0).burst, 1);
        let (acme, globex) = (Caller::new("acme", "a", vec![]), Caller::new("globex", "g", vec![]));
        let shared = ToolRate::per_second(5.0);
        assert_eq!(shared.key("deploy", &acme), shared.key("deploy", &globex));
        let own = shared.per_tenant();
        assert_ne!(own.key("deploy", &acme), own.key("deploy", &globex));
        assert_ne!(shared.key("deploy", &acme), own.key("deploy", &acme), "a tenant's count is not the tool's");
    }
}
