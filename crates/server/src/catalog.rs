//! The catalog: the tools, resources, resource templates, prompts and
//! completion a server exposes, in a fixed order (never a `HashMap`'s: every
//! replica must list the same order).
//!
//! [`CatalogBuilder::build`] compiles every tool's `inputSchema` (JSON Schema
//! 2020-12) once and checks its `x-mcp-header` annotations (SEP-2243).

use std::{collections::HashMap, fmt, sync::Arc};

use serde_json::{Map, Value, json};

use crate::{
    error::ServerError,
    tool::{TaskPolicy, Tool, ToolHandler},
};

/// Reads a resource: returns the `contents` array.
pub type ReadFn = Arc<dyn Fn(&str, &HashMap<String, String>) -> Result<Value, ServerError> + Send + Sync>;
/// Completes an argument: gets `ref` and `argument`, returns the `completion` object.
pub type CompleteFn = Arc<dyn Fn(&Value, &Value) -> Value + Send + Sync>;

/// An invalid catalog entry.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// Two entries share a name or URI.
    #[error("duplicate {kind} {name:?}")]
    Duplicate {
        /// tool, prompt, resource.
        kind: &'static str,
        /// The name.
        name: String,
    },
    /// The tool's `inputSchema` is not a valid JSON Schema with `type: object`.
    #[error("tool {tool:?}: invalid inputSchema: {reason}")]
    Schema {
        /// The tool.
        tool: String,
        /// What is wrong.
        reason: String,
    },
    /// An `x-mcp-header` annotation breaks SEP-2243's rules.
    #[error("tool {tool:?}: invalid x-mcp-header: {reason}")]
    Header {
        /// The tool.
        tool: String,
        /// What is wrong.
        reason: String,
    },
}

/// A parameter mirrored into an `Mcp-Param-{name}` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderParam {
    /// The chain of `properties` keys from the schema root.
    pub path: Vec<String>,
    /// The header name suffix.
    pub header: String,
}

impl HeaderParam {
    /// The argument value at this parameter's path, if present and not null.
    pub fn value<'a>(&self, arguments: &'a Value) -> Option<&'a Value> {
        let mut v = arguments;
        for k in &self.path {
            v = v.get(k)?;
        }
        (!v.is_null()).then_some(v)
    }
}

/// A tool in a built catalog: the [`Tool`] with its compiled input schema and
/// its `x-mcp-header` parameters.
pub struct RegisteredTool {
    tool: Tool,
    validator: jsonschema::Validator,
    headers: Vec<HeaderParam>,
}

impl fmt::Debug for RegisteredTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegisteredTool").field("tool", &self.tool).field("headers", &self.headers).finish()
    }
}

impl RegisteredTool {
    /// The tool name.
    pub fn name(&self) -> &str {
        self.tool.name()
    }

    /// The descriptor sent in `tools/list`.
    pub fn descriptor(&self) -> &Value {
        &self.tool.descriptor
    }

    /// When a call becomes a task.
    pub fn policy(&self) -> &TaskPolicy {
        &self.tool.policy
    }

    /// The implementation.
    pub fn handler(&self) -> &dyn ToolHandler {
        self.tool.handler.as_ref()
    }

    /// Its `x-mcp-header` parameters, mirrored into `Mcp-Param-*` headers.
    pub fn headers(&self) -> &[HeaderParam] {
        &self.headers
    }

    /// Validate arguments; the error lists what is wrong, for an `isError` result.
    pub fn validate(&self, arguments: &Value) -> Result<(), String> {
        let errors: Vec<String> =
            self.validator.iter_errors(arguments).take(5).map(|e| format!("{}: {e}", e.instance_path())).collect();
        if errors.is_empty() { Ok(()) } else { Err(errors.join("; ")) }
    }
}

/// A concrete resource.
#[derive(Clone)]
pub struct Resource {
    /// The descriptor for `resources/list` (`uri`, `name`, `mimeType`…).
    pub descriptor: Value,
    /// The reader.
    pub read: ReadFn,
}

/// A resource template (`{var}` placeholders, RFC 6570 level 1).
#[derive(Clone)]
pub struct ResourceTemplate {
    /// The descriptor for `resources/templates/list` (`uriTemplate`, `name`…).
    pub descriptor: Value,
    /// The reader; gets the matched variables.
    pub read: ReadFn,
}

