//! The compare-and-set write of a task record (`transition.lua`, or
//! `conclude_dead.lua` with a dead letter) with the scope steps a cluster
//! runs around it (`ScopeSteps::Around`).

use presa_store::{Cas, DeadLetter, Limit, StoreError, Task, TaskRef, Writer, util::now_ms};
use redis::Value;

use super::{
    Records, ScopeSteps,
    create::optional,
    group::Write,
    quota::{Resized, parse_counted},
};
use crate::{
    conn::Verbosity,
    dead::conclude_dead_script,
    durability::Replication,
    error::RedisStoreError,
    keys::GROUP,
    record::{decode_live, encode},
    scripts::Call,
};

impl Records {
    /// `transition.lua`: compare-and-set `next` as `writer`; with a worker's
    /// work `entry`, a write that ends the task removes that entry too. The
    /// task is counted at its new size under its scope's byte quota, and a
    /// client write growing a live task past `quota` is refused (see `quota.rs`).
    /// With a dead `letter`, `conclude_dead.lua` records it with the write (`dead.rs`).
    /// A worker's write ending its task (no letter) is group-committed with
    /// other concurrent ones (`group.rs`), each still compared and fenced on its own.
    ///
    /// `next` is borrowed (an `Applied` answer is a copy of it) or given
    /// (boxed: the answer is that task, with no copy; see [`TaskRef`]).
    pub(crate) async fn transition(
        &self,
        next: impl Into<TaskRef<'_>>,
        writer: Writer,
        entry: Option<&str>,
        quota: Option<u64>,
        letter: Option<&DeadLetter>,
    ) -> Result<Cas, StoreError> {
        let next = next.into();
        let keys = &self.link.keys;
        let (Some(key), Some(channel), Some(partition)) =
            (keys.task(&next.id), keys.events(&next.id), keys.partition_of(&next.id))
        else {
            return Ok(Cas::Conflict(None));
        };
        let Some(expected) = next.revision.checked_sub(1) else {
            return Ok(Cas::Conflict(self.read(&next.id).await?));
        };
        let fence = match writer {
            Writer::Client => String::new(),
            Writer::Worker { attempt } => attempt.to_string(),
        };
        let doc = encode(&next)?;
        let quota = presa_store::growth_quota(&next, writer, quota);
        // One script can take the scope's keys too (standalone), or not (a cluster).
        let cluster = self.scope_steps == ScopeSteps::Around;
        let counted_first = match quota {
            Some(quota) if cluster => self.count_growth_first(&next, &key, doc.len(), quota).await?,
            _ => CountedFirst::Nothing,
        };
        let mut call = Call::default();
        call.key(&key)
            .key(&channel)
            .key(keys.work(partition))
            .key(keys.claimed(partition))
            .arg(expected)
            .arg(fence)
            .arg(&doc)
            .arg(next.revision)
            .arg(next.status.as_str())
            .arg(self.link.topology.publish_cmd())
            .arg(GROUP)
            .arg(entry.unwrap_or_default())
            .arg(next.id.as_str());
        // Standalone: the script also takes an ending task out of its scope's
        // active set, and counts (or refuses) its new size.
        if !cluster {
            call.key(keys.scope_active(&next.scope)).key(keys.scope_bytes_buckets(&next.scope));
            call.arg(optional(quota)).arg(now_ms());
        } else {
            // A cluster counts after the write: at the task's end, and a
            // client's growth counted first (transition.lua's ARGV[12]).
            let recount = next.status.is_terminal() || matches!(counted_first, CountedFirst::Bucket(..));
            call.arg("").arg("").arg(if recount { "1" } else { "" });
        }
        // Replicated durability confirms the write that ends a task; a
        // worker's concluding writes share script calls (`group.rs`).
        let concluding = matches!(writer, Writer::Worker { .. }) && entry.is_some() && next.status.is_terminal();
        let (reply, replication): (Value, _) = match &self.concludes {
            Some(concludes) if concluding && letter.is_none() => concludes.submit(Write { partition, call }).await?,
            _ => {
                let mut inv = match letter {
                    None => super::TRANSITION.prepare_invoke(),
                    Some(letter) => conclude_dead_script(&self.link, letter)?,
                };
                call.add_to(&mut inv);
                if next.status.is_terminal() {
                    self.link.invoke_confirmed(&inv).await?
                } else {
                    (self.link.invoke(&inv).await?, Replication::Confirmed)
                }
            }
        };
        let written = Transitioned::from_value(reply)?;
        let cas = match written {
            Transitioned::Written | Transitioned::WrittenCounted(_) => {
                if cluster && next.status.is_terminal() {
                    self.active_tasks().forget(&next.scope, &next.id).await;
                }
                if let Transitioned::WrittenCounted(before) = &written {
                    // Counted at `before` until now: the difference, less what was counted first.
                    if let Some((before, bucket)) = parse_counted(before) {
                        let first = match &counted_first {
                            CountedFirst::Bucket(_, delta) => *delta,
                            CountedFirst::Nothing => 0,
                        };
                        let delta = signed(doc.len()) - signed(before) - first;
                        self.scope_bytes().recount_bucket(&next.scope, &next.id, bucket, delta).await;
                    }
                }
                if let Replication::Short { acked, wanted } = replication {
                    // A client's cancel is answered as not confirmed (its retry finds
                    // the task cancelled, or cancels it again after a failover); a
                    // worker's outcome stays: the work entry it removed comes back
                    // with a failover that loses the write, and runs again.
                    tracing::warn!(task_id = %next.id, status = next.status.as_str(), acked, wanted,
                        "a task's last write was not confirmed by its replicas in time");
                    if writer == Writer::Client {
                        return Err(RedisStoreError::Unconfirmed { acked, wanted }.into());
                    }
                }
                Cas::Applied(next.into_owned())
            }
            Transitioned::OverQuota => return Err(StoreError::Capacity { limit: Limit::MaxBytesPerScope }),
            Transitioned::Conflict(None) => Cas::Conflict(None),
            Transitioned::Conflict(Some(stored)) => {
                if let CountedFirst::Bucket(bucket, delta) = counted_first {
                    // Counted first, lost: take the growth back (`q` was not rewritten).
                    self.scope_bytes().recount_bucket(&next.scope, &next.id, &bucket, -delta).await;
                }
                Cas::Conflict(decode_live(Some(stored.as_bytes()))?)
            }
        };
        Ok(cas)
    }
}

