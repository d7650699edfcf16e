//! What the store tells operators: a client span per Redis round trip
//! (`redis EVALSHA <script>`, `redis <COMMAND>`, with the database
//! attributes and `error.type`), the pub/sub reconnect counter, and the
//! metrics of round trips, Redis's availability and principals' quota use.
//! This binary installs its own `metrics` recorder and tracing subscriber
//! (both process-wide), so it stays separate.

mod common;

use std::{
    collections::{BTreeMap, HashMap},
    sync::{
        Arc, Mutex, OnceLock,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use common::{NO_LIMITS, TestRedis, config, new_task, raw};
use presa_store::{TaskStore, WorkQueue};
use presa_store_redis::{RECONNECTS_METRIC, RedisStore};
use tracing::{
    Level, Subscriber,
    field::{Field, Visit},
    span::{Attributes, Id, Record},
};
use tracing_subscriber::{Layer, layer::Context, prelude::*, registry::LookupSpan};

/// A closed span: level and fields (as text).
#[derive(Debug, Clone)]
struct Closed {
    level: Level,
    fields: BTreeMap<String, String>,
}

#[derive(Default)]
struct Fields(BTreeMap<String, String>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_string(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }
}

/// Collects every closed span.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Closed>>>);

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        ctx.span(id).unwrap().extensions_mut().insert(fields);
    }
    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(fields) = ctx.span(id).unwrap().extensions_mut().get_mut::<Fields>() {
            values.record(fields);
        }
    }
    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let span = ctx.span(&id).unwrap();
        let fields = span.extensions_mut().remove::<Fields>().unwrap_or_default();
        self.0.lock().unwrap().push(Closed { level: *span.metadata().level(), fields: fields.0 });
    }
}

impl Capture {
    /// The process-wide capture (a global subscriber: a thread-local one can
    /// miss spans whose callsite another test's thread registered first).
    fn install() -> Capture {
        static CAPTURE: OnceLock<Capture> = OnceLock::new();
        CAPTURE
            .get_or_init(|| {
                let capture = Capture::default();
                tracing::subscriber::set_global_default(tracing_subscriber::registry().with(capture.clone()))
                    .expect("the only subscriber of this test binary");
                capture
            })
            .clone()
    }

    /// The closed spans named `name` of the store using key prefix `namespace`.
    fn named(&self, namespace: &str, name: &str) -> Vec<Closed> {
        let spans = self.0.lock().unwrap();
        let ours = |s: &&Closed| s.fields.get("db.namespace").is_some_and(|n| n == namespace);
        spans.iter().filter(ours).filter(|s| s.fields.get("otel.name").is_some_and(|n| n == name)).cloned().collect()
    }
}

