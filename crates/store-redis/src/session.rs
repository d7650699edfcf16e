//! [`RedisStore`]'s [`SessionStore`]: a legacy (2025-11-25) session's
//! state is one hash per session under its owner's scope tag, written by
//! `lua/session.lua` (counted and capped per session and per scope in the
//! same step), with `lua/session_admit.lua` counting sessions holding state
//! store-wide when that is capped.

use std::{collections::HashMap, time::Duration};

use presa_store::{Scope, SessionLimits, SessionStore, StoreError, util::now_ms};
use redis::Value;

use crate::{RedisStore, conn::Verbosity, keys::Keys, scripts};

#[async_trait::async_trait]
impl SessionStore for RedisStore {
    async fn set_session_field(
        &self,
        owner: &Scope,
        session: &str,
        field: &str,
        value: Option<&str>,
        ttl: Duration,
        limits: SessionLimits,
    ) -> Result<(), StoreError> {
        let op = if value.is_some() { "set" } else { "del" };
        self.write_session(owner, session, op, field, value.unwrap_or_default(), ttl, limits).await
    }

    async fn end_session(
        &self,
        owner: &Scope,
        session: &str,
        field: &str,
        ttl: Duration,
        limits: SessionLimits,
    ) -> Result<(), StoreError> {
        self.write_session(owner, session, "end", field, "1", ttl, limits).await
    }

    async fn session_state(&self, owner: &Scope, session: &str) -> Result<HashMap<String, String>, StoreError> {
        let key = self.inner.keys.session(owner, session);
        let mut state: HashMap<String, String> = self.query(Verbosity::Info, redis::cmd("HGETALL").arg(&key)).await?;
        state.retain(|field, _| !field.starts_with('#'));
        Ok(state)
    }
}

impl RedisStore {
    /// One write of `session.lua` (`op`: `set`, `del`, `end`) and, for a
    /// session that starts holding state under a store-wide limit,
    /// `session_admit.lua` in between; a session admitted store-wide that its
    /// scope then refuses (a race) is taken out again.
    #[allow(clippy::too_many_arguments)]
    async fn write_session(
        &self,
        owner: &Scope,
        session: &str,
        op: &str,
        field: &str,
        value: &str,
        ttl: Duration,
        limits: SessionLimits,
    ) -> Result<(), StoreError> {
        let keys = &self.inner.keys;
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let now = now_ms();
        let write = |admitted: bool| {
            let mut inv = scripts::SESSION.prepare_invoke();
            inv.key(keys.session(owner, session))
                .key(keys.scope_sessions(owner))
                .arg(op)
                .arg(field)
                .arg(value)
                .arg(ttl_ms)
                .arg(now)
                .arg(limits.max_fields.unwrap_or(0))
                .arg(limits.max_bytes.unwrap_or(0))
                .arg(limits.max_per_scope.unwrap_or(0))
                .arg(Keys::session_member(session))
                .arg(if admitted { "1" } else { "0" })
                .arg(limits.counted_prefix);
            inv
        };
        let first: String = self.invoke(&write(limits.max_sessions.is_none())).await?;
        if first != "admit" {
            return session_reply(&first);
        }
        let member = Keys::sessions_member(owner, session);
        let mut admit = scripts::SESSION_ADMIT.prepare_invoke();
        admit.key(keys.sessions()).arg(&member).arg(now).arg(ttl_ms).arg(limits.max_sessions.unwrap_or(0));
        let admitted: i64 = self.invoke(&admit).await?;
        if admitted == 0 {
            return Err(StoreError::Capacity { limit: presa_store::Limit::MaxLegacySessions });
        }
        let second: String = self.invoke(&write(true)).await?;
        let outcome = session_reply(&second);
        if outcome.is_err() {
            let undo = redis::cmd("ZREM").arg(keys.sessions()).arg(&member).to_owned();
            let _: Result<Value, _> = self.query(Verbosity::Info, &undo).await;
        }
        outcome
    }
}

/// What `session.lua` answered, as an outcome.
fn session_reply(reply: &str) -> Result<(), StoreError> {
    use presa_store::Limit;
    // session.lua names the limit it refused for by its setting's name.
    let refused = [Limit::MaxLegacySessionFields, Limit::MaxLegacySessionBytes, Limit::MaxLegacySessionsPerScope];
    match reply {
        "ok" => Ok(()),
        other => match refused.into_iter().find(|l| l.as_str() == other) {
            Some(limit) => Err(StoreError::Capacity { limit }),
            None => Err(StoreError::Corrupt(format!("session.lua answered {other:?}"))),
        },
    }
}
