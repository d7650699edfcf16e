//! Prometheus metrics: the recorder, and every `presa_*` series named here.
//!
//! Code records through the functions below (the `metrics` facade: a no-op
//! until `install` (feature `exporters`) sets the process-wide recorder), and
//! `/metrics` renders with the `PrometheusHandle` that `install` returns. Label values are
//! bounded: methods outside the method table count as `unknown`, outcomes are
//! `ok`, `cancelled` or a JSON-RPC error code; every other label takes its
//! values from a fixed list in the code (a status, a limit's name, a
//! partition number, a pool). Never a task id, a principal or a tool argument.
//!
//! The series a dashboard or an alert reads exist from the start with their
//! zero value (`install` registers them, [`worker_capacity`] and the Redis
//! store register theirs when they start), so a panel shows `0`, not "no
//! data", and `rate()` and `increase()` see the first event.
//!
//! Two crates below this one record their own series through the `metrics`
//! facade (they do not depend on this crate), under the names listed here:
//! `presa-store` ([`QUOTA_USAGE`]) and `presa-store-redis` ([`REDIS_RECONNECTS`],
//! [`STORE_DATA_LOSS`], [`REDIS_COMMAND_DURATION`], [`REDIS_ERRORS`], [`REDIS_UP`]);
//! `install` describes them and sets their buckets.

use std::time::Duration;

use metrics::{Gauge, counter, gauge, histogram};
#[cfg(feature = "exporters")]
pub use recorder::{PrometheusHandle, install};

/// MCP requests answered, by `method` and `outcome` (`ok`, `cancelled`, or the JSON-RPC error code).
pub const REQUESTS: &str = "presa_requests_total";
/// Time to answer an MCP request, by `method` (streams: until the last message).
pub const REQUEST_DURATION: &str = "presa_request_duration_seconds";
/// Task status changes committed, by the new `status` (creation counts as `working`).
pub const TASK_TRANSITIONS: &str = "presa_task_transitions_total";
/// Tasks created.
pub const TASKS_CREATED: &str = "presa_tasks_created_total";
/// Work items a worker claimed (every delivery: first runs and re-runs).
pub const WORK_CLAIMS: &str = "presa_work_claims_total";
/// Work claimed again after an earlier delivery (lease lapsed, handed back, worker died): re-runs.
pub const WORK_RECLAIMS: &str = "presa_work_reclaims_total";
/// Tasks failed for having been delivered too often (the dead letters).
pub const POISON_TASKS: &str = "presa_poison_tasks_total";
/// Open `subscriptions/listen` streams on this process.
pub const LISTEN_STREAMS: &str = "presa_listen_streams";
/// Failed store operations, by `operation`.
pub const STORE_ERRORS: &str = "presa_store_errors_total";
/// Work items waiting for a worker, by `partition`.
pub const WORK_QUEUED: &str = "presa_work_queued";
/// Work items delivered to a worker and not finished, by `partition`.
pub const WORK_PENDING: &str = "presa_work_pending";
/// Age (since it was enqueued) of the oldest delivered, unfinished work item, by `partition`; 0 when none.
pub const WORK_OLDEST_PENDING_AGE: &str = "presa_work_oldest_pending_age_seconds";
/// Age (since it was enqueued) of the oldest work item waiting for a worker, by `partition`; 0 when none.
pub const WORK_OLDEST_QUEUED_AGE: &str = "presa_work_oldest_queued_age_seconds";
/// Handler slots of this worker, by `pool` (`run`: handlers doing work at
/// once, `--concurrency`; `parked`: handlers waiting for input without a run slot, `--max-parked`).
pub const WORKER_SLOTS: &str = "presa_worker_slots";
/// Handler slots of this worker in use, by `pool` (as [`WORKER_SLOTS`]).
pub const WORKER_SLOTS_IN_USE: &str = "presa_worker_slots_in_use";
/// Tasks this worker holds a lease on, by `state` (`running`, or
/// `input_required`: parked until the client answers).
pub const WORKER_TASKS: &str = "presa_worker_tasks";
/// Requests refused for a limit or quota, by `limit` (its setting's name, see [`REFUSAL_LIMITS`]).
pub const REFUSALS: &str = "presa_refusals_total";
/// A principal's use of a per-principal quota after each accepted task
/// creation, as a fraction of the quota, by `quota` (`max_active_tasks_per_scope`,
/// `max_bytes_per_scope`). Recorded by the stores (`presa_store::metrics`).
pub const QUOTA_USAGE: &str = "presa_quota_usage_ratio";
/// Redis reconnects, by `connection` (`pubsub`: the pub/sub hub re-connected and re-subscribed).
/// Recorded by `presa-store-redis` (its `RECONNECTS_METRIC`).
pub const REDIS_RECONNECTS: &str = "presa_redis_reconnects_total";
/// Detected losses of Redis's data (its epoch key vanished or changed).
/// Recorded by `presa-store-redis` (its `DATA_LOSS_METRIC`).
pub const STORE_DATA_LOSS: &str = "presa_store_data_loss_total";
/// Writes `--durability replicated` could not confirm: `WAIT` answered fewer
/// replicas than asked in time (the write is on the primary only). Recorded
/// by `presa-store-redis`.
pub const REDIS_UNCONFIRMED_WRITES: &str = "presa_redis_unconfirmed_writes_total";
/// Time of one Redis round trip (a command or a script; blocking reads
/// excluded), by `operation` (the script's name, or the command's in lower case).
/// Recorded by `presa-store-redis`.
pub const REDIS_COMMAND_DURATION: &str = "presa_redis_command_duration_seconds";
/// Failed Redis round trips, by `kind` (`timeout`, `unreachable`, `io`, `oom`,
/// `readonly`, `loading`, `server`, `other`). Recorded by `presa-store-redis`.
pub const REDIS_ERRORS: &str = "presa_redis_errors_total";
/// 1 when Redis answered this process's last periodic check (the epoch
/// check, every `--store-epoch-check-ms`), else 0. Recorded by `presa-store-redis`.
pub const REDIS_UP: &str = "presa_redis_up";

