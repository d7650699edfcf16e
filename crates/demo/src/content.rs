//! Resources, a resource template, prompts and completion of the demo catalog.

use presa_server::{CatalogBuilder, PromptOutput};
use serde_json::{Value, json};

use crate::PNG;

/// Register resources, templates, prompts and completion.
pub fn register(b: CatalogBuilder) -> CatalogBuilder {
    b.resource(
        json!({ "uri": "test://static-text", "name": "static-text", "description": "A static text resource",
                "mimeType": "text/plain" }),
        |uri, _| Ok(json!([{ "uri": uri, "mimeType": "text/plain", "text": "This is the content of the static text resource." }])),
    )
    .resource(
        json!({ "uri": "test://static-binary", "name": "static-binary", "description": "A static PNG image",
                "mimeType": "image/png" }),
        |uri, _| Ok(json!([{ "uri": uri, "mimeType": "image/png", "blob": PNG }])),
    )
    // The resource the conformance suite subscribes to (2025-11-25 `resources/subscribe`
    // accepts listed resources only).
    .resource(
        json!({ "uri": "test://watched-resource", "name": "watched-resource",
                "description": "A resource clients subscribe to for updates", "mimeType": "text/plain" }),
        |uri, _| Ok(json!([{ "uri": uri, "mimeType": "text/plain", "text": "Watched resource content." }])),
    )
    .template(
        json!({ "uriTemplate": "test://template/{id}/data", "name": "template-data",
                "description": "JSON data for an id", "mimeType": "application/json" }),
        |uri, vars| {
            let id = &vars["id"];
            let text = json!({ "id": id, "templateTest": true, "data": format!("Data for ID: {id}") }).to_string();
            Ok(json!([{ "uri": uri, "mimeType": "application/json", "text": text }]))
        },
    )
    .prompt(
        json!({ "name": "test_simple_prompt", "description": "A prompt without arguments" }),
        |_ctx, _args| async { Ok(PromptOutput::text("This is a simple prompt for testing.")) },
    )
    .prompt(
        json!({ "name": "test_prompt_with_arguments", "description": "A prompt with two required arguments",
                "arguments": [
                    { "name": "arg1", "description": "First argument", "required": true },
                    { "name": "arg2", "description": "Second argument", "required": true } ] }),
        |_ctx, args: Value| async move {
            Ok(PromptOutput::text(format!(
                "Prompt with arguments: arg1='{}', arg2='{}'",
                args["arg1"].as_str().unwrap_or_default(),
                args["arg2"].as_str().unwrap_or_default()
            )))
        },
    )
    .prompt(
        json!({ "name": "test_prompt_with_embedded_resource", "description": "A prompt embedding a resource",
                "arguments": [{ "name": "resourceUri", "description": "The resource URI", "required": true }] }),
        |_ctx, args: Value| async move {
            Ok(PromptOutput::messages(vec![
                json!({ "role": "user", "content": { "type": "resource", "resource": {
                    "uri": args["resourceUri"], "mimeType": "text/plain", "text": "Embedded resource content for testing." } } }),
                json!({ "role": "user", "content": { "type": "text", "text": "Please process the embedded resource above." } }),
            ]))
        },
    )
    .prompt(
        json!({ "name": "test_prompt_with_image", "description": "A prompt with an image" }),
        |_ctx, _args| async {
            Ok(PromptOutput::messages(vec![
                json!({ "role": "user", "content": { "type": "image", "data": PNG, "mimeType": "image/png" } }),
                json!({ "role": "user", "content": { "type": "text", "text": "Please analyze the image above." } }),
            ]))
        },
    )
    .prompt(
        json!({ "name": "test_input_required_result_prompt",
                "description": "Asks for context (MRTR) before producing its messages" }),
        crate::mrtr::context_prompt,
    )
    .completion(|r#ref, argument| {
        let prefix = argument["value"].as_str().unwrap_or_default();
        let candidates: &[&str] = match (r#ref["name"].as_str(), argument["name"].as_str()) {
            (Some("test_prompt_with_arguments"), Some("arg1" | "arg2")) => &["testValue1", "testValue2", "test-default"],
            _ => &[],
        };
        let values: Vec<&str> = candidates.iter().copied().filter(|c| c.starts_with(prefix)).collect();
        json!({ "values": values, "total": values.len(), "hasMore": false })
    })
}
