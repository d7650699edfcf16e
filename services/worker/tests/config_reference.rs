//! The configuration reference (`docs/configuration.md`) for presa-worker matches `presa-worker --help`.

use presa_testkit::reference::{check_config_section, configuration_md};

#[test]
fn the_reference_lists_every_setting_of_presa_worker() {
    check_config_section(&configuration_md(), env!("CARGO_BIN_EXE_presa-worker").as_ref(), "presa-worker");
}
