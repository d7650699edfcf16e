//! The series a store records itself, through the `metrics` facade (a no-op
//! until a binary installs a recorder; `presa-telemetry` describes them and
//! sets their buckets): what only the store sees when it creates a task.
//!
//! [`QUOTA_USAGE`]: how full a principal's quotas are after each task it
//! created. The principal is not a label (that would be one series per
//! principal); the histogram counts creates by how close their principal
//! was to its quota, so "a principal above 80 % of a quota is creating tasks"
//! is a bucket query, at the cost of one observation per create and per
//! quota, with values the create's own step computed anyway.

/// Finished tasks the in-memory store evicted before their TTL to make room
/// for a new one (embedded mode, at `--max-tasks` or `--max-memory-bytes`).
pub const EVICTED: &str = "presa_memory_evicted_tasks_total";

/// A principal's use of a per-principal quota after each accepted create,
/// as a fraction of the quota (histogram), by `quota`.
pub const QUOTA_USAGE: &str = "presa_quota_usage_ratio";

/// The `quota` label of the active-tasks limit (`CreateLimits::max_active_per_scope`).
pub const ACTIVE_TASKS_QUOTA: &str = crate::Limit::MaxActiveTasksPerScope.as_str();
/// The `quota` label of the byte quota (`CreateLimits::max_bytes_per_scope`).
pub const BYTES_QUOTA: &str = crate::Limit::MaxBytesPerScope.as_str();

/// Register [`QUOTA_USAGE`] for both quotas (no observation yet), so the
/// series exist before the first create.
pub fn register_quota_usage() {
    for quota in [ACTIVE_TASKS_QUOTA, BYTES_QUOTA] {
        let _ = ::metrics::histogram!(QUOTA_USAGE, "quota" => quota);
    }
}

/// A create left its principal using `used` of `limit` under `quota`
/// (nothing is recorded without a limit).
pub fn quota_usage(quota: &'static str, used: u64, limit: Option<u64>) {
    if let Some(limit) = limit.filter(|l| *l > 0) {
        ::metrics::histogram!(QUOTA_USAGE, "quota" => quota).record(used as f64 / limit as f64);
    }
}

/// The in-memory store evicted a finished task to make room ([`EVICTED`]).
pub fn evicted() {
    ::metrics::counter!(EVICTED).increment(1);
}
