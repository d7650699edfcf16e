//! The upstream MCP servers of the gateway's processes, for the admin API's
//! `GET /admin/v1/upstreams`: cluster-wide, read from the live registry.
//! Every gateway process (API pod, worker, embedded) holds its own pools and
//! reports them in its heartbeat ([`crate::node::UpstreamSource`]); this adds
//! them up per upstream, keeping each process's row. Figures are as fresh
//! as the heartbeats (a few seconds), and a process that stopped drops out
//! with its heartbeat.
//!
//! An operator's restart of an upstream is published on the event bus
//! ([`crate::node::UPSTREAM_RESTART_TOPIC`]) to every process, which drops
//! its idle connections to it at once and each busy one when its call ends
//! (calls in flight finish on their connection); the next call opens a new one.

use std::collections::BTreeMap;

use presa_store::{NodeInfo, ToolCalls, UpstreamReport};

use super::{Admin, AdminError, Operator};
use crate::{node::UPSTREAM_RESTART_TOPIC, store_io::store_call};

/// The longest upstream name a restart accepts.
pub const MAX_UPSTREAM_NAME: usize = 128;

/// One upstream across the cluster.
#[derive(Debug, Clone, Default)]
pub struct UpstreamView {
    /// Its name.
    pub name: String,
    /// The worst state a process reports: `failing`, then `starting`, then `ready`.
    pub state: String,
    /// Connections all processes may hold.
    pub pool: u64,
    /// Connections in use now.
    pub in_use: u64,
    /// Restarts summed.
    pub restarts: u64,
    /// The newest catalog version a process reports.
    pub catalog_version: u64,
    /// Tools of that listing.
    pub tool_count: u64,
    /// Calls and errors per tool, summed, by tool name.
    pub tools: Vec<ToolCalls>,
    /// Each process's report: its node id, its role and what it said.
    pub processes: Vec<(String, String, UpstreamReport)>,
}

impl Admin {
    /// Every upstream reported by a live process, by name.
    pub async fn upstreams(&self, op: &Operator) -> Result<Vec<UpstreamView>, AdminError> {
        op.cluster_only()?;
        Ok(aggregate(&store_call("nodes", self.core.admin().nodes()).await?))
    }

    /// Ask every process to restart upstream `name`'s connections; the
    /// processes reporting it now (those that will act on it, unless one
    /// misses the ask). [`AdminError::NotFound`] when no live process reports it.
    pub async fn restart_upstream(&self, op: &Operator, name: &str) -> Result<Vec<String>, AdminError> {
        op.cluster_only()?;
        let outcome = self.restart_reported(name).await;
        let said = match &outcome {
            Ok(nodes) => format!("asked {} process(es)", nodes.len()),
            Err(AdminError::NotFound(_)) => "not found".to_string(),
            Err(_) => "failed".to_string(),
        };
        op.audit("restart_upstream", name, &said, outcome.is_ok());
        outcome
    }

    async fn restart_reported(&self, name: &str) -> Result<Vec<String>, AdminError> {
        if name.is_empty() || name.len() > MAX_UPSTREAM_NAME {
            return Err(AdminError::BadRequest(format!("an upstream name is 1 to {MAX_UPSTREAM_NAME} bytes")));
        }
        let nodes = store_call("nodes", self.core.admin().nodes()).await?;
        let reporting: Vec<String> =
            nodes.iter().filter(|n| n.upstreams.iter().any(|u| u.name == name)).map(|n| n.id.clone()).collect();
        if reporting.is_empty() {
            return Err(AdminError::NotFound("upstream"));
        }
        store_call("publish_to", self.core.bus().publish_to(UPSTREAM_RESTART_TOPIC, name)).await?;
        Ok(reporting)
    }
}

fn rank(state: &str) -> u8 {
    match state {
        "failing" => 2,
        "starting" => 1,
        _ => 0,
    }
}

/// The upstreams of `nodes`, added up per name.
pub(crate) fn aggregate(nodes: &[NodeInfo]) -> Vec<UpstreamView> {
    // Per upstream: its view so far, and calls and errors per tool.
    type Sums = BTreeMap<String, (u64, u64)>;
    let mut out: BTreeMap<&str, (UpstreamView, Sums)> = BTreeMap::new();
    for node in nodes {
        for u in &node.upstreams {
            let (v, tools) = out.entry(&u.name).or_default();
            if v.name.is_empty() || rank(&u.state) > rank(&v.state) {
                v.state.clone_from(&u.state);
            }
            v.name.clone_from(&u.name);
            v.pool += u.pool;
            v.in_use += u.in_use;
            v.restarts += u.restarts;
            if u.catalog_version >= v.catalog_version {
                (v.catalog_version, v.tool_count) = (u.catalog_version, u.tool_count);
            }
            for t in &u.tools {
                let sum = tools.entry(t.tool.clone()).or_default();
                (sum.0, sum.1) = (sum.0 + t.calls, sum.1 + t.errors);
            }
            v.processes.push((node.id.clone(), node.role.clone(), u.clone()));
        }
    }
    out.into_values()
        .map(|(mut v, tools)| {
            v.tools = tools.into_iter().map(|(tool, (calls, errors))| ToolCalls { tool, calls, errors }).collect();
            v
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str, upstreams: Vec<UpstreamReport>) -> NodeInfo {
        NodeInfo {
            id: id.into(),
            role: "worker".into(),
            version: "test".into(),
            started_at_ms: 0,
            heartbeat_at_ms: 0,
            slots_in_use: 0,
            slots: 2,
            tools: Vec::new(),
            draining: false,
            created: 0,
            completed: 0,
            failed: 0,
            upstreams,
            config: None,
        }
    }

    fn report(state: &str, version: u64, calls: u64, errors: u64) -> UpstreamReport {
        UpstreamReport {
            name: "py".into(),
            state: state.into(),
            pool: 2,
            in_use: 1,
            restarts: 1,
            catalog_version: version,
            tool_count: version * 10,
            tools: vec![ToolCalls { tool: "echo".into(), calls, errors }],
            ..Default::default()
        }
    }

    #[test]
    fn processes_add_up_per_upstream_with_the_worst_state_and_newest_catalog() {
        let nodes = [
            node("w-1", vec![report("ready", 2, 3, 1)]),
            node("w-2", vec![report("failing", 1, 4, 0)]),
            node("api", Vec::new()),
        ];
        let views = aggregate(&nodes);
        assert_eq!(views.len(), 1);
        let v = &views[0];
        assert_eq!((v.name.as_str(), v.state.as_str()), ("py", "failing"));
        assert_eq!((v.pool, v.in_use, v.restarts, v.catalog_version, v.tool_count), (4, 2, 2, 2, 20));
        assert_eq!((v.tools[0].calls, v.tools[0].errors), (7, 1));
        assert_eq!(v.processes.iter().map(|p| p.0.as_str()).collect::<Vec<_>>(), ["w-1", "w-2"]);
    }
}
