//! What each MCP request leaves behind, in both eras: its server span and
//! its metrics ([`Observed`]), and the `method` labels of what never reaches
//! dispatch ([`UNKNOWN_METHOD`], [`NOTIFICATION`]).

use std::{fmt, io::Write as _, time::Instant};

use axum::http::HeaderMap;
use presa_protocol::{
    Method, codes,
    jsonrpc::{ErrorObject, Request, RequestId},
};
use presa_server::{Reply, ToolRef};
use presa_telemetry::{metrics, propagation};
use serde_json::Value;
use tracing::{Span, field::Empty};

use crate::app::App;

/// The `method` label of requests that were not parsed, or name no known method.
pub(crate) const UNKNOWN_METHOD: &str = "unknown";
/// The `method` label of notifications (answered 202, never dispatched).
pub(crate) const NOTIFICATION: &str = "notification";
/// Longest client-chosen string copied into a span attribute.
const MAX_ATTRIBUTE_LEN: usize = 128;

/// `s`, cut to at most [`MAX_ATTRIBUTE_LEN`] bytes on a character boundary.
fn bounded(s: &str) -> &str {
    if s.len() <= MAX_ATTRIBUTE_LEN {
        return s;
    }
    let mut end = MAX_ATTRIBUTE_LEN;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The name of a request's span: `<method>`, or `<method> <target>`.
struct SpanName<'a> {
    method: &'a str,
    target: Option<&'a str>,
}

impl fmt::Display for SpanName<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.target {
            Some(t) => write!(f, "{} {t}", self.method),
            None => f.write_str(self.method),
        }
    }
}

/// Room for an `i64` in decimal (a numeric request id, recorded as the
/// same text `to_string` gives, without allocating it).
#[derive(Default)]
struct NumberText([u8; 20]);

impl NumberText {
    fn of(&mut self, n: i64) -> &str {
        let mut rest = &mut self.0[..];
        // 20 bytes hold every i64 ("-9223372036854775808"): the write cannot fail.
        let _ = write!(rest, "{n}");
        let len = 20 - rest.len();
        std::str::from_utf8(&self.0[..len]).unwrap_or_default()
    }
}

/// The span and metrics of one MCP request.
///
/// The span is a server span named `<mcp.method.name> <target>` (the tool or
/// prompt, when the catalog knows it) with the OpenTelemetry MCP attributes.
/// Its parent is `params._meta.traceparent` when present, else the HTTP
/// `traceparent` header (see [`propagation::adopt_request_parent`]).
/// Dropped without an outcome (the client went away): counted as `cancelled`.
pub(crate) struct Observed {
    pub(crate) span: Span,
    method: &'static str,
    metrics: metrics::RequestMetrics,
    started: Instant,
    done: bool,
    /// The tool a `tools/call` names, when the catalog has it.
    pub(crate) tool: Option<ToolRef>,
}

