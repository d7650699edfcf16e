//! The artifact contract on a local directory (`file://`, a fresh temp dir per test).

mod common;

artifact_contract_tests!(common::local);
