//! Dead letters: what is kept of a poison task (work delivered more than a
//! worker's `max_deliveries` times, see `presa_server::worker`) so that an
//! operator can see it, run it again or throw it away.
//!
//! A finished task's record keeps only what `tasks/get` answers and its
//! tool's name, so a poison task could not be run again from it. Instead, the
//! write that ends it ([`WorkQueue::conclude_dead`](crate::WorkQueue::conclude_dead))
//! records, atomically with it, a [`DeadLetter`]: the owner, the work as the
//! claim held it (tool, arguments, caller, client capabilities, MRTR answers;
//! not the trace context of the long-gone request nor its last holder), why it died and after how
//! many deliveries. A letter lives for the store's retention
//! ([`DEFAULT_DEAD_LETTER_TTL`] unless configured) from its death.
//!
//! - Listing ([`DeadLetters::dead_letters`]) is
//!   by tenant, optionally by subject, ordered by time of death (then id),
//!   with an opaque cursor ([`DeadLetter::cursor`]) and at most
//!   [`MAX_DEAD_LETTER_PAGE`] letters a page. Another tenant's letters are
//!   never seen, nor counted: every read names the tenant.
//! - Replay ([`DeadLetters::replay_dead_letter`])
//!   creates a new task for the same owner, tool, arguments and caller
//!   through the ordinary create path (limits and quotas apply), with
//!   [`Work::replay_of`] naming the dead task, and marks the letter
//!   `replayed_as` the new task. **A second replay returns the same task**
//!   ([`Replayed::first`] false): the create is keyed ([`DeadLetter::replay_key`],
//!   an idempotency key no client can send), so replays racing each other, or
//!   one retried after a crash between the create and the mark, make one task.
//!   A replayed letter stays listed (with `replayed_as`) until discarded or expired.
//! - Discard ([`DeadLetters::discard_dead_letter`])
//!   removes the letter.
//!
//! [`DeadLetters`] is the trait every store implements; the memory store's
//! letters are kept in `memory/dead.rs`.

use std::time::Duration;

use presa_tasks::{NewTask, Scope, TaskId, Work};
use serde::{Deserialize, Serialize};

use crate::{
    claim::Claim, error::StoreError, idempotency::Created, idempotency::Idempotency, limits::CreateLimits,
    records::TaskStore,
};

/// How long a dead letter is kept after its task died, unless a store is
/// configured otherwise: 7 days.
pub const DEFAULT_DEAD_LETTER_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// The most letters one page of [`DeadLetters::dead_letters`]
/// holds, whatever the caller asks for.
pub const MAX_DEAD_LETTER_PAGE: usize = 100;

/// What is kept of a poison task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeadLetter {
    /// The dead task's id.
    pub id: TaskId,
    /// Its owner.
    pub scope: Scope,
    /// What it ran, as its last claim held it (tool, arguments, caller,
    /// client capabilities, MRTR answers); without the trace context.
    pub work: Work,
    /// The dead task's lifetime, which a replay gets too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// Its suggested polling interval, which a replay gets too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll_interval_ms: Option<u64>,
    /// Why it died, for an operator ("exhausted 6 deliveries").
    pub reason: String,
    /// How many times its work was delivered, the last one included.
    pub deliveries: u64,
    /// Its attempt (fencing token) when it died: how many claims it saw.
    pub attempts: u64,
    /// When it died, Unix ms.
    pub died_at_ms: u64,
    /// The task a replay created, once replayed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replayed_as: Option<TaskId>,
}

impl DeadLetter {
    /// The letter of the task `claim` holds, dying at `died_at_ms` for `reason`.
    pub fn of(claim: &Claim, reason: &str, died_at_ms: u64) -> DeadLetter {
        let task = &claim.task;
        let mut work = task.work.clone();
        work.trace.clear();
        work.worker = None;
        DeadLetter {
            id: task.id.clone(),
            scope: task.scope.clone(),
            work,
            ttl_ms: task.ttl_ms,
            poll_interval_ms: task.poll_interval_ms,
            reason: reason.to_string(),
            deliveries: claim.deliveries,
            attempts: task.attempt,
            died_at_ms,
            replayed_as: None,
        }
    }

    /// The tool it ran.
    pub fn tool(&self) -> &str {
        &self.work.tool
    }

