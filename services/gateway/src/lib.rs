//! `presa-gateway`: presa in front of an existing MCP server, so that every
//! tool of a Python, TypeScript or any other server becomes a durable presa
//! task, served over 2026-07-28 with the Tasks extension (and to 2025-11-25
//! clients), on the same cluster, with presa's auth, limits and telemetry.
//!
//! The upstream is left as it is: a child process spoken to over stdio, or a
//! Streamable HTTP endpoint, in 2025-11-25 or 2026-07-28. Modules:
//!
//! - [`config`]: the flags and the TOML file (upstreams, per-tool rules). Pure.
//! - [`upstream`]: one connection (rmcp's client) and the [`upstream::Relay`]
//!   that hands what the upstream sends during a call to that call.
//! - [`pool`]: a bounded, lazily started, self-healing pool of connections per upstream.
//! - [`proxy`]: the tool handler that runs one upstream call as a plain call
//!   or a task: progress to status, questions to input requests, cancellation,
//!   upstream tasks, the crash policy.
//! - [`catalog`]: presa's catalog from the upstreams' listings.
//!
//! Every presa process (API pod, worker, embedded) holds its own pools: a
//! worker runs tasks there, an API process plain calls.

pub mod catalog;
pub mod config;
pub mod pool;
pub mod proxy;
pub mod upstream;

use std::sync::Arc;

use presa_server::Catalog;

use crate::{catalog::CatalogError, config::GatewayConfig, pool::Pool};

/// The gateway's pools and the catalog that uses them.
#[derive(Debug)]
pub struct Gateway {
    /// The catalog to serve.
    pub catalog: Catalog,
    pools: Vec<Arc<Pool>>,
}

impl Gateway {
    /// Start one connection to every upstream, list what each offers and
    /// build the catalog; any upstream that cannot be reached, initialised
    /// or listed, and any name two upstreams share, is an error.
    pub async fn start(config: &GatewayConfig) -> Result<Gateway, CatalogError> {
        let pools: Vec<Arc<Pool>> = config
            .upstreams
            .iter()
            .map(|u| Pool::new(u, config.timings.connect_timeout, config.timings.settle))
            .collect();
        let listings = futures::future::try_join_all(pools.iter().map(catalog::list)).await?;
        for (up, l) in config.upstreams.iter().zip(&listings) {
            tracing::info!(upstream = %up.name, tools = l.tools.len(), prompts = l.prompts.len(),
                resources = l.resources.len(), "upstream listed");
        }
        let catalog = catalog::build(config, &pools, &listings)?;
        Ok(Gateway { catalog, pools })
    }

    /// The pools, one per upstream.
    pub fn pools(&self) -> &[Arc<Pool>] {
        &self.pools
    }

    /// Close every idle connection (stdio children exit).
    pub async fn drain(pools: &[Arc<Pool>]) {
        for p in pools {
            p.drain().await;
        }
    }
}
