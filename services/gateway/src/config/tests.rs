//! The configuration's unit tests: flags, the file, and what each refuses.

use super::{file::parse_file, *};

fn args() -> GatewayArgs {
    GatewayArgs { upstream_pool: 4, upstream_refresh_ms: 1000, ..GatewayArgs::default() }
}

#[test]
fn a_command_line_is_split_without_a_shell() {
    let a = GatewayArgs {
        upstream_command: Some("python3 -m 'my server' --flag=\"a b\"".into()),
        upstream_env: vec!["K=V=W".into()],
        ..args()
    };
    let c = a.resolve().unwrap();
    let Endpoint::Stdio { argv, env, .. } = &c.upstreams[0].endpoint else { panic!("not stdio") };
    assert_eq!(argv, &["python3", "-m", "my server", "--flag=a b"]);
    assert_eq!(env.get("K").map(String::as_str), Some("V=W"));
    assert_eq!(c.upstreams[0].pool, 4);
}

#[test]
fn bad_input_is_refused_with_what_to_fix() {
    let err = |a: GatewayArgs| a.resolve().unwrap_err().to_string();
    assert!(err(args()).contains("no upstream"));
    assert!(err(GatewayArgs { upstream_command: Some("'unbalanced".into()), ..args() }).contains("unbalanced"));
    assert!(
        err(GatewayArgs { upstream_command: Some("x".into()), upstream_env: vec!["=v".into()], ..args() })
            .contains("KEY=VALUE")
    );
    assert!(err(GatewayArgs { upstream_url: Some("ftp://h/x".into()), ..args() }).contains("expected http"));
    assert!(
        err(GatewayArgs {
            upstream_url: Some("http://h/mcp".into()),
            upstream_header: vec!["NoColon".into()],
            ..args()
        })
        .contains("Name: value")
    );
    assert!(
        err(GatewayArgs {
            upstream_url: Some("http://h/mcp".into()),
            upstream_header: vec!["X-Key: ${env:PRESA_TEST_SURELY_UNSET_VAR}".into()],
            ..args()
        })
        .contains("not set")
    );
}

#[test]
fn header_values_read_secrets_from_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("token");
    std::fs::write(&path, "s3cret\n").unwrap();
    let a = GatewayArgs {
        upstream_url: Some("http://127.0.0.1:9/mcp".into()),
        upstream_header: vec![format!("Authorization: Bearer ${{file:{}}}", path.display())],
        ..args()
    };
    let c = a.resolve().unwrap();
    let Endpoint::Http { headers, .. } = &c.upstreams[0].endpoint else { panic!("not http") };
    assert_eq!(headers, &[("Authorization".to_string(), "Bearer s3cret".to_string())]);
}

#[test]
fn the_file_gives_upstreams_and_first_matching_rules() {
    let file = parse_file(
        r#"
        [[upstream]]
        name = "ml"
        command = "python3 server.py"
        prefix = "ml_"
        pool = 2
        protocol = "2025-11-25"
        [[upstream]]
        name = "web"
        url = "http://127.0.0.1:3001/mcp"
        [[tool]]
        match = "ml_train_*"
        policy = "required"
        rerun = "never"
        [[tool]]
        match = "ml_*"
        policy = "sync"
        [[tool]]
        match = "web_*"
        policy = "after"
        after_ms = 2500
        "#,
    )
    .unwrap();
    let c = args().resolve_with(Some(file)).unwrap();
    assert_eq!(c.upstreams.len(), 2);
    assert_eq!((c.upstreams[0].prefix.as_str(), c.upstreams[0].pool), ("ml_", 2));
    assert_eq!(c.upstreams[1].pool, 4);
    assert_eq!((c.upstreams[0].protocol, c.upstreams[1].protocol), (Protocol::Legacy, Protocol::Auto));
    let train = c.rule("ml_train_model").unwrap();
    assert_eq!((train.policy, train.rerun), (Some(PolicyRule::Required), Some(Rerun::Never)));
    assert_eq!(c.rule("ml_add").unwrap().policy, Some(PolicyRule::Sync));
    assert!(c.rule("other").is_none());
    let web = c.rule("web_search").unwrap();
    assert_eq!((web.policy, web.after_ms), (Some(PolicyRule::After), Some(2500)));
    assert!(parse_file("[[upstream]]\nname = 1").unwrap_err().contains("line"));
    assert!(parse_file("[[tool]]\nmatch = \"x\"\npolicy = \"sometimes\"").is_err());
    let twice = parse_file("[[upstream]]\nname='a'\ncommand='x'\n[[upstream]]\nname='a'\ncommand='y'").unwrap();
    assert!(args().resolve_with(Some(twice)).unwrap_err().to_string().contains("two upstreams"));
}

