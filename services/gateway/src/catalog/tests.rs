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
