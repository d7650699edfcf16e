//! The `presa` CLI against an embedded presa-gateway in front of
//! `@modelcontextprotocol/server-everything` over stdio: a question answered
//! up front by its key (the gateway derives it from the question, so it is
//! the same on every call), the same question filled in as a form on a real
//! terminal (a pseudo-terminal driven by `rexpect`), and a long operation
//! followed to its end. Then `presa admin gateway-config` and `reload-gateway`
//! against a gateway with a config file. `presa` must be built first: `cargo build -p presa-cli`.

mod common;

use std::{path::PathBuf, process::Command, time::Duration};

use common::{embedded, fixtures, gateway_bin, gateway_toml, python_toml};
use rexpect::{
    process::WaitStatus,
    reader::Options,
    session::{PtySession, spawn_with_options},
};

/// The `presa` binary, next to `presa-gateway` in the target dir.
fn presa_bin() -> PathBuf {
    let bin = gateway_bin().with_file_name("presa");
    assert!(
        bin.is_file(),
        "{} does not exist: these tests drive the presa CLI; run cargo build -p presa-cli first",
        bin.display()
    );
    bin
}

/// A `presa --url URL ARGS…` command with no `PRESA_*` variables from the outside.
fn presa_command(url: &str, args: &[&str]) -> Command {
    presa_testkit::cli::command(&presa_bin(), url, args)
}

/// Run `presa --url URL ARGS…` without a terminal (stdin closed) to its end, 60 s at most.
async fn presa(url: &str, args: &[&str]) -> presa_testkit::cli::Out {
    presa_testkit::cli::run(&presa_bin(), url, args).await
}

