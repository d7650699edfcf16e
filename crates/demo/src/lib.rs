//! The `demo` catalog: every tool, resource, template, prompt and completion
//! the official conformance runner exercises (see `conformance/FIXTURE.md`
//! §4), plus examples of long-running tasks.
//!
//! It is one user of the library API (`presa_server::Catalog`), not part of
//! the machinery: copy it as a starting point for your own server. Its tools
//! are typed ([`presa_server::Tool::typed`]): arguments decoded into a
//! `#[derive(Deserialize, JsonSchema)]` struct that is also the
//! `inputSchema` ([`presa_server::NoArgs`] for none), and a structured
//! result ([`presa_server::Json`]) whose type is the `outputSchema`
//! (`deploy_release`). The one `Tool::new` is `json_schema_2020_12_tool`,
//! whose hand-written schema the conformance runner compares as it is.
//!
//! - [`core`]: content types, progress, logging, list-change triggers, headers, JSON Schema 2020-12.
//! - [`mrtr`]: multi round-trip (SEP-2322) tools and prompt.
//! - [`tasks`]: Tasks extension (SEP-2663) tools and the `deploy_release` long-running example.
//! - [`fragile`]: `fragile_job`, whose upstream fails on demand, behind a circuit breaker.
//! - [`content`]: resources, templates, prompts and completion.
//! - [`legacy`]: the 2025-11-25 suite's logging, sampling and elicitation tools.
//! - [`big`]: big results and a streamed export, for artifacts.
//! - [`limits`]: `exclusive_job`, limited to 2 runs at once, keeping its own record of them.

pub mod big;
pub mod content;
pub mod core;
pub mod fragile;
pub mod legacy;
pub mod limits;
pub mod mrtr;
pub mod tasks;

use presa_server::{Catalog, CatalogBuilder, catalog::CatalogError};

/// A 1×1 PNG, base64.
pub const PNG: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
/// A tiny WAV, base64.
pub const WAV: &str = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=";

/// The whole demo catalog, in listing order (`test_simple_text` first).
pub fn catalog() -> Result<Catalog, CatalogError> {
    let b = Catalog::builder();
    let b = core::register(b);
    let b = mrtr::register(b);
    let b = tasks::register(b);
    let b = fragile::register(b);
    let b = limits::register(b);
    let b: CatalogBuilder = content::register(b);
    let b = legacy::register(b);
    let b = big::register(b);
    b.build()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn catalog_builds_with_unique_valid_names() {
        let c = super::catalog().unwrap();
        let names: Vec<&str> = c.tools().map(presa_server::catalog::RegisteredTool::name).collect();
        assert_eq!(names[0], "test_simple_text");
        for n in &names {
            assert!(!n.is_empty() && n.len() <= 128);
            assert!(n.chars().all(|ch| ch.is_ascii_alphanumeric() || "_.-".contains(ch)), "{n}");
        }
        for t in c.tools() {
            assert!(t.descriptor()["description"].as_str().is_some_and(|d| !d.is_empty()));
        }
        // The first tool with an x-mcp-header must annotate a string property.
        let first = c.tools().find(|t| !t.headers().is_empty()).unwrap();
        assert_eq!(first.name(), "test_header_param");
    }

    /// What the conformance runner reads of the typed tools' schemas
    /// (FIXTURE.md §4): derived from Rust types, they must keep meaning it.
    #[test]
    fn typed_schemas_mean_what_the_fixture_says() {
        let c = super::catalog().unwrap();
        let schema = |name: &str| {
            let tool = c.tools().find(|t| t.name() == name).unwrap_or_else(|| panic!("{name} is listed"));
            tool.descriptor()["inputSchema"].clone()
        };
        for name in ["test_simple_text", "test_tool_with_progress", "failing_job", "multi_input", "test_tool_with_task"]
        {
            assert_eq!(schema(name), json!({ "type": "object", "properties": {} }), "{name}");
        }
        let header = schema("test_header_param");
        assert_eq!(
            header["properties"]["region"],
            json!({ "type": "string", "description": "Region", "x-mcp-header": "Region" })
        );
        assert_eq!(header["required"], json!(["region"]));
        let greet = schema("greet");
        assert_eq!((greet["properties"]["name"]["type"].as_str(), greet.get("required")), (Some("string"), None));
        let compute = schema("slow_compute");
        assert_eq!(compute["properties"]["seconds"]["type"], "number");
        assert_eq!(
            (&compute["properties"]["seconds"]["minimum"], &compute["properties"]["seconds"]["maximum"]),
            (&json!(0), &json!(3600))
        );
        assert_eq!((compute["properties"]["label"]["type"].as_str(), compute.get("required")), (Some("string"), None));
        assert_eq!(schema("confirm_delete")["properties"]["filename"]["type"], "string");
        for (name, arg, description) in [
            ("test_sampling", "prompt", "The prompt to send to the LLM"),
            ("test_elicitation", "message", "The message to show the user"),
        ] {
            let s = schema(name);
            assert_eq!(s["properties"][arg], json!({ "type": "string", "description": description }), "{name}");
            assert_eq!(s["required"], json!([arg]), "{name}");
        }
        assert!(schema("json_schema_2020_12_tool")["$schema"].is_string(), "the runner's fixture as it is");
        // The outputSchema of deploy_release comes from its return type.
        let deploy = c.tools().find(|t| t.name() == "deploy_release").unwrap().descriptor().clone();
        let output = &deploy["outputSchema"]["properties"];
        assert_eq!(
            (output["approved"]["type"].as_str(), output["requestedBy"]["type"].as_str()),
            (Some("boolean"), Some("object"))
        );
        assert!(
            c.tools().filter(|t| t.name() != "deploy_release").all(|t| t.descriptor().get("outputSchema").is_none())
        );
    }
}
