//! Changing the gateway's config live: re-reading `--gateway-config` when the
//! process gets `SIGHUP` (wired in `services/gateway/src/main.rs`), when
//! `--gateway-config-watch-ms` sees the file's content change ([`watch`]), or an
//! operator asks `POST /admin/v1/gateway/reload` (published to every process
//! by `crates/server/src/admin/gateway.rs`, reaching [`Reloader::reload`]
//! through the process's `UpstreamSource` in `services/gateway/src/lib.rs`),
//! checking it exactly as at start, and serving the catalog it makes in
//! place of the old one (the same path as a change of an upstream's lists,
//! so listen streams are told `notifications/tools/list_changed`). What is
//! served, and the last refusal, go in the heartbeat ([`Reloader::report`])
//! for `GET /admin/v1/gateway/config`. The whole story: docs/gateway.md,
//! "Changing the config live".
//!
//! What a reload applies: everything the catalog is built from — the
//! `[[tool]]` rules, `--task-after-ms`'s policy, each upstream's
//! `prefix`, `expose`, `hide` and `[[upstream.tool]]` tables, what each
//! `[[server]]` serves (`upstreams`, `tools`, `hide`) — and the
//! `[[upstream]]`s themselves: one added, or whose command, environment,
//! URL, auth, pool, protocol or breaker changed, gets a new pool (started and
//! listed as at start) that serves the next calls; one removed leaves the
//! catalog at once; in either case the old pool is retired
//! (`Pool::retire` in `services/gateway/src/pool.rs`): it takes no new
//! call, its calls in flight finish, then its connections close (a stdio
//! child exits). Upstreams may be reordered. Calls in flight keep the tool
//! (and pool) they started with; the next call sees the new catalog. What
//! it refuses (the running config is kept and the reason logged): a file
//! that does not parse or check, shaping that does not fit the upstreams'
//! listings, an added or changed upstream that cannot be started or listed,
//! and changing a timing flag or which `[[server]]`s there are (their names,
//! scopes, identity, and `root`), which need a restart.

use std::{
    hash::{DefaultHasher, Hash, Hasher},
    sync::{Arc, Mutex},
};

use presa_server::CatalogCell;
use presa_store::ConfigReport;

use crate::{
    catalog::{self, Listing},
    config::{ConfigError, GatewayArgs, GatewayConfig, UpstreamConfig},
    pool::Pool,
};

/// Why a new config was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReloadError {
    /// The file cannot be read, parsed or checked.
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// Its shaping does not fit what the upstreams list.
    #[error("{0}")]
    Catalog(#[from] catalog::CatalogError),
    /// It changes what a reload cannot (yet) apply.
    #[error(
        "{0} needs a restart: a reload applies everything in the file but the timing flags and which [[server]]s there are"
    )]
    NeedsRestart(String),
}

/// Asks the catalog's follower ([`crate::Gateway::follow`]) to reload, and
/// tells what it serves ([`Reloader::report`]).
#[derive(Debug, Clone)]
pub struct Reloader {
    ask: Arc<tokio::sync::Notify>,
    status: Arc<Mutex<ConfigReport>>,
}

impl Reloader {
    pub(crate) fn new(config: &GatewayConfig) -> (Reloader, Arc<tokio::sync::Notify>) {
        let ask = Arc::new(tokio::sync::Notify::new());
        let status = ConfigReport { version: version(config), loaded_at_ms: now_ms(), ..ConfigReport::default() };
        (Reloader { ask: ask.clone(), status: Arc::new(Mutex::new(status)) }, ask)
    }

    /// Re-read the config file soon (asks made while one runs are one more reload).
    pub fn reload(&self) {
        self.ask.notify_one();
    }

