//! The configuration reference (`docs/configuration.md`) for presa-api matches `presa-api --help`.

use presa_testkit::reference::{check_config_section, configuration_md};

#[test]
fn the_reference_lists_every_setting_of_presa_api() {
    check_config_section(&configuration_md(), env!("CARGO_BIN_EXE_presa-api").as_ref(), "presa-api");
}
