//! How a task is stored in Redis: the Rust twin of `lua/task.lua`, whose
//! header says the layout and why. A task key holds one string,
//! `"<rev> <attempt> <status>\n<doc>"`; the scripts decide on the header and
//! hand back only the doc, so Rust splits a record only where it reads one
//! itself ([`RedisStore::read_doc`]) and in tests and tools that look inside.
//!
//! Records written before this layout are hashes (`doc`, `rev`, `attempt`,
//! `status`); they are read as well, and the next write of each (any script
//! storing the task) turns it into a string.

use crate::{RedisStore, RedisStoreError, conn::Verbosity};

/// A stored task record, split into its header and its doc.
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
    /// Split a stored value; `None` when it is not a task record.
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

/// Where the doc of a stored value starts (just past the header's newline).
fn doc_start(value: &[u8]) -> Option<usize> {
    // A header is three short numbers and words: it is never long.
    value.iter().take(64).position(|&b| b == b'\n').map(|i| i + 1)
}

impl RedisStore {
    /// The doc of the task at `key`; `None` when there is no task there.
    pub(crate) async fn read_doc(&self, key: &str) -> Result<Option<Vec<u8>>, RedisStoreError> {
        let value: Option<Vec<u8>> = match self.query(Verbosity::Info, redis::cmd("GET").arg(key)).await {
            // A record from before the string layout: a hash.
            Err(RedisStoreError::Redis(e)) if e.code() == Some("WRONGTYPE") => {
                return self.query(Verbosity::Info, redis::cmd("HGET").arg(key).arg("doc")).await;
            }
            other => other?,
        };
        let Some(mut value) = value else {
            return Ok(None);
        };
        let Some(start) = doc_start(&value) else {
            return Err(RedisStoreError::Corrupt(format!("{key} holds no task record")));
        };
        value.drain(..start);
        Ok(Some(value))
    }

    /// [`Self::read_doc`], as text.
    pub(crate) async fn read_doc_text(&self, key: &str) -> Result<Option<String>, RedisStoreError> {
        let doc = self.read_doc(key).await?;
        doc.map(String::from_utf8).transpose().map_err(|e| RedisStoreError::Corrupt(format!("{key}: {e}")))
    }
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
