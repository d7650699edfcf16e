//! The README's configuration reference for presa-api matches `presa-api --help`.

#[test]
fn readme_lists_every_setting_of_presa_api() {
    let readme = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    presa_testkit::reference::check_readme_section(&readme, env!("CARGO_BIN_EXE_presa-api").as_ref(), "presa-api");
}
