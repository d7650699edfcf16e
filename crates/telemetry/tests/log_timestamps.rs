//! The log lines of the subscriber `init` installs, in both formats, begin
//! with (text) or carry (JSON, `timestamp`) the RFC 3339 UTC time with
//! microseconds that `tracing-subscriber`'s default timer writes, as the
//! event happened. Each test runs itself again as a child process (the
//! subscriber is process-wide), whose stderr it reads.
#![cfg(feature = "exporters")]

use std::{
    process::Command,
    time::{Duration, SystemTime},
};

use presa_telemetry::{LogFormat, init_with};

const CHILD: &str = "PRESA_LOG_TIMESTAMPS_TEST_CHILD";

/// Log one line in `format` (in the child), or run the child and return its stderr.
fn lines_of(test: &str, format: LogFormat) -> (String, SystemTime, SystemTime) {
    if std::env::var_os(CHILD).is_some() {
        let _guard = init_with("log-timestamps-test", format, false).unwrap();
        tracing::info!(answer = 42, "stamped");
        std::process::exit(0);
    }
    let mut child = Command::new(std::env::current_exe().unwrap());
    child.args(["--exact", test, "--nocapture"]).env(CHILD, "1").env_remove("RUST_LOG");
    for var in ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] {
        child.env_remove(var);
    }
    // Whole seconds: the stamp's microseconds may sit either side of a bound read here.
    let before = SystemTime::now() - Duration::from_secs(1);
    let out = child.output().unwrap();
    let after = SystemTime::now() + Duration::from_secs(1);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(out.status.success(), "{stderr}");
    (stderr, before, after)
}

/// `stamp` is `YYYY-MM-DDTHH:MM:SS.ffffffZ` and falls between `before` and `after`.
fn assert_stamp(stamp: &str, before: SystemTime, after: SystemTime) {
    let b = stamp.as_bytes();
    assert_eq!(b.len(), 27, "{stamp}");
    let shape = b.iter().enumerate().all(|(i, c)| match i {
        4 | 7 => *c == b'-',
        10 => *c == b'T',
        13 | 16 => *c == b':',
        19 => *c == b'.',
        26 => *c == b'Z',
        _ => c.is_ascii_digit(),
    });
    assert!(shape, "{stamp}");
    let at = humantime::parse_rfc3339(stamp).unwrap();
    assert!(before <= at && at <= after, "{stamp}");
}

#[test]
fn text_lines_begin_with_the_time() {
    let (stderr, before, after) = lines_of("text_lines_begin_with_the_time", LogFormat::Text);
    let line = stderr.lines().find(|l| l.contains("stamped")).unwrap_or_else(|| panic!("{stderr}"));
    let (stamp, rest) = line.split_once(' ').unwrap();
    assert_stamp(stamp, before, after);
    assert!(rest.trim_start().starts_with("INFO "), "{line}");
}

#[test]
fn json_lines_carry_the_time() {
    let (stderr, before, after) = lines_of("json_lines_carry_the_time", LogFormat::Json);
    let line = stderr.lines().find(|l| l.contains("stamped")).unwrap_or_else(|| panic!("{stderr}"));
    let line: serde_json::Value = serde_json::from_str(line).unwrap();
    assert_stamp(line["timestamp"].as_str().unwrap(), before, after);
    assert_eq!(line["fields"]["answer"], 42);
}