/// The outcomes of [`REQUESTS`] registered at zero for every method
/// ([`register_requests`]): success, a client's bad params, a server-side
/// failure (what the API error-ratio alert counts). Other outcomes appear
/// when they first happen.
pub const REQUEST_OUTCOMES_AT_ZERO: &[&str] = &["ok", "-32602", "-32603"];
/// Every status a task can enter (the `status` values of [`TASK_TRANSITIONS`]).
pub const TASK_STATUSES: &[&str] = &["working", "input_required", "completed", "failed", "cancelled"];
/// Every limit a request can be refused for (the `limit` values of [`REFUSALS`]):
/// per principal (`*_per_scope`), per process, per partition (`max_queued`) or per task.
pub const REFUSAL_LIMITS: &[&str] = &[
    "max_active_tasks_per_scope",
    "max_bytes_per_scope",
    "max_listen_streams_per_scope",
    "max_listen_streams",
    "max_inflight_calls_per_scope",
    "max_inflight_calls",
    "call_timeout",
    "max_subscription_uri_bytes",
    "max_legacy_session_fields",
    "max_legacy_session_bytes",
    "max_legacy_sessions_per_scope",
    "max_legacy_sessions",
    "max_queued",
    "max_task_input_bytes",
    "max_idempotency_key_bytes",
    "idempotency_key_reused",
    "max_task_bytes",
    "max_tasks",
    "max_memory_bytes",
];
/// The store operations the server calls (the `operation` values of [`STORE_ERRORS`]).
pub const STORE_OPERATIONS: &[&str] = &[
    "create",
    "get",
    "load",
    "transition",
    "conclude",
    "claim",
    "renew",
    "release",
    "remove_work",
    "watch",
    "work_stats",
];

