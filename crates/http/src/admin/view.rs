//! The admin API's JSON shapes (`docs/admin.md`): what an operator sees of
//! a task, a dead letter and a page. Built here, in one place, so the
//! console and `presa admin` read one format.

use presa_server::admin::{History, Point};
use presa_store::{DeadLetter, NodeInfo, PartitionStats, Task};
use presa_tasks::Retries;
use serde_json::{Map, Value, json};

/// A task in a listing.
pub(crate) fn task_summary(t: &Task) -> Value {
    json!({
        "taskId": t.id.as_str(),
        "tenant": t.scope.tenant,
        "subject": t.scope.subject,
        "status": t.status.as_str(),
        "statusMessage": t.status_message,
        "tool": t.work.tool,
        "createdAtMs": t.created_at_ms,
        "updatedAtMs": t.updated_at_ms,
        "ttlMs": t.ttl_ms,
        "attempt": t.attempt,
        "revision": t.revision,
        "retries": retries(&t.retries, false),
    })
}

/// A task's failed tries: how many, when the next is due while its work
/// waits (`null` once a worker claimed it), whether that wait is for a turn
/// under its tool's rate rather than a retry (`rateTurn`), and with `log`
/// the last ones (each its number, when it failed, why, and how long it
/// was put off).
fn retries(r: &Retries, log: bool) -> Value {
    let rate_turn = r.turn_reserved && r.due_at_ms.is_some();
    let mut v = json!({ "failed": r.failed, "dueAtMs": r.due_at_ms, "rateTurn": rate_turn });
    if log && let Value::Object(o) = &mut v {
        let tries: Vec<Value> = r
            .log
            .iter()
            .map(|f| json!({ "number": f.number, "atMs": f.at_ms, "reason": f.reason, "delayMs": f.delay_ms }))
            .collect();
        o.insert("log".into(), Value::Array(tries));
    }
    v
}

/// One task, whole: the summary, its input request and answer keys, its
/// result or error, what it replays, its trace, the worker holding it, its
/// status history, its failed tries and its dead letter.
pub(crate) fn task_detail(t: &Task, letter: Option<&DeadLetter>) -> Value {
    let mut v = task_summary(t);
    let keys = |m: &std::collections::BTreeMap<String, Value>| m.keys().cloned().collect::<Vec<_>>();
    let trace_id = t.work.trace.get("traceparent").and_then(|tp| tp.split('-').nth(1)).map(str::to_string);
    if let Value::Object(o) = &mut v {
        o.insert("inputRequests".into(), json!(keys(&t.input_requests)));
        o.insert("inputResponses".into(), json!(keys(&t.input_responses)));
        o.insert("result".into(), t.result.clone().unwrap_or(Value::Null));
        o.insert("error".into(), t.error.clone().unwrap_or(Value::Null));
        o.insert("replayOf".into(), json!(t.work.replay_of.as_ref().map(presa_store::TaskId::as_str)));
        o.insert("traceId".into(), json!(trace_id));
        o.insert("worker".into(), json!(t.work.worker));
        let history: Vec<Value> =
            t.status_history().iter().map(|h| json!({ "status": h.status.as_str(), "atMs": h.at_ms })).collect();
        o.insert("history".into(), Value::Array(history));
        o.insert("retries".into(), retries(&t.retries, true));
        o.insert("deadLetter".into(), letter.map_or(Value::Null, dead_letter));
    }
    v
}

/// A dead letter (without the arguments it keeps for a replay).
pub(crate) fn dead_letter(l: &DeadLetter) -> Value {
    json!({
        "taskId": l.id.as_str(),
        "tenant": l.scope.tenant,
        "subject": l.scope.subject,
        "tool": l.tool(),
        "reason": l.reason,
        "deliveries": l.deliveries,
        "attempts": l.attempts,
        "diedAtMs": l.died_at_ms,
        "replayedAs": l.replayed_as.as_ref().map(presa_store::TaskId::as_str),
    })
}

/// A node, as its heartbeat told it, without its upstreams or config
/// (`/upstreams` and `/gateway/config` show them; the cluster view and the
/// console's live overview stay small).
pub(crate) fn node(n: &NodeInfo) -> Value {
    let mut v = serde_json::to_value(n).unwrap_or(Value::Null);
    if let Value::Object(o) = &mut v {
        o.remove("upstreams");
        o.remove("config");
    }
    v
}

/// The history's points, oldest first, and how they are sampled.
pub(crate) fn history(points: &[Point], history: Option<&History>) -> Value {
    let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let points: Vec<Value> = points
        .iter()
        .map(|p| {
            json!({
                "atMs": p.at_ms, "spanMs": p.span_ms,
                "created": p.created, "completed": p.completed, "failed": p.failed,
                "queued": p.queued, "pending": p.pending, "delayed": p.delayed,
                "oldestQueuedAgeMs": p.oldest_queued_age_ms, "oldestDueAgeMs": p.oldest_due_age_ms,
                "slotsInUse": p.slots_in_use, "slots": p.slots,
            })
        })
        .collect();
    json!({
        "nowMs": presa_store::util::now_ms(),
        "intervalMs": history.map(|h| ms(h.every())),
        "capacity": history.map_or(0, History::capacity),
        "points": points,
    })
}

