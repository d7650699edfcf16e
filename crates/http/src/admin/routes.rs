//! The admin API's reads and actions: each parses its input, asks
//! [`presa_server::admin::Admin`] and renders the answer ([`super::view`]).

use axum::{
    Json,
    extract::{FromRequestParts, Path, Query, State, rejection::QueryRejection},
    http::{HeaderMap, StatusCode, request::Parts},
    response::{IntoResponse, Response},
};
use presa_store::{TaskFilter, TaskId, util::now_ms};
use presa_tasks::{Status, id::MAX_TASK_ID_LEN};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{AdminState, Op, Refused, view};

type Answer = Result<Response, Refused>;

/// A query string, strictly: an unknown parameter or a bad value is a 400 naming it.
fn query<T>(q: Result<Query<T>, QueryRejection>) -> Result<T, Refused> {
    q.map(|Query(t)| t).map_err(|e| Refused::bad_request(e.body_text()))
}

/// An id from the path, if it can be a task id.
fn task_id(id: String) -> Result<TaskId, Refused> {
    if id.is_empty() || id.len() > MAX_TASK_ID_LEN {
        return Err(Refused::bad_request(format!("a task id is 1 to {MAX_TASK_ID_LEN} bytes")));
    }
    Ok(TaskId::from_wire(id))
}

/// An empty parameter (`?tenant=` from a form) counts as absent.
fn given(v: Option<String>) -> Option<String> {
    v.filter(|s| !s.is_empty())
}

fn number(name: &str, v: Option<String>) -> Result<Option<u64>, Refused> {
    given(v)
        .map(|s| {
            s.parse::<u64>().map_err(|_| Refused::bad_request(format!("{name} must be a whole number, not {s:?}")))
        })
        .transpose()
}

fn limit(v: Option<String>, max: usize) -> Result<usize, Refused> {
    match number("limit", v)? {
        None => Ok(50.min(max)),
        Some(n) if n >= 1 && n <= max as u64 => Ok(n as usize),
        Some(n) => Err(Refused::bad_request(format!("limit must be 1 to {max}, not {n}"))),
    }
}

fn ok(v: Value) -> Answer {
    Ok(Json(v).into_response())
}

pub(crate) async fn whoami(op: Op) -> Answer {
    let scope = &op.operator.caller.scope;
    ok(json!({ "tenant": scope.tenant, "subject": scope.subject, "role": op.operator.role() }))
}

pub(crate) async fn cluster(State(s): State<AdminState>, op: Op) -> Answer {
    let nodes = s.admin.cluster(&op.operator).await?;
    ok(json!({ "nowMs": now_ms(), "nodes": nodes.iter().map(view::node).collect::<Vec<_>>() }))
}

pub(crate) async fn queues(State(s): State<AdminState>, op: Op) -> Answer {
    let stats = s.admin.queues(&op.operator).await?;
    let (total, partitions) = view::queues(&stats);
    ok(json!({ "nowMs": now_ms(), "total": total, "partitions": partitions }))
}

pub(crate) async fn breakers(State(s): State<AdminState>, op: Op) -> Answer {
    let breakers = s.admin.breakers(&op.operator).await?;
    ok(json!({ "nowMs": now_ms(), "breakers": breakers.iter().map(view::breaker).collect::<Vec<_>>() }))
}

pub(crate) async fn limits(State(s): State<AdminState>, op: Op) -> Answer {
    let limits = s.admin.limits(&op.operator).await?;
    ok(json!({ "nowMs": now_ms(), "tools": limits.iter().map(view::limits).collect::<Vec<_>>() }))
}

/// The gateway's upstreams, cluster-wide (from the registry's heartbeats).
pub(crate) async fn upstreams(State(s): State<AdminState>, op: Op) -> Answer {
    let upstreams = s.admin.upstreams(&op.operator).await?;
    ok(json!({ "nowMs": now_ms(), "upstreams": upstreams.iter().map(view::upstream).collect::<Vec<_>>() }))
}

/// Restart an upstream's connections in every process (202: each process
/// acts on it when the ask reaches it); 404 when no live process reports it.
pub(crate) async fn restart_upstream(State(s): State<AdminState>, op: Op, Path(name): Path<String>) -> Answer {
    let nodes = s.admin.restart_upstream(&op.operator, &name).await?;
    Ok((StatusCode::ACCEPTED, Json(json!({ "upstream": name, "nodes": nodes }))).into_response())
}

/// The config file each gateway process serves, and its last refusal.
pub(crate) async fn gateway_config(State(s): State<AdminState>, op: Op) -> Answer {
    let views = s.admin.gateway_config(&op.operator).await?;
    ok(json!({ "nowMs": now_ms(), "processes": views.iter().map(view::gateway_config).collect::<Vec<_>>() }))
}

/// Ask every gateway process to read its config file again (202: each
/// process acts on it when the ask reaches it); 404 when none reports one.
pub(crate) async fn reload_gateway(State(s): State<AdminState>, op: Op) -> Answer {
    let nodes = s.admin.reload_gateway(&op.operator).await?;
    Ok((StatusCode::ACCEPTED, Json(json!({ "nodes": nodes }))).into_response())
}

/// The cluster's figures over the last minutes (the console's charts).
pub(crate) async fn history(State(s): State<AdminState>, op: Op) -> Answer {
    let (points, history) = s.admin.history(&op.operator)?;
    ok(view::history(&points, history))
}

