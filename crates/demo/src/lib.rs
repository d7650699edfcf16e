//! The `demo` catalog: every tool, resource, template, prompt and completion
//! the official conformance runner exercises (see `conformance/FIXTURE.md`
//! §4), plus examples of long-running tasks.
//!
//! It is one user of the library API (`presa_server::Catalog`), not part of
//! the machinery: copy it as a starting point for your own server.
//!
//! - [`core`]: content types, progress, logging, list-change triggers, headers, JSON Schema 2020-12.
//! - [`mrtr`]: multi round-trip (SEP-2322) tools and prompt.
//! - [`tasks`]: Tasks extension (SEP-2663) tools and the `deploy_release` long-running example.
//! - [`content`]: resources, templates, prompts and completion.
//! - [`legacy`]: the 2025-11-25 suite's logging, sampling and elicitation tools.

pub mod content;
pub mod core;
pub mod legacy;
pub mod mrtr;
pub mod tasks;

use presa_server::{Catalog, CatalogBuilder, catalog::CatalogError};

/// A 1×1 PNG, base64.
pub const PNG: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
/// A tiny WAV, base64.
pub const WAV: &str = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=";

/// The input schema of a tool that takes no arguments.
fn empty() -> serde_json::Value {
    serde_json::json!({ "type": "object", "properties": {} })
}

/// The whole demo catalog, in listing order (`test_simple_text` first).
pub fn catalog() -> Result<Catalog, CatalogError> {
    let b = Catalog::builder();
    let b = core::register(b);
    let b = mrtr::register(b);
    let b = tasks::register(b);
    let b: CatalogBuilder = content::register(b);
    let b = legacy::register(b);
    b.build()
}

#[cfg(test)]
mod tests {
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
}
