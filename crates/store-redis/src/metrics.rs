//! The series this store records through the `metrics` facade (listed and
//! described with presa's others in `presa-telemetry`): every round trip's
//! time and failure, whether Redis answers, reconnects and data losses.
//!
//! Labels are bounded: `operation` is a script's name or one of the few
//! commands this store sends (anything else is `other`), `kind` one of
//! [`ERROR_KINDS`]. Recording a round trip is a histogram observation (and
//! a counter on failure): no allocation beyond the metric key.

use std::time::Duration;

use crate::error::RedisStoreError;

/// Counter (`metrics` facade) of Redis reconnects, by `connection`
/// (`pubsub`: the pub/sub hub re-connected and re-subscribed). Listed with
/// presa's other series in `presa-telemetry`.
pub const RECONNECTS_METRIC: &str = "presa_redis_reconnects_total";

/// Counter (`metrics` facade) of detected losses of Redis's data (the epoch
/// key vanished or changed: a flush, or a restart without persistence).
/// Listed with presa's other series in `presa-telemetry`.
pub const DATA_LOSS_METRIC: &str = "presa_store_data_loss_total";

/// Histogram of one round trip's time, by `operation` (a script or a command; blocking reads excluded).
pub const COMMAND_DURATION_METRIC: &str = "presa_redis_command_duration_seconds";
/// Counter of failed round trips, by `kind` (one of [`ERROR_KINDS`]).
pub const ERRORS_METRIC: &str = "presa_redis_errors_total";
/// Gauge: 1 when Redis answered the last epoch check (periodic, and every
/// readiness probe), else 0.
pub const UP_METRIC: &str = "presa_redis_up";

/// Counter of writes replicated durability could not confirm in time
/// (`WAIT` answered fewer replicas than asked; the write is on the primary).
pub const UNCONFIRMED_METRIC: &str = "presa_redis_unconfirmed_writes_total";

/// Every `kind` of [`ERRORS_METRIC`].
pub const ERROR_KINDS: &[&str] = &["timeout", "unreachable", "io", "oom", "readonly", "loading", "server", "other"];

/// The commands this store sends on its command connection, as `operation` labels.
const COMMANDS: &[&str] =
    &["get", "hget", "hgetall", "set", "ping", "zrem", "decrby", "xclaim", "xgroup", "publish", "spublish"];

/// Register this store's series at zero (a store opened after the binary
/// installed its recorder): errors by kind, reconnects, data losses, `up`
/// (0 until the first check answers) and the quota-use histogram.
pub(crate) fn register() {
    for kind in ERROR_KINDS {
        metrics::counter!(ERRORS_METRIC, "kind" => *kind).absolute(0);
    }
    metrics::counter!(RECONNECTS_METRIC, "connection" => "pubsub").absolute(0);
    metrics::counter!(DATA_LOSS_METRIC).absolute(0);
    metrics::counter!(UNCONFIRMED_METRIC).absolute(0);
    // Registered (0 until the first check answers), never reset by a second store.
    metrics::gauge!(UP_METRIC).increment(0.0);
    presa_store::metrics::register_quota_usage();
}

/// The `operation` label of a command named `name` (any case).
pub(crate) fn command_operation(name: &[u8]) -> &'static str {
    COMMANDS.iter().copied().find(|c| c.as_bytes().eq_ignore_ascii_case(name)).unwrap_or("other")
}

/// One round trip of `operation` took `elapsed` and ended with `result`.
pub(crate) fn round_trip<T>(operation: &'static str, elapsed: Duration, result: &Result<T, RedisStoreError>) {
    metrics::histogram!(COMMAND_DURATION_METRIC, "operation" => operation).record(elapsed.as_secs_f64());
    if let Err(e) = result {
        failed(e);
    }
}

/// A round trip failed with `e` (nothing is counted for an expected reply).
pub(crate) fn failed(e: &RedisStoreError) {
    if let Some(kind) = error_kind(e) {
        metrics::counter!(ERRORS_METRIC, "kind" => kind).increment(1);
    }
}

/// A write was not confirmed by as many replicas as replicated durability asks.
pub(crate) fn unconfirmed() {
    metrics::counter!(UNCONFIRMED_METRIC).increment(1);
}

/// Whether Redis answered the last check.
pub(crate) fn up(answered: bool) {
    metrics::gauge!(UP_METRIC).set(if answered { 1.0 } else { 0.0 });
}

/// The `kind` of a failure (`None`: an expected reply, like `BUSYGROUP`).
pub(crate) fn error_kind(e: &RedisStoreError) -> Option<&'static str> {
    Some(match e {
        RedisStoreError::Timeout(_) => "timeout",
        RedisStoreError::Unreachable(_) => "unreachable",
        RedisStoreError::Redis(r) => match r.code() {
            Some("BUSYGROUP") => return None,
            Some("OOM") => "oom",
            Some("READONLY") => "readonly",
            Some("LOADING") => "loading",
            Some(_) => "server",
            None if r.is_timeout() => "timeout",
            None if r.is_io_error() || r.is_connection_dropped() || r.is_connection_refusal() => "io",
            None => "other",
        },
        RedisStoreError::Pool(_)
        | RedisStoreError::Config(_)
        | RedisStoreError::Corrupt(_)
        | RedisStoreError::Unanswered(_) => "other",
        // Counted by `unconfirmed`: the round trip itself succeeded.
        RedisStoreError::Unconfirmed { .. } => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_bounded() {
        assert_eq!(command_operation(b"HGET"), "hget");
        assert_eq!(command_operation(b"get"), "get");
        assert_eq!(command_operation(b"FLUSHALL"), "other");
        let server = |kind| RedisStoreError::Redis(redis::RedisError::from((redis::ErrorKind::Server(kind), "x")));
        assert_eq!(error_kind(&server(redis::ServerErrorKind::ReadOnly)), Some("readonly"));
        assert_eq!(error_kind(&server(redis::ServerErrorKind::BusyLoading)), Some("loading"));
        assert_eq!(error_kind(&server(redis::ServerErrorKind::ResponseError)), Some("server"));
        assert_eq!(error_kind(&RedisStoreError::Timeout(Duration::from_secs(2))), Some("timeout"));
        assert_eq!(error_kind(&RedisStoreError::Unreachable("down".into())), Some("unreachable"));
    }
}
