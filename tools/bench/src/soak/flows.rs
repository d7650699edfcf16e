//! The soak's load: tasks created at a steady rate, each task's flow by its kind, and the listen streams opened and closed.

use super::*;

/// Create tasks at `rate` per second until `stop`, each with its flow.
pub(super) async fn create_at_rate(load: Arc<Load>, rate: f64, stop: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    // A late tick (a busy machine) is caught up at once: creates keep to the rate on average.
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let max_flows = (rate * 120.0).ceil() as usize;
    let mut flows = tokio::task::JoinSet::new();
    for n in 0u64.. {
        tokio::select! {
            () = stop.cancelled() => break,
            _ = tick.tick() => {}
        }
        while flows.try_join_next().is_some() {}
        if flows.len() >= max_flows {
            load.counts.skipped.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        flows.spawn(flow(load.clone(), n));
    }
    flows.abort_all();
    while flows.join_next().await.is_some() {}
}

/// Task `n`'s life, by its kind (see the module docs).
pub(super) async fn flow(load: Arc<Load>, n: u64) {
    let l = &*load;
    let c = &l.counts;
    let (create_on, then_on) = l.pods_of(n);
    // Fixed width: a label one digit longer makes every record bigger (a step in Redis memory at task 10,000).
    let label = format!("s{n:08}");
    let (tool, arguments) = match n % 10 {
        0 => ("slow_compute", json!({ "seconds": 60, "label": label })),
        1 | 2 => ("confirm_delete", json!({ "filename": label })),
        _ => (
            "slow_compute",
            json!({ "seconds": (50 + crate::chaos::spread(n as usize, 251)) as f64 / 1000.0, "label": label }),
        ),
    };
    let created_at = Instant::now();
    let id = match create_on.try_send("tools/call", json!({ "name": tool, "arguments": arguments })).await {
        Ok((200, v)) if v["result"]["taskId"].is_string() => {
            v["result"]["taskId"].as_str().unwrap_or_default().to_string()
        }
        Ok((status, v)) => return c.fail("create", &reason(status, &v)),
        Err(e) => return c.fail("create", &shorten(&e)),
    };
    c.created.fetch_add(1, Ordering::Relaxed);
    {
        let mut recent = l.recent.lock().expect("recent");
        recent.push_back(id.clone());
        if recent.len() > WATCHED {
            recent.pop_front();
        }
    }
    let deadline = created_at + FLOW_DEADLINE;
    match n % 10 {
        0 => {
            tokio::time::sleep(Duration::from_secs(1)).await;
            match then_on.try_send("tasks/cancel", json!({ "taskId": id })).await {
                Ok((200, v)) if v.get("result").is_some() => {}
                Ok((status, v)) => return c.fail("tasks/cancel", &reason(status, &v)),
                Err(e) => return c.fail("tasks/cancel", &shorten(&e)),
            }
            if wait_for(l, then_on, &id, "cancelled", deadline).await {
                c.cancelled.fetch_add(1, Ordering::Relaxed);
            }
        }
        1 | 2 => {
            if !wait_for(l, then_on, &id, "input_required", deadline).await {
                return;
            }
            c.parked.fetch_add(1, Ordering::Relaxed);
            if n % 10 == 2 {
                // Left alone: gone once its TTL is over.
                tokio::time::sleep_until((created_at + l.ttl + EXPIRY_GRACE).into()).await;
                match get(l, then_on, &id).await.as_ref().map(|t| t["status"].as_str().unwrap_or_default()) {
                    Some("unknown") => c.expired.fetch_add(1, Ordering::Relaxed),
                    Some(_) => c.not_expired.fetch_add(1, Ordering::Relaxed),
                    None => 0,
                };
                return;
            }
            let answer = json!({ "taskId": id,
                "inputResponses": { "confirm-delete": { "action": "accept", "content": { "confirm": true } } } });
            match then_on.try_send("tasks/update", answer).await {
                Ok((200, v)) if v.get("result").is_some() => {}
                Ok((status, v)) => return c.fail("tasks/update", &reason(status, &v)),
                Err(e) => return c.fail("tasks/update", &shorten(&e)),
            }
            if wait_for(l, then_on, &id, "completed", deadline).await {
                c.completed.fetch_add(1, Ordering::Relaxed);
            }
        }
        _ => {
            if wait_for(l, then_on, &id, "completed", deadline).await {
                c.completed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Read the task every [`POLL`] until it has `status` (true) or `deadline`
/// passes or it ends otherwise (false; counted as stuck or failed).
pub(super) async fn wait_for(l: &Load, pod: &Client, id: &str, status: &str, deadline: Instant) -> bool {
    loop {
        tokio::time::sleep(POLL).await;
        if let Some(task) = get(l, pod, id).await {
            let now = task["status"].as_str().unwrap_or_default();
            if now == status {
                return true;
            }
            if ["completed", "failed", "cancelled", "unknown"].contains(&now) {
                l.counts.fail("flow", &format!("{now} while waiting for {status}"));
                return false;
            }
        }
        if Instant::now() > deadline {
            l.counts.stuck.fetch_add(1, Ordering::Relaxed);
            return false;
        }
    }
}

/// `tasks/get`: the task (`{"status": "unknown"}` for an unknown task id), `None` when the request failed (counted).
pub(super) async fn get(l: &Load, pod: &Client, id: &str) -> Option<Value> {
    match pod.try_send("tasks/get", json!({ "taskId": id })).await {
        Ok((200, v)) if v["result"]["status"].is_string() => Some(v["result"].clone()),
        Ok((_, v)) if v["error"]["code"] == -32602 => Some(json!({ "status": "unknown" })),
        Ok((status, v)) => {
            l.counts.fail("tasks/get", &reason(status, &v));
            None
        }
        Err(e) => {
            l.counts.fail("tasks/get", &shorten(&e));
            None
        }
    }
}

/// Listener `k`: open a listen stream on the latest task ids, read it for `open`, close it, again, until `stop`.
pub(super) async fn listen_loop(load: Arc<Load>, k: usize, open: Duration, stop: CancellationToken) {
    for round in 0.. {
        if stop.is_cancelled() {
            return;
        }
        let pod = load.listen_pods[(k + round) % load.listen_pods.len()].clone();
        let ids: Vec<String> = load.recent.lock().expect("recent").iter().cloned().collect();
        load.counts.listens.fetch_add(1, Ordering::Relaxed);
        // `Client::listen` panics when its request is not answered: in a task of its own, that is a failure counted.
        let session = tokio::spawn(async move {
            let (status, mut stream) = pod.listen(json!({ "taskIds": ids, "toolsListChanged": true })).await;
            if status != 200 {
                return Err(format!("HTTP {status}"));
            }
            let until = tokio::time::Instant::now() + open;
            let mut messages = 0u64;
            while let Ok(Some(_)) = tokio::time::timeout_at(until, stream.next()).await {
                messages += 1;
            }
            if messages == 0 {
                return Err("no acknowledgement".to_string());
            }
            Ok(messages)
        });
        match session.await {
            Ok(Ok(n)) => {
                load.counts.notifications.fetch_add(n, Ordering::Relaxed);
            }
            Ok(Err(why)) => load.counts.fail("subscriptions/listen", &why),
            Err(_) => load.counts.fail("subscriptions/listen", "not answered"),
        }
    }
}
