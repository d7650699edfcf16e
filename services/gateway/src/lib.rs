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
//! - [`catalog`]: presa's catalog from the upstreams' listings, shaped by
//!   their `expose`, `hide` and `[[upstream.tool]]` tables ([`catalog::shape`]),
//!   and each virtual server's (`[[server]]`, served at `/mcp/<name>`:
//!   [`Gateway::endpoints`]).
//! - `convert`: every conversion between rmcp's types and presa's, typed, in one place.
//! - [`reload`]: re-reading `--gateway-config` live (`SIGHUP`, or the admin
//!   API's reload through [`Upstreams`]), checked as at start, its catalog
//!   served in place of the old one.
//! - [`stats`]: what a pool has seen (state, restarts, last error redacted,
//!   catalog version, calls and errors per tool), for the heartbeat.
//!
//! Every presa process (API pod, worker, embedded) holds its own pools: a
//! worker runs tasks there, an API process plain calls. Each reports its
//! pools in its heartbeat ([`Upstreams`], a `presa_server::UpstreamSource`),
//! which the admin API's `GET /admin/v1/upstreams` adds up across the
//! cluster; an operator's restart reaches every process's [`Pool::restart`].

pub mod catalog;
pub mod config;
mod convert;
pub mod pool;
pub mod proxy;
pub mod reload;
pub mod stats;
pub mod upstream;

use std::{sync::Arc, time::Duration};

use presa_server::CatalogCell;

use crate::{
    catalog::{CatalogError, Listing},
    config::{GatewayArgs, GatewayConfig},
    pool::Pool,
    reload::{Live, Reloader, SharedPools},
};

/// How soon a failed listing is tried again (then twice as long each time, up to the refresh period).
const RELIST_AFTER_FAILURE: Duration = Duration::from_secs(2);

/// The gateway's pools and the catalog that uses them.
#[derive(Debug)]
pub struct Gateway {
    /// The catalog to serve; replaced when an upstream's lists change.
    pub catalog: CatalogCell,
    /// Each `[[server]]`'s catalog (`config.servers[i]`'s), replaced with it.
    servers: Vec<CatalogCell>,
    config: GatewayConfig,
    pools: Vec<Arc<Pool>>,
    listings: Vec<Listing>,
    args: Option<GatewayArgs>,
    reloader: Reloader,
    reload_asked: Arc<tokio::sync::Notify>,
    reported: SharedPools,
}

impl Gateway {
    /// Start one connection to every upstream, list what each offers and
    /// build the catalog; any upstream that cannot be reached, initialised
    /// or listed, and any name two upstreams share, is an error.
    pub async fn start(config: &GatewayConfig) -> Result<Gateway, CatalogError> {
        let timings = &config.timings;
        let pools: Vec<Arc<Pool>> = config.upstreams.iter().map(|u| Pool::new(u, timings)).collect();
        let listings = list_all(&pools, timings.connect_timeout).await?;
        for (up, l) in config.upstreams.iter().zip(&listings) {
            tracing::info!(upstream = %up.name, tools = l.tools.len(), prompts = l.prompts.len(),
                resources = l.resources.len(), "upstream listed");
        }
        let catalog::Catalogs { all, servers } = catalog::build_all(config, &pools, &listings)?;
        let (catalog, servers) = (all.into(), servers.into_iter().map(CatalogCell::from).collect());
        for (pool, l) in pools.iter().zip(&listings) {
            pool.stats().listed(l.tools.len(), true);
        }
        let (reloader, reload_asked) = Reloader::new(config);
        let reported = Arc::new(std::sync::Mutex::new(pools.clone()));
        Ok(Gateway {
            catalog,
            servers,
            config: config.clone(),
            pools,
            listings,
            args: None,
            reloader,
            reload_asked,
            reported,
        })
    }

    /// The virtual servers (`[[server]]`) to serve at `/mcp/<name>`, each
    /// with its catalog (replaced as the whole one is), scopes and identity,
    /// and whether `/mcp` serves the whole catalog.
    pub fn endpoints(&self) -> Result<presa_server::Endpoints, presa_server::EndpointError> {
        let endpoints = (self.config.servers.iter().zip(&self.servers))
            .map(|(s, cell)| presa_server::Endpoint {
                name: s.name.clone(),
                catalog: cell.clone(),
                scopes: s.scopes.clone(),
                title: s.title.clone(),
                instructions: s.instructions.clone(),
            })
            .collect();
        presa_server::Endpoints::new(endpoints, self.config.root)
    }

    /// Let [`Gateway::reloader`] read `args`' config file again; without
    /// `--gateway-config` (flags only) there is nothing to reload.
    pub fn reloadable(mut self, args: GatewayArgs) -> Self {
        self.args = args.gateway_config.is_some().then_some(args);
        self
    }

    /// What asks this gateway to reload its config ([`reload`]), once it follows.
    pub fn reloader(&self) -> Reloader {
        self.reloader.clone()
    }

