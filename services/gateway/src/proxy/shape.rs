//! What a shaped tool's calls go through ([`CallShape`], built by
//! `catalog::shape` from the tool's `[[upstream.tool]]` table): arguments
//! pinned by the operator (a call that gives one is refused with `-32602`,
//! never silently overwritten), defaults for arguments a call leaves out,
//! and the cap on the size of what is passed back.

use std::io::Write;

use presa_protocol::{codes, jsonrpc::ErrorObject};
use presa_server::{ArgumentsRefused, ToolError, ToolOutput};
use serde_json::{Map, Value};

/// The arguments and the result cap of one shaped tool.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CallShape {
    /// The name clients call it by (for messages).
    pub tool: String,
    /// Arguments set on every call; a call may not give them.
    pub pin: Map<String, Value>,
    /// Arguments set when a call leaves them out.
    pub defaults: Map<String, Value>,
    /// The most bytes its result's JSON may take.
    pub max_output_bytes: Option<u64>,
}

impl CallShape {
    /// Refuse a call that gives a pinned argument, saying which.
    pub fn check_arguments(&self, arguments: &Value) -> Result<(), ArgumentsRefused> {
        let given: Vec<&str> =
            self.pin.keys().filter(|k| arguments.get(k.as_str()).is_some()).map(String::as_str).collect();
        if given.is_empty() {
            return Ok(());
        }
        Err(ArgumentsRefused(format!(
            "Invalid arguments for tool {}: {} set by the server's configuration and may not be given ({})",
            self.tool,
            if given.len() == 1 { "this argument is" } else { "these arguments are" },
            given.join(", ")
        )))
    }

    /// The arguments the upstream is called with: the call's, with every
    /// pinned argument and the defaults of those it left out; a call that
    /// gives a pinned argument is refused (`-32602`), as [`check_arguments`](Self::check_arguments) does.
    pub fn arguments(&self, arguments: Value) -> Result<Value, ToolError> {
        self.check_arguments(&arguments)
            .map_err(|why| ToolError::Rpc(ErrorObject::new(codes::INVALID_PARAMS, why.0)))?;
        let mut arguments = match arguments {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        for (k, v) in &self.defaults {
            arguments.entry(k.clone()).or_insert_with(|| v.clone());
        }
        for (k, v) in &self.pin {
            arguments.insert(k.clone(), v.clone());
        }
        Ok(Value::Object(arguments))
    }

    /// The output as passed on: a result whose JSON is over the cap becomes
    /// a tool error saying so (the upstream's result is dropped).
    pub fn cap(&self, output: ToolOutput) -> ToolOutput {
        let Some(cap) = self.max_output_bytes else { return output };
        let ToolOutput::Complete(result) = &output else { return output };
        let size = json_size(result);
        if size <= cap {
            return output;
        }
        tracing::warn!(tool = %self.tool, size, cap, "a result over the tool's max_output_bytes was not passed on");
        ToolOutput::error(format!(
            "The result of tool {} was not passed on: it takes {size} bytes, over the {cap} its configuration \
             allows (max_output_bytes). Ask for less (a narrower path, fewer lines) and call it again.",
            self.tool
        ))
    }
}

/// How many bytes `value`'s compact JSON takes, counted without writing it out.
fn json_size(value: &Value) -> u64 {
    struct Count(u64);
    impl Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing a Value to a sink that never fails cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn shape() -> CallShape {
        let map = |v: Value| v.as_object().cloned().unwrap_or_default();
        CallShape {
            tool: "fs_ls".into(),
            pin: map(json!({ "path": "/srv/data" })),
            defaults: map(json!({ "sortBy": "size" })),
            max_output_bytes: Some(64),
        }
    }

    #[test]
    fn pins_are_set_and_defaults_fill_only_what_the_call_left_out() {
        let s = shape();
        assert_eq!(s.arguments(json!({})).unwrap(), json!({ "path": "/srv/data", "sortBy": "size" }));
        assert_eq!(
            s.arguments(json!({ "sortBy": "name", "x": 1 })).unwrap(),
            json!({ "path": "/srv/data", "sortBy": "name", "x": 1 })
        );
        assert_eq!(CallShape::default().arguments(json!({ "a": 1 })).unwrap(), json!({ "a": 1 }));
    }

    #[test]
    fn a_call_that_gives_a_pinned_argument_is_refused_not_overwritten() {
        let s = shape();
        let why = s.check_arguments(&json!({ "path": "/etc" })).unwrap_err();
        assert!(why.0.contains("tool fs_ls") && why.0.contains("may not be given (path)"), "{why}");
        // Even a null is a value given.
        assert!(s.check_arguments(&json!({ "path": null })).is_err());
        let Err(ToolError::Rpc(e)) = s.arguments(json!({ "path": "/etc" })) else { panic!("not refused") };
        assert_eq!(e.code, codes::INVALID_PARAMS);
        assert!(s.check_arguments(&json!({ "sortBy": "name" })).is_ok());
    }

    #[test]
    fn a_result_over_the_cap_becomes_a_tool_error() {
        let s = shape();
        let small = ToolOutput::text("ok");
        assert!(matches!(s.cap(small), ToolOutput::Complete(v) if v["content"][0]["text"] == "ok"));
        let big = ToolOutput::text("x".repeat(100));
        let ToolOutput::Complete(v) = s.cap(big) else { panic!("not a result") };
        assert_eq!(v["isError"], true);
        let text = v["content"][0]["text"].as_str().unwrap();
        assert!(text.contains("fs_ls") && text.contains("over the 64") && !text.contains("xxxx"), "{text}");
        let exact = json!({ "content": [{ "type": "text", "text": "" }] });
        let at_cap = CallShape { max_output_bytes: Some(json_size(&exact)), ..shape() };
        assert!(matches!(at_cap.cap(ToolOutput::Complete(exact)), ToolOutput::Complete(v) if v["isError"].is_null()));
    }
}
