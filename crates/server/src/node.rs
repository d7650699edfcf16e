//! This process in the cluster's registry ([`presa_store::AdminStore`]):
//! who it is, what it holds, what it finished, and whether an operator asked
//! it to drain. The admin API's cluster view is made of these heartbeats.
//!
//! A [`Node`] is shared by the process's parts: the worker counts its runs
//! and outcomes on it and stops claiming once [`Node::draining`] fires;
//! [`Node::heartbeat`] reports it every few seconds and learns of a drain
//! from the answer. A node that stops heartbeating is forgotten after
//! [`HEARTBEAT_TTL`].
//!
//! A process that calls upstream MCP servers (presa-gateway) hands the node
//! an [`UpstreamSource`] ([`Node::with_upstreams`]); each heartbeat then
//! carries its upstreams' figures ([`presa_store::UpstreamReport`], bounded),
//! which `GET /admin/v1/upstreams` adds up across the live registry.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use presa_store::{NodeInfo, UpstreamReport, util::now_ms};
use presa_tasks::Status;
use tokio_util::sync::CancellationToken;

use crate::{
    core::Core,
    store_io::{Verbosity, store_call_at},
};

/// How often a node reports itself.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(5);
/// How long a report holds: three missed heartbeats and the node is gone.
pub const HEARTBEAT_TTL: Duration = Duration::from_secs(15);

/// What a process reports of the upstream servers it calls, read at every
/// heartbeat (cheap: counters, no request to an upstream).
pub trait UpstreamSource: Send + Sync + std::fmt::Debug + 'static {
    /// Each upstream's figures in this process now.
    fn upstreams(&self) -> Vec<UpstreamReport>;

    /// An operator asked every process to restart upstream `name`'s
    /// connections ([`UPSTREAM_RESTART_TOPIC`]); whether this process has it.
    fn restart(&self, name: &str) -> bool;

    /// The config file this process serves (a gateway's), for
    /// `GET /admin/v1/gateway/config`; `None` (the default): it has none.
    fn config(&self) -> Option<presa_store::ConfigReport> {
        None
    }

    /// An operator asked every process to read its config file again
    /// ([`GATEWAY_RELOAD_TOPIC`]); whether this process has one to read.
    fn reload(&self) -> bool {
        false
    }
}

/// The event bus topic a gateway config reload is published on (the
/// message: `reload`); every process with an [`UpstreamSource`] listens.
pub const GATEWAY_RELOAD_TOPIC: &str = "admin.gateway-reload";

/// The event bus topic an upstream restart is published on (the message:
/// the upstream's name); every process with an [`UpstreamSource`] listens.
pub const UPSTREAM_RESTART_TOPIC: &str = "admin.upstream-restart";

/// This process's entry in the registry (cheap to clone: one shared state).
#[derive(Debug, Clone)]
pub struct Node {
    inner: Arc<Inner>,
    upstreams: Option<Arc<dyn UpstreamSource>>,
}

#[derive(Debug)]
struct Inner {
    id: String,
    role: &'static str,
    started_at_ms: u64,
    slots: u64,
    in_use: AtomicU64,
    completed: AtomicU64,
    failed: AtomicU64,
    draining: CancellationToken,
}

impl Node {
    /// A node `id` in `role` (`api`, `worker`, `embedded`), running at most
    /// `slots` handlers at once (0: it runs none).
    pub fn new(id: impl Into<String>, role: &'static str, slots: usize) -> Self {
        Node {
            inner: Arc::new(Inner {
                id: id.into(),
                role,
                started_at_ms: now_ms(),
                slots: slots as u64,
                in_use: AtomicU64::new(0),
                completed: AtomicU64::new(0),
                failed: AtomicU64::new(0),
                draining: CancellationToken::new(),
            }),
            upstreams: None,
        }
    }

    /// Report `source`'s upstreams in every heartbeat.
    pub fn with_upstreams(mut self, source: Arc<dyn UpstreamSource>) -> Self {
        self.upstreams = Some(source);
        self
    }

    /// Its id.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// Fires once an operator asked this node to drain: it claims nothing
    /// new and finishes what it holds.
    pub fn draining(&self) -> &CancellationToken {
        &self.inner.draining
    }

    /// A handler started running here.
    pub(crate) fn run_started(&self) {
        self.inner.in_use.fetch_add(1, Ordering::Relaxed);
    }

    /// A handler stopped running here.
    pub(crate) fn run_ended(&self) {
        self.inner.in_use.fetch_sub(1, Ordering::Relaxed);
    }

    /// A task this node ran ended in `status`.
    pub(crate) fn concluded(&self, status: Status) {
        match status {
            Status::Completed => self.inner.completed.fetch_add(1, Ordering::Relaxed),
            Status::Failed => self.inner.failed.fetch_add(1, Ordering::Relaxed),
            _ => 0,
        };
    }

