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
//! `prefix`, `expose`, `hide` and `[[upstream.tool]]` tables, and what each
//! `[[server]]` serves (`upstreams`, `tools`, `hide`) — and
//! `[[upstream]]`s added after the running ones (started and listed as at
//! start). Calls in flight keep the tool they started with; the next call
//! sees the new catalog. What it refuses (the running config is kept and the
//! reason logged): a file that does not parse or check, shaping that does not
//! fit the upstreams' listings, an added upstream that cannot be started or
//! listed, and removing, reordering or changing a running upstream (its
//! command, URL, pool, protocol or breaker), a timing, or which `[[server]]`s
//! there are (and their scopes, identity, and `root`), which need a restart today.

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
        "{0} needs a restart: a reload applies the catalog's shaping, [[tool]] rules, what each [[server]] serves and added upstreams only"
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
    /// The pools the heartbeat reports (an upstream a reload adds joins them).
    pub(crate) reported: SharedPools,
}

/// The pools a process's heartbeat reports, shared with the catalog's follower.
pub(crate) type SharedPools = Arc<Mutex<Vec<Arc<Pool>>>>;

impl Live {
    /// Read the flags' config again and, if it checks, serve its catalog
    /// over `listings` (and those of the upstreams it adds, started and
    /// listed here, joining `pools`); on a refusal keep everything as it is.
    /// Logs either way.
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
            Ok(Checked { config, catalog: next, pools: added, listings: listed }) => {
                for (up, l) in config.upstreams[pools.len()..].iter().zip(&listed) {
                    tracing::info!(upstream = %up.name, tools = l.tools.len(), "upstream added by a reload");
                }
                pools.extend(added);
                listings.extend(listed);
                self.reported.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone_from(pools);
                crate::serve(cell, servers, next);
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

/// A new config that checked: its catalog, and the pools and listings of the upstreams it adds.
pub(crate) struct Checked {
    config: GatewayConfig,
    catalog: catalog::Catalogs,
    pools: Vec<Arc<Pool>>,
    listings: Vec<Listing>,
}

/// The new config and its catalog, or why not. An upstream it adds is
/// started and listed here (as at start); if the config is refused after
/// that, its connections are closed again.
async fn check(
    args: &GatewayArgs,
    running: &GatewayConfig,
    pools: &[Arc<Pool>],
    listings: &[Listing],
) -> Result<Checked, ReloadError> {
    let config = args.resolve()?;
    let added = added_upstreams(&running.upstreams, &config.upstreams)?;
    same_servers(running, &config)?;
    if config.timings != running.timings {
        return Err(ReloadError::NeedsRestart("changing a timing flag".into()));
    }
    let new_pools: Vec<Arc<Pool>> = added.iter().map(|u| Pool::new(u, &config.timings)).collect();
    let built = async {
        let new_listings = crate::list_all(&new_pools, config.timings.connect_timeout).await?;
        let all_pools = [pools, &new_pools].concat();
        let catalog = catalog::build_all(&config, &all_pools, &[listings, &new_listings].concat())?;
        Ok::<_, catalog::CatalogError>((catalog, new_listings))
    };
    match built.await {
        Ok((catalog, listings)) => Ok(Checked { config, catalog, pools: new_pools, listings }),
        Err(e) => {
            crate::Gateway::drain(&new_pools).await;
            Err(e.into())
        }
    }
}

/// The upstreams `new` adds after `old`'s, which it must keep, in order,
/// reached the same way (shaping aside).
fn added_upstreams<'a>(old: &[UpstreamConfig], new: &'a [UpstreamConfig]) -> Result<&'a [UpstreamConfig], ReloadError> {
    let names = |ups: &[UpstreamConfig]| ups.iter().map(|u| u.name.clone()).collect::<Vec<_>>();
    if new.len() < old.len() || names(old) != names(&new[..old.len()]) {
        return Err(ReloadError::NeedsRestart(format!(
            "removing or reordering upstreams ({:?} to {:?}; a reload may only add ones after them)",
            names(old),
            names(new)
        )));
    }
    for (o, n) in old.iter().zip(new) {
        let same = o.endpoint == n.endpoint && o.pool == n.pool && o.protocol == n.protocol && o.breaker == n.breaker;
        if !same {
            return Err(ReloadError::NeedsRestart(format!(
                "changing upstream {:?}'s command, URL, pool, protocol or breaker",
                o.name
            )));
        }
    }
    Ok(&new[old.len()..])
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
