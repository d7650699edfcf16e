//! The configuration reference (`docs/configuration.md`), generated from a
//! binary's `--help`.
//!
//! [`check_config_section`] renders the options of `binary --help` as a
//! Markdown table and compares it with the section of the reference between
//! `<!-- config:NAME -->` and `<!-- /config:NAME -->`. With
//! `PRESA_UPDATE_DOCS=1` (or the older name `PRESA_UPDATE_README=1`) it
//! rewrites the section instead, so the reference cannot drift from the code.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

/// The environment variables that make the check rewrite the reference instead
/// of failing: the current name first, then the one it had when the reference
/// lived in the README.
pub const UPDATE_VARS: [&str; 2] = ["PRESA_UPDATE_DOCS", "PRESA_UPDATE_README"];

/// `docs/configuration.md` of this workspace, the file the reference lives in.
pub fn configuration_md() -> PathBuf {
    let workspace =
        Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).expect("crates/testkit is two levels down");
    workspace.join("docs/configuration.md")
}

/// One option of a `--help` text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelpOption {
    /// `--listen`.
    pub flag: String,
    /// `PRESA_LISTEN`, when the option has one.
    pub env: Option<String>,
    /// The default, when it has one.
    pub default: Option<String>,
    /// The first paragraph of the description, on one line.
    pub description: String,
}

/// Parse clap's long `--help` output.
pub fn parse_help(help: &str) -> Vec<HelpOption> {
    let mut out: Vec<HelpOption> = Vec::new();
    let mut in_description = false;
    for line in help.lines() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("--").or_else(|| t.split_once(", --").map(|(_, r)| r)) {
            let flag = rest.split_whitespace().next().unwrap_or_default();
            out.push(HelpOption { flag: format!("--{flag}"), env: None, default: None, description: String::new() });
            in_description = true;
            continue;
        }
        let Some(cur) = out.last_mut() else { continue };
        if let Some(env) = t.strip_prefix("[env: ").and_then(|e| e.strip_suffix(']')) {
            cur.env = Some(env.split('=').next().unwrap_or(env).to_string());
        } else if let Some(d) = t.strip_prefix("[default: ").and_then(|d| d.strip_suffix(']')) {
            cur.default = Some(d.to_string());
        } else if t.is_empty() {
            in_description = false;
        } else if in_description {
            if !cur.description.is_empty() {
                cur.description.push(' ');
            }
            cur.description.push_str(t);
        }
    }
    out.retain(|o| o.flag != "--help" && o.flag != "--version");
    out
}

/// The Markdown table for `options`.
pub fn render_table(options: &[HelpOption]) -> String {
    let mut s = String::from("| flag | environment | default | meaning |\n|---|---|---|---|\n");
    for o in options {
        let cell = |v: &Option<String>| v.as_deref().map_or("".to_string(), |v| format!("`{v}`"));
        s.push_str(&format!(
            "| `{}` | {} | {} | {} |\n",
            o.flag,
            cell(&o.env),
            cell(&o.default),
            o.description.replace('|', "\\|")
        ));
    }
    s
}

/// Check (or, with `PRESA_UPDATE_DOCS=1`, rewrite) the section `name` of the
/// reference file `doc` (usually [`configuration_md`]) against `binary --help`.
/// Panics with the expected table when they differ.
pub fn check_config_section(doc: &Path, binary: &Path, name: &str) {
    check_config_section_of(doc, binary, name, |_| true);
}

/// [`check_config_section`] for the options `keep` selects (a binary whose
/// other options another section lists already).
pub fn check_config_section_of(doc: &Path, binary: &Path, name: &str, keep: impl Fn(&HelpOption) -> bool) {
    let help = Command::new(binary).arg("--help").output().expect("running --help");
    assert!(help.status.success(), "{} --help failed", binary.display());
    let options: Vec<HelpOption> =
        parse_help(&String::from_utf8_lossy(&help.stdout)).into_iter().filter(keep).collect();
    let table = render_table(&options);
    let file = doc.display();
    let text = std::fs::read_to_string(doc).unwrap_or_else(|e| panic!("reading {file}: {e}"));
    let (begin, end) = (format!("<!-- config:{name} -->\n"), format!("<!-- /config:{name} -->"));
    let start = text.find(&begin).unwrap_or_else(|| panic!("{file} has no `{}` marker", begin.trim())) + begin.len();
    let stop = text[start..].find(&end).unwrap_or_else(|| panic!("{file} has no `{end}` marker")) + start;
    if text[start..stop] == table {
        return;
    }
    if UPDATE_VARS.iter().any(|v| std::env::var_os(v).is_some()) {
        std::fs::write(doc, format!("{}{}{}", &text[..start], table, &text[stop..]))
            .unwrap_or_else(|e| panic!("writing {file}: {e}"));
        return;
    }
    panic!(
        "{file}: the configuration reference for {name} is out of date with `{} --help`; \
         regenerate it with PRESA_UPDATE_DOCS=1 cargo test --test config_reference.\nExpected:\n{table}",
        binary.display()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_clap_long_help() {
        let help = "Usage: x [OPTIONS]\n\nOptions:\n      --listen <LISTEN>\n          Address to serve on\n          \n          [env: PRESA_LISTEN=]\n          [default: 127.0.0.1:8080]\n\n      --flag\n          A switch | with a pipe\n          second line\n\n          Possible values:\n          - a: A\n          \n          [env: PRESA_FLAG]\n\n  -h, --help\n          Print help\n";
        let opts = parse_help(help);
        assert_eq!(opts.len(), 2);
        assert_eq!(opts[0].flag, "--listen");
        assert_eq!(opts[0].env.as_deref(), Some("PRESA_LISTEN"));
        assert_eq!(opts[0].default.as_deref(), Some("127.0.0.1:8080"));
        assert_eq!(opts[1].description, "A switch | with a pipe second line");
        assert!(render_table(&opts).contains("A switch \\| with a pipe"));
    }
}
