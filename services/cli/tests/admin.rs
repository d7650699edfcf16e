//! `presa admin …` against a live cluster: presa-api on Redis with static
//! tokens (an admin, a tenant admin of another tenant, a plain user) and
//! presa-worker pods: every command in table and `--json` form, the
//! refusals and their exit codes, `tasks --all` over several pages, and a
//! dead letter made by a worker that gives up at once (`--max-deliveries 0`),
//! replayed and discarded; and, against an embedded presa-api, `retry` of a
//! task waiting out a failed try (the demo's `flaky_job`) and the tries
//! `task`, `tasks` and `queues` show.

mod common;

use std::time::Duration;

use common::{api_bin, detached, embedded, presa, worker_bin};
use presa_testkit::{Pod, TestRedis, free_port, redis::unique_prefix};
use serde_json::Value;

const ADMIN: &str = "admin-token";
const GLOBEX_ADMIN: &str = "globex-admin-token";
const USER: &str = "user-token";

struct Cluster {
    url: String,
    _redis: TestRedis,
    _dir: tempfile::TempDir,
    api: Pod,
    env: Vec<(&'static str, String)>,
}

async fn cluster() -> Cluster {
    use presa_auth::tokens::token_digest;
    let redis = TestRedis::start().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tokens");
    let lines =
        [(ADMIN, "ops root presa:admin"), (GLOBEX_ADMIN, "globex gus presa:tenant-admin"), (USER, "acme alice")]
            .map(|(token, who)| format!("{} {who}\n", token_digest(token)))
            .concat();
    std::fs::write(&file, lines).unwrap();
    let env = vec![
        ("PRESA_REDIS_URL", redis.url().to_string()),
        ("PRESA_REDIS_PREFIX", unique_prefix()),
        ("PRESA_STATE_SECRET", "cli-admin-secret-at-least-32-bytes-long!".to_string()),
    ];
    let env_refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let args = ["--auth", "tokens", "--tokens-file", file.to_str().unwrap()];
    let api = Pod::start("api", &api_bin(), free_port(), &args, &env_refs).await;
    Cluster { url: api.url.clone(), _redis: redis, _dir: dir, api, env }
}

impl Cluster {
    async fn worker(&self, id: &str, extra: &[&str]) -> Pod {
        let env: Vec<(&str, &str)> = self.env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let mut args = vec!["--worker-id", id, "--lease-ms", "2000"];
        args.extend_from_slice(extra);
        Pod::start(id, &worker_bin(), free_port(), &args, &env).await
    }

    async fn admin(&self, token: &str, args: &[&str]) -> common::Out {
        let mut all = vec!["--token", token, "admin"];
        all.extend_from_slice(args);
        presa(&self.url, &all).await
    }

    async fn json(&self, token: &str, args: &[&str]) -> Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let out = self.admin(token, &all).await;
        assert_eq!(out.code, 0, "{out}\n{}", self.api.log());
        serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
    }

    async fn task_status(&self, id: &str) -> String {
        self.json(ADMIN, &["task", id]).await["status"].as_str().unwrap_or_default().to_string()
    }

