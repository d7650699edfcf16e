//! The claimed channels (`claimed.rs`): a worker watching a task it runs
//! hears the writes others make (a client's, a later claim fencing it out),
//! not its own, including one published between its claim and its watch;
//! and it holds one subscription per partition for its life, none per task.

mod common;

use std::{collections::BTreeMap, time::Duration};

use common::{TestRedis, config, raw};
use futures::StreamExt;
use presa_store::{CreateLimits, NewTask, Scope, Task, TaskStore, WorkQueue, Writer, util::now_ms};
use presa_store_redis::RedisStore;
use presa_tasks::{Event, Work, apply};

const NO_LIMITS: CreateLimits =
    CreateLimits { max_active_per_scope: None, max_bytes_per_scope: None, max_queued_per_partition: None };
const LONG: Duration = Duration::from_secs(30);
const PATIENCE: Duration = Duration::from_secs(5);

fn new_task() -> NewTask {
    NewTask {
        scope: Scope { tenant: "acme".into(), subject: "alice".into(), endpoint: None },
        work: Work { tool: "echo".into(), trace: BTreeMap::new(), ..Work::default() },
        ttl_ms: None,
        poll_interval_ms: None,
        status_message: None,
    }
}

fn said(task: &Task, message: &str) -> Task {
    apply(task, &Event::SetMessage(message.into()), now_ms()).unwrap().unwrap()
}

async fn next_within(watch: &mut presa_store::TaskStream) -> Task {
    tokio::time::timeout(PATIENCE, watch.next()).await.expect("a snapshot in time").expect("the watch goes on")
}

#[tokio::test]
async fn a_holder_hears_others_writes_and_never_its_own() {
    let redis = TestRedis::start().await;
    let store = RedisStore::connect(config(&redis)).await.unwrap();
    store.create(new_task(), NO_LIMITS).await.unwrap();
    let claim = store.claim("w1", 1, LONG, PATIENCE).await.unwrap().remove(0);

    // A client writes before the run starts watching: still heard.
    let early = said(&claim.task, "early");
    store.transition(&early, Writer::Client).await.unwrap();
    let mut watch = store.watch_claimed(&claim.task.id).await.unwrap();
    assert_eq!(next_within(&mut watch).await, early);

    // The holder's own write is not sent back; the client's next one is.
    let own = said(&early, "own");
    store.transition(&own, claim.writer()).await.unwrap();
    let late = said(&own, "late");
    store.transition(&late, Writer::Client).await.unwrap();
    assert_eq!(next_within(&mut watch).await, late, "the holder's own write came back");

    // Another worker taking the lapsed work over fences this one out, and says so.
    assert!(store.renew(&claim, Duration::ZERO).await.unwrap());
    let taken = store.claim("w2", 1, LONG, PATIENCE).await.unwrap().remove(0);
    let fenced = next_within(&mut watch).await;
    assert_eq!((fenced.attempt, fenced.revision), (2, taken.task.revision));
    assert!(!claim.writer().may_continue(&fenced));
}

#[tokio::test]
async fn runs_subscribe_nothing_of_their_own() {
    let redis = TestRedis::start().await;
    let store = RedisStore::connect(config(&redis)).await.unwrap();
    let task = store.create(new_task(), NO_LIMITS).await.unwrap();
    let claim = store.claim("w1", 1, LONG, PATIENCE).await.unwrap().remove(0);
    let _watch = store.watch_claimed(&claim.task.id).await.unwrap();
    let mut c = raw(&redis).await;
    let channels: Vec<String> = redis::cmd("PUBSUB").arg("CHANNELS").query_async(&mut c).await.unwrap();
    let claimed = channels.iter().filter(|c| c.ends_with(":claimed")).count();
    assert_eq!(claimed, usize::from(store.keys().partitions()), "{channels:?}");
    let events = store.keys().events(&task.id).unwrap();
    assert!(!channels.contains(&events), "a run subscribed its task's own channel: {channels:?}");
}
