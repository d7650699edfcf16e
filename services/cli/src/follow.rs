//! Following tasks in the terminal: the live display, answering input
//! requests as they come, and Ctrl-C (cancel the task, or leave it running
//! and say how to re-attach).

use std::collections::{HashMap, HashSet};

use dialoguer::{Select, theme::ColorfulTheme};
use presa_client::{Client, FollowEvent, FollowOptions, Status, Task, follow::follow};
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use crate::{
    input::{self, Answered, Unanswered},
    live::Live,
};

/// How following ended.
#[derive(Debug)]
pub(crate) enum Ended {
    /// Every task is terminal: the last snapshots, in the order asked.
    Done(Vec<Task>),
    /// A task needs input nobody may give here (exit code 5).
    NeedsInput(Task, Vec<String>),
    /// Ctrl-C; the tasks were cancelled (and these are their snapshots).
    Cancelled(Vec<Task>),
    /// Ctrl-C; the tasks keep running.
    LeftRunning(Vec<String>),
}

/// What following needs to know.
#[derive(Debug)]
pub(crate) struct FollowUi<'a> {
    pub(crate) client: &'a Client,
    pub(crate) live: &'a mut Live,
    pub(crate) preset: &'a Map<String, Value>,
    pub(crate) unanswered: Unanswered,
    pub(crate) poll_only: bool,
    /// `watch --json`: print each snapshot as a JSON line.
    pub(crate) json_snapshots: bool,
}

/// Ctrl-C presses, as a channel (registered once, so none is missed).
pub(crate) fn interrupts() -> mpsc::UnboundedReceiver<()> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while tokio::signal::ctrl_c().await.is_ok() {
            if tx.send(()).is_err() {
                break;
            }
        }
    });
    rx
}

/// Follow `ids` until every task ends (or input is needed, or Ctrl-C).
pub(crate) async fn follow_tasks(
    ui: FollowUi<'_>,
    ids: Vec<String>,
    ctrl_c: &mut mpsc::UnboundedReceiver<()>,
) -> anyhow::Result<Ended> {
    let mut following = follow(ui.client.clone(), ids.clone(), FollowOptions { listen: !ui.poll_only });
    let mut last: HashMap<String, Task> = HashMap::new();
    let mut answered: HashSet<(String, String)> = HashSet::new();
    let mut waiting_said: HashSet<(String, String)> = HashSet::new();
    loop {
        let event = tokio::select! {
            e = following.next() => e,
            Some(()) = ctrl_c.recv() => {
                let pending: Vec<String> =
                    ids.iter().filter(|id| !last.get(*id).is_some_and(|t| t.status().is_terminal())).cloned().collect();
                return interrupted(ui.client, ui.live, pending).await;
            }
        };
        let task = match event {
            None => break,
            Some(Err(e)) => return Err(e.into()),
            Some(Ok(FollowEvent::Transport(text))) => {
                ui.live.note(&text);
                continue;
            }
            Some(Ok(FollowEvent::Snapshot(task))) => task,
        };
        ui.live.update(&task);
        if ui.json_snapshots {
            crate::output::json_line(&task.0);
        }
        last.insert(task.id().to_string(), task.clone());
        if task.status() != Status::InputRequired {
            continue;
        }
        let id = task.id().to_string();
        let open: Map<String, Value> = task
            .input_requests()
            .into_iter()
            .flatten()
            .filter(|(k, _)| !answered.contains(&(id.clone(), (*k).clone())))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if open.is_empty() {
            continue;
        }
        match input::answer(&open, ui.preset, ui.unanswered, ui.live)? {
            Answered::Some(answers) => {
                for (key, request) in &open {
                    if !answers.contains_key(key) && waiting_said.insert((id.clone(), key.clone())) {
                        ui.live.say(&format!(
                            "Task {id} waits for an answer: {}\n  answer with: presa answer {id} {}",
                            input::describe(key, request),
                            input::example_answer(key, request)
                        ));
                    }
                }
                if !answers.is_empty() {
                    for key in answers.keys() {
                        answered.insert((id.clone(), key.clone()));
                    }
                    ui.client.update_task(&id, &answers).await?;
                }
            }
            Answered::Missing(keys) => return Ok(Ended::NeedsInput(task, keys)),
            Answered::Interrupted => {
                let pending: Vec<String> =
                    ids.iter().filter(|i| !last.get(*i).is_some_and(|t| t.status().is_terminal())).cloned().collect();
                return interrupted(ui.client, ui.live, pending).await;
            }
        }
    }
    ui.live.finish();
    Ok(Ended::Done(ids.iter().filter_map(|id| last.get(id).cloned()).collect()))
}

/// Ctrl-C: ask (on a terminal) whether to cancel the tasks or leave them running.
async fn interrupted(client: &Client, live: &mut Live, pending: Vec<String>) -> anyhow::Result<Ended> {
    let ask = crate::live::interactive_output() && std::io::IsTerminal::is_terminal(&std::io::stdin());
    let cancel = ask
        && live.suspend(|| {
            let what = if pending.len() == 1 { "The task is" } else { "The tasks are" };
            Select::with_theme(&ColorfulTheme::default())
                .with_prompt(format!("{what} still running. What now?"))
                .items(["Leave it running (re-attach later)", "Cancel it"])
                .default(0)
                .interact_opt()
                .ok()
                .flatten()
                == Some(1)
        });
    live.finish();
    if !cancel {
        return Ok(Ended::LeftRunning(pending));
    }
    let mut snapshots = Vec::new();
    for id in &pending {
        client.cancel_task(id).await?;
        snapshots.push(client.get_task(id).await?);
    }
    Ok(Ended::Cancelled(snapshots))
}
