//! How a task is stored in Redis: the Rust twin of `lua/task.lua`, whose
//! header says the layout and why. A task key holds a hash of four fields
//! ([`FIELDS`]): `rev`, `attempt` and `status`, which the scripts compare and
//! set without decoding JSON, and `doc`, the whole task as JSON. The doc is
//! longer than `hash-max-listpack-value` (64 B), so the hash is
//! hashtable-encoded: `MEMORY USAGE` of a small finished task is 888 B
//! against 632 B as one string, 120 B of it the hashtable and 40 to 48 B
//! each small field (docs/redis.md has the figures). Scripts hand back only
//! the doc, so Rust reads a record itself only in `Records::read_doc` (`records/mod.rs`)
//! (`HGET key doc`) and in tests and tools that look inside
//! ([`Record::from_hash`]).
//!
//! Tasks stored by an earlier release may be one string instead,
//! `"<rev> <attempt> <status>\n<doc>"` ([`Record::parse`]): they are read as
//! well, and the next write of each (any script storing the task) turns it
//! into a hash, keeping its expiry. Older releases still wrote hashes: those
//! need nothing.
//!
//! Beside the layout, the doc's codec: `encode` and `decode` (a task as
//! the JSON stored and published), and `decode_live` (an expired task
//! reads as gone).

use presa_store::{Task, util::now_ms};

use crate::error::RedisStoreError;

/// The fields of a task's hash, in the order [`Record::from_hash`] takes
/// their values (`HMGET key rev attempt status doc`).
pub const FIELDS: [&str; 4] = ["rev", "attempt", "status", "doc"];

/// A stored task record: the fields scripts decide on, and the doc.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record<'a> {
    /// The task's revision (what compare-and-set compares).
    pub rev: u64,
    /// The fencing attempt of the task's latest claim.
    pub attempt: u64,
    /// The task's status, as on the wire (`working`, `completed`…).
    pub status: &'a str,
    /// The whole task as JSON.
    pub doc: &'a [u8],
}

impl<'a> Record<'a> {
    /// A record from the values of a task hash's [`FIELDS`], in that order;
    /// `None` when they make no task record (a missing `attempt` is 0, as
    /// `task.lua` reads it).
    pub fn from_hash(values: &'a [Option<Vec<u8>>]) -> Option<Self> {
        let [Some(rev), attempt, Some(status), Some(doc)] = values else {
            return None;
        };
        let number = |v: &[u8]| std::str::from_utf8(v).ok()?.parse().ok();
        Some(Record {
            rev: number(rev)?,
            attempt: attempt.as_deref().map_or(Some(0), number)?,
            status: std::str::from_utf8(status).ok().filter(|s| !s.is_empty())?,
            doc,
        })
    }

    /// Split a string record of an earlier release; `None` when the value
    /// is not one.
    pub fn parse(value: &'a [u8]) -> Option<Self> {
        let end = doc_start(value)?;
        let header = std::str::from_utf8(&value[..end - 1]).ok()?;
        let mut fields = header.split(' ');
        let rev = fields.next()?.parse().ok()?;
        let attempt = fields.next()?.parse().ok()?;
        let status = fields.next().filter(|s| !s.is_empty())?;
        fields.next().is_none().then_some(Record { rev, attempt, status, doc: &value[end..] })
    }
}

/// Where the doc of a string record starts (just past the header's newline).
pub(crate) fn doc_start(value: &[u8]) -> Option<usize> {
    // A header is three short numbers and words: it is never long.
    value.iter().take(64).position(|&b| b == b'\n').map(|i| i + 1)
}

/// The whole task as the JSON stored in `doc` and published on its channel.
pub(crate) fn encode(task: &Task) -> Result<String, RedisStoreError> {
    // A small task's doc is 400 to 600 bytes: one allocation, no regrowth.
    let mut doc = Vec::with_capacity(1024);
    serde_json::to_writer(&mut doc, task).map_err(|e| RedisStoreError::Corrupt(e.to_string()))?;
    String::from_utf8(doc).map_err(|e| RedisStoreError::Corrupt(e.to_string()))
}

/// The task a stored (or published) doc holds.
pub(crate) fn decode(doc: &[u8]) -> Result<Task, RedisStoreError> {
    // Checked as UTF-8 once, then parsed as text: parsed from bytes,
    // serde_json checks every string of the doc on its own (a call per key
    // and per value, about a tenth of a decode's instructions).
    let doc = std::str::from_utf8(doc).map_err(|e| RedisStoreError::Corrupt(e.to_string()))?;
    serde_json::from_str(doc).map_err(|e| RedisStoreError::Corrupt(e.to_string()))
}

/// Decode a stored doc, treating an expired task as gone (Redis reaps it at
/// `createdAt + ttlMs`; this covers the moments before it does).
pub(crate) fn decode_live(doc: Option<&[u8]>) -> Result<Option<Task>, RedisStoreError> {
    let Some(doc) = doc else {
        return Ok(None);
    };
    let task = decode(doc)?;
    Ok((!task.is_expired(now_ms())).then_some(task))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_splits_into_header_and_doc() {
        let r = Record::parse(b"12 3 input_required\n{\"a\":\"1 2 x\\n\"}").unwrap();
        assert_eq!(r, Record { rev: 12, attempt: 3, status: "input_required", doc: b"{\"a\":\"1 2 x\\n\"}" });
        assert_eq!(Record::parse(b"1 0 working\n").unwrap().doc, b"");
    }

    #[test]
    fn a_hash_reads_as_a_record() {
        let v = |s: &str| Some(s.as_bytes().to_vec());
        let fields = [v("12"), v("3"), v("input_required"), v("{}")];
        let r = Record::from_hash(&fields).unwrap();
        assert_eq!(r, Record { rev: 12, attempt: 3, status: "input_required", doc: b"{}" });
        let no_attempt = [v("1"), None, v("working"), v("{}")];
        assert_eq!(Record::from_hash(&no_attempt).unwrap().attempt, 0);
        for bad in [
            [None, None, None, None],
            [v("1"), v("0"), v("working"), None],
            [v("1"), v("0"), None, v("{}")],
            [v("x"), v("0"), v("working"), v("{}")],
            [v("1"), v("-1"), v("working"), v("{}")],
            [v("1"), v("0"), v(""), v("{}")],
        ] {
            assert_eq!(Record::from_hash(&bad), None, "{bad:?}");
        }
    }

    #[test]
    fn values_that_are_not_records_do_not_parse() {
        for bad in [
            &b"{\"id\":1}"[..],
            b"1 0\n{}",
            b"1 0 working extra\n{}",
            b"x 0 working\n{}",
            b"1 -1 working\n{}",
            b"1 0 \n{}",
            b"",
        ] {
            assert_eq!(Record::parse(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }
}
