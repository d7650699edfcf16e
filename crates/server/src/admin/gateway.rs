//! A gateway's config file in the admin API: `GET /admin/v1/gateway/config`
//! (what each gateway process serves, read from the live registry's
//! heartbeats, [`crate::node::UpstreamSource::config`]) and
//! `POST /admin/v1/gateway/reload`, published on the event bus
//! ([`crate::node::GATEWAY_RELOAD_TOPIC`]) to every process, each of which
//! reads its own copy of the file again (`services/gateway/src/reload.rs`).

use presa_store::ConfigReport;

use super::{Admin, AdminError, Operator};
use crate::{node::GATEWAY_RELOAD_TOPIC, store_io::store_call};

/// One process's config, as its last heartbeat told it.
#[derive(Debug, Clone)]
pub struct ConfigView {
    /// The process's node id.
    pub node: String,
    /// Its role (`embedded`, `api`, `worker`).
    pub role: String,
    /// What it said of its config.
    pub report: ConfigReport,
}

impl Admin {
    /// The config of every live process that has one (a gateway's).
    pub async fn gateway_config(&self, op: &Operator) -> Result<Vec<ConfigView>, AdminError> {
        op.cluster_only()?;
        let nodes = store_call("nodes", self.core.admin().nodes()).await?;
        let view = |n: presa_store::NodeInfo| n.config.map(|report| ConfigView { node: n.id, role: n.role, report });
        Ok(nodes.into_iter().filter_map(view).collect())
    }

    /// Ask every process to read its config file again; the processes
    /// reporting one now (those that will act on it, unless one misses the
    /// ask). [`AdminError::NotFound`] when no live process reports a config.
    pub async fn reload_gateway(&self, op: &Operator) -> Result<Vec<String>, AdminError> {
        op.cluster_only()?;
        let outcome = self.reload_reported().await;
        let said = match &outcome {
            Ok(nodes) => format!("asked {} process(es)", nodes.len()),
            Err(AdminError::NotFound(_)) => "not found".to_string(),
            Err(_) => "failed".to_string(),
        };
        op.audit("reload_gateway", "gateway", &said, outcome.is_ok());
        outcome
    }

    async fn reload_reported(&self) -> Result<Vec<String>, AdminError> {
        let nodes = store_call("nodes", self.core.admin().nodes()).await?;
        let reporting: Vec<String> = nodes.iter().filter(|n| n.config.is_some()).map(|n| n.id.clone()).collect();
        if reporting.is_empty() {
            return Err(AdminError::NotFound("gateway config"));
        }
        store_call("publish_to", self.core.bus().publish_to(GATEWAY_RELOAD_TOPIC, "reload")).await?;
        Ok(reporting)
    }
}
