//! [`Letters`]: the dead-letter part of the store, what
//! [`presa_store::DeadLetters`] is about ([`presa_store::dead`]): how a
//! letter is stored, and recording, listing, reading, marking and
//! discarding them, each with its script.
//!
//! A letter is one string in its task's partition slot,
//! `{prefix}:{pNN}:dead:<id>`, holding `"<hex tenant> <replayed as>\n<JSON>"`:
//! the header carries what scripts decide on without decoding JSON (whose
//! tenant it is, and the task a replay made, `-` before one), the JSON the
//! letter without `replayed_as`. It expires at its death plus
//! [`RedisConfig::dead_letter_ttl`](crate::RedisConfig::dead_letter_ttl).
//! Two sorted sets per partition index it, one per tenant and one per scope,
//! by cursor (time of death, then id), so a listing reads the next cursors of
//! one index per partition (`dead_letters.lua`, one slot each), merges them, and
//! reads only the letters of its page.
//!
//! - Recording: `conclude_dead.lua`, which is `transition.lua` plus the
//!   letter and its index members, so the letter exists exactly when the
//!   write ending the task landed ([`conclude_dead_script`], which the
//!   records' write runs).
//! - Marking a replay: `mark_dead_letter_replayed.lua`, a compare-and-set on the header.
//! - Discarding: a read (to learn the letter's scope index), then
//!   `discard_dead_letter.lua`, which checks the tenant again.

use presa_store::{
    DeadLetter, DeadLetterFilter, DeadLetterPage, Scope, StoreError, TaskId,
    dead::{cursor, page_limit},
    util::now_ms,
};

use std::sync::Arc;

use crate::{conn::Verbosity, error::RedisStoreError, keys::Keys, link::Link, scripts::Invocation};
use std::sync::LazyLock;

use crate::scripts::{Lua, TASK_BYTES, composed, function, lua, script};

// The dead letters' scripts (see `scripts.rs`), each named as its operation.
script!(
    DEAD_LETTERS,
    "dead_letters.lua",
    "One partition's page of a tenant's (or a scope's) dead letters, dropping expired members."
);
script!(
    MARK_DEAD_LETTER_REPLAYED,
    "mark_dead_letter_replayed.lua",
    "Mark a tenant's dead letter replayed as a task, unless marked before."
);
script!(DISCARD_DEAD_LETTER, "discard_dead_letter.lua", "Remove a tenant's dead letter and its index members.");
/// `conclude_dead.lua` behind `task.lua`, `bytes.lua` and the body of `transition.lua` as
/// the local function `transition` of its own KEYS and ARGV.
static CONCLUDE_DEAD: LazyLock<Lua> = LazyLock::new(|| {
    composed(
        "conclude_dead",
        &[TASK_BYTES.to_owned(), function("transition", lua!("transition.lua")), lua!("conclude_dead.lua").to_owned()],
    )
});

/// The dead letters, over the store's [`Link`].
#[derive(Debug, Clone)]
pub(crate) struct Letters {
    link: Arc<Link>,
}

/// The header's mark of a letter never replayed.
const NOT_REPLAYED: &str = "-";

/// `letter` as stored (its `replayed_as` goes in the header).
fn encode(letter: &DeadLetter) -> Result<String, RedisStoreError> {
    let mark = letter.replayed_as.as_ref().map_or(NOT_REPLAYED, TaskId::as_str);
    let doc = serde_json::to_string(&DeadLetter { replayed_as: None, ..letter.clone() })
        .map_err(|e| RedisStoreError::Corrupt(e.to_string()))?;
    Ok(format!("{} {mark}\n{doc}", Keys::tenant_word(&letter.scope.tenant)))
}

