//! [`Sessions`]: the legacy-session part of the store, what
//! [`presa_store::SessionStore`] is about. A legacy (2025-11-25) session's
//! state is one hash per session under its owner's scope tag, written by
//! `lua/write_session.lua` (counted and capped per session and per scope in the
//! same step), with `lua/session_admit.lua` counting sessions holding state
//! store-wide when that is capped.

use std::{collections::HashMap, sync::Arc, time::Duration};

use presa_store::{Limit, Scope, SessionLimits, SessionWrite, StoreError, util::now_ms};
use redis::Value;

use crate::{conn::Verbosity, keys::Keys, link::Link, scripts::script};

// The sessions' scripts (see `scripts.rs`), each named as its operation.
script!(
    WRITE_SESSION,
    "write_session.lua",
    "One counted, capped write to a legacy session's state; registers a new session."
);
script!(SESSION_ADMIT, "session_admit.lua", "Count a legacy session holding state store-wide, within the limit.");

/// The legacy sessions' state, over the store's [`Link`].
#[derive(Debug, Clone)]
pub(crate) struct Sessions {
    link: Arc<Link>,
}

/// `write_session.lua`'s `op` and its field and value, for one write.
fn script_op<'a>(write: SessionWrite<'a>) -> (&'static str, &'a str, &'a str) {
    match write {
        SessionWrite::Set { field, value } => ("set", field, value),
        SessionWrite::Remove { field } => ("del", field, ""),
        SessionWrite::End { mark } => ("end", mark, "1"),
    }
}

impl Sessions {
    pub(crate) fn new(link: Arc<Link>) -> Sessions {
        Sessions { link }
    }

    /// Every field of `owner`'s session `session` (the counters left out).
    pub(crate) async fn session_state(
        &self,
        owner: &Scope,
        session: &str,
    ) -> Result<HashMap<String, String>, StoreError> {
        let key = self.link.keys.session(owner, session);
        let mut state: HashMap<String, String> =
            self.link.query(Verbosity::Info, redis::cmd("HGETALL").arg(&key)).await?;
        state.retain(|field, _| !field.starts_with('#'));
        Ok(state)
    }

    /// One `write` (`write_session.lua`) and, for a
    /// session that starts holding state under a store-wide limit,
    /// `session_admit.lua` in between; a session admitted store-wide that its
    /// scope then refuses (a race) is taken out again.
    pub(crate) async fn write_session(
        &self,
        owner: &Scope,
        session: &str,
        write: SessionWrite<'_>,
        ttl: Duration,
        limits: SessionLimits,
    ) -> Result<(), StoreError> {
        let (op, field, value) = script_op(write);
        let keys = &self.link.keys;
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let now = now_ms();
        let write = |admitted: bool| {
            let mut inv = WRITE_SESSION.prepare_invoke();
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
        let first: String = self.link.invoke(&write(limits.max_sessions.is_none())).await?;
        match Written::from_reply(&first)? {
            Written::Admit => {}
            done => return done.outcome(),
        }
        let member = Keys::sessions_member(owner, session);
        let mut admit = SESSION_ADMIT.prepare_invoke();
        admit.key(keys.sessions()).arg(&member).arg(now).arg(ttl_ms).arg(limits.max_sessions.unwrap_or(0));
        let admitted: i64 = self.link.invoke(&admit).await?;
        if admitted == 0 {
            return Err(StoreError::Capacity { limit: Limit::MaxLegacySessions });
        }
        let second: String = self.link.invoke(&write(true)).await?;
        let outcome = match Written::from_reply(&second)? {
            Written::Admit => Err(StoreError::Corrupt("write_session.lua asked to admit an admitted session".into())),
            done => done.outcome(),
        };
        if outcome.is_err() {
            let undo = redis::cmd("ZREM").arg(keys.sessions()).arg(&member).to_owned();
            let _: Result<Value, _> = self.link.query(Verbosity::Info, &undo).await;
        }
        outcome
    }
}

/// What `write_session.lua` answered (its `Returns:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Written {
    /// `ok`: written.
    Done,
    /// `admit`: a new session, to be admitted store-wide first.
    Admit,
    /// The name of the limit that refused the write.
    Refused(Limit),
}

impl Written {
    fn from_reply(reply: &str) -> Result<Written, StoreError> {
        // write_session.lua names the limit it refused for by its setting's name.
        let refused = [Limit::MaxLegacySessionFields, Limit::MaxLegacySessionBytes, Limit::MaxLegacySessionsPerScope];
        match reply {
            "ok" => Ok(Written::Done),
            "admit" => Ok(Written::Admit),
            other => match refused.into_iter().find(|l| l.as_str() == other) {
                Some(limit) => Ok(Written::Refused(limit)),
                None => Err(StoreError::Corrupt(format!("write_session.lua answered {other:?}"))),
            },
        }
    }

    /// The write's outcome (an `Admit` is no outcome yet).
    fn outcome(self) -> Result<(), StoreError> {
        match self {
            Written::Done | Written::Admit => Ok(()),
            Written::Refused(limit) => Err(StoreError::Capacity { limit }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_writes_are_chosen_and_answered_in_one_place() {
        assert_eq!(script_op(SessionWrite::field("f", Some("v"))), ("set", "f", "v"));
        assert_eq!(script_op(SessionWrite::field("f", None)), ("del", "f", ""));
        assert_eq!(script_op(SessionWrite::End { mark: "#end" }), ("end", "#end", "1"));
        assert_eq!(Written::from_reply("ok").unwrap(), Written::Done);
        assert_eq!(Written::from_reply("admit").unwrap(), Written::Admit);
        let limit = Limit::MaxLegacySessionBytes;
        assert_eq!(Written::from_reply(limit.as_str()).unwrap(), Written::Refused(limit));
        assert!(matches!(Written::from_reply("nonsense"), Err(StoreError::Corrupt(_))));
    }
}
