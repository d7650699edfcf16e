//! The shared store contract (`presa_store::contract`) against a real Redis:
//! one test per case, each on its own store (fresh key prefix, and its own
//! spawned server unless `PRESA_TEST_REDIS_URL` is set).

mod common;

presa_store::store_contract_tests!(common::make_store, common::make_store_keeping_dead_letters);
