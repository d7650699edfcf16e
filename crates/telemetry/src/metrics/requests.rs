//! The per-request series ([`REQUESTS`], [`REQUEST_DURATION`]) with their
//! handles resolved once ([`RequestMetrics`]), for the transport to record
//! every answered request without registering its series by key again.
//!
//! Registering a series (what the `counter!` and `histogram!` macros do each
//! time) hashes its key and looks it up in the recorder's registry: a few
//! thousand instructions a request. The handles are resolved when
//! [`RequestMetrics::new`] runs, under the recorder in effect then (the
//! process-wide one a binary installs before it builds its router, or a
//! test's own), so a recorder installed later does not see them: build the
//! transport after installing the recorder.

use std::{sync::Arc, time::Duration};

use metrics::{Counter, Histogram, SharedString, counter, histogram};

use super::{REQUEST_DURATION, REQUESTS, request};

/// The handles of one method: its `ok` requests and its durations.
struct Handles {
    method: &'static str,
    ok: Counter,
    duration: Histogram,
}

/// [`REQUESTS`]`{method, outcome="ok"}` and [`REQUEST_DURATION`]`{method}`
/// of a fixed list of methods, resolved once (cheap to clone: shared).
/// [`record`](Self::record) of another method or another outcome (an error
/// code, `cancelled`) registers its series as [`request`] does.
#[derive(Clone)]
pub struct RequestMetrics {
    methods: Arc<[Handles]>,
}

impl std::fmt::Debug for RequestMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.methods.iter().map(|h| h.method)).finish()
    }
}

impl RequestMetrics {
    /// The handles of `methods` (the transport's method table), from the
    /// recorder in effect now.
    pub fn new(methods: impl IntoIterator<Item = &'static str>) -> Self {
        let methods = methods
            .into_iter()
            .map(|method| Handles {
                method,
                ok: counter!(REQUESTS, "method" => method, "outcome" => "ok"),
                duration: histogram!(REQUEST_DURATION, "method" => method),
            })
            .collect();
        RequestMetrics { methods }
    }

    /// One MCP request answered, as [`request`] records it.
    pub fn record(&self, method: &'static str, outcome: impl Into<SharedString>, elapsed: Duration) {
        let Some(h) = self.methods.iter().find(|h| h.method == method) else {
            return request(method, outcome, elapsed);
        };
        let outcome = outcome.into();
        if &*outcome == "ok" {
            h.ok.increment(1);
        } else {
            counter!(REQUESTS, "method" => method, "outcome" => outcome).increment(1);
        }
        h.duration.record(elapsed.as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use std::{
        collections::HashMap,
        sync::{
            Mutex,
            atomic::{AtomicU64, AtomicUsize, Ordering},
        },
    };

    use metrics::{Gauge, Key, KeyName, Metadata, Recorder, Unit};

    use super::*;

    /// Counters and histograms by key (a histogram counts its samples), and
    /// how many times a series was registered.
    #[derive(Default)]
    struct Counting {
        series: Mutex<HashMap<String, Arc<AtomicU64>>>,
        registrations: AtomicUsize,
    }

    impl Counting {
        fn handle(&self, key: &Key) -> Arc<AtomicU64> {
            self.registrations.fetch_add(1, Ordering::Relaxed);
            let mut labels: Vec<String> = key.labels().map(|l| format!("{}={}", l.key(), l.value())).collect();
            labels.sort();
            let name = format!("{}{{{}}}", key.name(), labels.join(","));
            self.series.lock().unwrap().entry(name).or_default().clone()
        }

        fn value(&self, series: &str) -> u64 {
            self.series.lock().unwrap().get(series).map_or(0, |v| v.load(Ordering::Relaxed))
        }
    }

    struct Samples(Arc<AtomicU64>);

    impl metrics::HistogramFn for Samples {
        fn record(&self, _: f64) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    impl Recorder for Counting {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
            Counter::from_arc(self.handle(key))
        }
        fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::from_arc(self.handle(key))
        }
        fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::from_arc(Arc::new(Samples(self.handle(key))))
        }
    }

    #[test]
    fn records_what_request_records_and_registers_ok_answers_once() {
        let recorder = Counting::default();
        let metrics = metrics::with_local_recorder(&recorder, || RequestMetrics::new(["tasks/get", "tools/call"]));
        let resolved = recorder.registrations.load(Ordering::Relaxed);
        assert_eq!(resolved, 4, "a counter and a histogram a method");

        // Outside the recorder's scope: the handles alone carry the `ok` answers.
        for _ in 0..3 {
            metrics.record("tasks/get", "ok", Duration::from_millis(1));
        }
        metrics.record("tools/call", "ok", Duration::from_millis(1));
        assert_eq!(recorder.registrations.load(Ordering::Relaxed), resolved, "no registration for an ok answer");
        assert_eq!(recorder.value("presa_requests_total{method=tasks/get,outcome=ok}"), 3);
        assert_eq!(recorder.value("presa_requests_total{method=tools/call,outcome=ok}"), 1);
        assert_eq!(recorder.value("presa_request_duration_seconds{method=tasks/get}"), 3);

        // Another outcome, or a method outside the list, is recorded as `request` does.
        metrics::with_local_recorder(&recorder, || {
            metrics.record("tasks/get", String::from("-32602"), Duration::ZERO);
            metrics.record("unknown", "-32700", Duration::ZERO);
        });
        assert_eq!(recorder.value("presa_requests_total{method=tasks/get,outcome=-32602}"), 1);
        assert_eq!(recorder.value("presa_request_duration_seconds{method=tasks/get}"), 4);
        assert_eq!(recorder.value("presa_requests_total{method=unknown,outcome=-32700}"), 1);
        assert_eq!(recorder.value("presa_request_duration_seconds{method=unknown}"), 1);
    }
}
