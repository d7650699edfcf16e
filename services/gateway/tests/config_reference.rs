//! The README's configuration reference for presa-gateway's own flags matches
//! `presa-gateway --help` (the rest are presa-api's and presa-worker's, listed above them).

#[test]
fn readme_lists_every_setting_of_presa_gateway() {
    let readme = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    presa_testkit::reference::check_readme_section_of(
        &readme,
        env!("CARGO_BIN_EXE_presa-gateway").as_ref(),
        "presa-gateway",
        |o| ["--upstream", "--gateway", "--task-after"].iter().any(|p| o.flag.starts_with(p)),
    );
}
