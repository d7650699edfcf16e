//! The pods and Redis under test (also `presa-bench soak`'s): starting them, and reading what Redis holds (stored labels, pending work, claim attempts).

use super::*;

/// The Redis the pods use (`--topology`; `presa-bench soak` uses a standalone one).
pub(crate) enum Redis {
    /// One server with AOF, restarted from it after a kill (boxed: a container handle makes it large).
    Standalone(Box<TestRedis>),
    /// A primary, 2 replicas, 3 Sentinels.
    Sentinel(TestSentinel),
    /// 3 primaries with a replica each.
    Cluster(TestCluster),
}

impl Redis {
    /// Start it (blocking).
    pub(super) fn start(topology: Topology) -> Redis {
        match topology {
            Topology::Standalone => Redis::Standalone(Box::new(TestRedis::spawn_with(&[
                "--appendonly",
                "yes",
                "--appendfsync",
                "everysec",
            ]))),
            Topology::Sentinel => Redis::Sentinel(TestSentinel::spawn(2, 3)),
            Topology::Cluster => Redis::Cluster(TestCluster::spawn(3, 1)),
        }
    }

    /// The pods' settings to reach it.
    pub(super) fn env(&self) -> Vec<(String, String)> {
        let var = |k: &str, v: String| (k.to_string(), v);
        match self {
            Redis::Standalone(r) => vec![var("PRESA_REDIS_URL", r.url().to_string())],
            Redis::Sentinel(s) => vec![
                var("PRESA_REDIS_SENTINELS", s.sentinel_addresses()),
                var("PRESA_REDIS_SENTINEL_MASTER", SENTINEL_MASTER.to_string()),
            ],
            Redis::Cluster(c) => vec![var("PRESA_REDIS_URL", c.urls()), var("PRESA_REDIS_CLUSTER", "true".into())],
        }
    }

    pub(crate) fn describe(&self) -> String {
        match self {
            Redis::Standalone(r) => format!("redis {}", r.url()),
            Redis::Sentinel(s) => format!("Sentinels {} (master {SENTINEL_MASTER})", s.sentinel_addresses()),
            Redis::Cluster(c) => format!("Redis Cluster {}", c.urls()),
        }
    }

    /// The port of the primary holding partition `p`'s keys now (blocking).
    pub(super) fn primary_of(&self, p: u16) -> Result<u16, String> {
        match self {
            Redis::Standalone(r) => Ok(r.port()),
            Redis::Sentinel(s) => s.primary_port().ok_or_else(|| "no Sentinel names a primary".to_string()),
            Redis::Cluster(c) => c.primary_of_key(&tag(p)).ok_or_else(|| format!("no primary serves {}", tag(p))),
        }
    }

    /// The ports of the primaries (where the tasks are), blocking.
    pub(crate) fn primaries(&self) -> Result<Vec<u16>, String> {
        match self {
            Redis::Cluster(c) => Ok(c.primaries()),
            _ => Ok(vec![self.primary_of(0)?]),
        }
    }
}

/// What [`Rig::start`] starts besides Redis (chaos's from its flags; `presa-bench soak` has its own).
pub(crate) struct Shape {
    pub(crate) apis: usize,
    pub(crate) workers: usize,
    /// Settings of every pod besides Redis's, the key prefix and the state secret.
    pub(crate) env: Vec<(String, String)>,
    /// Extra flags of every API pod.
    pub(crate) api_flags: Vec<String>,
    /// Extra flags of every worker (besides its `--worker-id`).
    pub(crate) worker_flags: Vec<String>,
}

/// The pods and Redis under test (also `presa-bench soak`'s).
pub(crate) struct Rig {
    pub(crate) redis: Redis,
    /// Each API pod with the port it listens on.
    pub(crate) apis: Vec<(u16, Pod)>,
    /// Each worker with its worker id.
    pub(crate) workers: Vec<(String, Pod)>,
    pub(super) env: Vec<(String, String)>,
    pub(super) bin: PathBuf,
    /// The pods' key prefix (`PRESA_REDIS_PREFIX`).
    pub(crate) prefix: String,
    pub(super) generation: usize,
    pub(super) api_flags: Vec<String>,
    pub(super) worker_flags: Vec<String>,
}

impl Rig {
    /// Start the API pods, then the workers, on `redis`, each ready.
    pub(crate) async fn start(redis: Redis, shape: &Shape, bin: PathBuf) -> Rig {
        let prefix = unique_prefix();
        let mut env = redis.env();
        env.extend([
            ("PRESA_REDIS_PREFIX".to_string(), prefix.clone()),
            ("PRESA_STATE_SECRET".to_string(), format!("chaos-state-secret-{prefix}-0123456789abcdef")),
        ]);
        env.extend(shape.env.iter().cloned());
        let (api_flags, worker_flags) = (shape.api_flags.clone(), shape.worker_flags.clone());
        let (apis, workers) = (Vec::new(), Vec::new());
        let mut rig = Rig { redis, apis, workers, env, bin, prefix, generation: 0, api_flags, worker_flags };
        for i in 0..shape.apis {
            let port = free_port();
            let pod = rig.api(i, port).await;
            rig.apis.push((port, pod));
        }
        for i in 0..shape.workers {
            let id = format!("worker{i}");
            let pod = rig.worker(&id).await;
            rig.workers.push((id, pod));
        }
        rig
    }

    pub(super) fn env(&self) -> Vec<(&str, &str)> {
        self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
    }

