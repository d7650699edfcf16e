//! The Prometheus recorder (feature `exporters`): [`install`] sets it as the
//! process-wide `metrics` recorder, describes every `presa_*` series, gives
//! the histograms their buckets and registers the process-wide series at zero.

use std::{sync::OnceLock, time::Duration};

use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
pub use metrics_exporter_prometheus::PrometheusHandle;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};

use super::*;

/// Buckets of [`REQUEST_DURATION`], in seconds: also every other
/// histogram's unless it has its own below (so each is a Prometheus
/// histogram, summed over pods, never a per-pod summary).
const DURATION_BUCKETS: &[f64] = &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];
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
    describe_counter!(TASK_TRANSITIONS, "Task status changes committed, by new status (creation counts as working).");
    describe_counter!(TASKS_CREATED, "Tasks created.");
    describe_counter!(WORK_CLAIMS, "Work items claimed by this worker (first runs and re-runs).");
    describe_counter!(WORK_RECLAIMS, "Work claimed again after an earlier delivery (re-runs).");
    describe_counter!(POISON_TASKS, "Tasks failed after too many deliveries (dead letters).");
    describe_counter!(TASK_RETRIES, "Tries that failed transiently and were put off, by tool and reason.");
    describe_counter!(TASK_RETRIES_EXHAUSTED, "Tasks failed because their last allowed try failed, by tool.");
    describe_counter!(TOOL_THROTTLED, "Calls of a rate-limited tool held back by its rate, by tool.");
    describe_gauge!(TOOL_PERMITS_HELD, "Permits of a tool's concurrency limit held by this process, by tool.");
    describe_counter!(TOOL_PERMIT_WAITS, "Runs of a concurrency-limited tool that waited for a permit, by tool.");
    describe_gauge!(WORK_DELAYED, "Work items put off until a time (retries), by partition.");
    describe_gauge!(
        WORK_OLDEST_DUE_AGE,
        Unit::Seconds,
        "How late the earliest due delayed work item is (0: none due), by partition."
    );
    describe_counter!(ADMIN_ACTIONS_TOTAL, "Operators' admin actions that took effect, by action.");
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
    breakers::describe();
}

#[cfg(test)]
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
        for action in ADMIN_ACTIONS {
            let series = format!("presa_admin_actions_total{{action=\"{action}\"}}");
            assert_eq!(value(&scrape, &series), Some(0.0), "{series} missing:\n{scrape}");
        }
        for limit in Limit::ALL {
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

        refusal(Limit::MaxQueued);
        work_claimed(true);
        let gauges = QueueGauges {
            queued: 5,
            pending: 1,
            delayed: 4,
            oldest_pending_age: Some(Duration::from_secs(2)),
            oldest_queued_age: Some(Duration::from_millis(1500)),
            oldest_due_age: Some(Duration::from_millis(250)),
        };
        work_queue(3, gauges);
        task_retried("deploy", true);
        admin_action("replay");
        histogram!(QUOTA_USAGE, "quota" => "max_bytes_per_scope").record(0.85);
        histogram!(REDIS_COMMAND_DURATION, "operation" => "get").record(0.0007);
        let scrape = handle.render();
        assert!(value(&scrape, "presa_refusals_total{limit=\"max_queued\"}").unwrap() >= 1.0, "{scrape}");
        assert!(value(&scrape, "presa_work_reclaims_total").unwrap() >= 1.0, "{scrape}");
        assert_eq!(value(&scrape, "presa_work_oldest_queued_age_seconds{partition=\"3\"}"), Some(1.5), "{scrape}");
        assert_eq!(value(&scrape, "presa_work_delayed{partition=\"3\"}"), Some(4.0), "{scrape}");
        assert_eq!(value(&scrape, "presa_work_oldest_due_age_seconds{partition=\"3\"}"), Some(0.25), "{scrape}");
        let retried = "presa_task_retries_total{tool=\"deploy\",reason=\"retry_after\"}";
        assert!(value(&scrape, retried).unwrap() >= 1.0, "{scrape}");
        assert!(value(&scrape, "presa_admin_actions_total{action=\"replay\"}").unwrap() >= 1.0, "{scrape}");
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