    /// Its place in the listing order (time of death, then id), as a
    /// pagination cursor: the letters after it come on the next page.
    /// Zero-padded, so that it orders as text too (Redis orders it so).
    pub fn cursor(&self) -> String {
        cursor(self.died_at_ms, &self.id)
    }

    /// When it expires under `retention`, Unix ms.
    pub fn expires_at_ms(&self, retention: Duration) -> u64 {
        self.died_at_ms.saturating_add(u64::try_from(retention.as_millis()).unwrap_or(u64::MAX))
    }

    /// The task a replay creates: the same owner, work, lifetime and polling
    /// interval, naming this one in [`Work::replay_of`].
    pub fn replay_task(&self) -> NewTask {
        NewTask {
            scope: self.scope.clone(),
            work: Work { replay_of: Some(self.id.clone()), ..self.work.clone() },
            ttl_ms: self.ttl_ms,
            poll_interval_ms: self.poll_interval_ms,
            status_message: None,
        }
    }

    /// The idempotency of a replay's create: a key no client can send (it
    /// starts with a NUL; clients' keys are printable ASCII), so every replay
    /// of this letter makes or finds the same task while that task lives.
    pub fn replay_key(&self) -> Idempotency {
        Idempotency::new(&self.scope, &format!("\0dead-letter:{}", self.id), &self.work)
    }
}

/// The cursor of a letter of task `id` that died at `died_at_ms`.
pub fn cursor(died_at_ms: u64, id: &TaskId) -> String {
    format!("{died_at_ms:020}.{id}")
}

/// Which letters a listing returns: a tenant's, or one subject's of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetterFilter {
    /// Only this tenant's letters (always: no listing spans tenants).
    pub tenant: String,
    /// Only this subject's letters (of the tenant); `None`: every subject's.
    pub subject: Option<String>,
}

impl DeadLetterFilter {
    /// Every letter of `tenant`.
    pub fn tenant(tenant: impl Into<String>) -> Self {
        DeadLetterFilter { tenant: tenant.into(), subject: None }
    }

    /// The letters of `scope` (its tenant and subject).
    pub fn scope(scope: &Scope) -> Self {
        DeadLetterFilter { tenant: scope.tenant.clone(), subject: Some(scope.subject.clone()) }
    }

    /// Whether `scope` passes the filter.
    pub fn admits(&self, scope: &Scope) -> bool {
        scope.tenant == self.tenant && self.subject.as_ref().is_none_or(|s| *s == scope.subject)
    }
}

/// One page of a listing.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DeadLetterPage {
    /// The letters, oldest death first.
    pub letters: Vec<DeadLetter>,
    /// Where the next page starts (pass it as `after`); `None`: this was the last.
    pub next: Option<String>,
}

impl DeadLetterPage {
    /// The first `limit` of `candidates` (the letters after the
    /// cursor, in any order, at least `limit + 1` of them when there are more).
    pub fn of(mut candidates: Vec<DeadLetter>, limit: usize) -> Self {
        candidates.sort_by_cached_key(DeadLetter::cursor);
        let more = candidates.len() > limit;
        candidates.truncate(limit);
        let next = more.then(|| candidates.last().map(DeadLetter::cursor)).flatten();
        DeadLetterPage { letters: candidates, next }
    }
}

/// A page size as asked, held to `1..=MAX_DEAD_LETTER_PAGE`.
pub fn page_limit(asked: usize) -> usize {
    asked.clamp(1, MAX_DEAD_LETTER_PAGE)
}

/// What a replay did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replayed {
    /// The task the replay created (the first replay's, on a later one).
    pub task: TaskId,
    /// Whether this replay created it; `false`: the letter had been replayed before.
    pub first: bool,
}

/// Dead letters of poison tasks: recorded by [`WorkQueue::conclude_dead`](crate::WorkQueue::conclude_dead)
/// with the write that ends the task, then listed, read, replayed (as a new
/// record, hence the supertrait) or discarded, every read naming the tenant
/// it may see.
#[async_trait::async_trait]
pub trait DeadLetters: TaskStore {
    /// Up to [`page_limit`]`(limit)` dead letters passing `filter`
    /// (one tenant's, optionally one subject's), oldest death first, after
    /// the cursor `after` (a [`DeadLetterPage::next`], or `None` for the
    /// first page). Pages are stable: a letter dying later (at a later
    /// millisecond) comes after every one listed already, one removed
    /// meanwhile is skipped. A page may hold fewer letters than `limit`
    /// (some expired or were discarded while it was read) and still have a
    /// `next`; only `next: None` ends the listing.
    async fn dead_letters(
        &self,
        filter: &DeadLetterFilter,
        after: Option<&str>,
        limit: usize,
    ) -> Result<DeadLetterPage, StoreError>;

