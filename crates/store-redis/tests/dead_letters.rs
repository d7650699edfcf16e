//! Dead letters on Redis, beyond the shared contract: their keys carry the
//! retention and leave nothing behind once it passed, their arguments come
//! back exactly as claimed, and a listing drops the index members of letters
//! that are gone.

mod common;

use std::time::Duration;

use common::{NO_LIMITS, TestRedis, config, raw};
use futures::StreamExt;
use presa_store::{Cas, DeadLetterFilter, DeadLetters, NewTask, Scope, TaskStore, WorkQueue, util::now_ms};
use presa_store_redis::RedisStore;
use presa_tasks::{Caller, Event, Work, apply};
use redis::AsyncCommands;
use serde_json::json;

const RETENTION: Duration = Duration::from_millis(1_500);

fn owner() -> Scope {
    Scope { tenant: "acme".into(), subject: "alice".into(), endpoint: None }
}

/// Create a task, claim it and fail it as poison; its id.
async fn bury(store: &RedisStore) -> presa_store::TaskId {
    let new = NewTask {
        scope: owner(),
        work: Work {
            tool: "echo".into(),
            // Values a Lua JSON round trip would change (none happens).
            arguments: json!({"big": 9007199254740993u64, "empty": [], "obj": {}, "f": 0.1}),
            caller: Some(Caller::new("acme", "alice", vec!["deploy".into()])),
            ..Work::default()
        },
        ttl_ms: Some(60_000),
        poll_interval_ms: None,
        status_message: None,
    };
    let task = store.create(new.clone(), NO_LIMITS).await.unwrap();
    let claim = store.claim("w", 1, Duration::from_secs(30), Duration::from_secs(5)).await.unwrap().remove(0);
    let dead = apply(&claim.task, &Event::Fail(json!({"code": -32603})), now_ms()).unwrap().unwrap();
    assert!(matches!(store.conclude_dead(&dead, &claim, "poison").await.unwrap(), Cas::Applied(_)));
    let letter = store.dead_letter("acme", &task.id).await.unwrap().expect("a letter");
    assert_eq!(letter.work, new.work, "the work exactly as claimed");
    task.id
}

/// Every key of a letter expires with the retention, and once it passed a
/// SCAN finds no dead-letter key at all.
#[tokio::test]
async fn dead_letter_keys_expire_with_their_retention() {
    let redis = TestRedis::start().await;
    let store = RedisStore::connect(config(&redis).with_dead_letter_ttl(RETENTION)).await.unwrap();
    let id = bury(&store).await;
    let keys = store.keys();
    let p = keys.partition_of(&id).unwrap();
    let mut c = raw(&redis).await;
    for key in [keys.dead_letter(&id).unwrap(), keys.dead_by_tenant(p, "acme"), keys.dead_by_scope(p, &owner())] {
        let left: i64 = c.pttl(&key).await.unwrap();
        assert!(left > 0 && left <= RETENTION.as_millis() as i64, "{key} expires in {left} ms");
    }
    tokio::time::sleep(RETENTION + Duration::from_millis(300)).await;
    let pattern = format!("{}:*dead*", keys.prefix());
    let left: Vec<redis::RedisResult<String>> = c.scan_match::<_, String>(&pattern).await.unwrap().collect().await;
    assert!(left.is_empty(), "dead-letter keys outlived their retention: {left:?}");
}

/// A letter gone by other means than its expiry (here deleted by hand)
/// is not listed, and the listing drops its index members.
#[tokio::test]
async fn a_listing_drops_the_members_of_letters_gone() {
    let redis = TestRedis::start().await;
    let store = RedisStore::connect(config(&redis)).await.unwrap();
    let (gone, kept) = (bury(&store).await, bury(&store).await);
    let keys = store.keys();
    let mut c = raw(&redis).await;
    let _: i64 = c.del(keys.dead_letter(&gone).unwrap()).await.unwrap();
    let page = store.dead_letters(&DeadLetterFilter::tenant("acme"), None, 10).await.unwrap();
    assert_eq!(page.letters.iter().map(|l| l.id.clone()).collect::<Vec<_>>(), vec![kept.clone()]);
    let index = keys.dead_by_tenant(keys.partition_of(&gone).unwrap(), "acme");
    let members: Vec<String> = c.zrange(&index, 0, -1).await.unwrap();
    assert!(members.iter().all(|m| !m.ends_with(gone.as_str())), "{members:?}");
}
