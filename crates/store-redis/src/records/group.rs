//! The records' group commit: creates (standalone) and a worker's
//! concluding writes wait in a [`Batcher`] (`batch.rs`) and go out as one
//! `batch.lua` call per batch (`create_batch`, `transition_batch`; per
//! partition on a cluster), or as their own script when alone, each with
//! replicated durability's `WAIT` once per call. `RedisConfig::batch_max`
//! bounds a batch; 1 turns batching off (every write runs its own script).

use std::sync::{Arc, LazyLock};

use redis::Value;

use crate::{
    batch::{Batcher, Flush},
    durability::Replication,
    error::RedisStoreError,
    link::Link,
    scripts::{Call, Lua, batch_replies},
};

/// One write of a batch: its script's call, and the partition it writes.
#[derive(Debug)]
pub(super) struct Write {
    pub(super) partition: u16,
    pub(super) call: Call,
}

/// Calls of one script (`single`), run alone or as its `batch.lua` (`batch`).
pub(super) struct Scripted {
    link: Arc<Link>,
    single: &'static LazyLock<Lua>,
    batch: &'static LazyLock<Lua>,
}

impl Scripted {
    /// A batcher of `single`'s calls over `link`, or `None` when batches
    /// hold one call (`batch_max` 1: each write runs alone, without queueing).
    pub(super) fn batcher(
        link: &Arc<Link>,
        single: &'static LazyLock<Lua>,
        batch: &'static LazyLock<Lua>,
    ) -> Option<Batcher<Scripted>> {
        let max = link.cfg.batch_max;
        (max > 1).then(|| Batcher::new(Scripted { link: link.clone(), single, batch }, max))
    }
}

/// `call` of `lua` alone: a write confirmed by its replicas (replicated durability).
pub(super) async fn alone(link: &Link, lua: &Lua, call: &Call) -> Result<(Value, Replication), RedisStoreError> {
    let mut inv = lua.prepare_invoke();
    call.add_to(&mut inv);
    link.invoke_confirmed(&inv).await
}

impl Flush for Scripted {
    type Item = Write;
    type Reply = (Value, Replication);

    fn groups<T>(&self, items: Vec<T>, item: impl Fn(&T) -> &Write) -> Vec<Vec<T>> {
        self.link.topology.script_groups(items, |t| item(t).partition)
    }

    async fn flush(&self, group: Vec<Write>) -> Result<Vec<(Value, Replication)>, RedisStoreError> {
        if let [write] = group.as_slice() {
            return Ok(vec![alone(&self.link, self.single, &write.call).await?]);
        }
        let calls: Vec<&Call> = group.iter().map(|w| &w.call).collect();
        let inv = Call::batch(self.batch, &calls);
        let (flat, replication): (Vec<Value>, _) = self.link.invoke_confirmed(&inv).await?;
        let Some(replies) = batch_replies(flat, group.len()) else {
            return Err(RedisStoreError::Corrupt(format!(
                "{} answered something else than {} replies",
                self.batch.name,
                group.len()
            )));
        };
        Ok(replies.into_iter().map(|r| (r, replication)).collect())
    }
}
