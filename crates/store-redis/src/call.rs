//! One round trip on the command connection: every command and script
//! bounded by `op_timeout`, in its client span, timed and its failure
//! counted (see `conn.rs` and `metrics.rs`), and the connection told how it went.

use std::time::Instant;

use redis::{Cmd, FromRedisValue};

use crate::{
    RedisStore, RedisStoreError,
    conn::{Verbosity, command_name, traced},
    scripts::Invocation,
};

impl RedisStore {
    pub(crate) fn op_timeout(&self) -> std::time::Duration {
        self.inner.cfg.op_timeout
    }

    /// `PUBLISH` or `SPUBLISH` (see [`Topology::publish_cmd`](crate::topology::Topology::publish_cmd)).
    pub(crate) fn publish_cmd(&self) -> &'static str {
        self.inner.topology.publish_cmd()
    }

    /// `SPUBLISH` or nothing (see [`Topology::wake_cmd`](crate::topology::Topology::wake_cmd)).
    pub(crate) fn wake_cmd(&self) -> &'static str {
        self.inner.topology.wake_cmd()
    }

    /// Run a script invocation bounded by `op_timeout`, in a
    /// `redis EVALSHA <script>` span.
    pub(crate) async fn invoke<T: FromRedisValue + Send>(&self, inv: &Invocation<'_>) -> Result<T, RedisStoreError> {
        let mut c = self.inner.conn.get().await.inspect_err(crate::metrics::failed)?;
        let (lua, limit) = (inv.lua, self.op_timeout());
        let started = Instant::now();
        let r = traced(
            &self.inner.target,
            lua.verbosity,
            || "EVALSHA".into(),
            Some(lua.name),
            limit,
            Box::pin(inv.invoke_async(&mut c)),
        )
        .await;
        self.inner.conn.record(&r);
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
        let mut c = self.inner.conn.get().await.inspect_err(crate::metrics::failed)?;
        let name = || command_name(cmd);
        let started = Instant::now();
        let r = traced(&self.inner.target, verbosity, name, None, self.op_timeout(), Box::pin(cmd.query_async(&mut c)))
            .await;
        self.inner.conn.record(&r);
        let operation = match cmd.args_iter().next() {
            Some(redis::Arg::Simple(name)) => crate::metrics::command_operation(name),
            _ => "other",
        };
        crate::metrics::round_trip(operation, started.elapsed(), &r);
        r
    }
}
