//! Rates that span the cluster ([`Rates`]): how often a thing may be done,
//! with bursts, kept by the store so every process shares one count (a
//! tool's calls to what it protects: `Tool::rate`).
//!
//! The algorithm is GCRA (the generic cell rate algorithm, a leaky bucket
//! kept as one number): a rate of one per `interval` with a `burst`
//! remembers only its *theoretical arrival time* (TAT), when the bucket
//! would be empty again. A take at `now` is admitted when
//! `TAT - now <= interval × (burst - 1)`, and moves TAT to
//! `max(TAT, now) + interval`; a refused take changes nothing and learns
//! how long until it would pass, or (work that can wait) reserves the next
//! free turn, moving TAT on as an admitted take does. One compare-and-set of one number per take,
//! nothing to refill on a timer, and a key that expires once the bucket is
//! empty: on Redis one script (`rate.lua`) over one string key, against
//! a token bucket's two fields and its refill arithmetic.

use std::time::Duration;

use crate::error::StoreError;

/// A rate: one take per `interval`, `burst` of them at once after a quiet spell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// The time one take uses up (1 s / takes per second).
    pub interval: Duration,
    /// How many takes may come at once (at least 1).
    pub burst: u32,
}

impl Rate {
    /// `per_second` takes a second (more than 0), in bursts of up to `burst`.
    pub fn per_second(per_second: f64, burst: u32) -> Rate {
        let interval = Duration::from_secs_f64(1.0 / per_second.max(1e-6));
        Rate { interval, burst: burst.max(1) }
    }

    /// How far ahead of `now` the TAT may be for a take to pass (the burst's slack).
    pub fn tolerance(&self) -> Duration {
        self.interval.saturating_mul(self.burst.saturating_sub(1))
    }

    /// GCRA on `tat` (Unix µs, 0: never taken) at `now` (Unix µs), as
    /// `how` takes: the new TAT to store (`None`: unchanged) and the answer.
    /// Every store's one rule.
    pub fn take(&self, tat: u64, now: u64, how: Take) -> (Option<u64>, Taken) {
        let (interval, tolerance) = (self.interval.as_micros() as u64, self.tolerance().as_micros() as u64);
        let tat = tat.max(now);
        let ahead = tat - now;
        match how {
            Take::Now if ahead > tolerance => (None, Taken::Wait(Duration::from_micros(ahead - tolerance))),
            Take::Reserve if ahead > tolerance => {
                (Some(tat + interval), Taken::Reserved(Duration::from_micros(ahead - tolerance)))
            }
            Take::Now | Take::Reserve => (Some(tat + interval), Taken::Admitted),
        }
    }
}

/// How a take asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// Now or not at all (a call someone waits for: refused past the rate).
    Now,
    /// Now, or the next free turn, reserved (work that can wait: a task):
    /// every reservation gets its own turn, so waiters do not all come
    /// back at once.
    Reserve,
}

/// What a take of a rate answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// Admitted now: it counts.
    Admitted,
    /// Refused ([`Take::Now`], nothing counted): a take passes again after this long.
    Wait(Duration),
    /// A turn reserved ([`Take::Reserve`], it counts): it starts after this long.
    Reserved(Duration),
}

/// Rates that span the cluster, kept by the store (see the module docs).
#[async_trait::async_trait]
pub trait Rates: Send + Sync + std::fmt::Debug {
    /// Take one of `rate` under `key` (a name the caller chooses: a tool, a
    /// tool and a tenant) as `how` says, by the store's clock.
    async fn take_rate(&self, key: &str, rate: Rate, how: Take) -> Result<Taken, StoreError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gcra_admits_a_burst_then_one_per_interval() {
        let rate = Rate::per_second(5.0, 3);
        assert_eq!(rate.interval, Duration::from_millis(200));
        let (mut tat, now) = (0, 1_000_000_000);
        let mut take = |at: u64, how: Take| {
            let (next, taken) = rate.take(tat, at, how);
            tat = next.unwrap_or(tat);
            taken
        };
        for _ in 0..3 {
            assert_eq!(take(now, Take::Now), Taken::Admitted, "the burst passes");
        }
        assert_eq!(take(now, Take::Now), Taken::Wait(Duration::from_millis(200)), "the fourth waits one interval");
        assert_eq!(take(now + 100_000, Take::Now), Taken::Wait(Duration::from_millis(100)), "a refusal took nothing");
        assert_eq!(take(now + 200_000, Take::Now), Taken::Admitted, "one interval later one more passes");
        // Reservations get a turn each, one interval apart.
        assert_eq!(take(now + 200_000, Take::Reserve), Taken::Reserved(Duration::from_millis(200)));
        assert_eq!(take(now + 200_000, Take::Reserve), Taken::Reserved(Duration::from_millis(400)));
        assert_eq!(take(now + 200_000, Take::Now), Taken::Wait(Duration::from_millis(600)));
        assert_eq!(take(now + 10_000_000, Take::Now), Taken::Admitted, "after a quiet spell the bucket is empty");
    }
}