    /// The config served now: its version, when it was loaded, the last refusal.
    pub fn report(&self) -> ConfigReport {
        self.status.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    fn update(&self, f: impl FnOnce(&mut ConfigReport)) {
        f(&mut self.status.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
    }
}

/// Reload on every `SIGHUP` this process gets: the signal reaches this
/// process only (another pod or worker reloads on its own signal).
#[cfg(unix)]
pub fn on_sighup(reloader: Reloader) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let mut hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    Ok(tokio::spawn(async move {
        while hup.recv().await.is_some() {
            tracing::info!("SIGHUP: reading the gateway config again");
            reloader.reload();
        }
    }))
}

/// With `--gateway-config-watch-ms`, reload whenever the file's content
/// changes (read every that many ms; an unreadable read is skipped, and a
/// ConfigMap's atomic swap is seen as one change).
pub fn watch(args: &GatewayArgs, reloader: Reloader) -> Option<tokio::task::JoinHandle<()>> {
    let path = args.gateway_config.clone()?;
    let every = Some(args.gateway_config_watch_ms).filter(|ms| *ms > 0).map(std::time::Duration::from_millis)?;
    Some(tokio::spawn(async move {
        let mut seen = fingerprint(&path).await;
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            let Some(now) = fingerprint(&path).await else { continue };
            if seen != Some(now) {
                if seen.is_some() {
                    tracing::info!(path = %path.display(), "the gateway config file changed; reading it again");
                    reloader.reload();
                }
                seen = Some(now);
            }
        }
    }))
}

/// A hash of the file's content (`None`: it cannot be read now).
async fn fingerprint(path: &std::path::Path) -> Option<u64> {
    let bytes = tokio::fs::read(path).await.ok()?;
    let mut h = DefaultHasher::new();
    bytes.hash(&mut h);
    Some(h.finish())
}

/// The config being served, and how to read it again.
#[derive(Debug)]
pub(crate) struct Live {
    /// The flags the config came from (`None`: not reloadable).
    pub(crate) args: Option<GatewayArgs>,
    /// The config being served.
    pub(crate) config: GatewayConfig,
    /// Where what is served is told.
    pub(crate) status: Reloader,
    /// The pools the heartbeat reports and `/readyz` checks: those served now (a reload replaces them).
    pub(crate) reported: SharedPools,
}

/// The pools a process's heartbeat reports, shared with the catalog's follower.
pub(crate) type SharedPools = Arc<Mutex<Vec<Arc<Pool>>>>;

impl Live {
    /// Read the flags' config again and, if it checks, serve its catalog
    /// over `pools` and `listings` as the new config has them (a kept
    /// upstream keeps its pool; an added or changed one gets a new pool,
    /// started and listed here); the pools it no longer uses are retired
    /// ([`Pool::retire`]: their calls in flight finish, then they close). On
    /// a refusal keep everything as it is. Logs either way.
    /// The servers' catalogs (`servers`) are served with the whole one.
    pub(crate) async fn reload(
        &mut self,
        pools: &mut Vec<Arc<Pool>>,
        listings: &mut Vec<Listing>,
        cell: &CatalogCell,
        servers: &[CatalogCell],
    ) {
        let Some(args) = &self.args else {
            tracing::warn!("reload asked, but this gateway has no --gateway-config to read again");
            return;
        };
        match check(args, &self.config, pools, listings).await {
            Ok(Checked { config, catalog: next, pools: now, listings: listed }) => {
                for (pool, l) in now.iter().zip(&listed).filter(|(p, _)| !pools.iter().any(|o| Arc::ptr_eq(o, p))) {
                    pool.stats().listed(l.tools.len(), true);
                    tracing::info!(upstream = %pool.name(), tools = l.tools.len(), "upstream started by a reload");
                }
                let old = std::mem::replace(pools, now);
                *listings = listed;
                self.reported.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone_from(pools);
                crate::serve(cell, servers, next);
                for gone in old.iter().filter(|o| !pools.iter().any(|p| Arc::ptr_eq(o, p))) {
                    let changed = pools.iter().any(|p| p.name() == gone.name());
                    tracing::info!(upstream = %gone.name(), changed, "upstream removed or changed by a reload; its old pool drains");
                    gone.retire();
                }
                let version = version(&config);
                tracing::info!(%version, "gateway config reloaded; serving the new catalog");
                self.status.update(|s| (s.version, s.loaded_at_ms) = (version, now_ms()));
                metrics::counter!("presa_gateway_reloads_total", "outcome" => "applied").increment(1);
                self.config = config;
            }
            Err(e) => {
                tracing::warn!(reason = %e, "gateway config reload refused; keeping the running config");
                self.status.update(|s| (s.refused_at_ms, s.refusal) = (Some(now_ms()), Some(e.to_string())));
                metrics::counter!("presa_gateway_reloads_total", "outcome" => "refused").increment(1);
            }
        }
    }
}

