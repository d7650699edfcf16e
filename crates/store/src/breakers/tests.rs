//! The breaker state machine's unit tests (`Breaker`: open, probe, lost probe, clamped policies).

use super::*;

/// Some time well after the epoch, Unix ms.
const T: u64 = 1_000_000;

fn policy() -> BreakerPolicy {
    BreakerPolicy {
        failures: 3,
        window: Duration::from_secs(10),
        cool_down: Duration::from_secs(5),
        probe_lease: Duration::from_secs(30),
    }
}

#[test]
fn failures_within_the_window_open_it_and_wider_ones_do_not() {
    let (p, mut b) = (policy(), Breaker::default());
    let t = 1_000_000;
    assert_eq!(b.report(&p, t, "a", Report::Failure), Change::None);
    assert_eq!(b.report(&p, t + 6_000, "a", Report::Failure), Change::None);
    assert_eq!(b.report(&p, t + 6_000, "a", Report::Success), Change::None, "a success resets nothing");
    // The first is out of the window by now: two in it.
    assert_eq!(b.report(&p, t + 10_000, "a", Report::Failure), Change::None);
    assert_eq!(b.view(&p, t + 10_000).failures, 2);
    assert_eq!(b.check(&p, t + 10_000, "a"), Check::Pass);
    assert_eq!(b.report(&p, t + 11_000, "a", Report::Failure), Change::Opened);
    assert_eq!(b.circuit(), Circuit::Open);
    assert_eq!(b.check(&p, t + 12_000, "a"), Check::Open { retry_in: Duration::from_secs(4) });
    assert_eq!(b.report(&p, t + 12_000, "late", Report::Failure), Change::None, "open: counted nothing more");
    assert!(!b.is_idle(&p, t + 100_000));
}

#[test]
fn one_probe_half_opens_it_and_decides() {
    let (p, mut b) = (policy(), Breaker::default());
    for _ in 0..3 {
        b.report(&p, T, "x", Report::Failure);
    }
    assert_eq!(b.check(&p, T + 5_000, "probe"), Check::Probe);
    assert_eq!(b.circuit(), Circuit::HalfOpen);
    assert_eq!(b.check(&p, T + 5_001, "other"), Check::Open { retry_in: Duration::from_secs(5) }, "a cool-down");
    assert_eq!(b.report(&p, T + 5_002, "other", Report::Success), Change::None, "not the probe");
    assert_eq!(b.report(&p, T + 5_003, "probe", Report::Failure), Change::Reopened);
    assert_eq!(b.check(&p, T + 10_002, "probe2"), Check::Open { retry_in: Duration::from_millis(1) });
    assert_eq!(b.check(&p, T + 10_003, "probe2"), Check::Probe);
    assert_eq!(b.report(&p, T + 10_004, "probe2", Report::Success), Change::Closed);
    assert_eq!(b.check(&p, T + 10_005, "any"), Check::Pass);
    assert!(b.is_idle(&p, T + 10_005));
}

#[test]
fn a_lost_probe_frees_the_state_after_its_lease() {
    let (p, mut b) = (policy(), Breaker::default());
    for _ in 0..3 {
        b.report(&p, T, "x", Report::Failure);
    }
    assert_eq!(b.check(&p, T + 5_000, "lost"), Check::Probe);
    assert!(matches!(b.check(&p, T + 34_999, "next"), Check::Open { .. }));
    assert_eq!(b.check(&p, T + 35_000, "next"), Check::Probe, "the lease is over");
    assert_eq!(b.report(&p, T + 35_001, "lost", Report::Success), Change::None, "fenced out");
    assert_eq!(b.circuit(), Circuit::HalfOpen);
    assert_eq!(b.report(&p, T + 35_002, "next", Report::Success), Change::Closed);
}

#[test]
fn policies_are_clamped_into_range() {
    let p =
        BreakerPolicy { failures: 0, window: Duration::ZERO, cool_down: Duration::ZERO, probe_lease: Duration::ZERO };
    let c = p.clamped();
    assert_eq!((c.failures, c.window_ms(), c.cool_down_ms(), c.probe_lease_ms()), (1, 1, 1, 1));
    assert_eq!(BreakerPolicy { failures: u32::MAX, ..c }.clamped().failures, MAX_FAILURES);
    let mut b = Breaker::default();
    assert_eq!(b.report(&c, 7, "t", Report::Failure), Change::Opened, "one failure opens a policy of one");
}
