//! The admin half of the contract ([`crate::admin`]): task listings are
//! newest first, filtered, confined to the tenant asked for and paged
//! stably while tasks are created; expired tasks leave them; heartbeats
//! list live processes and a drain reaches the drained one only.
//!
//! These cases take the whole [`Backend`]: they create through the
//! [`TaskStore`](crate::TaskStore) and read through the [`AdminStore`](crate::AdminStore).

use std::{collections::HashSet, time::Duration};

use presa_tasks::{Event, Scope, Status, TaskId};

use super::{LONG_LEASE, NO_LIMITS, claim_one, new_task, next, result};
use crate::{admin::NodeInfo, admin::TaskFilter, admin::TaskPage, backend::Backend, claim::Cas};

fn owner(tenant: &str, subject: &str) -> Scope {
    Scope { tenant: tenant.into(), subject: subject.into(), endpoint: None }
}

/// Create a task of `scope` running `tool`.
async fn create_running(backend: &Backend, scope: &Scope, tool: &str, ttl_ms: u64) -> presa_tasks::Task {
    let mut new = new_task(scope, Some(ttl_ms));
    new.work.tool = tool.into();
    backend.store.create(new, NO_LIMITS).await.expect("create")
}

fn ids(page: &TaskPage) -> Vec<TaskId> {
    page.tasks.iter().map(|t| t.id.clone()).collect()
}

/// Every page of `filter`, `limit` at a time, in order.
async fn all_pages(backend: &Backend, filter: &TaskFilter, limit: usize) -> Vec<TaskId> {
    let (mut out, mut before) = (Vec::new(), None::<String>);
    for _ in 0..1_000 {
        let page = backend.admin.list_tasks(filter, before.as_deref(), limit).await.expect("list_tasks");
        out.extend(ids(&page));
        match page.next {
            Some(n) => before = Some(n),
            None => return out,
        }
    }
    panic!("the listing never ended");
}