/// A new config that checked: its catalog, and the pools and listings it is
/// served over, one per upstream in its order.
pub(crate) struct Checked {
    config: GatewayConfig,
    catalog: catalog::Catalogs,
    pools: Vec<Arc<Pool>>,
    listings: Vec<Listing>,
}

/// The new config and its catalog, or why not. An upstream reached the same
/// way as a running one of its name keeps that one's pool and listing; any
/// other (added, or its command, URL, auth, pool, protocol or breaker
/// changed) gets a new pool, started and listed here (as at start); if the
/// config is refused after that, the new pools' connections are closed again.
async fn check(
    args: &GatewayArgs,
    running: &GatewayConfig,
    pools: &[Arc<Pool>],
    listings: &[Listing],
) -> Result<Checked, ReloadError> {
    let config = args.resolve()?;
    same_servers(running, &config)?;
    if config.timings != running.timings {
        return Err(ReloadError::NeedsRestart("changing a timing flag".into()));
    }
    let kept: Vec<Option<usize>> = config.upstreams.iter().map(|u| kept_index(&running.upstreams, u)).collect();
    let started: Vec<Arc<Pool>> = (config.upstreams.iter().zip(&kept))
        .filter(|(_, k)| k.is_none())
        .map(|(u, _)| Pool::new(u, &config.timings))
        .collect();
    let built = async {
        let mut fresh = crate::list_all(&started, config.timings.connect_timeout).await?.into_iter();
        let mut new = started.iter();
        let (mut all_pools, mut all_listings) = (Vec::new(), Vec::new());
        for k in &kept {
            let (pool, listing) = match k {
                Some(i) => (pools[*i].clone(), listings[*i].clone()),
                None => (new.next().expect("one new pool each").clone(), fresh.next().expect("one listing each")),
            };
            all_pools.push(pool);
            all_listings.push(listing);
        }
        let catalog = catalog::build_all(&config, &all_pools, &all_listings)?;
        Ok::<_, catalog::CatalogError>((catalog, all_pools, all_listings))
    };
    match built.await {
        Ok((catalog, pools, listings)) => Ok(Checked { config, catalog, pools, listings }),
        Err(e) => {
            for pool in &started {
                pool.retire();
            }
            Err(e.into())
        }
    }
}

/// Which running upstream `new` keeps: the one of its name reached the same
/// way (command and environment, URL and auth, pool, protocol, breaker;
/// shaping aside), wherever it stands in the file.
fn kept_index(old: &[UpstreamConfig], new: &UpstreamConfig) -> Option<usize> {
    old.iter().position(|o| {
        o.name == new.name
            && o.endpoint == new.endpoint
            && o.pool == new.pool
            && o.protocol == new.protocol
            && o.breaker == new.breaker
    })
}

/// A reload applies what each `[[server]]` serves (its `upstreams`,
/// `tools`, `hide`), not which servers there are nor their scopes and
/// identity, nor `root`: those make the endpoints the HTTP router serves.
fn same_servers(old: &GatewayConfig, new: &GatewayConfig) -> Result<(), ReloadError> {
    let fixed =
        |s: &crate::config::VirtualServer| (s.name.clone(), s.scopes.clone(), s.title.clone(), s.instructions.clone());
    if old.root != new.root || !old.servers.iter().map(fixed).eq(new.servers.iter().map(fixed)) {
        return Err(ReloadError::NeedsRestart(
            "adding, removing or renaming a [[server]], or changing its scopes, title or instructions, or root".into(),
        ));
    }
    Ok(())
}

/// A short fingerprint of a config, for logs.
fn version(config: &GatewayConfig) -> String {
    let mut h = DefaultHasher::new();
    format!("{config:?}").hash(&mut h);
    format!("{:016x}", h.finish())
}

fn now_ms() -> u64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests;
