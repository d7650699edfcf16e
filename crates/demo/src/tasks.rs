//! Tasks extension (SEP-2663) fixture tools, and `deploy_release`, a
//! realistic long-running example: several steps with status messages and a
//! confirmation asked midway.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use presa_server::{
    CatalogBuilder, Elicited, InputRequest, Json, JsonWithText, NoArgs, RetryPolicy, TaskPolicy, Tool, ToolContext,
    ToolError, ToolOutput, ToolRate,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::mrtr::{accepted_field, ask_name, form};

/// Register the tasks tools.
pub fn register(b: CatalogBuilder) -> CatalogBuilder {
    b.tool(Tool::typed("greet", "Greets someone at once (never a task).", |_ctx, args: Greet| async move {
        format!("Hello, {}!", args.name)
    }))
    .tool(
        Tool::typed(
            "slow_compute",
            "Sleeps for `seconds`, then completes. A task when the client supports tasks; cancellable.",
            slow_compute,
        )
        .policy(TaskPolicy::Optional),
    )
    .tool(
        Tool::typed("failing_job", "A task whose tool reports an error (isError: true).", |_ctx, _: NoArgs| async {
            ToolOutput::error("The task job failed.")
        })
        .policy(TaskPolicy::Required),
    )
    .tool(
        Tool::typed(
            "protocol_error_job",
            "A task whose handler fails, so the task ends failed with -32603.",
            protocol_error_job,
        )
        .policy(TaskPolicy::Required),
    )
    .tool(
        Tool::typed(
            "confirm_delete",
            "Asks the user to confirm deleting a file, then reports the answer.",
            confirm_delete,
        )
        .policy(TaskPolicy::Optional),
    )
    .tool(
        Tool::typed("multi_input", "Asks two questions at once; completes when both are answered.", multi_input)
            .policy(TaskPolicy::Optional),
    )
    .tool(
        Tool::typed(
            "test_tool_with_task",
            "Asks for a name synchronously (MRTR), then greets them from a task.",
            greet_from_task,
        )
        .policy(TaskPolicy::Dynamic(Arc::new(|call| match call.input_responses {
            Some(r) if r.contains_key("user_name") => TaskPolicy::Required,
            _ => TaskPolicy::Sync,
        }))),
    )
    .tool(
        Tool::typed(
            "flaky_job",
            "Fails in a way worth trying again on its first `failures` tries (after running `seconds` \
             each), then succeeds: a task tried again after a backoff (up to 4 tries, 0.5 s to 2 s), or \
             after `retryAfterMs` when given.",
            flaky_job,
        )
        .policy(TaskPolicy::Required)
        .retry(FLAKY_RETRY),
    )
    .tool(
        Tool::typed(
            "metered_job",
            "Runs `seconds`, then says when it started (Unix ms); called at most 5 times a second (bursts \
             of 5) across the cluster: a task past it waits its turn, a plain call gets 429.",
            metered_job,
        )
        .policy(TaskPolicy::Optional)
        .rate(metered_rate()),
    )
    .tool(
        Tool::typed(
            "deploy_release",
            "Deploys a release in steps (build, test, stage), asks for confirmation before production, \
             and reports each step in the task's status message.",
            deploy_release,
        )
        .policy(TaskPolicy::Required)
        // Checked only when authentication is on (an anonymous caller is unrestricted).
        .scopes(["deploy"]),
    )
}

/// The arguments of `greet`.
#[derive(Debug, Deserialize, JsonSchema)]
struct Greet {
    #[serde(default = "world")]
    name: String,
}

fn world() -> String {
    "World".into()
}

async fn protocol_error_job(_ctx: ToolContext, _: NoArgs) -> Result<String, ToolError> {
    Err(ToolError::internal("protocol_error_job always fails"))
}

async fn greet_from_task(ctx: ToolContext, _: NoArgs) -> Result<String, ToolError> {
    let answer = ctx.input("user_name", ask_name("What is your name?")).await?;
    Ok(format!("Hello, {}", accepted_field(&answer, "name")))
}

/// The arguments of `slow_compute`.
#[derive(Debug, Deserialize, JsonSchema)]
struct Compute {
    #[serde(default)]
    #[schemars(range(min = 0, max = 3600))]
    seconds: f64,
    #[serde(default = "job")]
    label: String,
}

fn job() -> String {
    "job".into()
}

async fn slow_compute(ctx: ToolContext, args: Compute) -> Result<ToolOutput, ToolError> {
    let Compute { seconds, label } = args;
    if seconds > 0.0 {
        ctx.set_status(format!("Computing {label} for {seconds} s")).await?;
        ctx.sleep(Duration::from_secs_f64(seconds)).await?;
    }
    // A ToolOutput, not a String: the runner expects the explicit `isError: false`.
    Ok(ToolOutput::Complete(json!({
        "content": [{ "type": "text", "text": format!("Completed {label}") }], "isError": false })))
}

/// How `flaky_job` is tried again: 4 tries, backing off from 0.5 s up to 2 s.
pub const FLAKY_RETRY: RetryPolicy =
    RetryPolicy::attempts(4).backoff(Duration::from_millis(500), Duration::from_secs(2));

/// The arguments of `flaky_job`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct Flaky {
    /// How many tries fail before one succeeds.
    #[serde(default)]
    #[schemars(range(max = 100))]
    failures: u32,
    /// How long each try runs before it fails or succeeds.
    #[serde(default)]
    #[schemars(range(min = 0, max = 600))]
    seconds: f64,
    /// When given, each failed try asks to be tried again after this many ms
    /// (as an HTTP `Retry-After` would) instead of the backoff.
    #[serde(default)]
    #[schemars(range(max = 3_600_000))]
    retry_after_ms: Option<u64>,
}