    pub(super) async fn api(&self, i: usize, port: u16) -> Pod {
        let flags: Vec<&str> = self.api_flags.iter().map(String::as_str).collect();
        Pod::start(&format!("api{i}"), &self.bin.join("presa-api"), port, &flags, &self.env()).await
    }

    pub(crate) async fn worker(&self, id: &str) -> Pod {
        let flags: Vec<&str> =
            ["--worker-id", id].into_iter().chain(self.worker_flags.iter().map(String::as_str)).collect();
        Pod::start(id, &self.bin.join("presa-worker"), free_port(), &flags, &self.env()).await
    }

    /// A connection per partition, to the primary holding its keys (one
    /// shared connection when one primary holds them all).
    pub(crate) async fn partition_connections(&self) -> Result<Vec<redis::aio::MultiplexedConnection>, String> {
        let ports: Vec<u16> = tokio::task::block_in_place(|| {
            (0..PARTITIONS).map(|p| self.redis.primary_of(p)).collect::<Result<_, _>>()
        })?;
        let mut by_port: HashMap<u16, redis::aio::MultiplexedConnection> = HashMap::new();
        let mut out = Vec::with_capacity(ports.len());
        for port in ports {
            if let std::collections::hash_map::Entry::Vacant(e) = by_port.entry(port) {
                e.insert(node(port).await?);
            }
            out.push(by_port[&port].clone());
        }
        Ok(out)
    }

    /// The label (`c<n>`) of every task Redis holds (every task of the run:
    /// none expires within it), `?` for a task whose label cannot be read.
    pub(super) async fn stored_labels(&self) -> Result<Vec<String>, String> {
        let pattern = format!("{}:*:task:*", self.prefix);
        let mut labels = Vec::new();
        for port in tokio::task::block_in_place(|| self.redis.primaries())? {
            let mut con = node(port).await?;
            let mut cursor = 0u64;
            loop {
                let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(1000)
                    .query_async(&mut con)
                    .await
                    .map_err(|e| e.to_string())?;
                let mut pipe = redis::pipe();
                for key in &keys {
                    pipe.cmd("HMGET").arg(key).arg(&FIELDS);
                }
                let values: Vec<Vec<Option<Vec<u8>>>> = if keys.is_empty() {
                    Vec::new()
                } else {
                    pipe.query_async(&mut con).await.map_err(|e| e.to_string())?
                };
                labels.extend(values.iter().map(|v| label_of(v).unwrap_or_else(|| "?".into())));
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        Ok(labels)
    }

    /// The ids of the tasks whose work entries are pending for `consumer`.
    pub(super) async fn pending_tasks(&self, consumer: &str) -> Result<Vec<String>, String> {
        let mut cons = self.partition_connections().await?;
        let keys = Keys::new(self.prefix.clone(), PARTITIONS);
        let mut ids = Vec::new();
        for (stream, con) in keys.all_work().into_iter().zip(&mut cons) {
            let pending: Vec<(String, String, u64, u64)> = redis::cmd("XPENDING")
                .arg(&stream)
                .arg(GROUP)
                .arg("-")
                .arg("+")
                .arg(100_000)
                .arg(consumer)
                .query_async(con)
                .await
                .map_err(|e| e.to_string())?;
            for (entry, ..) in pending {
                let fields: Vec<(String, HashMap<String, String>)> = redis::cmd("XRANGE")
                    .arg(&stream)
                    .arg(&entry)
                    .arg(&entry)
                    .query_async(con)
                    .await
                    .map_err(|e| e.to_string())?;
                ids.extend(fields.into_iter().filter_map(|(_, f)| f.get("task").cloned()));
            }
        }
        Ok(ids)
    }
}

/// The label of a stored task record: its `label` argument, or once it
/// completed (arguments are dropped then), its result's `Completed <label>`.
pub(super) fn label_of(fields: &[Option<Vec<u8>>]) -> Option<String> {
    let doc: Value = serde_json::from_slice(Record::from_hash(fields)?.doc).ok()?;
    if let Some(label) = doc["work"]["arguments"]["label"].as_str() {
        return Some(label.to_string());
    }
    doc["result"]["content"][0]["text"].as_str()?.strip_prefix("Completed ").map(str::to_string)
}

/// Each task's claim `attempt` counter (its handler executions), from Redis; 0 when the task is gone.
pub(super) async fn attempts(rig: &Rig, seen: &[Seen]) -> Result<Vec<u64>, String> {
    let mut cons = rig.partition_connections().await?;
    let keys = Keys::new(rig.prefix.clone(), PARTITIONS);
    // One pipeline per partition (one slot: one node in a cluster).
    let mut by_partition: BTreeMap<u16, Vec<(usize, String)>> = BTreeMap::new();
    for (i, t) in seen.iter().enumerate() {
        let id = TaskId::from_wire(t.id.clone());
        if let (Some(p), Some(key)) = (keys.partition_of(&id), keys.task(&id)) {
            by_partition.entry(p).or_default().push((i, key));
        }
    }
    let mut out = vec![0; seen.len()];
    for (p, tasks) in by_partition {
        for chunk in tasks.chunks(500) {
            let mut pipe = redis::pipe();
            for (_, key) in chunk {
                pipe.cmd("HMGET").arg(key).arg(&FIELDS);
            }
            let got: Vec<Vec<Option<Vec<u8>>>> =
                pipe.query_async(&mut cons[usize::from(p)]).await.map_err(|e| format!("Redis: {e}"))?;
            for ((i, _), v) in chunk.iter().zip(got) {
                out[*i] = Record::from_hash(&v).map_or(0, |r| r.attempt);
            }
        }
    }
    Ok(out)
}
