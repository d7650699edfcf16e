//! Core fixture tools: content types, errors, progress, logging,
//! list-change triggers, `x-mcp-header` parameters and a JSON Schema
//! 2020-12 showcase.

use std::time::Duration;

use presa_protocol::{codes, jsonrpc::ErrorObject, meta::LogLevel};
use presa_server::{CatalogBuilder, Tool, ToolError, ToolOutput};
use serde_json::{Value, json};

use crate::{PNG, WAV, empty};

/// Register the core tools.
pub fn register(b: CatalogBuilder) -> CatalogBuilder {
    b.tool(Tool::new("test_simple_text", "Returns a simple text response.", empty(), |_ctx, _args| async {
        Ok(ToolOutput::text("This is a simple text response for testing."))
    }))
    .tool(Tool::new("test_image_content", "Returns a PNG image.", empty(), |_ctx, _args| async {
        Ok(ToolOutput::content(json!([{ "type": "image", "data": PNG, "mimeType": "image/png" }])))
    }))
    .tool(Tool::new("test_audio_content", "Returns a WAV audio clip.", empty(), |_ctx, _args| async {
        Ok(ToolOutput::content(json!([{ "type": "audio", "data": WAV, "mimeType": "audio/wav" }])))
    }))
    .tool(Tool::new("test_embedded_resource", "Returns an embedded text resource.", empty(), |_ctx, _args| async {
        Ok(ToolOutput::content(json!([{ "type": "resource", "resource": {
            "uri": "test://embedded-resource", "mimeType": "text/plain", "text": "This is an embedded resource content." } }])))
    }))
    .tool(Tool::new("test_multiple_content_types", "Returns text, an image and a resource.", empty(), |_ctx, _args| async {
        Ok(ToolOutput::content(json!([
            { "type": "text", "text": "Multiple content types test:" },
            { "type": "image", "data": PNG, "mimeType": "image/png" },
            { "type": "resource", "resource": { "uri": "test://mixed-content-resource",
                "mimeType": "application/json", "text": "{\"test\":\"data\",\"value\":123}" } },
        ])))
    }))
    .tool(Tool::new("test_error_handling", "Always returns a tool error (isError: true).", empty(), |_ctx, _args| async {
        Ok(ToolOutput::error("This tool intentionally returns an error for testing"))
    }))
    .tool(Tool::new(
        "test_tool_with_progress",
        "Reports progress 0, 50 and 100 (send a progressToken), then returns.",
        empty(),
        |ctx: presa_server::ToolContext, _args| async move {
            for p in [0.0, 50.0, 100.0] {
                ctx.progress(p, Some(100.0), Some(&format!("{p}% done")));
                ctx.sleep(Duration::from_millis(50)).await?;
            }
            Ok(ToolOutput::text("Progress complete"))
        },
    ))
    .tool(Tool::new(
        "test_missing_capability",
        "Needs the client's sampling capability; answers -32021 without it.",
        empty(),
        |ctx: presa_server::ToolContext, _args| async move {
            if !ctx.has_capability("sampling") {
                return Err(ToolError::Rpc(ErrorObject::with_data(
                    codes::MISSING_REQUIRED_CLIENT_CAPABILITY,
                    "Missing required client capability",
                    json!({ "requiredCapabilities": { "sampling": {} } }),
                )));
            }
            Ok(ToolOutput::text("Success"))
        },
    ))
    .tool(Tool::new(
        "test_streaming_elicitation",
        "Asks for the user's name through MRTR (never a request on the stream).",
        empty(),
        |ctx: presa_server::ToolContext, _args| async move {
            let answer = ctx.input("user_name", crate::mrtr::ask_name("What is your name?")).await?;
            Ok(ToolOutput::text(format!("Hello, {}!", crate::mrtr::accepted_field(&answer, "name"))))
        },
    ))
    .tool(Tool::new(
        "test_logging_tool",
        "Logs at info and warning (only when the request's _meta asks for a logLevel).",
        empty(),
        |ctx: presa_server::ToolContext, _args| async move {
            ctx.log(LogLevel::Info, "demo", json!("logging tool started"));
            ctx.log(LogLevel::Warning, "demo", json!("a warning from the logging tool"));
            Ok(ToolOutput::text("Logging complete"))
        },
    ))
    .tool(Tool::new(
        "test_trigger_tool_change",
        "Announces notifications/tools/list_changed to every listen stream (the set does not really change).",
        empty(),
        |ctx: presa_server::ToolContext, _args| async move {
            ctx.notify_list_changed("tools").await?;
            Ok(ToolOutput::text("Mutation triggered"))
        },
    ))
    .tool(Tool::new(
        "test_trigger_prompt_change",
        "Announces notifications/prompts/list_changed to every listen stream.",
        empty(),
        |ctx: presa_server::ToolContext, _args| async move {
            ctx.notify_list_changed("prompts").await?;
            Ok(ToolOutput::text("Mutation triggered"))
        },
    ))
    .tool(Tool::new(
        "test_header_param",
        "Echoes its region, which clients mirror into the Mcp-Param-Region header.",
        json!({ "type": "object", "properties": {
            "region": { "type": "string", "description": "Region", "x-mcp-header": "Region" } },
            "required": ["region"] }),
        |_ctx, args: Value| async move { Ok(ToolOutput::text(format!("Region: {}", args["region"].as_str().unwrap_or_default()))) },
    ))
    .tool(Tool::new(
        "json_schema_2020_12_tool",
        "Showcases JSON Schema 2020-12 keywords ($defs, $anchor, allOf/anyOf, if/then/else).",
        json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "$defs": { "address": { "$anchor": "addressDef", "type": "object",
                "properties": { "street": { "type": "string" }, "city": { "type": "string" } } } },
            "properties": {
                "name": { "type": "string" },
                "address": { "$ref": "#/$defs/address" },
                "contactMethod": { "type": "string", "enum": ["phone", "email"] },
                "phone": { "type": "string" },
                "email": { "type": "string" }
            },
            "allOf": [{ "anyOf": [{ "required": ["phone"] }, { "required": ["email"] }] }],
            "if": { "properties": { "contactMethod": { "const": "phone" } }, "required": ["contactMethod"] },
            "then": { "required": ["phone"] },
            "else": { "required": ["email"] },
            "additionalProperties": false
        }),
        |_ctx, args: Value| async move { Ok(ToolOutput::text(format!("Contact recorded: {args}"))) },
    ))
}
