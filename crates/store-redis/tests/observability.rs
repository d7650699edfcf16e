//! What the store tells operators: a client span per Redis round trip
//! (`redis EVALSHA <script>`, `redis <COMMAND>`, with the database
//! attributes and `error.type`), and the pub/sub reconnect counter.
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
use presa_store::TaskStore;
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
    let get = capture.named(&prefix, "redis GET");
    assert!(!get.is_empty() && get.iter().all(|s| s.level == Level::INFO && s.fields["db.operation.name"] == "GET"));
    // The polls idle workers run all the time are at debug level.
    for poll in ["redis EVALSHA read", "redis EVALSHA stats"] {
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

/// Counts counters by name; everything else is a no-op.
#[derive(Debug, Default)]
struct Counters(Mutex<HashMap<String, Arc<AtomicU64>>>);

impl metrics::Recorder for Counters {
    fn describe_counter(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}
    fn describe_gauge(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}
    fn describe_histogram(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}
    fn register_counter(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        let mut all = self.0.lock().unwrap();
        metrics::Counter::from_arc(all.entry(key.name().to_string()).or_default().clone())
    }
    fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        metrics::Gauge::noop()
    }
    fn register_histogram(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Histogram {
        metrics::Histogram::noop()
    }
}

fn counter(name: &str) -> u64 {
    static RECORDER: OnceLock<&'static Counters> = OnceLock::new();
    let recorder = RECORDER.get_or_init(|| {
        let recorder: &'static Counters = Box::leak(Box::default());
        metrics::set_global_recorder(recorder).expect("the only recorder of this test binary");
        recorder
    });
    recorder.0.lock().unwrap().get(name).map_or(0, |c| c.load(Ordering::Relaxed))
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
