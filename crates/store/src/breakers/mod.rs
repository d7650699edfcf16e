//! Circuit breakers that span the cluster ([`Breakers`]): when what a tool
//! calls keeps failing, every process stops calling it for a while, and one
//! call at a time finds out whether it is back (a tool's or an upstream's
//! breaker: `Tool::breaker`, the gateway's `[[upstream]] breaker`).
//!
//! The state machine is [`Breaker`], written once in Rust (run by the
//! memory store under its lock) and once in Lua (`breaker.lua`, by Redis's
//! clock); the contract suite holds both to it:
//!
//! - **closed**: calls pass ([`Check::Pass`]). A failure is remembered
//!   with its time; `failures` of them within `window` open the circuit
//!   (failures spread wider than the window never do). A success changes
//!   nothing (the count is of failures in a window, not in a row).
//! - **open** until `cool_down` after it opened: every check is refused
//!   ([`Check::Open`] with how long until it may half-open).
//! - **half-open**: the first check after the cool-down becomes the one
//!   **probe** ([`Check::Probe`]), held by its token for `probe_lease`;
//!   every other check is refused meanwhile. The probe's success closes the
//!   circuit, its failure opens it again for another cool-down; reports of
//!   anyone else are ignored (fenced by the token). A probe that never
//!   reports (its process died) frees the half-open state when its lease
//!   ends: the next check becomes the probe.
//!
//! A breaker closed with no failure in its window holds nothing: the memory
//! store drops it, Redis lets its key expire.

use std::time::Duration;

use crate::error::StoreError;

/// The most failures a policy may count (the window keeps one time each).
pub const MAX_FAILURES: u32 = 1_000;

/// When a breaker opens, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerPolicy {
    /// Failures within `window` that open it (1 to [`MAX_FAILURES`]).
    pub failures: u32,
    /// The window failures are counted in.
    pub window: Duration,
    /// How long it stays open before a probe may go.
    pub cool_down: Duration,
    /// How long a probe holds the half-open state without reporting.
    pub probe_lease: Duration,
}

impl BreakerPolicy {
    /// The policy with every bound brought into range (at least one
    /// failure, at most [`MAX_FAILURES`]; durations at least 1 ms).
    pub fn clamped(self) -> Self {
        let ms = |d: Duration| d.max(Duration::from_millis(1));
        BreakerPolicy {
            failures: self.failures.clamp(1, MAX_FAILURES),
            window: ms(self.window),
            cool_down: ms(self.cool_down),
            probe_lease: ms(self.probe_lease),
        }
    }

    fn ms(d: Duration) -> u64 {
        u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
    }

    /// `window` in ms (at least 1).
    pub fn window_ms(&self) -> u64 {
        Self::ms(self.window)
    }

    /// `cool_down` in ms (at least 1).
    pub fn cool_down_ms(&self) -> u64 {
        Self::ms(self.cool_down)
    }

    /// `probe_lease` in ms (at least 1).
    pub fn probe_lease_ms(&self) -> u64 {
        Self::ms(self.probe_lease)
    }
}

/// A breaker's state, as metrics and the admin API show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Circuit {
    /// Calls pass.
    Closed,
    /// Calls are refused until the cool-down ends.
    Open,
    /// One probe call is out; the rest are refused until it reports.
    HalfOpen,
}

impl Circuit {
    /// The value of `presa_breaker_state`: 0 closed, 1 open, 2 half-open.
    pub fn gauge(self) -> f64 {
        match self {
            Circuit::Closed => 0.0,
            Circuit::Open => 1.0,
            Circuit::HalfOpen => 2.0,
        }
    }

    /// `closed`, `open` or `half_open`.
    pub fn as_str(self) -> &'static str {
        match self {
            Circuit::Closed => "closed",
            Circuit::Open => "open",
            Circuit::HalfOpen => "half_open",
        }
    }

    /// The state a store script names by its number (0, 1, 2).
    pub fn from_code(code: i64) -> Circuit {
        match code {
            1 => Circuit::Open,
            2 => Circuit::HalfOpen,
            _ => Circuit::Closed,
        }
    }
}

/// What a check before a call answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// Closed: call.
    Pass,
    /// This call is the half-open state's one probe: call, then report.
    Probe,
    /// Refused: the circuit is open (or a probe is out); ask again after `retry_in`.
    Open {
        /// How long until a check may pass or probe.
        retry_in: Duration,
    },
}

/// How a call that passed a check ended, for the breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Report {
    /// What it called answered.
    Success,
    /// What it called failed in a way that counts (went away, refused, 5xx).
    Failure,
}

/// What a report changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Nothing.
    None,
    /// Closed → open: failures reached the policy's count in its window.
    Opened,
    /// The probe failed: open again for another cool-down.
    Reopened,
    /// The probe succeeded: closed.
    Closed,
}

/// A breaker as read (admin API, metrics).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BreakerView {
    /// Its state.
    pub circuit: Circuit,
    /// Failures counted in the window (closed).
    pub failures: u32,
    /// Open: how long until a probe may go; half-open: how long the probe's lease has left.
    pub retry_in: Option<Duration>,
}

/// Where a breaker is (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// Calls pass.
    Closed,
    /// Refused until `until` (Unix ms).
    Open {
        /// When a probe may go.
        until: u64,
    },
    /// `probe` holds it until `until` (Unix ms).
    HalfOpen {
        /// The probe's token.
        probe: String,
        /// When its lease ends.
        until: u64,
    },
}

