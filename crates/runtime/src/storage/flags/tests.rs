//! The Redis flags' tests: what each flag and variable resolves to, and what is refused.

use clap::Parser;

use super::*;
use crate::secret_file::tests::file_with;

#[derive(Debug, Parser)]
struct Flags {
    #[command(flatten)]
    redis: RedisArgs,
}

fn config(args: &[&str]) -> Result<Option<RedisConfig>, String> {
    let flags = Flags::try_parse_from(std::iter::once("presa").chain(args.iter().copied())).unwrap();
    flags.redis.config().map_err(|e| e.to_string())
}

#[test]
fn secret_files_stand_for_the_url_and_the_passwords() {
    let url = file_with(b"redis://presa:url-pw@h:6379/0\n");
    let cfg = config(&["--redis-url-file", url.0.to_str().unwrap()]).unwrap().unwrap();
    assert_eq!(cfg.url, "redis://presa:url-pw@h:6379/0", "the trailing newline is dropped");

    let (pw, spw) = (file_with(b"data-pw\r\n"), file_with(b"sentinel-pw"));
    let cfg = config(&[
        "--redis-sentinels",
        "s1:26379",
        "--redis-sentinel-master",
        "m",
        "--redis-password-file",
        pw.0.to_str().unwrap(),
        "--redis-sentinel-password-file",
        spw.0.to_str().unwrap(),
    ])
    .unwrap()
    .unwrap();
    let s = cfg.sentinel.unwrap();
    assert_eq!((s.password.as_deref(), s.sentinel_password.as_deref()), (Some("data-pw"), Some("sentinel-pw")));
}

#[test]
fn a_secret_file_conflicts_with_its_plain_flag() {
    let f = file_with(b"x");
    let path = f.0.to_str().unwrap();
    for (plain, file) in [
        ("--redis-url", "--redis-url-file"),
        ("--redis-password", "--redis-password-file"),
        ("--redis-sentinel-password", "--redis-sentinel-password-file"),
    ] {
        let e = Flags::try_parse_from(["presa", plain, "v", file, path]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::ArgumentConflict, "{plain} and {file}: {e}");
    }
}

#[test]
fn a_bad_secret_file_is_refused_by_flag_and_path() {
    let missing = std::env::temp_dir().join("presa-no-such-redis-url");
    let err = config(&["--redis-url-file", missing.to_str().unwrap()]).unwrap_err();
    let want = format!("--redis-url-file (PRESA_REDIS_URL_FILE): cannot read {}: ", missing.display());
    assert!(err.starts_with(&want), "{err}");

    let empty = file_with(b"\n");
    let err = config(&["--redis-url-file", empty.0.to_str().unwrap()]).unwrap_err();
    assert_eq!(err, format!("--redis-url-file (PRESA_REDIS_URL_FILE): {} is empty", empty.0.display()));

    // A password file with --redis-url is refused like its plain twin, naming both forms.
    let pw = file_with(b"pw");
    let err = config(&["--redis-url", "redis://h:1", "--redis-password-file", pw.0.to_str().unwrap()]).unwrap_err();
    assert!(err.contains("--redis-password[-file]") && err.contains("credentials go in the URL"), "{err}");
    assert!(!err.contains("pw\n") && !err.contains(": pw"), "{err}");
}

#[test]
fn sentinel_flags_make_a_sentinel_config() {
    let cfg = config(&[
        "--redis-sentinels",
        "s1:26379,s2:26379",
        "--redis-sentinel-master",
        "mymaster",
        "--redis-password",
        "pw",
        "--redis-sentinel-password",
        "spw",
        "--redis-sentinel-tls",
        "--redis-prefix",
        "px",
    ])
    .unwrap()
    .unwrap();
    let s = cfg.sentinel.clone().unwrap();
    assert_eq!(s.sentinels, ["s1:26379", "s2:26379"]);
    assert_eq!(
        (s.master.as_str(), s.password.as_deref(), s.sentinel_password.as_deref()),
        ("mymaster", Some("pw"), Some("spw"))
    );
    assert!(s.tls && cfg.url.is_empty() && !cfg.cluster && cfg.prefix == "px");
    assert!(config(&[]).unwrap().is_none(), "nothing: the embedded mode");
    assert_eq!(config(&["--redis-url", "redis://h:1"]).unwrap().unwrap().url, "redis://h:1");
}