pub(crate) async fn tenants(State(s): State<AdminState>, op: Op) -> Answer {
    ok(json!({ "tenants": s.admin.tenants(&op.operator).await? }))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct TasksQuery {
    tenant: Option<String>,
    subject: Option<String>,
    status: Option<String>,
    tool: Option<String>,
    created_after_ms: Option<String>,
    created_before_ms: Option<String>,
    limit: Option<String>,
    cursor: Option<String>,
}

pub(crate) async fn tasks(State(s): State<AdminState>, op: Op, q: Result<Query<TasksQuery>, QueryRejection>) -> Answer {
    let q = query(q)?;
    let status = given(q.status)
        .map(|st| {
            serde_json::from_value::<Status>(Value::String(st.clone())).map_err(|_| {
                Refused::bad_request(format!(
                    "status must be working, input_required, completed, failed or cancelled, not {st:?}"
                ))
            })
        })
        .transpose()?;
    let filter = TaskFilter {
        tenant: given(q.tenant),
        subject: given(q.subject),
        status,
        tool: given(q.tool),
        created_from_ms: number("createdAfterMs", q.created_after_ms)?,
        created_before_ms: number("createdBeforeMs", q.created_before_ms)?,
    };
    let limit = limit(q.limit, presa_store::admin::MAX_TASK_PAGE)?;
    let cursor = given(q.cursor);
    let page = s.admin.tasks(&op.operator, filter, cursor.as_deref(), limit).await?;
    ok(view::page("tasks", page.tasks.iter().map(view::task_summary).collect(), page.next))
}

pub(crate) async fn task(State(s): State<AdminState>, op: Op, Path(id): Path<String>) -> Answer {
    let (task, letter) = s.admin.task(&op.operator, &task_id(id)?).await?;
    ok(view::task_detail(&task, letter.as_ref()))
}

/// An artifact of task `id` (the rest of its key after the task), streamed,
/// for an operator who may see the task (the console's download links).
pub(crate) async fn artifact(
    State(s): State<AdminState>,
    op: Op,
    Path((id, rest)): Path<(String, String)>,
    headers: HeaderMap,
) -> Answer {
    let id = task_id(id)?;
    let (task, _) = s.admin.task(&op.operator, &id).await?;
    let Some(artifacts) = s.app.server.core().artifacts() else { return Ok(crate::artifacts::not_found()) };
    let key = presa_server::artifacts::stored_key(&task.scope, &format!("{id}/{rest}"));
    Ok(crate::artifacts::serve(artifacts, &key, &headers).await)
}

pub(crate) async fn cancel(State(s): State<AdminState>, op: Op, Path(id): Path<String>) -> Answer {
    let task = s.admin.cancel(&op.operator, &task_id(id)?).await?;
    ok(json!({ "task": view::task_summary(&task) }))
}

/// "Retry now": the task's delayed next try is queued at once (202: a
/// worker claims it next); 409 when its work is not waiting.
pub(crate) async fn retry(State(s): State<AdminState>, op: Op, Path(id): Path<String>) -> Answer {
    let task = s.admin.retry_now(&op.operator, &task_id(id)?).await?;
    Ok((StatusCode::ACCEPTED, Json(json!({ "task": view::task_summary(&task) }))).into_response())
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct LettersQuery {
    tenant: Option<String>,
    subject: Option<String>,
    limit: Option<String>,
    cursor: Option<String>,
}

pub(crate) async fn dead_letters(
    State(s): State<AdminState>,
    op: Op,
    q: Result<Query<LettersQuery>, QueryRejection>,
) -> Answer {
    let q = query(q)?;
    let limit = limit(q.limit, presa_store::dead::MAX_DEAD_LETTER_PAGE)?;
    let cursor = given(q.cursor);
    let page = s.admin.dead_letters(&op.operator, given(q.tenant), given(q.subject), cursor.as_deref(), limit).await?;
    ok(view::page("deadLetters", page.letters.iter().map(view::dead_letter).collect(), page.next))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TenantQuery {
    tenant: Option<String>,
}

/// The dead letter a replay or discard names: its task id (the path) and
/// its tenant (`?tenant=`, required of a cluster admin), both checked.
pub(crate) struct Letter {
    tenant: Option<String>,
    id: TaskId,
}

impl FromRequestParts<AdminState> for Letter {
    type Rejection = Refused;

    async fn from_request_parts(parts: &mut Parts, state: &AdminState) -> Result<Self, Refused> {
        let Path(id) =
            Path::<String>::from_request_parts(parts, state).await.map_err(|e| Refused::bad_request(e.body_text()))?;
        let q = query(Query::<TenantQuery>::from_request_parts(parts, state).await)?;
        Ok(Letter { tenant: given(q.tenant), id: task_id(id)? })
    }
}

pub(crate) async fn replay(State(s): State<AdminState>, op: Op, letter: Letter) -> Answer {
    let replayed = s.admin.replay(&op.operator, letter.tenant, &letter.id).await?;
    ok(json!({ "taskId": replayed.task.as_str(), "first": replayed.first }))
}

pub(crate) async fn discard(State(s): State<AdminState>, op: Op, letter: Letter) -> Answer {
    s.admin.discard(&op.operator, letter.tenant, &letter.id).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub(crate) async fn drain(State(s): State<AdminState>, op: Op, Path(id): Path<String>) -> Answer {
    let node = s.admin.drain(&op.operator, &id).await?;
    ok(json!({ "node": view::node(&node) }))
}

pub(crate) async fn usage(
    State(s): State<AdminState>,
    op: Op,
    q: Result<Query<TenantQuery>, QueryRejection>,
) -> Answer {
    let q = query(q)?;
    let usage = s.admin.usage(&op.operator, given(q.tenant)).await?;
    ok(view::usage(&usage))
}
