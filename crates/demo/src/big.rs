//! Big results, for artifacts (see docs/tasks.md, "Large results"):
//! `big_result` returns one big content block as a plain result (the worker
//! spills it into an artifact when it runs as a task), and `export_dataset`
//! writes a big artifact itself, streaming, through `ToolContext::artifact`.
//! Both produce deterministic bytes ([`pattern`]), so a test can check what
//! comes back.

use presa_server::{CatalogBuilder, TaskPolicy, Tool, ToolContext, ToolError, ToolOutput};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

/// The most bytes `big_result` returns.
pub const MAX_BIG_RESULT_BYTES: u64 = 64 * 1024 * 1024;

/// The most MiB `export_dataset` writes.
pub const MAX_EXPORT_MIB: u64 = 4096;

/// Register the tools.
pub fn register(b: CatalogBuilder) -> CatalogBuilder {
    b.tool(
        Tool::typed(
            "big_result",
            "Returns `bytes` of text (or of a PNG-typed image, or of JSON) in one result: a task spills it into an artifact.",
            big_result,
        )
        .policy(TaskPolicy::Optional),
    )
    .tool(
        Tool::typed(
            "export_dataset",
            "Writes `mebibytes` MiB of CSV to an artifact as it goes, and returns a link to it.",
            export_dataset,
        )
        .policy(TaskPolicy::Required),
    )
}

/// Bytes `start..start + len` of every demo artifact: printable ASCII, byte
/// `i` is `' ' + i % 95`.
pub fn pattern(start: u64, len: usize) -> Vec<u8> {
    (start..start + len as u64).map(|i| b' ' + (i % 95) as u8).collect()
}

/// What `big_result` returns.
#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum Kind {
    /// One text block.
    #[default]
    Text,
    /// One image block (the pattern's bytes, base64, typed `image/png`).
    Image,
    /// `structuredContent` `{ "data": <text> }`, with the text in `content` too.
    Json,
}

/// The arguments of `big_result`.
#[derive(Debug, Deserialize, JsonSchema)]
struct BigResult {
    /// How many bytes.
    #[schemars(range(min = 0, max = 67_108_864))]
    bytes: u64,
    #[serde(default)]
    kind: Kind,
}

async fn big_result(_ctx: ToolContext, args: BigResult) -> Result<ToolOutput, ToolError> {
    if args.bytes > MAX_BIG_RESULT_BYTES {
        return Err(ToolError::invalid_params(format!("bytes must be at most {MAX_BIG_RESULT_BYTES}")));
    }
    let bytes = pattern(0, usize::try_from(args.bytes).unwrap_or(usize::MAX));
    let text = String::from_utf8(bytes).unwrap_or_default();
    Ok(ToolOutput::Complete(match args.kind {
        Kind::Text => json!({ "content": [{ "type": "text", "text": text }] }),
        Kind::Image => {
            use base64::Engine;
            let data = base64::engine::general_purpose::STANDARD.encode(text.as_bytes());
            json!({ "content": [{ "type": "image", "data": data, "mimeType": "image/png" }] })
        }
        Kind::Json => json!({ "content": [{ "type": "text", "text": text }], "structuredContent": { "data": text } }),
    }))
}

/// The arguments of `export_dataset`.
#[derive(Debug, Deserialize, JsonSchema)]
struct Export {
    /// How many MiB.
    #[schemars(range(min = 1, max = 4096))]
    mebibytes: u64,
}

async fn export_dataset(ctx: ToolContext, args: Export) -> Result<ToolOutput, ToolError> {
    if !(1..=MAX_EXPORT_MIB).contains(&args.mebibytes) {
        return Err(ToolError::invalid_params(format!("mebibytes must be 1 to {MAX_EXPORT_MIB}")));
    }
    const MIB: u64 = 1024 * 1024;
    let mut sink = ctx.artifact("dataset.csv", "text/csv").await?;
    for n in 0..args.mebibytes {
        if ctx.cancellation().is_cancelled() {
            return Err(ToolError::Cancelled);
        }
        sink.write(pattern(n * MIB, MIB as usize)).await?;
        if n % 16 == 15 {
            ctx.set_status(format!("{} of {} MiB written", n + 1, args.mebibytes)).await?;
        }
    }
    let link = sink.finish().await?;
    let summary = format!("Exported {} MiB", args.mebibytes);
    Ok(ToolOutput::Complete(json!({ "content": [{ "type": "text", "text": summary }, link] })))
}
