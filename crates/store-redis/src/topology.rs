//! The shape of the Redis deployment a store runs on, chosen once when the
//! store is opened (`RedisConfig::cluster`), and everything that differs
//! between the two:
//!
//! | | standalone (or found through Sentinel) | Redis Cluster |
//! |---|---|---|
//! | publishing a task's snapshot | `PUBLISH` | sharded `SPUBLISH` |
//! | waking waiting claimers | nothing: they block on the streams | `SPUBLISH` on the partition's wake channel |
//! | waiting for work | blocking `XREAD` on [`Blocking`] connections | [`Topology::wakeups`], or polling |
//! | one script over several slots | yes: a task's keys and its scope's, every partition's stream | no: one script per partition, and a scope's steps (`admit`, `quota`, `resize`, forgetting an ended task) around the task's script |
//!
//! Callers ask the topology rather than the configuration, so the choice
//! is made in one place.

use std::sync::Arc;

use futures::StreamExt;
use tokio::sync::{Notify, OnceCell};

use crate::{config::RedisConfig, conn::Blocking, conn::Endpoint, error::RedisStoreError, hub::Hub, keys::Keys};

/// Standalone Redis or a Redis Cluster, with what only that one needs.
#[derive(Debug)]
pub(crate) enum Topology {
    /// One server (given by URL, or found through Sentinel): scripts may
    /// take keys of any slot, and claims wait on its streams.
    Standalone {
        /// Dedicated connections for blocking reads (boxed: the enum stays small).
        blocking: Box<Blocking>,
    },
    /// A Redis Cluster: one script per slot, and claims woken by the
    /// partitions' sharded wake channels.
    Cluster {
        /// Pinged whenever work is enqueued or released (set up by the first
        /// claim that waits).
        wakeups: OnceCell<Arc<Notify>>,
    },
}

impl Topology {
    /// The topology `cfg` names (a standalone server's blocking-read pool is
    /// built here, so a bad URL fails at once).
    pub(crate) fn open(cfg: &RedisConfig, endpoint: &Endpoint) -> Result<Topology, RedisStoreError> {
        Ok(if cfg.cluster {
            Topology::Cluster { wakeups: OnceCell::new() }
        } else {
            Topology::Standalone { blocking: Box::new(Blocking::new(cfg, endpoint)?) }
        })
    }

    /// The command that publishes a task's snapshot: `PUBLISH` on a
    /// standalone server, sharded `SPUBLISH` on a cluster.
    pub(crate) fn publish_cmd(&self) -> &'static str {
        match self {
            Topology::Standalone { .. } => "PUBLISH",
            Topology::Cluster { .. } => "SPUBLISH",
        }
    }

    /// How scripts wake waiting claimers: `SPUBLISH` on a cluster, nothing
    /// (`""`) on a standalone server, where claimers block on the streams.
    pub(crate) fn wake_cmd(&self) -> &'static str {
        match self {
            Topology::Standalone { .. } => "",
            Topology::Cluster { .. } => "SPUBLISH",
        }
    }

    /// The connections blocking reads wait on (standalone only: one
    /// `XREAD` cannot block on streams of several slots).
    pub(crate) fn blocking(&self) -> Option<&Blocking> {
        match self {
            Topology::Standalone { blocking } => Some(blocking),
            Topology::Cluster { .. } => None,
        }
    }

    /// Whether one script may take keys of several hash slots: a task's and
    /// its scope's (`create_scoped.lua`, the scope keys of
    /// `transition.lua`), or several partitions' streams (`read.lua` with
    /// the tasks' docs, `recover.lua`, `unhold.lua`, `claim_batch.lua`).
    /// A cluster runs the scope's steps as scripts of their own and each
    /// partition's work in a script of its own.
    pub(crate) fn spans_slots(&self) -> bool {
        matches!(self, Topology::Standalone { .. })
    }

    /// `items` grouped into the scripts that may run them: all in one on a
    /// standalone server (none when empty), one group per partition (in
    /// order of first appearance) on a cluster.
    pub(crate) fn script_groups<T>(&self, items: Vec<T>, partition: impl Fn(&T) -> u16) -> Vec<Vec<T>> {
        if self.spans_slots() {
            return if items.is_empty() { Vec::new() } else { vec![items] };
        }
        let mut groups: Vec<Vec<T>> = Vec::new();
        for item in items {
            match groups.iter_mut().find(|g| partition(&g[0]) == partition(&item)) {
                Some(g) => g.push(item),
                None => groups.push(vec![item]),
            }
        }
        groups
    }

    /// Cluster mode: a notifier pinged whenever work is enqueued or released
    /// on any partition (one sharded subscription per store, shared by every
    /// waiting claim). `None` on a standalone server (claims block on the
    /// streams), and while it cannot be set up (claims then poll).
    pub(crate) async fn wakeups(&self, keys: &Keys, hub: &Hub) -> Option<Arc<Notify>> {
        let Topology::Cluster { wakeups } = self else {
            return None;
        };
        let init = || async {
            let channels = (0..keys.partitions()).map(|p| keys.wake(p)).collect();
            let mut pings = hub.subscribe(channels).await?;
            let notify = Arc::new(Notify::new());
            let weak = Arc::downgrade(&notify);
            tokio::spawn(async move {
                while pings.next().await.is_some() {
                    let Some(notify) = weak.upgrade() else { break };
                    notify.notify_waiters();
                }
            });
            Ok::<_, RedisStoreError>(notify)
        };
        match wakeups.get_or_try_init(init).await {
            Ok(n) => Some(n.clone()),
            Err(e) => {
                tracing::warn!(error = %e, "no work wake-ups; claims poll instead");
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster() -> Topology {
        Topology::Cluster { wakeups: OnceCell::new() }
    }

    #[test]
    fn a_cluster_groups_by_partition_in_order_of_first_appearance() {
        let groups = cluster().script_groups(vec![(3, 'a'), (1, 'b'), (3, 'c'), (2, 'd'), (1, 'e')], |i| i.0);
        assert_eq!(groups, vec![vec![(3, 'a'), (3, 'c')], vec![(1, 'b'), (1, 'e')], vec![(2, 'd')]]);
        assert!(cluster().script_groups(Vec::<u16>::new(), |p| *p).is_empty());
    }

    #[test]
    fn a_cluster_publishes_sharded_and_has_no_blocking_reads() {
        let t = cluster();
        assert_eq!((t.publish_cmd(), t.wake_cmd()), ("SPUBLISH", "SPUBLISH"));
        assert!(t.blocking().is_none() && !t.spans_slots());
    }

    #[test]
    fn a_standalone_server_runs_everything_in_one_script() {
        let cfg = RedisConfig::new("redis://127.0.0.1:6379");
        let t = Topology::open(&cfg, &Endpoint::resolve(&cfg).unwrap()).unwrap();
        assert_eq!((t.publish_cmd(), t.wake_cmd()), ("PUBLISH", ""));
        assert!(t.blocking().is_some() && t.spans_slots());
        assert_eq!(t.script_groups(vec![3u16, 1, 3], |p| *p), vec![vec![3, 1, 3]]);
        assert!(t.script_groups(Vec::<u16>::new(), |p| *p).is_empty());
    }
}