#[cfg(feature = "exporters")]
mod recorder {
    use std::{sync::OnceLock, time::Duration};

    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    pub use metrics_exporter_prometheus::PrometheusHandle;
    use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};

    use super::*;

    /// Buckets of [`REQUEST_DURATION`], in seconds: also every other
    /// histogram's unless it has its own below (so each is a Prometheus
    /// histogram, summed over pods, never a per-pod summary).
    const DURATION_BUCKETS: &[f64] =
        &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];
    /// Buckets of [`REDIS_COMMAND_DURATION`], in seconds (a command times out after 2 s by default).
    const REDIS_BUCKETS: &[f64] = &[0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5];
    /// Buckets of [`QUOTA_USAGE`]: the thresholds alerts and panels ask about.
    const RATIO_BUCKETS: &[f64] = &[0.25, 0.5, 0.8, 0.9, 0.95, 1.0];

    /// How often histograms are drained when nobody scrapes.
    const UPKEEP_EVERY: Duration = Duration::from_secs(5);

    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

    /// Install the Prometheus recorder as the process-wide `metrics` recorder
    /// (once; later calls return the same handle), describe every series and
    /// register the process-wide ones at zero.
    pub fn install() -> PrometheusHandle {
        HANDLE
            .get_or_init(|| {
                let recorder = PrometheusBuilder::new()
                    .set_buckets(DURATION_BUCKETS)
                    .and_then(|b| b.set_buckets_for_metric(Matcher::Full(REDIS_COMMAND_DURATION.into()), REDIS_BUCKETS))
                    .and_then(|b| b.set_buckets_for_metric(Matcher::Full(QUOTA_USAGE.into()), RATIO_BUCKETS))
                    .expect("the bucket lists are not empty")
                    .build_recorder();
                let handle = recorder.handle();
                if metrics::set_global_recorder(recorder).is_err() {
                    tracing::warn!("another metrics recorder is installed; presa's /metrics will not see its series");
                }
                describe();
                register_at_zero();
                let upkeep = handle.clone();
                let spawned = std::thread::Builder::new().name("presa-metrics".into()).spawn(move || {
                    loop {
                        std::thread::sleep(UPKEEP_EVERY);
                        upkeep.run_upkeep();
                    }
                });
                if let Err(e) = spawned {
                    tracing::warn!(error = %e, "no metrics upkeep thread; histograms drain on scrape only");
                }
                handle
            })
            .clone()
    }

    fn describe() {
        describe_counter!(
            REQUESTS,
            "MCP requests answered, by method and outcome (ok, cancelled, or JSON-RPC error code)."
        );
        describe_histogram!(REQUEST_DURATION, Unit::Seconds, "Time to answer an MCP request, by method.");
        describe_counter!(
            TASK_TRANSITIONS,
            "Task status changes committed, by new status (creation counts as working)."
        );
        describe_counter!(TASKS_CREATED, "Tasks created.");
        describe_counter!(WORK_CLAIMS, "Work items claimed by this worker (first runs and re-runs).");
        describe_counter!(WORK_RECLAIMS, "Work claimed again after an earlier delivery (re-runs).");
        describe_counter!(POISON_TASKS, "Tasks failed after too many deliveries (dead letters).");
        describe_gauge!(LISTEN_STREAMS, "Open subscriptions/listen streams on this process.");
        describe_counter!(STORE_ERRORS, "Failed store operations, by operation.");
        describe_gauge!(WORK_QUEUED, "Work items waiting for a worker, by partition.");
        describe_gauge!(WORK_PENDING, "Work items delivered to a worker and not finished, by partition.");
        describe_gauge!(
            WORK_OLDEST_PENDING_AGE,
            Unit::Seconds,
            "Age since enqueue of the oldest delivered, unfinished work item, by partition (0 when none)."
        );
        describe_gauge!(
            WORK_OLDEST_QUEUED_AGE,
            Unit::Seconds,
            "Age since enqueue of the oldest work item waiting for a worker, by partition (0 when none)."
        );
        describe_gauge!(WORKER_SLOTS, "Handler slots of this worker, by pool (run, parked).");
        describe_gauge!(WORKER_SLOTS_IN_USE, "Handler slots of this worker in use, by pool (run, parked).");
        describe_gauge!(WORKER_TASKS, "Tasks this worker holds a lease on, by state (running, input_required).");
        describe_counter!(REFUSALS, "Requests refused for a limit or quota, by limit.");
        describe_histogram!(
            QUOTA_USAGE,
            "A principal's use of a per-principal quota after each task it created, as a fraction, by quota."
        );
        describe_counter!(REDIS_RECONNECTS, "Redis reconnects, by connection (pubsub).");
        describe_counter!(
            REDIS_UNCONFIRMED_WRITES,
            "Writes --durability replicated could not confirm in time (on the primary only)."
        );
        describe_counter!(STORE_DATA_LOSS, "Detected losses of Redis's data (epoch key vanished or changed).");
        describe_histogram!(
            REDIS_COMMAND_DURATION,
            Unit::Seconds,
            "Time of one Redis round trip (blocking reads excluded), by operation (script or command)."
        );
        describe_counter!(REDIS_ERRORS, "Failed Redis round trips, by kind.");
        describe_gauge!(REDIS_UP, "1 when Redis answered this process's last periodic check, else 0.");
    }
}

/// Register the process-wide series at zero (done by `install`): a counter
/// that never moved still renders, so dashboards and alerts see `0`.
pub fn register_at_zero() {
    counter!(TASKS_CREATED).absolute(0);
    for status in TASK_STATUSES {
        counter!(TASK_TRANSITIONS, "status" => *status).absolute(0);
    }
    counter!(WORK_CLAIMS).absolute(0);
    counter!(WORK_RECLAIMS).absolute(0);
    counter!(POISON_TASKS).absolute(0);
    for limit in REFUSAL_LIMITS {
        counter!(REFUSALS, "limit" => *limit).absolute(0);
    }
    for operation in STORE_OPERATIONS {
        counter!(STORE_ERRORS, "operation" => *operation).absolute(0);
    }
    gauge!(LISTEN_STREAMS).set(0.0);
}

