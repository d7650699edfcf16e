//! The metrics of tools' concurrency limits (`Tool::concurrency`): the
//! permits this process holds, by tool (summed over the pods: the permits in
//! use), and the runs that had to wait for one.

use metrics::{counter, gauge};

/// Permits of a tool's concurrency limit held by this process's runs, by `tool`.
pub const TOOL_PERMITS_HELD: &str = "presa_tool_permits_held";
/// Runs of a concurrency-limited tool that found no permit free and waited
/// (a task put off in line, a call run inside its request held), by `tool`.
pub const TOOL_PERMIT_WAITS: &str = "presa_tool_permit_waits_total";

/// A run of `tool` took (`delta` 1) or gave back (`delta` -1) a permit.
pub fn permit_held(tool: &str, delta: f64) {
    gauge!(TOOL_PERMITS_HELD, "tool" => tool.to_string()).increment(delta);
}

/// A run of `tool` found no permit free.
pub fn permit_waited(tool: &str) {
    counter!(TOOL_PERMIT_WAITS, "tool" => tool.to_string()).increment(1);
}
