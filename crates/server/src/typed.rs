//! Typed tools: the input schema is derived from the arguments' Rust type
//! (`schemars`, JSON Schema 2020-12) and the arguments are decoded into it,
//! so the schema a client sees and the decoding cannot drift apart.
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
//! let tool = Tool::typed("count_files", "Counts the entries of a directory.", count).output::<Count>();
//! assert_eq!(tool.input_schema()["properties"]["path"]["type"], "string");
//! ```

use std::{future::Future, marker::PhantomData};

use schemars::{JsonSchema, generate::SchemaSettings};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::{
    context::ToolContext,
    output::IntoToolOutput,
    tool::{Tool, ToolError, ToolHandler, ToolOutput},
};

/// The JSON Schema 2020-12 of `T`, subschemas inlined, without `$schema`.
pub(crate) fn schema_of<T: JsonSchema>() -> Value {
    let settings = SchemaSettings::draft2020_12().with(|s| {
        s.inline_subschemas = true;
        s.meta_schema = None;
    });
    settings.into_generator().into_root_schema_for::<T>().to_value()
}

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
    /// into [`ToolError`].
    pub fn typed<A, F, Fut, R>(name: impl Into<String>, description: impl Into<String>, handler: F) -> Self
    where
        A: DeserializeOwned + JsonSchema + Send + 'static,
        F: Fn(ToolContext, A) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = R> + Send + 'static,
        R: IntoToolOutput + 'static,
    {
        Tool::new(name, description, schema_of::<A>(), Typed { f: handler, args: PhantomData })
    }

    /// Declare the tool's `outputSchema` from `T`, the type its [`crate::Json`]
    /// results carry as `structuredContent`.
    pub fn output<T: JsonSchema>(self) -> Self {
        self.with("outputSchema", schema_of::<T>())
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
