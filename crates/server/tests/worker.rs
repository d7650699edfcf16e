//! The worker pool against the memory store: poison tasks, panicking
//! handlers, and a parked handler that must not be fenced out by a stale
//! snapshot.

use std::{sync::Arc, time::Duration};

use presa_server::{
    Catalog, Core, RetryPolicy, ServerConfig, TaskPolicy, Tool, ToolContext, ToolError, ToolOutput, Worker,
    WorkerConfig,
};
use presa_store::{
    Backend, Cas, CreateLimits, DeadLetterFilter, DeadLetters, NewTask, Scope, Status, Task, TaskId, TaskStore,
    WorkQueue, Writer, memory::MemoryStore, wrapped::Wrapped,
};
use presa_tasks::{Caller, Event, Work, apply};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

fn core(store: Arc<MemoryStore>) -> Core {
    core_on(Backend::new(store))
}

fn core_on(backend: Backend) -> Core {
    let catalog = Catalog::builder()
        .tool(
            Tool::new(
                "quick",
                "Completes at once.",
                json!({ "type": "object" }),
                |_ctx: ToolContext, _args: Value| async { Ok(ToolOutput::text("done")) },
            )
            .policy(TaskPolicy::Required),
        )
        .tool(
            Tool::new("explode", "Panics.", json!({ "type": "object" }), |_ctx: ToolContext, _args: Value| async {
                if std::hint::black_box(true) {
                    panic!("handler bug");
                }
                Ok(ToolOutput::text("unreachable"))
            })
            .policy(TaskPolicy::Required),
        )
        .tool(
            Tool::new(
                "chatty",
                "Updates its status every 50 ms for 2 s.",
                json!({ "type": "object" }),
                |ctx: ToolContext, _args: Value| async move {
                    for i in 0..40 {
                        ctx.set_status(format!("step {i}")).await?;
                        ctx.sleep(Duration::from_millis(50)).await?;
                    }
                    Ok(ToolOutput::text(format!("attempt {}", ctx.attempt().unwrap_or(0))))
                },
            )
            .policy(TaskPolicy::Required),
        )
        .tool(
            Tool::new(
                "hang",
                "Runs for an hour (its workers go away first).",
                json!({ "type": "object" }),
                |ctx: ToolContext, _args: Value| async move {
                    ctx.sleep(Duration::from_secs(3600)).await?;
                    Ok(ToolOutput::text("done"))
                },
            )
            .policy(TaskPolicy::Required),
        )
        .tool(
            Tool::new(
                "flaky",
                "Fails transiently on its first `fail` tries, or for good with `permanent`.",
                json!({ "type": "object" }),
                |ctx: ToolContext, args: Value| async move {
                    let number = ctx.try_number().unwrap_or(1);
                    if args["permanent"] == true {
                        return Err(ToolError::invalid_params("no such thing"));
                    }
                    if u64::from(number) <= args["fail"].as_u64().unwrap_or(0) {
                        return Err(ToolError::transient(format!("simulated outage {number}")));
                    }
                    Ok(ToolOutput::text(format!("succeeded on try {number}")))
                },
            )
            .policy(TaskPolicy::Required)
            .retry(RetryPolicy::attempts(3).backoff(Duration::from_millis(200), Duration::from_millis(300))),
        )
        .tool(
            Tool::new("ask", "Asks once.", json!({ "type": "object" }), |ctx: ToolContext, _args: Value| async move {
                let answer = ctx.input("go", json!({ "method": "elicitation/create" })).await?;
                Ok(ToolOutput::text(answer.to_string()))
            })
            .policy(TaskPolicy::Required),
        )
        .build()
        .unwrap();
    Core::new(ServerConfig::default(), catalog, backend)
}

async fn create(store: &MemoryStore, tool: &str) -> Task {
    create_with(store, tool, json!({})).await
}

async fn create_with(store: &MemoryStore, tool: &str, arguments: Value) -> Task {
    let new = NewTask {
        scope: Scope::anonymous(),
        work: Work { tool: tool.into(), arguments, ..Work::default() },
        ttl_ms: Some(60_000),
        poll_interval_ms: None,
        status_message: None,
    };
    store
        .create(
            new,
            CreateLimits { max_active_per_scope: None, max_bytes_per_scope: None, max_queued_per_partition: None },
        )
        .await
        .unwrap()
}

