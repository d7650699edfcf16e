//! Secrets read from files: `--redis-url-file`, `--state-secret-file`,
//! `--redis-password-file` and `--redis-sentinel-password-file`, each the
//! file twin of a flag that takes the secret itself.
//!
//! A Kubernetes Secret mounted as a volume reaches the process as files
//! instead of environment variables, which every child process inherits
//! (a gateway's stdio upstream), which `kubectl describe` and crash reports
//! show, and which checkov's CKV_K8S_35 refuses. The file is read once, at
//! start; trailing line ends (`\n`, `\r\n`) are dropped, as `echo` and most
//! editors add one; anything else is kept. A file that cannot be read, is
//! empty, is not UTF-8 or is implausibly large stops the process with an
//! error naming the flag and the path, never the content.

use std::{
    io::Read,
    path::{Path, PathBuf},
};

/// Largest secret file read, in bytes: a URL or a key is far shorter, and a
/// path to something else (a device, a log) fails fast instead of filling memory.
pub const MAX_SECRET_FILE_BYTES: u64 = 64 * 1024;

/// A secret flag's file twin: `--redis-url-file` (`PRESA_REDIS_URL_FILE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SecretFlag {
    /// `--redis-url-file`.
    pub flag: &'static str,
    /// `PRESA_REDIS_URL_FILE`.
    pub env: &'static str,
}

/// Why a secret file could not be used. The messages name the flag, its
/// environment variable and the path; they never quote the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SecretFileError {
    /// The file could not be opened or read.
    #[error("{} ({}): cannot read {}: {error}", .flag.flag, .flag.env, .path.display())]
    Unreadable {
        /// The flag that named the file.
        flag: SecretFlag,
        /// The file.
        path: PathBuf,
        /// What the operating system said.
        error: std::io::Error,
    },
    /// The file holds nothing but line ends.
    #[error("{} ({}): {} is empty", .flag.flag, .flag.env, .path.display())]
    Empty {
        /// The flag that named the file.
        flag: SecretFlag,
        /// The file.
        path: PathBuf,
    },
    /// The file is not UTF-8 text.
    #[error("{} ({}): {} is not UTF-8 text", .flag.flag, .flag.env, .path.display())]
    NotText {
        /// The flag that named the file.
        flag: SecretFlag,
        /// The file.
        path: PathBuf,
    },
    /// The file is larger than [`MAX_SECRET_FILE_BYTES`].
    #[error("{} ({}): {} is larger than {MAX_SECRET_FILE_BYTES} bytes", .flag.flag, .flag.env, .path.display())]
    TooLarge {
        /// The flag that named the file.
        flag: SecretFlag,
        /// The file.
        path: PathBuf,
    },
}

impl SecretFlag {
    /// The secret in `path`, trailing line ends removed.
    pub fn read(self, path: &Path) -> Result<String, SecretFileError> {
        let err = |error| SecretFileError::Unreadable { flag: self, path: path.to_path_buf(), error };
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_SECRET_FILE_BYTES + 1).read_to_end(&mut bytes))
            .map_err(err)?;
        if bytes.len() as u64 > MAX_SECRET_FILE_BYTES {
            return Err(SecretFileError::TooLarge { flag: self, path: path.to_path_buf() });
        }
        let text =
            String::from_utf8(bytes).map_err(|_| SecretFileError::NotText { flag: self, path: path.to_path_buf() })?;
        let secret = text.trim_end_matches(['\n', '\r']);
        if secret.is_empty() {
            return Err(SecretFileError::Empty { flag: self, path: path.to_path_buf() });
        }
        Ok(secret.to_string())
    }

    /// The secret given directly (`value`), else read from `file` when one is
    /// named; clap makes the two conflict, so at most one is set.
    pub fn resolve(self, value: Option<&String>, file: Option<&PathBuf>) -> Result<Option<String>, SecretFileError> {
        match file {
            Some(path) => self.read(path).map(Some),
            None => Ok(value.cloned()),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    const FLAG: SecretFlag = SecretFlag { flag: "--demo-file", env: "DEMO_FILE" };

    /// A file of its own in the temporary directory, removed on drop.
    pub(crate) struct TempFile(pub(crate) PathBuf);

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    pub(crate) fn file_with(bytes: &[u8]) -> TempFile {
        use std::sync::atomic::{AtomicU32, Ordering};
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!("presa-secret-test-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let path = std::env::temp_dir().join(name);
        std::fs::write(&path, bytes).unwrap();
        TempFile(path)
    }

    #[test]
    fn a_secret_file_is_read_without_its_trailing_line_ends() {
        for (content, want) in [
            (&b"s3cret"[..], "s3cret"),
            (b"s3cret\n", "s3cret"),
            (b"s3cret\r\n", "s3cret"),
            (b"s3cret\n\n", "s3cret"),
            (b"  s3 cret  \n", "  s3 cret  "),
            (b"line1\nline2\n", "line1\nline2"),
        ] {
            let file = file_with(content);
            assert_eq!(FLAG.read(&file.0).unwrap(), want, "{content:?}");
        }
    }

    #[test]
    fn bad_secret_files_are_refused_by_flag_and_path_never_by_content() {
        let empty = file_with(b"\n");
        let e = FLAG.read(&empty.0).unwrap_err().to_string();
        assert_eq!(e, format!("--demo-file (DEMO_FILE): {} is empty", empty.0.display()));

        let missing = empty.0.with_extension("absent");
        let e = FLAG.read(&missing).unwrap_err();
        assert!(matches!(e, SecretFileError::Unreadable { .. }), "{e:?}");
        let e = e.to_string();
        assert!(e.starts_with(&format!("--demo-file (DEMO_FILE): cannot read {}: ", missing.display())), "{e}");

        let e = FLAG.read(&std::env::temp_dir()).unwrap_err().to_string();
        assert!(e.contains("cannot read"), "a directory: {e}");

        let binary = file_with(b"pass\xffword");
        let e = FLAG.read(&binary.0).unwrap_err().to_string();
        assert!(e.ends_with("is not UTF-8 text") && !e.contains("pass"), "{e}");

        let big = vec![b'k'; MAX_SECRET_FILE_BYTES as usize + 1];
        let large = file_with(&big);
        let e = FLAG.read(&large.0).unwrap_err().to_string();
        assert!(e.contains("larger than 65536 bytes") && !e.contains("kkk"), "{e}");
        let at_limit = file_with(&big[1..]);
        assert_eq!(FLAG.read(&at_limit.0).unwrap().len(), MAX_SECRET_FILE_BYTES as usize);
    }

    #[test]
    fn resolve_prefers_the_file_else_keeps_the_value() {
        let file = file_with(b"from-file\n");
        assert_eq!(FLAG.resolve(None, Some(&file.0)).unwrap().as_deref(), Some("from-file"));
        assert_eq!(FLAG.resolve(Some(&"given".to_string()), None).unwrap().as_deref(), Some("given"));
        assert_eq!(FLAG.resolve(None, None).unwrap(), None);
    }
}
