//! [`Bus`]: the event-bus part of the store, what [`presa_store::EventBus`]
//! is about: short events broadcast on `{prefix}:bus` to every process, and
//! topics (`{prefix}:topic:<hex name>`) whose messages reach only their
//! subscribers, published on the command connection (`PUBLISH`, or sharded
//! `SPUBLISH` on a cluster) and received through the hub (`hub/mod.rs`), each
//! subscriber through its own bounded queue that ends it when it lags.

use std::sync::Arc;

use futures::StreamExt;
use presa_store::{
    BUS_QUEUE, EventStream, StoreError, TOPIC_QUEUE, check_event,
    fanout::{Overflow, QueueLimits},
};
use redis::Value;

use crate::{conn::Verbosity, link::Link};

/// The event bus, over the store's [`Link`].
#[derive(Debug, Clone)]
pub(crate) struct Bus {
    link: Arc<Link>,
}

impl Bus {
    pub(crate) fn new(link: Arc<Link>) -> Bus {
        Bus { link }
    }

    /// Publish a short `event` to every process.
    pub(crate) async fn publish(&self, event: &str) -> Result<(), StoreError> {
        check_event(event)?;
        self.publish_on(self.link.keys.bus(), event).await
    }

    /// Events published from now on.
    pub(crate) async fn subscribe(&self) -> Result<EventStream, StoreError> {
        self.events_of(self.link.keys.bus(), BUS_QUEUE).await
    }

    /// Publish `message` to the subscribers of `topic`.
    pub(crate) async fn publish_to(&self, topic: &str, message: &str) -> Result<(), StoreError> {
        self.publish_on(self.link.keys.topic(topic), message).await
    }

    /// Messages published to `topic` from now on.
    pub(crate) async fn subscribe_to(&self, topic: &str) -> Result<EventStream, StoreError> {
        self.events_of(self.link.keys.topic(topic), TOPIC_QUEUE).await
    }

    async fn publish_on(&self, channel: String, message: &str) -> Result<(), StoreError> {
        let cmd = redis::cmd(self.link.topology.publish_cmd()).arg(channel).arg(message).to_owned();
        self.link.query::<Value>(Verbosity::Info, &cmd).await?;
        Ok(())
    }

    /// The messages of `channel` through a queue of `limits` that ends its subscriber when it lags.
    async fn events_of(&self, channel: String, limits: QueueLimits) -> Result<EventStream, StoreError> {
        let sub = self.link.hub.subscribe_with(vec![channel], limits, Overflow::End).await?;
        Ok(Box::pin(sub.map(|d| d.map(|d| String::from_utf8_lossy(&d.payload).into_owned()))))
    }
}