/// Register [`REQUESTS`] at zero for each of `methods` (the transport's
/// method table) and each of [`REQUEST_OUTCOMES_AT_ZERO`], so `rate()` sees a
/// method's first requests and first errors (a counter series born with a
/// value loses its first increments to `rate()`).
pub fn register_requests(methods: impl IntoIterator<Item = &'static str>) {
    for method in methods {
        for outcome in REQUEST_OUTCOMES_AT_ZERO {
            counter!(REQUESTS, "method" => method, "outcome" => *outcome).absolute(0);
        }
    }
}

/// One MCP request answered.
pub fn request(method: &'static str, outcome: impl Into<String>, elapsed: Duration) {
    counter!(REQUESTS, "method" => method, "outcome" => outcome.into()).increment(1);
    histogram!(REQUEST_DURATION, "method" => method).record(elapsed.as_secs_f64());
}

/// A task was created (and entered `working`).
pub fn task_created() {
    counter!(TASKS_CREATED).increment(1);
    task_transition("working");
}

/// A task entered `status`.
pub fn task_transition(status: &'static str) {
    counter!(TASK_TRANSITIONS, "status" => status).increment(1);
}

/// A worker claimed a work item (`redelivered`: not its first delivery, a re-run).
pub fn work_claimed(redelivered: bool) {
    counter!(WORK_CLAIMS).increment(1);
    if redelivered {
        counter!(WORK_RECLAIMS).increment(1);
    }
}

/// A task failed as poison.
pub fn poison_task() {
    counter!(POISON_TASKS).increment(1);
}

/// A store operation failed.
pub fn store_error(operation: &'static str) {
    counter!(STORE_ERRORS, "operation" => operation).increment(1);
}

/// A request was refused for `limit` (one of [`REFUSAL_LIMITS`]).
pub fn refusal(limit: &'static str) {
    counter!(REFUSALS, "limit" => limit).increment(1);
}

/// Open listen streams right now.
pub fn listen_streams(open: usize) {
    gauge!(LISTEN_STREAMS).set(open as f64);
}

/// The work queue of one partition right now.
pub fn work_queue(
    partition: u16,
    queued: u64,
    pending: u64,
    oldest_pending_age: Option<Duration>,
    oldest_queued_age: Option<Duration>,
) {
    let p = partition.to_string();
    let secs = |age: Option<Duration>| age.map_or(0.0, |d| d.as_secs_f64());
    gauge!(WORK_QUEUED, "partition" => p.clone()).set(queued as f64);
    gauge!(WORK_PENDING, "partition" => p.clone()).set(pending as f64);
    gauge!(WORK_OLDEST_PENDING_AGE, "partition" => p.clone()).set(secs(oldest_pending_age));
    gauge!(WORK_OLDEST_QUEUED_AGE, "partition" => p).set(secs(oldest_queued_age));
}

/// The gauges a worker keeps up to date as its handlers start, park, resume
/// and end (handles resolved once: a change is one atomic add).
#[derive(Debug, Clone)]
pub struct WorkerGauges {
    /// [`WORKER_SLOTS_IN_USE`]`{pool="run"}`.
    pub run_slots_in_use: Gauge,
    /// [`WORKER_SLOTS_IN_USE`]`{pool="parked"}`.
    pub parked_slots_in_use: Gauge,
    /// [`WORKER_TASKS`]`{state="running"}`.
    pub running: Gauge,
    /// [`WORKER_TASKS`]`{state="input_required"}`.
    pub input_required: Gauge,
}

/// A worker starting with `run` run slots and `parked` parked slots: its
/// capacity ([`WORKER_SLOTS`]), and the gauges of what it holds, registered
/// at zero and to be moved by the worker.
pub fn worker_capacity(run: usize, parked: usize) -> WorkerGauges {
    gauge!(WORKER_SLOTS, "pool" => "run").set(run as f64);
    gauge!(WORKER_SLOTS, "pool" => "parked").set(parked as f64);
    let gauges = WorkerGauges {
        run_slots_in_use: gauge!(WORKER_SLOTS_IN_USE, "pool" => "run"),
        parked_slots_in_use: gauge!(WORKER_SLOTS_IN_USE, "pool" => "parked"),
        running: gauge!(WORKER_TASKS, "state" => "running"),
        input_required: gauge!(WORKER_TASKS, "state" => "input_required"),
    };
    for g in [&gauges.run_slots_in_use, &gauges.parked_slots_in_use, &gauges.running, &gauges.input_required] {
        g.increment(0.0);
    }
    gauges
}

