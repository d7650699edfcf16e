//! The cells and tables `presa admin` prints: aligned columns, short ages
//! (`4s ago`), `-` for what is missing, the next page's cursor.

use serde_json::Value;

/// `ms` before `now` in words: `4s ago`, `3m ago`, `2h ago`, `5d ago`.
pub(super) fn ago(now: u64, at: &Value) -> String {
    let Some(at) = at.as_u64() else { return "-".into() };
    age(now.saturating_sub(at)) + " ago"
}

/// A duration in ms, short: `850ms`, `4s`, `3m`, `2h`, `5d`.
pub(super) fn age(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms}ms"),
        1_000..60_000 => format!("{}s", ms / 1_000),
        60_000..3_600_000 => format!("{}m", ms / 60_000),
        3_600_000..86_400_000 => format!("{}h", ms / 3_600_000),
        _ => format!("{}d", ms / 86_400_000),
    }
}

/// A cell: a string as it is, any other value as JSON, null as `-`, every
/// control character escaped (see [`printable`]).
pub(super) fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => printable(s),
        other => printable(&other.to_string()),
    }
}

/// `s` safe for a terminal: tenant data (a status message, a tool's error)
/// may carry escape sequences (OSC 52 writing the clipboard, CSI clearing
/// the screen) or line breaks that forge a row. Every C0 and C1 control
/// character and DEL becomes a visible `\u{…}` (tab, newline and carriage
/// return as `\t`, `\n`, `\r`), as do the bidirectional overrides that
/// reorder what a terminal shows.
pub(super) fn printable(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}') => {
                out.push_str(&format!("\\u{{{:x}}}", c as u32));
            }
            c => out.push(c),
        }
    }
    out
}

/// Rows under a header, each column as wide as its widest cell.
pub(super) fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let padded: Vec<String> = cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        padded.join("  ").trim_end().to_string() + "\n"
    };
    let mut out = line(header.iter().map(ToString::to_string).collect());
    for row in rows {
        out += &line(row.clone());
    }
    out
}

pub(super) fn rows(v: &Value, key: &str, row: impl Fn(&Value) -> Vec<String>) -> Vec<Vec<String>> {
    v[key].as_array().map(|a| a.iter().map(row).collect()).unwrap_or_default()
}

/// A task's status history: `working 3s ago → completed 1s ago`.
pub(super) fn history(v: &Value, now: u64) -> String {
    match v.as_array() {
        Some(h) if !h.is_empty() => {
            h.iter().map(|c| format!("{} {}", text(&c["status"]), ago(now, &c["atMs"]))).collect::<Vec<_>>().join(" → ")
        }
        _ => "-".into(),
    }
}

/// When a waiting task's next try is due (its `retries`): `in 45s`,
/// `due 3s ago` (late: no worker has claimed it yet), with ` (rate turn)`
/// when it waits for its turn under its tool's rate rather than for a
/// retry; `-` when not waiting.
pub(super) fn due(now: u64, retries: &Value) -> String {
    let when = match retries["dueAtMs"].as_u64() {
        None => return "-".into(),
        Some(at) if at > now => format!("in {}", age(at - now)),
        Some(at) => format!("due {}", ago(now, &Value::from(at))),
    };
    if retries["rateTurn"] == true { when + " (rate turn)" } else { when }
}

/// A task's failed tries (its `retries`): how many, then one line per try
/// the record kept, under the value's column (`#1 4s ago: upstream 503,
/// put off 1m`); `-` when none failed.
pub(super) fn tries(retries: &Value, now: u64) -> String {
    let failed = retries["failed"].as_u64().unwrap_or(0);
    if failed == 0 {
        return "-".into();
    }
    let mut out = failed.to_string();
    for t in retries["log"].as_array().into_iter().flatten() {
        // To the nearest second: the worker set the delay a moment before the
        // store's write recorded it, so 10 min shows as 10m, not 9m.
        let put_off = t["delayMs"].as_u64().map_or("-".into(), |ms| age(ms.saturating_add(500) / 1000 * 1000));
        out += &format!(
            "\n{:16}#{} {}: {}, put off {put_off}",
            "",
            text(&t["number"]),
            ago(now, &t["atMs"]),
            text(&t["reason"])
        );
    }
    out
}

/// `next: <cursor>` when a page has one (pass it as `--cursor`).
pub(super) fn next_line(v: &Value) -> String {
    v["next"].as_str().map(|n| format!("next page: --cursor {n}\n")).unwrap_or_default()
}

