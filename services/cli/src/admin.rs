//! `presa admin …`: presa's admin API from a terminal (its routes and
//! answers: docs/admin.md). A table by default, `--json` for scripts (the
//! API's own JSON: one object per command, `--all` pages merged into one).

use clap::{Args, Subcommand};
use presa_client::{AdminClient, Client};
use serde_json::{Value, json};

use crate::{Cli, exit, usage};

/// `presa admin`'s flags and command.
#[derive(Debug, Args)]
pub(crate) struct AdminArgs {
    /// The admin API's base URL; by default `/admin/v1` on `--url`'s origin
    /// (set it when presa-api runs `--admin-listen`).
    #[arg(long, env = "PRESA_ADMIN_URL")]
    pub(crate) admin_url: Option<String>,
    #[command(subcommand)]
    pub(crate) command: AdminCommand,
}

#[derive(Debug, Subcommand)]
pub(crate) enum AdminCommand {
    /// Who the token is: tenant, subject and role (admin or tenant-admin).
    Whoami,
    /// The live processes: API pods and workers, their slots, tools and drains.
    Cluster,
    /// The work queues: queued and pending work and their oldest ages, per partition.
    Queues,
    /// The tenants with live tasks.
    Tenants,
    /// Tasks, newest first, with filters.
    Tasks(TasksArgs),
    /// One task: its record, input keys, result or error, dead letter.
    Task {
        /// The task id.
        id: String,
    },
    /// Dead letters (poison tasks), oldest first.
    DeadLetters(LettersArgs),
    /// Run a dead-lettered task again (a new task for the same owner; a second replay answers the same task).
    Replay {
        /// The dead task's id.
        id: String,
        /// Its tenant (required of a cluster admin).
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Throw a dead letter away.
    Discard {
        /// The dead task's id.
        id: String,
        /// Its tenant (required of a cluster admin).
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Cancel a live task.
    Cancel {
        /// The task id.
        id: String,
    },
    /// Ask a worker to drain: it finishes what it holds and claims nothing new.
    Drain {
        /// The worker's id (as `presa admin cluster` lists it).
        worker: String,
    },
    /// Each principal's live and active tasks and bytes against the quotas.
    Usage {
        /// The tenant (required of a cluster admin).
        #[arg(long)]
        tenant: Option<String>,
    },
}

#[derive(Debug, Args)]
pub(crate) struct TasksArgs {
    /// Only this tenant's (a tenant admin: its own).
    #[arg(long)]
    tenant: Option<String>,
    /// Only this principal's.
    #[arg(long)]
    subject: Option<String>,
    /// Only in this status: working, input_required, completed, failed, cancelled.
    #[arg(long)]
    status: Option<String>,
    /// Only running this tool.
    #[arg(long)]
    tool: Option<String>,
    /// Only created at or after this time, Unix ms.
    #[arg(long, value_name = "UNIX_MS")]
    created_after: Option<u64>,
    /// Only created before this time, Unix ms.
    #[arg(long, value_name = "UNIX_MS")]
    created_before: Option<u64>,
    #[command(flatten)]
    page: PageArgs,
}

#[derive(Debug, Args)]
pub(crate) struct LettersArgs {
    /// The tenant (required of a cluster admin; a tenant admin: its own).
    #[arg(long)]
    tenant: Option<String>,
    /// Only this principal's.
    #[arg(long)]
    subject: Option<String>,
    #[command(flatten)]
    page: PageArgs,
}

#[derive(Debug, Args)]
struct PageArgs {
    /// At most this many a page (1 to 100).
    #[arg(long, default_value_t = 50)]
    limit: u32,
    /// Start after this cursor (the `next` a page printed).
    #[arg(long)]
    cursor: Option<String>,
    /// Every page, to the end.
    #[arg(long, conflicts_with = "cursor")]
    all: bool,
}

/// Run `presa admin …`; its exit code.
pub(crate) async fn run(cli: &Cli, client: &Client, args: &AdminArgs) -> anyhow::Result<u8> {
    let admin = client.admin(args.admin_url.as_deref())?;
    let seg = AdminClient::segment;
    let answer = match &args.command {
        AdminCommand::Whoami => admin.get("/whoami", &[]).await?,
        AdminCommand::Cluster => admin.get("/cluster", &[]).await?,
        AdminCommand::Queues => admin.get("/queues", &[]).await?,
        AdminCommand::Tenants => admin.get("/tenants", &[]).await?,
        AdminCommand::Tasks(t) => {
            let query = vec![
                ("tenant", t.tenant.clone().unwrap_or_default()),
                ("subject", t.subject.clone().unwrap_or_default()),
                ("status", t.status.clone().unwrap_or_default()),
                ("tool", t.tool.clone().unwrap_or_default()),
                ("createdAfterMs", t.created_after.map(|n| n.to_string()).unwrap_or_default()),
                ("createdBeforeMs", t.created_before.map(|n| n.to_string()).unwrap_or_default()),
            ];
            pages(&admin, "/tasks", "tasks", query, &t.page).await?
        }
        AdminCommand::Task { id } => admin.get(&format!("/tasks/{}", seg(id)), &[]).await?,
        AdminCommand::DeadLetters(l) => {
            let query = vec![
                ("tenant", l.tenant.clone().unwrap_or_default()),
                ("subject", l.subject.clone().unwrap_or_default()),
            ];
            pages(&admin, "/dead-letters", "deadLetters", query, &l.page).await?
        }
        AdminCommand::Replay { id, tenant } => {
            admin
                .post(&format!("/dead-letters/{}/replay", seg(id)), &[("tenant", tenant.clone().unwrap_or_default())])
                .await?
        }
        AdminCommand::Discard { id, tenant } => {
            admin
                .delete(&format!("/dead-letters/{}", seg(id)), &[("tenant", tenant.clone().unwrap_or_default())])
                .await?;
            json!({ "discarded": id })
        }
        AdminCommand::Cancel { id } => admin.post(&format!("/tasks/{}/cancel", seg(id)), &[]).await?,
        AdminCommand::Drain { worker } => admin.post(&format!("/workers/{}/drain", seg(worker)), &[]).await?,
        AdminCommand::Usage { tenant } => {
            admin.get("/usage", &[("tenant", tenant.clone().unwrap_or_default())]).await?
        }
    };
    if cli.json {
        crate::output::json_line(&answer);
    } else {
        print!("{}", render(&args.command, &answer, now_ms()));
    }
    Ok(exit::OK)
}

/// One page, or with `--all` every page merged under `key` (`next` null).
async fn pages(
    admin: &AdminClient,
    path: &str,
    key: &str,
    mut query: Vec<(&'static str, String)>,
    page: &PageArgs,
) -> anyhow::Result<Value> {
    if !(1..=100).contains(&page.limit) {
        return Err(usage(format!("--limit must be 1 to 100, not {}", page.limit)));
    }
    query.push(("limit", page.limit.to_string()));
    let mut cursor = page.cursor.clone().unwrap_or_default();
    let mut all = Vec::new();
    loop {
        let mut q = query.clone();
        q.push(("cursor", cursor.clone()));
        let answer = admin.get(path, &q).await?;
        if !page.all {
            return Ok(answer);
        }
        all.extend(answer[key].as_array().cloned().unwrap_or_default());
        match answer["next"].as_str() {
            Some(next) if !next.is_empty() => cursor = next.to_string(),
            _ => return Ok(json!({ key: all, "next": null })),
        }
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// `ms` before `now` in words: `4s ago`, `3m ago`, `2h ago`, `5d ago`.
fn ago(now: u64, at: &Value) -> String {
    let Some(at) = at.as_u64() else { return "-".into() };
    age(now.saturating_sub(at)) + " ago"
}

/// A duration in ms, short: `850ms`, `4s`, `3m`, `2h`, `5d`.
fn age(ms: u64) -> String {
    match ms {
        0..1_000 => format!("{ms}ms"),
        1_000..60_000 => format!("{}s", ms / 1_000),
        60_000..3_600_000 => format!("{}m", ms / 60_000),
        3_600_000..86_400_000 => format!("{}h", ms / 3_600_000),
        _ => format!("{}d", ms / 86_400_000),
    }
}

fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Rows under a header, each column as wide as its widest cell.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
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

fn rows(v: &Value, key: &str, row: impl Fn(&Value) -> Vec<String>) -> Vec<Vec<String>> {
    v[key].as_array().map(|a| a.iter().map(row).collect()).unwrap_or_default()
}

/// A task's status history: `working 3s ago → completed 1s ago`.
fn history(v: &Value, now: u64) -> String {
    match v.as_array() {
        Some(h) if !h.is_empty() => {
            h.iter().map(|c| format!("{} {}", text(&c["status"]), ago(now, &c["atMs"]))).collect::<Vec<_>>().join(" → ")
        }
        _ => "-".into(),
    }
}

/// `next: <cursor>` when a page has one (pass it as `--cursor`).
fn next_line(v: &Value) -> String {
    v["next"].as_str().map(|n| format!("next page: --cursor {n}\n")).unwrap_or_default()
}

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
                ]
            };
            let mut all = rows(v, "partitions", |p| row(format!("p{:02}", p["partition"].as_u64().unwrap_or(0)), p));
            all.push(row("total".into(), &v["total"]));
            table(&["PARTITION", "QUEUED", "PENDING", "OLDEST QUEUED", "OLDEST PENDING"], &all)
        }
        AdminCommand::Tenants => {
            v["tenants"].as_array().map(|t| t.iter().map(|x| text(x) + "\n").collect()).unwrap_or_default()
        }
        AdminCommand::Tasks(_) => {
            table(
                &["TASK", "TENANT", "SUBJECT", "STATUS", "TOOL", "CREATED", "UPDATED", "ATTEMPT"],
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

#[cfg(test)]
mod tests {
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
}