/// The queues of every partition and their total.
pub(crate) fn queues(stats: &[PartitionStats]) -> (Value, Vec<Value>) {
    let oldest = |f: fn(&PartitionStats) -> Option<u64>| stats.iter().filter_map(f).max();
    let total = json!({
        "queued": stats.iter().map(|s| s.queued).sum::<u64>(),
        "pending": stats.iter().map(|s| s.pending).sum::<u64>(),
        "oldestQueuedAgeMs": oldest(|s| s.oldest_queued_age_ms),
        "oldestPendingAgeMs": oldest(|s| s.oldest_pending_age_ms),
        "delayed": stats.iter().map(|s| s.delayed).sum::<u64>(),
        "oldestDueAgeMs": oldest(|s| s.oldest_due_age_ms),
    });
    let partitions = stats
        .iter()
        .map(|s| {
            json!({
                "partition": s.partition,
                "queued": s.queued,
                "pending": s.pending,
                "oldestQueuedAgeMs": s.oldest_queued_age_ms,
                "oldestPendingAgeMs": s.oldest_pending_age_ms,
                "delayed": s.delayed,
                "oldestDueAgeMs": s.oldest_due_age_ms,
            })
        })
        .collect();
    (total, partitions)
}

/// `{"<name>": items, "next": next}`: a page.
pub(crate) fn page(name: &str, items: Vec<Value>, next: Option<String>) -> Value {
    let mut o = Map::new();
    o.insert(name.into(), Value::Array(items));
    o.insert("next".into(), json!(next));
    Value::Object(o)
}

/// A tenant's usage per principal against the quotas.
pub(crate) fn usage(u: &presa_server::admin::Usage) -> Value {
    let principals: Vec<Value> = u
        .principals
        .iter()
        .map(|p| json!({ "subject": p.subject, "live": p.live, "active": p.active, "bytes": p.bytes, "byStatus": p.by_status }))
        .collect();
    json!({
        "tenant": u.tenant,
        "principals": principals,
        "limits": { "maxActiveTasksPerPrincipal": u.max_active_per_principal, "maxBytesPerPrincipal": u.max_bytes_per_principal },
        "scanned": u.scanned,
        "complete": u.complete,
        "asOfMs": u.as_of_ms,
    })
}

/// A circuit breaker: its state (`closed`, `open`, `half_open`), the
/// failures counted in its window, how long it stays open (or its probe's
/// lease has left), its policy and the tools behind it.
pub(crate) fn breaker(b: &presa_server::breaker::BreakerInfo) -> Value {
    let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let policy = b.breaker.policy();
    json!({
        "name": b.name,
        "state": b.view.circuit.as_str(),
        "failures": b.view.failures,
        "retryInMs": b.view.retry_in.map(ms),
        "policy": {
            "failures": policy.failures,
            "windowMs": policy.window_ms(),
            "coolDownMs": policy.cool_down_ms(),
            "probeLeaseMs": policy.probe_lease_ms(),
        },
        "tools": b.tools,
    })
}

/// A tool's limits: its concurrency limit with each key's permits in use and
/// waiters, and its rate.
pub(crate) fn limits(l: &presa_server::admin::ToolLimits) -> Value {
    let concurrency = l.concurrency.as_ref().map(|(c, keys)| {
        let keys: Vec<Value> =
            keys.iter().map(|k| json!({ "key": k.key, "inUse": k.in_use, "waiting": k.waiting })).collect();
        json!({ "limit": c.limit, "perTenant": c.per_tenant, "perArgument": c.per_argument, "keys": keys })
    });
    let rate = l.rate.map(|r| json!({ "perSecond": r.per_second, "burst": r.burst, "perTenant": r.per_tenant }));
    json!({ "tool": l.tool, "concurrency": concurrency, "rate": rate })
}

/// An upstream across the cluster: its worst state, its totals, its calls
/// and errors per tool, and each process's row.
pub(crate) fn upstream(u: &presa_server::admin::UpstreamView) -> Value {
    let tools: Vec<Value> =
        u.tools.iter().map(|t| json!({ "tool": t.tool, "calls": t.calls, "errors": t.errors })).collect();
    let processes: Vec<Value> = u
        .processes
        .iter()
        .map(|(node, role, r)| {
            json!({
                "node": node, "role": role, "state": r.state, "pool": r.pool, "inUse": r.in_use,
                "restarts": r.restarts, "lastError": r.last_error,
                "catalogVersion": r.catalog_version, "toolCount": r.tool_count,
                "calls": r.tools.iter().map(|t| t.calls).sum::<u64>(),
                "errors": r.tools.iter().map(|t| t.errors).sum::<u64>(),
            })
        })
        .collect();
    json!({
        "name": u.name,
        "state": u.state,
        "pool": u.pool,
        "inUse": u.in_use,
        "restarts": u.restarts,
        "catalogVersion": u.catalog_version,
        "toolCount": u.tool_count,
        "calls": u.tools.iter().map(|t| t.calls).sum::<u64>(),
        "errors": u.tools.iter().map(|t| t.errors).sum::<u64>(),
        "tools": tools,
        "processes": processes,
    })
}

/// One gateway process's config: its version, when it was loaded, and the
/// last reload it refused (`null` when none).
pub(crate) fn gateway_config(v: &presa_server::admin::ConfigView) -> Value {
    let r = &v.report;
    let refusal = r.refusal.as_ref().map(|reason| json!({ "atMs": r.refused_at_ms, "reason": reason }));
    json!({
        "node": v.node, "role": v.role, "version": r.version, "loadedAtMs": r.loaded_at_ms, "lastRefusal": refusal,
    })
}
