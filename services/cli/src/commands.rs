//! The subcommands.

use std::{
    path::Path,
    time::{Duration, Instant},
};

use anyhow::Context;
use presa_client::{CallOutcome, Client, Status, Task};
use serde_json::{Map, Value, json};

use crate::{
    Cli, Command, exit,
    follow::{Ended, FollowUi, follow_tasks, interrupts},
    input::{self, Answered, Unanswered},
    live::{Live, PlainTo},
    output, usage,
};

const DEFAULT_URL: &str = "http://127.0.0.1:8080/mcp";

/// Run the command; its exit code.
pub(crate) async fn run(cli: Cli) -> anyhow::Result<u8> {
    let client = Client::new(&cli.url, cli.token.clone())?;
    match &cli.command {
        Command::Discover => {
            let d = client.discover().await?;
            if cli.json {
                output::json_line(&d);
            } else {
                output::print_discover(&d);
            }
            Ok(exit::OK)
        }
        Command::Tools => {
            let tools = client.list_tools().await?;
            if cli.json {
                output::json_line(&json!({ "tools": tools }));
            } else {
                output::print_tools(&tools);
            }
            Ok(exit::OK)
        }
        Command::Call(args) => call(&cli, &client, args).await,
        Command::Admin(args) => crate::admin::run(&cli, &client, args).await,
        Command::Get { id, files } => {
            let task = client.get_task(id).await?;
            if cli.json {
                output::json_line(&task.0);
            } else {
                let links = output::print_task(&task, &files.output_dir)?;
                output::save_links(&client, links).await?;
            }
            Ok(exit::OK)
        }
        Command::Watch(w) => {
            let preset = input::parse_answers(&w.input.answers)?;
            let mut live = Live::new(PlainTo::Stdout, cli.json, cli.verbose);
            let ui = FollowUi {
                client: &client,
                live: &mut live,
                preset: &preset,
                unanswered: Unanswered::choose(w.input.no_input, Unanswered::Wait),
                poll_only: cli.poll,
                json_snapshots: cli.json,
            };
            let ended = follow_tasks(ui, w.ids.clone(), &mut interrupts()).await?;
            finish(&cli, &client, ended, &w.files.output_dir, false).await
        }
        Command::Answer { id, answers } => {
            let answers = input::parse_answers(answers)?;
            client.update_task(id, &answers).await?;
            let task = client.get_task(id).await?;
            if cli.json {
                output::json_line(&task.0);
            } else {
                let keys: Vec<&str> = answers.keys().map(String::as_str).collect();
                println!("Answered {} for task {id}; it is {} now", keys.join(", "), status_line(&task));
            }
            Ok(exit::OK)
        }
        Command::Cancel { id } => {
            client.cancel_task(id).await?;
            let task = client.get_task(id).await?;
            if cli.json {
                output::json_line(&task.0);
            } else if task.status() == Status::Cancelled {
                println!("Task {id} cancelled");
            } else {
                println!("Task {id} had already ended: {}", status_line(&task));
            }
            Ok(exit::OK)
        }
    }
}

fn status_line(task: &Task) -> String {
    match task.status_message() {
        Some(m) => format!("{} ({m})", task.status()),
        None => task.status().to_string(),
    }
}

/// `--args JSON|@file` plus `key=value` pairs typed from the tool's schema.
async fn arguments(client: &Client, args: &crate::CallArgs) -> anyhow::Result<Map<String, Value>> {
    let mut out = match &args.args {
        None => Map::new(),
        Some(raw) => {
            let text = match raw.strip_prefix('@') {
                Some(path) => std::fs::read_to_string(path).map_err(|e| usage(format!("--args @{path}: {e}")))?,
                None => raw.clone(),
            };
            match serde_json::from_str::<Value>(&text) {
                Ok(Value::Object(m)) => m,
                Ok(other) => return Err(usage(format!("--args must be a JSON object, not {other}"))),
                Err(e) => return Err(usage(format!("--args is not JSON: {e}"))),
            }
        }
    };
    if args.assignments.is_empty() {
        return Ok(out);
    }
    let tools = client.list_tools().await?;
    let tool = tools
        .iter()
        .find(|t| t["name"] == args.tool.as_str())
        .ok_or_else(|| usage(format!("the server has no tool named {:?} (`presa tools` lists them)", args.tool)))?;
    let typed = presa_client::schema::parse_assignments(&tool["inputSchema"], &args.assignments)
        .map_err(|e| usage(e.to_string()))?;
    out.extend(typed);
    Ok(out)
}