    /// `/readyz` for the gateway's processes: every upstream served now (a
    /// reload may change them) can be served (an upstream whose process
    /// keeps failing to start makes the pod unready), except those with a
    /// circuit breaker: while one is down, its breaker keeps calls off it,
    /// and a pod restarted would not heal it.
    pub fn ready_check(&self) -> presa_http::ReadyCheck {
        let served = self.reported.clone();
        Arc::new(move || {
            let pools: Vec<Arc<Pool>> = served.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
            Box::pin(async move {
                let checked = pools.iter().filter(|p| !p.has_breaker()).map(Pool::ready);
                futures::future::join_all(checked).await.into_iter().all(|r| r)
            })
        })
    }

    /// The pools, one per upstream.
    pub fn pools(&self) -> &[Arc<Pool>] {
        &self.pools
    }

    /// What this process's heartbeats report of its pools.
    pub fn upstreams(&self) -> Arc<Upstreams> {
        let reloader = self.args.is_some().then(|| self.reloader.clone());
        Arc::new(Upstreams { pools: self.reported.clone(), reloader })
    }

    /// Follow the upstreams' lists: list again when one says a list changed
    /// (`notifications/tools/list_changed` and the like) and every
    /// `--upstream-refresh-ms`; a listing that differs replaces the catalog
    /// (which every pod then announces to its listen streams). A failed
    /// listing keeps the catalog as it is and is tried again two seconds later
    /// (backing off to the refresh period while it keeps failing). A reload
    /// asked through [`Gateway::reloader`] is done here too, between listings,
    /// so the config and the listings a catalog is built from never race.
    pub fn follow(self) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let Gateway { catalog, servers, config, mut pools, mut listings, args, reloader, reload_asked, reported } =
                self;
            let mut live = Live { args, config, status: reloader, reported };
            let refresh = live.config.timings.refresh.unwrap_or(Duration::from_secs(365 * 24 * 3600));
            // After a failed listing (every connection busy past
            // --upstream-wait-ms, an upstream down), try again soon, then less
            // and less often: a change it was announcing is not left for the
            // next refresh, and an upstream that stays down is not listed in a loop.
            let mut retry: Option<Duration> = None;
            loop {
                let changed = futures::future::select_all(pools.iter().map(|p| {
                    let n = p.lists_changed();
                    Box::pin(async move { n.notified().await })
                }));
                let next = retry.unwrap_or(refresh);
                tokio::select! {
                    _ = changed => tracing::info!("an upstream says its lists changed; listing again"),
                    _ = tokio::time::sleep(next) => {}
                    _ = reload_asked.notified() => {
                        live.reload(&mut pools, &mut listings, &catalog, &servers).await;
                        continue;
                    }
                }
                let config = &live.config;
                let fresh = match list_all(&pools, config.timings.connect_timeout).await {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::warn!(error = %e, "listing the upstreams again failed; keeping the catalog");
                        retry = Some(retry.map_or(RELIST_AFTER_FAILURE, |r| r.saturating_mul(2)).min(refresh));
                        continue;
                    }
                };
                retry = None;
                if fresh == listings {
                    continue;
                }
                match catalog::build_all(config, &pools, &fresh) {
                    Ok(next) => {
                        tracing::info!("the upstreams' lists changed; serving the new catalog");
                        metrics::counter!("presa_gateway_catalog_changes_total").increment(1);
                        serve(&catalog, &servers, next);
                        for ((pool, old), new) in pools.iter().zip(&listings).zip(&fresh) {
                            pool.stats().listed(new.tools.len(), old != new);
                        }
                        listings = fresh;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "the upstreams' new lists do not make a catalog; keeping the old one");
                    }
                }
            }
        })
    }

    /// Close every idle connection (stdio children exit).
    pub async fn drain(pools: &[Arc<Pool>]) {
        for p in pools {
            p.drain().await;
        }
    }
}

/// A process's pools as its heartbeat reports them, and restarted when an
/// operator asks; with a config file, what it serves and its reload.
#[derive(Debug)]
pub struct Upstreams {
    pools: SharedPools,
    reloader: Option<Reloader>,
}

impl Upstreams {
    fn pools(&self) -> Vec<Arc<Pool>> {
        self.pools.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Close the idle connections of the pools served now (on shutdown).
    pub async fn drain(&self) {
        Gateway::drain(&self.pools()).await;
    }
}

impl presa_server::UpstreamSource for Upstreams {
    fn upstreams(&self) -> Vec<presa_store::UpstreamReport> {
        self.pools().iter().map(|p| p.report()).collect()
    }

    fn restart(&self, name: &str) -> bool {
        let pool = self.pools().into_iter().find(|p| p.name() == name);
        pool.inspect(|p| p.restart()).is_some()
    }

    fn config(&self) -> Option<presa_store::ConfigReport> {
        self.reloader.as_ref().map(Reloader::report)
    }

    fn reload(&self) -> bool {
        self.reloader.as_ref().inspect(|r| r.reload()).is_some()
    }
}

/// Serve `next`: each virtual server's catalog first, then the whole one,
/// whose replacement is what every pod announces to its listen streams.
pub(crate) fn serve(all: &CatalogCell, servers: &[CatalogCell], next: catalog::Catalogs) {
    for (cell, c) in servers.iter().zip(next.servers) {
        cell.replace(c);
    }
    all.replace(next.all);
}

pub(crate) async fn list_all(pools: &[Arc<Pool>], timeout: Duration) -> Result<Vec<Listing>, CatalogError> {
    futures::future::try_join_all(pools.iter().map(|p| catalog::list(p, timeout))).await
}