#[tokio::test]
async fn every_round_trip_has_a_client_span() {
    let capture = Capture::install();
    let redis = TestRedis::start().await;
    let cfg = config(&redis).with_partitions(1);
    let prefix = cfg.prefix.clone();
    let store = RedisStore::connect(cfg).await.unwrap();
    let task = store.create(new_task(), NO_LIMITS).await.unwrap();
    store.load(&task.id).await.unwrap();
    store.work_stats().await.unwrap();
    store.claim("w", 1, Duration::from_secs(30), Duration::ZERO).await.unwrap();

    // Standalone Redis creates with one script (admission, quota, create).
    let create = capture.named(&prefix, "redis EVALSHA create_scoped");
    assert_eq!(create.len(), 1);
    let f = &create[0].fields;
    assert_eq!(create[0].level, Level::INFO);
    assert_eq!(f["otel.kind"], "client");
    assert_eq!(f["db.system.name"], "redis");
    assert_eq!(f["db.operation.name"], "EVALSHA");
    assert_eq!(f["db.stored_procedure.name"], "create_scoped");
    assert_eq!(f["db.namespace"], prefix);
    assert_eq!(f["server.address"], redis.url().split("://").nth(1).unwrap().rsplit_once(':').unwrap().0);
    assert_eq!(f["server.port"], redis.url().rsplit_once(':').unwrap().1);
    assert!(!f.contains_key("error.type"), "{f:?}");
    let get = capture.named(&prefix, "redis HGET");
    assert!(!get.is_empty() && get.iter().all(|s| s.level == Level::INFO && s.fields["db.operation.name"] == "HGET"));
    // The polls idle workers run all the time are at debug level.
    for poll in ["redis EVALSHA read", "redis EVALSHA work_stats"] {
        let spans = capture.named(&prefix, poll);
        assert!(!spans.is_empty() && spans.iter().all(|s| s.level == Level::DEBUG), "{poll}: {spans:?}");
    }
    assert!(capture.named(&prefix, "redis EVALSHA claim").iter().all(|s| s.level == Level::INFO));
    // Creating the existing consumer groups again (BUSYGROUP) is no failure.
    let xgroup = capture.named(&prefix, "redis XGROUP");
    assert!(!xgroup.is_empty() && xgroup.iter().all(|s| !s.fields.contains_key("error.type")), "{xgroup:?}");

    // A failing round trip records its error type.
    let mut c = raw(&redis).await;
    let work = store.keys().work(0);
    let _: () = redis::cmd("SET").arg(&work).arg("not a stream").query_async(&mut c).await.unwrap();
    store.create(new_task(), NO_LIMITS).await.expect_err("XADD on a string");
    let failed = capture.named(&prefix, "redis EVALSHA create_scoped");
    let f = &failed.last().unwrap().fields;
    assert_eq!(f.get("error.type").map(String::as_str), Some("WRONGTYPE"), "{f:?}");
    assert_eq!(f.get("otel.status_code").map(String::as_str), Some("error"), "{f:?}");
}

/// One histogram's observations.
#[derive(Debug, Default)]
struct Samples(Mutex<Vec<f64>>);

impl metrics::HistogramFn for Samples {
    fn record(&self, value: f64) {
        self.0.lock().unwrap().push(value);
    }
}

/// Counters by name (labels summed), gauges and histograms by `name{k=v,...}`.
#[derive(Debug, Default)]
struct Recorded {
    counters: Mutex<HashMap<String, Arc<AtomicU64>>>,
    gauges: Mutex<HashMap<String, Arc<AtomicU64>>>,
    histograms: Mutex<HashMap<String, Arc<Samples>>>,
}

/// `name{k=v,...}`, labels in the key's order.
fn series(key: &metrics::Key) -> String {
    let labels: Vec<String> = key.labels().map(|l| format!("{}={}", l.key(), l.value())).collect();
    format!("{}{{{}}}", key.name(), labels.join(","))
}

impl metrics::Recorder for Recorded {
    fn describe_counter(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}
    fn describe_gauge(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}
    fn describe_histogram(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}
    fn register_counter(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        let mut all = self.counters.lock().unwrap();
        metrics::Counter::from_arc(all.entry(key.name().to_string()).or_default().clone())
    }
    fn register_gauge(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        metrics::Gauge::from_arc(self.gauges.lock().unwrap().entry(series(key)).or_default().clone())
    }
    fn register_histogram(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Histogram {
        metrics::Histogram::from_arc(self.histograms.lock().unwrap().entry(series(key)).or_default().clone())
    }
}

fn recorded() -> &'static Recorded {
    static RECORDER: OnceLock<&'static Recorded> = OnceLock::new();
    RECORDER.get_or_init(|| {
        let recorder: &'static Recorded = Box::leak(Box::default());
        metrics::set_global_recorder(recorder).expect("the only recorder of this test binary");
        recorder
    })
}

fn counter(name: &str) -> u64 {
    recorded().counters.lock().unwrap().get(name).map_or(0, |c| c.load(Ordering::Relaxed))
}

fn gauge(series: &str) -> Option<f64> {
    recorded().gauges.lock().unwrap().get(series).map(|g| f64::from_bits(g.load(Ordering::Relaxed)))
}

fn observations(series: &str) -> Vec<f64> {
    recorded().histograms.lock().unwrap().get(series).map_or_else(Vec::new, |h| h.0.lock().unwrap().clone())
}

