//! The JSON Schema a Rust type stands for, as tools and outputs declare
//! it: [`schema_of`], used by `typed.rs` (input schemas) and `output.rs`
//! (output schemas) alike.

use schemars::{JsonSchema, generate::SchemaSettings};
use serde_json::Value;

/// The JSON Schema 2020-12 of `T`, subschemas inlined, without `$schema`,
/// and without the root `title` schemars fills in with the Rust type's name
/// (an implementation detail, not a title; one set with
/// `#[schemars(title = "…")]` to another text stays).
pub(crate) fn schema_of<T: JsonSchema>() -> Value {
    let settings = SchemaSettings::draft2020_12().with(|s| {
        s.inline_subschemas = true;
        s.meta_schema = None;
    });
    let mut schema = settings.into_generator().into_root_schema_for::<T>().to_value();
    if let Value::Object(root) = &mut schema
        && root.get("title").and_then(Value::as_str) == Some(T::schema_name().as_ref())
    {
        root.remove("title");
    }
    schema
}
