//! Artifacts: big task results stored outside the task (issue 38's foundation).
//!
//! A task record keeps a small result; a big content block goes to an
//! [`ArtifactStore`] and the result will carry a link to it (the "claim check"
//! pattern). This crate is the store: the [`ArtifactStore`] trait, used as
//! `Arc<dyn ArtifactStore>`, and one implementation, [`ObjectArtifactStore`],
//! built from an [`ArtifactConfig`] URL:
//!
//! - `file:///abs/dir`: a local directory (the embedded default);
//! - `s3://bucket/prefix`: Amazon S3 or any S3-compatible server, credentials and
//!   region from the usual `AWS_*` environment variables, or set in
//!   [`S3Options`] (with an explicit endpoint and `allow_http` for a local server).
//!
//! Keys are `<taskId>/<n>`: [`ArtifactStore::delete_prefix`] removes every artifact
//! of one task, [`ArtifactStore::list`] lists a prefix for a sweeper. Artifacts are
//! streamed both ways: a writer takes chunks and uploads them in parts, a reader
//! gets a [`Stream`](futures::Stream) of [`Bytes`]; no side ever holds a whole artifact.
//!
//! # Why `object_store`
//!
//! Apache Arrow's [`object_store`] gives one API for a local directory, S3, GCS and
//! Azure, with streaming multipart uploads ([`object_store::WriteMultipart`]), ranged
//! reads and listing, and is maintained by the Arrow project (DataFusion, delta-rs
//! and others run on it). The AWS SDK would cover S3 only, with a second code path for
//! the local directory, and brings a much larger dependency tree. presa uses it
//! without its reqwest client (whose rustls would pull aws-lc-rs, a C build, and whose
//! `rustls-no-provider` feature would leak into every reqwest client of the workspace):
//! the S3 client's HTTP is hyper with rustls on ring, as in the rest of presa.
//!
//! # Where sha256 and the MIME type live
//!
//! In a small JSON *sidecar* object next to the data, `<key>.meta`
//! (`{"v":1,"size":…,"sha256":"…","mime":"…"}`), written after the data is complete.
//! Object attributes cannot hold them: the sha256 is known only at the end of a
//! streamed multipart upload, after the attributes were sent, and the local directory
//! keeps no attributes at all. An artifact exists once its sidecar does; deleting removes
//! the sidecar first, so a reader never sees data without its metadata. Keys ending in
//! `.meta` are therefore reserved.
//!
//! What presa does with it (spilling big results, `resources/read` of artifacts,
//! the download route, the sweeper) lives in `presa-server`'s `artifacts` module
//! and `presa-http`.

use std::{fmt, ops::Range, time::SystemTime};

use bytes::Bytes;
use futures::stream::BoxStream;

mod config;
mod error;
mod http;
mod object;

pub use config::{ArtifactConfig, S3Options};
pub use error::ArtifactError;
pub use object::ObjectArtifactStore;

/// A result of this crate.
pub type Result<T, E = ArtifactError> = std::result::Result<T, E>;

/// What a finished artifact is: returned by [`ArtifactWriter::finish`],
/// [`ArtifactStore::head`] and [`ArtifactStore::open`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArtifactMeta {
    /// Its key (`<taskId>/<n>`).
    pub key: String,
    /// Its size in bytes.
    pub size: u64,
    /// The SHA-256 of its bytes, lowercase hex.
    pub sha256: String,
    /// Its MIME type, as given to [`ArtifactStore::create`].
    pub mime: String,
}

/// A byte range to read, with HTTP `Range` semantics (RFC 9110 §14.1.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteRange {
    /// `bytes=start-end`: from `start` to `end` inclusive; an `end` past the
    /// artifact's last byte stops at the last byte.
    Bounded {
        /// The first byte.
        start: u64,
        /// The last byte, inclusive.
        end: u64,
    },
    /// `bytes=start-`: from `start` to the end.
    From(u64),
    /// `bytes=-n`: the last `n` bytes (all of them when the artifact is shorter).
    Suffix(u64),
}

