//! The cluster's default retry policy ([`RetryArgs`]): how a task's tries
//! that failed in a way worth trying again are tried again, for tools that
//! set no policy of their own (`Tool::retry`). Common to presa-worker and
//! the embedded worker of presa-api; see `crates/server/src/retry.rs`.

use std::time::Duration;

use presa_server::{RetryPolicy, RetryPolicyError};

/// The default retry policy's flags.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct RetryArgs {
    /// Tries of a task in all, the first included, when its tool fails in a
    /// way worth trying again (`ToolError::transient`, a gateway upstream's
    /// transient failure) and sets no policy of its own; 1: never try again.
    #[arg(long, env = "PRESA_RETRY_ATTEMPTS", default_value_t = RetryPolicy::default().attempts)]
    pub retry_attempts: u32,

    /// The backoff's first cap, in ms: the wait after the n-th failed try is
    /// uniform in [0, min(--retry-max-ms, this × 2^(n-1))] (full jitter).
    #[arg(long, env = "PRESA_RETRY_INITIAL_MS", default_value_t = RetryPolicy::default().initial.as_millis() as u64)]
    pub retry_initial_ms: u64,

    /// The backoff's largest cap, in ms.
    #[arg(long, env = "PRESA_RETRY_MAX_MS", default_value_t = RetryPolicy::default().max.as_millis() as u64)]
    pub retry_max_ms: u64,
}

impl RetryArgs {
    /// The policy these flags give, if it makes sense.
    pub fn policy(&self) -> Result<RetryPolicy, RetryPolicyError> {
        RetryPolicy::attempts(self.retry_attempts)
            .backoff(Duration::from_millis(self.retry_initial_ms), Duration::from_millis(self.retry_max_ms))
            .validated()
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        retry: RetryArgs,
    }

    #[test]
    fn the_defaults_are_the_servers_and_nonsense_is_refused() {
        let parse = |args: &[&str]| Flags::try_parse_from([&["t"], args].concat()).unwrap().retry.policy();
        assert_eq!(parse(&[]), Ok(RetryPolicy::default()));
        let p = parse(&["--retry-attempts", "5", "--retry-initial-ms", "200", "--retry-max-ms", "800"]).unwrap();
        assert_eq!((p.attempts, p.initial, p.max), (5, Duration::from_millis(200), Duration::from_millis(800)));
        assert_eq!(parse(&["--retry-attempts", "0"]), Err(RetryPolicyError::NoAttempts));
        assert!(parse(&["--retry-initial-ms", "9000", "--retry-max-ms", "10"]).is_err());
    }
}
