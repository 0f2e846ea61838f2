//! The bridge table: every bridge record of this home, kept in memory and read again after
//! each change, so the check every peer call makes costs no store read.
//!
//! A change is learnt from the store's published changes ([`Change::Bridges`]), whichever
//! process made it: on a team home a decision or a revocation through one replica holds on
//! every replica as soon as its store hears of it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};
use crate::store::{BridgeRecord, BridgeRequestRecord, Change, Direction, Store, StoreResult};

pub(super) struct BridgeTable {
    store: Arc<dyn Store>,
    /// Counts the changes heard of: a table read before the last one is stale.
    changes: Arc<AtomicU64>,
    /// The table as last read, with the count of changes it was read after.
    cache: tokio::sync::Mutex<Option<(u64, Arc<Vec<BridgeRecord>>)>>,
}

impl BridgeTable {
    pub(super) fn new(store: Arc<dyn Store>) -> Self {
        let changes = Arc::new(AtomicU64::new(0));
        store.changes().listen(Arc::new({
            let changes = changes.clone();
            move |heard: &[Change]| {
                if heard.iter().any(|c| matches!(c, Change::Bridges | Change::Missed)) {
                    changes.fetch_add(1, Ordering::AcqRel);
                }
            }
        }));
        Self { store, changes, cache: Default::default() }
    }

    /// Every bridge, from memory while no change was heard of since it was read.
    pub(super) async fn all(&self) -> StoreResult<Arc<Vec<BridgeRecord>>> {
        let mut cache = self.cache.lock().await;
        // Taken before the read: a change committed while it runs makes this read stale.
        let changes = self.changes.load(Ordering::Acquire);
        if let Some((read_after, bridges)) = &*cache
            && *read_after == changes
        {
            return Ok(bridges.clone());
        }
        let bridges = Arc::new(self.store.bridges().await?);
        *cache = Some((changes, bridges.clone()));
        Ok(bridges)
    }

    /// Saves a bridge and/or requests, in one write (the store publishes the change, which
    /// makes the table stale before the write answers).
    pub(super) async fn save(
        &self,
        bridge: Option<&BridgeRecord>,
        requests: &[BridgeRequestRecord],
    ) -> StoreResult<()> {
        self.store.save_bridge(bridge, requests).await
    }

    pub(super) async fn find(&self, pick: impl Fn(&BridgeRecord) -> bool) -> Result<Option<BridgeRecord>> {
        Ok(self.all().await?.iter().find(|b| pick(b)).cloned())
    }

    /// The outbound bridge HOST names (alias, peer home id or bridge id).
    pub(super) async fn outbound(&self, host: &str) -> Result<BridgeRecord> {
        self.find(|b| b.direction == Direction::Outbound && b.answers_to(host)).await?.ok_or_else(|| {
            Error::NotFound(format!("host {host:?}: not this home and no bridge by that name or id"))
        })
    }
}
