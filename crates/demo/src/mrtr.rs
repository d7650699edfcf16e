//! Multi round-trip (SEP-2322) fixture tools: each answers an
//! `InputRequiredResult` first and completes once the client retries with
//! `inputResponses` (and the signed `requestState`, when one was sent).

use std::collections::BTreeMap;

use presa_server::{CatalogBuilder, InputRequest, NoArgs, PromptOutput, Tool, ToolContext, ToolError, ToolOutput};
use serde_json::{Value, json};

/// An elicitation asking for one string property `name`.
pub fn ask_name(message: &str) -> InputRequest {
    InputRequest::elicitation(message, form(json!({ "name": { "type": "string" } }), &["name"]))
}

/// A flat form schema (`requestedSchema`) with these properties and required keys.
pub fn form(properties: Value, required: &[&str]) -> Value {
    json!({ "type": "object", "properties": properties, "required": required })
}

/// `content.<field>` of an accepted ElicitResult, as text (empty when absent).
pub fn accepted_field(answer: &Value, field: &str) -> String {
    match &answer["content"][field] {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn ask(requests: &[(&str, InputRequest)], state: Option<Value>) -> Result<ToolOutput, ToolError> {
    let requests: BTreeMap<String, Value> =
        requests.iter().map(|(k, v)| (k.to_string(), v.clone().into_value())).collect();
    Ok(ToolOutput::InputRequired { requests, state })
}

/// Ask for an `ok` confirmation, remembering the step in `requestState`.
fn ask_confirmation() -> Result<ToolOutput, ToolError> {
    ask(
        &[(
            "confirm",
            InputRequest::elicitation("Please confirm", form(json!({ "ok": { "type": "boolean" } }), &["ok"])),
        )],
        Some(json!({ "step": "confirm" })),
    )
}

fn answer<'a>(ctx: &'a ToolContext, key: &str) -> Option<&'a Value> {
    ctx.input_responses().and_then(|r| r.get(key))
}