async fn wait_terminal(store: &MemoryStore, id: &TaskId) -> Task {
    for _ in 0..200 {
        let t = store.load(id).await.unwrap().expect("task exists");
        if t.status.is_terminal() {
            return t;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("task {id} never finished");
}

fn run_worker(core: Core, max_deliveries: u64) -> CancellationToken {
    let stop = CancellationToken::new();
    let config = WorkerConfig {
        max_deliveries,
        lease: Duration::from_millis(600),
        claim_wait: Duration::from_millis(100),
        grace: Duration::from_millis(100),
        ..WorkerConfig::default()
    };
    tokio::spawn(Worker::new(core, config).run(stop.clone()));
    stop
}

/// Work delivered more than `max_deliveries` times (its workers kept dying)
/// ends `failed` instead of looping forever.
#[tokio::test]
async fn poison_task_fails_after_max_deliveries() {
    let store = Arc::new(MemoryStore::new());
    let task = create(&store, "quick").await;
    // Three workers claimed it and died without a word.
    for _ in 0..3 {
        let claims = store.claim("doomed", 1, Duration::from_millis(1), Duration::from_millis(200)).await.unwrap();
        assert_eq!(claims.len(), 1);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let stop = run_worker(core(store.clone()), 3);
    let t = wait_terminal(&store, &task.id).await;
    stop.cancel();
    assert_eq!(t.status, Status::Failed);
    assert_eq!(t.error.unwrap()["code"], -32603);
    // Nothing left to claim: the work item is gone.
    let left = store.claim("check", 1, Duration::from_secs(1), Duration::from_millis(100)).await.unwrap();
    assert!(left.is_empty());
}

/// A task whose every delivery dies with its worker (each worker here stops
/// mid-run and hands the work back, as a crash-looping pod's lapsed lease
/// does) ends, once delivered more than `max_deliveries` times, `failed` with
/// exactly one dead letter holding what it takes to run it again; replaying
/// the letter queues a new task for the same owner, tool and arguments.
#[tokio::test]
async fn a_task_whose_deliveries_keep_dying_ends_in_one_dead_letter() {
    let store = Arc::new(MemoryStore::new());
    let caller = Caller::new("acme", "alice", vec!["deploy".into()]);
    let new = NewTask {
        scope: caller.scope.clone(),
        work: Work {
            tool: "hang".into(),
            arguments: json!({ "n": 7 }),
            caller: Some(caller.clone()),
            ..Work::default()
        },
        ttl_ms: Some(60_000),
        poll_interval_ms: None,
        status_message: None,
    };
    let task = store.create(new, CreateLimits::NONE).await.unwrap();
    for delivery in 1..=2 {
        let stop = run_worker(core(store.clone()), 2);
        for _ in 0..200 {
            if store.load(&task.id).await.unwrap().unwrap().attempt == delivery {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // The worker goes away mid-run; its work goes back to the queue.
        stop.cancel();
    }
    let stop = run_worker(core(store.clone()), 2);
    let t = wait_terminal(&store, &task.id).await;
    stop.cancel();
    assert_eq!(t.status, Status::Failed);
    assert_eq!(t.work.arguments, Value::Null, "the task itself keeps no arguments");

    let page = store.dead_letters(&DeadLetterFilter::tenant("acme"), None, 10).await.unwrap();
    assert_eq!(page.next, None);
    let [letter] = page.letters.as_slice() else { panic!("one dead letter: {page:?}") };
    assert_eq!((&letter.id, &letter.scope, letter.tool()), (&task.id, &caller.scope, "hang"));
    assert_eq!((letter.deliveries, letter.attempts), (3, 3));
    assert_eq!(letter.reason, "delivered 3 times, more than max_deliveries (2)");
    assert_eq!((&letter.work.arguments, letter.work.caller.as_ref()), (&json!({ "n": 7 }), Some(&caller)));
    assert!(store.dead_letters(&DeadLetterFilter::tenant("local"), None, 10).await.unwrap().letters.is_empty());

    let replayed = store.replay_dead_letter("acme", &task.id, CreateLimits::NONE).await.unwrap().unwrap();
    assert!(replayed.first);
    let again = store.get(&caller.scope, &replayed.task).await.unwrap().expect("the replay");
    assert_eq!((again.status, again.work.replay_of.as_ref()), (Status::Working, Some(&task.id)));
    assert_eq!((again.work.tool.as_str(), &again.work.arguments), ("hang", &json!({ "n": 7 })));
}

/// A handler that changes its task more often than the lease is renewed
/// (a status per upstream progress line) keeps its claim: the renewal runs on
/// its own clock, not only when the task is quiet. (It used to restart its
/// wait on every change, never renewed, and the task was re-run each lease
/// until it failed as a poison task.)
#[tokio::test]
async fn a_chatty_handler_keeps_its_lease() {
    let store = Arc::new(MemoryStore::new());
    let stop = run_worker(core(store.clone()), 5);
    let task = create(&store, "chatty").await;
    let t = wait_terminal(&store, &task.id).await;
    stop.cancel();
    assert_eq!(t.status, Status::Completed, "{t:?}");
    assert_eq!(t.attempt, 1, "claimed once: {t:?}");
    assert_eq!(t.result.unwrap()["content"][0]["text"], "attempt 1");
}

/// A panicking handler fails its task with a generic -32603 at once (no
/// retries of a deterministic bug), and the worker keeps serving.
#[tokio::test]
async fn panicking_handler_fails_the_task_and_the_worker_survives() {
    let store = Arc::new(MemoryStore::new());
    let stop = run_worker(core(store.clone()), 5);
    let bad = create(&store, "explode").await;
    let t = wait_terminal(&store, &bad.id).await;
    assert_eq!(t.status, Status::Failed);
    assert_eq!(t.error.clone().unwrap(), json!({ "code": -32603, "message": "Internal error" }));
    assert!(!t.error.unwrap().to_string().contains("handler bug"), "internals must not leak");
    let good = create(&store, "quick").await;
    assert_eq!(wait_terminal(&store, &good.id).await.status, Status::Completed);
    stop.cancel();
}

/// A parked handler decides on published snapshots without reloading, but
/// skips one no newer than what it has seen: the task as created (attempt 0,
/// from before the claim) would otherwise fence the run out, and the task
/// would never get past its input.
#[tokio::test]
async fn a_parked_handler_skips_a_stale_snapshot_and_resumes_on_the_answer() {
    let memory = Arc::new(MemoryStore::new());
    let task = create(&memory, "ask").await;
    // Every watch first delivers the task as created (attempt 0, from before
    // the claim), as a slow shared subscription may hand it to a new watcher.
    let store = Arc::new(Wrapped::new(memory.clone()).first_on_watch(vec![task.clone()]));
    let (bus, admin, sessions, rates) = (memory.clone(), memory.clone(), memory.clone(), memory.clone());
    let breakers = memory.clone();
    let permits = memory.clone();
    let backend = Backend {
        store: store.clone(),
        work: store.clone(),
        dead: store,
        bus,
        admin,
        sessions,
        rates,
        breakers,
        permits,
    };
    let stop = run_worker(core_on(backend), 5);
    let mut parked = None;
    for _ in 0..200 {
        let t = memory.load(&task.id).await.unwrap().unwrap();
        if t.status == Status::InputRequired {
            parked = Some(t);
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let parked = parked.expect("the handler parked on its input");
    assert_eq!(parked.attempt, 1);
    let answered = apply(
        &parked,
        &Event::ProvideInput([("go".to_string(), json!({ "action": "accept" }))].into()),
        parked.updated_at_ms + 1,
    )
    .unwrap()
    .unwrap();
    assert!(matches!(memory.transition(&answered, Writer::Client).await.unwrap(), Cas::Applied(_)));
    let done = wait_terminal(&memory, &task.id).await;
    stop.cancel();
    assert_eq!(done.status, Status::Completed, "{done:?}");
    assert_eq!(done.attempt, 1, "resumed in the first run, not re-run after a lapsed lease");
}

/// A worker asked to drain (through the registry, as the admin API asks)
/// finishes the task it runs, claims nothing new, and keeps running until
/// shutdown; its heartbeats count what it ran and say it drains.
#[tokio::test]
async fn a_drained_worker_finishes_what_it_holds_and_claims_nothing_new() {
    use presa_server::Node;
    use presa_store::AdminStore;
    let store = Arc::new(MemoryStore::new());
    let node = Node::new("w-drain", "worker", 4);
    let stop = CancellationToken::new();
    let config = WorkerConfig { claim_wait: Duration::from_millis(50), ..WorkerConfig::default() };
    let worker = Worker::new(core(store.clone()), config).with_node(node.clone());
    let running = tokio::spawn(worker.run(stop.clone()));
    let every = Duration::from_millis(100);
    tokio::spawn(node.clone().heartbeat_every(every, core(store.clone()), stop.clone()));

    let chatty = create(&store, "chatty").await;
    for _ in 0..200 {
        if store.load(&chatty.id).await.unwrap().unwrap().attempt == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Registered by its first heartbeat, then drained as the admin API does.
    for _ in 0..200 {
        if store.drain("w-drain").await.unwrap().is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The next heartbeat tells it, while the chatty task still runs (2 s).
    tokio::time::timeout(Duration::from_secs(1), node.draining().cancelled()).await.expect("told to drain");
    assert_eq!(store.load(&chatty.id).await.unwrap().unwrap().status, Status::Working, "drained mid-run");
    let quick = create(&store, "quick").await;
    assert_eq!(wait_terminal(&store, &chatty.id).await.status, Status::Completed, "what it held finishes");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let untouched = store.load(&quick.id).await.unwrap().unwrap();
    assert_eq!((untouched.status, untouched.attempt), (Status::Working, 0), "nothing new is claimed");
    assert!(!running.is_finished(), "a drained worker waits for shutdown");
    let report = node.report(Vec::new());
    assert_eq!((report.draining, report.completed, report.slots_in_use), (true, 1, 0));
    stop.cancel();
    tokio::time::timeout(Duration::from_secs(5), running).await.expect("stops on shutdown").unwrap();
}

/// A tool that fails transiently twice completes on its third try; each
/// failed try waited within its backoff's bounds (200 ms, then up to
/// 300 ms) and held no worker meanwhile, and the task keeps its tries.
#[tokio::test]
async fn a_transient_failure_is_tried_again_after_its_backoff() {
    let store = Arc::new(MemoryStore::new());
    let stop = run_worker(core(store.clone()), 5);
    let task = create_with(&store, "flaky", json!({ "fail": 2 })).await;
    let done = wait_terminal(&store, &task.id).await;
    stop.cancel();
    assert_eq!(done.status, Status::Completed, "{done:?}");
    assert_eq!(done.result.as_ref().unwrap()["content"][0]["text"], "succeeded on try 3");
    let log = &done.retries.log;
    assert_eq!(done.retries.failed, 2);
    assert_eq!(log.iter().map(|f| f.number).collect::<Vec<_>>(), [1, 2]);
    assert!(log.iter().all(|f| f.reason.starts_with("simulated outage")), "{log:?}");
    assert!(log[0].delay_ms <= 200 && log[1].delay_ms <= 300, "delays within their caps: {log:?}");
    // The second try ran no earlier than the first's delay said.
    assert!(log[1].at_ms >= log[0].at_ms + log[0].delay_ms, "{log:?}");
    assert!(done.updated_at_ms >= log[1].at_ms + log[1].delay_ms, "{log:?}");
}

/// A permanent error fails the task at once: no try again, no dead letter.
#[tokio::test]
async fn a_permanent_error_fails_at_once() {
    let store = Arc::new(MemoryStore::new());
    let stop = run_worker(core(store.clone()), 5);
    let task = create_with(&store, "flaky", json!({ "permanent": true })).await;
    let done = wait_terminal(&store, &task.id).await;
    stop.cancel();
    assert_eq!(done.status, Status::Failed);
    assert_eq!(done.error.as_ref().unwrap()["code"], -32602);
    assert_eq!(done.retries.failed, 0);
    let letters = store.dead_letters(&DeadLetterFilter::tenant("local"), None, 10).await.unwrap();
    assert!(letters.letters.is_empty(), "{letters:?}");
}

/// A tool whose every try fails transiently fails after its policy's
/// attempts, saying so, with a dead letter an operator can replay.
#[tokio::test]
async fn exhausted_tries_fail_the_task_with_a_dead_letter() {
    let store = Arc::new(MemoryStore::new());
    let stop = run_worker(core(store.clone()), 5);
    let task = create_with(&store, "flaky", json!({ "fail": 99 })).await;
    let done = wait_terminal(&store, &task.id).await;
    stop.cancel();
    assert_eq!(done.status, Status::Failed);
    let error = done.error.as_ref().unwrap();
    assert_eq!(error["data"]["attempts"], 3, "{error}");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("attempt 3 of 3") && message.contains("simulated outage 3"), "{message}");
    assert_eq!(done.retries.failed, 2, "two tries put off, the third ended it");
    let letters = store.dead_letters(&DeadLetterFilter::tenant("local"), None, 10).await.unwrap();
    assert_eq!(letters.letters.len(), 1, "{letters:?}");
    assert!(letters.letters[0].reason.contains("attempt 3 of 3 failed"), "{:?}", letters.letters[0]);
}
