//! The behavioural contract every [`ArtifactStore`] passes, written once against the
//! trait and run on each backend with [`artifact_contract_tests!`]. Each case is a
//! `pub async fn(&Backend)` that panics on a violation.

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use presa_artifacts::{ArtifactError, ArtifactMeta, ArtifactStore, ByteRange, ListedArtifact};
use sha2::{Digest, Sha256};

use super::{Backend, PART_SIZE};

/// Expands to one `#[tokio::test]` per contract case; `$make` is an `async fn() -> Backend`
/// giving a fresh, empty backend on each call.
#[macro_export]
macro_rules! artifact_contract_tests {
    ($make:path) => {
        $crate::artifact_contract_tests!(@cases $make;
            a_multi_mib_artifact_written_in_small_chunks_round_trips,
            small_and_empty_artifacts_round_trip,
            ranges_read_like_http,
            a_range_outside_the_artifact_is_refused,
            head_returns_what_finish_returned,
            a_deleted_artifact_is_not_found,
            an_aborted_writer_leaves_nothing,
            a_dropped_unfinished_writer_leaves_nothing,
            too_large_is_refused_and_leaves_nothing,
            delete_prefix_removes_one_task_and_no_other,
            list_shows_artifacts_not_their_metadata,
            bad_keys_and_mime_types_are_refused,
            a_second_write_replaces_the_first,
            a_cancelled_write_closes_the_writer_and_leaves_nothing,
        );
    };
    (@cases $make:path; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let backend = $make().await;
                common::contract::$case(&backend).await
            }
        )*
    };
}

