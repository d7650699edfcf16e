//! Every flag of every `presa` command has an environment variable, and the
//! help states the exit codes.

mod common;

use std::process::Command;

fn help(args: &[&str]) -> String {
    let out = Command::new(common::presa_bin()).args(args).arg("--help").output().expect("presa --help");
    assert!(out.status.success(), "presa {args:?} --help failed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The options of a help text, each with its whole description.
fn options(help: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let section = help.split("Options:").nth(1).unwrap_or_default();
    for line in section.lines() {
        let t = line.trim_start();
        if t.starts_with("--") || (t.starts_with('-') && t.get(2..4) == Some(", ")) {
            out.push(t.to_string());
        } else if line.starts_with(' ') && !t.is_empty() {
            if let Some(last) = out.last_mut() {
                last.push(' ');
                last.push_str(t);
            }
        } else if !line.starts_with(' ') && !t.is_empty() {
            break; // the text after the options
        }
    }
    out
}

#[test]
fn every_flag_has_an_environment_variable() {
    let commands: [&[&str]; 8] =
        [&[], &["discover"], &["tools"], &["call"], &["get"], &["watch"], &["answer"], &["cancel"]];
    for args in commands {
        let text = help(args);
        let options = options(&text);
        assert!(options.iter().any(|o| o.starts_with("--url")), "presa {args:?}: no --url in\n{text}");
        for o in options.iter().filter(|o| !o.contains("--help") && !o.contains("--version")) {
            assert!(o.contains("[env: PRESA_"), "presa {args:?}: no environment variable for {o}");
        }
    }
    let top = help(&[]);
    assert!(top.contains("[default: http://127.0.0.1:8080/mcp]"), "{top}");
    assert!(top.contains("Exit codes: 0 completed"), "{top}");
}