#[test]
fn a_stdio_upstream_names_the_variables_it_inherits() {
    let file = parse_file(
        r#"
        [[upstream]]
        name = "ml"
        command = "python3 server.py"
        env = { MODEL_DIR = "/models" }
        inherit_env = ["HF_TOKEN", "PRESA_PASSED_ON_PURPOSE"]
        "#,
    )
    .unwrap();
    let c = args().resolve_with(Some(file)).unwrap();
    let Endpoint::Stdio { env, inherit, .. } = &c.upstreams[0].endpoint else { panic!("not stdio") };
    assert_eq!(env.get("MODEL_DIR").map(String::as_str), Some("/models"));
    assert_eq!(inherit, &["HF_TOKEN", "PRESA_PASSED_ON_PURPOSE"]);
    let flags =
        GatewayArgs { upstream_command: Some("x".into()), upstream_inherit_env: vec!["HF_TOKEN".into()], ..args() };
    let Endpoint::Stdio { inherit, .. } = &flags.resolve().unwrap().upstreams[0].endpoint else { panic!("not stdio") };
    assert_eq!(inherit, &["HF_TOKEN"]);
    for bad in ["", "1ABC", "A-B", "A=B", "*"] {
        let a = GatewayArgs { upstream_command: Some("x".into()), upstream_inherit_env: vec![bad.into()], ..args() };
        assert!(a.resolve().unwrap_err().to_string().contains("environment variable name"), "{bad:?}");
    }
}

#[test]
fn a_rule_gives_a_retry_policy_and_what_else_is_transient_checked_at_start() {
    let file = parse_file(
        r#"
        [[upstream]]
        name = "ml"
        command = "python3 server.py"
        [[tool]]
        match = "flaky_*"
        retry = { attempts = 4, initial_ms = 200, max_ms = 2000 }
        retry_on_codes = [-32001, 429]
        retry_on_tool_error = true
        [[tool]]
        match = "few"
        retry = { attempts = 5 }
        "#,
    )
    .unwrap();
    let c = args().resolve_with(Some(file)).unwrap();
    let flaky = c.rule("flaky_x").unwrap();
    let p = flaky.retry_policy().unwrap().unwrap();
    let ms = Duration::from_millis;
    assert_eq!((p.attempts, p.initial, p.max), (4, ms(200), ms(2000)));
    assert_eq!((flaky.retry_on_codes.as_slice(), flaky.retry_on_tool_error), (&[-32001, 429][..], true));
    let few = c.rule("few").unwrap().retry_policy().unwrap().unwrap();
    assert_eq!((few.attempts, few.initial, few.max), (5, ms(1000), ms(60_000)), "the rest is the default's");
    assert_eq!(c.rule("few").unwrap().retry_on_codes, Vec::<i64>::new());

    let refused = |retry: &str| {
        let text = format!("[[upstream]]\nname='a'\ncommand='x'\n[[tool]]\nmatch='t'\nretry = {retry}");
        args().resolve_with(Some(parse_file(&text).unwrap())).unwrap_err().to_string()
    };
    let e = refused("{ attempts = 0 }");
    assert!(e.contains("match = \"t\"") && e.contains("at least 1 attempt"), "{e}");
    let e = refused("{ initial_ms = 5000, max_ms = 1000 }");
    assert!(e.contains("initial retry delay") && e.contains("at most the maximum"), "{e}");
    assert!(refused("{ initial_ms = 0 }").contains("must be over 0"));
    let typo = parse_file("[[tool]]\nmatch='t'\nretry = { attempt = 3 }").unwrap_err();
    assert!(typo.contains("unknown field `attempt`"), "{typo}");
    assert!(parse_file("[[tool]]\nmatch='t'\nretry_on = [1]").unwrap_err().contains("unknown field"));
}