/// `len` deterministic, incompressible-looking bytes (xorshift), different per `seed`.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Lowercase hex SHA-256 of `data`.
pub fn sha256_hex(data: &[u8]) -> String {
    Sha256::digest(data).iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes `data` under `key` in `chunk`-byte chunks and finishes.
pub async fn put(store: &dyn ArtifactStore, key: &str, mime: &str, data: &[u8], chunk: usize) -> ArtifactMeta {
    let mut writer = store.create(key, mime).await.expect("create");
    for part in data.chunks(chunk.max(1)) {
        writer.write(Bytes::copy_from_slice(part)).await.expect("write");
    }
    writer.finish().await.expect("finish")
}

/// All of an artifact (or `range` of it), through the stream.
pub async fn read(store: &dyn ArtifactStore, key: &str, range: Option<ByteRange>) -> (ArtifactMeta, Vec<u8>) {
    let read = store.open(key, range).await.unwrap_or_else(|e| panic!("open {key} {range:?}: {e}"));
    let chunks: Vec<Bytes> = read.stream.try_collect().await.expect("read the stream");
    let bytes = chunks.concat();
    assert_eq!(bytes.len() as u64, read.range.end - read.range.start, "the stream carries the announced range");
    (read.meta, bytes)
}

/// The keys listed under `prefix`, sorted.
pub async fn keys(store: &dyn ArtifactStore, prefix: &str) -> Vec<String> {
    let listed: Vec<ListedArtifact> = store.list(prefix).try_collect().await.expect("list");
    let mut keys: Vec<String> = listed.into_iter().map(|a| a.key).collect();
    keys.sort();
    keys
}

/// Waits (5 s at most) until nothing is on the backend's disk; panics with what is left.
async fn assert_nothing_on_disk(backend: &Backend, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let files = backend.files_on_disk();
        if files.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: files left on the backend: {files:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn assert_names_store(e: &ArtifactError, store: &dyn ArtifactStore) {
    assert!(e.to_string().contains(store.name()), "{e} does not name the store {}", store.name());
}

pub async fn a_multi_mib_artifact_written_in_small_chunks_round_trips(backend: &Backend) {
    let store = backend.store();
    // Two and a half parts, in 64 KiB chunks: a multipart upload of three parts.
    let data = pattern(PART_SIZE * 5 / 2, 1);
    let meta = put(&*store, "t1/0", "application/octet-stream", &data, 64 << 10).await;
    assert_eq!(meta.key, "t1/0");
    assert_eq!(meta.size, data.len() as u64);
    assert_eq!(meta.sha256, sha256_hex(&data));
    assert_eq!(meta.mime, "application/octet-stream");
    let opened = store.open("t1/0", None).await.expect("open");
    assert_eq!(opened.meta, meta);
    let chunks: Vec<Bytes> = opened.stream.try_collect().await.expect("read the stream");
    assert!(chunks.len() > 1, "streamed in pieces, not handed over as one buffer");
    let bytes = chunks.concat();
    assert_eq!(bytes.len(), data.len());
    assert_eq!(sha256_hex(&bytes), meta.sha256, "byte-identical round trip");
    assert!(bytes == data);
}

pub async fn small_and_empty_artifacts_round_trip(backend: &Backend) {
    let store = backend.store();
    let text = b"hello, artifacts\n";
    let meta = put(&*store, "t1/small", "text/plain; charset=utf-8", text, 5).await;
    assert_eq!(meta.sha256, sha256_hex(text));
    let (read_meta, bytes) = read(&*store, "t1/small", None).await;
    assert_eq!((read_meta, bytes.as_slice()), (meta, &text[..]));

    let writer = store.create("t1/empty", "application/json").await.expect("create");
    let meta = writer.finish().await.expect("finish an empty artifact");
    assert_eq!((meta.size, meta.sha256.as_str()), (0, sha256_hex(b"").as_str()));
    let (read_meta, bytes) = read(&*store, "t1/empty", None).await;
    assert_eq!((read_meta, bytes.len()), (meta, 0));
}

pub async fn ranges_read_like_http(backend: &Backend) {
    let store = backend.store();
    let data = pattern(1000, 2);
    let meta = put(&*store, "t1/r", "application/octet-stream", &data, 333).await;
    let cases = [
        (ByteRange::Bounded { start: 100, end: 199 }, 100..200),
        (ByteRange::Bounded { start: 0, end: 0 }, 0..1),
        (ByteRange::Bounded { start: 990, end: 5000 }, 990..1000),
        (ByteRange::From(900), 900..1000),
        (ByteRange::From(0), 0..1000),
        (ByteRange::Suffix(10), 990..1000),
        (ByteRange::Suffix(5000), 0..1000),
    ];
    for (range, expected) in cases {
        let read = store.open("t1/r", Some(range)).await.unwrap_or_else(|e| panic!("{range}: {e}"));
        assert_eq!(read.meta, meta, "{range}: the whole artifact's metadata");
        assert_eq!(read.range, expected.start as u64..expected.end as u64, "{range}");
        let bytes: Vec<Bytes> = read.stream.try_collect().await.expect("stream");
        assert!(bytes.concat() == data[expected.clone()], "{range}: bytes {expected:?}");
    }
}

pub async fn a_range_outside_the_artifact_is_refused(backend: &Backend) {
    let store = backend.store();
    put(&*store, "t1/r", "application/octet-stream", &pattern(1000, 3), 1000).await;
    for range in [
        ByteRange::From(1000),
        ByteRange::Bounded { start: 1000, end: 1200 },
        ByteRange::Bounded { start: 10, end: 9 },
        ByteRange::Suffix(0),
    ] {
        let e = store.open("t1/r", Some(range)).await.expect_err("out of range");
        assert!(matches!(e, ArtifactError::RangeNotSatisfiable { size: 1000, .. }), "{range}: {e}");
        assert!(!e.is_retryable(), "{e}");
        assert!(e.to_string().contains(&range.to_string()), "{e} names the range");
        assert_names_store(&e, &*store);
    }
    put(&*store, "t1/empty", "text/plain", b"", 1).await;
    let e = store.open("t1/empty", Some(ByteRange::From(0))).await.expect_err("any range of an empty artifact");
    assert!(matches!(e, ArtifactError::RangeNotSatisfiable { size: 0, .. }), "{e}");
}

pub async fn head_returns_what_finish_returned(backend: &Backend) {
    let store = backend.store();
    let data = pattern(4096, 4);
    let meta = put(&*store, "t2/7", "image/png", &data, 1000).await;
    assert_eq!(store.head("t2/7").await.expect("head"), meta);
    let e = store.head("t2/8").await.expect_err("never written");
    assert!(e.is_not_found() && !e.is_retryable(), "{e}");
    assert_names_store(&e, &*store);
}

pub async fn a_deleted_artifact_is_not_found(backend: &Backend) {
    let store = backend.store();
    put(&*store, "t3/0", "text/plain", b"bye", 3).await;
    store.delete("t3/0").await.expect("delete");
    let e = store.open("t3/0", None).await.expect_err("deleted");
    assert!(matches!(e, ArtifactError::NotFound { ref key, .. } if key == "t3/0"), "{e}");
    assert!(store.head("t3/0").await.expect_err("deleted").is_not_found());
    store.delete("t3/0").await.expect("deleting again is not an error");
    assert!(keys(&*store, "t3").await.is_empty());
    assert_nothing_on_disk(backend, "after delete").await;
}

pub async fn an_aborted_writer_leaves_nothing(backend: &Backend) {
    let store = backend.store();
    // Past one part, so a multipart upload has started and parts are stored.
    let mut writer = store.create("t4/0", "application/octet-stream").await.expect("create");
    for chunk in pattern(PART_SIZE + (PART_SIZE / 2), 5).chunks(256 << 10) {
        writer.write(Bytes::copy_from_slice(chunk)).await.expect("write");
    }
    writer.abort().await.expect("abort");
    // And one that never left memory.
    let mut writer = store.create("t4/1", "text/plain").await.expect("create");
    writer.write(Bytes::from_static(b"partial")).await.expect("write");
    writer.abort().await.expect("abort");

    assert!(keys(&*store, "t4").await.is_empty(), "nothing listed");
    assert!(store.head("t4/0").await.expect_err("aborted").is_not_found());
    assert!(store.head("t4/1").await.expect_err("aborted").is_not_found());
    assert_nothing_on_disk(backend, "after abort").await;
}

pub async fn a_dropped_unfinished_writer_leaves_nothing(backend: &Backend) {
    let store = backend.store();
    let mut writer = store.create("t5/0", "application/octet-stream").await.expect("create");
    for chunk in pattern(PART_SIZE * 2 + 1, 6).chunks(512 << 10) {
        writer.write(Bytes::copy_from_slice(chunk)).await.expect("write");
    }
    drop(writer);
    let mut writer = store.create("t5/1", "text/plain").await.expect("create");
    writer.write(Bytes::from_static(b"partial")).await.expect("write");
    drop(writer);

    assert!(keys(&*store, "t5").await.is_empty(), "nothing listed");
    assert!(store.open("t5/0", None).await.expect_err("dropped").is_not_found());
    assert_nothing_on_disk(backend, "after dropping unfinished writers").await;
}

pub async fn too_large_is_refused_and_leaves_nothing(backend: &Backend) {
    let max = (PART_SIZE + PART_SIZE / 5) as u64;
    let store = backend.store_with_max(max);
    assert_eq!(store.max_bytes(), max);
    // Past a part (uploading) when the limit is crossed.
    let mut writer = store.create("t6/0", "application/octet-stream").await.expect("create");
    let data = pattern(max as usize + 1, 7);
    let mut error = None;
    for chunk in data.chunks(100_000) {
        if let Err(e) = writer.write(Bytes::copy_from_slice(chunk)).await {
            error = Some(e);
            break;
        }
    }
    let e = error.expect("one byte over the limit is refused");
    assert!(matches!(e, ArtifactError::TooLarge { max_bytes, .. } if max_bytes == max), "{e}");
    assert!(!e.is_retryable(), "{e}");
    assert_names_store(&e, &*store);
    let closed = writer.write(Bytes::from_static(b"more")).await.expect_err("closed after TooLarge");
    assert!(matches!(closed, ArtifactError::WriterClosed { .. }), "{closed}");
    assert!(matches!(writer.finish().await, Err(ArtifactError::WriterClosed { .. })));

    // Still in memory when the limit is crossed.
    let small = backend.store_with_max(10);
    let mut writer = small.create("t6/1", "text/plain").await.expect("create");
    writer.write(Bytes::from_static(b"0123456789")).await.expect("exactly the limit");
    let e = writer.write(Bytes::from_static(b"!")).await.expect_err("over the limit");
    assert!(matches!(e, ArtifactError::TooLarge { max_bytes: 10, .. }), "{e}");
    drop(writer);
    let exact = put(&*small, "t6/2", "text/plain", b"0123456789", 4).await;
    assert_eq!(exact.size, 10, "an artifact of exactly max_bytes is accepted");
    small.delete("t6/2").await.expect("delete");

    assert!(keys(&*store, "t6").await.is_empty(), "nothing listed");
    assert!(store.head("t6/0").await.expect_err("too large").is_not_found());
    assert_nothing_on_disk(backend, "after TooLarge").await;
}

pub async fn delete_prefix_removes_one_task_and_no_other(backend: &Backend) {
    let store = backend.store();
    for key in ["task-a/0", "task-a/1", "task-a/2", "task-ab/0", "task-b/0"] {
        put(&*store, key, "text/plain", key.as_bytes(), 4).await;
    }
    let removed = store.delete_prefix("task-a").await.expect("delete_prefix");
    assert_eq!(removed, 6, "three artifacts, each its data and its metadata");
    assert!(keys(&*store, "task-a").await.is_empty());
    for gone in ["task-a/0", "task-a/1", "task-a/2"] {
        assert!(store.head(gone).await.expect_err("deleted").is_not_found(), "{gone}");
    }
    assert_eq!(keys(&*store, "task-ab").await, ["task-ab/0"], "a longer task id sharing the prefix stays");
    assert_eq!(keys(&*store, "task-b").await, ["task-b/0"]);
    let (_, bytes) = read(&*store, "task-b/0", None).await;
    assert_eq!(bytes, b"task-b/0");
    assert_eq!(store.delete_prefix("task-a").await.expect("again"), 0);
    let e = store.delete_prefix("").await.expect_err("an empty prefix would be the whole store");
    assert!(matches!(e, ArtifactError::InvalidKey { .. }), "{e}");
}

pub async fn list_shows_artifacts_not_their_metadata(backend: &Backend) {
    let store = backend.store();
    for (key, len) in [("t7/0", 10), ("t7/1", 2000), ("t7/sub/2", 1)] {
        put(&*store, key, "application/octet-stream", &pattern(len, 8), 1000).await;
    }
    put(&*store, "t70/0", "text/plain", b"x", 1).await;
    let listed: Vec<ListedArtifact> = store.list("t7").try_collect().await.expect("list");
    let mut found: Vec<(String, u64)> = listed.iter().map(|a| (a.key.clone(), a.size)).collect();
    found.sort();
    assert_eq!(found, [("t7/0".to_owned(), 10), ("t7/1".to_owned(), 2000), ("t7/sub/2".to_owned(), 1)]);
    let now = std::time::SystemTime::now();
    for a in &listed {
        let age = now.duration_since(a.last_modified).unwrap_or_default();
        assert!(age < Duration::from_secs(600), "{a:?}: a recent last_modified");
    }
    assert!(keys(&*store, "nothing-here").await.is_empty());
    let all: Vec<String> = store.list("").map_ok(|a| a.key).try_collect().await.expect("list everything");
    for key in ["t7/0", "t7/1", "t7/sub/2", "t70/0"] {
        assert!(all.iter().any(|k| k == key), "{key} in {all:?}");
    }
    assert!(!all.iter().any(|k| k.ends_with(".meta")), "{all:?}");
    let mut bad = store.list("../etc");
    assert!(matches!(bad.next().await, Some(Err(ArtifactError::InvalidKey { .. }))));
}

pub async fn bad_keys_and_mime_types_are_refused(backend: &Backend) {
    let store = backend.store();
    for key in ["", "/abs", "t/", "a//b", "a/../b", "t/.hidden", "t/0.meta", "t/a b", "t/0#1"] {
        let e = store.create(key, "text/plain").await.expect_err(key);
        assert!(matches!(e, ArtifactError::InvalidKey { .. }) && !e.is_retryable(), "{key:?}: {e}");
        assert!(matches!(store.head(key).await, Err(ArtifactError::InvalidKey { .. })), "{key:?}");
        assert!(matches!(store.open(key, None).await, Err(ArtifactError::InvalidKey { .. })), "{key:?}");
        assert!(matches!(store.delete(key).await, Err(ArtifactError::InvalidKey { .. })), "{key:?}");
    }
    for mime in ["", "text", "text/plain\r\nx: y"] {
        let e = store.create("t8/0", mime).await.expect_err(mime);
        assert!(matches!(e, ArtifactError::InvalidMime { .. }), "{mime:?}: {e}");
    }
    assert_nothing_on_disk(backend, "after refusals").await;
}

pub async fn a_second_write_replaces_the_first(backend: &Backend) {
    let store = backend.store();
    put(&*store, "t9/0", "text/plain", b"first version, longer", 7).await;
    let second = put(&*store, "t9/0", "application/json", b"{}", 7).await;
    assert_eq!(store.head("t9/0").await.expect("head"), second);
    let (meta, bytes) = read(&*store, "t9/0", None).await;
    assert_eq!((meta, bytes.as_slice()), (second, &b"{}"[..]));
    assert_eq!(keys(&*store, "t9").await, ["t9/0"]);
}

pub async fn a_cancelled_write_closes_the_writer_and_leaves_nothing(backend: &Backend) {
    let store = backend.store();
    for (key, before) in [("t10/0", PART_SIZE - 1), ("t10/1", PART_SIZE * 3)] {
        // t10/0: the write that starts the multipart upload is cancelled;
        // t10/1: one while parts are in flight.
        let mut writer = store.create(key, "application/octet-stream").await.expect("create");
        for chunk in pattern(before, 9).chunks(1 << 20) {
            writer.write(Bytes::copy_from_slice(chunk)).await.expect("write");
        }
        // The next write, its future dropped after one poll (as a select! or a timeout would).
        let completed = {
            let mut write = std::pin::pin!(writer.write(Bytes::from(pattern(PART_SIZE, 10))));
            futures::poll!(write.as_mut()).is_ready()
        };
        eprintln!(
            "{key}: the cancelled write {}",
            if completed { "completed at its first poll" } else { "was pending" }
        );
        if !completed {
            let e = writer.write(Bytes::from_static(b"more")).await.expect_err("closed by the cancelled write");
            assert!(matches!(e, ArtifactError::WriterClosed { .. }), "{e}");
        }
        drop(writer);
    }
    assert!(keys(&*store, "t10").await.is_empty(), "nothing listed");
    assert_nothing_on_disk(backend, "after cancelled writes").await;
}