/// `presa admin limits`: a row per key of each tool's concurrency limit in
/// use (permits in use of the limit, waiters), and the tool's rate.
pub(super) fn limits(v: &Value) -> String {
    let mut all = Vec::new();
    for t in v["tools"].as_array().into_iter().flatten() {
        let c = &t["concurrency"];
        let limit = c["limit"].as_u64().map_or("-".to_string(), |n| {
            let by = match (c["perTenant"].as_bool() == Some(true), c["perArgument"].as_str()) {
                (true, Some(arg)) => format!(" per tenant and {arg}"),
                (true, None) => " per tenant".to_string(),
                (false, Some(arg)) => format!(" per {arg}"),
                (false, None) => String::new(),
            };
            format!("{n} at once{by}")
        });
        let rate = match t["rate"]["perSecond"].as_f64() {
            Some(r) => format!("{r}/s, bursts of {}", text(&t["rate"]["burst"])),
            None => "-".into(),
        };
        let keys = c["keys"].as_array().cloned().unwrap_or_default();
        if keys.is_empty() {
            let idle = if c.is_null() { "-" } else { "0" };
            all.push(vec![text(&t["tool"]), limit, "-".into(), idle.into(), idle.into(), rate]);
            continue;
        }
        for k in keys {
            let key = k["key"]
                .as_str()
                .filter(|s| !s.is_empty())
                .map_or("(all)".into(), |s| printable(&s.replace('\0', " ")));
            all.push(vec![text(&t["tool"]), limit.clone(), key, text(&k["inUse"]), text(&k["waiting"]), rate.clone()]);
        }
    }
    table(&["TOOL", "CONCURRENCY", "KEY", "IN USE", "WAITING", "RATE"], &all)
}