#[cfg(all(test, feature = "exporters"))]
mod tests {
    use super::*;

    /// The value of the series `name{labels}` in `scrape` (exact text).
    fn value(scrape: &str, series: &str) -> Option<f64> {
        scrape.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
    }

    #[test]
    fn installed_series_render_at_zero_and_move() {
        let handle = install();
        let _worker = worker_capacity(4, 8);
        register_requests(["tools/call", "tasks/get"]);
        let scrape = handle.render();
        // Every series a panel or an alert reads, before anything happened.
        assert_eq!(value(&scrape, "presa_tasks_created_total"), Some(0.0), "{scrape}");
        for status in TASK_STATUSES {
            let series = format!("presa_task_transitions_total{{status=\"{status}\"}}");
            assert!(value(&scrape, &series).is_some(), "{series} missing:\n{scrape}");
        }
        for limit in REFUSAL_LIMITS {
            let series = format!("presa_refusals_total{{limit=\"{limit}\"}}");
            assert!(value(&scrape, &series).is_some(), "{series} missing:\n{scrape}");
        }
        for operation in STORE_OPERATIONS {
            let series = format!("presa_store_errors_total{{operation=\"{operation}\"}}");
            assert!(value(&scrape, &series).is_some(), "{series} missing:\n{scrape}");
        }
        for series in ["presa_work_claims_total", "presa_work_reclaims_total", "presa_poison_tasks_total"] {
            assert!(value(&scrape, series).is_some(), "{series} missing:\n{scrape}");
        }
        assert_eq!(value(&scrape, "presa_listen_streams"), Some(0.0), "{scrape}");
        assert_eq!(value(&scrape, "presa_worker_slots{pool=\"run\"}"), Some(4.0), "{scrape}");
        assert_eq!(value(&scrape, "presa_worker_slots{pool=\"parked\"}"), Some(8.0), "{scrape}");
        for series in [
            "presa_worker_slots_in_use{pool=\"run\"}",
            "presa_worker_slots_in_use{pool=\"parked\"}",
            "presa_worker_tasks{state=\"running\"}",
            "presa_worker_tasks{state=\"input_required\"}",
        ] {
            assert_eq!(value(&scrape, series), Some(0.0), "{series}:\n{scrape}");
        }
        assert!(scrape.contains("# HELP presa_refusals_total "), "described:\n{scrape}");
        for series in [
            "presa_requests_total{method=\"tools/call\",outcome=\"ok\"}",
            "presa_requests_total{method=\"tasks/get\",outcome=\"-32603\"}",
        ] {
            assert_eq!(value(&scrape, series), Some(0.0), "{series}:\n{scrape}");
        }

        refusal("max_queued");
        work_claimed(true);
        work_queue(3, 5, 1, Some(Duration::from_secs(2)), Some(Duration::from_millis(1500)));
        histogram!(QUOTA_USAGE, "quota" => "max_bytes_per_scope").record(0.85);
        histogram!(REDIS_COMMAND_DURATION, "operation" => "get").record(0.0007);
        let scrape = handle.render();
        assert!(value(&scrape, "presa_refusals_total{limit=\"max_queued\"}").unwrap() >= 1.0, "{scrape}");
        assert!(value(&scrape, "presa_work_reclaims_total").unwrap() >= 1.0, "{scrape}");
        assert_eq!(value(&scrape, "presa_work_oldest_queued_age_seconds{partition=\"3\"}"), Some(1.5), "{scrape}");
        // Histograms with their own buckets, rendered as histograms (not summaries).
        let ratio = "presa_quota_usage_ratio_bucket{quota=\"max_bytes_per_scope\",le=\"0.8\"}";
        assert_eq!(value(&scrape, ratio), Some(0.0), "{scrape}");
        let ratio = "presa_quota_usage_ratio_bucket{quota=\"max_bytes_per_scope\",le=\"0.9\"}";
        assert_eq!(value(&scrape, ratio), Some(1.0), "{scrape}");
        let redis = "presa_redis_command_duration_seconds_bucket{operation=\"get\",le=\"0.001\"}";
        assert_eq!(value(&scrape, redis), Some(1.0), "{scrape}");
        assert!(scrape.contains("# TYPE presa_redis_command_duration_seconds histogram"), "{scrape}");
    }
}
