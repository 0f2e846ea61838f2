//! The changes the writer's transactions note as they write (see [`Change`]), published by
//! the store once they are committed.

use std::cell::RefCell;

use super::Change;

thread_local! {
    /// The writer's notes since its last commit.
    static NOTED: RefCell<Vec<Change>> = const { RefCell::new(Vec::new()) };
}

/// Notes that the write under way makes `change`.
pub fn note(change: Change) {
    NOTED.with_borrow_mut(|noted| noted.push(change));
}

/// The notes since the last commit (called by the writer after each commit).
pub fn take() -> Vec<Change> {
    NOTED.with_borrow_mut(std::mem::take)
}