/// What `transition.lua` (or `conclude_dead.lua`, or `defer.lua`, which
/// never answers `OverQuota`) answered (its `Returns:`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Transitioned {
    /// `{1}`: written and published.
    Written,
    /// `{1, q}` (a cluster asked for it): written and published; the task
    /// was counted under its scope's byte quota at this `q` before
    /// (`quota.rs`), and now is at its new size.
    WrittenCounted(String),
    /// `{2}`: the byte quota refused the growth; nothing written.
    OverQuota,
    /// `{0, doc}`: refused (rev moved, fence stale, or stored status
    /// terminal), with the stored doc; `{0}`: the task is gone.
    Conflict(Option<String>),
}

impl Transitioned {
    /// A reply as `transition.lua` (or `conclude_dead.lua`) gives it: its
    /// usual answers are numbers (`1`, `2`), the others tables.
    pub(crate) fn from_value(reply: Value) -> Result<Transitioned, RedisStoreError> {
        match reply {
            Value::Array(parts) => Transitioned::from_reply(&parts),
            n @ Value::Int(_) => Transitioned::from_reply(&[n]),
            other => Err(RedisStoreError::Corrupt(format!("unexpected transition.lua reply: {other:?}"))),
        }
    }

    /// A reply as a table (`defer.lua`'s are all tables); a number `n` is `[n]`.
    pub(crate) fn from_reply(reply: &[Value]) -> Result<Transitioned, RedisStoreError> {
        match reply {
            [Value::Int(1)] => Ok(Transitioned::Written),
            [Value::Int(1), q] => redis::from_redis_value_ref(q)
                .map(Transitioned::WrittenCounted)
                .map_err(|e| RedisStoreError::Corrupt(e.to_string())),
            [Value::Int(2)] => Ok(Transitioned::OverQuota),
            [Value::Int(0)] | [Value::Int(0), Value::Nil] => Ok(Transitioned::Conflict(None)),
            [Value::Int(0), stored] => redis::from_redis_value_ref(stored)
                .map(|doc| Transitioned::Conflict(Some(doc)))
                .map_err(|e| RedisStoreError::Corrupt(e.to_string())),
            other => Err(RedisStoreError::Corrupt(format!("unexpected transition.lua reply: {other:?}"))),
        }
    }
}

