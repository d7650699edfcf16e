//! The table (or lines) `presa admin` prints for each command's answer
//! (`--json` prints the answer itself).

use serde_json::Value;

use super::{
    AdminCommand,
    table::{age, ago, due, history, next_line, rows, table, text, tries},
};

/// The table (or lines) of a command's answer.
pub(crate) fn render(command: &AdminCommand, v: &Value, now: u64) -> String {
    match command {
        AdminCommand::Whoami => format!("{}/{} ({})\n", text(&v["tenant"]), text(&v["subject"]), text(&v["role"])),
        AdminCommand::Cluster => table(
            &["ID", "ROLE", "VERSION", "SLOTS", "COMPLETED", "FAILED", "STARTED", "HEARTBEAT", "DRAINING", "TOOLS"],
            &rows(v, "nodes", |n| {
                let mut tools: Vec<String> =
                    n["tools"].as_array().map(|t| t.iter().map(text).collect()).unwrap_or_default();
                if tools.len() > 3 {
                    let more = tools.len() - 2;
                    tools.truncate(2);
                    tools.push(format!("… {more} more"));
                }
                vec![
                    text(&n["id"]),
                    text(&n["role"]),
                    text(&n["version"]),
                    format!("{}/{}", text(&n["slotsInUse"]), text(&n["slots"])),
                    text(&n["completed"]),
                    text(&n["failed"]),
                    ago(now, &n["startedAtMs"]),
                    ago(now, &n["heartbeatAtMs"]),
                    if n["draining"] == true { "yes".into() } else { "no".into() },
                    tools.join(","),
                ]
            }),
        ),
        AdminCommand::Queues => {
            let age_of = |x: &Value| x.as_u64().map_or("-".into(), age);
            let row = |label: String, q: &Value| {
                vec![
                    label,
                    text(&q["queued"]),
                    text(&q["pending"]),
                    age_of(&q["oldestQueuedAgeMs"]),
                    age_of(&q["oldestPendingAgeMs"]),
                    text(&q["delayed"]),
                    age_of(&q["oldestDueAgeMs"]),
                ]
            };
            let mut all = rows(v, "partitions", |p| row(format!("p{:02}", p["partition"].as_u64().unwrap_or(0)), p));
            all.push(row("total".into(), &v["total"]));
            table(&["PARTITION", "QUEUED", "PENDING", "OLDEST QUEUED", "OLDEST PENDING", "DELAYED", "OLDEST DUE"], &all)
        }
        AdminCommand::Breakers => table(
            &["BREAKER", "STATE", "FAILURES", "RETRY IN", "POLICY", "TOOLS"],
            &rows(v, "breakers", |b| {
                let p = &b["policy"];
                let ms = |x: &Value| x.as_u64().map_or("-".into(), age);
                vec![
                    text(&b["name"]),
                    text(&b["state"]),
                    format!("{}/{}", text(&b["failures"]), text(&p["failures"])),
                    ms(&b["retryInMs"]),
                    format!("{} in {}, open {}", text(&p["failures"]), ms(&p["windowMs"]), ms(&p["coolDownMs"])),
                    b["tools"].as_array().map(|t| t.iter().map(text).collect::<Vec<_>>().join(",")).unwrap_or_default(),
                ]
            }),
        ),
        AdminCommand::Limits => super::table::limits(v),
        AdminCommand::Upstreams => super::table::upstreams(v),
        AdminCommand::RestartUpstream { name } => {
            let n = v["nodes"].as_array().map_or(0, Vec::len);
            format!("upstream {name}: {n} process(es) asked to restart its connections\n")
        }
        AdminCommand::GatewayConfig => table(
            &["NODE", "ROLE", "VERSION", "LOADED", "LAST REFUSAL"],
            &rows(v, "processes", |p| {
                let r = &p["lastRefusal"];
                let refusal =
                    if r.is_null() { "-".into() } else { format!("{}: {}", ago(now, &r["atMs"]), text(&r["reason"])) };
                vec![text(&p["node"]), text(&p["role"]), text(&p["version"]), ago(now, &p["loadedAtMs"]), refusal]
            }),
        ),
        AdminCommand::ReloadGateway => {
            let n = v["nodes"].as_array().map_or(0, Vec::len);
            format!("{n} gateway process(es) asked to read their config again (see presa admin gateway-config)\n")
        }
        AdminCommand::Tenants => {
            v["tenants"].as_array().map(|t| t.iter().map(|x| text(x) + "\n").collect()).unwrap_or_default()
        }
        AdminCommand::Tasks(_) => {
            table(
                &["TASK", "TENANT", "SUBJECT", "STATUS", "TOOL", "CREATED", "UPDATED", "ATTEMPT", "NEXT TRY"],
                &rows(v, "tasks", |t| {
                    vec![
                        text(&t["taskId"]),
                        text(&t["tenant"]),
                        text(&t["subject"]),
                        text(&t["status"]),
                        text(&t["tool"]),
                        ago(now, &t["createdAtMs"]),
                        ago(now, &t["updatedAtMs"]),
                        text(&t["attempt"]),
                        due(now, &t["retries"]),
                    ]
                }),
            ) + &next_line(v)
        }
        AdminCommand::Task { .. } => {
            let keys = |x: &Value| match x.as_array() {
                Some(a) if !a.is_empty() => a.iter().map(text).collect::<Vec<_>>().join(", "),
                _ => "-".to_string(),
            };
            let mut out = String::new();
            for (label, value) in [
                ("task", text(&v["taskId"])),
                ("owner", format!("{}/{}", text(&v["tenant"]), text(&v["subject"]))),
                ("status", text(&v["status"])),
                ("message", text(&v["statusMessage"])),
                ("tool", text(&v["tool"])),
                ("created", ago(now, &v["createdAtMs"])),
                ("updated", ago(now, &v["updatedAtMs"])),
                ("attempt", text(&v["attempt"])),
                ("revision", text(&v["revision"])),
                ("input requests", keys(&v["inputRequests"])),
                ("input answers", keys(&v["inputResponses"])),
                ("replay of", text(&v["replayOf"])),
                ("trace", text(&v["traceId"])),
                ("held by", text(&v["worker"])),
                ("history", history(&v["history"], now)),
                ("failed tries", tries(&v["retries"], now)),
                ("next try", due(now, &v["retries"])),
                ("result", text(&v["result"])),
                ("error", text(&v["error"])),
                ("dead letter", if v["deadLetter"].is_null() { "-".into() } else { text(&v["deadLetter"]["reason"]) }),
            ] {
                out += &format!("{label:<15} {value}\n");
            }
            out
        }
        AdminCommand::DeadLetters(_) => {
            table(
                &["TASK", "TENANT", "SUBJECT", "TOOL", "DIED", "DELIVERIES", "REASON", "REPLAYED AS"],
                &rows(v, "deadLetters", |l| {
                    vec![
                        text(&l["taskId"]),
                        text(&l["tenant"]),
                        text(&l["subject"]),
                        text(&l["tool"]),
                        ago(now, &l["diedAtMs"]),
                        text(&l["deliveries"]),
                        text(&l["reason"]),
                        text(&l["replayedAs"]),
                    ]
                }),
            ) + &next_line(v)
        }
        AdminCommand::Replay { .. } => {
            if v["first"] == true {
                format!("replayed as task {}\n", text(&v["taskId"]))
            } else {
                format!("already replayed as task {}\n", text(&v["taskId"]))
            }
        }
        AdminCommand::Discard { id, .. } => format!("discarded the dead letter of {id}\n"),
        AdminCommand::Cancel { .. } => {
            format!("task {} is {}\n", text(&v["task"]["taskId"]), text(&v["task"]["status"]))
        }
        AdminCommand::Retry { .. } => {
            format!("task {} is due now: a worker runs its next try\n", text(&v["task"]["taskId"]))
        }
        AdminCommand::Drain { .. } => format!("worker {} is draining\n", text(&v["node"]["id"])),
        AdminCommand::Usage { .. } => {
            let limit = |x: &Value| x.as_u64().map_or("no limit".into(), |n| n.to_string());
            let mut out = format!(
                "tenant {}: {} tasks read{}; per principal: {} active tasks, {} bytes\n",
                text(&v["tenant"]),
                text(&v["scanned"]),
                if v["complete"] == true { "" } else { " (the newest only)" },
                limit(&v["limits"]["maxActiveTasksPerPrincipal"]),
                limit(&v["limits"]["maxBytesPerPrincipal"]),
            );
            out += &table(
                &["SUBJECT", "ACTIVE", "LIVE", "BYTES", "BY STATUS"],
                &rows(v, "principals", |p| {
                    let by: Vec<String> = p["byStatus"]
                        .as_object()
                        .map(|o| o.iter().map(|(k, n)| format!("{k}={n}")).collect())
                        .unwrap_or_default();
                    vec![text(&p["subject"]), text(&p["active"]), text(&p["live"]), text(&p["bytes"]), by.join(" ")]
                }),
            );
            out
        }
    }
}
