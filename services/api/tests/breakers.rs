//! A circuit breaker embedded (one `presa-api`, no Redis): the demo's
//! `fragile_job` loses its upstream, its breaker opens, plain calls are
//! refused fast, tasks wait and complete once the upstream is back, and the
//! upstream sees only one probe per cool-down meanwhile
//! (`presa_testkit::breakers`); the breaker shows in the admin API and in
//! `/metrics` while open.

use std::path::Path;

use presa_testkit::{Pod, breakers::Upstream, free_port};
use serde_json::Value;

/// The value of the series `series` (exact text) in a scrape.
fn value(scrape: &str, series: &str) -> Option<f64> {
    scrape.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_breaker_holds_tasks_until_the_upstream_is_back() {
    let upstream = Upstream::new();
    let env = [("PRESA_DEMO_FRAGILE_DIR", upstream.dir())];
    let pod = Pod::start("api", Path::new(env!("CARGO_BIN_EXE_presa-api")), free_port(), &[], &env).await;
    let metrics = format!("{}/metrics", pod.base());
    let scrape = reqwest::get(&metrics).await.unwrap().text().await.unwrap();
    assert_eq!(value(&scrape, "presa_breaker_state{breaker=\"fragile_job\"}"), Some(0.0), "{scrape}");
    assert_eq!(value(&scrape, "presa_breaker_opened_total{breaker=\"fragile_job\"}"), Some(0.0), "{scrape}");

    // While the scenario runs, look at the breaker from the outside once it is open.
    let watch = {
        let (admin, metrics) = (format!("{}/admin/v1/breakers", pod.base()), metrics.clone());
        tokio::spawn(async move {
            for _ in 0..200 {
                let view: Value = reqwest::get(&admin).await.unwrap().json().await.unwrap();
                let b =
                    view["breakers"].as_array().and_then(|b| b.iter().find(|b| b["name"] == "fragile_job")).cloned();
                if let Some(b) = b.filter(|b| b["state"] == "open") {
                    let scrape = reqwest::get(&metrics).await.unwrap().text().await.unwrap();
                    return (b, scrape);
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            panic!("the admin API never showed fragile_job's breaker open");
        })
    };
    let seen = presa_testkit::breakers::open_wait_and_recover(std::slice::from_ref(&pod.url), &upstream).await;
    assert_eq!(seen.tasks, 8);
    eprintln!("calls while down: {:?}", seen.calls_while_down);
    let (open, scrape) = watch.await.unwrap();
    assert_eq!(open["tools"], serde_json::json!(["fragile_job"]), "{open}");
    assert_eq!((open["policy"]["failures"].as_u64(), open["policy"]["coolDownMs"].as_u64()), (Some(3), Some(2_000)));
    assert!(open["retryInMs"].as_u64().is_some_and(|ms| ms <= 2_000), "{open}");
    let state = value(&scrape, "presa_breaker_state{breaker=\"fragile_job\"}");
    assert!(matches!(state, Some(1.0 | 2.0)), "open or half-open while the upstream is down: {state:?}");
    // Closed again, opened once (a failed probe re-opens it without counting), refusals counted.
    let scrape = reqwest::get(&metrics).await.unwrap().text().await.unwrap();
    assert_eq!(value(&scrape, "presa_breaker_state{breaker=\"fragile_job\"}"), Some(0.0), "{scrape}");
    assert_eq!(value(&scrape, "presa_breaker_opened_total{breaker=\"fragile_job\"}"), Some(1.0), "{scrape}");
    assert!(value(&scrape, "presa_refusals_total{limit=\"circuit_open\"}").is_some_and(|n| n >= 1.0), "{scrape}");
}
