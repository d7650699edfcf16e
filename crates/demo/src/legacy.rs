//! Fixture tools of the 2025-11-25 server suite: logging during a call, and
//! sampling and elicitation asked of the client mid-call. Written once with
//! [`ToolContext::input`]: a 2026-07-28 client answers an MRTR
//! `InputRequiredResult`, a 2025-11-25 client a request on the call's stream.

use std::time::Duration;

use presa_protocol::meta::LogLevel;
use presa_server::{CatalogBuilder, InputRequest, NoArgs, Tool, ToolContext, ToolError};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::mrtr::form;

/// The arguments of `test_sampling`.
#[derive(Debug, Deserialize, JsonSchema)]
struct Sampling {
    /// The prompt to send to the LLM
    prompt: String,
}

/// The arguments of `test_elicitation`.
#[derive(Debug, Deserialize, JsonSchema)]
struct Elicitation {
    /// The message to show the user
    message: String,
}

/// What the user answered, as the everything-server prints it.
fn elicited(prefix: &str, answer: &Value) -> String {
    let action = answer["action"].as_str().unwrap_or("cancel");
    let content = answer.get("content").cloned().unwrap_or_else(|| json!({}));
    format!("{prefix}: action={action}, content={content}")
}

/// SEP-1034: a default for every primitive type.
fn defaults_form() -> Value {
    form(
        json!({
            "name": { "type": "string", "description": "User name", "default": "John Doe" },
            "age": { "type": "integer", "description": "User age", "default": 30 },
            "score": { "type": "number", "description": "User score", "default": 95.5 },
            "status": { "type": "string", "description": "User status",
                "enum": ["active", "inactive", "pending"], "default": "active" },
            "verified": { "type": "boolean", "description": "Verification status", "default": true }
        }),
        &[],
    )
}

/// SEP-1330: the five enum shapes.
fn enums_form() -> Value {
    let titled = |titles: [&str; 3]| -> Value {
        json!([
            { "const": "value1", "title": titles[0] },
            { "const": "value2", "title": titles[1] },
            { "const": "value3", "title": titles[2] }
        ])
    };
    form(
        json!({
            "untitledSingle": { "type": "string", "description": "Select one option",
                "enum": ["option1", "option2", "option3"] },
            "titledSingle": { "type": "string", "description": "Select one option with titles",
                "oneOf": titled(["First Option", "Second Option", "Third Option"]) },
            "legacyEnum": { "type": "string", "description": "Select one option (legacy)",
                "enum": ["opt1", "opt2", "opt3"], "enumNames": ["Option One", "Option Two", "Option Three"] },
            "untitledMulti": { "type": "array", "description": "Select multiple options", "minItems": 1,
                "maxItems": 3, "items": { "type": "string", "enum": ["option1", "option2", "option3"] } },
            "titledMulti": { "type": "array", "description": "Select multiple options with titles",
                "minItems": 1, "maxItems": 3,
                "items": { "anyOf": titled(["First Choice", "Second Choice", "Third Choice"]) } }
        }),
        &[],
    )
}

/// Register the 2025-11-25 fixture tools (after every other tool, so the
/// 2026-07-28 listing keeps its order).
pub fn register(b: CatalogBuilder) -> CatalogBuilder {
    b.tool(Tool::typed(
        "test_tool_with_logging",
        "Logs three info messages about 50 ms apart, then returns.",
        with_logging,
    ))
    .tool(Tool::typed("test_sampling", "Asks the client's LLM (sampling/createMessage) to answer a prompt.", sampling))
    .tool(Tool::typed(
        "test_elicitation",
        "Asks the user (elicitation/create) for a username and an email address.",
        elicitation,
    ))
    .tool(form_tool(
        "test_elicitation_sep1034_defaults",
        "Asks the user for a form whose fields all have defaults (SEP-1034).",
        ("defaults", "Please review and update the form fields with defaults", defaults_form),
    ))
    .tool(form_tool(
        "test_elicitation_sep1330_enums",
        "Asks the user for a form with the five enum shapes (SEP-1330).",
        ("enums", "Please select options from the enum fields", enums_form),
    ))
}

async fn with_logging(ctx: ToolContext, _: NoArgs) -> Result<&'static str, ToolError> {
    for (i, message) in
        ["Tool execution started", "Tool processing data", "Tool execution completed"].into_iter().enumerate()
    {
        if i > 0 {
            ctx.sleep(Duration::from_millis(50)).await?;
        }
        ctx.log(LogLevel::Info, "demo", json!(message));
    }
    Ok("Tool with logging executed successfully")
}

async fn sampling(ctx: ToolContext, args: Sampling) -> Result<String, ToolError> {
    let answer = ctx.input("sampling", InputRequest::sampling(args.prompt, 100)).await?;
    let text = answer["content"]["text"].as_str().unwrap_or("No response");
    Ok(format!("LLM response: {text}"))
}

async fn elicitation(ctx: ToolContext, args: Elicitation) -> Result<String, ToolError> {
    let schema = form(
        json!({
            "username": { "type": "string", "description": "User's response" },
            "email": { "type": "string", "description": "User's email address" }
        }),
        &["username", "email"],
    );
    let answer = ctx.input("user_info", InputRequest::elicitation(args.message, schema)).await?;
    Ok(elicited("User response", &answer))
}

/// A tool without arguments that asks the user for one form (`(key,
/// message, schema)`) and reports the answer.
fn form_tool(
    name: &str,
    description: &str,
    (key, message, schema): (&'static str, &'static str, fn() -> Value),
) -> Tool {
    Tool::typed(name, description, move |ctx, _: NoArgs| ask_form(ctx, key, message, schema()))
}

async fn ask_form(
    ctx: ToolContext,
    key: &'static str,
    message: &'static str,
    schema: Value,
) -> Result<String, ToolError> {
    let answer = ctx.input(key, InputRequest::elicitation(message, schema)).await?;
    Ok(elicited("Elicitation completed", &answer))
}