/// The gateway's key for an elicitation (`q1-elicit-` and 10 hex digits) in `text`.
fn elicitation_key(text: &str) -> Option<String> {
    text.split(|c: char| c.is_whitespace() || c == ':' || c == '=').find_map(|word| {
        let hex = word.strip_prefix("q1-elicit-")?;
        (hex.len() == 10 && hex.bytes().all(|b| b.is_ascii_hexdigit())).then(|| word.to_string())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elicitation_answered_up_front_by_the_key_a_no_input_run_printed() {
    let (gw, url) = embedded("gw", &fixtures().everything_stdio, &[], &[]).await;

    // Without an answer, --no-input stops at the question: exit 5, the task, the key, the hint.
    let asked = presa(&url, &["call", "trigger-elicitation-request", "--no-input"]).await;
    assert_eq!(asked.code, 5, "{asked}\n{}", gw.log());
    let first = asked.stdout.lines().next().unwrap_or_default();
    let id = first
        .strip_prefix("Task ")
        .and_then(|r| r.strip_suffix(" needs input:"))
        .unwrap_or_else(|| panic!("no 'Task ID needs input:' line: {asked}"));
    let key = elicitation_key(&asked.stdout).unwrap_or_else(|| panic!("no q1-elicit-<10 hex> key: {asked}"));
    assert!(asked.stdout.contains(&format!("{key}: Please provide inputs for the following fields:")), "{asked}");
    assert!(asked.stdout.contains("name (string, required): Your full, legal name"), "{asked}");
    assert!(asked.stdout.contains(&format!("answer {id} {key}='")), "{asked}");

    // A new call asks the same question under the same key: answered up front, it completes.
    let answer = format!(r#"{key}={{"action":"accept","content":{{"name":"Ada Lovelace"}}}}"#);
    let out = presa(&url, &["call", "trigger-elicitation-request", "--no-input", "--answer", &answer]).await;
    assert_eq!(out.code, 0, "{out}\n{}", gw.log());
    assert!(out.stdout.starts_with("✅ User provided the requested information!\n"), "{out}");
    assert!(out.stdout.contains("- Name: Ada Lovelace"), "{out}");
    assert!(out.stdout.contains(r#""name": "Ada Lovelace""#), "the raw answer is echoed: {out}");
    assert!(out.stderr.contains("completed"), "{out}");

    // The first task still waits for its answer; the printed hint finishes it.
    let answer = format!(r#"{key}={{"action":"accept","content":{{"name":"Grace Hopper"}}}}"#);
    let answered = presa(&url, &["answer", id, &answer]).await;
    assert_eq!(answered.code, 0, "{answered}");
    let watched = presa(&url, &["watch", id]).await;
    assert_eq!(watched.code, 0, "{watched}");
    assert!(watched.stdout.contains(&format!("{id} completed")), "{watched}");
    assert!(watched.stdout.contains("- Name: Grace Hopper"), "{watched}");
}

/// Type `keys` like a person: after a pause, so the prompt has switched the
/// terminal to raw mode (which may discard input typed ahead).
fn type_keys(p: &mut PtySession, keys: &str) -> Result<(), rexpect::error::Error> {
    std::thread::sleep(Duration::from_millis(500));
    p.send(keys)?;
    p.flush()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elicitation_is_a_form_on_a_terminal() {
    let (gw, url) = embedded("gw", &fixtures().everything_stdio, &[], &[]).await;
    let mut cmd = presa_command(&url, &["call", "trigger-elicitation-request"]);
    cmd.env("TERM", "xterm-256color");
    let (code, tail) = tokio::task::spawn_blocking(move || -> Result<(i32, String), rexpect::error::Error> {
        let mut p = spawn_with_options(cmd, Options::new().timeout_ms(Some(30_000)).strip_ansi_escape_codes(true))?;
        // Accept / decline / cancel, with the gateway's key.
        p.exp_string("Please provide inputs for the following fields: [q1-elicit-")?;
        p.exp_string("Cancel")?;
        type_keys(&mut p, "\r")?; // "Answer", the default
        // The required field first, then the optional ones by name.
        p.exp_string("(Your full, legal name)")?;
        type_keys(&mut p, "Ada Lovelace\r")?;
        p.exp_string("(Your date of birth) [optional]")?;
        type_keys(&mut p, "\r")?; // skipped
        p.exp_string("(Agree to the terms and conditions) [optional] (y/n)")?;
        type_keys(&mut p, "y")?;
        p.exp_string("String with email format")?;
        type_keys(&mut p, "ada@example.org\r")?;
        p.exp_string("(Favorite first line of a story) [optional] (It was a dark and stormy night.)")?;
        type_keys(&mut p, "\r")?; // its default
        p.exp_string("(Portfolio / personal website) [optional]")?;
        type_keys(&mut p, "\r")?;
        p.exp_string("[optional] (42)")?;
        type_keys(&mut p, "\r")?;
        p.exp_string("(Choose your favorite type of pet) [optional]")?;
        p.exp_string("(no answer)")?;
        type_keys(&mut p, "\r")?; // the first: Cats
        p.exp_string("[optional] (3.14)")?;
        type_keys(&mut p, "\r")?;
        p.exp_string("(Choose your favorite types of fish) [optional]")?;
        type_keys(&mut p, "\r")?;
        p.exp_string("(Choose your favorite hero) [optional]")?;
        p.exp_string("(no answer)")?;
        type_keys(&mut p, "\x1b[B")?; // down: Green Lantern
        type_keys(&mut p, "\r")?;
        p.exp_string("(Choose your favorite instruments) [optional]")?;
        type_keys(&mut p, "\r")?;
        p.exp_string("(Choose your favorite friend) [optional]")?;
        p.exp_string("(no answer)")?;
        type_keys(&mut p, "\r")?;
        p.exp_string("completed")?;
        let tail = p.exp_eof()?;
        let code = match p.process().wait()? {
            WaitStatus::Exited(_, code) => code,
            other => panic!("presa did not exit normally: {other:?}"),
        };
        Ok((code, tail))
    })
    .await
    .expect("the terminal driver panicked")
    .unwrap_or_else(|e| panic!("{e}\n{}", gw.log()));
    assert_eq!(code, 0, "{tail}");
    // server-everything's result: what the form gave it.
    assert!(tail.contains("User provided the requested information!"), "{tail}");
    assert!(tail.contains("- Name: Ada Lovelace"), "{tail}");
    assert!(tail.contains("- Agreed to terms: true"), "{tail}");
    assert!(tail.contains(r#""email": "ada@example.org""#), "{tail}");
    assert!(tail.contains(r#""firstLine": "It was a dark and stormy night.""#), "{tail}");
    assert!(tail.contains(r#""legacyTitledEnum": "pet-1""#), "{tail}");
    assert!(tail.contains(r#""titledSingleSelectEnum": "hero-2""#), "{tail}");
    assert!(!tail.contains(r#""birthdate""#), "a skipped field is left out: {tail}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_running_operation_is_followed_to_its_end() {
    let (gw, url) = embedded("gw", &fixtures().everything_stdio, &[], &[]).await;
    let out = presa(&url, &["call", "trigger-long-running-operation", "duration=1", "steps=2"]).await;
    assert_eq!(out.code, 0, "{out}\n{}", gw.log());
    assert_eq!(out.stdout, "Long running operation completed. Duration: 1 seconds, Steps: 2.\n", "{out}");
    // Not a terminal: a status line per change on stderr, the upstream's progress among
    // them, ending with the terminal status.
    assert!(out.stderr.lines().any(|l| l.contains(" working: ")), "{out}");
    assert!(out.stderr.contains("/2"), "the upstream's progress shows in the status: {out}");
    let last = out.stderr.lines().last().unwrap_or_default();
    assert!(last.contains(" completed"), "{out}");
}

/// `presa admin gateway-config` shows the embedded gateway's config (one
/// row: node, role, version, loaded, no refusal); `presa admin reload-gateway`
/// asks it to read the file again: a changed file shows a new version, a
/// broken one its refusal with the version kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presa_admin_shows_the_gateway_config_and_reloads_it() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = python_toml(1);
    let path = gateway_toml(dir.path(), &upstream);
    let args = ["--gateway-config", path.to_str().unwrap(), "--upstream-settle-ms", "0"];
    let gw = presa_testkit::Pod::start("gw", &gateway_bin(), presa_testkit::free_port(), &args, &[]).await;
    let url = format!("{}/mcp", gw.base());
    let first = gateway_config(&url, |p| p["version"].is_string()).await;
    let table = presa(&url, &["admin", "gateway-config"]).await;
    let lines: Vec<&str> = table.stdout.lines().collect();
    assert!(lines.len() == 2 && lines[0].starts_with("NODE ") && lines[0].contains("LAST REFUSAL"), "{table}");
    let cells: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(cells[1..3], ["embedded", first["version"].as_str().unwrap()], "{table}");
    assert_eq!(cells.last(), Some(&"-"), "no refusal yet: {table}");

    std::fs::write(&path, format!("{upstream}hide = [\"add\"]\n")).unwrap();
    let asked = presa(&url, &["admin", "reload-gateway"]).await;
    assert_eq!(asked.code, 0, "{asked}");
    assert!(asked.stdout.starts_with("1 gateway process(es) asked to read their config again"), "{asked}");
    gw.wait_log("gateway config reloaded", Duration::from_secs(10)).await;
    let applied = gateway_config(&url, |p| p["version"] != first["version"]).await;
    assert!(applied["lastRefusal"].is_null(), "{applied}");
    assert_ne!(applied["version"], first["version"], "{applied}");

    std::fs::write(&path, format!("{upstream}hide = [\"add\"\n")).unwrap();
    let asked = presa(&url, &["--json", "admin", "reload-gateway"]).await;
    assert_eq!(asked.code, 0, "{asked}");
    let refused = gateway_config(&url, |p| p["lastRefusal"]["reason"].is_string()).await;
    assert_eq!(refused["version"], applied["version"], "the running config is kept: {refused}");
    let table = presa(&url, &["admin", "gateway-config"]).await;
    assert!(table.stdout.contains(" ago: ") && table.stdout.contains("TOML"), "the refusal and its reason: {table}");
}

/// The one gateway process's config as `presa --json admin gateway-config` shows it, once `pred` holds (a heartbeat every 5 s).
async fn gateway_config(url: &str, pred: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let mut seen = serde_json::Value::Null;
    for _ in 0..80 {
        let out = presa(url, &["--json", "admin", "gateway-config"]).await;
        assert_eq!(out.code, 0, "{out}");
        seen = serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
        if let Some([p]) = seen["processes"].as_array().map(Vec::as_slice)
            && pred(p)
        {
            return p.clone();
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!("the gateway config never showed as expected: {seen}");
}
