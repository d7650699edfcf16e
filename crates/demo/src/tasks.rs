//! Tasks extension (SEP-2663) fixture tools, and `deploy_release`, a
//! realistic long-running example: several steps with status messages and a
//! confirmation asked midway.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use presa_server::{CatalogBuilder, Elicited, InputRequest, TaskPolicy, Tool, ToolContext, ToolError, ToolOutput};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::mrtr::{accepted_field, ask_name, form};

/// Register the tasks tools.
pub fn register(b: CatalogBuilder) -> CatalogBuilder {
    b.tool(Tool::new(
        "greet",
        "Greets someone at once (never a task).",
        json!({ "type": "object", "properties": { "name": { "type": "string" } } }),
        |_ctx, args: Value| async move {
            Ok(ToolOutput::text(format!("Hello, {}!", args["name"].as_str().unwrap_or("World"))))
        },
    ))
    .tool(
        Tool::new(
            "slow_compute",
            "Sleeps for `seconds`, then completes. A task when the client supports tasks; cancellable.",
            json!({ "type": "object", "properties": {
                "seconds": { "type": "number", "minimum": 0, "maximum": 3600 },
                "label": { "type": "string" } } }),
            |ctx: ToolContext, args: Value| async move {
                let seconds = args["seconds"].as_f64().unwrap_or(0.0);
                let label = args["label"].as_str().unwrap_or("job").to_string();
                if seconds > 0.0 {
                    ctx.set_status(format!("Computing {label} for {seconds} s")).await?;
                    ctx.sleep(Duration::from_secs_f64(seconds)).await?;
                }
                Ok(ToolOutput::Complete(json!({
                    "content": [{ "type": "text", "text": format!("Completed {label}") }], "isError": false })))
            },
        )
        .policy(TaskPolicy::Optional),
    )
    .tool(
        Tool::new(
            "failing_job",
            "A task whose tool reports an error (isError: true).",
            json!({ "type": "object" }),
            |_ctx, _args| async { Ok(ToolOutput::error("The task job failed.")) },
        )
        .policy(TaskPolicy::Required),
    )
    .tool(
        Tool::new(
            "protocol_error_job",
            "A task whose handler fails, so the task ends failed with -32603.",
            json!({ "type": "object" }),
            |_ctx, _args| async { Err(ToolError::internal("protocol_error_job always fails")) },
        )
        .policy(TaskPolicy::Required),
    )
    .tool(
        Tool::new(
            "confirm_delete",
            "Asks the user to confirm deleting a file, then reports the answer.",
            json!({ "type": "object", "properties": { "filename": { "type": "string" } } }),
            |ctx: ToolContext, args: Value| async move {
                let filename = args["filename"].as_str().unwrap_or("file").to_string();
                let schema = form(json!({ "confirm": { "type": "boolean" } }), &["confirm"]);
                let request = InputRequest::elicitation(format!("Delete {filename}?"), schema);
                let answer = ctx.input("confirm-delete", request).await?;
                let confirmed = answer["action"] == "accept" && answer["content"]["confirm"] == true;
                Ok(ToolOutput::text(format!("Delete confirmed: {confirmed}")))
            },
        )
        .policy(TaskPolicy::Optional),
    )
    .tool(
        Tool::new(
            "multi_input",
            "Asks two questions at once; completes when both are answered.",
            json!({ "type": "object" }),
            |ctx: ToolContext, _args| async move {
                let props = json!({ "name": { "type": "string" }, "confirm": { "type": "boolean" } });
                let answers = ctx
                    .inputs(BTreeMap::from([
                        (
                            "first-input".to_string(),
                            InputRequest::elicitation("First input", form(props.clone(), &[])).into(),
                        ),
                        (
                            "second-input".to_string(),
                            InputRequest::elicitation("Second input", form(props, &[])).into(),
                        ),
                    ]))
                    .await?;
                let name = |k: &str| {
                    let n = accepted_field(&answers[k], "name");
                    if n.is_empty() { "confirmed".to_string() } else { n }
                };
                Ok(ToolOutput::text(format!("Inputs received: {}, {}", name("first-input"), name("second-input"))))
            },
        )
        .policy(TaskPolicy::Optional),
    )
    .tool(
        Tool::new(
            "test_tool_with_task",
            "Asks for a name synchronously (MRTR), then greets them from a task.",
            json!({ "type": "object" }),
            |ctx: ToolContext, _args| async move {
                let answer = ctx.input("user_name", ask_name("What is your name?")).await?;
                Ok(ToolOutput::text(format!("Hello, {}", accepted_field(&answer, "name"))))
            },
        )
        .policy(TaskPolicy::Dynamic(Arc::new(|call| match call.input_responses {
            Some(r) if r.contains_key("user_name") => TaskPolicy::Required,
            _ => TaskPolicy::Sync,
        }))),
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

async fn deploy_release(ctx: ToolContext, args: Deploy) -> Result<ToolOutput, ToolError> {
    let Deploy { version, step_seconds } = args;
    let step = Duration::from_secs_f64(step_seconds);
    for (i, name) in ["build", "test", "stage"].iter().enumerate() {
        ctx.set_status(format!("Step {}/4: {name} {version}", i + 1)).await?;
        ctx.sleep(step).await?;
    }
    ctx.set_status(format!("Waiting for approval to release {version} to production")).await?;
    let question = format!("Release {version} to production?");
    match ctx.elicit::<Approval>(&format!("approve-{version}"), question).await? {
        Elicited::Accept(Approval { approve: true, note }) => {
            if let Some(note) = note {
                tracing::info!(%version, %note, "release approved with a note");
            }
        }
        _ => return Ok(ToolOutput::text(format!("Release {version} stopped before production: not approved"))),
    }
    ctx.set_status(format!("Step 4/4: production {version}")).await?;
    ctx.sleep(step).await?;
    // Who asked, as the worker sees it: the task's creator travels with its work.
    let caller = ctx.caller();
    let requested_by = json!({ "tenant": caller.tenant(), "subject": caller.subject() });
    Ok(ToolOutput::Complete(json!({
        "content": [{ "type": "text", "text": format!("Released {version} to production") }],
        "structuredContent": {
            "version": version, "environment": "production", "approved": true, "requestedBy": requested_by } })))
}
