//! The memory store's dead letters: the `Book` they are kept in (in
//! listing order, with their expiry) and [`DeadLetters`] over it. A letter
//! is recorded by `conclude_dead` (in `tasks.rs`) under the same lock as the
//! write that ends its task.

use std::collections::{BTreeMap, HashMap};

use presa_tasks::TaskId;

use crate::{
    dead::DeadLetter, dead::DeadLetterFilter, dead::DeadLetterPage, dead::DeadLetters, error::StoreError,
    memory::MemoryStore, util::now_ms,
};

/// The dead letters of the memory store, with their expiry: one map in
/// listing order, and where each task's letter is in it.
#[derive(Debug, Default)]
pub(super) struct Book {
    /// By cursor: the letter and when it expires (Unix ms).
    letters: BTreeMap<String, (DeadLetter, u64)>,
    /// Each letter's cursor, by task id.
    by_id: HashMap<TaskId, String>,
}

impl Book {
    /// Keep `letter` until `expires_at_ms` (a task dies once: a second
    /// letter of the same task replaces the first).
    pub(super) fn record(&mut self, letter: DeadLetter, expires_at_ms: u64) {
        self.remove(&letter.id);
        let at = letter.cursor();
        self.by_id.insert(letter.id.clone(), at.clone());
        self.letters.insert(at, (letter, expires_at_ms));
    }

    /// Up to `limit + 1` live letters passing `filter`, after `after`.
    pub(super) fn after(
        &self,
        filter: &DeadLetterFilter,
        after: Option<&str>,
        limit: usize,
        now: u64,
    ) -> Vec<DeadLetter> {
        let from = match after {
            Some(at) => std::ops::Bound::Excluded(at.to_string()),
            None => std::ops::Bound::Unbounded,
        };
        self.letters
            .range((from, std::ops::Bound::Unbounded))
            .map(|(_, entry)| entry)
            .filter(|(letter, expires)| *expires > now && filter.admits(&letter.scope))
            .take(limit + 1)
            .map(|(letter, _)| letter.clone())
            .collect()
    }

    /// The live letter of task `id`, if it is `tenant`'s.
    pub(super) fn get(&mut self, tenant: &str, id: &TaskId, now: u64) -> Option<&mut DeadLetter> {
        let at = self.by_id.get(id)?;
        let (letter, expires) = self.letters.get_mut(at)?;
        (*expires > now && letter.scope.tenant == tenant).then_some(letter)
    }

    /// Drop the letter of task `id` (whoever's it is; callers check the tenant first).
    pub(super) fn remove(&mut self, id: &TaskId) -> bool {
        match self.by_id.remove(id) {
            Some(at) => self.letters.remove(&at).is_some(),
            None => false,
        }
    }

    /// Drop every expired letter.
    pub(super) fn purge(&mut self, now: u64) {
        self.letters.retain(|_, (_, expires)| *expires > now);
        let letters = &self.letters;
        self.by_id.retain(|_, at| letters.contains_key(at));
    }
}

#[async_trait::async_trait]
impl DeadLetters for MemoryStore {
    async fn dead_letters(
        &self,
        filter: &DeadLetterFilter,
        after: Option<&str>,
        limit: usize,
    ) -> Result<DeadLetterPage, StoreError> {
        let limit = crate::dead::page_limit(limit);
        Ok(DeadLetterPage::of(self.state().dead.after(filter, after, limit, now_ms()), limit))
    }

    async fn dead_letter(&self, tenant: &str, id: &TaskId) -> Result<Option<DeadLetter>, StoreError> {
        Ok(self.state().dead.get(tenant, id, now_ms()).map(|letter| letter.clone()))
    }

    async fn mark_dead_letter_replayed(
        &self,
        tenant: &str,
        id: &TaskId,
        new: &TaskId,
    ) -> Result<Option<TaskId>, StoreError> {
        let mut s = self.state();
        Ok(s.dead.get(tenant, id, now_ms()).map(|letter| letter.replayed_as.get_or_insert_with(|| new.clone()).clone()))
    }

    async fn discard_dead_letter(&self, tenant: &str, id: &TaskId) -> Result<bool, StoreError> {
        let mut s = self.state();
        Ok(s.dead.get(tenant, id, now_ms()).is_some() && s.dead.remove(id))
    }
}