/// Register the MRTR tools and prompt.
pub fn register(b: CatalogBuilder) -> CatalogBuilder {
    b.tool(Tool::typed(
        "test_input_required_result_elicitation",
        "Asks for the user's name (elicitation), then greets them.",
        |ctx: ToolContext, _: NoArgs| async move {
            match answer(&ctx, "user_name") {
                Some(a) => Ok(ToolOutput::text(format!("Hello, {}!", accepted_field(a, "name")))),
                None => ask(&[("user_name", ask_name("What is your name?"))], None),
            }
        },
    ))
    .tool(Tool::typed(
        "test_input_required_result_sampling",
        "Asks the client's model a question (sampling), then reports the answer.",
        |ctx: ToolContext, _: NoArgs| async move {
            match answer(&ctx, "capital_question") {
                Some(a) => {
                    Ok(ToolOutput::text(format!("Sampling result: {}", a["content"]["text"].as_str().unwrap_or(""))))
                }
                None => {
                    ask(&[("capital_question", InputRequest::sampling("What is the capital of France?", 100))], None)
                }
            }
        },
    ))
    .tool(Tool::typed(
        "test_input_required_result_list_roots",
        "Asks for the client's roots, then counts them.",
        |ctx: ToolContext, _: NoArgs| async move {
            match answer(&ctx, "client_roots") {
                Some(a) => Ok(ToolOutput::text(format!("Found {} root(s)", a["roots"].as_array().map_or(0, Vec::len)))),
                None => ask(&[("client_roots", InputRequest::roots())], None),
            }
        },
    ))
    .tool(Tool::typed(
        "test_input_required_result_request_state",
        "Asks for confirmation and carries a signed requestState across the round trip.",
        |ctx: ToolContext, _: NoArgs| async move {
            match (ctx.request_state(), answer(&ctx, "confirm")) {
                (Some(state), Some(a)) if state["step"] == "confirm" => {
                    let ok = a["content"]["ok"] == true;
                    Ok(ToolOutput::text(format!("state-ok: confirmed={ok}")))
                }
                _ => ask_confirmation(),
            }
        },
    ))
    .tool(Tool::typed(
        "test_input_required_result_multiple_inputs",
        "Asks for a name (elicitation), a greeting (sampling) and the roots at once.",
        |ctx: ToolContext, _: NoArgs| async move {
            let (name, greeting, roots) =
                (answer(&ctx, "user_name"), answer(&ctx, "greeting"), answer(&ctx, "client_roots"));
            match (ctx.request_state(), name, greeting, roots) {
                (Some(_), Some(n), Some(g), Some(r)) => Ok(ToolOutput::text(format!(
                    "Name: {}; Greeting: {}; Roots: {}",
                    accepted_field(n, "name"),
                    g["content"]["text"].as_str().unwrap_or(""),
                    r["roots"].as_array().map_or(0, Vec::len)
                ))),
                _ => ask(
                    &[
                        ("user_name", ask_name("What is your name?")),
                        ("greeting", InputRequest::sampling("Generate a greeting", 50)),
                        ("client_roots", InputRequest::roots()),
                    ],
                    Some(json!({ "step": "all" })),
                ),
            }
        },
    ))
    .tool(Tool::typed(
        "test_input_required_result_multi_round",
        "Two rounds: asks for a name, then a favourite colour, each with its own requestState.",
        |ctx: ToolContext, _: NoArgs| async move {
            let state = ctx.request_state().cloned().unwrap_or(Value::Null);
            match (state["step"].as_str(), answer(&ctx, "step1"), answer(&ctx, "step2")) {
                (Some("step2"), _, Some(color)) => Ok(ToolOutput::text(format!(
                    "Multi-round complete for {} who likes {}",
                    state["name"].as_str().unwrap_or("someone"),
                    accepted_field(color, "color")
                ))),
                (Some("step1"), Some(name), _) => ask(
                    &[(
                        "step2",
                        InputRequest::elicitation(
                            "Step 2: What is your favorite color?",
                            form(json!({ "color": { "type": "string" } }), &["color"]),
                        ),
                    )],
                    Some(json!({ "step": "step2", "name": accepted_field(name, "name") })),
                ),
                _ => ask(&[("step1", ask_name("Step 1: What is your name?"))], Some(json!({ "step": "step1" }))),
            }
        },
    ))
    .tool(Tool::typed(
        "test_input_required_result_tampered_state",
        "Carries an integrity-protected requestState; a modified one is rejected.",
        |ctx: ToolContext, _: NoArgs| async move {
            match (ctx.request_state(), answer(&ctx, "confirm")) {
                (Some(_), Some(_)) => Ok(ToolOutput::text("State verified")),
                _ => ask_confirmation(),
            }
        },
    ))
    .tool(Tool::typed(
        "test_input_required_result_capabilities",
        "Asks only for what the client declared (elicitation, sampling, roots).",
        |ctx: ToolContext, _: NoArgs| async move {
            if let Some(r) = ctx.input_responses() {
                let keys: Vec<&String> = r.keys().collect();
                return Ok(ToolOutput::text(format!("capabilities-ok: received {keys:?}")));
            }
            let mut requests = Vec::new();
            if ctx.has_capability("elicitation") {
                requests.push(("user_name", ask_name("What is your name?")));
            }
            if ctx.has_capability("sampling") {
                requests.push(("greeting", InputRequest::sampling("Generate a greeting", 50)));
            }
            if ctx.has_capability("roots") {
                requests.push(("client_roots", InputRequest::roots()));
            }
            if requests.is_empty() {
                return Ok(ToolOutput::text("capabilities-ok: the client declared nothing to ask for"));
            }
            ask(&requests, None)
        },
    ))
}

/// The MRTR prompt (registered with the other prompts, see [`crate::content`]).
pub async fn context_prompt(ctx: ToolContext, _args: Value) -> Result<PromptOutput, ToolError> {
    Ok(match answer(&ctx, "user_context") {
        Some(a) => PromptOutput::text(format!("Prompt with context: {}", accepted_field(a, "context"))),
        None => {
            let question = InputRequest::elicitation(
                "What context should the prompt use?",
                form(json!({ "context": { "type": "string" } }), &["context"]),
            );
            PromptOutput::input_required(BTreeMap::from([("user_context".to_string(), question.into_value())]), None)
        }
    })
}
