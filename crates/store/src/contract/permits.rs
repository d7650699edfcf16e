//! The permits contract ([`Permits`]): at most N holders at once, the line
//! kept in creation order whoever asks first, a lapsed lease freeing its
//! permit, a stale fence unable to renew or release a newer holder's
//! permit, and a waiter that stops asking dropping out of the line.

use std::{sync::Arc, time::Duration};

use crate::{permits::Acquired, permits::Holder, permits::PermitName, permits::PermitTerms, permits::Permits};

/// A unique limit per run (stores are shared between tests).
fn name(what: &str) -> PermitName {
    PermitName { limit: format!("contract-{what}-{}", rand::random::<u64>()), key: String::new() }
}

fn holder(id: &str, fence: u64, order: u64) -> Holder {
    Holder { id: id.into(), fence, order }
}

/// Two permits, leases long enough never to lapse here.
const TWO: PermitTerms =
    PermitTerms { permits: 2, lease: Duration::from_secs(30), waiter_ttl: Duration::from_secs(30) };

/// Ten holders asking at once (in reverse creation order): two granted;
/// each release hands a permit to the first waiter in creation order, which
/// the release names, and never more than two hold one.
pub async fn permits_admit_at_most_n_in_creation_order(permits: Arc<dyn Permits>) {
    let limit = name("fifo");
    let h = |i: u64| holder(&format!("t{i:02}"), 1, 1_000 + i);
    let mut granted = Vec::new();
    for i in (0..10).rev() {
        if permits.acquire_permit(&limit, &h(i), TWO).await.expect("acquire") == Acquired::Granted {
            granted.push(i);
        }
    }
    assert_eq!(granted, vec![9, 8], "the first two asking, before anyone waits");
    // Everyone asks again: no third permit, and the line is creation order.
    for i in 0..8 {
        let got = permits.acquire_permit(&limit, &h(i), TWO).await.expect("acquire");
        assert_eq!(got, Acquired::Waiting { in_use: 2, ahead: i as u32 }, "t{i}");
    }
    let usage = permits.permit_usage(&limit.limit).await.expect("usage");
    assert_eq!((usage.len(), usage[0].in_use, usage[0].waiting), (1, 2, 8), "{usage:?}");
    let mut holding = vec![9, 8];
    for next in 0..8 {
        let done = holding.remove(0);
        let released = permits.release_permit(&limit, &h(done), TWO).await.expect("release");
        assert!(released.released, "t{done}");
        assert_eq!(released.wake, vec![h(next).id], "one permit free: the first in line is woken");
        // The last in line asking first does not pass the one woken.
        if next < 7 {
            let later = permits.acquire_permit(&limit, &h(7), TWO).await.expect("acquire");
            assert!(matches!(later, Acquired::Waiting { in_use: 1, .. }), "{later:?}");
        }
        assert_eq!(permits.acquire_permit(&limit, &h(next), TWO).await.expect("acquire"), Acquired::Granted);
        holding.push(next);
    }
    for done in holding {
        let released = permits.release_permit(&limit, &h(done), TWO).await.expect("release");
        assert!(released.released && released.wake.is_empty(), "{released:?}");
    }
}

/// A holder that stops renewing (its worker died) loses its permit when its
/// lease lapses: the next waiter gets it without any release.
pub async fn a_lapsed_lease_frees_its_permit(permits: Arc<dyn Permits>) {
    let limit = name("lease");
    let short = PermitTerms { permits: 1, lease: Duration::from_millis(300), waiter_ttl: Duration::from_secs(30) };
    assert_eq!(permits.acquire_permit(&limit, &holder("dead", 1, 1), short).await.expect("acquire"), Acquired::Granted);
    let waiter = holder("next", 1, 2);
    assert!(matches!(permits.acquire_permit(&limit, &waiter, short).await.expect("acquire"), Acquired::Waiting { .. }));
    // Renewed, it holds on past its first lease.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(permits.renew_permit(&limit, &holder("dead", 1, 1), short).await.expect("renew"));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(matches!(permits.acquire_permit(&limit, &waiter, short).await.expect("acquire"), Acquired::Waiting { .. }));
    // Then it stops renewing.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(permits.acquire_permit(&limit, &waiter, short).await.expect("acquire"), Acquired::Granted);
    assert!(!permits.renew_permit(&limit, &holder("dead", 1, 1), short).await.expect("renew"));
}

/// A task claimed again (a newer fence) takes over its own permit; the
/// stale claim can then neither renew, release nor take it back.
pub async fn a_stale_holder_cannot_renew_or_release(permits: Arc<dyn Permits>) {
    let limit = name("fence");
    let one = PermitTerms { permits: 1, ..TWO };
    let (old, new) = (holder("task", 3, 1), holder("task", 4, 1));
    assert_eq!(permits.acquire_permit(&limit, &old, one).await.expect("acquire"), Acquired::Granted);
    assert_eq!(permits.acquire_permit(&limit, &new, one).await.expect("acquire"), Acquired::Granted, "takes over");
    assert!(!permits.renew_permit(&limit, &old, one).await.expect("renew"));
    let released = permits.release_permit(&limit, &old, one).await.expect("release");
    assert!(!released.released && released.wake.is_empty(), "{released:?}");
    assert_eq!(permits.acquire_permit(&limit, &old, one).await.expect("acquire"), Acquired::Fenced);
    let other = holder("other", 1, 0);
    assert!(
        matches!(permits.acquire_permit(&limit, &other, one).await.expect("acquire"), Acquired::Waiting { .. }),
        "the newer holder still holds the only permit"
    );
    assert!(permits.renew_permit(&limit, &new, one).await.expect("renew"));
    let released = permits.release_permit(&limit, &new, one).await.expect("release");
    assert_eq!((released.released, released.wake), (true, vec!["other".to_string()]));
}

/// A waiter that stops asking (its task was cancelled or deleted) is out of
/// the line after its ttl, so the one behind it is not blocked; each key of
/// a limit is its own count.
pub async fn a_dropped_waiter_does_not_block_the_line(permits: Arc<dyn Permits>) {
    let limit = name("drop");
    let terms = PermitTerms { permits: 1, lease: Duration::from_secs(30), waiter_ttl: Duration::from_millis(400) };
    let first = holder("first", 1, 1);
    assert_eq!(permits.acquire_permit(&limit, &first, terms).await.expect("acquire"), Acquired::Granted);
    let (gone, behind) = (holder("gone", 1, 2), holder("behind", 1, 3));
    assert!(matches!(permits.acquire_permit(&limit, &gone, terms).await.expect("acquire"), Acquired::Waiting { .. }));
    assert_eq!(
        permits.acquire_permit(&limit, &behind, terms).await.expect("acquire"),
        Acquired::Waiting { in_use: 1, ahead: 1 }
    );
    let released = permits.release_permit(&limit, &first, terms).await.expect("release");
    assert_eq!(released.wake, vec!["gone".to_string()]);
    // `behind` keeps asking; `gone` never does again.
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        if permits.acquire_permit(&limit, &behind, terms).await.expect("acquire") == Acquired::Granted {
            break;
        }
    }
    let usage = permits.permit_usage(&limit.limit).await.expect("usage");
    assert_eq!((usage[0].in_use, usage[0].waiting), (1, 0), "`behind` holds it, `gone` left the line: {usage:?}");
    let keyed = PermitName { key: "production".into(), ..limit.clone() };
    assert_eq!(permits.acquire_permit(&keyed, &gone, terms).await.expect("acquire"), Acquired::Granted, "own count");
}