impl ByteRange {
    /// The byte offsets this range selects in an artifact of `size` bytes, or
    /// `None` when it selects none (HTTP's 416: a start at or past the end, a
    /// start after the end, a zero-length suffix, any range of an empty artifact).
    pub fn resolve(self, size: u64) -> Option<Range<u64>> {
        match self {
            ByteRange::Bounded { start, end } if start <= end && start < size => Some(start..end.min(size - 1) + 1),
            ByteRange::Bounded { .. } => None,
            ByteRange::From(start) if start < size => Some(start..size),
            ByteRange::From(_) => None,
            ByteRange::Suffix(n) if n > 0 && size > 0 => Some(size.saturating_sub(n)..size),
            ByteRange::Suffix(_) => None,
        }
    }
}

impl fmt::Display for ByteRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ByteRange::Bounded { start, end } => write!(f, "bytes={start}-{end}"),
            ByteRange::From(start) => write!(f, "bytes={start}-"),
            ByteRange::Suffix(n) => write!(f, "bytes=-{n}"),
        }
    }
}

/// An artifact opened for reading: its metadata and a stream of its bytes.
pub struct ArtifactRead {
    /// The whole artifact's metadata (size and sha256 are the whole artifact's, not the range's).
    pub meta: ArtifactMeta,
    /// The byte offsets the stream carries (`0..size` without a range).
    pub range: Range<u64>,
    /// The bytes, in order, as they arrive from the store.
    pub stream: BoxStream<'static, Result<Bytes>>,
}

impl fmt::Debug for ArtifactRead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ArtifactRead").field("meta", &self.meta).field("range", &self.range).finish_non_exhaustive()
    }
}

/// An artifact found by [`ArtifactStore::list`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedArtifact {
    /// Its key.
    pub key: String,
    /// The size of its data object.
    pub size: u64,
    /// When its data object was last written (for a sweeper's age check).
    pub last_modified: SystemTime,
}

/// Where artifacts are kept. Object-safe: used as `Arc<dyn ArtifactStore>`.
///
/// Every implementation passes the contract suite in this crate's
/// `tests/common/contract.rs`.
#[async_trait::async_trait]
pub trait ArtifactStore: Send + Sync + fmt::Debug {
    /// The store's URL, without credentials (what error messages name).
    fn name(&self) -> &str;

    /// The most bytes one artifact may have.
    fn max_bytes(&self) -> u64;

    /// A writer for a new artifact under `key` with MIME type `mime`. Nothing is
    /// visible under `key` until [`ArtifactWriter::finish`] returns; then it
    /// replaces any artifact that had the key.
    async fn create(&self, key: &str, mime: &str) -> Result<Box<dyn ArtifactWriter>>;

    /// The artifact's metadata and its bytes (all of them, or `range`), streamed.
    async fn open(&self, key: &str, range: Option<ByteRange>) -> Result<ArtifactRead>;

    /// The artifact's metadata.
    async fn head(&self, key: &str) -> Result<ArtifactMeta>;

    /// Removes the artifact; removing one that does not exist is not an error.
    async fn delete(&self, key: &str) -> Result<()>;

    /// Removes every artifact whose key starts with the path segments of `prefix`
    /// (`"t1"` covers `t1/0` and `t1/1`, not `t10/0`); returns how many objects went.
    async fn delete_prefix(&self, prefix: &str) -> Result<u64>;

    /// The artifacts under `prefix` (path segments, as for [`delete_prefix`](Self::delete_prefix);
    /// `""`: every artifact of the store),
    /// in no particular order, including any whose write completed its data but not its
    /// metadata (what a sweeper should remove).
    fn list(&self, prefix: &str) -> BoxStream<'static, Result<ListedArtifact>>;
}

/// A streaming writer of one artifact, from [`ArtifactStore::create`].
///
/// Dropping it before [`finish`](Self::finish) is an [`abort`](Self::abort): nothing is
/// left under its key (the abort runs on the current Tokio runtime). A call whose
/// future is dropped midway closes the writer: later calls get
/// [`ArtifactError::WriterClosed`].
#[async_trait::async_trait]
pub trait ArtifactWriter: Send + fmt::Debug {
    /// Appends `chunk`. More than the store's `max_bytes` in all aborts the write and
    /// returns [`ArtifactError::TooLarge`]; any error closes the writer.
    async fn write(&mut self, chunk: Bytes) -> Result<()>;

