//! The artifact contract on a real S3-compatible server: s3s-fs, spawned per test on a
//! free loopback port with its own temp dir (the tests fail, saying how to install it,
//! when it is not on PATH), plus what only a remote store can do: be unreachable.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use presa_artifacts::{ArtifactConfig, ArtifactError, S3Options};

artifact_contract_tests!(common::s3);

/// An S3 URL whose endpoint nothing listens on: every operation fails fast, retryably,
/// naming the store and its endpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_store_is_a_retryable_error_naming_it() {
    let port = presa_testkit::free_port();
    let store = ArtifactConfig::new("s3://presa-test/results")
        .with_s3(
            S3Options::default()
                .with_endpoint(format!("http://127.0.0.1:{port}"))
                .with_allow_http(true)
                .with_region("us-east-1")
                .with_credentials("k", "s")
                .with_retries(1, Duration::from_secs(2))
                .with_timeouts(Duration::from_secs(1), Duration::from_secs(2)),
        )
        .open()
        .expect("opening sends nothing");
    assert!(store.name().contains("s3://presa-test/results") && store.name().contains(&format!("127.0.0.1:{port}")));
    let started = Instant::now();
    let head = store.head("t1/0").await.expect_err("nothing listens");
    let mut writer = store.create("t1/0", "text/plain").await.expect("create is local");
    writer.write(Bytes::from_static(b"hello")).await.expect("buffered in memory");
    let finish = writer.finish().await.expect_err("nothing listens");
    let delete = store.delete_prefix("t1").await.expect_err("nothing listens");
    for e in [head, finish, delete] {
        eprintln!("unreachable store: {e}");
        assert!(matches!(e, ArtifactError::Unavailable { .. }), "{e}");
        assert!(e.is_retryable(), "{e}");
        assert!(e.to_string().contains(&format!("127.0.0.1:{port}")), "{e} names the endpoint");
        assert!(e.to_string().contains("s3://presa-test/results"), "{e} names the store");
        assert!(!e.to_string().contains("\"s\""), "{e}");
    }
    assert!(started.elapsed() < Duration::from_secs(30), "failed within the retry budget: {:?}", started.elapsed());
}

/// Wrong credentials are a refusal, not an outage: retrying does not help.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_credentials_are_refused_not_retryable() {
    let server = common::S3sFs::start();
    let store = ArtifactConfig::new(format!("s3://{}/x", common::BUCKET))
        .with_s3(common::s3_options(server.port).with_credentials(common::ACCESS_KEY, "not-the-secret"))
        .open()
        .expect("open");
    let e = store.head("t1/0").await.expect_err("bad signature");
    assert!(!e.is_retryable(), "{e}");
    assert!(e.to_string().contains(store.name()), "{e}");
}

/// Credentials in the URL are refused, and never printed.
#[test]
fn credentials_in_the_url_are_refused() {
    let e = ArtifactConfig::new("s3://AKIA:secret@bucket/prefix").open().expect_err("credentials in the URL");
    assert!(matches!(e, ArtifactError::Config { .. }), "{e}");
    assert!(!e.to_string().contains("secret") && !e.to_string().contains("AKIA"), "{e}");
    assert!(!e.is_retryable());
    let e = ArtifactConfig::new("ftp://host/dir").open().expect_err("unknown scheme");
    assert!(e.to_string().contains("unknown scheme"), "{e}");
    let e = ArtifactConfig::new("s3://bucket")
        .with_s3(S3Options::default().with_endpoint("http://127.0.0.1:9"))
        .open()
        .expect_err("plain http without allow_http");
    assert!(matches!(e, ArtifactError::Config { .. }) && e.to_string().contains("allow_http"), "{e}");
}
