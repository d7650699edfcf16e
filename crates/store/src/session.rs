//! Legacy sessions: the little shared state a 2025-11-25 client's session
//! keeps in the store ([`SessionStore`]), so that any API process serving
//! the session reads it back: its log level, its resource subscriptions,
//! and the mark that it ended.
//!
//! Only the legacy transport (the `Mcp-Session-Id` sessions of clients of
//! protocol version 2025-11-25) uses it; tasks never do. A session's state
//! is small and counted: per session (fields, bytes), per scope and in all
//! ([`SessionLimits`]), each write checked atomically against them, and
//! all of it expires with the session.

use std::{collections::HashMap, time::Duration};

use presa_tasks::Scope;

use crate::error::StoreError;

/// What one legacy (2025-11-25) session may store, checked atomically with
/// each write ([`SessionStore::set_session_field`]). `None`: no limit.
///
/// A session *holds state* from its first stored field until it expires
/// (ending it with [`SessionStore::end_session`] keeps its end mark, so it still
/// holds state); only such sessions count for `max_per_scope` and `max_sessions`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SessionLimits {
    /// Most fields named `counted_prefix…` one session holds.
    pub max_fields: Option<u64>,
    /// The fields `max_fields` counts: those whose name starts with this
    /// (`""`: every field).
    pub counted_prefix: &'static str,
    /// Most bytes one session holds (field names plus values).
    pub max_bytes: Option<u64>,
    /// Most sessions holding state one scope may have.
    pub max_per_scope: Option<u64>,
    /// Most sessions holding state in the whole store.
    pub max_sessions: Option<u64>,
}

impl SessionLimits {
    /// No limit at all.
    pub const NONE: SessionLimits = SessionLimits {
        max_fields: None,
        counted_prefix: "",
        max_bytes: None,
        max_per_scope: None,
        max_sessions: None,
    };
}

/// One write to a legacy session's state ([`SessionStore::write_session`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionWrite<'a> {
    /// Set `field` to `value` (counted against the limits).
    Set {
        /// The field.
        field: &'a str,
        /// Its new value.
        value: &'a str,
    },
    /// Remove `field` (never refused).
    Remove {
        /// The field.
        field: &'a str,
    },
    /// End the session: every field is dropped but the end `mark`, set to `1`.
    End {
        /// The end mark's field.
        mark: &'a str,
    },
}

impl<'a> SessionWrite<'a> {
    /// Set `field` to `value`, or remove it (`None`).
    pub fn field(field: &'a str, value: Option<&'a str>) -> Self {
        match value {
            Some(value) => SessionWrite::Set { field, value },
            None => SessionWrite::Remove { field },
        }
    }
}

/// The shared state of legacy (2025-11-25) sessions, by owner and session
/// id: set by whichever process serves a request of the session, read back
/// by any other. Every implementation runs the session cases of the
/// contract suite. A store implements [`write_session`](Self::write_session)
/// and [`session_state`](Self::session_state); the other two are written
/// once, here, on top of the first.
#[async_trait::async_trait]
pub trait SessionStore: Send + Sync + std::fmt::Debug + 'static {
    /// Set (`Some`) or remove (`None`) one field of the shared state of
    /// `owner`'s legacy (2025-11-25) session (log level, resource
    /// subscriptions), and let the whole session's state expire `ttl` from
    /// now. Any process serving the session reads it back with
    /// [`SessionStore::session_state`]. A write past `limits` stores nothing and
    /// fails with `StoreError::Capacity` naming the limit (one of the
    /// [`Limit`](crate::Limit)s `MaxLegacySessionFields`, `MaxLegacySessionBytes`,
    /// `MaxLegacySessionsPerScope`, `MaxLegacySessions`); a removal is never refused.
    async fn set_session_field(
        &self,
        owner: &Scope,
        session: &str,
        field: &str,
        value: Option<&str>,
        ttl: Duration,
        limits: SessionLimits,
    ) -> Result<(), StoreError> {
        self.write_session(owner, session, SessionWrite::field(field, value), ttl, limits).await
    }

    /// End `owner`'s legacy session: every field is dropped but `field` (its
    /// end mark, set to `1`), which lives `ttl` from now. A session that held
    /// no state must fit `limits` like a first write.
    async fn end_session(
        &self,
        owner: &Scope,
        session: &str,
        field: &str,
        ttl: Duration,
        limits: SessionLimits,
    ) -> Result<(), StoreError> {
        self.write_session(owner, session, SessionWrite::End { mark: field }, ttl, limits).await
    }

    /// One `write` to `owner`'s legacy session, checked against `limits`
    /// atomically (a removal always fits), after which the session's state
    /// expires `ttl` from now: what [`set_session_field`](Self::set_session_field)
    /// and [`end_session`](Self::end_session) do.
    async fn write_session(
        &self,
        owner: &Scope,
        session: &str,
        write: SessionWrite<'_>,
        ttl: Duration,
        limits: SessionLimits,
    ) -> Result<(), StoreError>;

    /// Every field of `owner`'s legacy session's shared state (empty when
    /// none was set or it expired).
    async fn session_state(&self, owner: &Scope, session: &str) -> Result<HashMap<String, String>, StoreError>;
}
