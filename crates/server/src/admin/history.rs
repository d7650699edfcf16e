//! [`History`]: the console's trends, the last minutes of the cluster's
//! figures as a bounded ring of points ([`Admin::history`], served at
//! `GET /admin/v1/history`; `docs/admin.md`).
//!
//! **Where it comes from.** Every API pod (and an embedded process) samples
//! the same cluster-wide sources every [`History::every`]: the work queues of
//! every partition (what `/queues` reads) and the process registry (what
//! `/cluster` reads). Tasks created, completed and failed are the registry's
//! per-node counters (`NodeInfo::created`, `completed`, `failed`, carried by
//! each node's heartbeat), differenced per node between two samples and
//! summed: a node that started since the last sample counts from zero, one
//! first seen older (this pod just started, or the node came back) is a
//! baseline, a node gone is forgotten. No write per task reaches the store
//! for this: the counters are in-process atomics the heartbeat already sends.
//! A sample costs one queue read and one registry read per pod.
//!
//! **The same curve on every pod.** Samples fall on multiples of the interval
//! on the wall clock (a point's `at_ms` is that instant), and every pod reads
//! the same store, so two pods' points agree within a sample; a pod only has
//! the points since it started. The counters move with each node's 5 s
//! heartbeat, so at an interval shorter than that the rates come in steps.
//!
//! **Bounded.** At most [`History::capacity`] points (the window over the
//! interval, at most [`MAX_HISTORY_POINTS`]) and one counter triple per live
//! node; an answer copies those points, nothing more. The sampler holds the
//! history weakly and ends when its last owner is dropped or `stop` fires.

use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Mutex, PoisonError, Weak},
    time::Duration,
};

use presa_store::{NodeInfo, PartitionStats, util::now_ms};
use tokio_util::sync::CancellationToken;

use crate::{
    core::Core,
    store_io::{Verbosity, store_call_at},
};

/// The default [`History::every`]: a point every 5 s.
pub const DEFAULT_HISTORY_EVERY: Duration = Duration::from_secs(5);
/// The default window: 15 minutes (180 points at the default interval).
pub const DEFAULT_HISTORY_WINDOW: Duration = Duration::from_secs(15 * 60);
/// Most points a history holds, whatever the window and interval.
pub const MAX_HISTORY_POINTS: usize = 2_000;
/// The shortest interval a history samples at.
pub const MIN_HISTORY_EVERY: Duration = Duration::from_millis(50);

/// The cluster's figures at one sample.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Point {
    /// When it was sampled, Unix ms (a multiple of the interval).
    pub at_ms: u64,
    /// Since the previous point, ms (what the counts cover).
    pub span_ms: u64,
    /// Tasks created in the span, cluster-wide.
    pub created: u64,
    /// Tasks finished `completed` in the span.
    pub completed: u64,
    /// Tasks finished `failed` in the span.
    pub failed: u64,
    /// Work waiting for a worker, every partition.
    pub queued: u64,
    /// Work claimed by a worker.
    pub pending: u64,
    /// Work waiting out a failed try's backoff (or its turn under a rate).
    pub delayed: u64,
    /// The oldest queued work's age, ms (`None`: none queued).
    pub oldest_queued_age_ms: Option<u64>,
    /// How late the earliest due delayed work is, ms (`None`: none due).
    pub oldest_due_age_ms: Option<u64>,
    /// Handler slots in use over the live processes.
    pub slots_in_use: u64,
    /// Handler slots of the live processes.
    pub slots: u64,
}

/// A node's counters at the previous sample.
type Counters = (u64, u64, u64);

#[derive(Debug, Default)]
struct Ring {
    points: VecDeque<Point>,
    last: HashMap<String, Counters>,
    last_at_ms: Option<u64>,
}

/// The last [`History::capacity`] points of the cluster's figures.
#[derive(Debug)]
pub struct History {
    every: Duration,
    capacity: usize,
    ring: Mutex<Ring>,
}

impl History {
    /// A history sampled `every` (at least [`MIN_HISTORY_EVERY`]) over
    /// `window` (at least one point, at most [`MAX_HISTORY_POINTS`]).
    pub fn new(every: Duration, window: Duration) -> Arc<Self> {
        let every = every.max(MIN_HISTORY_EVERY);
        let points = window.as_millis() / every.as_millis().max(1);
        let capacity = usize::try_from(points).unwrap_or(MAX_HISTORY_POINTS).clamp(1, MAX_HISTORY_POINTS);
        Arc::new(History { every, capacity, ring: Mutex::new(Ring::default()) })
    }

    /// How often it samples.
    pub fn every(&self) -> Duration {
        self.every
    }

    /// Most points it keeps.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Its points, oldest first.
    pub fn points(&self) -> Vec<Point> {
        self.ring.lock().unwrap_or_else(PoisonError::into_inner).points.iter().copied().collect()
    }