/// How often `presa call` sends a call again after its answer was lost
/// (0.5, 1, 2, 4 s apart), under the same idempotency key: a call the server
/// made a task of returns that task, not a second one. (A tool the server runs
/// inline, without a task, is not covered by the key: it may run again. The
/// 2026-07-28 Tasks extension lets the server decide, so the CLI cannot tell
/// beforehand; inline calls are the short ones, whose answers are rarely lost.)
const CREATE_RETRIES: u32 = 4;

async fn call(cli: &Cli, client: &Client, args: &crate::CallArgs) -> anyhow::Result<u8> {
    let arguments = Value::Object(arguments(client, args).await?);
    let preset = input::parse_answers(&args.input.answers)?;
    let unanswered = Unanswered::choose(args.input.no_input, Unanswered::Exit);
    let mut live = Live::new(PlainTo::Stderr, cli.json, cli.verbose);
    let mut ctrl_c = interrupts();
    let mut responses: Option<Map<String, Value>> = None;
    let mut state: Option<Value> = None;
    loop {
        // Each round is its own call, under its own key; a retry of a round
        // whose answer was lost reuses it, so a task it made is not made twice.
        let key = presa_client::wire::new_idempotency_key();
        let mut retries = 0;
        let outcome = loop {
            let sent = tokio::select! {
                o = client.call_tool_keyed(&args.tool, &arguments, responses.as_ref(), state.as_ref(), Some(&key)) => o,
                Some(()) = ctrl_c.recv() => {
                    eprintln!("presa: interrupted before the server answered");
                    return Ok(exit::INTERRUPTED);
                }
            };
            match sent {
                Err(e) if e.reply_lost() && retries < CREATE_RETRIES => {
                    retries += 1;
                    let pause = Duration::from_millis(500 << (retries - 1));
                    eprintln!(
                        "presa: {e}; sending the call again with the same idempotency key in {:.1} s ({retries}/{CREATE_RETRIES})",
                        pause.as_secs_f64()
                    );
                    tokio::time::sleep(pause).await;
                }
                other => break other?,
            }
        };
        match outcome {
            CallOutcome::Complete(result) => {
                if cli.json {
                    output::json_line(&result);
                } else {
                    let links = output::print_result(&result, &args.files.output_dir, &args.tool)?;
                    output::save_links(client, links).await?;
                }
                return Ok(output::result_code(&result));
            }
            CallOutcome::InputRequired { input_requests, request_state } => {
                match input::answer(&input_requests, &preset, unanswered, &live)? {
                    Answered::Some(answers) => {
                        responses = Some(answers);
                        state = request_state;
                    }
                    Answered::Missing(keys) => {
                        if cli.json {
                            output::json_line(
                                &json!({ "resultType": "input_required", "inputRequests": input_requests }),
                            );
                        } else {
                            println!("The tool {} needs input before it can run:", args.tool);
                            for key in &keys {
                                println!("  {}", input::describe(key, &input_requests[key]).replace('\n', "\n  "));
                            }
                            let hints: Vec<String> = keys
                                .iter()
                                .map(|k| format!("--answer {}", input::example_answer(k, &input_requests[k])))
                                .collect();
                            println!("Run it again with: {}", hints.join(" "));
                        }
                        return Ok(exit::INPUT_REQUIRED);
                    }
                    Answered::Interrupted => return Ok(exit::INTERRUPTED),
                }
            }
            CallOutcome::Task(task) => {
                if args.detach {
                    if cli.json {
                        output::json_line(&task.0);
                    } else {
                        println!("{}", task.id());
                    }
                    return Ok(exit::OK);
                }
                let ui = FollowUi {
                    client,
                    live: &mut live,
                    preset: &preset,
                    unanswered,
                    poll_only: cli.poll,
                    json_snapshots: false,
                };
                let created = Instant::now();
                let ended = match follow_tasks(ui, vec![task.id().to_string()], &mut ctrl_c).await {
                    Err(e) if lost(&e, &task, created.elapsed()) => {
                        eprintln!(
                            "presa: task {} was lost: the server created it {:.1} s ago and keeps tasks for {}, \
                             but no longer knows it (a Redis failover with --durability primary can lose the last \
                             creates it acknowledged); its tool may or may not have run. Run the call again.",
                            task.id(),
                            created.elapsed().as_secs_f64(),
                            task.ttl().map_or("ever".to_string(), |t| format!("{:.0} s", t.as_secs_f64())),
                        );
                        return Ok(exit::LOST);
                    }
                    other => other?,
                };
                return finish(cli, client, ended, &args.files.output_dir, true).await;
            }
        }
    }
}

