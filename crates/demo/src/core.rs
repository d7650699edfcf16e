//! Core fixture tools: content types, errors, progress, logging,
//! list-change triggers, `x-mcp-header` parameters and a JSON Schema
//! 2020-12 showcase.

use std::time::Duration;

use presa_protocol::{codes, jsonrpc::ErrorObject, meta::LogLevel};
use presa_server::{CatalogBuilder, ListChanged, NoArgs, Tool, ToolContext, ToolError, ToolOutput};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::{PNG, WAV};

/// Register the core tools.
pub fn register(b: CatalogBuilder) -> CatalogBuilder {
    b.tool(Tool::typed("test_simple_text", "Returns a simple text response.", |_ctx, _: NoArgs| async {
        "This is a simple text response for testing."
    }))
    .tool(Tool::typed("test_image_content", "Returns a PNG image.", |_ctx, _: NoArgs| async {
        ToolOutput::content(json!([{ "type": "image", "data": PNG, "mimeType": "image/png" }]))
    }))
    .tool(Tool::typed("test_audio_content", "Returns a WAV audio clip.", |_ctx, _: NoArgs| async {
        ToolOutput::content(json!([{ "type": "audio", "data": WAV, "mimeType": "audio/wav" }]))
    }))
    .tool(Tool::typed("test_embedded_resource", "Returns an embedded text resource.", |_ctx, _: NoArgs| async {
        ToolOutput::content(json!([{ "type": "resource", "resource": {
            "uri": "test://embedded-resource", "mimeType": "text/plain", "text": "This is an embedded resource content." } }]))
    }))
    .tool(Tool::typed("test_multiple_content_types", "Returns text, an image and a resource.", |_ctx, _: NoArgs| async {
        ToolOutput::content(json!([
            { "type": "text", "text": "Multiple content types test:" },
            { "type": "image", "data": PNG, "mimeType": "image/png" },
            { "type": "resource", "resource": { "uri": "test://mixed-content-resource",
                "mimeType": "application/json", "text": "{\"test\":\"data\",\"value\":123}" } },
        ]))
    }))
    .tool(Tool::typed("test_error_handling", "Always returns a tool error (isError: true).", |_ctx, _: NoArgs| async {
        ToolOutput::error("This tool intentionally returns an error for testing")
    }))
    .tool(Tool::typed(
        "test_tool_with_progress",
        "Reports progress 0, 50 and 100 (send a progressToken), then returns.",
        with_progress,
    ))
    .tool(Tool::typed(
        "test_missing_capability",
        "Needs the client's sampling capability; answers -32021 without it.",
        |ctx: ToolContext, _: NoArgs| async move {
            if !ctx.has_capability("sampling") {
                return Err(ToolError::Rpc(ErrorObject::with_data(
                    codes::MISSING_REQUIRED_CLIENT_CAPABILITY,
                    "Missing required client capability",
                    json!({ "requiredCapabilities": { "sampling": {} } }),
                )));
            }
            Ok("Success")
        },
    ))
    .tool(Tool::typed(
        "test_streaming_elicitation",
        "Asks for the user's name through MRTR (never a request on the stream).",
        streaming_elicitation,
    ))
    .tool(Tool::typed(
        "test_logging_tool",
        "Logs at info and warning (only when the request's _meta asks for a logLevel).",
        |ctx: ToolContext, _: NoArgs| async move {
            ctx.log(LogLevel::Info, "demo", json!("logging tool started"));
            ctx.log(LogLevel::Warning, "demo", json!("a warning from the logging tool"));
            "Logging complete"
        },
    ))
    .tool(Tool::typed(
        "test_trigger_tool_change",
        "Announces notifications/tools/list_changed to every listen stream (the set does not really change).",
        |ctx, _: NoArgs| announce(ctx, ListChanged::Tools),
    ))
    .tool(Tool::typed(
        "test_trigger_prompt_change",
        "Announces notifications/prompts/list_changed to every listen stream.",
        |ctx, _: NoArgs| announce(ctx, ListChanged::Prompts),
    ))
    .tool(Tool::typed(
        "test_header_param",
        "Echoes its region, which clients mirror into the Mcp-Param-Region header.",
        |_ctx, args: Region| async move { format!("Region: {}", args.region) },
    ))
    // Tool::new: the runner compares this inputSchema with its fixture ($schema, $anchor, if/then/else).
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

/// The arguments of `test_header_param`: the property clients mirror into a header.
#[derive(Debug, Deserialize, JsonSchema)]
struct Region {
    /// Region
    #[schemars(extend("x-mcp-header" = "Region"))]
    region: String,
}

async fn with_progress(ctx: ToolContext, _: NoArgs) -> Result<&'static str, ToolError> {
    for p in [0.0, 50.0, 100.0] {
        ctx.progress(p, Some(100.0), Some(&format!("{p}% done")));
        ctx.sleep(Duration::from_millis(50)).await?;
    }
    Ok("Progress complete")
}

async fn streaming_elicitation(ctx: ToolContext, _: NoArgs) -> Result<String, ToolError> {
    let answer = ctx.input("user_name", crate::mrtr::ask_name("What is your name?")).await?;
    Ok(format!("Hello, {}!", crate::mrtr::accepted_field(&answer, "name")))
}

/// Tell every listen stream that asked for it that `list` changed.
async fn announce(ctx: ToolContext, list: ListChanged) -> Result<&'static str, ToolError> {
    ctx.notify_list_changed(list).await?;
    Ok("Mutation triggered")
}