/// A prompt. Its handler returns `ToolOutput::Complete({messages, description?})`
/// or `ToolOutput::InputRequired` (MRTR).
#[derive(Clone)]
pub struct Prompt {
    /// The descriptor for `prompts/list` (`name`, `description`, `arguments`).
    pub descriptor: Value,
    /// The implementation.
    pub handler: Arc<dyn ToolHandler>,
}

/// The finished, immutable catalog.
#[derive(Default)]
pub struct Catalog {
    tools: Vec<RegisteredTool>,
    tool_index: HashMap<String, usize>,
    resources: Vec<Resource>,
    templates: Vec<ResourceTemplate>,
    prompts: Vec<Prompt>,
    complete: Option<CompleteFn>,
}

impl fmt::Debug for Catalog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Catalog")
            .field("tools", &self.tools.len())
            .field("resources", &self.resources.len())
            .field("templates", &self.templates.len())
            .field("prompts", &self.prompts.len())
            .finish()
    }
}

macro_rules! debug_by_descriptor {
    ($($t:ty),*) => {$(
        impl fmt::Debug for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($t)).field("descriptor", &self.descriptor).finish_non_exhaustive()
            }
        }
    )*};
}
debug_by_descriptor!(Resource, ResourceTemplate, Prompt);

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
    pub fn resource(
        mut self,
        descriptor: Value,
        read: impl Fn(&str, &HashMap<String, String>) -> Result<Value, ServerError> + Send + Sync + 'static,
    ) -> Self {
        self.resources.push(Resource { descriptor, read: Arc::new(read) });
        self
    }

    /// Add a resource template.
    pub fn template(
        mut self,
        descriptor: Value,
        read: impl Fn(&str, &HashMap<String, String>) -> Result<Value, ServerError> + Send + Sync + 'static,
    ) -> Self {
        self.templates.push(ResourceTemplate { descriptor, read: Arc::new(read) });
        self
    }

    /// Add a prompt.
    pub fn prompt(mut self, descriptor: Value, handler: impl ToolHandler) -> Self {
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

impl Catalog {
    /// Start building.
    pub fn builder() -> CatalogBuilder {
        CatalogBuilder::default()
    }

    /// Tools in listing order.
    pub fn tools(&self) -> impl Iterator<Item = &RegisteredTool> {
        self.tools.iter()
    }

    /// A tool by name.
    pub fn tool(&self, name: &str) -> Option<&RegisteredTool> {
        self.tool_index.get(name).map(|&i| &self.tools[i])
    }

    /// Resources in listing order.
    pub fn resources(&self) -> &[Resource] {
        &self.resources
    }

    /// Templates in listing order.
    pub fn templates(&self) -> &[ResourceTemplate] {
        &self.templates
    }

    /// Prompts in listing order.
    pub fn prompts(&self) -> &[Prompt] {
        &self.prompts
    }

    /// A prompt by name.
    pub fn prompt(&self, name: &str) -> Option<&Prompt> {
        self.prompts.iter().find(|p| p.descriptor["name"] == name)
    }

    /// The completion provider.
    pub fn completer(&self) -> Option<&CompleteFn> {
        self.complete.as_ref()
    }

    /// Read `uri`: a concrete resource first, then the first matching template.
    /// `None` when nothing matches.
    pub fn read(&self, uri: &str) -> Option<Result<Value, ServerError>> {
        if let Some(r) = self.resources.iter().find(|r| r.descriptor["uri"] == uri) {
            return Some((r.read)(uri, &HashMap::new()));
        }
        self.templates.iter().find_map(|t| {
            let vars = match_template(t.descriptor["uriTemplate"].as_str()?, uri)?;
            Some((t.read)(uri, &vars))
        })
    }
}

/// Match a level-1 URI template (`test://template/{id}/data`) against `uri`.
/// Variables match one or more characters other than `/`.
pub fn match_template(template: &str, uri: &str) -> Option<HashMap<String, String>> {
    let mut vars = HashMap::new();
    let mut rest = uri;
    let mut tpl = template;
    while !tpl.is_empty() {
        if let Some(after) = tpl.strip_prefix('{') {
            let end = after.find('}')?;
            let name = &after[..end];
            tpl = &after[end + 1..];
            let literal_end = tpl.find('{').unwrap_or(tpl.len());
            let next_literal = &tpl[..literal_end];
            let value_len = if next_literal.is_empty() { rest.len() } else { rest.find(next_literal)? };
            let value = &rest[..value_len];
            if value.is_empty() || value.contains('/') {
                return None;
            }
            vars.insert(name.to_string(), value.to_string());
            rest = &rest[value_len..];
        } else {
            let literal_end = tpl.find('{').unwrap_or(tpl.len());
            rest = rest.strip_prefix(&tpl[..literal_end])?;
            tpl = &tpl[literal_end..];
        }
    }
    rest.is_empty().then_some(vars)
}

/// Collect `x-mcp-header` annotations reachable through `properties` chains,
/// enforcing SEP-2243: non-empty token names, case-insensitively unique,
/// on string/integer/boolean properties only, and nowhere else in the schema.
fn header_params(schema: &Value) -> Result<Vec<HeaderParam>, String> {
    fn walk(node: &Map<String, Value>, path: &mut Vec<String>, out: &mut Vec<HeaderParam>) -> Result<(), String> {
        let Some(Value::Object(props)) = node.get("properties") else {
            return Ok(());
        };
        for (key, sub) in props {
            let Value::Object(sub) = sub else { continue };
            path.push(key.clone());
            if let Some(h) = sub.get("x-mcp-header") {
                let name = h.as_str().ok_or("x-mcp-header must be a string")?;
                let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
                if name.is_empty() || !name.chars().all(token) {
                    return Err(format!("{name:?} is not an HTTP token"));
                }
                let ty = sub.get("type").and_then(Value::as_str);
                if !matches!(ty, Some("string" | "integer" | "boolean")) {
                    return Err(format!("{name:?} annotates a non-primitive (or number) property"));
                }
                if out.iter().any(|p| p.header.eq_ignore_ascii_case(name)) {
                    return Err(format!("{name:?} is used twice"));
                }
                out.push(HeaderParam { path: path.clone(), header: name.to_string() });
            }
            walk(sub, path, out)?;
            path.pop();
        }
        Ok(())
    }
    fn count(v: &Value) -> usize {
        match v {
            Value::Object(m) => usize::from(m.contains_key("x-mcp-header")) + m.values().map(count).sum::<usize>(),
            Value::Array(a) => a.iter().map(count).sum(),
            _ => 0,
        }
    }
    let mut out = Vec::new();
    if let Value::Object(root) = schema {
        walk(root, &mut Vec::new(), &mut out)?;
    }
    if count(schema) != out.len() {
        return Err("x-mcp-header is only allowed on properties reachable through `properties` keys".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tool::ToolOutput;

    fn noop() -> impl ToolHandler {
        |_ctx, _args| async { Ok(ToolOutput::text("ok")) }
    }

    #[test]
    fn templates_match_level_one() {
        let v = match_template("test://template/{id}/data", "test://template/123/data").unwrap();
        assert_eq!(v["id"], "123");
        assert!(match_template("test://template/{id}/data", "test://template//data").is_none());
        assert!(match_template("test://template/{id}/data", "test://template/1/2/data").is_none());
        assert!(match_template("test://template/{id}/data", "test://other/1/data").is_none());
        assert_eq!(match_template("a://{x}", "a://yz").unwrap()["x"], "yz");
    }

    #[test]
    fn header_annotations_follow_sep_2243() {
        let ok = json!({"type":"object","properties":{
            "region":{"type":"string","x-mcp-header":"Region"},
            "o":{"type":"object","properties":{"n":{"type":"integer","x-mcp-header":"N"}}}}});
        let h = header_params(&ok).unwrap();
        assert_eq!(
            h,
            vec![
                HeaderParam { path: vec!["o".into(), "n".into()], header: "N".into() },
                HeaderParam { path: vec!["region".into()], header: "Region".into() },
            ]
        );
        for bad in [
            json!({"type":"object","properties":{"a":{"type":"number","x-mcp-header":"A"}}}),
            json!({"type":"object","properties":{"a":{"type":"string","x-mcp-header":"A B"}}}),
            json!({"type":"object","properties":{"a":{"type":"string","x-mcp-header":"A"},"b":{"type":"string","x-mcp-header":"a"}}}),
            json!({"type":"object","anyOf":[{"properties":{"a":{"type":"string","x-mcp-header":"A"}}}]}),
            json!({"type":"object","properties":{"a":{"type":"array","items":{"type":"string","x-mcp-header":"A"}}}}),
        ] {
            assert!(header_params(&bad).is_err(), "{bad}");
        }
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
