//! Idempotent creates: a client's `Idempotency-Key` on a `tools/call` that
//! creates a task names that create, so a retry after a lost reply returns
//! the task the first attempt made instead of making a second one (the
//! IETF httpapi draft "The Idempotency-Key HTTP Header Field"; Stripe's
//! `Idempotency-Key`).
//!
//! A store keeps one record per (owner scope, key): the request's
//! fingerprint and the task it created, for as long as the task lives.
//! Records are named by a digest of the scope and the key, so one principal's
//! key never finds another's task (no cross-principal oracle), and the key
//! itself is never stored. A keyed create is placed in the partition the
//! digest names, so on Redis Cluster the record and the task share a slot and
//! one script checks and writes both ([`Idempotency::partition`]).

use presa_tasks::{Scope, Task, Work};
use sha2::{Digest, Sha256};

/// A create made under a client's idempotency key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Idempotency {
    /// Names the record: a digest of the owner's scope and the client's key
    /// (32 hex digits).
    pub id: String,
    /// The request the key was first used for: a digest of the tool and
    /// its arguments (64 hex digits). A replay must match it.
    pub fingerprint: String,
    /// The partition a keyed create goes to (taken from the digest).
    digest_partition: u16,
}

impl Idempotency {
    /// The idempotency of `work` created by `scope` under `key` (validated
    /// by the caller: its length and alphabet are the server's business).
    pub fn new(scope: &Scope, key: &str, work: &Work) -> Idempotency {
        let mut named = Sha256::new();
        // A virtual server's endpoint is part of the owner (a key used on
        // one endpoint never replays another's task); the root's adds nothing,
        // so records made before endpoints existed keep their names.
        let endpoint = scope.endpoint.as_deref().map(str::as_bytes);
        for part in [scope.tenant.as_bytes(), scope.subject.as_bytes(), key.as_bytes()].into_iter().chain(endpoint) {
            // Length-prefixed, so ("ab", "c") and ("a", "bc") differ.
            named.update((part.len() as u64).to_be_bytes());
            named.update(part);
        }
        let named = named.finalize();
        let mut request = Sha256::new();
        request.update((work.tool.len() as u64).to_be_bytes());
        request.update(work.tool.as_bytes());
        // serde_json's maps are sorted: equal arguments encode equally.
        request.update(serde_json::to_vec(&work.arguments).unwrap_or_default());
        Idempotency {
            id: hex(&named[..16]),
            fingerprint: hex(&request.finalize()),
            digest_partition: u16::from_be_bytes([named[16], named[17]]),
        }
    }

    /// The partition of a keyed create among `partitions`.
    pub fn partition(&self, partitions: u16) -> u16 {
        self.digest_partition % partitions.max(1)
    }
}

/// What an idempotent create did ([`TaskStore::create_idempotent`](crate::TaskStore::create_idempotent)).
#[derive(Debug, Clone, PartialEq)]
pub enum Created {
    /// A new task (and its work) was stored.
    New(Task),
    /// The key was used before for the same request: the task it made, as
    /// stored now; nothing new was stored or enqueued.
    Replayed(Task),
}

impl Created {
    /// The task, new or replayed.
    pub fn task(&self) -> &Task {
        match self {
            Created::New(t) | Created::Replayed(t) => t,
        }
    }

    /// The task, new or replayed.
    pub fn into_task(self) -> Task {
        match self {
            Created::New(t) | Created::Replayed(t) => t,
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn work(tool: &str, arguments: serde_json::Value) -> Work {
        Work {
            tool: tool.into(),
            arguments,
            client_capabilities: Default::default(),
            input_responses: None,
            trace: Default::default(),
            caller: None,
            replay_of: None,
            worker: None,
        }
    }

    fn scope(subject: &str) -> Scope {
        Scope { tenant: "t".into(), subject: subject.into(), endpoint: None }
    }

    #[test]
    fn records_are_per_scope_and_fingerprints_per_request() {
        let w = work("echo", json!({"a": 1, "b": [1, 2]}));
        let alice = Idempotency::new(&scope("alice"), "k1", &w);
        assert_eq!(alice, Idempotency::new(&scope("alice"), "k1", &work("echo", json!({"b": [1, 2], "a": 1}))));
        assert_ne!(alice.id, Idempotency::new(&scope("bob"), "k1", &w).id, "another principal's record");
        assert_ne!(alice.id, Idempotency::new(&scope("alice"), "k2", &w).id);
        assert_ne!(alice.id, Idempotency::new(&scope("alicek"), "1", &w).id, "parts are length-prefixed");
        let other = Idempotency::new(&scope("alice"), "k1", &work("echo", json!({"a": 2, "b": [1, 2]})));
        assert_eq!(other.id, alice.id);
        assert_ne!(other.fingerprint, alice.fingerprint);
        assert_ne!(alice.fingerprint, Idempotency::new(&scope("alice"), "k1", &work("echo2", json!({}))).fingerprint);
        assert_eq!((alice.id.len(), alice.fingerprint.len()), (32, 64));
        assert!(alice.partition(16) < 16);
        assert_eq!(alice.partition(0), 0);
    }
}
