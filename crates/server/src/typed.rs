//! Typed tools: the input schema is derived from the arguments' Rust type
//! (`schemars`, JSON Schema 2020-12) and the arguments are decoded into it,
//! so the schema a client sees and the decoding cannot drift apart. A
//! handler returning [`crate::Json`]`<T>` (or a `Result` of it) declares
//! `T`'s schema as the tool's `outputSchema` the same way, and a tool that
//! takes no arguments takes [`NoArgs`].
//!
//! ```
//! use presa_server::{Json, Tool, ToolContext, ToolError};
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Deserialize, JsonSchema)]
//! struct Args {
//!     /// The directory to count.
//!     path: String,
//! }
//!
//! #[derive(Serialize, JsonSchema)]
//! struct Count {
//!     files: usize,
//! }
//!
//! async fn count(_ctx: ToolContext, args: Args) -> Result<Json<Count>, ToolError> {
//!     let files = std::fs::read_dir(&args.path)?.count(); // `?` on io::Error
//!     Ok(Json(Count { files }))
//! }
//!
//! let tool = Tool::typed("count_files", "Counts the entries of a directory.", count);
//! assert_eq!(tool.input_schema()["properties"]["path"]["type"], "string");
//! // Derived from the return type, `Json<Count>`:
//! assert_eq!(tool.descriptor["outputSchema"]["properties"]["files"]["type"], "integer");
//! ```

use std::{future::Future, marker::PhantomData};

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, de::DeserializeOwned};
use serde_json::{Map, Value};

use crate::{
    context::ToolContext,
    output::{IntoToolOutput, ToolError, ToolOutput},
    schema::schema_of,
    tool::{Tool, ToolHandler},
};

/// Decode `value` into `T`, naming the field that does not fit.
pub(crate) fn decode<T: DeserializeOwned>(value: Value) -> Result<T, String> {
    serde_path_to_error::deserialize(value).map_err(|e| match e.path().to_string().as_str() {
        "." => e.inner().to_string(),
        path => format!("{path}: {}", e.inner()),
    })
}

/// A handler taking typed arguments.
struct Typed<A, F> {
    f: F,
    args: PhantomData<fn() -> A>,
}

#[async_trait::async_trait]
impl<A, F, Fut, R> ToolHandler for Typed<A, F>
where
    A: DeserializeOwned + Send + 'static,
    F: Fn(ToolContext, A) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = R> + Send + 'static,
    R: IntoToolOutput + 'static,
{
    async fn call(&self, ctx: ToolContext, arguments: Value) -> Result<ToolOutput, ToolError> {
        let args = match decode::<A>(arguments) {
            Ok(a) => a,
            // A tool error the model can read and correct, like a schema violation.
            Err(why) => return Ok(ToolOutput::error(format!("Invalid arguments: {why}"))),
        };
        (self.f)(ctx, args).await.into_tool_output()
    }
}

impl Tool {
    /// A tool whose `inputSchema` is derived from `A` and whose handler gets
    /// the arguments decoded into `A` (after schema validation; a decoding
    /// failure is a tool error, `isError: true`, naming the field). The
    /// handler returns anything [`IntoToolOutput`]: `String`, [`crate::Json`],
    /// [`ToolOutput`], or a `Result` of those with any error that converts
    /// into [`ToolError`]. When it returns [`crate::Json`]`<T>` (or a
    /// `Result` of it), `T`'s schema is the tool's `outputSchema`.
    pub fn typed<A, F, Fut, R>(name: impl Into<String>, description: impl Into<String>, handler: F) -> Self
    where
        A: DeserializeOwned + JsonSchema + Send + 'static,
        F: Fn(ToolContext, A) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = R> + Send + 'static,
        R: IntoToolOutput + 'static,
    {
        let tool = Tool::new(name, description, schema_of::<A>(), Typed { f: handler, args: PhantomData });
        match R::output_schema() {
            Some(schema) => tool.with("outputSchema", schema),
            None => tool,
        }
    }

    /// Declare the tool's `outputSchema` from `T`, the type its
    /// `structuredContent` carries. [`Tool::typed`] derives it by itself from
    /// a [`crate::Json`]`<T>` return type; this is for handlers that return
    /// [`ToolOutput`] (say, a structured result or an `isError` one), and
    /// replaces a derived schema.
    pub fn output<T: JsonSchema>(self) -> Self {
        self.with("outputSchema", schema_of::<T>())
    }
}

