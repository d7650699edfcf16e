//! [`ToolBreaker`]: how a tool (or the upstream it shares with others)
//! declares its circuit breaker: when it opens, for how long, and whose it
//! is. What a breaker does before and after a run is in `breaker.rs`.

use std::time::Duration;

use presa_store::BreakerPolicy;

/// The most failures a breaker may count before it opens.
pub const MAX_FAILURES: u32 = presa_store::breakers::MAX_FAILURES;

/// A tool's circuit breaker: `failures` transient failures within `window`
/// open it for `cool_down`; then one probe call (holding the half-open
/// state for at most `probe_lease`) decides whether it closes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ToolBreaker {
    /// Transient failures within the window that open it (1 to 1000).
    pub failures: u32,
    /// The window failures are counted in.
    pub window: Duration,
    /// How long it stays open before one probe call may go.
    pub cool_down: Duration,
    /// How long a probe holds the half-open state without reporting (its
    /// process may have died): then the next call probes.
    pub probe_lease: Duration,
    /// Whose breaker it is: the tool's own (`None`), a shared name, or an upstream's.
    owner: Owner,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Owner {
    Tool,
    Shared(String),
    Upstream(String),
}

impl ToolBreaker {
    /// Open after `failures` transient failures (at least 1, at most 1000)
    /// within 30 s, for a cool-down of 10 s; a probe holds the half-open state 60 s at most.
    pub fn after(failures: u32) -> Self {
        ToolBreaker {
            failures: failures.clamp(1, MAX_FAILURES),
            window: Duration::from_secs(30),
            cool_down: Duration::from_secs(10),
            probe_lease: Duration::from_secs(60),
            owner: Owner::Tool,
        }
    }

    /// Count failures within `window` (at least 1 ms).
    pub fn within(self, window: Duration) -> Self {
        ToolBreaker { window: window.max(Duration::from_millis(1)), ..self }
    }

    /// Stay open for `cool_down` (at least 1 ms) before a probe.
    pub fn cool_down(self, cool_down: Duration) -> Self {
        ToolBreaker { cool_down: cool_down.max(Duration::from_millis(1)), ..self }
    }

    /// Let a probe hold the half-open state for at most `lease` (at least 1 ms).
    pub fn probe_lease(self, lease: Duration) -> Self {
        ToolBreaker { probe_lease: lease.max(Duration::from_millis(1)), ..self }
    }

    /// One breaker under `name` for every tool that names it (what they
    /// all call), instead of the tool's own.
    pub fn shared(self, name: impl Into<String>) -> Self {
        ToolBreaker { owner: Owner::Shared(name.into()), ..self }
    }

    /// The breaker of the upstream `name`, shared by every tool calling it
    /// (status messages say "upstream 'name'").
    pub fn upstream(self, name: impl Into<String>) -> Self {
        ToolBreaker { owner: Owner::Upstream(name.into()), ..self }
    }

    /// The store's policy.
    pub fn policy(&self) -> BreakerPolicy {
        BreakerPolicy {
            failures: self.failures,
            window: self.window,
            cool_down: self.cool_down,
            probe_lease: self.probe_lease,
        }
        .clamped()
    }

    /// The breaker's name for a call of `tool`: the shared one, else the tool's.
    pub fn name<'a>(&'a self, tool: &'a str) -> &'a str {
        match &self.owner {
            Owner::Tool => tool,
            Owner::Shared(name) | Owner::Upstream(name) => name,
        }
    }

    /// What is failing, in words: `upstream 'ml'`, `tool 'deploy'`, `'billing'`.
    pub(crate) fn what(&self, tool: &str) -> String {
        match &self.owner {
            Owner::Tool => format!("tool '{tool}'"),
            Owner::Shared(name) => format!("'{name}'"),
            Owner::Upstream(name) => format!("upstream '{name}'"),
        }
    }
}
