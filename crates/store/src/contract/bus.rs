//! The event-bus half of the contract ([`EventBus`]): every subscriber
//! gets later events in order, events are bounded in size, a lagging
//! subscriber is ended, and a topic's messages reach its subscribers only.

use std::sync::Arc;

use futures::StreamExt;

use super::{EMPTY_WAIT, PATIENCE};
use crate::{bus::EventBus, error::StoreError};

async fn next_event(events: &mut crate::bus::EventStream) -> Option<String> {
    tokio::time::timeout(PATIENCE, events.next()).await.ok().flatten().map(|e| e.expect("an event, not an error"))
}

/// Every subscriber gets every event published after it subscribed, in order.
pub async fn bus_events_reach_every_subscriber(bus: Arc<dyn EventBus>) {
    let mut first = bus.subscribe().await.expect("subscribe");
    let mut second = bus.subscribe().await.expect("subscribe");
    let events = ["notifications/tools/list_changed", "notifications/prompts/list_changed"];
    for event in events {
        bus.publish(event).await.expect("publish");
    }
    for subscriber in [&mut first, &mut second] {
        for event in events {
            assert_eq!(next_event(subscriber).await.as_deref(), Some(event));
        }
    }
}

/// A subscription starts empty: what was published before it is not replayed,
/// and dropping one subscriber does not disturb another.
pub async fn bus_subscribers_see_only_later_events(bus: Arc<dyn EventBus>) {
    bus.publish("notifications/resources/list_changed").await.expect("publish");
    let early = bus.subscribe().await.expect("subscribe");
    let mut late = bus.subscribe().await.expect("subscribe");
    drop(early);
    bus.publish("notifications/tools/list_changed").await.expect("publish");
    assert_eq!(next_event(&mut late).await.as_deref(), Some("notifications/tools/list_changed"));
    let more = tokio::time::timeout(EMPTY_WAIT, late.next()).await;
    assert!(more.is_err(), "nothing else was published: {more:?}");
}

/// The broadcast carries notices, not payloads: an event over
/// `MAX_EVENT_BYTES` is refused and reaches nobody.
pub async fn bus_events_are_bounded_in_size(bus: Arc<dyn EventBus>) {
    let mut events = bus.subscribe().await.expect("subscribe");
    let big = "x".repeat(crate::limits::MAX_EVENT_BYTES + 1);
    let refused = bus.publish(&big).await.expect_err("too large");
    assert!(matches!(refused, StoreError::TooLarge { what: "event", .. }), "{refused:?}");
    assert!(!refused.is_retryable());
    bus.publish(&big[..crate::limits::MAX_EVENT_BYTES]).await.expect("at the limit");
    assert_eq!(next_event(&mut events).await.map(|e| e.len()), Some(crate::limits::MAX_EVENT_BYTES));
}

/// A subscriber that stops reading is ended once it falls behind its
/// queue's bound: it reads fewer than were published, then `Lagged`, then
/// the end; a subscriber that keeps up goes on.
pub async fn a_lagging_bus_subscriber_is_ended(bus: Arc<dyn EventBus>) {
    let mut stalled = bus.subscribe().await.expect("subscribe");
    let mut reader = bus.subscribe().await.expect("subscribe");
    let event = "e".repeat(4096);
    let n = crate::limits::BUS_QUEUE.max_bytes / event.len() + 8;
    for i in 0..n {
        bus.publish(&event).await.expect("publish");
        assert!(next_event(&mut reader).await.is_some(), "the reader keeps up ({i})");
    }
    let mut read = 0;
    let end = loop {
        match tokio::time::timeout(PATIENCE, stalled.next()).await.expect("an end, not a hang") {
            Some(Ok(_)) => read += 1,
            other => break other,
        }
    };
    assert!(matches!(end, Some(Err(StoreError::Lagged))), "{end:?}");
    assert!(read < n, "it read {read} of {n}: ended before the last");
    assert!(stalled.next().await.is_none(), "the end after Lagged");
    bus.publish("after").await.expect("publish");
    assert_eq!(next_event(&mut reader).await.as_deref(), Some("after"));
}

/// A topic's messages (any size) reach that topic's subscribers only, never
/// the broadcast's.
pub async fn topic_messages_reach_only_their_topic(bus: Arc<dyn EventBus>) {
    let mut everyone = bus.subscribe().await.expect("subscribe");
    let mut mine = bus.subscribe_to("session-a").await.expect("subscribe");
    let mut other = bus.subscribe_to("session-b").await.expect("subscribe");
    let payload = "p".repeat(256 * 1024);
    bus.publish_to("session-a", &payload).await.expect("publish");
    bus.publish_to("nobody", "dropped").await.expect("no subscriber is fine");
    assert_eq!(next_event(&mut mine).await.map(|m| m.len()), Some(payload.len()));
    for s in [&mut everyone, &mut other] {
        let more = tokio::time::timeout(EMPTY_WAIT, s.next()).await;
        assert!(more.is_err(), "another topic's message: {more:?}");
    }
}
