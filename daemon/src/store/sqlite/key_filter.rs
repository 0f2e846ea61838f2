//! The send keys a home's senders may have used, by (scope, key): a Bloom filter, so the key
//! probes every cross-home send makes before it ships (is this key in the outbox already, or
//! on a message to a thread of this home?) are answered without a read when the key is new,
//! as nearly every send's is. The store keeps one for each of those two places. A read
//! transaction after any commit starts from an empty page cache (~20 µs of an async worker
//! per probe).
//!
//! Every key the place holds is in its filter: the store fills it when it opens (until then
//! every probe reads) and adds each key before its write. A key the filter may hold is
//! looked up as before; a key it cannot hold is new. Like the thread cache, it assumes the
//! only writer of the file is this store. Keys are never taken out (the store forgets local
//! keys after `[mailbox] key_retention`, 7 days by default): 2 MiB of bits, about one new key in 500 is read anyway at a million
//! keys, one in seven at four million — past that the probes simply read more often.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

const BITS: usize = 1 << 24;
const PROBES: u64 = 4;

pub struct KeyFilter {
    words: Vec<AtomicU64>,
    /// Whether the outbox's keys at the start are all in: until then, anything may be there.
    filled: AtomicBool,
}

impl Default for KeyFilter {
    fn default() -> Self {
        Self { words: (0..BITS / 64).map(|_| AtomicU64::new(0)).collect(), filled: AtomicBool::new(false) }
    }
}

impl KeyFilter {
    pub fn add(&self, scope: &str, key: &str) {
        for bit in bits(scope, key) {
            self.words[bit / 64].fetch_or(1 << (bit % 64), Ordering::Relaxed);
        }
    }

    /// False only if the keys it stands for cannot hold this one.
    pub fn may_hold(&self, scope: &str, key: &str) -> bool {
        !self.filled.load(Ordering::Acquire)
            || bits(scope, key)
                .all(|bit| self.words[bit / 64].load(Ordering::Relaxed) & (1 << (bit % 64)) != 0)
    }

    /// Every key the outbox held when the store opened has been added.
    pub fn set_filled(&self) {
        self.filled.store(true, Ordering::Release);
    }
}

/// The key's bits: two halves of one hash, combined (Kirsch and Mitzenmacher).
fn bits(scope: &str, key: &str) -> impl Iterator<Item = usize> {
    let mut hasher = DefaultHasher::new();
    (scope, key).hash(&mut hasher);
    let hash = hasher.finish();
    let (first, step) = (hash & 0xffff_ffff, (hash >> 32) | 1);
    (0..PROBES).map(move |i| (first.wrapping_add(i.wrapping_mul(step)) % BITS as u64) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_added_is_held_and_until_filled_anything_may_be() {
        let filter = KeyFilter::default();
        assert!(filter.may_hold("", "new"), "not filled yet: it may be there");
        filter.add("", "old");
        filter.set_filled();
        assert!(filter.may_hold("", "old"));
        let new = (0..1000).filter(|i| filter.may_hold("", &format!("k{i}"))).count();
        assert_eq!(new, 0, "a near-empty filter holds no other key");
        assert!(!filter.may_hold("th_other", "old"), "keys are their sender's");
    }
}