    /// Completes the artifact and returns its metadata.
    async fn finish(self: Box<Self>) -> Result<ArtifactMeta>;

    /// Discards everything written; nothing is left under the key.
    async fn abort(self: Box<Self>) -> Result<()>;
}

/// The suffix of metadata sidecars, reserved in keys.
pub const META_SUFFIX: &str = ".meta";

/// Checks a key (or, with `prefix`, a key prefix): `/`-separated segments of
/// 1 to 128 characters from `A-Z a-z 0-9 . _ -`, none starting with `.`, at most
/// 512 characters in all, and (for a key) not ending in [`META_SUFFIX`].
pub fn validate_key(key: &str, prefix: bool) -> Result<(), &'static str> {
    if key.is_empty() {
        return Err("empty");
    }
    if key.len() > 512 {
        return Err("longer than 512 characters");
    }
    for segment in key.split('/') {
        if segment.is_empty() {
            return Err("an empty segment (a leading, trailing or doubled '/')");
        }
        if segment.len() > 128 {
            return Err("a segment longer than 128 characters");
        }
        if segment.starts_with('.') {
            return Err("a segment starting with '.'");
        }
        if !segment.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')) {
            return Err("a character outside A-Z a-z 0-9 . _ -");
        }
    }
    if !prefix && key.ends_with(META_SUFFIX) {
        return Err("ends in .meta, reserved for metadata sidecars");
    }
    Ok(())
}

/// Checks a MIME type: `type/subtype` (parameters allowed), printable ASCII, at most 255 characters.
pub fn valid_mime(mime: &str) -> bool {
    let essence = mime.split(';').next().unwrap_or_default().trim();
    mime.len() <= 255
        && mime.bytes().all(|b| (0x20..0x7f).contains(&b))
        && essence.split_once('/').is_some_and(|(t, s)| !t.is_empty() && !s.is_empty() && !s.contains('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_resolve_like_http() {
        let r = |range: ByteRange, size| range.resolve(size);
        assert_eq!(r(ByteRange::Bounded { start: 2, end: 4 }, 10), Some(2..5));
        assert_eq!(r(ByteRange::Bounded { start: 2, end: 99 }, 10), Some(2..10));
        assert_eq!(r(ByteRange::Bounded { start: 9, end: 9 }, 10), Some(9..10));
        assert_eq!(r(ByteRange::Bounded { start: 10, end: 12 }, 10), None);
        assert_eq!(r(ByteRange::Bounded { start: 5, end: 4 }, 10), None);
        assert_eq!(r(ByteRange::From(3), 10), Some(3..10));
        assert_eq!(r(ByteRange::From(10), 10), None);
        assert_eq!(r(ByteRange::Suffix(3), 10), Some(7..10));
        assert_eq!(r(ByteRange::Suffix(30), 10), Some(0..10));
        assert_eq!(r(ByteRange::Suffix(0), 10), None);
        assert_eq!(r(ByteRange::Suffix(1), 0), None);
        assert_eq!(r(ByteRange::From(0), 0), None);
        assert_eq!(ByteRange::Bounded { start: 1, end: 2 }.to_string(), "bytes=1-2");
        assert_eq!(ByteRange::Suffix(5).to_string(), "bytes=-5");
    }

    #[test]
    fn keys_are_plain_segments() {
        assert!(validate_key("p00.abc_DEF-1/0", false).is_ok());
        assert!(validate_key("task", true).is_ok());
        for bad in ["", "/a", "a/", "a//b", "a/../b", "a/.hidden", "a b", "a#1", "a/1.meta", "é"] {
            assert!(validate_key(bad, false).is_err(), "{bad:?} accepted");
        }
        assert!(validate_key(&"a".repeat(129), false).is_err());
    }

    #[test]
    fn mime_types() {
        assert!(valid_mime("application/octet-stream"));
        assert!(valid_mime("text/plain; charset=utf-8"));
        for bad in ["", "text", "/plain", "text/", "a/b/c", "text/plain\n"] {
            assert!(!valid_mime(bad), "{bad:?} accepted");
        }
    }
}
