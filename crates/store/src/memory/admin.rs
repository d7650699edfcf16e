//! The memory store's side of [`AdminStore`]: listings read the task map
//! itself (no index to keep), and the process registry is a map of
//! heartbeats that run out.

use std::{
    collections::{HashMap, HashSet},
    time::Duration,
};

use crate::{
    admin::AdminStore,
    admin::NodeInfo,
    admin::TaskFilter,
    admin::TaskPage,
    admin::{Cursor, task_page_limit},
    error::StoreError,
    memory::MemoryStore,
    util::now_ms,
};

/// Live processes by id, each with when its heartbeat runs out (Unix ms),
/// and the ids asked to drain.
#[derive(Default)]
pub(super) struct Registry {
    nodes: HashMap<String, (NodeInfo, u64)>,
    drains: HashSet<String>,
}

impl Registry {
    /// Forget the nodes whose heartbeat ran out by `now`, with their drains.
    fn forget_silent(&mut self, now: u64) {
        self.nodes.retain(|_, (_, until)| *until > now);
        let nodes = &self.nodes;
        self.drains.retain(|id| nodes.contains_key(id));
    }

    fn with_drain(&self, node: &NodeInfo) -> NodeInfo {
        NodeInfo { draining: self.drains.contains(&node.id), ..node.clone() }
    }
}

#[async_trait::async_trait]
impl AdminStore for MemoryStore {
    async fn list_tasks(
        &self,
        filter: &TaskFilter,
        before: Option<&str>,
        limit: usize,
    ) -> Result<TaskPage, StoreError> {
        let limit = task_page_limit(limit);
        let before = Cursor::read(before)?;
        let now = now_ms();
        let s = self.state();
        let mut found: Vec<(Cursor, &presa_tasks::Task)> = s
            .tasks
            .values()
            .filter(|t| !t.is_expired(now) && filter.admits(t))
            .map(|t| (Cursor::of(t), t))
            .filter(|(at, _)| before.as_ref().is_none_or(|b| at < b))
            .collect();
        found.sort_unstable_by(|a, b| b.0.cmp(&a.0));
        let next = (found.len() > limit).then(|| found[limit - 1].0.to_string());
        Ok(TaskPage { tasks: found.into_iter().take(limit).map(|(_, t)| t.clone()).collect(), next })
    }

    async fn tenants(&self) -> Result<Vec<String>, StoreError> {
        let now = now_ms();
        let s = self.state();
        let mut tenants: Vec<String> =
            s.tasks.values().filter(|t| !t.is_expired(now)).map(|t| t.scope.tenant.clone()).collect();
        tenants.sort_unstable();
        tenants.dedup();
        Ok(tenants)
    }

    async fn heartbeat(&self, node: &NodeInfo, ttl: Duration) -> Result<bool, StoreError> {
        let now = now_ms();
        let until = now.saturating_add(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
        let mut s = self.state();
        s.nodes.forget_silent(now);
        s.nodes.nodes.insert(node.id.clone(), (node.clone(), until));
        Ok(s.nodes.drains.contains(&node.id))
    }

    async fn nodes(&self) -> Result<Vec<NodeInfo>, StoreError> {
        let mut s = self.state();
        s.nodes.forget_silent(now_ms());
        let mut nodes: Vec<NodeInfo> = s.nodes.nodes.values().map(|(n, _)| s.nodes.with_drain(n)).collect();
        nodes.sort_by(|a, b| b.started_at_ms.cmp(&a.started_at_ms).then_with(|| a.id.cmp(&b.id)));
        Ok(nodes)
    }

    async fn drain(&self, id: &str) -> Result<Option<NodeInfo>, StoreError> {
        let mut s = self.state();
        s.nodes.forget_silent(now_ms());
        let Some((node, _)) = s.nodes.nodes.get(id) else {
            return Ok(None);
        };
        let node = node.clone();
        s.nodes.drains.insert(node.id.clone());
        Ok(Some(s.nodes.with_drain(&node)))
    }
}
