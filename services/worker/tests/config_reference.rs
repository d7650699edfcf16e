//! The README's configuration reference for presa-worker matches `presa-worker --help`.

#[test]
fn readme_lists_every_setting_of_presa_worker() {
    let readme = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    presa_testkit::reference::check_readme_section(
        &readme,
        env!("CARGO_BIN_EXE_presa-worker").as_ref(),
        "presa-worker",
    );
}
