//! Retries of a task's failed tries: the [`RetryPolicy`] a tool (or the
//! cluster's default, `WorkerConfig::retry`) gives, the backoff it computes,
//! and [`Retry`], what a handler returns (as [`ToolError::Retry`](crate::ToolError::Retry)) to ask
//! for another try.
//!
//! Only a failure the handler marks worth trying again is tried again: the
//! handler knows whether the work it called may already have happened (a
//! gateway tries again only tools safe to repeat). The worker puts the work
//! off (`WorkQueue::defer`), so a waiting task holds no worker, and a try
//! past the policy's attempts ends the task `failed` with a dead letter an
//! operator can replay (see `crate::worker`).

use std::{fmt, time::Duration};

use presa_protocol::{codes, jsonrpc::ErrorObject};

/// How often and how patiently a tool's failed tries are tried again:
/// exponential backoff with full jitter (the delay after the `n`th failed
/// try is uniform in `[0, min(max, initial × 2ⁿ⁻¹)]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// How many tries in all, the first included (1: never tried again).
    pub attempts: u32,
    /// The backoff's first cap.
    pub initial: Duration,
    /// The backoff's largest cap.
    pub max: Duration,
}

/// A retry policy that makes no sense.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RetryPolicyError {
    /// `attempts` is 0.
    #[error("a retry policy needs at least 1 attempt (the first try)")]
    NoAttempts,
    /// The initial delay is 0 or over the maximum.
    #[error("the initial retry delay ({initial:?}) must be over 0 and at most the maximum ({max:?})")]
    Delays {
        /// The initial delay.
        initial: Duration,
        /// The maximum delay.
        max: Duration,
    },
}

impl Default for RetryPolicy {
    /// 3 tries, backing off from 1 s up to 60 s.
    fn default() -> Self {
        RetryPolicy::attempts(3)
    }
}

impl RetryPolicy {
    /// Never try again: a failed try fails the task.
    pub const NEVER: RetryPolicy =
        RetryPolicy { attempts: 1, initial: Duration::from_secs(1), max: Duration::from_secs(1) };

    /// `attempts` tries in all, with the default backoff (1 s up to 60 s).
    pub const fn attempts(attempts: u32) -> Self {
        RetryPolicy { attempts, initial: Duration::from_secs(1), max: Duration::from_secs(60) }
    }

    /// This policy with `attempts` tries in all.
    pub const fn with_attempts(self, attempts: u32) -> Self {
        RetryPolicy { attempts, ..self }
    }

    /// This policy backing off from `initial` up to `max`.
    pub const fn backoff(self, initial: Duration, max: Duration) -> Self {
        RetryPolicy { initial, max, ..self }
    }

    /// The policy, if it makes sense.
    pub fn validated(self) -> Result<Self, RetryPolicyError> {
        if self.attempts == 0 {
            return Err(RetryPolicyError::NoAttempts);
        }
        if self.initial.is_zero() || self.initial > self.max {
            return Err(RetryPolicyError::Delays { initial: self.initial, max: self.max });
        }
        Ok(self)
    }

    /// The most the delay after the `failed`th failed try may be (1 for the
    /// first): `min(max, initial × 2^(failed - 1))`.
    pub fn cap(&self, failed: u32) -> Duration {
        let doublings = failed.saturating_sub(1).min(32);
        self.initial.saturating_mul(1u32 << doublings.min(31)).min(self.max)
    }

    /// The delay after the `failed`th failed try, `jitter` (in `[0, 1]`)
    /// of the way up to its [`cap`](Self::cap).
    pub fn delay(&self, failed: u32, jitter: f64) -> Duration {
        self.cap(failed).mul_f64(jitter.clamp(0.0, 1.0))
    }

    /// Whether a try numbered `number` (1 for the first) that failed may be tried again.
    pub fn allows_another(&self, number: u32) -> bool {
        number < self.attempts
    }
}

/// Why a try failed in a way worth trying again (see [`ToolError::Retry`](crate::ToolError::Retry)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retry {
    /// Why, in words (shown in the task's status message, its log of
    /// tries, and the error it ends with if no try is left). Sent to the
    /// client: say what failed, not a secret.
    pub reason: String,
    /// When to try again, if the failure said (an HTTP `Retry-After`, a
    /// handler rescheduling itself); else the policy's backoff decides.
    pub after: Option<Duration>,
}

impl Retry {
    /// The error a call that runs inside its request answers with (it is
    /// not tried again there): retryable, after `after` or a second.
    pub fn error_object(&self) -> ErrorObject {
        let after_ms = self.after.map_or(1_000, |d| d.as_millis().min(u128::from(u64::MAX)) as u64);
        let message = format!("The tool failed in a way worth trying again: {}", self.reason);
        let data = serde_json::json!({ "retryable": true, "retryAfterMs": after_ms });
        ErrorObject::with_data(codes::INTERNAL_ERROR, message, data)
    }
}

impl fmt::Display for Retry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_maximum_with_full_jitter() {
        let p = RetryPolicy::attempts(10).backoff(Duration::from_millis(100), Duration::from_millis(700));
        let caps: Vec<u128> = (1..=6).map(|n| p.cap(n).as_millis()).collect();
        assert_eq!(caps, [100, 200, 400, 700, 700, 700]);
        assert_eq!(p.delay(3, 0.0), Duration::ZERO);
        assert_eq!(p.delay(3, 0.5), Duration::from_millis(200));
        assert_eq!(p.delay(3, 7.0), Duration::from_millis(400), "jitter is clamped");
        assert_eq!(p.cap(u32::MAX), Duration::from_millis(700), "no overflow");
    }

    #[test]
    fn attempts_count_the_first_try() {
        assert!(!RetryPolicy::NEVER.allows_another(1));
        let p = RetryPolicy::attempts(3);
        assert!(p.allows_another(1) && p.allows_another(2) && !p.allows_another(3));
    }

    #[test]
    fn nonsense_policies_are_refused() {
        assert_eq!(RetryPolicy::attempts(0).validated(), Err(RetryPolicyError::NoAttempts));
        let inverted = RetryPolicy::attempts(2).backoff(Duration::from_secs(5), Duration::from_secs(1));
        assert!(matches!(inverted.validated(), Err(RetryPolicyError::Delays { .. })));
        assert_eq!(RetryPolicy::default().validated(), Ok(RetryPolicy::default()));
    }
}