/// The arguments of a tool that takes none: its `inputSchema` is
/// `{"type":"object","properties":{}}`, and whatever arguments a call
/// carries are ignored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NoArgs;

impl<'de> Deserialize<'de> for NoArgs {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        serde::de::IgnoredAny::deserialize(deserializer).map(|_| NoArgs)
    }
}

impl JsonSchema for NoArgs {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "NoArgs".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": "object", "properties": {} })
    }
}

/// The `requestedSchema` of an elicitation form for `T`: a flat object of
/// primitive properties (string, number, integer, boolean, enums), as
/// elicitation allows. An optional field (`Option<X>`) is `X` and not required.
pub(crate) fn elicitation_schema<T: JsonSchema>() -> Result<Value, ToolError> {
    let schema = schema_of::<T>();
    let properties = schema.get("properties").and_then(Value::as_object).cloned().unwrap_or_default();
    let mut flat = Map::new();
    for (name, mut property) in properties {
        if let Some(Value::Array(types)) = property.get("type") {
            let non_null: Vec<&Value> = types.iter().filter(|t| *t != "null").collect();
            if let [only] = non_null.as_slice() {
                let only = (*only).clone();
                property["type"] = only;
            }
        }
        let ty = property.get("type").and_then(Value::as_str).unwrap_or_default();
        if !matches!(ty, "string" | "number" | "integer" | "boolean") {
            return Err(ToolError::internal(format!(
                "elicitation form field {name:?} is not a string, number, integer, boolean or enum"
            )));
        }
        flat.insert(name, property);
    }
    let mut form = Map::new();
    form.insert("type".into(), Value::String("object".into()));
    form.insert("properties".into(), Value::Object(flat));
    if let Some(required) = schema.get("required") {
        form.insert("required".into(), required.clone());
    }
    Ok(Value::Object(form))
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::json;

    use super::*;

    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)]
    struct Approval {
        approve: bool,
        note: Option<String>,
        level: Level,
    }

    #[derive(Deserialize, JsonSchema)]
    #[serde(rename_all = "lowercase")]
    enum Level {
        Low,
        High,
    }

    #[test]
    fn elicitation_forms_are_flat_and_primitive() {
        let form = elicitation_schema::<Approval>().unwrap();
        assert_eq!(form["type"], "object");
        assert_eq!(form["properties"]["approve"], json!({ "type": "boolean" }));
        assert_eq!(form["properties"]["note"]["type"], "string");
        assert_eq!(form["properties"]["level"]["enum"], json!(["low", "high"]));
        assert_eq!(form["required"], json!(["approve", "level"]));
        #[derive(Deserialize, JsonSchema)]
        #[allow(dead_code)]
        struct Nested {
            inner: Vec<String>,
        }
        assert!(elicitation_schema::<Nested>().is_err());
    }

    #[test]
    fn the_type_name_is_no_title() {
        #[derive(JsonSchema)]
        #[allow(dead_code)]
        struct Named {
            n: u8,
        }
        #[derive(JsonSchema)]
        #[schemars(title = "A title")]
        #[allow(dead_code)]
        struct Titled {
            n: u8,
        }
        assert_eq!(schema_of::<Named>().get("title"), None);
        assert_eq!(schema_of::<Titled>()["title"], "A title");
    }

    #[test]
    fn no_args_is_an_empty_object_and_ignores_what_it_gets() {
        assert_eq!(schema_of::<NoArgs>(), json!({ "type": "object", "properties": {} }));
        assert_eq!(decode::<NoArgs>(json!({})), Ok(NoArgs));
        assert_eq!(decode::<NoArgs>(json!({ "stray": [1, 2] })), Ok(NoArgs));
    }

    #[test]
    fn decoding_names_the_field() {
        #[derive(Deserialize, Debug)]
        #[allow(dead_code)]
        struct Args {
            n: u8,
        }
        assert_eq!(decode::<Args>(json!({ "n": 300 })).unwrap_err(), "n: invalid value: integer `300`, expected u8");
        assert!(decode::<Args>(json!({})).unwrap_err().contains("missing field `n`"));
    }
}