    async fn wait_status(&self, id: &str, status: &str) {
        for _ in 0..200 {
            if self.task_status(id).await == status {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("task {id} never became {status}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presa_admin_sees_and_steers_a_cluster() {
    let c = cluster().await;
    let call = |label: &'static str, seconds: &'static str| {
        let url = c.url.clone();
        async move {
            let secs = format!("seconds={seconds}");
            let label = format!("label={label}");
            detached(&url, &["--token", USER, "slow_compute", &secs, &label]).await
        }
    };

    // A dead letter, honestly: the only worker gives up on the first delivery.
    let poison = c.worker("w-poison", &["--max-deliveries", "0"]).await;
    let doomed = call("doomed", "0").await;
    c.wait_status(&doomed, "failed").await;
    drop(poison);
    let _worker = c.worker("w-1", &[]).await;

    let me = c.admin(ADMIN, &["whoami"]).await;
    assert_eq!((me.code, me.stdout.as_str()), (0, "ops/root (admin)\n"), "{me}");
    let me = c.json(ADMIN, &["whoami"]).await;
    assert_eq!((&me["tenant"], &me["subject"], &me["role"]), (&"ops".into(), &"root".into(), &"admin".into()), "{me}");
    let them = c.json(GLOBEX_ADMIN, &["whoami"]).await;
    assert_eq!(them["role"], "tenant-admin", "{them}");

    // Tasks: one that completes, a long one to cancel, and enough for pages.
    let quick = call("quick", "0").await;
    let long = call("long", "60").await;
    let long2 = call("long2", "60").await;
    let mut made = vec![doomed.clone(), quick.clone(), long.clone(), long2.clone()];
    for _ in 0..4 {
        made.push(call("filler", "0").await);
    }
    c.wait_status(&quick, "completed").await;

    let table = c.admin(ADMIN, &["tasks", "--tenant", "acme"]).await;
    assert_eq!(table.code, 0, "{table}");
    assert!(table.stdout.starts_with("TASK "), "{table}");
    for id in &made {
        assert!(table.stdout.contains(id.as_str()), "{id} listed: {table}");
    }
    let all = c.json(ADMIN, &["tasks", "--tenant", "acme", "--limit", "2", "--all"]).await;
    let ids: Vec<String> =
        all["tasks"].as_array().unwrap().iter().map(|t| t["taskId"].as_str().unwrap().to_string()).collect();
    let mut sorted = ids.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), ids.len(), "no task twice over pages of 2: {ids:?}");
    let mut expected = made.clone();
    expected.sort();
    assert_eq!(sorted, expected, "every task once");
    let one = c.json(ADMIN, &["tasks", "--tenant", "acme", "--limit", "2"]).await;
    assert!(one["next"].is_string(), "a page with more has a next: {one}");
    let completed = c.json(ADMIN, &["tasks", "--status", "completed", "--tool", "slow_compute"]).await;
    assert!(completed["tasks"].as_array().unwrap().iter().any(|t| t["taskId"] == quick.as_str()), "{completed}");

    let detail = c.admin(ADMIN, &["task", &quick]).await;
    assert!(detail.stdout.contains("status          completed") && detail.stdout.contains("acme/alice"), "{detail}");

    // Cancel, then a second cancel is a conflict (exit 8).
    let cancel = c.admin(ADMIN, &["cancel", &long]).await;
    assert_eq!((cancel.code, cancel.stdout.as_str()), (0, format!("task {long} is cancelled\n").as_str()), "{cancel}");
    let again = c.admin(ADMIN, &["cancel", &long]).await;
    assert_eq!(again.code, 8, "{again}");
    assert!(again.stderr.contains("409") && again.stderr.contains("ended"), "{again}");
    let cancelled = c.json(ADMIN, &["cancel", &long2]).await;
    assert_eq!(
        (&cancelled["task"]["taskId"], &cancelled["task"]["status"]),
        (&long2.as_str().into(), &"cancelled".into())
    );

    // Dead letters: listed, replayed once, discarded once.
    let letters = c.admin(ADMIN, &["dead-letters", "--tenant", "acme"]).await;
    assert!(letters.stdout.contains(&doomed) && letters.stdout.contains("max_deliveries (0)"), "{letters}");
    let replay = c.admin(ADMIN, &["replay", &doomed, "--tenant", "acme"]).await;
    assert!(replay.stdout.starts_with("replayed as task p"), "{replay}");
    let replayed = c.json(ADMIN, &["replay", &doomed, "--tenant", "acme"]).await;
    assert_eq!(replayed["first"], false, "a second replay makes no second task: {replayed}");
    let new_id = replayed["taskId"].as_str().unwrap().to_string();
    assert!(replay.stdout.contains(&new_id), "{replay}");
    c.wait_status(&new_id, "completed").await;
    let listed = c.json(ADMIN, &["dead-letters", "--tenant", "acme"]).await;
    let letter = listed["deadLetters"].as_array().unwrap().iter().find(|l| l["taskId"] == doomed.as_str()).cloned();
    assert_eq!(letter.map(|l| l["replayedAs"].clone()), Some(new_id.as_str().into()), "{listed}");
    let discard = c.admin(ADMIN, &["discard", &doomed, "--tenant", "acme"]).await;
    assert_eq!(discard.code, 0, "{discard}");
    let gone = c.admin(ADMIN, &["discard", &doomed, "--tenant", "acme"]).await;
    assert_eq!(gone.code, 2, "discarded already: a 404 is exit 2: {gone}");

    // Cluster, queues, tenants, usage, drain.
    let cluster = c.admin(ADMIN, &["cluster"]).await;
    assert!(
        cluster.stdout.contains("w-1") && cluster.stdout.contains("worker") && cluster.stdout.contains("api"),
        "{cluster}"
    );
    // The counts come with the next heartbeat (every 5 s).
    let counted = |v: &Value| {
        v["nodes"].as_array().unwrap().iter().any(|n| n["id"] == "w-1" && n["completed"].as_u64() >= Some(1))
    };
    let mut nodes = c.json(ADMIN, &["cluster"]).await;
    for _ in 0..80 {
        if counted(&nodes) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        nodes = c.json(ADMIN, &["cluster"]).await;
    }
    assert!(counted(&nodes), "w-1 reports what it completed: {nodes}");
    let queues = c.admin(ADMIN, &["queues"]).await;
    assert!(queues.stdout.starts_with("PARTITION") && queues.stdout.contains("\ntotal "), "{queues}");
    let tenants = c.admin(ADMIN, &["tenants"]).await;
    assert_eq!(tenants.stdout, "acme\n", "{tenants}");
    let tenants = c.json(ADMIN, &["tenants"]).await;
    assert_eq!(tenants["tenants"], serde_json::json!(["acme"]), "{tenants}");
    let queues = c.json(ADMIN, &["queues"]).await;
    assert!(queues["total"]["queued"].is_u64() && queues["partitions"].is_array(), "{queues}");
    // The demo's one circuit breaker, closed.
    let breakers = c.admin(ADMIN, &["breakers"]).await;
    assert!(breakers.stdout.starts_with("BREAKER ") && breakers.stdout.contains(" RETRY IN "), "{breakers}");
    let row = breakers.stdout.lines().find(|l| l.starts_with("fragile_job")).unwrap_or_default().to_string();
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cells,
        ["fragile_job", "closed", "0/3", "-", "3", "in", "10s,", "open", "2s", "fragile_job"],
        "{breakers}"
    );
    let breakers = c.json(ADMIN, &["breakers"]).await;
    assert_eq!(breakers["breakers"][0]["name"], "fragile_job", "{breakers}");
    assert_eq!(breakers["breakers"][0]["state"], "closed", "{breakers}");
    let refused = c.admin(GLOBEX_ADMIN, &["breakers"]).await;
    assert_ne!(refused.code, 0, "the cluster's breakers are for its admins: {refused}");
    // presa-api is no gateway: no upstreams (the header only), and none to restart.
    let upstreams = c.admin(ADMIN, &["upstreams"]).await;
    assert!(upstreams.stdout.starts_with("UPSTREAM ") && upstreams.stdout.lines().count() == 1, "{upstreams}");
    let upstreams = c.json(ADMIN, &["upstreams"]).await;
    assert_eq!(upstreams["upstreams"], serde_json::json!([]), "{upstreams}");
    let unknown = c.admin(ADMIN, &["restart-upstream", "py"]).await;
    assert_eq!(unknown.code, 2, "no process reports it (404): {unknown}");
    let refused = c.admin(GLOBEX_ADMIN, &["upstreams"]).await;
    assert_ne!(refused.code, 0, "the upstreams are for the cluster's admins: {refused}");
    // Nor a gateway config: none shown, and nothing to reload.
    let configs = c.admin(ADMIN, &["gateway-config"]).await;
    assert!(configs.stdout.starts_with("NODE ") && configs.stdout.lines().count() == 1, "{configs}");
    assert_eq!(c.json(ADMIN, &["gateway-config"]).await["processes"], serde_json::json!([]));
    let none = c.admin(ADMIN, &["reload-gateway"]).await;
    assert_eq!(none.code, 2, "no process reports a config (404): {none}");
    let refused = c.admin(GLOBEX_ADMIN, &["reload-gateway"]).await;
    assert!(refused.code != 0 && refused.code != 2, "a reload is for the cluster's admins: {refused}");
    let usage = c.json(ADMIN, &["usage", "--tenant", "acme"]).await;
    assert_eq!(usage["principals"][0]["subject"], "alice", "{usage}");
    let usage = c.admin(ADMIN, &["usage", "--tenant", "acme"]).await;
    assert!(usage.stdout.contains("tenant acme:") && usage.stdout.contains("\nalice "), "{usage}");
    let drain = c.admin(ADMIN, &["drain", "w-1"]).await;
    assert_eq!(drain.stdout, "worker w-1 is draining\n", "{drain}");
    let drained = c.json(ADMIN, &["cluster"]).await;
    assert!(
        drained["nodes"].as_array().unwrap().iter().any(|n| n["id"] == "w-1" && n["draining"] == true),
        "{drained}"
    );
    let again = c.json(ADMIN, &["drain", "w-1"]).await;
    assert_eq!((&again["node"]["id"], &again["node"]["draining"]), (&"w-1".into(), &true.into()), "{again}");

    // Refusals: another tenant's admin, a plain user, bad input.
    let theirs = c.admin(GLOBEX_ADMIN, &["tasks", "--tenant", "acme"]).await;
    assert_eq!(theirs.code, 6, "a tenant admin on another tenant: {theirs}");
    assert!(theirs.stderr.contains("403") && theirs.stderr.contains("own tenant"), "{theirs}");
    let own = c.json(GLOBEX_ADMIN, &["tasks"]).await;
    assert_eq!(own["tasks"], serde_json::json!([]), "globex has none, and sees none of acme's: {own}");
    let by_id = c.admin(GLOBEX_ADMIN, &["task", &quick]).await;
    assert_eq!(by_id.code, 2, "another tenant's task is unknown: {by_id}");
    let user = c.admin(USER, &["tasks"]).await;
    assert_eq!(user.code, 6, "{user}");
    assert!(user.stderr.contains("presa:admin"), "the scope it lacks is named: {user}");
    let anonymous = presa(&c.url, &["admin", "whoami"]).await;
    assert_eq!(anonymous.code, 6, "no token: {anonymous}");
    assert!(anonymous.stderr.contains("401"), "{anonymous}");
    let bad = c.admin(ADMIN, &["tasks", "--status", "done"]).await;
    assert_eq!(bad.code, 2, "{bad}");
    assert!(bad.stderr.contains("status must be"), "{bad}");
    let unknown = c.admin(ADMIN, &["task", "p00.nope"]).await;
    assert_eq!(unknown.code, 2, "{unknown}");
}

/// `presa admin task ID` of task `id` as JSON once `done` holds (30 s at most).
async fn admin_task_when(url: &str, id: &str, done: impl Fn(&Value) -> bool) -> Value {
    let mut task = Value::Null;
    for _ in 0..300 {
        let out = presa(url, &["--json", "admin", "task", id]).await;
        task = serde_json::from_str(out.stdout.trim()).unwrap_or(Value::Null);
        if done(&task) {
            return task;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("task {id} never got there: {task}");
}

/// A `flaky_job` whose first try fails and asks to be tried again in ten
/// minutes waits: `task` prints the failed try and when the next is due,
/// `tasks` its next try, `queues` the delayed work. `retry` makes it due
/// now and it completes on its second try; retrying it again (it ended) or
/// a running task (its work is not waiting) is a 409, exit 8 with the
/// API's message; an unknown task is exit 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presa_admin_retries_a_waiting_task_now_and_shows_its_tries() {
    let api = embedded().await;
    let url = api.url.as_str();
    let id = detached(url, &["flaky_job", "failures=1", "retryAfterMs=600000"]).await;
    admin_task_when(url, &id, |t| t["retries"]["dueAtMs"].is_u64()).await;

    let task = presa(url, &["admin", "task", &id]).await;
    assert_eq!(task.code, 0, "{task}");
    let lines: Vec<&str> = task.stdout.lines().collect();
    let at = lines.iter().position(|l| *l == "failed tries    1").unwrap_or_else(|| panic!("{task}"));
    let tried = lines[at + 1];
    assert!(
        tried.starts_with("                #1 ") && tried.ends_with(" ago: simulated outage on try 1, put off 10m"),
        "{task}"
    );
    assert_eq!(lines[at + 2], "next try        in 9m", "{task}");
    let tasks = presa(url, &["admin", "tasks"]).await;
    let row = tasks.stdout.lines().find(|l| l.starts_with(id.as_str())).unwrap_or_else(|| panic!("{tasks}"));
    assert!(row.ends_with("  in 9m"), "{tasks}");
    let queues = presa(url, &["admin", "queues"]).await;
    assert!(
        queues.stdout.starts_with("PARTITION  QUEUED  PENDING  OLDEST QUEUED  OLDEST PENDING  DELAYED  OLDEST DUE\n")
    );
    let total = queues.stdout.lines().last().unwrap_or_default().split_whitespace().collect::<Vec<_>>();
    assert_eq!((total[0], total[total.len() - 2], total[total.len() - 1]), ("total", "1", "-"), "{queues}");

    let retry = presa(url, &["admin", "retry", &id]).await;
    assert_eq!(
        (retry.code, retry.stdout.as_str()),
        (0, format!("task {id} is due now: a worker runs its next try\n").as_str())
    );
    let done = admin_task_when(url, &id, |t| t["status"] == "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "Succeeded on try 2", "{done}");
    let task = presa(url, &["admin", "task", &id]).await;
    assert!(task.stdout.contains("\nfailed tries    1\n") && task.stdout.contains("\nnext try        -\n"), "{task}");

    let again = presa(url, &["admin", "retry", &id]).await;
    assert_eq!(again.code, 8, "{again}");
    assert!(again.stderr.contains("409") && again.stderr.contains("the task has ended (completed)"), "{again}");
    let running = detached(url, &["slow_compute", "seconds=60"]).await;
    admin_task_when(url, &running, |t| t["worker"].is_string()).await;
    let busy = presa(url, &["admin", "retry", &running]).await;
    assert_eq!(busy.code, 8, "{busy}");
    assert!(busy.stderr.contains("not waiting for a retry"), "{busy}");
    let unknown = presa(url, &["admin", "retry", "p00.nope"]).await;
    assert_eq!(unknown.code, 2, "{unknown}");
}