/// Listings are newest first, narrowed by every filter field, and a
/// tenant's listing holds nothing of another tenant's.
pub async fn task_listings_are_newest_first_filtered_and_tenant_scoped(backend: Backend) {
    let (alice, bob, eve) = (owner("acme", "alice"), owner("acme", "bob"), owner("globex", "eve"));
    let mut made = Vec::new();
    for (scope, tool) in [(&alice, "echo"), (&bob, "slow"), (&eve, "echo"), (&alice, "slow"), (&bob, "echo")] {
        made.push(create_running(&backend, scope, tool, 60_000).await);
        // Distinct creation times, so "newest first" is one order.
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    // One task completes (whichever a claim brings: a cluster claims partition by partition).
    let claim = claim_one(&backend.work, "w1", LONG_LEASE).await;
    let done_at = made.iter().position(|t| t.id == claim.task.id).expect("one of the five");
    let done = next(&claim.task, Event::Complete(result()));
    assert!(matches!(backend.work.conclude(&done, &claim).await.expect("conclude"), Cas::Applied(_)));

    let list = |filter: TaskFilter| {
        let admin = backend.admin.clone();
        async move { admin.list_tasks(&filter, None, 100).await.expect("list_tasks") }
    };
    let acme = TaskFilter { tenant: Some("acme".into()), ..TaskFilter::default() };
    let page = list(acme.clone()).await;
    let newest_first: Vec<TaskId> = [4, 3, 1, 0].iter().map(|i| made[*i].id.clone()).collect();
    assert_eq!((ids(&page), page.next), (newest_first, None), "acme's four tasks, newest first");

    let everyone = list(TaskFilter::default()).await;
    assert_eq!(ids(&everyone), made.iter().rev().map(|t| t.id.clone()).collect::<Vec<_>>(), "every tenant's");
    assert_eq!(everyone.tasks[4 - done_at].status, Status::Completed, "a listing shows the stored task");
    let globex = list(TaskFilter { tenant: Some("globex".into()), ..TaskFilter::default() }).await;
    assert_eq!(ids(&globex), vec![made[2].id.clone()], "globex sees only its own");
    let nobody = list(TaskFilter { tenant: Some("initech".into()), ..TaskFilter::default() }).await;
    assert!(nobody.tasks.is_empty() && nobody.next.is_none(), "a tenant without tasks sees none");

    let bobs = list(TaskFilter { subject: Some("bob".into()), ..acme.clone() }).await;
    assert_eq!(ids(&bobs), vec![made[4].id.clone(), made[1].id.clone()]);
    let slow = list(TaskFilter { tool: Some("slow".into()), ..acme.clone() }).await;
    assert_eq!(ids(&slow), vec![made[3].id.clone(), made[1].id.clone()]);
    let completed = list(TaskFilter { status: Some(Status::Completed), ..TaskFilter::default() }).await;
    assert_eq!(ids(&completed), vec![made[done_at].id.clone()]);
    let window = TaskFilter {
        created_from_ms: Some(made[1].created_at_ms),
        created_before_ms: Some(made[4].created_at_ms),
        ..acme.clone()
    };
    assert_eq!(ids(&list(window).await), vec![made[3].id.clone(), made[1].id.clone()], "from is in, before is out");

    let mut tenants = backend.admin.tenants().await.expect("tenants");
    tenants.retain(|t| t == "acme" || t == "globex");
    assert_eq!(tenants, vec!["acme".to_string(), "globex".to_string()]);
}

/// Paging through a tenant's tasks while new ones are created returns every
/// task that existed before the listing began exactly once, and none of the
/// new ones; a filter that passes few tasks still ends.
pub async fn task_listing_pages_are_stable_under_concurrent_creates(backend: Backend) {
    let alice = owner("paging", "alice");
    let mut before = HashSet::new();
    for i in 0..23 {
        let tool = if i % 5 == 0 { "rare" } else { "echo" };
        before.insert(create_running(&backend, &alice, tool, 60_000).await.id);
    }
    tokio::time::sleep(Duration::from_millis(3)).await;
    let filter = TaskFilter { tenant: Some("paging".into()), ..TaskFilter::default() };
    let (mut seen, mut cursor, mut pages) = (Vec::new(), None::<String>, 0);
    loop {
        let page = backend.admin.list_tasks(&filter, cursor.as_deref(), 5).await.expect("list_tasks");
        assert!(page.tasks.len() <= 5, "a page holds at most its limit");
        seen.extend(ids(&page));
        pages += 1;
        // Others create while the listing goes on.
        create_running(&backend, &alice, "echo", 60_000).await;
        match page.next {
            Some(n) => cursor = Some(n),
            None => break,
        }
        assert!(pages < 100, "the listing ends");
    }
    let unique: HashSet<TaskId> = seen.iter().cloned().collect();
    assert_eq!(unique.len(), seen.len(), "no task twice: {seen:?}");
    assert_eq!(unique, before, "exactly the tasks that existed when the listing began");

    let rare = all_pages(&backend, &TaskFilter { tool: Some("rare".into()), ..filter.clone() }, 2).await;
    assert_eq!(rare.len(), 5, "the five rare ones, over pages that may be short: {rare:?}");
}

/// An expired task leaves every listing.
pub async fn expired_tasks_leave_listings(backend: Backend) {
    let alice = owner("expiring", "alice");
    let short = create_running(&backend, &alice, "echo", 150).await;
    tokio::time::sleep(Duration::from_millis(3)).await;
    let long = create_running(&backend, &alice, "echo", 60_000).await;
    let filter = TaskFilter { tenant: Some("expiring".into()), ..TaskFilter::default() };
    assert_eq!(all_pages(&backend, &filter, 10).await, vec![long.id.clone(), short.id.clone()]);
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(all_pages(&backend, &filter, 10).await, vec![long.id], "the expired one is gone");
}

fn node(id: &str, role: &str, started_at_ms: u64) -> NodeInfo {
    NodeInfo {
        id: id.into(),
        role: role.into(),
        version: "0.1.0".into(),
        started_at_ms,
        heartbeat_at_ms: started_at_ms + 10,
        slots_in_use: 2,
        slots: 8,
        tools: vec!["echo".into()],
        draining: false,
        created: 0,
        completed: 3,
        failed: 1,
        // A gateway's upstreams round-trip with the heartbeat.
        upstreams: vec![crate::UpstreamReport {
            name: "everything".into(),
            state: "ready".into(),
            pool: 2,
            tool_count: 3,
            catalog_version: 1,
            tools: vec![crate::ToolCalls { tool: "echo".into(), calls: 4, errors: 1 }],
            ..Default::default()
        }],
        // And its config's report.
        config: Some(crate::ConfigReport {
            version: "0123abcd".into(),
            loaded_at_ms: started_at_ms,
            refused_at_ms: Some(started_at_ms + 5),
            refusal: Some("bad TOML".into()),
        }),
    }
}

/// Heartbeats list live processes (newest start first) until their time to
/// live runs out; a drain is told to the drained node's next heartbeat
/// only, and an unknown or silent node cannot be drained.
pub async fn heartbeats_list_live_nodes_and_drains_reach_them(backend: Backend) {
    let admin = &backend.admin;
    let (worker, api) = (node("contract-worker-1", "worker", 1_000), node("contract-api-1", "api", 2_000));
    assert!(!admin.heartbeat(&worker, Duration::from_secs(30)).await.expect("heartbeat"));
    assert!(!admin.heartbeat(&api, Duration::from_millis(300)).await.expect("heartbeat"));
    let mine = |nodes: Vec<NodeInfo>| -> Vec<NodeInfo> {
        nodes.into_iter().filter(|n| n.id.starts_with("contract-")).collect()
    };
    assert_eq!(mine(admin.nodes().await.expect("nodes")), vec![api.clone(), worker.clone()]);

    let drained = admin.drain(&worker.id).await.expect("drain").expect("a live node");
    assert_eq!(drained, NodeInfo { draining: true, ..worker.clone() });
    assert_eq!(
        admin.drain(&worker.id).await.expect("drain again"),
        Some(drained.clone()),
        "asking again changes nothing"
    );
    assert!(admin.heartbeat(&worker, Duration::from_secs(30)).await.expect("heartbeat"), "the drained node is told");
    assert!(!admin.heartbeat(&api, Duration::from_millis(300)).await.expect("heartbeat"), "the other is not");
    assert_eq!(admin.drain("contract-nobody").await.expect("drain"), None);

    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(mine(admin.nodes().await.expect("nodes")), vec![drained], "the silent node is forgotten");
    assert_eq!(admin.drain(&api.id).await.expect("drain"), None, "a silent node cannot be drained");
}
