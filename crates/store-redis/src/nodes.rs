//! [`Nodes`]: the node registry part of the store, the process registry
//! half of [`presa_store::AdminStore`]. It lives in one slot,
//! `{prefix}:{nodes}:…`: each heartbeat's JSON under its node key (expiring
//! with it), a sorted set of node ids by expiry, and one of drained ids
//! (`heartbeat.lua`, `nodes.lua`, `drain.lua`).

use std::{sync::Arc, time::Duration};

use presa_store::{NodeInfo, StoreError, util::now_ms};

use crate::{error::RedisStoreError, link::Link, scripts::script};

// The registry's scripts (see `scripts.rs`), each named as its operation.
script!(
    HEARTBEAT,
    "heartbeat.lua",
    Debug,
    "Record a process's heartbeat, forget silent ones, answer whether it drains."
);
script!(NODES, "nodes.lua", "Every live process's last heartbeat and the drained ids.");
script!(DRAIN, "drain.lua", "Ask a live process to drain.");

/// The registry of live processes, over the store's [`Link`].
#[derive(Debug, Clone)]
pub(crate) struct Nodes {
    link: Arc<Link>,
}

/// A JSON record of the registry, decoded.
fn node_of(json: &str) -> Result<NodeInfo, RedisStoreError> {
    serde_json::from_str(json).map_err(|e| RedisStoreError::Corrupt(format!("node heartbeat: {e}")))
}

impl Nodes {
    pub(crate) fn new(link: Arc<Link>) -> Nodes {
        Nodes { link }
    }

    pub(crate) async fn heartbeat(&self, node: &NodeInfo, ttl: Duration) -> Result<bool, StoreError> {
        let keys = &self.link.keys;
        let now = now_ms();
        let until = now.saturating_add(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
        let json = serde_json::to_string(node).map_err(|e| RedisStoreError::Corrupt(e.to_string()))?;
        let mut inv = HEARTBEAT.prepare_invoke();
        inv.key(keys.node(&node.id)).key(keys.nodes()).key(keys.drains()).arg(&node.id).arg(json).arg(until).arg(now);
        Ok(self.link.invoke::<i64>(&inv).await? == 1)
    }

    pub(crate) async fn nodes(&self) -> Result<Vec<NodeInfo>, StoreError> {
        let keys = &self.link.keys;
        let mut inv = NODES.prepare_invoke();
        inv.key(keys.nodes()).key(keys.drains()).arg(keys.node_prefix()).arg(now_ms());
        let (beats, drained): (Vec<String>, Vec<String>) = self.link.invoke(&inv).await?;
        let mut nodes = Vec::with_capacity(beats.len());
        for beat in &beats {
            let mut node = node_of(beat)?;
            node.draining = drained.contains(&node.id);
            nodes.push(node);
        }
        nodes.sort_by(|a, b| b.started_at_ms.cmp(&a.started_at_ms).then_with(|| a.id.cmp(&b.id)));
        Ok(nodes)
    }

    pub(crate) async fn drain(&self, id: &str) -> Result<Option<NodeInfo>, StoreError> {
        let keys = &self.link.keys;
        let mut inv = DRAIN.prepare_invoke();
        inv.key(keys.node(id)).key(keys.nodes()).key(keys.drains()).arg(id).arg(now_ms());
        let beat: Option<String> = self.link.invoke(&inv).await?;
        Ok(beat.map(|b| node_of(&b)).transpose()?.map(|node| NodeInfo { draining: true, ..node }))
    }
}