/// Whether following `task`, made by this call `age` ago, failed because the
/// server no longer knows it although its `ttlMs` has not run out: the one
/// case where a client can tell a lost task from an expired one.
fn lost(e: &anyhow::Error, task: &Task, age: Duration) -> bool {
    matches!(e.downcast_ref::<presa_client::Error>(), Some(presa_client::Error::UnknownTask { id, .. }) if id == task.id())
        && task.ttl().is_none_or(|ttl| age < ttl)
}

/// Print how following ended; the exit code (the first task's that is not 0).
async fn finish(cli: &Cli, client: &Client, ended: Ended, dir: &Path, single_result: bool) -> anyhow::Result<u8> {
    match ended {
        Ended::Done(tasks) => {
            let mut code = exit::OK;
            for task in &tasks {
                if cli.json && single_result {
                    // `call --json`: the CallToolResult, or the task when there is none.
                    output::json_line(task.result().unwrap_or(&task.0));
                } else if !cli.json {
                    if tasks.len() > 1 {
                        println!("── {} ──", task.id());
                    }
                    let links = output::print_outcome(task, dir).context("printing the result")?;
                    output::save_links(client, links).await?;
                }
                if code == exit::OK {
                    code = output::task_code(task);
                }
            }
            Ok(code)
        }
        Ended::NeedsInput(task, keys) => {
            if cli.json {
                output::json_line(&task.0);
            } else {
                let id = task.id();
                println!("Task {id} needs input:");
                let requests = task.input_requests().cloned().unwrap_or_default();
                for key in &keys {
                    let request = requests.get(key).cloned().unwrap_or(Value::Null);
                    println!("  {}", input::describe(key, &request).replace('\n', "\n  "));
                    println!(
                        "Answer with: presa{} answer {id} {}",
                        url_flag(cli),
                        input::example_answer(key, &request)
                    );
                }
                println!("then follow it with: presa{} watch {id}", url_flag(cli));
            }
            Ok(exit::INPUT_REQUIRED)
        }
        Ended::Cancelled(tasks) => {
            for task in &tasks {
                if cli.json { output::json_line(&task.0) } else { println!("Task {} {}", task.id(), task.status()) }
            }
            Ok(exit::CANCELLED)
        }
        Ended::LeftRunning(ids) => {
            eprintln!("presa: left running. Re-attach with: presa{} watch {}", url_flag(cli), ids.join(" "));
            Ok(exit::INTERRUPTED)
        }
    }
}

fn url_flag(cli: &Cli) -> String {
    if cli.url == DEFAULT_URL { String::new() } else { format!(" --url {}", cli.url) }
}
