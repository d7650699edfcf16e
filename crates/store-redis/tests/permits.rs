//! The permit keys on a real Redis: one slot per limit, every key expiring
//! a second after the last lease or waiter in it would lapse, so a limit
//! used once and left leaves nothing behind.

mod common;

use std::time::Duration;

use common::{TestRedis, config, raw};
use presa_store::{Acquired, Holder, PermitName, PermitTerms, Permits};
use presa_store_redis::RedisStore;
use redis::AsyncCommands;

#[tokio::test]
async fn permit_keys_share_a_slot_and_leave_nothing_behind() {
    let redis = TestRedis::start().await;
    let store = RedisStore::connect(config(&redis)).await.expect("connect");
    let name = PermitName { limit: "exclusive_job".into(), key: "tenant\0acme".into() };
    let terms = PermitTerms { permits: 1, lease: Duration::from_millis(400), waiter_ttl: Duration::from_millis(400) };
    let holder = |id: &str, order| Holder { id: id.into(), fence: 1, order };
    assert_eq!(store.acquire_permit(&name, &holder("a", 1), terms).await.unwrap(), Acquired::Granted);
    assert!(matches!(store.acquire_permit(&name, &holder("b", 2), terms).await.unwrap(), Acquired::Waiting { .. }));
    let usage = store.permit_usage("exclusive_job").await.unwrap();
    assert_eq!((usage.len(), usage[0].key.as_str(), usage[0].in_use, usage[0].waiting), (1, "tenant\0acme", 1, 1));
    let mut c = raw(&redis).await;
    let pattern = format!("{}:{{c.*", store.keys().prefix());
    let keys: Vec<String> = c.keys(&pattern).await.unwrap();
    assert_eq!(keys.len(), 5, "holders, fences, line, seen and the index: {keys:?}");
    let tag = format!("{{c.{}}}", "exclusive_job".bytes().map(|b| format!("{b:02x}")).collect::<String>());
    assert!(keys.iter().all(|k| k.contains(&tag)), "one hash tag: {keys:?}");
    for key in &keys {
        let left: i64 = c.pttl(key).await.unwrap();
        assert!(left > 0 && left <= 1_500, "{key} expires with its last lease or waiter, in {left} ms");
    }
    tokio::time::sleep(Duration::from_millis(1_600)).await;
    let keys: Vec<String> = c.keys(&pattern).await.unwrap();
    assert!(keys.is_empty(), "left behind: {keys:?}");
    assert!(store.permit_usage("exclusive_job").await.unwrap().is_empty());
}