#[test]
fn a_rule_gives_a_rate_checked_at_start() {
    let text = |rate: &str| format!("[[upstream]]\nname='a'\ncommand='x'\n[[tool]]\nmatch='t*'\nrate = {rate}");
    let resolve = |rate: &str| args().resolve_with(Some(parse_file(&text(rate)).unwrap()));
    let c = resolve("{ per_second = 5.0, burst = 5 }").unwrap();
    let rate = c.rule("tool").unwrap().tool_rate().unwrap().unwrap();
    assert_eq!((rate.per_second, rate.burst, rate.per_tenant), (5.0, 5, false));
    let own = resolve("{ per_second = 0.5, per_tenant = true }").unwrap().rule("t").unwrap().tool_rate().unwrap();
    assert_eq!(own.map(|r| (r.burst, r.per_tenant)), Some((1, true)), "a burst of 1 unless given");
    assert!(c.rule("other").is_none());
    let e = resolve("{ per_second = 0.0 }").unwrap_err().to_string();
    assert!(e.contains("match = \"t*\"") && e.contains("per_second must be a number over 0"), "{e}");
    assert!(resolve("{ per_second = 2.0, burst = 0 }").unwrap_err().to_string().contains("burst must be at least 1"));
    assert!(parse_file(&text("{ per_sec = 2.0 }")).unwrap_err().contains("unknown field"));
}

/// `[[server]]` tables: resolved with their selection, scopes and identity;
/// `root` defaults to true; bad names, duplicates, unknown upstreams, bad
/// globs and `root = false` without a server are refused naming the fix.
#[test]
fn virtual_servers_are_checked_against_the_upstreams() {
    const UPSTREAMS: &str = "[[upstream]]\nname='a'\ncommand='x'\nprefix='a_'\n[[upstream]]\nname='b'\ncommand='y'\n";
    let resolve = |head: &str, servers: &str| {
        let file = parse_file(&format!("{head}\n{UPSTREAMS}{servers}"))?;
        args().resolve_with(Some(file)).map_err(|e| e.to_string())
    };
    let c = resolve(
        "root = false",
        r#"
        [[server]]
        name = "ops-1"
        upstreams = ["a", "b"]
        tools = ["a_*", "ping"]
        hide = ["a_secret"]
        scopes = ["ops"]
        title = "Ops"
        instructions = "For operators."
        [[server]]
        name = "b"
        upstreams = ["b"]
        "#,
    )
    .unwrap();
    assert!(!c.root);
    let ops = &c.servers[0];
    assert_eq!((ops.name.as_str(), ops.upstreams.as_slice()), ("ops-1", &["a".to_string(), "b".to_string()][..]));
    assert_eq!((ops.scopes.as_slice(), ops.title.as_deref()), (&["ops".to_string()][..], Some("Ops")));
    assert_eq!(ops.instructions.as_deref(), Some("For operators."));
    assert!(ops.serves_tool("a_add") && ops.serves_tool("ping"));
    assert!(!ops.serves_tool("a_secret") && !ops.serves_tool("echo"));
    assert!(ops.serves_upstream("b") && !c.servers[1].serves_upstream("a"));
    assert!(c.servers[1].serves_tool("anything"), "no tools globs: every tool of its upstreams");
    assert!(resolve("", "").unwrap().root, "root defaults to true");

    let refused = |servers: &str| resolve("", servers).unwrap_err();
    let bad_name = refused("[[server]]\nname = 'Ops'\nupstreams = ['a']");
    assert!(bad_name.contains("\"Ops\"") && bad_name.contains("URL path segment"), "{bad_name}");
    assert!(refused("[[server]]\nname = 'a/b'\nupstreams = ['a']").contains("URL path segment"));
    let twice = refused("[[server]]\nname = 's'\nupstreams = ['a']\n[[server]]\nname = 's'\nupstreams = ['b']");
    assert_eq!(twice, "two [[server]] tables are named \"s\"");
    let unknown = refused("[[server]]\nname = 's'\nupstreams = ['a', 'c']");
    assert!(unknown.contains("no [[upstream]] is named \"c\""), "{unknown}");
    assert!(refused("[[server]]\nname = 's'\nupstreams = []").contains("at least one"));
    assert!(refused("[[server]]\nname = 's'\nupstreams = ['a']\nhide = ['[']").contains("glob \"[\""));
    assert!(refused("[[server]]\nname = 's'\nupstreams = ['a']\ncolour = 1").contains("unknown field"));
    let nothing = resolve("root = false", "").unwrap_err();
    assert!(nothing.contains("root = false serves nothing"), "{nothing}");
}
