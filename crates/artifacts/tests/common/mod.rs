//! What the artifact tests share: a [`Backend`] (a store's URL and options, and the
//! directory on this machine where its bytes end up), the s3s-fs server, and the
//! contract suite ([`contract`]).

#![allow(dead_code, unreachable_pub)]

pub mod contract;

use std::{
    any::Any,
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use presa_artifacts::{ArtifactConfig, ArtifactStore, S3Options};

/// The part size the tests use: S3's minimum, so a few MiB make a multipart upload.
pub const PART_SIZE: usize = 5 << 20;

/// A store under test: how to open it, and where its bytes live on disk (so a case can
/// check that nothing, not even a staged part, is left behind).
pub struct Backend {
    /// The store's URL.
    pub url: String,
    /// The S3 options (default for `file://`).
    pub s3: S3Options,
    /// The directory that holds every byte the store writes.
    pub root: PathBuf,
    /// Files under `root` that are the backend's own bookkeeping, not data left behind.
    pub bookkeeping: fn(&str) -> bool,
    /// What keeps the backend alive (a temp dir, a server process).
    _guard: Box<dyn Any + Send + Sync>,
}

impl Backend {
    /// The store with the tests' default limits (64 MiB per artifact, 5 MiB parts).
    pub fn store(&self) -> Arc<dyn ArtifactStore> {
        self.store_with_max(64 << 20)
    }

    /// The store with at most `max_bytes` per artifact.
    pub fn store_with_max(&self, max_bytes: u64) -> Arc<dyn ArtifactStore> {
        ArtifactConfig::new(self.url.clone())
            .with_max_bytes(max_bytes)
            .with_part_size(PART_SIZE)
            .with_max_concurrency(2)
            .with_s3(self.s3.clone())
            .open()
            .expect("open the store")
    }

    /// Every file under the backend's root (relative paths, sorted): objects,
    /// metadata, staged or uploaded parts; not the backend's own bookkeeping.
    pub fn files_on_disk(&self) -> Vec<String> {
        fn walk(dir: &Path, root: &Path, out: &mut Vec<String>) {
            let Ok(entries) = std::fs::read_dir(dir) else { return };
            for entry in entries.flatten() {
                let path = entry.path();
                if path.is_dir() {
                    walk(&path, root, out);
                } else {
                    out.push(path.strip_prefix(root).unwrap_or(&path).to_string_lossy().into_owned());
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.root, &self.root, &mut out);
        out.retain(|f| !(self.bookkeeping)(f));
        out.sort();
        out
    }
}

/// A `file://` store in a fresh temp dir.
pub async fn local() -> Backend {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().join("artifacts");
    Backend {
        url: format!("file://{}", root.display()),
        s3: S3Options::default(),
        root,
        bookkeeping: |_| false,
        _guard: Box::new(dir),
    }
}

pub use presa_testkit::s3::{ACCESS_KEY, BUCKET, S3sFs, SECRET_KEY, s3s_fs_bookkeeping};

/// S3 options for the spawned server on `port`: explicit endpoint, plain HTTP,
/// static credentials, and a short retry budget (the tests wait for nothing).
pub fn s3_options(port: u16) -> S3Options {
    S3Options::default()
        .with_endpoint(format!("http://127.0.0.1:{port}"))
        .with_allow_http(true)
        .with_region("us-east-1")
        .with_credentials(ACCESS_KEY, SECRET_KEY)
        .with_retries(1, Duration::from_secs(5))
        .with_timeouts(Duration::from_secs(2), Duration::from_secs(20))
}

/// An `s3://` store on a private s3s-fs server (its own port and temp dir), under a key prefix.
pub async fn s3() -> Backend {
    let server = S3sFs::start();
    Backend {
        url: format!("s3://{BUCKET}/under/a-prefix"),
        s3: s3_options(server.port),
        root: server.dir.path().to_path_buf(),
        bookkeeping: s3s_fs_bookkeeping,
        _guard: Box::new(server),
    }
}