#[test]
fn dead_letters_are_kept_a_week_unless_told() {
    let week = presa_store::dead::DEFAULT_DEAD_LETTER_TTL;
    assert_eq!(config(&["--redis-url", "redis://h:1"]).unwrap().unwrap().dead_letter_ttl, week);
    let day = config(&["--redis-url", "redis://h:1", "--dead-letter-ttl-ms", "86400000"]).unwrap().unwrap();
    assert_eq!(day.dead_letter_ttl, Duration::from_secs(86_400));
}

#[test]
fn group_commit_batches_64_writes_unless_told() {
    assert_eq!(config(&["--redis-url", "redis://h:1"]).unwrap().unwrap().batch_max, 64);
    let off = config(&["--redis-url", "redis://h:1", "--redis-batch-max", "1"]).unwrap().unwrap();
    assert_eq!(off.batch_max, 1);
    for bad in ["0", "1025"] {
        assert!(Flags::try_parse_from(["presa", "--redis-batch-max", bad]).is_err(), "{bad} is refused");
    }
}

#[test]
fn the_recovery_horizon_is_ten_minutes_unless_told() {
    use std::time::Duration;
    assert_eq!(config(&["--redis-url", "redis://h:1"]).unwrap().unwrap().max_lease, Duration::from_secs(600));
    let short = config(&["--redis-url", "redis://h:1", "--max-lease-ms", "5000"]).unwrap().unwrap();
    assert_eq!(short.max_lease, Duration::from_secs(5));
    assert!(Flags::try_parse_from(["presa", "--max-lease-ms", "999"]).is_err(), "under a second is refused");
}

#[test]
fn durability_flags_make_replicated_durability() {
    let cfg = config(&["--redis-url", "redis://h:1"]).unwrap().unwrap();
    assert_eq!(cfg.durability, Durability::Primary, "the default");
    let cfg = config(&[
        "--redis-url",
        "redis://h:1",
        "--durability",
        "replicated",
        "--durability-replicas",
        "2",
        "--durability-timeout-ms",
        "250",
        "--durability-connections",
        "4",
    ])
    .unwrap()
    .unwrap();
    let asked = Durability::Replicated { replicas: 2, timeout: Duration::from_millis(250) };
    assert_eq!((cfg.durability, cfg.durable_connections), (asked, 4));
    let embedded = config(&["--durability", "replicated"]).unwrap_err();
    assert!(embedded.contains("needs Redis with replicas"), "{embedded}");
}

#[test]
fn contradicting_redis_settings_are_refused_by_name() {
    let refused = |args: &[&str], says: &str| {
        let err = config(args).unwrap_err();
        assert!(err.contains(says), "{args:?}: {err}");
    };
    refused(
        &["--redis-url", "redis://h:1", "--redis-sentinels", "s:1", "--redis-sentinel-master", "m"],
        "exclude each other",
    );
    refused(&["--redis-sentinels", "s:1", "--redis-sentinel-master", "m", "--redis-cluster"], "--redis-cluster");
    refused(&["--redis-sentinels", "s:1"], "--redis-sentinel-master");
    refused(&["--redis-sentinel-master", "m"], "needs --redis-sentinels");
    refused(&["--redis-url", "redis://h:1", "--redis-password", "pw"], "credentials go in the URL");
    refused(&["--redis-url", "redis://h:1", "--redis-sentinel-tls"], "rediss://");
}