/// What a cluster counted under the byte quota before a client's write.
enum CountedFirst {
    /// Nothing (no quota, no reservation, or no growth).
    Nothing,
    /// This many bytes added to the task's bucket (its `q`'s).
    Bucket(String, i64),
}

/// A size as a signed number of bytes.
fn signed(n: impl TryInto<i64>) -> i64 {
    n.try_into().unwrap_or(i64::MAX)
}

impl Records {
    /// On a cluster, a refusable write's growth is counted first, in the
    /// scope's slot, from the size the task's `q` says it is counted at:
    /// what to take back if the write does not happen, or a refusal past
    /// `quota`. A task without a `q` (created without a quota) counts nothing.
    async fn count_growth_first(
        &self,
        next: &Task,
        key: &str,
        size: usize,
        quota: u64,
    ) -> Result<CountedFirst, StoreError> {
        let q: Option<String> = self.link.query(Verbosity::Info, redis::cmd("HGET").arg(key).arg("q")).await?;
        let Some((before, bucket)) = q.as_deref().and_then(parse_counted) else {
            return Ok(CountedFirst::Nothing);
        };
        let growth = signed(size) - signed(before);
        if growth <= 0 {
            return Ok(CountedFirst::Nothing);
        }
        match self.scope_bytes().count(&next.scope, bucket, growth, Some(quota)).await? {
            Resized::Refused => Err(StoreError::Capacity { limit: Limit::MaxBytesPerScope }),
            Resized::Unreserved => Ok(CountedFirst::Nothing),
            Resized::Counted => Ok(CountedFirst::Bucket(bucket.to_owned(), growth)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_replies_decode_as_their_header_says() {
        let doc = Value::BulkString(b"{}".to_vec());
        assert_eq!(Transitioned::from_reply(&[Value::Int(1)]).unwrap(), Transitioned::Written);
        assert_eq!(Transitioned::from_reply(&[Value::Int(2)]).unwrap(), Transitioned::OverQuota);
        assert_eq!(Transitioned::from_reply(&[Value::Int(0)]).unwrap(), Transitioned::Conflict(None));
        assert_eq!(Transitioned::from_reply(&[Value::Int(0), Value::Nil]).unwrap(), Transitioned::Conflict(None));
        assert_eq!(Transitioned::from_reply(&[Value::Int(0), doc]).unwrap(), Transitioned::Conflict(Some("{}".into())));
        assert!(matches!(Transitioned::from_reply(&[Value::Int(3)]), Err(RedisStoreError::Corrupt(_))));
        assert_eq!(Transitioned::from_value(Value::Int(1)).unwrap(), Transitioned::Written);
        assert_eq!(Transitioned::from_value(Value::Int(2)).unwrap(), Transitioned::OverQuota);
        let counted = Value::Array(vec![Value::Int(1), Value::BulkString(b"12:inf".to_vec())]);
        assert_eq!(Transitioned::from_value(counted).unwrap(), Transitioned::WrittenCounted("12:inf".into()));
        assert!(matches!(Transitioned::from_value(Value::Nil), Err(RedisStoreError::Corrupt(_))));
    }
}
