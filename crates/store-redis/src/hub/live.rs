//! The hub's subscriber connection: a standalone pub/sub connection, or a
//! RESP3 cluster connection with sharded (un)subscribes, and the stream of
//! messages either delivers.

use std::{pin::Pin, sync::Arc, time::Duration};

use futures::{Stream, StreamExt};
use redis::{PushInfo, PushKind, Value, aio::PubSubSink, cluster_async::ClusterConnection};
use tokio::sync::mpsc;

use super::Delivery;
use crate::{
    conn::{Endpoint, bounded},
    error::RedisStoreError,
};

pub(super) type Messages = Pin<Box<dyn Stream<Item = Delivery> + Send>>;

/// A live subscriber connection.
pub(super) struct Live {
    pub(super) sink: Sink,
    pub(super) messages: Messages,
}

pub(super) enum Sink {
    Single(PubSubSink),
    Cluster(ClusterConnection),
}

impl Sink {
    pub(super) async fn subscribe(&mut self, channels: &[String]) -> redis::RedisResult<()> {
        self.change(channels, true).await
    }

    pub(super) async fn unsubscribe(&mut self, channels: &[String]) -> redis::RedisResult<()> {
        self.change(channels, false).await
    }

    /// (Un)subscribe `channels`: one command standalone; on a cluster one
    /// sharded command per channel (the channels of one SSUBSCRIBE must share a slot).
    async fn change(&mut self, channels: &[String], subscribe: bool) -> redis::RedisResult<()> {
        match self {
            Sink::Single(s) if subscribe => s.subscribe(channels).await,
            Sink::Single(s) => s.unsubscribe(channels).await,
            Sink::Cluster(c) => {
                for ch in channels {
                    if subscribe { c.ssubscribe(ch).await? } else { c.sunsubscribe(ch).await? }
                }
                Ok(())
            }
        }
    }

    pub(super) async fn ping(&mut self) -> redis::RedisResult<()> {
        match self {
            Sink::Single(s) => s.ping::<Value>().await.map(|_| ()),
            Sink::Cluster(c) => redis::cmd("PING").query_async::<Value>(c).await.map(|_| ()),
        }
    }
}

/// Open a subscriber connection.
pub(super) async fn connect(endpoint: &Endpoint, cluster: bool, op_timeout: Duration) -> Result<Live, RedisStoreError> {
    if !cluster {
        // With Sentinel: the primary the Sentinels name now (every reconnect asks again).
        let client = endpoint.primary().await?;
        let pubsub = bounded(op_timeout, client.get_async_pubsub()).await?;
        let (sink, stream) = pubsub.split();
        let messages = stream.map(|msg| Delivery {
            channel: Arc::from(msg.get_channel_name()),
            payload: Arc::from(msg.get_payload_bytes()),
        });
        Ok(Live { sink: Sink::Single(sink), messages: Box::pin(messages) })
    } else {
        let (tx, rx) = mpsc::unbounded_channel::<PushInfo>();
        let client = endpoint
            .cluster()
            .use_protocol(redis::ProtocolVersion::RESP3)
            .push_sender(tx)
            .connection_timeout(op_timeout)
            .response_timeout(op_timeout)
            .build()?;
        let conn = bounded(op_timeout, client.get_async_connection()).await?;
        let messages = tokio_stream::wrappers::UnboundedReceiverStream::new(rx)
            .filter_map(|push| async move { push_delivery(push) });
        Ok(Live { sink: Sink::Cluster(conn), messages: Box::pin(messages) })
    }
}

/// The next message of the live connection; pending forever when there is none.
pub(super) async fn next_message(live: &mut Option<Live>) -> Option<Delivery> {
    match live {
        Some(l) => l.messages.next().await,
        None => std::future::pending().await,
    }
}

/// A RESP3 push that carries a (sharded) message, as a delivery.
fn push_delivery(push: PushInfo) -> Option<Delivery> {
    if !matches!(push.kind, PushKind::Message | PushKind::SMessage) {
        return None;
    }
    let mut data = push.data.into_iter();
    let channel: String = redis::from_redis_value(data.next()?).ok()?;
    let payload: Vec<u8> = redis::from_redis_value(data.next()?).ok()?;
    Some(Delivery { channel: Arc::from(channel), payload: Arc::from(payload) })
}
