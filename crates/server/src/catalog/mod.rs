//! The catalog: the tools, resources, resource templates, prompts and
//! completion a server exposes, in a fixed order (never a `HashMap`'s: every
//! replica must list the same order).
//!
//! [`CatalogBuilder::build`] compiles every tool's `inputSchema` (JSON Schema
//! 2020-12) once and checks its `x-mcp-header` annotations (SEP-2243, in
//! `headers`); resource templates match URIs in `template`.
//!
//! Resource readers and the completion provider are asynchronous: the
//! catalog holds them as functions returning a future ([`ReadFn`],
//! [`CompleteFn`]), which the dispatcher awaits inside the in-request call
//! pool and `call_timeout`, like a handler run in its request. A synchronous
//! closure (what [`CatalogBuilder::resource`], [`CatalogBuilder::template`]
//! and [`CatalogBuilder::completion`] take) runs when it is called and is
//! wrapped into a ready future; a reader that waits on something (a
//! database, another server: presa-gateway's upstream) is registered with
//! [`CatalogBuilder::resource_async`], [`CatalogBuilder::template_async`] or
//! [`CatalogBuilder::completion_async`] and never blocks a runtime thread.

mod builder;
mod cell;
mod headers;
mod template;

pub use builder::CatalogBuilder;
pub use cell::CatalogCell;
pub use headers::HeaderParam;
pub use template::match_template;

use std::{collections::HashMap, fmt, sync::Arc};

use futures::future::BoxFuture;
use presa_protocol::jsonrpc::ErrorObject;
use serde_json::Value;

use crate::{
    prompt::PromptHandler,
    tool::{TaskPolicy, Tool, ToolHandler},
};

/// What reading a resource gives: its `contents` array, or why not.
pub type ReadResult = Result<Value, ResourceError>;

/// A resource reader as the catalog holds it: called with the URI and the
/// variables a template matched, it returns the read as a future.
pub type ReadFn = Arc<dyn Fn(String, HashMap<String, String>) -> BoxFuture<'static, ReadResult> + Send + Sync>;

/// A synchronous resource reader: gets the URI and the variables a template
/// matched, returns the `contents` array. Any such closure is one (see
/// [`CatalogBuilder::resource`]; for one that waits on IO,
/// [`CatalogBuilder::resource_async`]).
pub trait ReadResource: Fn(&str, &HashMap<String, String>) -> ReadResult + Send + Sync + 'static {}

impl<F> ReadResource for F where F: Fn(&str, &HashMap<String, String>) -> ReadResult + Send + Sync + 'static {}

/// Why a resource could not be read (or, from an asynchronous completion
/// provider, an argument not completed).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResourceError {
    /// There is no such resource (for a template: the variables name none):
    /// `-32602 Resource not found` with the URI. (A completion provider's
    /// `NotFound` answers no values.)
    #[error("resource not found")]
    NotFound,
    /// Reading failed: `-32603 Internal error`; the cause is logged, never sent.
    #[error("{0}")]
    Failed(String),
    /// A JSON-RPC error sent as is: what the caller may see and act on (a
    /// retryable `-32603` when what the reader waits on is busy, an error the
    /// resource's own server answered).
    #[error("{}", .0.message)]
    Rpc(ErrorObject),
}

/// The completion provider as the catalog holds it: called with `ref` and
/// `argument`, it returns the `completion` object as a future.
pub type CompleteFn = Arc<dyn Fn(Value, Value) -> BoxFuture<'static, Result<Value, ResourceError>> + Send + Sync>;

/// Why a tool's arguments do not fit its `inputSchema` ([`RegisteredTool::validate`]):
/// the first five problems, each at its JSON pointer; shown joined by `; `.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .problems.join("; "))]
pub struct InvalidArguments {
    /// `<instance path>: <what is wrong>`, at most five.
    pub problems: Vec<String>,
}

/// An invalid catalog entry.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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

    /// The OAuth scopes a caller needs to call it or act on its tasks.
    pub fn scopes(&self) -> &[String] {
        &self.tool.scopes
    }

    /// How its tasks' failed tries are tried again, if it says (`Tool::retry`).
    pub fn retry(&self) -> Option<crate::retry::RetryPolicy> {
        self.tool.retry
    }

    /// How often it may be called across the cluster, if it says (`Tool::rate`).
    pub fn rate(&self) -> Option<crate::flow::ToolRate> {
        self.tool.rate
    }

    /// The circuit breaker on what it calls, if it has one (`Tool::breaker`).
    pub fn breaker(&self) -> Option<&crate::tool_breaker::ToolBreaker> {
        self.tool.breaker.as_ref()
    }

    /// How many of its runs may go on at once, if it says (`Tool::concurrency`).
    pub fn concurrency(&self) -> Option<&crate::concurrency::ToolConcurrency> {
        self.tool.concurrency.as_ref()
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
    pub fn validate(&self, arguments: &Value) -> Result<(), InvalidArguments> {
        let problems: Vec<String> =
            self.validator.iter_errors(arguments).take(5).map(|e| format!("{}: {e}", e.instance_path())).collect();
        if problems.is_empty() { Ok(()) } else { Err(InvalidArguments { problems }) }
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

/// A prompt and its [`PromptHandler`].
#[derive(Clone)]
pub struct Prompt {
    /// The descriptor for `prompts/list` (`name`, `description`, `arguments`).
    pub descriptor: Value,
    /// The implementation.
    pub handler: Arc<dyn PromptHandler>,
}

/// A tool looked up once for a request and carried through it (its span,
/// its `Mcp-Param-*` checks, its scopes, its dispatch): the catalog it came
/// from, so a catalog replaced meanwhile changes nothing for this request.
#[derive(Clone)]
pub struct ToolRef {
    catalog: Arc<Catalog>,
    index: usize,
}

impl std::ops::Deref for ToolRef {
    type Target = RegisteredTool;

    fn deref(&self) -> &RegisteredTool {
        &self.catalog.tools[self.index]
    }
}

impl fmt::Debug for ToolRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ToolRef").field(&self.name()).finish()
    }
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

    /// A tool by name, held with this catalog (see [`ToolRef`]).
    pub fn tool_ref(self: &Arc<Self>, name: &str) -> Option<ToolRef> {
        let index = *self.tool_index.get(name)?;
        Some(ToolRef { catalog: self.clone(), index })
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
    /// `None` when nothing matches. The read runs when the future is polled
    /// (a synchronous reader's at this call) and does not borrow the catalog,
    /// which a replacement may drop meanwhile.
    pub fn read(&self, uri: &str) -> Option<BoxFuture<'static, ReadResult>> {
        let (read, vars) = self.resolve(uri)?;
        Some(read(uri.to_string(), vars))
    }

    /// Whether `uri` names something the catalog lists: a resource, or a
    /// match of a resource template (what [`Catalog::read`] would read).
    pub fn lists(&self, uri: &str) -> bool {
        self.resolve(uri).is_some()
    }

    /// The reader of `uri` and the variables its template matched.
    fn resolve(&self, uri: &str) -> Option<(&ReadFn, HashMap<String, String>)> {
        if let Some(r) = self.resources.iter().find(|r| r.descriptor["uri"] == uri) {
            return Some((&r.read, HashMap::new()));
        }
        self.templates.iter().find_map(|t| {
            let vars = match_template(t.descriptor["uriTemplate"].as_str()?, uri)?;
            Some((&t.read, vars))
        })
    }
}
