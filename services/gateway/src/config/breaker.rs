//! An `[[upstream]]` table's `breaker = { failures, window_s, cool_down_s,
//! probe_lease_s }`: the circuit breaker every tool of that upstream shares
//! (`presa_server::ToolBreaker`, named after the upstream), checked when
//! the configuration is resolved.

use std::time::Duration;

use presa_server::{ToolBreaker, breaker::MAX_FAILURES};
use serde::Deserialize;

use super::ConfigError;

/// The longest a window, cool-down or probe lease may be: a day.
const MAX_SECONDS: f64 = 86_400.0;

/// `breaker = { … }`: `failures` transient failures of the upstream (no
/// connection, HTTP 5xx, a child that exited, no answer in time, and what
/// a rule names transient) within `window_s` (30) open it for
/// `cool_down_s` (10); a probe call holds it half-open `probe_lease_s` (60) at most.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BreakerRule {
    /// Failures within the window that open it (1 to 1000).
    pub failures: u32,
    /// The window, in seconds.
    #[serde(default)]
    pub window_s: Option<f64>,
    /// How long it stays open, in seconds.
    #[serde(default)]
    pub cool_down_s: Option<f64>,
    /// How long a probe call may hold it half-open without an answer, in seconds.
    #[serde(default)]
    pub probe_lease_s: Option<f64>,
}

impl BreakerRule {
    /// The breaker of the upstream `name`, if the rule makes sense.
    pub fn breaker(&self, name: &str) -> Result<ToolBreaker, ConfigError> {
        let refuse = |why: String| ConfigError::Invalid(format!("upstream {name:?}: breaker: {why}"));
        if !(1..=MAX_FAILURES).contains(&self.failures) {
            return Err(refuse(format!("failures must be 1 to {MAX_FAILURES}, not {}", self.failures)));
        }
        let seconds = |key: &str, v: Option<f64>, default: f64| match v {
            None => Ok(Duration::from_secs_f64(default)),
            Some(s) if s.is_finite() && s > 0.0 && s <= MAX_SECONDS => Ok(Duration::from_secs_f64(s)),
            Some(s) => Err(refuse(format!("{key} must be over 0 and at most {MAX_SECONDS} seconds, not {s}"))),
        };
        Ok(ToolBreaker::after(self.failures)
            .within(seconds("window_s", self.window_s, 30.0)?)
            .cool_down(seconds("cool_down_s", self.cool_down_s, 10.0)?)
            .probe_lease(seconds("probe_lease_s", self.probe_lease_s, 60.0)?)
            .upstream(name))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::{GatewayArgs, file::parse_file};

    fn resolve(breaker: &str) -> Result<super::super::GatewayConfig, String> {
        let text =
            format!("[[upstream]]\nname='ml'\ncommand='x'\nbreaker = {breaker}\n[[upstream]]\nname='b'\ncommand='y'");
        let args = GatewayArgs { upstream_pool: 4, upstream_refresh_ms: 1000, ..GatewayArgs::default() };
        args.resolve_with(Some(parse_file(&text)?)).map_err(|e| e.to_string())
    }

    #[test]
    fn an_upstream_gives_its_breaker_checked_at_start() {
        let c = resolve("{ failures = 5, window_s = 30, cool_down_s = 0.5 }").unwrap();
        let b = c.upstreams[0].breaker.clone().expect("a breaker");
        assert_eq!((b.failures, b.window, b.cool_down), (5, Duration::from_secs(30), Duration::from_millis(500)));
        assert_eq!(b.probe_lease, Duration::from_secs(60), "the default lease");
        assert_eq!(b.name("ml_train"), "ml", "named after the upstream, whatever the tool");
        assert!(c.upstreams[1].breaker.is_none(), "only where given");
        let d = resolve("{ failures = 1 }").unwrap().upstreams[0].breaker.clone().unwrap();
        assert_eq!((d.window, d.cool_down), (Duration::from_secs(30), Duration::from_secs(10)), "defaults");
        for (bad, says) in [
            ("{ failures = 0 }", "upstream \"ml\": breaker: failures must be 1 to 1000, not 0"),
            ("{ failures = 1001 }", "failures must be 1 to 1000"),
            ("{ failures = 3, window_s = 0 }", "window_s must be over 0"),
            ("{ failures = 3, cool_down_s = -1 }", "cool_down_s must be over 0"),
            ("{ failures = 3, probe_lease_s = 100000 }", "probe_lease_s must be over 0 and at most 86400"),
            ("{ failures = 3, cooldown = 2 }", "unknown field `cooldown`"),
            ("{ window_s = 3 }", "missing field `failures`"),
        ] {
            let e = resolve(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
