//! [`CatalogBuilder`]: collects tools, resources, templates, prompts and the
//! completion provider, then compiles and checks them into a [`Catalog`].

use std::{collections::HashMap, fmt, sync::Arc};

use futures::FutureExt;
use serde_json::{Value, json};

use super::{
    Catalog, CatalogError, CompleteFn, Prompt, ReadFn, ReadResource, ReadResult, RegisteredTool, Resource,
    ResourceError, ResourceTemplate, headers::header_params,
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

    /// Add a resource read by a synchronous closure (it runs on the
    /// request's task: keep it quick; one that waits on IO goes in
    /// [`CatalogBuilder::resource_async`]).
    pub fn resource(self, descriptor: Value, read: impl ReadResource) -> Self {
        self.resource_async(descriptor, ready_reader(read))
    }

    /// Add a resource read by an async function of the URI and the (for a
    /// resource, empty) variables.
    pub fn resource_async<F, Fut>(mut self, descriptor: Value, read: F) -> Self
    where
        F: Fn(String, HashMap<String, String>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ReadResult> + Send + 'static,
    {
        self.resources.push(Resource { descriptor, read: boxed_reader(read) });
        self
    }

    /// Add a resource template read by a synchronous closure.
    pub fn template(self, descriptor: Value, read: impl ReadResource) -> Self {
        self.template_async(descriptor, ready_reader(read))
    }

    /// Add a resource template read by an async function of the URI and the
    /// variables the template matched.
    pub fn template_async<F, Fut>(mut self, descriptor: Value, read: F) -> Self
    where
        F: Fn(String, HashMap<String, String>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ReadResult> + Send + 'static,
    {
        self.templates.push(ResourceTemplate { descriptor, read: boxed_reader(read) });
        self
    }

    /// Add a prompt.
    pub fn prompt(mut self, descriptor: Value, handler: impl PromptHandler) -> Self {
        self.prompts.push(Prompt { descriptor, handler: Arc::new(handler) });
        self
    }

    /// Set the completion provider: a synchronous closure of `ref` and
    /// `argument` returning the `completion` object.
    pub fn completion(self, f: impl Fn(&Value, &Value) -> Value + Send + Sync + 'static) -> Self {
        self.completion_async(move |r#ref, argument| std::future::ready(Ok(f(&r#ref, &argument))))
    }

    /// Set the completion provider: an async function of `ref` and
    /// `argument` returning the `completion` object, or an error
    /// ([`ResourceError::NotFound`]: no values; `Failed`: `-32603`; `Rpc`: sent as is).
    pub fn completion_async<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Value, Value) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, ResourceError>> + Send + 'static,
    {
        let f: CompleteFn = Arc::new(move |r#ref, argument| f(r#ref, argument).boxed());
        self.complete = Some(f);
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

/// A synchronous reader as an async one: it reads when called, and its
/// future is ready.
fn ready_reader(
    read: impl ReadResource,
) -> impl Fn(String, HashMap<String, String>) -> std::future::Ready<ReadResult> + Send + Sync + 'static {
    move |uri, vars| std::future::ready(read(&uri, &vars))
}

fn boxed_reader<F, Fut>(read: F) -> ReadFn
where
    F: Fn(String, HashMap<String, String>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ReadResult> + Send + 'static,
{
    Arc::new(move |uri, vars| read(uri, vars).boxed())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{output::ToolOutput, tool::ToolHandler};

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
