//! The memory store's [`SessionStore`]: each legacy session's fields in
//! the shared state, counted per session (fields, bytes), per scope and in
//! all ([`SessionLimits`]), every write checked under the one lock.

use std::{collections::HashMap, time::Duration};

use presa_tasks::Scope;

use crate::{
    error::StoreError,
    memory::{MemoryStore, State},
    session::SessionLimits,
    session::SessionStore,
    session::SessionWrite,
    util::now_ms,
};
use presa_protocol::Limit;

/// A legacy session's shared state.
pub(super) struct SessionState {
    /// When it expires (ms since the epoch).
    expires: u64,
    fields: HashMap<String, String>,
    /// Field names plus values.
    bytes: usize,
}

impl State {
    /// Drop expired sessions and recount the sessions of each scope.
    pub(super) fn purge_sessions(&mut self, now: u64) {
        self.sessions.retain(|_, st| st.expires > now);
        self.sessions_per_scope.clear();
        for (owner, _) in self.sessions.keys() {
            *self.sessions_per_scope.entry(owner.principal()).or_default() += 1;
        }
    }

    /// One write to `owner`'s session `id`, within `limits` (a removal always fits).
    fn write_session(
        &mut self,
        owner: &Scope,
        id: &str,
        write: SessionWrite<'_>,
        ttl: Duration,
        limits: SessionLimits,
    ) -> Result<(), StoreError> {
        let now = now_ms();
        let key = (owner.clone(), id.to_string());
        let expires = now.saturating_add(ttl.as_millis().try_into().unwrap_or(u64::MAX));
        let live = self.sessions.get(&key).is_some_and(|st| st.expires > now);
        if !live {
            if matches!(write, SessionWrite::Remove { .. }) {
                return Ok(());
            }
            // A session that starts holding state counts for its scope and the store.
            let over = |s: &State| {
                let scope_full = limits
                    .max_per_scope
                    .is_some_and(|max| s.sessions_per_scope.get(&owner.principal()).copied().unwrap_or(0) >= max);
                let store_full = limits.max_sessions.is_some_and(|max| s.sessions.len() as u64 >= max);
                (scope_full, store_full)
            };
            if over(self) != (false, false) {
                self.purge_sessions(now);
            }
            match over(self) {
                (true, _) => return Err(StoreError::Capacity { limit: Limit::MaxLegacySessionsPerScope }),
                (_, true) => return Err(StoreError::Capacity { limit: Limit::MaxLegacySessions }),
                _ => {}
            }
        }
        // Written on a copy, so a refused write leaves everything (a new session's place too) as it was.
        let mut st = match self.sessions.get(&key).filter(|_| live) {
            Some(st) => SessionState { expires, fields: st.fields.clone(), bytes: st.bytes },
            None => SessionState { expires, fields: HashMap::new(), bytes: 0 },
        };
        match write {
            SessionWrite::Set { field, value } => {
                let old = st.fields.get(field).map(|v| field.len() + v.len());
                let bytes = st.bytes - old.unwrap_or(0) + field.len() + value.len();
                let counted = || st.fields.keys().filter(|f| f.starts_with(limits.counted_prefix)).count() as u64;
                if old.is_none()
                    && field.starts_with(limits.counted_prefix)
                    && limits.max_fields.is_some_and(|max| counted() >= max)
                {
                    return Err(StoreError::Capacity { limit: Limit::MaxLegacySessionFields });
                }
                if bytes > st.bytes && limits.max_bytes.is_some_and(|max| bytes as u64 > max) {
                    return Err(StoreError::Capacity { limit: Limit::MaxLegacySessionBytes });
                }
                st.fields.insert(field.to_string(), value.to_string());
                st.bytes = bytes;
            }
            SessionWrite::Remove { field } => {
                if let Some(v) = st.fields.remove(field) {
                    st.bytes -= field.len() + v.len();
                }
            }
            SessionWrite::End { mark: field } => {
                st.fields.clear();
                st.fields.insert(field.to_string(), "1".into());
                st.bytes = field.len() + 1;
            }
        }
        // A session that starts holding state counts for its scope (an
        // expired entry under the same key already did).
        if self.sessions.insert(key, st).is_none() {
            *self.sessions_per_scope.entry(owner.principal()).or_default() += 1;
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl SessionStore for MemoryStore {
    async fn write_session(
        &self,
        owner: &Scope,
        session: &str,
        write: SessionWrite<'_>,
        ttl: Duration,
        limits: SessionLimits,
    ) -> Result<(), StoreError> {
        self.state().write_session(owner, session, write, ttl, limits)
    }

    async fn session_state(&self, owner: &Scope, session: &str) -> Result<HashMap<String, String>, StoreError> {
        let now = now_ms();
        let s = self.state();
        let key = (owner.clone(), session.to_string());
        Ok(s.sessions.get(&key).filter(|st| st.expires > now).map(|st| st.fields.clone()).unwrap_or_default())
    }
}