/// `presa admin upstreams`: a row per upstream (its worst state across
/// processes, connections in use of the pool, restarts, catalog version and
/// tool count, calls, errors, the last error a process reports), then a row
/// per tool called with its calls and errors.
pub(super) fn upstreams(v: &Value) -> String {
    let mut all = Vec::new();
    for u in v["upstreams"].as_array().into_iter().flatten() {
        let last_error = u["processes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["lastError"].is_string())
            .map_or_else(|| "-".into(), |p| format!("{}: {}", text(&p["node"]), text(&p["lastError"])));
        all.push(vec![
            text(&u["name"]),
            "(all)".into(),
            text(&u["state"]),
            format!("{}/{}", text(&u["inUse"]), text(&u["pool"])),
            text(&u["restarts"]),
            format!("v{}, {} tools", text(&u["catalogVersion"]), text(&u["toolCount"])),
            text(&u["calls"]),
            text(&u["errors"]),
            last_error,
        ]);
        for t in u["tools"].as_array().into_iter().flatten() {
            let dash = || "-".to_string();
            all.push(vec![
                text(&u["name"]),
                text(&t["tool"]),
                dash(),
                dash(),
                dash(),
                dash(),
                text(&t["calls"]),
                text(&t["errors"]),
                dash(),
            ]);
        }
    }
    table(&["UPSTREAM", "TOOL", "STATE", "IN USE", "RESTARTS", "CATALOG", "CALLS", "ERRORS", "LAST ERROR"], &all)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn tables_align_and_ages_read_short() {
        let t = table(&["A", "LONGER"], &[vec!["xyz".into(), "1".into()], vec!["q".into(), "22".into()]]);
        assert_eq!(t, "A    LONGER\nxyz  1\nq    22\n");
        assert_eq!(
            [age(5), age(4_500), age(180_000), age(7_200_000), age(3 * 86_400_000)],
            ["5ms", "4s", "3m", "2h", "3d"]
        );
        assert_eq!(ago(10_000, &json!(4_000)), "6s ago");
        assert_eq!(ago(10_000, &Value::Null), "-");
    }

    #[test]
    fn failed_tries_and_the_next_due_read_short() {
        let r = json!({ "failed": 2, "dueAtMs": 70_000, "log": [
            { "number": 1, "atMs": 1_000, "reason": "upstream 503", "delayMs": 4_000 },
            { "number": 2, "atMs": 10_000, "reason": "rate limited\u{1b}[2J", "delayMs": 60_000 },
        ] });
        assert_eq!(
            tries(&r, 25_000),
            "2\n                #1 24s ago: upstream 503, put off 4s\n                #2 15s ago: rate limited\\u{1b}[2J, put off 1m"
        );
        assert_eq!(due(25_000, &r), "in 45s");
        assert_eq!(due(73_000, &r), "due 3s ago", "late");
        let turn = json!({ "failed": 0, "dueAtMs": 70_000, "rateTurn": true });
        assert_eq!(due(25_000, &turn), "in 45s (rate turn)");
        assert_eq!(
            (tries(&json!({ "failed": 0, "dueAtMs": null }), 0), due(0, &Value::Null)),
            ("-".into(), "-".into())
        );
    }

    #[test]
    fn escape_codes_in_tenant_data_are_printed_harmlessly() {
        let osc52 = "\u{1b}]52;c;cm0gLXJmIH4=\u{7}";
        let clear = "\u{1b}[2J\u{9b}31m";
        let forged = "ok\ntask-evil  acme  root  completed";
        assert_eq!(text(&json!(osc52)), "\\u{1b}]52;c;cm0gLXJmIH4=\\u{7}");
        assert_eq!(text(&json!(clear)), "\\u{1b}[2J\\u{9b}31m");
        assert_eq!(text(&json!(forged)), "ok\\ntask-evil  acme  root  completed");
        assert_eq!(text(&json!("a\u{202e}b\u{7f}")), "a\\u{202e}b\\u{7f}");
        assert_eq!(text(&json!({ "k": "\u{1b}x" })), "{\"k\":\"\\u001bx\"}", "JSON escapes it already");
        assert_eq!(text(&json!("plain café ✓")), "plain café ✓");
        let t = table(&["MESSAGE"], &[vec![text(&json!(forged))]]);
        assert_eq!(t.lines().count(), 2, "no forged row: {t}");
        assert!(!t.chars().any(|c| c.is_control() && c != '\n'), "{t:?}");
    }

    #[test]
    fn limits_list_each_key_of_a_concurrency_limit_and_rates() {
        let v = serde_json::json!({ "tools": [
            { "tool": "deploy", "rate": null, "concurrency": { "limit": 1, "perTenant": false, "perArgument": "environment",
              "keys": [{ "key": "environment=production", "inUse": 1, "waiting": 2 }] } },
            { "tool": "metered_job", "concurrency": null, "rate": { "perSecond": 5.0, "burst": 5, "perTenant": false } },
        ] });
        let out = limits(&v);
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines[1].contains("deploy") && lines[1].contains("1 at once per environment"), "{out}");
        assert!(
            lines[1].contains("environment=production") && lines[1].contains(" 1 ") && lines[1].contains(" 2 "),
            "{out}"
        );
        assert!(lines[2].contains("metered_job") && lines[2].contains("5/s, bursts of 5"), "{out}");
    }

    #[test]
    fn upstreams_list_each_upstream_then_its_tools() {
        let v = json!({ "upstreams": [{
            "name": "py", "state": "failing", "pool": 4, "inUse": 1, "restarts": 2, "catalogVersion": 3,
            "toolCount": 12, "calls": 5, "errors": 2,
            "tools": [{ "tool": "add", "calls": 3, "errors": 0 }, { "tool": "flaky", "calls": 2, "errors": 2 }],
            "processes": [{ "node": "w-1", "lastError": null }, { "node": "w-2", "lastError": "starting \"py\": gone\u{1b}[2J" }],
        }] });
        let out = upstreams(&v);
        let lines: Vec<&str> = out.lines().collect();
        assert!(lines[0].starts_with("UPSTREAM  TOOL") && lines[0].contains("LAST ERROR"), "{out}");
        let cells =
            |l: &str| l.split("  ").map(str::trim).filter(|c| !c.is_empty()).map(String::from).collect::<Vec<_>>();
        assert_eq!(
            cells(lines[1]),
            ["py", "(all)", "failing", "1/4", "2", "v3, 12 tools", "5", "2", "w-2: starting \"py\": gone\\u{1b}[2J"],
            "{out}"
        );
        assert_eq!(cells(lines[2]), ["py", "add", "-", "-", "-", "-", "3", "0", "-"], "{out}");
        assert_eq!(cells(lines[3]), ["py", "flaky", "-", "-", "-", "-", "2", "2", "-"], "{out}");
        assert_eq!(upstreams(&json!({ "upstreams": [] })).lines().count(), 1, "the header only");
    }
}
