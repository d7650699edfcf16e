//! The circuit breakers' series: each breaker's state as the store holds it
//! (read when `/metrics` is scraped, by the processes that report the work
//! queue), and how often each opened. The `breaker` label is a breaker's
//! name: a tool's or an upstream's, from code or configuration, never a caller's.

use metrics::{counter, gauge};

/// A circuit breaker's state, by `breaker`: 0 closed, 1 open, 2 half-open
/// (one probe call out).
pub const BREAKER_STATE: &str = "presa_breaker_state";
/// Times a circuit breaker opened (closed → open; not a failed probe's
/// re-opening), by `breaker`.
pub const BREAKER_OPENED: &str = "presa_breaker_opened_total";

/// The breaker `name` exists: its series render (closed, never opened) before anything happened.
pub fn breaker_known(name: &str) {
    counter!(BREAKER_OPENED, "breaker" => name.to_string()).absolute(0);
}

/// The breaker `name` is in `state` (0 closed, 1 open, 2 half-open).
pub fn breaker_state(name: &str, state: f64) {
    gauge!(BREAKER_STATE, "breaker" => name.to_string()).set(state);
}

/// The breaker `name` opened.
pub fn breaker_opened(name: &str) {
    counter!(BREAKER_OPENED, "breaker" => name.to_string()).increment(1);
}

#[cfg(feature = "exporters")]
pub(super) fn describe() {
    use metrics::{describe_counter, describe_gauge};
    describe_gauge!(BREAKER_STATE, "A circuit breaker's state (0 closed, 1 open, 2 half-open), by breaker.");
    describe_counter!(BREAKER_OPENED, "Times a circuit breaker opened (closed to open), by breaker.");
}