    /// The dead letter of task `id`, if it has one, not expired, of `tenant`
    /// (another tenant's is `None`, like none at all).
    async fn dead_letter(&self, tenant: &str, id: &TaskId) -> Result<Option<DeadLetter>, StoreError>;

    /// Mark `tenant`'s dead letter of task `id` replayed as task `new`,
    /// unless it was marked before: atomically, the mark now stored (`new`,
    /// or the earlier one's); `None` when there is no such letter.
    async fn mark_dead_letter_replayed(
        &self,
        tenant: &str,
        id: &TaskId,
        new: &TaskId,
    ) -> Result<Option<TaskId>, StoreError>;

    /// Run `tenant`'s dead letter of task `id` again: a new task for the
    /// same owner, tool, arguments and caller, created through
    /// [`create_idempotent`](TaskStore::create_idempotent) under `limits` and the
    /// letter's [`DeadLetter::replay_key`], then the letter is marked
    /// ([`mark_dead_letter_replayed`](Self::mark_dead_letter_replayed)).
    /// A letter replayed before answers the task of its first replay
    /// (`first: false`), creating nothing; `None` when there is no such letter.
    ///
    /// The key makes the two steps safe without one script (the new task's
    /// partition is not the letter's): replays racing each other, or one
    /// retried after a crash between create and mark, find the same task.
    async fn replay_dead_letter(
        &self,
        tenant: &str,
        id: &TaskId,
        limits: CreateLimits,
    ) -> Result<Option<Replayed>, StoreError> {
        let Some(letter) = self.dead_letter(tenant, id).await? else {
            return Ok(None);
        };
        if let Some(task) = letter.replayed_as {
            return Ok(Some(Replayed { task, first: false }));
        }
        let created = self.create_idempotent(letter.replay_task(), limits, Some(&letter.replay_key())).await?;
        let made = created.task().id.clone();
        let first = matches!(created, Created::New(_));
        Ok(Some(match self.mark_dead_letter_replayed(tenant, id, &made).await? {
            // Marked by another replay with another task: possible only once
            // the first task (and its key's record) expired.
            Some(marked) if marked != made => Replayed { task: marked, first: false },
            // Marked now, or (`None`) discarded or expired meanwhile: the task exists all the same.
            _ => Replayed { task: made, first },
        }))
    }

    /// Remove `tenant`'s dead letter of task `id`; `false` when there was none.
    async fn discard_dead_letter(&self, tenant: &str, id: &TaskId) -> Result<bool, StoreError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn letter(died_at_ms: u64, id: &str) -> DeadLetter {
        DeadLetter {
            id: TaskId::from_wire(id),
            scope: Scope::anonymous(),
            work: Work::default(),
            ttl_ms: None,
            poll_interval_ms: None,
            reason: String::new(),
            deliveries: 1,
            attempts: 1,
            died_at_ms,
            replayed_as: None,
        }
    }

    #[test]
    fn pages_are_capped_and_ordered_by_death_then_id() {
        assert_eq!((page_limit(0), page_limit(7), page_limit(10_000)), (1, 7, MAX_DEAD_LETTER_PAGE));
        // 9 ms sorts before 10 ms as text too: cursors are zero-padded.
        let page = DeadLetterPage::of(vec![letter(10, "p00.a"), letter(9, "p01.z"), letter(10, "p00.0")], 2);
        let order: Vec<&str> = page.letters.iter().map(|l| l.id.as_str()).collect();
        assert_eq!(order, ["p01.z", "p00.0"]);
        assert_eq!(page.next, Some(cursor(10, &TaskId::from_wire("p00.0"))));
        assert!(cursor(9, &TaskId::from_wire("p01.z")) < cursor(10, &TaskId::from_wire("p00.0")));
        assert_eq!(DeadLetterPage::of(vec![letter(1, "p00.a")], 1).next, None, "no more: the last page");
    }
}
