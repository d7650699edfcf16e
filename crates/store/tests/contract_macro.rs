//! The contract suite instantiated from outside the crate, the way other
//! backends use it (`$make` as a path to an `async fn`).

use std::sync::Arc;

use presa_store::{Backend, memory::MemoryStore};

async fn memory_store() -> Backend {
    Backend::new(Arc::new(MemoryStore::with_partitions(16)))
}

async fn memory_store_keeping_dead_letters(ttl: std::time::Duration) -> Backend {
    Backend::new(Arc::new(MemoryStore::with_partitions(16).with_dead_letter_ttl(ttl)))
}

presa_store::store_contract_tests!(memory_store, memory_store_keeping_dead_letters);
