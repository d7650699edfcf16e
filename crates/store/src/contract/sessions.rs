//! The legacy-session half of the contract ([`crate::session`]): state
//! shared per session and expiring with it, counted and capped per
//! session, per scope and in all. The cases take the [`SessionStore`].

use std::{sync::Arc, time::Duration};

use presa_tasks::Scope;

use super::scope;
use crate::{error::StoreError, session::SessionLimits, session::SessionStore};
use presa_protocol::Limit;

/// Legacy session state: fields set and removed per session, other sessions
/// (and other owners' sessions of the same id) untouched, everything gone
/// once the TTL of the last write passes; ending keeps only the end mark.
pub async fn session_state_is_shared_per_session_and_expires(store: Arc<dyn SessionStore>) {
    let long = Duration::from_secs(60);
    let (alice, bob) = (scope("alice"), scope("bob"));
    let none = SessionLimits::NONE;
    assert!(store.session_state(&alice, "s1").await.expect("read").is_empty());
    store.set_session_field(&alice, "s1", "logLevel", Some("debug"), long, none).await.expect("set");
    store.set_session_field(&alice, "s1", "sub:test://a", Some("1"), long, none).await.expect("set");
    store.set_session_field(&alice, "s2", "ended", Some("1"), long, none).await.expect("set");
    let s1 = store.session_state(&alice, "s1").await.expect("read");
    assert_eq!(s1.get("logLevel").map(String::as_str), Some("debug"));
    assert_eq!(s1.get("sub:test://a").map(String::as_str), Some("1"));
    assert!(!s1.contains_key("ended"), "another session's field: {s1:?}");
    assert!(store.session_state(&bob, "s1").await.expect("read").is_empty(), "another owner's");
    store.set_session_field(&alice, "s1", "sub:test://a", None, long, none).await.expect("remove");
    let s1 = store.session_state(&alice, "s1").await.expect("read");
    assert_eq!(s1.len(), 1, "{s1:?}");
    store.end_session(&alice, "s1", "ended", long, none).await.expect("end");
    let s1 = store.session_state(&alice, "s1").await.expect("read");
    assert_eq!(s1.into_iter().collect::<Vec<_>>(), vec![("ended".to_string(), "1".to_string())]);
    let short = Duration::from_millis(50);
    store.set_session_field(&alice, "s3", "logLevel", Some("info"), short, none).await.expect("set");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(store.session_state(&alice, "s3").await.expect("read").is_empty(), "expired");
    assert_eq!(store.session_state(&alice, "s2").await.expect("read").len(), 1);
}

/// A session's fields and bytes are counted: a write past either limit
/// stores nothing and names the limit; removals and rewrites that do not
/// grow always fit.
pub async fn session_state_is_counted_and_capped(store: Arc<dyn SessionStore>) {
    let long = Duration::from_secs(60);
    let owner = scope("alice");
    let limits = SessionLimits { max_fields: Some(2), max_bytes: Some(40), ..SessionLimits::NONE };
    let set = |field: &'static str, value: &'static str| {
        let (store, owner) = (store.clone(), owner.clone());
        async move { store.set_session_field(&owner, "s", field, Some(value), long, limits).await }
    };
    set("a", "1").await.expect("2 bytes");
    set("b", "1").await.expect("4 bytes");
    let full = set("c", "1").await.expect_err("a third field");
    assert!(matches!(full, StoreError::Capacity { limit: Limit::MaxLegacySessionFields }), "{full:?}");
    set("a", "2").await.expect("a rewrite adds no field");
    let big = set("b", "0123456789012345678901234567890123456789").await.expect_err("over 40 bytes");
    assert!(matches!(big, StoreError::Capacity { limit: Limit::MaxLegacySessionBytes }), "{big:?}");
    let state = store.session_state(&owner, "s").await.expect("read");
    assert_eq!(state.get("b").map(String::as_str), Some("1"), "the refused write stored nothing");
    assert_eq!(state.len(), 2);
    store.set_session_field(&owner, "s", "a", None, long, limits).await.expect("removal");
    set("c", "0123456789012345678901234567890").await.expect("room again: 2 + 32 bytes");

    // Only the fields named with the counted prefix count for max_fields.
    let subs = SessionLimits { max_fields: Some(1), counted_prefix: "sub:", ..SessionLimits::NONE };
    let set = |field: &'static str| {
        let (store, owner) = (store.clone(), owner.clone());
        async move { store.set_session_field(&owner, "t", field, Some("1"), long, subs).await }
    };
    set("logLevel").await.expect("not counted");
    set("sub:a").await.expect("the one counted field");
    let full = set("sub:b").await.expect_err("a second counted field");
    assert!(matches!(full, StoreError::Capacity { limit: Limit::MaxLegacySessionFields }), "{full:?}");
    set("ended").await.expect("not counted");
    store.set_session_field(&owner, "t", "sub:a", None, long, subs).await.expect("removal");
    set("sub:b").await.expect("room again");
    store.end_session(&owner, "t", "ended", long, subs).await.expect("end");
    set("sub:c").await.expect("ending dropped the counted fields");
}

/// Sessions holding state are capped per scope and in all; a session without
/// state costs nothing, an expired one frees its place, and writes to a
/// session already holding state are not refused for the count.
pub async fn sessions_holding_state_are_capped_per_scope_and_in_all(store: Arc<dyn SessionStore>) {
    let long = Duration::from_secs(60);
    let limits = SessionLimits { max_per_scope: Some(2), max_sessions: Some(3), ..SessionLimits::NONE };
    let (alice, bob, carol) = (scope("alice"), scope("bob"), scope("carol"));
    let write = |owner: &Scope, session: &str, ttl: Duration| {
        let (store, owner, session) = (store.clone(), owner.clone(), session.to_string());
        async move { store.set_session_field(&owner, &session, "logLevel", Some("info"), ttl, limits).await }
    };
    let capped = SessionLimits { max_bytes: Some(4), ..limits };
    let big = store.set_session_field(&alice, "a0", "logLevel", Some("debug"), long, capped).await;
    assert!(matches!(big, Err(StoreError::Capacity { limit: Limit::MaxLegacySessionBytes })), "{big:?}");
    write(&alice, "a1", long).await.expect("alice's first (the refused write took no place)");
    write(&alice, "a2", Duration::from_millis(100)).await.expect("alice's second");
    let full = write(&alice, "a3", long).await.expect_err("alice's third");
    assert!(matches!(full, StoreError::Capacity { limit: Limit::MaxLegacySessionsPerScope }), "{full:?}");
    assert!(full.is_retryable());
    write(&alice, "a1", long).await.expect("a session already counted");
    let ended = store.end_session(&alice, "a3", "ended", long, limits).await.expect_err("ending counts too");
    assert!(matches!(ended, StoreError::Capacity { limit: Limit::MaxLegacySessionsPerScope }), "{ended:?}");
    write(&bob, "b1", long).await.expect("bob's first");
    let all = write(&carol, "c1", long).await.expect_err("the store holds 3");
    assert!(matches!(all, StoreError::Capacity { limit: Limit::MaxLegacySessions }), "{all:?}");
    assert!(store.session_state(&carol, "c1").await.expect("read").is_empty(), "nothing stored");
    tokio::time::sleep(Duration::from_millis(400)).await;
    write(&carol, "c1", long).await.expect("alice's short session expired: room in all");
    write(&alice, "a3", long).await.expect_err("the store is full again");
    store.set_session_field(&alice, "a2", "logLevel", None, long, limits).await.expect("a removal always fits");
}