    /// What its next heartbeat says, serving `tools`.
    pub fn report(&self, tools: Vec<String>) -> NodeInfo {
        let i = &self.inner;
        NodeInfo {
            id: i.id.clone(),
            role: i.role.to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            started_at_ms: i.started_at_ms,
            heartbeat_at_ms: now_ms(),
            slots_in_use: i.in_use.load(Ordering::Relaxed),
            slots: i.slots,
            tools,
            draining: i.draining.is_cancelled(),
            // What this process's dispatcher created: the heartbeat reads it from its core.
            created: 0,
            completed: i.completed.load(Ordering::Relaxed),
            failed: i.failed.load(Ordering::Relaxed),
            upstreams: self
                .upstreams
                .as_ref()
                .map(|s| presa_store::upstreams::bounded(s.upstreams()))
                .unwrap_or_default(),
            config: self.upstreams.as_ref().and_then(|s| s.config()).map(presa_store::ConfigReport::bounded),
        }
    }

    /// Report this node on `core`'s backend every [`HEARTBEAT_EVERY`] until
    /// `stop` fires; a drain asked of it fires [`Node::draining`]. A failed
    /// heartbeat is logged and tried again at the next tick (the store may
    /// be restarting).
    pub async fn heartbeat(self, core: Core, stop: CancellationToken) {
        self.heartbeat_every(HEARTBEAT_EVERY, core, stop).await;
    }

    /// [`Node::heartbeat`] every `every` (tests and tools that want a drain
    /// noticed sooner); each report still holds [`HEARTBEAT_TTL`].
    pub async fn heartbeat_every(self, every: Duration, core: Core, stop: CancellationToken) {
        if let Some(source) = self.upstreams.clone() {
            tokio::spawn(listen_for(UPSTREAM_RESTART_TOPIC, source.clone(), core.clone(), stop.clone()));
            tokio::spawn(listen_for(GATEWAY_RELOAD_TOPIC, source, core.clone(), stop.clone()));
        }
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = stop.cancelled() => return,
            }
            let tools = core.catalog().tools().map(|t| t.name().to_string()).collect();
            // The tasks this process's dispatcher created (a worker's: none), so
            // the registry's counters add up to the cluster's creations.
            let report = NodeInfo { created: core.tasks_created(), ..self.report(tools) };
            let admin = core.admin().clone();
            match store_call_at(Verbosity::Debug, "heartbeat", admin.heartbeat(&report, HEARTBEAT_TTL)).await {
                Ok(true) if !self.inner.draining.is_cancelled() => {
                    tracing::info!(node = %self.inner.id, "asked to drain: claiming nothing new");
                    self.inner.draining.cancel();
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "heartbeat failed; trying again"),
            }
        }
    }
}

/// Restart `source`'s upstreams ([`UPSTREAM_RESTART_TOPIC`]) or reload its
/// config ([`GATEWAY_RELOAD_TOPIC`]) as operators ask on `topic`, until
/// `stop`. Pub/sub is a wake-up: a process whose subscription is down when
/// the ask is published misses it (the operator asks again); a
/// subscription that ends is made again a second later.
async fn listen_for(topic: &'static str, source: Arc<dyn UpstreamSource>, core: Core, stop: CancellationToken) {
    use futures::StreamExt;
    while !stop.is_cancelled() {
        match core.bus().subscribe_to(topic).await {
            Ok(mut asks) => loop {
                let ask = tokio::select! {
                    ask = asks.next() => ask,
                    _ = stop.cancelled() => return,
                };
                match ask {
                    Some(Ok(_)) if topic == GATEWAY_RELOAD_TOPIC => {
                        if source.reload() {
                            tracing::info!("reading the gateway config again, as an operator asked");
                        }
                    }
                    Some(Ok(name)) => {
                        if source.restart(&name) {
                            tracing::info!(upstream = %name, "restarting the upstream's connections, as an operator asked");
                        }
                    }
                    Some(Err(e)) => {
                        tracing::warn!(error = %e, topic, "admin subscription lost; subscribing again");
                        break;
                    }
                    None => break,
                }
            },
            Err(e) => tracing::warn!(error = %e, topic, "subscribing to admin asks failed; trying again"),
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = stop.cancelled() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_counts_runs_and_outcomes() {
        let node = Node::new("w-1", "worker", 4);
        node.run_started();
        node.run_started();
        node.run_ended();
        node.concluded(Status::Completed);
        node.concluded(Status::Failed);
        node.concluded(Status::Cancelled);
        let report = node.report(vec!["echo".into()]);
        assert_eq!((report.slots_in_use, report.slots, report.completed, report.failed), (1, 4, 1, 1));
        assert_eq!((report.id.as_str(), report.role.as_str(), report.draining), ("w-1", "worker", false));
        node.draining().cancel();
        assert!(node.report(Vec::new()).draining);
        assert!(report.upstreams.is_empty());
    }

    #[derive(Debug)]
    struct One;

    impl UpstreamSource for One {
        fn upstreams(&self) -> Vec<UpstreamReport> {
            vec![UpstreamReport { name: "u".into(), state: "ready".into(), pool: 2, ..Default::default() }]
        }

        fn restart(&self, name: &str) -> bool {
            name == "u"
        }
    }

    #[test]
    fn a_report_carries_the_upstreams_of_its_source() {
        let node = Node::new("g-1", "embedded", 2).with_upstreams(Arc::new(One));
        let report = node.report(Vec::new());
        assert_eq!(report.upstreams.len(), 1);
        assert_eq!((report.upstreams[0].name.as_str(), report.upstreams[0].pool), ("u", 2));
    }
}