/// One breaker's state: what the memory store keeps per name, and what
/// `breaker.lua` keeps in its hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Breaker {
    /// Where it is.
    pub phase: Phase,
    /// The times (Unix ms) of the failures still in the window, oldest first (closed only).
    pub failures: Vec<u64>,
}

impl Default for Breaker {
    fn default() -> Self {
        Breaker { phase: Phase::Closed, failures: Vec::new() }
    }
}

impl Breaker {
    /// A check at `now` (Unix ms) by a caller holding `token`.
    pub fn check(&mut self, policy: &BreakerPolicy, now: u64, token: &str) -> Check {
        let wait = |until: u64| Duration::from_millis(until.saturating_sub(now).max(1));
        match &self.phase {
            Phase::Closed => Check::Pass,
            Phase::Open { until } if now < *until => Check::Open { retry_in: wait(*until) },
            Phase::HalfOpen { until, .. } if now < *until => {
                // Ask again when the probe's lease ends, or after a cool-down if sooner.
                Check::Open { retry_in: wait((*until).min(now.saturating_add(policy.cool_down_ms()))) }
            }
            // The cool-down is over, or the probe was lost: this caller probes.
            Phase::Open { .. } | Phase::HalfOpen { .. } => {
                let until = now.saturating_add(policy.probe_lease_ms());
                self.phase = Phase::HalfOpen { probe: token.to_string(), until };
                Check::Probe
            }
        }
    }

    /// A report at `now` by the caller holding `token` of how its call ended.
    pub fn report(&mut self, policy: &BreakerPolicy, now: u64, token: &str, report: Report) -> Change {
        let reopen = |b: &mut Breaker| {
            b.phase = Phase::Open { until: now.saturating_add(policy.cool_down_ms()) };
            b.failures.clear();
        };
        match (&self.phase, report) {
            (Phase::Closed, Report::Failure) => {
                self.forget_before(policy, now);
                self.failures.push(now);
                if self.failures.len() >= policy.failures as usize {
                    reopen(self);
                    return Change::Opened;
                }
                Change::None
            }
            (Phase::HalfOpen { probe, .. }, Report::Failure) if probe == token => {
                reopen(self);
                Change::Reopened
            }
            (Phase::HalfOpen { probe, .. }, Report::Success) if probe == token => {
                self.phase = Phase::Closed;
                self.failures.clear();
                Change::Closed
            }
            // A success while closed, or a call that was not the probe
            // reporting while open or half-open: nothing to change.
            _ => Change::None,
        }
    }

    /// Drop the failures at or before `now - window`, and those beyond the
    /// policy's count (the oldest).
    fn forget_before(&mut self, policy: &BreakerPolicy, now: u64) {
        let since = now.saturating_sub(policy.window_ms());
        self.failures.retain(|at| *at > since);
        let over = (self.failures.len() + 1).saturating_sub(policy.failures as usize);
        self.failures.drain(..over.min(self.failures.len()));
    }

    /// Its state.
    pub fn circuit(&self) -> Circuit {
        match self.phase {
            Phase::Closed => Circuit::Closed,
            Phase::Open { .. } => Circuit::Open,
            Phase::HalfOpen { .. } => Circuit::HalfOpen,
        }
    }

    /// Its state as read at `now`.
    pub fn view(&self, policy: &BreakerPolicy, now: u64) -> BreakerView {
        let since = now.saturating_sub(policy.window_ms());
        let failures = self.failures.iter().filter(|at| **at > since).count() as u32;
        let retry_in = match &self.phase {
            Phase::Closed => None,
            Phase::Open { until } | Phase::HalfOpen { until, .. } => {
                Some(Duration::from_millis(until.saturating_sub(now)))
            }
        };
        BreakerView { circuit: self.circuit(), failures, retry_in }
    }

    /// Whether it holds nothing worth keeping at `now`: closed, with no
    /// failure left in the window.
    pub fn is_idle(&self, policy: &BreakerPolicy, now: u64) -> bool {
        let since = now.saturating_sub(policy.window_ms());
        self.phase == Phase::Closed && self.failures.iter().all(|at| *at <= since)
    }
}

/// Circuit breakers that span the cluster, kept by the store (see the module docs).
#[async_trait::async_trait]
pub trait Breakers: Send + Sync + std::fmt::Debug {
    /// Check the breaker `name` (a tool's, an upstream's) under `policy`
    /// before a call, by the store's clock; `token` names the caller, so
    /// that a probe it becomes is its own. Also answers the state after.
    async fn check_breaker(
        &self,
        name: &str,
        policy: BreakerPolicy,
        token: &str,
    ) -> Result<(Check, Circuit), StoreError>;

    /// Report how a call that passed (or probed) ended; answers the state
    /// after and what the report changed.
    async fn report_breaker(
        &self,
        name: &str,
        policy: BreakerPolicy,
        token: &str,
        report: Report,
    ) -> Result<(Circuit, Change), StoreError>;

    /// Read the breaker `name` (a breaker never used reads closed, with no failure).
    async fn read_breaker(&self, name: &str, policy: BreakerPolicy) -> Result<BreakerView, StoreError>;
}

#[cfg(test)]
mod tests;