#[tokio::test]
async fn round_trips_are_timed_and_their_failures_counted() {
    recorded();
    let redis = TestRedis::start().await;
    let store = RedisStore::connect(config(&redis).with_partitions(1)).await.unwrap();
    let creates = "presa_redis_command_duration_seconds{operation=create_scoped}";
    let before = observations(creates).len();
    let task = store.create(new_task(), NO_LIMITS).await.unwrap();
    store.load(&task.id).await.unwrap();
    let timed = observations(creates);
    assert!(timed.len() > before, "the create is timed");
    assert!(timed.iter().all(|s| (0.0..2.0).contains(s)), "seconds: {timed:?}");
    assert!(!observations("presa_redis_command_duration_seconds{operation=hget}").is_empty());

    // A failing round trip is counted (by kind: a server error here).
    let errors = counter(presa_store_redis::metrics::ERRORS_METRIC);
    let mut c = raw(&redis).await;
    let work = store.keys().work(0);
    let _: () = redis::cmd("SET").arg(&work).arg("not a stream").query_async(&mut c).await.unwrap();
    store.create(new_task(), NO_LIMITS).await.expect_err("XADD on a string");
    assert!(counter(presa_store_redis::metrics::ERRORS_METRIC) > errors);
}

/// (The only test of this binary that checks the epoch: `presa_redis_up` is process-wide.)
#[tokio::test]
async fn whether_redis_answers_is_set_by_the_epoch_check() {
    recorded();
    let redis = TestRedis::spawn();
    let store = RedisStore::connect(config(&redis).with_op_timeout(Duration::from_millis(300))).await.unwrap();
    store.check_epoch().await.unwrap();
    assert_eq!(gauge("presa_redis_up{}"), Some(1.0));
    drop(redis); // the server stops
    store.check_epoch().await.expect_err("Redis is gone");
    assert_eq!(gauge("presa_redis_up{}"), Some(0.0));
}

#[tokio::test]
async fn every_create_reports_its_principals_quota_use() {
    recorded();
    let redis = TestRedis::start().await;
    let store = RedisStore::connect(config(&redis)).await.unwrap();
    let active = "presa_quota_usage_ratio{quota=max_active_tasks_per_scope}";
    let bytes = "presa_quota_usage_ratio{quota=max_bytes_per_scope}";
    let limits = presa_store::CreateLimits {
        max_active_per_scope: Some(4),
        max_bytes_per_scope: Some(1 << 20),
        max_queued_per_partition: None,
    };
    let (before_active, before_bytes) = (observations(active).len(), observations(bytes).len());
    for _ in 0..4 {
        store.create(new_task(), limits).await.unwrap();
    }
    store.create(new_task(), limits).await.expect_err("the fifth is over the limit");
    let ratios = observations(active)[before_active..].to_vec();
    for quarter in [0.25, 0.5, 0.75, 1.0] {
        assert!(ratios.contains(&quarter), "the scope's 1st to 4th task of 4: {ratios:?}");
    }
    let used = observations(bytes)[before_bytes..].to_vec();
    assert!(used.len() >= 4 && used.iter().all(|r| *r > 0.0 && *r < 0.01), "a few hundred bytes of 1 MiB: {used:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pub_sub_reconnects_are_counted() {
    let before = counter(RECONNECTS_METRIC);
    let redis = TestRedis::spawn(); // disturbs the whole server
    let store = RedisStore::connect(config(&redis)).await.unwrap();
    let task = store.create(new_task(), NO_LIMITS).await.unwrap();
    let _watch = store.watch(std::slice::from_ref(&task.id)).await.unwrap();
    assert_eq!(counter(RECONNECTS_METRIC), before, "the first connection is no reconnect");
    let mut c = raw(&redis).await;
    let _: u64 = redis::cmd("CLIENT").arg("KILL").arg("TYPE").arg("pubsub").query_async(&mut c).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    while counter(RECONNECTS_METRIC) == before {
        assert!(Instant::now() < deadline, "no reconnect counted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(counter(RECONNECTS_METRIC), before + 1);
}