async fn flaky_job(ctx: ToolContext, args: Flaky) -> Result<String, ToolError> {
    let number = ctx.try_number().unwrap_or(1);
    if args.seconds > 0.0 {
        ctx.set_status(format!("Try {number}: working for {} s", args.seconds)).await?;
        ctx.sleep(Duration::from_secs_f64(args.seconds)).await?;
    }
    if number <= args.failures {
        let reason = format!("simulated outage on try {number}");
        return Err(match args.retry_after_ms {
            Some(ms) => ctx.retry_after(Duration::from_millis(ms), reason),
            None => ToolError::transient(reason),
        });
    }
    Ok(format!("Succeeded on try {number}"))
}

/// How often `metered_job` may run: 5 a second, in bursts of 5.
pub fn metered_rate() -> ToolRate {
    ToolRate::per_second(5.0).burst(5)
}

/// The arguments of `metered_job`.
#[derive(Debug, Deserialize, JsonSchema)]
struct Metered {
    /// How long it runs.
    #[serde(default)]
    #[schemars(range(min = 0, max = 600))]
    seconds: f64,
}

async fn metered_job(ctx: ToolContext, args: Metered) -> Result<String, ToolError> {
    let started = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    if args.seconds > 0.0 {
        ctx.sleep(Duration::from_secs_f64(args.seconds)).await?;
    }
    Ok(format!("Started at {}", started.as_millis()))
}

/// The arguments of `confirm_delete`.
#[derive(Debug, Deserialize, JsonSchema)]
struct Delete {
    #[serde(default = "file")]
    filename: String,
}

fn file() -> String {
    "file".into()
}

async fn confirm_delete(ctx: ToolContext, args: Delete) -> Result<String, ToolError> {
    let schema = form(json!({ "confirm": { "type": "boolean" } }), &["confirm"]);
    let request = InputRequest::elicitation(format!("Delete {}?", args.filename), schema);
    let answer = ctx.input("confirm-delete", request).await?;
    let confirmed = answer["action"] == "accept" && answer["content"]["confirm"] == true;
    Ok(format!("Delete confirmed: {confirmed}"))
}

async fn multi_input(ctx: ToolContext, _: NoArgs) -> Result<String, ToolError> {
    let props = json!({ "name": { "type": "string" }, "confirm": { "type": "boolean" } });
    let answers = ctx
        .inputs(BTreeMap::from([
            ("first-input".to_string(), InputRequest::elicitation("First input", form(props.clone(), &[])).into()),
            ("second-input".to_string(), InputRequest::elicitation("Second input", form(props, &[])).into()),
        ]))
        .await?;
    let name = |k: &str| {
        let n = accepted_field(&answers[k], "name");
        if n.is_empty() { "confirmed".to_string() } else { n }
    };
    Ok(format!("Inputs received: {}, {}", name("first-input"), name("second-input")))
}

/// The arguments of `deploy_release`.
#[derive(Debug, Deserialize, JsonSchema)]
struct Deploy {
    /// The version to deploy
    version: String,
    /// Seconds each step takes
    #[serde(default = "one_second")]
    #[schemars(range(min = 0, max = 60))]
    step_seconds: f64,
}

fn one_second() -> f64 {
    1.0
}

/// The approval form `deploy_release` asks for before production.
#[derive(Debug, Deserialize, JsonSchema)]
struct Approval {
    approve: bool,
    note: Option<String>,
}

/// What `deploy_release` reports (`structuredContent`, and so its `outputSchema`).
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
struct Release {
    /// The version deployed.
    version: String,
    /// Where it got to: `production`, or `staging` when production was not approved.
    environment: String,
    /// Whether production was approved.
    approved: bool,
    /// Who asked for the release.
    requested_by: RequestedBy,
}

/// The caller that created the task, as the worker sees it.
#[derive(Debug, Serialize, JsonSchema)]
struct RequestedBy {
    tenant: String,
    subject: String,
}

async fn deploy_release(ctx: ToolContext, args: Deploy) -> Result<JsonWithText<Release>, ToolError> {
    let Deploy { version, step_seconds } = args;
    let step = Duration::from_secs_f64(step_seconds);
    for (i, name) in ["build", "test", "stage"].iter().enumerate() {
        ctx.set_status(format!("Step {}/4: {name} {version}", i + 1)).await?;
        ctx.sleep(step).await?;
    }
    ctx.set_status(format!("Waiting for approval to release {version} to production")).await?;
    let question = format!("Release {version} to production?");
    // Who asked, as the worker sees it: the task's creator travels with its work.
    let caller = ctx.caller();
    let requested_by = RequestedBy { tenant: caller.tenant().into(), subject: caller.subject().into() };
    match ctx.elicit::<Approval>(&format!("approve-{version}"), question).await? {
        Elicited::Accept(Approval { approve: true, note }) => {
            if let Some(note) = note {
                tracing::info!(%version, %note, "release approved with a note");
            }
        }
        _ => {
            let text = format!("Release {version} stopped before production: not approved");
            let release = Release { version, environment: "staging".into(), approved: false, requested_by };
            return Ok(Json(release).with_text(text));
        }
    }
    ctx.set_status(format!("Step 4/4: production {version}")).await?;
    ctx.sleep(step).await?;
    let text = format!("Released {version} to production");
    Ok(Json(Release { version, environment: "production".into(), approved: true, requested_by }).with_text(text))
}
