//! The catalog's tests: names two upstreams may not share, and where a tool's task policy comes from.

use super::*;

fn config(upstreams: &[(&str, &str)]) -> GatewayConfig {
    let args =
        crate::config::GatewayArgs { upstream_command: Some("unused".into()), upstream_pool: 1, ..Default::default() };
    let mut c = args.resolve().unwrap();
    let template = c.upstreams[0].clone();
    c.upstreams = upstreams
        .iter()
        .map(|(name, prefix)| UpstreamConfig { name: name.to_string(), prefix: prefix.to_string(), ..template.clone() })
        .collect();
    c
}

#[test]
fn two_upstreams_may_not_list_the_same_name_unless_prefixed() {
    let listing =
        Listing { tools: vec![json!({ "name": "search", "inputSchema": { "type": "object" } })], ..Listing::default() };
    let twice = [listing.clone(), listing];
    let clash = config(&[("a", ""), ("b", "")]);
    let pools: Vec<_> = clash.upstreams.iter().map(|u| Pool::new(u, &clash.timings)).collect();
    let err = build(&clash, &pools, &twice).unwrap_err().to_string();
    assert!(err.contains("\"a\" and \"b\" both list the tool \"search\"") && err.contains("prefix"), "{err}");
    let prefixed = config(&[("a", "a_"), ("b", "b_")]);
    let catalog = build(&prefixed, &pools, &twice).unwrap();
    let names: Vec<&str> = catalog.tools().map(presa_server::catalog::RegisteredTool::name).collect();
    assert_eq!(names, ["a_search", "b_search"]);
    let bad =
        [Listing { tools: vec![json!({ "name": "x", "inputSchema": { "type": "string" } })], ..Listing::default() }];
    assert!(build(&config(&[("a", "")]), &pools[..1], &bad).unwrap_err().to_string().contains("inputSchema"));
}

#[test]
fn policy_comes_from_the_rule_then_the_upstream_hint_then_optional() {
    let hinted = json!({ "execution": { "taskSupport": "required" } });
    let forbidden = json!({ "execution": { "taskSupport": "forbidden" } });
    let rule = |policy, after_ms| ToolRule {
        pattern: "*".into(),
        policy: Some(policy),
        after_ms,
        rerun: None,
        scopes: Vec::new(),
        retry: None,
        retry_on_codes: Vec::new(),
        retry_on_tool_error: false,
        rate: None,
        concurrency: None,
    };
    let two_s = Some(Duration::from_secs(2));
    assert!(matches!(policy_of(Some(&rule(PolicyRule::Sync, None)), None, &hinted), TaskPolicy::Sync));
    assert!(matches!(policy_of(None, None, &hinted), TaskPolicy::Required));
    assert!(matches!(policy_of(None, None, &forbidden), TaskPolicy::Optional));
    assert!(matches!(policy_of(None, None, &json!({})), TaskPolicy::Optional));
    assert!(matches!(policy_of(None, two_s, &json!({})), TaskPolicy::After(d) if d == Duration::from_secs(2)));
    let after = rule(PolicyRule::After, Some(300));
    assert!(
        matches!(policy_of(Some(&after), two_s, &json!({})), TaskPolicy::After(d) if d == Duration::from_millis(300))
    );
    let after = rule(PolicyRule::After, None);
    assert!(matches!(policy_of(Some(&after), None, &json!({})), TaskPolicy::After(d) if d == Duration::from_secs(1)));
}

/// A virtual server's catalog: only its upstreams' tools, prompts and
/// resources, without what its globs leave out, under the gateway's names.
#[test]
fn a_virtual_server_selects_without_renaming() {
    let listing = |tool: &str, other: &str, uri: &str| Listing {
        tools: [tool, other].map(|n| json!({ "name": n, "inputSchema": { "type": "object" } })).to_vec(),
        prompts: vec![json!({ "name": "greet" })],
        resources: vec![json!({ "uri": uri, "name": "r" })],
        ..Listing::default()
    };
    let listings = [listing("search", "drop", "a://r"), listing("add", "secret", "b://r")];
    let mut c = config(&[("a", "a_"), ("b", "b_")]);
    let server = |name: &str, upstreams: &[&str], tools: Option<Vec<String>>, hide: &[&str]| VirtualServer {
        name: name.into(),
        upstreams: upstreams.iter().map(ToString::to_string).collect(),
        tools,
        hide: hide.iter().map(ToString::to_string).collect(),
        scopes: Vec::new(),
        title: None,
        instructions: None,
    };
    c.servers =
        vec![server("one", &["a"], None, &["a_drop"]), server("two", &["a", "b"], Some(vec!["b_*".into()]), &[])];
    let pools: Vec<_> = c.upstreams.iter().map(|u| Pool::new(u, &c.timings)).collect();
    let built = build_all(&c, &pools, &listings).unwrap();
    let names = |cat: &Catalog| cat.tools().map(|t| t.name().to_string()).collect::<Vec<_>>();
    assert_eq!(names(&built.all), ["a_search", "a_drop", "b_add", "b_secret"]);
    assert_eq!(names(&built.servers[0]), ["a_search"]);
    assert_eq!(names(&built.servers[1]), ["b_add", "b_secret"]);
    let prompts = |cat: &Catalog| cat.prompts().iter().map(|p| p.descriptor["name"].clone()).collect::<Vec<_>>();
    assert_eq!(prompts(&built.servers[0]), [json!("a_greet")]);
    assert_eq!(prompts(&built.servers[1]), [json!("a_greet"), json!("b_greet")]);
    assert!(built.servers[0].read("a://r").is_some() && built.servers[0].read("b://r").is_none());
}