/// A stored letter.
fn decode(stored: &[u8]) -> Result<DeadLetter, RedisStoreError> {
    let corrupt = |what: &str| RedisStoreError::Corrupt(format!("dead letter: {what}"));
    let split = stored.iter().position(|b| *b == b'\n').ok_or_else(|| corrupt("no header"))?;
    let header = std::str::from_utf8(&stored[..split]).map_err(|_| corrupt("header not UTF-8"))?;
    let (_, mark) = header.split_once(' ').ok_or_else(|| corrupt("bad header"))?;
    let mut letter: DeadLetter = serde_json::from_slice(&stored[split + 1..]).map_err(|e| corrupt(&e.to_string()))?;
    letter.replayed_as = (mark != NOT_REPLAYED).then(|| TaskId::from_wire(mark));
    Ok(letter)
}

impl Letters {
    pub(crate) fn new(link: Arc<Link>) -> Letters {
        Letters { link }
    }

    /// One page of `filter`'s letters after `after`: every partition's next
    /// cursors (`dead_letters.lua`), merged, then the letters of the page's
    /// cursors only (a letter gone meanwhile is left out of the page).
    pub(crate) async fn dead_letters(
        &self,
        filter: &DeadLetterFilter,
        after: Option<&str>,
        limit: usize,
    ) -> Result<DeadLetterPage, StoreError> {
        let limit = page_limit(limit);
        let keys = &self.link.keys;
        let from = after.map_or_else(|| "-".to_string(), |at| format!("({at}"));
        let parts = (0..keys.partitions()).map(|p| {
            let index = match &filter.subject {
                Some(subject) => {
                    let scope = Scope { tenant: filter.tenant.clone(), subject: subject.clone(), endpoint: None };
                    keys.dead_by_scope(p, &scope)
                }
                None => keys.dead_by_tenant(p, &filter.tenant),
            };
            let from = from.clone();
            async move {
                let mut inv = DEAD_LETTERS.prepare_invoke();
                inv.key(index).arg(from).arg(limit + 1).arg(keys.dead_letter_prefix(p));
                self.link.invoke::<Vec<String>>(&inv).await
            }
        });
        let mut cursors: Vec<String> = futures::future::try_join_all(parts).await?.into_iter().flatten().collect();
        cursors.sort_unstable();
        let next = (cursors.len() > limit).then(|| cursors[limit - 1].clone());
        cursors.truncate(limit);
        let reads = cursors.iter().filter_map(|at| {
            let id = TaskId::from_wire(at.split_once('.')?.1);
            let key = keys.dead_letter(&id)?;
            Some(async move { self.link.query::<Option<Vec<u8>>>(Verbosity::Info, redis::cmd("GET").arg(key)).await })
        });
        let mut letters = Vec::with_capacity(cursors.len());
        for stored in futures::future::try_join_all(reads).await?.into_iter().flatten() {
            let letter = decode(&stored)?;
            // The indexes are the tenant's; checked again all the same.
            if filter.admits(&letter.scope) {
                letters.push(letter);
            }
        }
        Ok(DeadLetterPage { letters, next })
    }

    /// `tenant`'s letter of task `id`, if any.
    pub(crate) async fn dead_letter(&self, tenant: &str, id: &TaskId) -> Result<Option<DeadLetter>, StoreError> {
        let Some(key) = self.link.keys.dead_letter(id) else {
            return Ok(None);
        };
        let stored: Option<Vec<u8>> = self.link.query(Verbosity::Info, redis::cmd("GET").arg(key)).await?;
        let Some(stored) = stored else {
            return Ok(None);
        };
        let letter = decode(&stored)?;
        Ok((letter.scope.tenant == tenant && letter.id == *id).then_some(letter))
    }

    /// `mark_dead_letter_replayed.lua`: mark `tenant`'s letter of `id` replayed as `new`, once.
    pub(crate) async fn mark_dead_letter_replayed(
        &self,
        tenant: &str,
        id: &TaskId,
        new: &TaskId,
    ) -> Result<Option<TaskId>, StoreError> {
        let Some(key) = self.link.keys.dead_letter(id) else {
            return Ok(None);
        };
        let mut inv = MARK_DEAD_LETTER_REPLAYED.prepare_invoke();
        inv.key(key).arg(Keys::tenant_word(tenant)).arg(new.as_str());
        let marked: Option<String> = self.link.invoke(&inv).await?;
        Ok(marked.map(TaskId::from_wire))
    }

