//! The client loops: creating tasks through nginx, polling them to their end, and the final read of each.

use super::*;

/// A number in `0..n` spread evenly over task numbers (splitmix64).
pub(crate) fn spread(i: usize, n: u64) -> u64 {
    let mut z = (i as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)) % n.max(1)
}

/// Create tasks one after another, each polled to its end.
pub(super) async fn client_loop(s: Arc<Shared>) {
    let poll = Duration::from_millis(s.args.poll_ms.max(1));
    loop {
        let n = s.next.fetch_add(1, Ordering::Relaxed);
        if n >= s.args.tasks {
            return;
        }
        let ms = s.args.min_ms + spread(n, s.args.max_ms - s.args.min_ms + 1);
        let label = format!("c{n}");
        let args = json!({ "name": "slow_compute", "arguments": { "seconds": ms as f64 / 1000.0, "label": label },
                           "_meta": { "presa/idempotencyKey": format!("chaos-{label}") } });
        let (id, create_sent) = loop {
            s.counters.creates_sent.fetch_add(1, Ordering::Relaxed);
            let sent = Instant::now();
            match s.lb.try_send("tools/call", args.clone()).await {
                Ok((200, v)) if v["result"]["taskId"].is_string() => {
                    break (v["result"]["taskId"].as_str().unwrap_or_default().to_string(), sent);
                }
                Ok((status, v)) => Counters::failed(&s.counters.creates_failed, reason(status, &v)),
                Err(e) => Counters::failed(&s.counters.creates_failed, shorten(&e)),
            }
            tokio::time::sleep(poll).await;
        };
        let acked_at = Instant::now();
        let index = {
            let mut seen = s.seen.lock().expect("seen");
            let status = "working".into();
            seen.push(Seen { id: id.clone(), label, acked_at, create_sent, done_at: None, done_sent: None, status });
            seen.len() - 1
        };
        s.acked.fetch_add(1, Ordering::Relaxed);
        let deadline = acked_at + Duration::from_secs(s.args.task_deadline_s);
        let mut unknown_since = None;
        loop {
            tokio::time::sleep(poll).await;
            let sent = Instant::now();
            let status = get_status(&s, &id).await;
            let now = Instant::now();
            if let Some(st) = &status {
                s.seen.lock().expect("seen")[index].status.clone_from(st);
            }
            match status.as_deref() {
                Some("completed" | "failed" | "cancelled") => {
                    let mut seen = s.seen.lock().expect("seen");
                    (seen[index].done_at, seen[index].done_sent) = (Some(now), Some(sent));
                    break;
                }
                // Unknown for 5 s in a row: lost (the final pass reads it once more).
                Some("unknown") if now - *unknown_since.get_or_insert(now) > Duration::from_secs(5) => break,
                Some("unknown") => {}
                _ => unknown_since = None,
            }
            if now > deadline {
                break;
            }
        }
    }
}

/// A task's status through nginx: `unknown` for "Unknown or inaccessible
/// taskId", `None` when the request failed (counted).
pub(super) async fn get_status(s: &Shared, id: &str) -> Option<String> {
    get_task(s, id).await.and_then(|t| t["status"].as_str().map(str::to_string))
}

/// A task through nginx (`{"status": "unknown"}` for "Unknown or inaccessible
/// taskId"), `None` when the request failed (counted).
pub(super) async fn get_task(s: &Shared, id: &str) -> Option<Value> {
    s.counters.gets_sent.fetch_add(1, Ordering::Relaxed);
    match s.lb.try_send("tasks/get", json!({ "taskId": id })).await {
        Ok((200, v)) if v["result"]["status"].is_string() => Some(v["result"].clone()),
        Ok((_, v)) if v["error"]["code"] == -32602 => Some(json!({ "status": "unknown" })),
        Ok((status, v)) => {
            Counters::failed(&s.counters.gets_failed, reason(status, &v));
            None
        }
        Err(e) => {
            Counters::failed(&s.counters.gets_failed, shorten(&e));
            None
        }
    }
}

/// A failed request's HTTP status and JSON-RPC error code, for counting.
pub(crate) fn reason(status: u16, v: &Value) -> String {
    let retryable = if v["error"]["data"]["retryable"] == true { ", retryable" } else { "" };
    format!("HTTP {status} {}{retryable}", v["error"]["code"])
}

/// An error message without its per-request details (ports, ids).
pub(crate) fn shorten(e: &str) -> String {
    let e = e.split(" for url").next().unwrap_or(e);
    e.chars().take(80).collect()
}

/// Read every acknowledged task once more (its final state through nginx);
/// a completed task whose result is not its own (`Completed <label>`) is a
/// `wrong result`.
pub(super) async fn final_pass(s: &Shared, seen: &mut [Seen]) {
    use futures::StreamExt;
    let finals: Vec<(usize, String)> = futures::stream::iter(seen.iter().enumerate())
        .map(|(i, t)| async move {
            for _ in 0..50 {
                if let Some(task) = get_task(s, &t.id).await {
                    let status = task["status"].as_str().unwrap_or_default();
                    let own = task["result"]["content"][0]["text"] == format!("Completed {}", t.label);
                    let status = if status == "completed" && !own { WRONG } else { status };
                    return (i, status.to_string());
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            (i, "unreadable".to_string())
        })
        .buffer_unordered(s.args.concurrency)
        .collect()
        .await;
    for (i, status) in finals {
        seen[i].status = status;
    }
}
