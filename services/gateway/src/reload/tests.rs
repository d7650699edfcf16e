//! The reload's unit tests: what a new config file changes, and what it is refused for.

use std::path::Path;

use serde_json::json;

use super::*;

const UPSTREAM: &str = "[[upstream]]\nname = \"py\"\ncommand = \"unused\"\n";

/// A gateway's live config read from `dir/gateway.toml` (written with `text`), its pools and a listing of `add` and `echo` for each.
fn live(dir: &Path, text: &str) -> (Live, Vec<Arc<Pool>>, Vec<Listing>, CatalogCell) {
    let file = dir.join("gateway.toml");
    std::fs::write(&file, text).unwrap();
    let args = GatewayArgs { gateway_config: Some(file), upstream_pool: 1, ..GatewayArgs::default() };
    let config = args.resolve().unwrap();
    let pools: Vec<_> = config.upstreams.iter().map(|u| Pool::new(u, &config.timings)).collect();
    let schema = json!({ "type": "object", "properties": { "a": { "type": "integer" } } });
    let tools = ["add", "echo"].map(|n| json!({ "name": n, "inputSchema": schema })).to_vec();
    let listings = vec![Listing { tools, ..Listing::default() }; pools.len()];
    let cell = CatalogCell::from(catalog::build(&config, &pools, &listings).unwrap());
    let status = Reloader::new(&config).0;
    let reported = Arc::new(Mutex::new(pools.clone()));
    (Live { args: Some(args), config, status, reported }, pools, listings, cell)
}

fn names(cell: &CatalogCell) -> Vec<String> {
    cell.load().tools().map(|t| t.name().to_string()).collect()
}

#[tokio::test]
async fn a_new_shaping_is_served_and_a_bad_one_keeps_the_old() {
    let dir = tempfile::tempdir().unwrap();
    let (mut live, mut pools, mut listings, cell) = live(dir.path(), UPSTREAM);
    let mut changes = cell.changes();
    assert_eq!(names(&cell), ["add", "echo"]);
    let first = live.status.report();
    let file = dir.path().join("gateway.toml");
    std::fs::write(&file, format!("{UPSTREAM}hide = [\"echo\"]\n")).unwrap();
    live.reload(&mut pools, &mut listings, &cell, &[]).await;
    assert_eq!(names(&cell), ["add"]);
    assert!(changes.has_changed().unwrap(), "listen streams are told");
    changes.mark_unchanged();
    let applied = live.status.report();
    assert!(applied.version != first.version && applied.refusal.is_none(), "{applied:?}");
    for broken in [
        format!("{UPSTREAM}hide = [\"echo\"\n"),
        format!("{UPSTREAM}[[upstream.tool]]\nmatch = \"add\"\npin = {{ missing = 1 }}\n"),
    ] {
        std::fs::write(&file, &broken).unwrap();
        let err = check(live.args.as_ref().unwrap(), &live.config, &pools, &listings).await.err().unwrap();
        assert!(matches!(err, ReloadError::Config(_) | ReloadError::Catalog(_)), "{err}");
        live.reload(&mut pools, &mut listings, &cell, &[]).await;
        assert_eq!(names(&cell), ["add"], "the running catalog is kept");
        assert!(!changes.has_changed().unwrap());
        let refused = live.status.report();
        assert_eq!(refused.version, applied.version);
        assert_eq!(refused.refusal, Some(err.to_string()));
    }
}

#[tokio::test]
async fn a_changed_or_renamed_upstream_gets_a_new_pool_and_one_that_cannot_start_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (live, pools, listings, _cell) = live(dir.path(), UPSTREAM);
    let args = live.args.as_ref().unwrap();
    let file = dir.path().join("gateway.toml");
    for (text, names) in [
        (UPSTREAM.replace("\"py\"", "\"other\""), "\"other\""),
        (UPSTREAM.replace("unused", "/nonexistent/changed"), "\"py\""),
        (format!("{UPSTREAM}[[upstream]]\nname = \"two\"\ncommand = \"/nonexistent/upstream\"\n"), "\"two\""),
    ] {
        std::fs::write(&file, text).unwrap();
        let err = check(args, &live.config, &pools, &listings).await.err().unwrap();
        assert!(matches!(err, ReloadError::Catalog(_)) && err.to_string().contains(names), "{err}");
    }
    assert!(!pools[0].is_retired(), "a refused reload leaves the running pool serving");
}

#[tokio::test]
async fn reordered_upstreams_keep_their_pools_and_a_removed_one_is_retired() {
    let dir = tempfile::tempdir().unwrap();
    let [a, b] = ["a", "b"].map(|n| format!("[[upstream]]\nname = \"{n}\"\ncommand = \"unused\"\nprefix = \"{n}_\"\n"));
    let (mut live, mut pools, mut listings, cell) = live(dir.path(), &format!("{a}{b}"));
    let before = pools.clone();
    let file = dir.path().join("gateway.toml");
    std::fs::write(&file, format!("{b}{a}")).unwrap();
    live.reload(&mut pools, &mut listings, &cell, &[]).await;
    assert!(live.status.report().refusal.is_none(), "{:?}", live.status.report());
    assert!(Arc::ptr_eq(&pools[0], &before[1]) && Arc::ptr_eq(&pools[1], &before[0]), "the same pools, reordered");
    assert!(pools.iter().all(|p| !p.is_retired()));
    assert_eq!(names(&cell), ["b_add", "b_echo", "a_add", "a_echo"]);
    std::fs::write(&file, &a).unwrap();
    live.reload(&mut pools, &mut listings, &cell, &[]).await;
    assert_eq!(names(&cell), ["a_add", "a_echo"]);
    assert!(Arc::ptr_eq(&pools[0], &before[0]) && pools.len() == 1 && !pools[0].is_retired());
    assert!(before[1].is_retired(), "the removed upstream's pool takes no new call");
    let reported = live.reported.lock().unwrap().iter().map(|p| p.name().to_string()).collect::<Vec<_>>();
    assert_eq!(reported, ["a"], "the heartbeat reports what is served");
    let refused = before[1].get().await.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(refused.contains("removed or changed by a config reload"), "{refused}");
}

#[tokio::test]
async fn a_watched_file_is_reloaded_when_its_content_changes() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gateway.toml");
    std::fs::write(&file, UPSTREAM).unwrap();
    let args = GatewayArgs {
        gateway_config: Some(file.clone()),
        gateway_config_watch_ms: 20,
        upstream_pool: 1,
        ..GatewayArgs::default()
    };
    let (reloader, asked) = Reloader::new(&args.clone().resolve().unwrap());
    let watching = watch(&args, reloader).unwrap();
    let quiet = tokio::time::timeout(std::time::Duration::from_millis(200), asked.notified()).await;
    assert!(quiet.is_err(), "an unchanged file asks nothing");
    std::fs::write(&file, format!("{UPSTREAM}hide = [\"echo\"]\n")).unwrap();
    let asked_in_time = tokio::time::timeout(std::time::Duration::from_secs(5), asked.notified()).await;
    assert!(asked_in_time.is_ok(), "a changed file asks for a reload");
    watching.abort();
    let off = GatewayArgs { gateway_config_watch_ms: 0, ..args };
    assert!(watch(&off, Reloader::new(&off.clone().resolve().unwrap()).0).is_none());
}