    /// Remove `tenant`'s letter of `id` with its index members.
    pub(crate) async fn discard_dead_letter(&self, tenant: &str, id: &TaskId) -> Result<bool, StoreError> {
        let Some(letter) = self.dead_letter(tenant, id).await? else {
            return Ok(false);
        };
        let keys = &self.link.keys;
        let (Some(key), Some(partition)) = (keys.dead_letter(id), keys.partition_of(id)) else {
            return Ok(false);
        };
        let mut inv = DISCARD_DEAD_LETTER.prepare_invoke();
        inv.key(key)
            .key(keys.dead_by_tenant(partition, tenant))
            .key(keys.dead_by_scope(partition, &letter.scope))
            .arg(Keys::tenant_word(tenant))
            .arg(cursor(letter.died_at_ms, id));
        // discard_dead_letter.lua: 1 removed, 0 no letter of that tenant.
        Ok(self.link.invoke::<bool>(&inv).await?)
    }
}

/// `conclude_dead.lua` for the write that ends a poison task with its
/// dead `letter`: the letter's keys and arguments in front (the caller, the
/// records' compare-and-set, adds transition.lua's after them).
pub(crate) fn conclude_dead_script(link: &Link, letter: &DeadLetter) -> Result<Invocation<'static>, RedisStoreError> {
    let keys = &link.keys;
    let (Some(key), Some(partition)) = (keys.dead_letter(&letter.id), keys.partition_of(&letter.id)) else {
        return Err(RedisStoreError::Corrupt(format!("task id {} names no partition", letter.id)));
    };
    let retention = link.cfg.dead_letter_ttl;
    let oldest_kept = now_ms().saturating_sub(u64::try_from(retention.as_millis()).unwrap_or(u64::MAX));
    let mut inv = CONCLUDE_DEAD.prepare_invoke();
    inv.key(key)
        .key(keys.dead_by_tenant(partition, &letter.scope.tenant))
        .key(keys.dead_by_scope(partition, &letter.scope))
        .arg(encode(letter)?)
        .arg(letter.cursor())
        .arg(letter.expires_at_ms(retention))
        .arg(format!("({oldest_kept:020}"));
    Ok(inv)
}

#[cfg(test)]
mod tests {
    use presa_tasks::Work;

    use super::*;

    fn letter(replayed_as: Option<&str>) -> DeadLetter {
        DeadLetter {
            id: TaskId::from_wire("p03.abc"),
            scope: Scope { tenant: "a b\n".into(), subject: "s".into(), endpoint: None },
            work: Work { tool: "t".into(), arguments: serde_json::json!({"x": 1.0, "y": {}}), ..Work::default() },
            ttl_ms: None,
            poll_interval_ms: Some(5),
            reason: "exhausted 6 deliveries".into(),
            deliveries: 6,
            attempts: 6,
            died_at_ms: 1_700_000_000_000,
            replayed_as: replayed_as.map(TaskId::from_wire),
        }
    }

    #[test]
    fn letters_read_back_whole_with_their_mark_in_the_header() {
        for mark in [None, Some("p01.new")] {
            let stored = encode(&letter(mark)).unwrap();
            let (header, doc) = stored.split_once('\n').unwrap();
            assert_eq!(header, format!("6120620a {}", mark.unwrap_or("-")), "a tenant of any text is one word");
            assert!(!doc.contains("replayed_as"));
            assert_eq!(decode(stored.as_bytes()).unwrap(), letter(mark));
        }
        assert!(matches!(decode(b"no header"), Err(RedisStoreError::Corrupt(_))));
    }
}
