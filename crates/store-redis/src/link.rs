//! [`Link`]: what every part of the store reaches Redis through, built
//! once when the store is opened and shared by the parts (records, work
//! queue, dead letters, sessions, admin index, node registry): the
//! configuration and key layout, the command connection, the
//! [`Topology`] the parts are built for, the pub/sub hub, and the
//! confirming connections of replicated durability (`durability.rs`).
//!
//! One round trip on the command connection: every command and script
//! bounded by `op_timeout`, in its client span, timed and its failure
//! counted (see `conn/mod.rs` and `metrics.rs`), and the connection told how it went.

use std::{
    sync::{Arc, Weak},
    time::{Duration, Instant},
};

use redis::{Cmd, FromRedisValue};

use crate::{
    config::RedisConfig,
    conn::{Asking, Endpoint, Healing, Sentinels, Target, Verbosity, command_name, traced},
    durability::{Confirming, Replication},
    error::RedisStoreError,
    hub::Hub,
    keys::Keys,
    scripts::Invocation,
    topology::Topology,
};

/// The connection to Redis the parts share, and what they need to know of
/// the deployment.
#[derive(Debug)]
pub(crate) struct Link {
    pub(crate) cfg: RedisConfig,
    pub(crate) keys: Keys,
    pub(crate) conn: Healing,
    /// Standalone or cluster, and what only that one needs.
    pub(crate) topology: Topology,
    /// Connections confirming writes with `WAIT` (replicated durability only).
    pub(crate) confirming: Option<Confirming>,
    /// How connections reach Redis (with Sentinel: where the primary is found).
    pub(crate) endpoint: Endpoint,
    pub(crate) hub: Hub,
    /// What spans say about where commands go.
    pub(crate) target: Target,
}

impl Link {
    /// The link `cfg` describes, without reaching Redis yet.
    pub(crate) fn open(cfg: RedisConfig) -> Result<Link, RedisStoreError> {
        let endpoint = Endpoint::resolve(&cfg)?;
        Ok(Link {
            keys: Keys::new(cfg.prefix.clone(), cfg.partitions),
            conn: Healing::new(&cfg, &endpoint),
            topology: Topology::open(&cfg, &endpoint)?,
            confirming: Confirming::new(&cfg, &endpoint),
            hub: Hub::spawn(&cfg, endpoint.clone()),
            target: Target::new(&cfg, &endpoint),
            endpoint,
            cfg,
        })
    }

    pub(crate) fn op_timeout(&self) -> Duration {
        self.cfg.op_timeout
    }

    /// Run a script that writes (a create, or a write that ends a task) and,
    /// with replicated durability, `WAIT` for its replicas in the same
    /// pipeline on a confirming connection. With `Primary` it is
    /// [`invoke`](Link::invoke) and always `Confirmed`.
    pub(crate) async fn invoke_confirmed<T: FromRedisValue + Send>(
        &self,
        inv: &Invocation<'_>,
    ) -> Result<(T, Replication), RedisStoreError> {
        match &self.confirming {
            None => Ok((self.invoke(inv).await?, Replication::Confirmed)),
            Some(confirming) => confirming.invoke(inv, &self.conn, self.op_timeout(), &self.target).await,
        }
    }

    /// Confirm that what was written to `partition` before now is on the
    /// replicas (replicated durability; `Confirmed` at once otherwise).
    pub(crate) async fn confirm_partition(&self, partition: u16) -> Result<Replication, RedisStoreError> {
        match &self.confirming {
            None => Ok(Replication::Confirmed),
            Some(confirming) => confirming.sync(self.keys.sync(partition), &self.target).await,
        }
    }

    /// Run a script invocation bounded by `op_timeout`, in a
    /// `redis EVALSHA <script>` span.
    pub(crate) async fn invoke<T: FromRedisValue + Send>(&self, inv: &Invocation<'_>) -> Result<T, RedisStoreError> {
        let mut c = self.conn.get().await.inspect_err(crate::metrics::failed)?;
        let (lua, limit) = (inv.lua, self.op_timeout());
        let started = Instant::now();
        let r = traced(
            &self.target,
            lua.verbosity,
            || "EVALSHA".into(),
            Some(lua.name),
            limit,
            Box::pin(inv.invoke_async(&mut c)),
        )
        .await;
        self.conn.record(&r);
        crate::metrics::round_trip(lua.name, started.elapsed(), &r);
        r
    }

    /// Run a command on the shared connection bounded by `op_timeout`, in a
    /// `redis <COMMAND>` span.
    pub(crate) async fn query<T: FromRedisValue + Send>(
        &self,
        verbosity: Verbosity,
        cmd: &Cmd,
    ) -> Result<T, RedisStoreError> {
        let mut c = self.conn.get().await.inspect_err(crate::metrics::failed)?;
        let name = || command_name(cmd);
        let started = Instant::now();
        let r = traced(&self.target, verbosity, name, None, self.op_timeout(), Box::pin(cmd.query_async(&mut c))).await;
        self.conn.record(&r);
        let operation = match cmd.args_iter().next() {
            Some(redis::Arg::Simple(name)) => crate::metrics::command_operation(name),
            _ => "other",
        };
        crate::metrics::round_trip(operation, started.elapsed(), &r);
        r
    }
}

/// How often a store with an open command connection asks a Sentinel
/// whether the primary moved ([`follow_primary`]).
pub(crate) const WATCH_EVERY: Duration = Duration::from_secs(1);

/// Keep `link`'s command connection on the primary the Sentinels name, for
/// a failover whose old primary stays up a while (`SENTINEL FAILOVER`, or a
/// partition healing): it accepts writes until Sentinel demotes it, about
/// ten seconds later, and those writes would be lost. Every [`WATCH_EVERY`]
/// one Sentinel is asked which primary it names; when that differs from the
/// one the connection goes to, a full discovery (all Sentinels, `ROLE`)
/// decides, and if it confirms another primary the connection is dropped,
/// so the next command opens one there. Ends when the store is dropped.
pub(crate) async fn follow_primary(sentinels: Arc<Sentinels>, link: Weak<Link>) {
    let mut asking = Asking::default();
    loop {
        tokio::time::sleep(WATCH_EVERY).await;
        let Some(link) = link.upgrade() else { return };
        let Some(on) = link.conn.on() else { continue };
        let Some(named) = sentinels.named_primary(&mut asking).await else { continue };
        if named == on {
            continue;
        }
        if let Ok(primary) = sentinels.discover().await
            && primary.address != on
        {
            link.conn.leave(&on, &format!("the Sentinels promoted {}", primary.address));
        }
    }
}
