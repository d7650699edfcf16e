//! `presa` on a real terminal (a pseudo-terminal driven by `rexpect`): the
//! elicitation of `deploy_release` becomes prompts, and Ctrl-C asks whether
//! to cancel the task or leave it running.

mod common;

use std::process::Command;

use common::{embedded, presa, presa_bin};
use rexpect::{
    process::WaitStatus,
    reader::Options,
    session::{PtySession, spawn_with_options},
};

fn spawn(url: &str, args: &[&str]) -> PtySession {
    let mut cmd = Command::new(presa_bin());
    cmd.arg("--url").arg(url).args(args).env("TERM", "xterm-256color").env_remove("PRESA_URL");
    spawn_with_options(cmd, Options::new().timeout_ms(Some(30_000)).strip_ansi_escape_codes(true)).expect("spawn presa")
}

/// Type `keys` like a person: after a pause, so the prompt has switched the
/// terminal to raw mode (which may discard input typed ahead).
fn type_keys(p: &mut PtySession, keys: &str) -> Result<(), rexpect::error::Error> {
    std::thread::sleep(std::time::Duration::from_millis(500));
    p.send(keys)?;
    p.flush()
}

/// Run `f` on a blocking thread (rexpect is synchronous), failing with what was read.
async fn drive(f: impl FnOnce() -> Result<i32, rexpect::error::Error> + Send + 'static) -> i32 {
    tokio::task::spawn_blocking(f).await.expect("the terminal driver panicked").unwrap_or_else(|e| panic!("{e}"))
}

fn exit_code(p: &PtySession) -> Result<i32, rexpect::error::Error> {
    match p.process().wait()? {
        WaitStatus::Exited(_, code) => Ok(code),
        other => panic!("presa did not exit normally: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elicitation_prompts_on_a_terminal() {
    let api = embedded().await;
    let url = api.url.clone();
    let code = drive(move || {
        let mut p = spawn(&url, &["call", "deploy_release", "version=1.0", "step_seconds=0.2"]);
        // The live line follows the steps.
        p.exp_string("Step 1/4: build 1.0")?;
        // The question, then accept / decline / cancel.
        p.exp_string("Release 1.0 to production?")?;
        p.exp_string("Cancel")?;
        type_keys(&mut p, "\r")?; // "Answer", the default
        p.exp_string("approve")?;
        p.exp_string("(y/n)")?;
        type_keys(&mut p, "y")?;
        p.exp_string("note")?;
        type_keys(&mut p, "shipped from a terminal\r")?;
        p.exp_string("Released 1.0 to production")?;
        p.exp_string("\"approved\": true")?;
        p.exp_eof()?;
        exit_code(&p)
    })
    .await;
    assert_eq!(code, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_can_cancel_the_task_or_leave_it_running() {
    let api = embedded().await;

    // Leave it running: the task goes on, and presa says how to re-attach.
    let url = api.url.clone();
    let (code, id) = tokio::task::spawn_blocking(move || -> Result<(i32, String), rexpect::error::Error> {
        let mut p = spawn(&url, &["call", "slow_compute", "seconds=30", "label=bg"]);
        p.exp_string("Computing bg for 30 s")?;
        std::thread::sleep(std::time::Duration::from_millis(500));
        p.send_control('c')?;
        p.exp_string("still running. What now?")?;
        type_keys(&mut p, "\r")?; // "Leave it running", the default
        p.exp_string("Re-attach with: presa --url")?;
        let line = p.read_line()?;
        let id = line.split_whitespace().last().unwrap_or_default().to_string();
        p.exp_eof()?;
        Ok((exit_code(&p)?, id))
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(code, 130);
    let out = presa(&api.url, &["get", &id]).await;
    assert!(out.stdout.contains("status   working"), "{out}");

    // Cancel it.
    let url = api.url.clone();
    let code = drive(move || {
        let mut p = spawn(&url, &["call", "slow_compute", "seconds=30", "label=fg"]);
        p.exp_string("Computing fg for 30 s")?;
        std::thread::sleep(std::time::Duration::from_millis(500));
        p.send_control('c')?;
        p.exp_string("Cancel it")?;
        type_keys(&mut p, "\x1b[B")?; // down
        type_keys(&mut p, "\r")?;
        p.exp_string("cancelled")?;
        p.exp_eof()?;
        exit_code(&p)
    })
    .await;
    assert_eq!(code, 4);
}
