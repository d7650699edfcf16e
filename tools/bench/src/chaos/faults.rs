//! The kills: a Redis primary's failover, and every planned kill done one at a time under load.

use super::*;

impl Rig {
    /// SIGKILL the primary (Sentinel: the one the Sentinels name now;
    /// Cluster: the one serving `{p00}`), wait for its replica's promotion,
    /// and `restart` after it restart the killed node as a replica. With a
    /// `gap`, the primary is first cut off from its replicas for that long,
    /// so what it acknowledges meanwhile never reaches the replica that will
    /// be promoted: the replication lag a failover loses, made certain. (A
    /// replica whose link is dropped reconnects within milliseconds and
    /// resynchronises from the backlog, so the primary first takes a
    /// password its replicas do not have: connections already open keep
    /// working, new ones, the replicas' included, are refused.)
    pub(super) async fn kill_primary(&mut self, restart: Duration, gap: Duration) -> Result<Kill, String> {
        let old = tokio::task::block_in_place(|| match &self.redis {
            Redis::Sentinel(set) => set.primary_port().ok_or("no Sentinel names a primary"),
            Redis::Cluster(cluster) => {
                cluster.primary_of_slot(cluster.slot_of(&tag(0))).ok_or("no primary serves {p00}")
            }
            Redis::Standalone(_) => Err("a standalone Redis has no replica to promote"),
        })?;
        if !gap.is_zero() {
            let mut primary = node(old).await?;
            let cut: redis::RedisResult<((), i64)> = redis::pipe()
                .cmd("CONFIG")
                .arg("SET")
                .arg("requirepass")
                .arg(format!("chaos-{}", std::process::id()))
                .cmd("CLIENT")
                .arg("KILL")
                .arg("TYPE")
                .arg("replica")
                .query_async(&mut primary)
                .await;
            cut.map_err(|e| format!("cutting 127.0.0.1:{old} off its replicas: {e}"))?;
            tokio::time::sleep(gap).await;
        }
        let (at, partitions, new) = tokio::task::block_in_place(|| match &mut self.redis {
            Redis::Sentinel(set) => {
                let at = Instant::now();
                set.kill_data_node(old);
                let new = set.wait_for_failover(old, Duration::from_secs(60))?;
                Ok((at, (0..PARTITIONS).collect(), new))
            }
            Redis::Cluster(cluster) => {
                let slot = cluster.slot_of(&tag(0));
                let partitions = (0..PARTITIONS).filter(|&p| cluster.primary_of_key(&tag(p)) == Some(old)).collect();
                let at = Instant::now();
                cluster.kill_node(old);
                let new = cluster.wait_for_failover(slot, old, Duration::from_secs(60))?;
                Ok((at, partitions, new))
            }
            Redis::Standalone(_) => Err("a standalone Redis has no replica to promote".to_string()),
        })?;
        let back_at = Instant::now();
        tokio::time::sleep(restart).await;
        tokio::task::block_in_place(|| match &mut self.redis {
            Redis::Sentinel(set) => set.restart_data_node(old, new),
            Redis::Cluster(cluster) => cluster.restart_node(old),
            Redis::Standalone(_) => Ok(()),
        })?;
        let target = format!("primary 127.0.0.1:{old} (promoted: {new})");
        Ok(Kill {
            kind: Kind::Primary,
            at,
            target,
            in_flight: Vec::new(),
            back_at,
            partitions,
            rejoined_at: Some(Instant::now()),
        })
    }
}

/// Do every planned kill, one at a time, each when enough tasks were acknowledged.
pub(super) async fn kill_all(s: &Shared, rig: &mut Rig) -> Vec<Kill> {
    let mut kills = Vec::new();
    let (mut next_worker, mut next_api) = (0, 0);
    for (at, kind) in schedule(&s.args) {
        while s.acked.load(Ordering::Relaxed) < at && !s.done.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let restart = Duration::from_millis(s.args.restart_ms);
        let acked = s.acked.load(Ordering::Relaxed);
        let kill = match kind {
            Kind::Worker => {
                let k = next_worker % rig.workers.len();
                next_worker += 1;
                let (id, pod) = &mut rig.workers[k];
                pod.signal("KILL");
                let at = Instant::now();
                pod.wait_exit(Duration::from_secs(10)).await;
                let target = id.clone();
                let in_flight = rig.pending_tasks(&target).await.unwrap_or_else(|e| {
                    eprintln!("chaos: reading {target}'s pending work: {e}");
                    Vec::new()
                });
                tokio::time::sleep(restart.saturating_sub(at.elapsed())).await;
                rig.generation += 1;
                let id = format!("worker{k}-{}", rig.generation);
                let pod = rig.worker(&id).await;
                rig.workers[k] = (id, pod);
                Kill::replaced(kind, at, target, in_flight)
            }
            Kind::Api => {
                let k = next_api % rig.apis.len();
                next_api += 1;
                let (port, pod) = &mut rig.apis[k];
                let port = *port;
                let target = pod.name.clone();
                pod.signal("KILL");
                let at = Instant::now();
                pod.wait_exit(Duration::from_secs(10)).await;
                tokio::time::sleep(restart.saturating_sub(at.elapsed())).await;
                rig.apis[k].1 = rig.api(k, port).await;
                Kill::replaced(kind, at, target, Vec::new())
            }
            Kind::Redis => {
                let Redis::Standalone(redis) = &mut rig.redis else {
                    unreachable!("ChaosArgs::check allows Redis restarts on a standalone Redis only")
                };
                let down = Duration::from_millis(s.args.redis_down_ms);
                let at = Instant::now();
                tokio::task::block_in_place(|| redis.kill());
                tokio::time::sleep(down.saturating_sub(at.elapsed())).await;
                tokio::task::block_in_place(|| redis.restart());
                let target = "redis".into();
                Kill::replaced(kind, at, target, Vec::new())
            }
            Kind::Primary => match rig.kill_primary(restart, Duration::from_millis(s.args.replication_gap_ms)).await {
                Ok(kill) => kill,
                Err(e) => {
                    eprintln!("chaos: killing the primary: {e}");
                    continue;
                }
            },
        };
        let detail = match kind {
            Kind::Worker => format!("; it held {} tasks", kill.in_flight.len()),
            Kind::Primary => format!(
                " (promotion); back as a replica after {:.2} s; it held partitions {:?}",
                kill.rejoined_at.map_or(0.0, |t| (t - kill.at).as_secs_f64()),
                kill.partitions
            ),
            _ => String::new(),
        };
        println!(
            "t+{:>6.1} s  {} killed at {} acked; back after {:.2} s{detail}",
            (kill.at - s.start).as_secs_f64(),
            kill.target,
            acked,
            (kill.back_at - kill.at).as_secs_f64(),
        );
        kills.push(kill);
    }
    kills
}
