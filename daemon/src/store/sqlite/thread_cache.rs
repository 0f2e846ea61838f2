//! Thread records by id, read through by `Store::thread`: every send looks its target up
//! (a bridged one at the target, a local one at its home), and a lookup's read transaction
//! after any commit starts from an empty page cache (~20 µs of an async worker).
//!
//! A write that changes a thread's row notes the thread ([`touched`], on the writer's
//! thread); after each commit, before anyone is answered, the writer drops the records of
//! the threads touched since the last one ([`ThreadCache::committed`]; notes from a failed
//! commit carry over to the next). So a lookup made after a change was answered reads the
//! change; between the commit and the drop, the cache may still give the old record, as if
//! read a moment earlier. A lookup racing a commit keeps its record only if no commit
//! dropped anything since it started: one that read the row before the commit cannot put
//! the old record back. It assumes the only writer of the file is this store (the home's
//! lock keeps a second kikid out).

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Mutex;

use crate::store::ThreadRecord;
use crate::sync::lock;

/// Records kept at most; past that the cache starts over (a home has a few busy threads).
const MAX_RECORDS: usize = 1024;

thread_local! {
    /// The writer's notes since its last commit: thread ids, or `None` for every thread.
    static TOUCHED: RefCell<Option<Vec<String>>> = const { RefCell::new(Some(Vec::new())) };
}

/// Notes that the write under way changes `thread_id`'s row (`None`: every thread's).
pub fn touched(thread_id: Option<&str>) {
    TOUCHED.with_borrow_mut(|touched| match (touched.as_mut(), thread_id) {
        (Some(ids), Some(id)) => ids.push(id.to_string()),
        _ => *touched = None,
    });
}

#[derive(Default)]
pub struct ThreadCache {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Moves on whenever a commit drops records.
    generation: u64,
    records: HashMap<String, ThreadRecord>,
}

impl ThreadCache {
    pub fn get(&self, id: &str) -> Option<ThreadRecord> {
        lock(&self.state).records.get(id).cloned()
    }

    /// Where a lookup starts: pass it to [`ThreadCache::fill`] with what it read.
    pub fn generation(&self) -> u64 {
        lock(&self.state).generation
    }

    /// Keeps `record`, read by a lookup that started at `generation`, unless a commit
    /// dropped records since (the lookup may have read the row before that commit).
    pub fn fill(&self, generation: u64, record: &ThreadRecord) {
        let mut state = lock(&self.state);
        if state.generation != generation {
            return;
        }
        if state.records.len() >= MAX_RECORDS {
            state.records.clear();
        }
        state.records.insert(record.id.clone(), record.clone());
    }

    /// Called by the writer after each commit, before it answers: drops the records of the
    /// threads its writes touched.
    pub fn committed(&self) {
        let touched = TOUCHED.with_borrow_mut(|touched| touched.replace(Vec::new()));
        if touched.as_ref().is_some_and(Vec::is_empty) {
            return;
        }
        let mut state = lock(&self.state);
        state.generation += 1;
        match touched {
            Some(ids) => ids.iter().for_each(|id| drop(state.records.remove(id))),
            None => state.records.clear(),
        }
    }
}
