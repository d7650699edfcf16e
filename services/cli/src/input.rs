//! Answering input requests (MRTR `inputRequests` of a `tools/call`, or a
//! task's `inputRequests`): from `--answer KEY=JSON` first, else by prompting
//! on the terminal (`dialoguer`): an elicitation's `requestedSchema` becomes
//! prompts for strings, numbers, booleans and enums, with accept / decline /
//! cancel.

use std::io::IsTerminal;

use anyhow::Context;
use dialoguer::{Confirm, Input, Select, theme::ColorfulTheme};
use presa_client::schema::{FieldKind, FormField, describe_field, form_fields};
use serde_json::{Map, Value, json};

use crate::{live::Live, usage};

/// Parse `KEY=JSON` answers.
pub(crate) fn parse_answers(pairs: &[String]) -> anyhow::Result<Map<String, Value>> {
    let mut out = Map::new();
    for pair in pairs {
        let (key, raw) = pair.split_once('=').ok_or_else(|| {
            usage(format!(
                "answer {pair:?} is not KEY=JSON, e.g. approve-1.0='{{\"action\":\"accept\",\"content\":{{\"approve\":true}}}}'"
            ))
        })?;
        let value: Value =
            serde_json::from_str(raw).map_err(|e| usage(format!("the answer to {key} is not JSON ({e}): {raw}")))?;
        out.insert(key.to_string(), value);
    }
    Ok(out)
}

/// What to do with a question no `--answer` covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unanswered {
    /// Prompt on the terminal.
    Prompt,
    /// Stop with exit code 5 (`--no-input`, or no terminal for `call`).
    Exit,
    /// Keep waiting for someone to answer (`watch` without a terminal).
    Wait,
}

impl Unanswered {
    /// Prompt when stdin and stderr are terminals and prompts are allowed; else `otherwise`.
    pub(crate) fn choose(no_input: bool, otherwise: Unanswered) -> Unanswered {
        if no_input {
            Unanswered::Exit
        } else if std::io::stdin().is_terminal() && std::io::stderr().is_terminal() {
            Unanswered::Prompt
        } else {
            otherwise
        }
    }
}

/// The outcome of answering a set of questions.
#[derive(Debug)]
pub(crate) enum Answered {
    /// Answers by key (maybe only some of the questions, when the rest waits).
    Some(Map<String, Value>),
    /// These keys need a person (and we may not prompt).
    Missing(Vec<String>),
    /// The person pressed Ctrl-C at a prompt.
    Interrupted,
}

/// Answer `requests` (key → `{method, params}`), preset answers first.
pub(crate) fn answer(
    requests: &Map<String, Value>,
    preset: &Map<String, Value>,
    mode: Unanswered,
    live: &Live,
) -> anyhow::Result<Answered> {
    let mut answers = Map::new();
    let mut missing = Vec::new();
    for (key, request) in requests {
        if let Some(a) = preset.get(key) {
            answers.insert(key.clone(), a.clone());
            continue;
        }
        if mode != Unanswered::Prompt {
            missing.push(key.clone());
            continue;
        }
        match live.suspend(|| prompt(key, request)) {
            Ok(a) => {
                answers.insert(key.clone(), a);
            }
            Err(e) if is_interrupt(&e) => return Ok(Answered::Interrupted),
            Err(e) => return Err(e),
        }
    }
    if !missing.is_empty() && mode == Unanswered::Exit {
        return Ok(Answered::Missing(missing));
    }
    Ok(Answered::Some(answers))
}

fn is_interrupt(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::Interrupted)
            || c.downcast_ref::<dialoguer::Error>()
                .is_some_and(|dialoguer::Error::IO(io)| io.kind() == std::io::ErrorKind::Interrupted)
    })
}

/// The question of an input request, in words, with the fields it asks for.
pub(crate) fn describe(key: &str, request: &Value) -> String {
    let params = &request["params"];
    match request["method"].as_str() {
        Some("elicitation/create") => {
            let mut s = format!("{key}: {}", params["message"].as_str().unwrap_or("(no message)"));
            if let Some(url) = params["url"].as_str() {
                s.push_str(&format!("\n  open: {url}"));
            }
            for f in form_fields(&params["requestedSchema"]) {
                s.push_str(&format!("\n  - {}", describe_field(&f)));
            }
            s
        }
        Some(other) => format!("{key}: a {other} request: {params}"),
        None => format!("{key}: {request}"),
    }
}

/// An example `--answer` for a question, for the hint printed with exit code 5.
pub(crate) fn example_answer(key: &str, request: &Value) -> String {
    let fields = form_fields(&request["params"]["requestedSchema"]);
    let mut content = Map::new();
    for f in fields.iter().filter(|f| f.required) {
        let v = match &f.kind {
            FieldKind::Boolean => json!(true),
            FieldKind::Number | FieldKind::Integer => json!(0),
            FieldKind::Enum(values) => values.first().map(|(v, _)| v.clone()).unwrap_or(json!("")),
            FieldKind::String => json!("..."),
        };
        content.insert(f.name.clone(), v);
    }
    let answer = if request["method"] == "elicitation/create" {
        json!({ "action": "accept", "content": content })
    } else {
        json!({})
    };
    format!("{key}='{answer}'")
}

