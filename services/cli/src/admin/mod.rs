//! `presa admin …`: presa's admin API from a terminal (its routes and
//! answers: docs/admin.md). A table by default, `--json` for scripts (the
//! API's own JSON: one object per command, `--all` pages merged into one).
//!
//! This module holds the commands (clap) and their requests; `render` turns
//! each answer into its table or lines, from the cells `table` formats.

use clap::{Args, Subcommand};
use presa_client::{AdminClient, Client};
use serde_json::{Value, json};

use crate::{Cli, exit, usage};

mod render;
mod table;

use render::render;

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
    /// The work queues: queued, pending and delayed work and their oldest ages, per partition.
    Queues,
    /// The circuit breakers (a tool's or an upstream's): state, failures in the window, when a probe may go.
    Breakers,
    /// The tools' limits: each concurrency limit's permits in use and waiters per key, and rates.
    Limits,
    /// A gateway's upstream servers, cluster-wide: state, connections in use, restarts, catalog, calls and errors per tool.
    Upstreams,
    /// Restart an upstream's connections in every gateway process (calls in flight finish first).
    RestartUpstream {
        /// The upstream's name.
        name: String,
    },
    /// Every gateway process's config file: the version it serves, when it was loaded, its last refusal.
    GatewayConfig,
    /// Ask every gateway process to read its config file again (see `gateway-config` for what each applied).
    ReloadGateway,
    /// The tenants with live tasks.
    Tenants,
    /// Tasks, newest first, with filters.
    Tasks(TasksArgs),
    /// One task: its record, input keys, failed tries, result or error, dead letter.
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
    /// Retry now: a task waiting out a failed try's backoff is queued at once (once its upstream is fixed).
    Retry {
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
        AdminCommand::Breakers => admin.get("/breakers", &[]).await?,
        AdminCommand::Limits => admin.get("/limits", &[]).await?,
        AdminCommand::Upstreams => admin.get("/upstreams", &[]).await?,
        AdminCommand::RestartUpstream { name } => admin.post(&format!("/upstreams/{}/restart", seg(name)), &[]).await?,
        AdminCommand::GatewayConfig => admin.get("/gateway/config", &[]).await?,
        AdminCommand::ReloadGateway => admin.post("/gateway/reload", &[]).await?,
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
        AdminCommand::Retry { id } => admin.post(&format!("/tasks/{}/retry", seg(id)), &[]).await?,
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
