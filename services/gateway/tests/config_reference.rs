//! The configuration reference (`docs/configuration.md`) for presa-gateway's own flags matches
//! `presa-gateway --help` (the rest are presa-api's and presa-worker's, listed above them).

use presa_testkit::reference::{check_config_section_of, configuration_md};

#[test]
fn the_reference_lists_every_setting_of_presa_gateway() {
    check_config_section_of(&configuration_md(), env!("CARGO_BIN_EXE_presa-gateway").as_ref(), "presa-gateway", |o| {
        ["--upstream", "--gateway", "--task-after"].iter().any(|p| o.flag.starts_with(p))
    });
}