impl Observed {
    /// The span and metrics of `req`; `version`: its protocol version when
    /// already known to be valid (else recorded later, [`Self::record_version`]).
    pub(crate) fn start(
        app: &App,
        headers: &HeaderMap,
        req: &Request,
        started: Instant,
        version: Option<&str>,
    ) -> Self {
        let known = req.method.parse::<Method>().ok();
        let method = known.map_or(UNKNOWN_METHOD, Method::as_str);
        let name_param = req.params.get("name").and_then(Value::as_str);
        // The tool is looked up here, once, and carried through admission and dispatch.
        let tool = match (known, name_param) {
            (Some(Method::ToolsCall), Some(name)) => app.server.catalog().tool_ref(name),
            _ => None,
        };
        let target = match known {
            Some(Method::ToolsCall) => tool.as_ref().map(|t| t.name()),
            Some(Method::PromptsGet) => name_param.filter(|n| app.server.catalog().prompt(n).is_some()),
            _ => None,
        };
        // The GenAI attributes, given with the span's other fields (a `None`
        // is left unset, as `Empty`): a `record` each would cost a dispatch.
        let (operation, tool_name, prompt_name) = match (known, name_param) {
            (Some(Method::ToolsCall), Some(tool)) => (Some("execute_tool"), Some(bounded(tool)), None),
            (Some(Method::PromptsGet), Some(prompt)) => (None, None, Some(bounded(prompt))),
            _ => (None, None, None),
        };
        let mut digits = NumberText::default();
        let request_id = match &req.id {
            RequestId::Number(n) => digits.of(*n),
            RequestId::String(s) => bounded(s),
        };
        let span = tracing::info_span!(
            "mcp.request",
            // Formatted only by a layer that reads it (the OpenTelemetry one;
            // text logs leave `otel.*` out): no string is built per request for nothing.
            otel.name = %SpanName { method, target },
            otel.kind = "server",
            mcp.method.name = bounded(&req.method),
            jsonrpc.request.id = request_id,
            mcp.protocol.version = version,
            network.transport = "tcp",
            network.protocol.name = "http",
            gen_ai.operation.name = operation,
            gen_ai.tool.name = tool_name,
            gen_ai.prompt.name = prompt_name,
            presa.task.id = Empty,
            trace_id = Empty,
            error.type = Empty,
            rpc.response.status_code = Empty,
            otel.status_code = Empty,
            otel.status_description = Empty,
        );
        let meta = req.params.get("_meta").and_then(Value::as_object);
        propagation::adopt_request_parent(&span, meta, headers);
        propagation::record_trace_id(&span);
        Observed { span, method, metrics: app.metrics.clone(), started, done: false, tool }
    }

    /// Record the request's protocol version on its span.
    pub(crate) fn record_version(&self, version: &str) {
        self.span.record("mcp.protocol.version", version);
    }

    /// Count the request under `method` (a legacy-only method [`Method`] does not name).
    pub(crate) fn relabel(&mut self, method: &'static str) {
        self.method = method;
        self.span.record("otel.name", method);
    }

    fn count(&mut self, outcome: impl Into<metrics::SharedString>) {
        if !self.done {
            self.done = true;
            self.metrics.record(self.method, outcome, self.started.elapsed());
        }
    }

    /// A result: `ok`; a tool result with `isError: true` marks the span `tool_error`.
    pub(crate) fn succeeded(&mut self, result: &Value) {
        if result.get("isError") == Some(&Value::Bool(true)) {
            self.span.record("error.type", "tool_error");
            self.span.record("otel.status_code", "error");
        }
        self.count("ok");
    }

    /// A result presa wrote as text (a task's `CreateTaskResult` or
    /// `tasks/get` result: never a tool error at its top): `ok`.
    pub(crate) fn succeeded_written(&mut self) {
        self.count("ok");
    }

    /// A JSON-RPC error: its code is the outcome and the span's `error.type`.
    pub(crate) fn failed(&mut self, e: &ErrorObject) {
        let code = e.code.to_string();
        self.span.record("error.type", code.as_str());
        self.span.record("rpc.response.status_code", code.as_str());
        self.span.record("otel.status_description", e.message.as_str());
        self.count(code);
    }

    pub(crate) fn opened(&mut self) {
        self.count("ok");
    }

    pub(crate) fn replied(&mut self, reply: &Reply) {
        match reply {
            Reply::Result(v) => self.succeeded(v),
            Reply::Written(_) => self.succeeded_written(),
            Reply::Error(e) | Reply::InsufficientScope { error: e, .. } => self.failed(e),
            Reply::Stream(_) => self.failed(&ErrorObject::new(codes::INTERNAL_ERROR, "Internal error")),
        }
    }
}

impl Drop for Observed {
    fn drop(&mut self) {
        if !self.done {
            self.span.in_scope(|| tracing::debug!("client went away before the reply"));
            self.count("cancelled");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_ids_read_as_to_string_writes_them() {
        for n in [0, 7, -1, 42_000, i64::MAX, i64::MIN] {
            assert_eq!(NumberText::default().of(n), n.to_string());
        }
    }

    #[test]
    fn span_names_are_the_method_and_its_target() {
        assert_eq!(SpanName { method: "tools/call", target: Some("echo") }.to_string(), "tools/call echo");
        assert_eq!(SpanName { method: "tasks/get", target: None }.to_string(), "tasks/get");
    }
}