    /// Add the sample at `at_ms` of the registry's `nodes` and the queues'
    /// `stats`. The first sample is the counters' baseline and adds no point.
    pub fn record(&self, at_ms: u64, nodes: &[NodeInfo], stats: &[PartitionStats]) {
        let mut ring = self.ring.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(prev_at) = ring.last_at_ms else {
            ring.last = counters(nodes);
            ring.last_at_ms = Some(at_ms);
            return;
        };
        let (mut created, mut completed, mut failed) = (0, 0, 0);
        for n in nodes {
            let before = match ring.last.get(&n.id) {
                Some(c) => *c,
                // Started since the last sample: everything it counted is new.
                None if n.started_at_ms >= prev_at => (0, 0, 0),
                // First seen, but older: a baseline.
                None => (n.created, n.completed, n.failed),
            };
            created += n.created.saturating_sub(before.0);
            completed += n.completed.saturating_sub(before.1);
            failed += n.failed.saturating_sub(before.2);
        }
        let oldest = |f: fn(&PartitionStats) -> Option<u64>| stats.iter().filter_map(f).max();
        let point = Point {
            at_ms,
            span_ms: at_ms.saturating_sub(prev_at),
            created,
            completed,
            failed,
            queued: stats.iter().map(|s| s.queued).sum(),
            pending: stats.iter().map(|s| s.pending).sum(),
            delayed: stats.iter().map(|s| s.delayed).sum(),
            oldest_queued_age_ms: oldest(|s| s.oldest_queued_age_ms),
            oldest_due_age_ms: oldest(|s| s.oldest_due_age_ms),
            slots_in_use: nodes.iter().map(|n| n.slots_in_use).sum(),
            slots: nodes.iter().map(|n| n.slots).sum(),
        };
        if ring.points.len() >= self.capacity {
            ring.points.pop_front();
        }
        ring.points.push_back(point);
        ring.last = counters(nodes);
        ring.last_at_ms = Some(at_ms);
    }

    /// Sample `core`'s store at every multiple of the interval until `stop`
    /// fires or `history` is dropped. A failed read skips its sample (logged;
    /// the next point's span covers the gap).
    pub async fn run(history: Weak<History>, core: Core, stop: CancellationToken) {
        loop {
            let Some(every) = history.upgrade().map(|h| h.every) else { return };
            let every_ms = u64::try_from(every.as_millis()).unwrap_or(u64::MAX).max(1);
            let now = now_ms();
            let at_ms = (now / every_ms + 1) * every_ms;
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(at_ms - now)) => {}
                _ = stop.cancelled() => return,
            }
            let nodes = store_call_at(Verbosity::Debug, "nodes", core.admin().nodes()).await;
            let stats = store_call_at(Verbosity::Debug, "work_stats", core.work().work_stats()).await;
            let Some(history) = history.upgrade() else { return };
            match (nodes, stats) {
                (Ok(nodes), Ok(stats)) => history.record(at_ms, &nodes, &stats),
                (Err(e), _) | (_, Err(e)) => tracing::warn!(error = %e, "admin history: a sample failed; skipped"),
            }
        }
    }
}

fn counters(nodes: &[NodeInfo]) -> HashMap<String, Counters> {
    nodes.iter().map(|n| (n.id.clone(), (n.created, n.completed, n.failed))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str, started_at_ms: u64, counts: Counters) -> NodeInfo {
        NodeInfo {
            id: id.into(),
            role: "worker".into(),
            version: "test".into(),
            started_at_ms,
            heartbeat_at_ms: started_at_ms,
            slots_in_use: 1,
            slots: 4,
            tools: Vec::new(),
            draining: false,
            created: counts.0,
            completed: counts.1,
            failed: counts.2,
            upstreams: Vec::new(),
            config: None,
        }
    }

    fn queue(queued: u64, oldest: Option<u64>) -> PartitionStats {
        PartitionStats { queued, oldest_queued_age_ms: oldest, ..PartitionStats::default() }
    }

    #[test]
    fn counts_are_per_node_differences_summed() {
        let h = History::new(Duration::from_secs(5), Duration::from_secs(60));
        h.record(5_000, &[node("a", 0, (10, 7, 1))], &[queue(2, Some(300))]);
        assert!(h.points().is_empty(), "the first sample is a baseline");
        // `a` moved on, `b` started since the last sample, `old` is first seen (a baseline).
        let nodes = [node("a", 0, (13, 9, 1)), node("b", 6_000, (0, 4, 2)), node("old", 1_000, (50, 50, 50))];
        h.record(10_000, &nodes, &[queue(1, Some(900)), queue(3, None)]);
        let p = h.points()[0];
        assert_eq!((p.at_ms, p.span_ms, p.created, p.completed, p.failed), (10_000, 5_000, 3, 6, 2));
        assert_eq!((p.queued, p.oldest_queued_age_ms, p.slots_in_use, p.slots), (4, Some(900), 3, 12));
        // `b` is gone, `old` moves: only its increase counts.
        h.record(15_000, &[node("a", 0, (13, 9, 1)), node("old", 1_000, (51, 50, 50))], &[]);
        let p = h.points()[1];
        assert_eq!((p.created, p.completed, p.failed, p.queued, p.oldest_queued_age_ms), (1, 0, 0, 0, None));
    }

    #[test]
    fn it_keeps_its_capacity_and_no_more() {
        let h = History::new(Duration::from_secs(5), Duration::from_secs(20));
        assert_eq!(h.capacity(), 4);
        for i in 0..10 {
            h.record(i * 5_000, &[], &[]);
        }
        let at: Vec<u64> = h.points().iter().map(|p| p.at_ms).collect();
        assert_eq!(at, [30_000, 35_000, 40_000, 45_000]);
        let huge = History::new(Duration::ZERO, Duration::from_secs(86_400));
        assert_eq!((huge.every(), huge.capacity()), (MIN_HISTORY_EVERY, MAX_HISTORY_POINTS));
        assert_eq!(History::new(Duration::from_secs(60), Duration::ZERO).capacity(), 1);
    }
}
