//! [`CatalogBuilder`]: collects tools, resources, templates, prompts and the
//! completion provider, then compiles and checks them into a [`Catalog`].

use std::{fmt, sync::Arc};

use serde_json::{Value, json};

use super::{
    Catalog, CatalogError, CompleteFn, Prompt, ReadResource, RegisteredTool, Resource, ResourceTemplate,
    headers::header_params,
};
use crate::{prompt::PromptHandler, tool::Tool};

/// Builds a [`Catalog`].
#[derive(Default)]
pub struct CatalogBuilder {
    tools: Vec<Tool>,
    resources: Vec<Resource>,
    templates: Vec<ResourceTemplate>,
    prompts: Vec<Prompt>,
    complete: Option<CompleteFn>,
}

impl fmt::Debug for CatalogBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CatalogBuilder").field("tools", &self.tools.len()).finish()
    }
}

impl CatalogBuilder {
    /// Add a tool (listed in insertion order).
    pub fn tool(mut self, tool: Tool) -> Self {
        self.tools.push(tool);
        self
    }

    /// Add a resource.
    pub fn resource(mut self, descriptor: Value, read: impl ReadResource) -> Self {
        self.resources.push(Resource { descriptor, read: Arc::new(read) });
        self
    }

    /// Add a resource template.
    pub fn template(mut self, descriptor: Value, read: impl ReadResource) -> Self {
        self.templates.push(ResourceTemplate { descriptor, read: Arc::new(read) });
        self
    }

    /// Add a prompt.
    pub fn prompt(mut self, descriptor: Value, handler: impl PromptHandler) -> Self {
        self.prompts.push(Prompt { descriptor, handler: Arc::new(handler) });
        self
    }

    /// Set the completion provider.
    pub fn completion(mut self, f: impl Fn(&Value, &Value) -> Value + Send + Sync + 'static) -> Self {
        self.complete = Some(Arc::new(f));
        self
    }

    /// Compile schemas, check names and headers.
    pub fn build(self) -> Result<Catalog, CatalogError> {
        let mut catalog = Catalog { complete: self.complete, ..Catalog::default() };
        for tool in self.tools {
            let name = tool.name().to_string();
            let schema = tool.input_schema();
            if schema.get("type") != Some(&json!("object")) {
                return Err(CatalogError::Schema { tool: name, reason: "type must be \"object\"".into() });
            }
            let validator = jsonschema::draft202012::new(schema)
                .map_err(|e| CatalogError::Schema { tool: name.clone(), reason: e.to_string() })?;
            let headers =
                header_params(schema).map_err(|reason| CatalogError::Header { tool: name.clone(), reason })?;
            if catalog.tool_index.insert(name.clone(), catalog.tools.len()).is_some() {
                return Err(CatalogError::Duplicate { kind: "tool", name });
            }
            catalog.tools.push(RegisteredTool { tool, validator, headers });
        }
        let mut seen = std::collections::HashSet::new();
        for p in &self.prompts {
            let name = p.descriptor["name"].as_str().unwrap_or_default().to_string();
            if !seen.insert(name.clone()) {
                return Err(CatalogError::Duplicate { kind: "prompt", name });
            }
        }
        catalog.resources = self.resources;
        catalog.templates = self.templates;
        catalog.prompts = self.prompts;
        Ok(catalog)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool::{ToolHandler, ToolOutput};

    fn noop() -> impl ToolHandler {
        |_ctx, _args| async { Ok(ToolOutput::text("ok")) }
    }

    #[test]
    fn build_validates_and_keeps_order() {
        let c = Catalog::builder()
            .tool(Tool::new(
                "b",
                "B",
                json!({"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}),
                noop(),
            ))
            .tool(Tool::new("a", "A", json!({"type":"object"}), noop()))
            .build()
            .unwrap();
        assert_eq!(c.tools().map(RegisteredTool::name).collect::<Vec<_>>(), ["b", "a"]);
        let b = c.tool("b").unwrap();
        assert!(b.validate(&json!({"n": 1})).is_ok());
        assert!(b.validate(&json!({"n": "x"})).is_err());
        assert!(b.validate(&json!({})).is_err());
        assert!(Catalog::builder().tool(Tool::new("x", "X", json!({"type":"string"}), noop())).build().is_err());
        assert!(
            Catalog::builder()
                .tool(Tool::new("x", "X", json!({"type":"object"}), noop()))
                .tool(Tool::new("x", "X", json!({"type":"object"}), noop()))
                .build()
                .is_err()
        );
    }
}
