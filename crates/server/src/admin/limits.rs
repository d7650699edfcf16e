//! The limits a tool sets on what it calls, for the admin API's
//! `GET /admin/v1/limits`: each tool's concurrency limit with its permits
//! in use and its line per key (read from the store,
//! `presa_store::Permits::permit_usage`), and each tool's rate (its
//! settings: a rate keeps no count worth showing).

use presa_store::PermitUsage;

use super::{Admin, AdminError, Operator};
use crate::{concurrency::ToolConcurrency, flow::ToolRate, store_io::store_call};

/// One tool's limits.
#[derive(Debug, Clone)]
pub struct ToolLimits {
    /// The tool.
    pub tool: String,
    /// Its concurrency limit, if any, and each key's permits and line.
    pub concurrency: Option<(ToolConcurrency, Vec<PermitUsage>)>,
    /// Its rate, if any.
    pub rate: Option<ToolRate>,
}

impl Admin {
    /// Every tool's limits, in catalog order (tools without one left out).
    pub async fn limits(&self, op: &Operator) -> Result<Vec<ToolLimits>, AdminError> {
        op.cluster_only()?;
        let catalog = self.core.catalog();
        let mut out = Vec::new();
        for tool in catalog.tools() {
            let (concurrency, rate) = (tool.concurrency().cloned(), tool.rate());
            if concurrency.is_none() && rate.is_none() {
                continue;
            }
            let concurrency = match concurrency {
                Some(limit) => {
                    let usage = store_call("permit_usage", self.core.permits().permit_usage(tool.name())).await?;
                    Some((limit, usage))
                }
                None => None,
            };
            out.push(ToolLimits { tool: tool.name().to_string(), concurrency, rate });
        }
        Ok(out)
    }
}
