//! The circuit breakers contract ([`Breakers`]): a breaker opens after its
//! failures within the window (never after as many spread wider), refuses
//! while open, lets exactly one probe through once the cool-down is over,
//! closes on the probe's success and opens again on its failure, ignores
//! reports of anyone but the probe, and frees a lost probe's half-open state
//! after its lease.

use std::{sync::Arc, time::Duration};

use crate::{
    breakers::BreakerPolicy, breakers::Breakers, breakers::Change, breakers::Check, breakers::Circuit, breakers::Report,
};

/// A unique breaker name per run (stores are shared between tests).
fn name(what: &str) -> String {
    format!("contract-breaker-{what}-{}", rand::random::<u64>())
}

/// 3 failures in 1 s open it; 500 ms of cool-down; a probe holds 500 ms.
fn policy() -> BreakerPolicy {
    BreakerPolicy {
        failures: 3,
        window: Duration::from_secs(1),
        cool_down: Duration::from_millis(500),
        probe_lease: Duration::from_millis(500),
    }
}

async fn report(breakers: &dyn Breakers, key: &str, token: &str, how: Report) -> (Circuit, Change) {
    breakers.report_breaker(key, policy(), token, how).await.expect("report")
}

async fn check(breakers: &dyn Breakers, key: &str, token: &str) -> Check {
    breakers.check_breaker(key, policy(), token).await.expect("check").0
}

/// Open `key`: its policy's failures at once.
async fn open(breakers: &dyn Breakers, key: &str) {
    for i in 0..3 {
        let expected = if i == 2 { Change::Opened } else { Change::None };
        assert_eq!(report(breakers, key, "w", Report::Failure).await.1, expected, "failure {}", i + 1);
    }
}

/// Two failures, then (after the window) two more: still closed, counting
/// two; a third within the window opens it, and checks are refused with
/// at most the cool-down to wait. Another name is untouched.
pub async fn a_breaker_opens_after_its_failures_within_the_window_only(breakers: Arc<dyn Breakers>) {
    let (key, other) = (name("window"), name("other"));
    let b = breakers.as_ref();
    assert_eq!(b.read_breaker(&key, policy()).await.expect("read").circuit, Circuit::Closed, "never used");
    for _ in 0..2 {
        assert_eq!(report(b, &key, "w", Report::Failure).await, (Circuit::Closed, Change::None));
    }
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    for _ in 0..2 {
        assert_eq!(report(b, &key, "w", Report::Failure).await, (Circuit::Closed, Change::None), "spread wider");
    }
    assert_eq!(report(b, &key, "w", Report::Success).await, (Circuit::Closed, Change::None));
    let view = b.read_breaker(&key, policy()).await.expect("read");
    assert_eq!((view.circuit, view.failures, view.retry_in), (Circuit::Closed, 2, None));
    assert_eq!(check(b, &key, "w").await, Check::Pass);
    assert_eq!(report(b, &key, "w", Report::Failure).await, (Circuit::Open, Change::Opened), "three in the window");
    let Check::Open { retry_in } = check(b, &key, "w").await else { panic!("an open breaker let a call through") };
    assert!(retry_in > Duration::ZERO && retry_in <= policy().cool_down, "{retry_in:?}");
    let view = b.read_breaker(&key, policy()).await.expect("read");
    assert_eq!(view.circuit, Circuit::Open);
    assert!(view.retry_in.is_some_and(|d| d <= policy().cool_down), "{view:?}");
    assert_eq!(check(b, &other, "w").await, Check::Pass, "each name is its own breaker");
}

/// Open: every check is refused; after the cool-down, of ten checks at
/// once exactly one is the probe, and the others are told to wait.
pub async fn an_open_breaker_refuses_then_lets_exactly_one_probe_through(breakers: Arc<dyn Breakers>) {
    let key = name("probe");
    open(breakers.as_ref(), &key).await;
    for i in 0..5 {
        assert!(matches!(check(breakers.as_ref(), &key, &format!("t{i}")).await, Check::Open { .. }));
    }
    tokio::time::sleep(policy().cool_down + Duration::from_millis(100)).await;
    let checks = (0..10).map(|i| {
        let breakers = breakers.clone();
        let key = key.clone();
        tokio::spawn(async move { check(breakers.as_ref(), &key, &format!("c{i}")).await })
    });
    let mut probes = 0;
    for c in futures::future::join_all(checks).await {
        match c.expect("check task") {
            Check::Probe => probes += 1,
            Check::Open { retry_in } => assert!(retry_in > Duration::ZERO && retry_in <= policy().cool_down),
            Check::Pass => panic!("a half-open breaker let a call pass"),
        }
    }
    assert_eq!(probes, 1, "exactly one probe");
    let view = breakers.read_breaker(&key, policy()).await.expect("read");
    assert_eq!(view.circuit, Circuit::HalfOpen);
}

/// The probe's failure opens it again for a cool-down; the next probe's
/// success closes it (a success of anyone else meanwhile changes nothing).
pub async fn the_probes_success_closes_it_and_its_failure_reopens_it(breakers: Arc<dyn Breakers>) {
    let key = name("decide");
    let b = breakers.as_ref();
    open(b, &key).await;
    tokio::time::sleep(policy().cool_down + Duration::from_millis(100)).await;
    assert_eq!(check(b, &key, "p1").await, Check::Probe);
    assert_eq!(report(b, &key, "p1", Report::Failure).await, (Circuit::Open, Change::Reopened));
    assert!(matches!(check(b, &key, "p2").await, Check::Open { .. }), "open again");
    tokio::time::sleep(policy().cool_down + Duration::from_millis(100)).await;
    assert_eq!(check(b, &key, "p2").await, Check::Probe);
    assert_eq!(report(b, &key, "stale", Report::Success).await, (Circuit::HalfOpen, Change::None), "not the probe");
    assert_eq!(report(b, &key, "stale", Report::Failure).await, (Circuit::HalfOpen, Change::None), "not the probe");
    assert_eq!(report(b, &key, "p2", Report::Success).await, (Circuit::Closed, Change::Closed));
    assert_eq!(check(b, &key, "any").await, Check::Pass);
    let view = b.read_breaker(&key, policy()).await.expect("read");
    assert_eq!((view.circuit, view.failures), (Circuit::Closed, 0), "closed afresh");
}

/// A probe that never reports holds the half-open state for its lease
/// only: then the next check probes, and the lost probe's late report is
/// fenced out.
pub async fn a_lost_probe_frees_the_half_open_state_after_its_lease(breakers: Arc<dyn Breakers>) {
    let key = name("lost");
    let b = breakers.as_ref();
    open(b, &key).await;
    tokio::time::sleep(policy().cool_down + Duration::from_millis(100)).await;
    assert_eq!(check(b, &key, "lost").await, Check::Probe);
    assert!(matches!(check(b, &key, "next").await, Check::Open { .. }), "the probe holds it");
    tokio::time::sleep(policy().probe_lease + Duration::from_millis(100)).await;
    assert_eq!(check(b, &key, "next").await, Check::Probe, "the lease is over");
    assert_eq!(report(b, &key, "lost", Report::Success).await, (Circuit::HalfOpen, Change::None), "fenced out");
    assert_eq!(report(b, &key, "next", Report::Success).await, (Circuit::Closed, Change::Closed));
}