/// Ask the person on the terminal.
fn prompt(key: &str, request: &Value) -> anyhow::Result<Value> {
    let theme = ColorfulTheme::default();
    let params = &request["params"];
    let method = request["method"].as_str().unwrap_or_default();
    if method != "elicitation/create" {
        eprintln!("The server asks ({key}): a {method} request:\n{params:#}");
        let raw: String = Input::with_theme(&theme)
            .with_prompt("Answer as JSON")
            .validate_with(|s: &String| serde_json::from_str::<Value>(s).map(drop).map_err(|e| e.to_string()))
            .interact_text()?;
        return Ok(serde_json::from_str(&raw)?);
    }
    let message = params["message"].as_str().unwrap_or("The server asks for input");
    if let Some(url) = params["url"].as_str() {
        eprintln!("Open: {url}");
    }
    let choices = ["Answer", "Decline", "Cancel"];
    let choice =
        Select::with_theme(&theme).with_prompt(format!("{message} [{key}]")).items(choices).default(0).interact()?;
    match choice {
        1 => return Ok(json!({ "action": "decline" })),
        2 => return Ok(json!({ "action": "cancel" })),
        _ => {}
    }
    let mut content = Map::new();
    for field in form_fields(&params["requestedSchema"]) {
        if let Some(v) = prompt_field(&theme, &field)? {
            content.insert(field.name.clone(), v);
        }
    }
    Ok(json!({ "action": "accept", "content": content }))
}

fn field_prompt(field: &FormField) -> String {
    let mut p = field.label.clone();
    if let Some(d) = &field.description {
        p.push_str(&format!(" ({d})"));
    }
    if !field.required {
        p.push_str(" [optional]");
    }
    p
}

fn prompt_field(theme: &ColorfulTheme, field: &FormField) -> anyhow::Result<Option<Value>> {
    let label = field_prompt(field);
    Ok(match &field.kind {
        FieldKind::Boolean => {
            let mut c = Confirm::with_theme(theme).with_prompt(label);
            if let Some(d) = field.default.as_ref().and_then(Value::as_bool) {
                c = c.default(d);
            }
            Some(Value::Bool(c.interact().context("reading a yes/no answer")?))
        }
        FieldKind::Enum(values) => {
            let mut labels: Vec<String> = values.iter().map(|(_, l)| l.clone()).collect();
            if !field.required {
                labels.push("(no answer)".into());
            }
            let default = field.default.as_ref().and_then(|d| values.iter().position(|(v, _)| v == d)).unwrap_or(0);
            let i = Select::with_theme(theme).with_prompt(label).items(&labels).default(default).interact()?;
            values.get(i).map(|(v, _)| v.clone())
        }
        FieldKind::Number | FieldKind::Integer | FieldKind::String => {
            let kind = field.kind.clone();
            let required = field.required;
            let mut input = Input::<String>::with_theme(theme).with_prompt(label).allow_empty(!required);
            if let Some(d) = &field.default {
                input = input.default(d.as_str().map_or_else(|| d.to_string(), str::to_string));
            }
            let text = input
                .validate_with(move |s: &String| -> Result<(), String> {
                    if s.is_empty() {
                        return if required { Err("an answer is required".into()) } else { Ok(()) };
                    }
                    typed(&kind, s).map(drop)
                })
                .interact_text()?;
            if text.is_empty() { None } else { Some(typed(&field.kind, &text).map_err(anyhow::Error::msg)?) }
        }
    })
}

fn typed(kind: &FieldKind, s: &str) -> Result<Value, String> {
    match kind {
        FieldKind::Integer => s.trim().parse::<i64>().map(Value::from).map_err(|_| "an integer, please".into()),
        FieldKind::Number => presa_client::schema::typed_value(Some(&json!({ "type": "number" })), s)
            .map_err(|_| "a number, please".to_string()),
        _ => Ok(Value::String(s.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_parse_and_hints_are_usable() {
        let a = parse_answers(&[r#"approve-1.0={"action":"accept","content":{"approve":true}}"#.into()]).unwrap();
        assert_eq!(a["approve-1.0"]["content"]["approve"], true);
        assert!(parse_answers(&["k=notjson".into()]).is_err());
        assert!(parse_answers(&["nokey".into()]).is_err());
        let request = json!({ "method": "elicitation/create", "params": { "message": "Release 1.0 to production?",
            "requestedSchema": { "type": "object", "properties": { "approve": { "type": "boolean" },
            "note": { "type": "string" } }, "required": ["approve"] } } });
        assert_eq!(example_answer("k", &request), r#"k='{"action":"accept","content":{"approve":true}}'"#);
        let d = describe("k", &request);
        assert!(d.starts_with("k: Release 1.0 to production?") && d.contains("approve (boolean, required)"), "{d}");
    }
}
