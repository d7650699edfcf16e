//! [`RedisStore`], the facade: a store composed of its parts, each a
//! struct owning its state and its scripts, all built over one [`Link`]
//! (the connection, key layout and [`Topology`](crate::topology::Topology)):
//!
//! | part | module | serves |
//! |---|---|---|
//! | [`Records`] | `records/` | [`presa_store::TaskStore`] |
//! | [`Queue`] | `work/` | [`presa_store::WorkQueue`] |
//! | [`Letters`] | `dead.rs` | [`presa_store::DeadLetters`] |
//! | [`Sessions`] | `session.rs` | [`presa_store::SessionStore`] |
//! | [`TaskIndex`] and [`Nodes`] | `admin.rs`, `nodes.rs` | [`presa_store::AdminStore`] |
//! | [`Bus`] (over the hub) | `bus.rs`, `hub/` | [`presa_store::EventBus`] |
//! | [`Epochs`] | `epoch.rs` | [`RedisStore::check_epoch`] |
//!
//! This file opens the store and holds its own public API (probes,
//! liveness, the epoch); `traits.rs` implements each trait by delegating
//! to the part it is about.

use std::sync::Arc;

use redis::Value;

use crate::{
    admin::TaskIndex, breakers::BreakerKeeper, bus::Bus, config::RedisConfig, conn::Verbosity, dead::Letters,
    epoch::Epoch, epoch::Epochs, error::RedisStoreError, keys::Keys, link::Link, nodes::Nodes, permits::PermitKeeper,
    rates::RateKeeper, records::Records, session::Sessions, work::Queue,
};

mod traits;

/// The Redis-backed task store and event bus. Cheap to clone (shared parts).
#[derive(Debug, Clone)]
pub struct RedisStore {
    parts: Arc<Parts>,
}

/// What a [`RedisStore`] is made of.
#[derive(Debug)]
struct Parts {
    link: Arc<Link>,
    records: Records,
    queue: Queue,
    letters: Letters,
    sessions: Sessions,
    index: TaskIndex,
    nodes: Nodes,
    rates: RateKeeper,
    breakers: BreakerKeeper,
    permits: PermitKeeper,
    bus: Bus,
    epochs: Epochs,
}

impl RedisStore {
    /// Connect, and make sure every partition stream has its consumer group.
    /// Fails within about `op_timeout` when Redis is unreachable.
    /// Use [`open`](Self::open) to start without Redis.
    pub async fn connect(cfg: RedisConfig) -> Result<RedisStore, RedisStoreError> {
        let store = Self::open(cfg)?;
        store.ensure_groups().await?;
        Ok(store)
    }

    /// The store, without reaching Redis yet (only a bad configuration
    /// fails): the first command connects, and every command after a lost
    /// connection reconnects. For pods that start unready while Redis is
    /// down; the consumer groups are made by the first claim that misses them.
    ///
    /// `rediss://` uses rustls with the *ring* provider, installed here as
    /// the process default unless the process installed one already.
    pub fn open(cfg: RedisConfig) -> Result<RedisStore, RedisStoreError> {
        cfg.validate()?;
        // redis-rs builds its TLS config from the process-default provider.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let link = Arc::new(Link::open(cfg)?);
        crate::metrics::register();
        let records = Records::new(link.clone());
        let parts = Parts {
            queue: Queue::new(link.clone(), records.clone()),
            index: TaskIndex::new(link.clone(), records.clone()),
            letters: Letters::new(link.clone()),
            sessions: Sessions::new(link.clone()),
            nodes: Nodes::new(link.clone()),
            rates: RateKeeper::new(link.clone()),
            breakers: BreakerKeeper::new(link.clone()),
            permits: PermitKeeper::new(link.clone()),
            bus: Bus::new(link.clone()),
            epochs: Epochs::new(link.clone()),
            records,
            link,
        };
        if let Some(sentinels) = parts.link.endpoint.sentinels() {
            tokio::spawn(crate::link::follow_primary(sentinels.clone(), Arc::downgrade(&parts.link)));
        }
        Ok(RedisStore { parts: Arc::new(parts) })
    }

    /// Create the consumer group on every partition stream (MKSTREAM; an
    /// existing group is fine). Reading from id 0 so entries added before a
    /// lost group was re-created are still delivered. Claims call it
    /// themselves when a group is missing; [`connect`](Self::connect) calls
    /// it up front.
    pub async fn ensure_groups(&self) -> Result<(), RedisStoreError> {
        self.parts.queue.ensure_groups().await
    }

    /// Read (or first write) the epoch key and compare it with the one this
    /// process saw before. Returns the loss it detected now, if any; a loss
    /// is also logged, counted and kept for [`lost`](Self::lost). Whether
    /// Redis answered sets [`UP_METRIC`](crate::metrics::UP_METRIC).
    pub async fn check_epoch(&self) -> Result<Option<Epoch>, RedisStoreError> {
        self.parts.epochs.check().await
    }

    /// The last data loss this process detected, if any.
    pub fn lost(&self) -> Option<Epoch> {
        self.parts.epochs.lost()
    }

    /// The key layout this store uses.
    pub fn keys(&self) -> &Keys {
        &self.parts.link.keys
    }

    /// The configuration it was built with.
    pub fn config(&self) -> &RedisConfig {
        &self.parts.link.cfg
    }

    /// Round-trip to Redis (for readiness probes).
    pub async fn ping(&self) -> Result<(), RedisStoreError> {
        self.parts.link.query::<Value>(Verbosity::Debug, &redis::cmd("PING")).await.map(|_| ())
    }

    /// Whether Redis accepts writes: a tiny expiring `SET`, refused (`OOM
    /// command not allowed`) when Redis is at `maxmemory` with `noeviction`.
    pub async fn probe_write(&self) -> Result<(), RedisStoreError> {
        let probe = redis::cmd("SET").arg(self.parts.link.keys.ready_probe()).arg(1).arg("PX").arg(10_000).to_owned();
        self.parts.link.query::<Value>(Verbosity::Debug, &probe).await.map(|_| ())
    }

    /// With Sentinel: why no primary was found lately (the Sentinels name
    /// none, or one that is gone or read-only: a failover in progress; or
    /// no Sentinel answers), while none was found since. `None` otherwise.
    /// For `/readyz`, whose writes fail meanwhile.
    pub fn failover_trouble(&self) -> Option<String> {
        self.parts.link.endpoint.trouble()
    }

    /// How long since Redis last answered one of this store's commands
    /// (since the store was opened when it never did): the liveness signal.
    pub fn silent_for(&self) -> std::time::Duration {
        self.parts.link.conn.silent_for()
    }

    /// The work queue (for the queue's own tests).
    #[cfg(test)]
    pub(crate) fn queue(&self) -> &Queue {
        &self.parts.queue
    }
}
