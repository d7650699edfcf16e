//! The fairness rows (issue #24): two principals on one server whose worker
//! has the default fair shares. Bob creates `stamp_task` at a steady low rate
//! (one every [`BOB_EVERY`]) and the row gives his create → pickup latency
//! (the handler records when it started); first alone, then while Alice
//! floods `sleep_task` (each holds a slot for [`ALICE_TASK`]) from
//! [`ALICE_CONNS`] connections at full speed, up to her active-task quota
//! (each round ends by cancelling her backlog).
//! The goal: Bob's latency under the flood within 2× of his alone. The runs
//! alternate (alone, flood, alone, flood) so both see the same machine.

use std::time::{Duration, Instant};

use presa_testkit::{Client, tasks_caps};
use serde_json::json;

use crate::{PICKUPS, Running, ms, now_us, pct, row, take};

/// Bob's pace.
const BOB_EVERY: Duration = Duration::from_millis(20);
/// Alice's flooding connections.
const ALICE_CONNS: usize = 8;
/// How long each of Alice's tasks holds its slot.
pub(crate) const ALICE_TASK: Duration = Duration::from_millis(500);

/// Bob's pickups for `dur`, with or without Alice flooding meanwhile; and
/// how many of Alice's creates were accepted and refused.
async fn round(server: &Running, dur: Duration, flood: bool) -> (Vec<Duration>, u64, u64) {
    take(&PICKUPS);
    let until = Instant::now() + dur;
    let alice: Vec<_> = (0..if flood { ALICE_CONNS } else { 0 })
        .map(|_| {
            let c = Client::new(&server.url, tasks_caps()).with_scope("alice");
            tokio::spawn(async move {
                let (mut ids, mut refused) = (Vec::new(), 0u64);
                while Instant::now() < until {
                    let args = json!({ "ms": ALICE_TASK.as_millis() as u64 });
                    let r = c.try_send("tools/call", json!({ "name": "sleep_task", "arguments": args })).await;
                    match r.as_ref().ok().and_then(|(_, v)| v["result"]["taskId"].as_str()) {
                        Some(id) => ids.push(id.to_string()),
                        None => {
                            refused += 1;
                            tokio::time::sleep(Duration::from_millis(5)).await;
                        }
                    }
                }
                // Her backlog must not run into the next round (Bob alone).
                for id in &ids {
                    let _ = c.try_send("tasks/cancel", json!({ "taskId": id })).await;
                }
                (ids.len() as u64, refused)
            })
        })
        .collect();
    let bob = Client::new(&server.url, tasks_caps()).with_scope("bob");
    let mut tick = tokio::time::interval(BOB_EVERY);
    while Instant::now() < until {
        tick.tick().await;
        let r = bob.call_tool("stamp_task", json!({ "t": now_us() })).await;
        assert!(r["taskId"].is_string(), "bob's create was refused: {r}");
    }
    let (mut ok, mut refused) = (0, 0);
    for a in alice {
        let (o, r) = a.await.expect("alice's loop");
        (ok, refused) = (ok + o, refused + r);
    }
    // Bob's last tasks are picked up well within this.
    tokio::time::sleep(Duration::from_millis(500)).await;
    (take(&PICKUPS), ok, refused)
}

/// The rows for `server` (`name`: embedded or Redis), `secs` per half.
pub(crate) async fn rows(server: &Running, name: &str, secs: Duration) {
    let half = secs / 2;
    let (mut alone, mut flooded, mut accepted, mut refused) = (Vec::new(), Vec::new(), 0, 0);
    for _ in 0..2 {
        alone.extend(round(server, half, false).await.0);
        let (p, ok, r) = round(server, half, true).await;
        flooded.extend(p);
        (accepted, refused) = (accepted + ok, refused + r);
    }
    let ratio =
        |p: f64, a: &mut [Duration], f: &mut [Duration]| pct(f, p).as_secs_f64() / pct(a, p).as_secs_f64().max(1e-6);
    let (r50, r99) = (ratio(50.0, &mut alone, &mut flooded), ratio(99.0, &mut alone, &mut flooded));
    let notes = format!("{} pickups, p50 {} (goal: within 2x of alone)", alone.len(), ms(pct(&mut alone, 50.0)));
    row(&format!("fairness: bob alone, {name}"), 1, None, &mut alone, &notes);
    let notes = format!(
        "{} pickups; alice {accepted} tasks created, {refused} refused; flooded/alone p50 {r50:.2}x, p99 {r99:.2}x",
        flooded.len()
    );
    row(&format!("fairness: bob, alice flooding, {name}"), 1, None, &mut flooded, &notes);
}
