//! The contract suite instantiated from outside the crate, the way other
//! backends use it (`$make` as a path to an `async fn`).

use std::sync::Arc;

use presa_store::{Backend, memory::MemoryStore};

async fn memory_store() -> Backend {
    Backend::new(Arc::new(MemoryStore::with_partitions(16)))
}

presa_store::store_contract_tests!(memory_store);
