//! Prometheus metrics: the recorder, and every `presa_*` series named here.
//!
//! Code records through the functions below (the `metrics` facade: a no-op
//! until `install` (feature `exporters`) sets the process-wide recorder), and
//! `/metrics` renders with the `PrometheusHandle` that `install` returns. Label values are
//! bounded: methods outside the method table count as `unknown`, outcomes are
//! `ok`, `cancelled` or a JSON-RPC error code.

use std::time::Duration;

use metrics::{counter, gauge, histogram};
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
/// Work claimed again after an earlier delivery (lease lapsed, handed back, worker died).
pub const WORK_RECLAIMS: &str = "presa_work_reclaims_total";
/// Tasks failed for having been delivered too often.
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
/// Redis reconnects, by `connection` (`pubsub`: the pub/sub hub re-connected and re-subscribed).
/// Recorded by `presa-store-redis` (its `RECONNECTS_METRIC`).
pub const REDIS_RECONNECTS: &str = "presa_redis_reconnects_total";
/// Detected losses of Redis's data (its epoch key vanished or changed).
/// Recorded by `presa-store-redis` (its `DATA_LOSS_METRIC`).
pub const STORE_DATA_LOSS: &str = "presa_store_data_loss_total";

#[cfg(feature = "exporters")]
mod recorder {
    use std::{sync::OnceLock, time::Duration};

    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    pub use metrics_exporter_prometheus::PrometheusHandle;
    use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};

    use super::*;

    /// Buckets of [`REQUEST_DURATION`], in seconds.
    const DURATION_BUCKETS: &[f64] =
        &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

    /// How often histograms are drained when nobody scrapes.
    const UPKEEP_EVERY: Duration = Duration::from_secs(5);

    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

    /// Install the Prometheus recorder as the process-wide `metrics` recorder
    /// (once; later calls return the same handle) and describe every series.
    pub fn install() -> PrometheusHandle {
        HANDLE
            .get_or_init(|| {
                let recorder = PrometheusBuilder::new()
                    .set_buckets_for_metric(Matcher::Full(REQUEST_DURATION.to_string()), DURATION_BUCKETS)
                    .expect("the bucket list is not empty")
                    .build_recorder();
                let handle = recorder.handle();
                if metrics::set_global_recorder(recorder).is_err() {
                    tracing::warn!("another metrics recorder is installed; presa's /metrics will not see its series");
                }
                describe();
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
        describe_counter!(WORK_RECLAIMS, "Work claimed again after an earlier delivery.");
        describe_counter!(POISON_TASKS, "Tasks failed after too many deliveries.");
        describe_gauge!(LISTEN_STREAMS, "Open subscriptions/listen streams on this process.");
        describe_counter!(STORE_ERRORS, "Failed store operations, by operation.");
        describe_gauge!(WORK_QUEUED, "Work items waiting for a worker, by partition.");
        describe_gauge!(WORK_PENDING, "Work items delivered to a worker and not finished, by partition.");
        describe_gauge!(
            WORK_OLDEST_PENDING_AGE,
            Unit::Seconds,
            "Age since enqueue of the oldest delivered, unfinished work item, by partition (0 when none)."
        );
        describe_counter!(REDIS_RECONNECTS, "Redis reconnects, by connection (pubsub).");
        describe_counter!(STORE_DATA_LOSS, "Detected losses of Redis's data (epoch key vanished or changed).");
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

/// Work was claimed on a later delivery.
pub fn work_reclaimed() {
    counter!(WORK_RECLAIMS).increment(1);
}

/// A task failed as poison.
pub fn poison_task() {
    counter!(POISON_TASKS).increment(1);
}

/// A store operation failed.
pub fn store_error(operation: &'static str) {
    counter!(STORE_ERRORS, "operation" => operation).increment(1);
}

/// Open listen streams right now.
pub fn listen_streams(open: usize) {
    gauge!(LISTEN_STREAMS).set(open as f64);
}

/// The work queue of one partition right now.
pub fn work_queue(partition: u16, queued: u64, pending: u64, oldest_pending_age: Option<Duration>) {
    let p = partition.to_string();
    gauge!(WORK_QUEUED, "partition" => p.clone()).set(queued as f64);
    gauge!(WORK_PENDING, "partition" => p.clone()).set(pending as f64);
    gauge!(WORK_OLDEST_PENDING_AGE, "partition" => p).set(oldest_pending_age.map_or(0.0, |d| d.as_secs_f64()));
}
