//! The JSON log lines of the subscriber `init` installs: inside a trace they
//! lead with its ids (the formatter finds the dispatcher it belongs to), and
//! a trace-only span (`log.omit`) is built for the OpenTelemetry layer but
//! shows in no line. The test runs itself again as a child process, whose
//! stderr (where the lines go) it reads.
#![cfg(feature = "exporters")]

use std::{collections::BTreeMap, process::Command};

use presa_telemetry::{LogFormat, init_with, propagation};
use tracing::field::Empty;

const CHILD: &str = "PRESA_JSON_INIT_TEST_CHILD";
const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

#[test]
fn json_lines_from_init_lead_with_trace_ids_and_omit_trace_only_spans() {
    if std::env::var_os(CHILD).is_some() {
        let _guard = init_with("json-init-test", LogFormat::Json, true).unwrap();
        let span = tracing::info_span!("request", trace_id = Empty);
        let map = BTreeMap::from([("traceparent".to_string(), TP.to_string())]);
        assert!(propagation::set_parent(&span, propagation::from_map(&map).unwrap()));
        span.in_scope(|| tracing::info!(answer = 42, "inside"));
        let omitted = tracing::info_span!("redis", log.omit = Empty);
        assert!(!omitted.is_disabled(), "built for the OpenTelemetry layer");
        span.in_scope(|| omitted.in_scope(|| tracing::info!("in a round trip")));
        return;
    }
    let mut child = Command::new(std::env::current_exe().unwrap());
    child.args(["--exact", "json_lines_from_init_lead_with_trace_ids_and_omit_trace_only_spans", "--nocapture"]);
    child.env(CHILD, "1").env_remove("RUST_LOG");
    for var in ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] {
        child.env_remove(var);
    }
    let out = child.output().unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "{stderr}");
    let lines: Vec<serde_json::Value> =
        stderr.lines().filter(|l| l.starts_with('{')).map(|l| serde_json::from_str(l).unwrap()).collect();
    let line = |message: &str| {
        lines.iter().find(|l| l["fields"]["message"] == message).unwrap_or_else(|| panic!("{message}: {stderr}"))
    };
    let inside = line("inside");
    assert_eq!(inside["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736", "{inside}");
    assert_eq!(inside["fields"]["answer"], 42);
    let round_trip = line("in a round trip");
    assert_eq!(round_trip["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736", "{round_trip}");
    let spans: Vec<&str> =
        round_trip["spans"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(spans, ["request"], "{round_trip}");
}
