//! A real S3-compatible server for tests: `s3s-fs` (crates.io), spawned per
//! test on a free loopback port with a fresh root holding the bucket [`BUCKET`].

use std::{
    net::TcpStream,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

/// The bucket the S3 tests use.
pub const BUCKET: &str = "presa-test";
/// The access key the spawned s3s-fs accepts.
pub const ACCESS_KEY: &str = "presa-test-access";
/// The secret key the spawned s3s-fs accepts.
pub const SECRET_KEY: &str = "presa-test-secret-key";

/// s3s-fs keeps two files per object it ever stored, `.bucket-<b64>.object-<b64>.internal.json`
/// and `.metadata.json`, and does not remove them on DeleteObject: its bookkeeping, not an
/// object. Everything of an upload (`.upload-*`, `.upload_id-*`, and metadata files with
/// `.upload-` in their name) is not bookkeeping and must be gone after an abort.
pub fn s3s_fs_bookkeeping(file: &str) -> bool {
    file.starts_with(".bucket-")
        && !file.contains(".upload-")
        && (file.ends_with(".internal.json") || file.ends_with(".metadata.json"))
}

/// A running `s3s-fs` (killed when dropped).
#[derive(Debug)]
pub struct S3sFs {
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Its root: one directory per bucket, one file per object.
    pub dir: tempfile::TempDir,
    child: Child,
}

/// Where `s3s-fs` is, or a failure saying how to install it: never a silent skip.
pub fn s3s_fs_binary() -> PathBuf {
    let found = std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|p| p.join("s3s-fs")).find(|p| p.is_file()));
    match found {
        Some(path) => path,
        None => panic!(
            "the S3 artifact tests need s3s-fs, an S3-compatible server, on PATH. Install it with \
             `cargo install s3s-fs@0.14.1 --locked --features binary` (about 3 minutes; .ci/run does this)"
        ),
    }
}

impl S3sFs {
    /// Starts a server on a free loopback port with a fresh root holding the test bucket.
    pub fn start() -> S3sFs {
        let binary = s3s_fs_binary();
        let mut last_error = String::new();
        for _ in 0..5 {
            let port = crate::free_port();
            let dir = tempfile::tempdir().expect("temp dir");
            std::fs::create_dir(dir.path().join(BUCKET)).expect("bucket dir");
            let mut child = Command::new(&binary)
                .args(["--host", "127.0.0.1", "--port", &port.to_string()])
                .args(["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY])
                .arg(dir.path())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("spawn {}: {e}", binary.display()));
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                if let Ok(Some(status)) = child.try_wait() {
                    last_error = format!("s3s-fs on port {port} exited at start: {status}");
                    break;
                }
                if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    eprintln!("[artifacts] s3s-fs on 127.0.0.1:{port}");
                    return S3sFs { port, dir, child };
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    last_error = format!("s3s-fs on port {port} did not listen within 10 s");
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        panic!("could not start s3s-fs: {last_error}");
    }
}

impl Drop for S3sFs {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl S3sFs {
    /// Its endpoint URL.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The objects in [`BUCKET`] (paths relative to it, sorted), without s3s-fs's bookkeeping.
    pub fn objects(&self) -> Vec<String> {
        fn walk(dir: &std::path::Path, root: &std::path::Path, out: &mut Vec<String>) {
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    walk(&path, root, out);
                } else {
                    out.push(path.strip_prefix(root).unwrap_or(&path).to_string_lossy().into_owned());
                }
            }
        }
        let root = self.dir.path().join(BUCKET);
        let mut out = Vec::new();
        walk(&root, &root, &mut out);
        out.retain(|f| !s3s_fs_bookkeeping(f.rsplit('/').next().unwrap_or(f)));
        out.sort();
        out
    }
}
