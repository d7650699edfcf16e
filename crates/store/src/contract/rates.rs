//! The rates contract ([`Rates`]): a burst passes at once, then one take
//! per interval, a refusal says how long until one passes and counts
//! nothing, and each name is its own rate.

use std::{sync::Arc, time::Duration};

use crate::{rates::Rate, rates::Rates, rates::Take, rates::Taken};

/// A unique rate name per run (stores are shared between tests).
fn name(what: &str) -> String {
    format!("contract-{what}-{}", rand::random::<u64>())
}

/// 10 a second with a burst of 3: three takes pass at once, the fourth
/// waits at most an interval, and passes once that wait is over; a
/// refusal took nothing; another name is untouched.
pub async fn a_rate_admits_its_burst_then_one_per_interval(rates: Arc<dyn Rates>) {
    let (key, other) = (name("burst"), name("other"));
    let rate = Rate::per_second(10.0, 3);
    for i in 0..3 {
        assert_eq!(
            rates.take_rate(&key, rate, Take::Now).await.expect("take"),
            Taken::Admitted,
            "take {i} of the burst"
        );
    }
    let Taken::Wait(wait) = rates.take_rate(&key, rate, Take::Now).await.expect("take") else {
        panic!("the fourth take at once passed");
    };
    assert!(wait > Duration::ZERO && wait <= rate.interval, "{wait:?}");
    // A refused take counted nothing: after its wait, exactly one passes.
    tokio::time::sleep(wait + Duration::from_millis(5)).await;
    assert_eq!(rates.take_rate(&key, rate, Take::Now).await.expect("take"), Taken::Admitted);
    assert!(matches!(rates.take_rate(&key, rate, Take::Now).await.expect("take"), Taken::Wait(_)));
    assert_eq!(
        rates.take_rate(&other, rate, Take::Now).await.expect("take"),
        Taken::Admitted,
        "each name is its own rate"
    );
}

/// Reservations (work that can wait) get a turn each, an interval apart,
/// and count: a take now after them waits for the turn after theirs.
pub async fn reservations_get_a_turn_each(rates: Arc<dyn Rates>) {
    let key = name("reserve");
    let rate = Rate::per_second(10.0, 1);
    assert_eq!(rates.take_rate(&key, rate, Take::Reserve).await.expect("take"), Taken::Admitted);
    let mut turns = Vec::new();
    for _ in 0..3 {
        match rates.take_rate(&key, rate, Take::Reserve).await.expect("take") {
            Taken::Reserved(at) => turns.push(at),
            other => panic!("expected a reserved turn, got {other:?}"),
        }
    }
    for (i, pair) in turns.windows(2).enumerate() {
        let gap = pair[1].saturating_sub(pair[0]);
        assert!(gap > Duration::from_millis(90) && gap <= rate.interval, "turn {i} to {}: {turns:?}", i + 1);
    }
    assert!(turns[0] <= rate.interval, "{turns:?}");
    let Taken::Wait(wait) = rates.take_rate(&key, rate, Take::Now).await.expect("take") else {
        panic!("a take now passed while turns were reserved");
    };
    assert!(wait > turns[2], "{wait:?} after {turns:?}");
}
