//! The bridge table: every bridge record of this home, kept in memory and read again after
//! each change, so the check every peer call makes costs no store read.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::store::Direction;
use crate::store::{BridgeRecord, BridgeRequestRecord, Store, StoreResult};

pub(super) struct BridgeTable {
    store: Arc<dyn Store>,
    /// The table as last read; `None` once a change made it stale.
    cache: tokio::sync::Mutex<Option<Arc<Vec<BridgeRecord>>>>,
}

impl BridgeTable {
    pub(super) fn new(store: Arc<dyn Store>) -> Self {
        Self { store, cache: Default::default() }
    }

    /// Every bridge, from memory: the table is read once and re-read after each change, so
    /// the per-call permission check costs no store read.
    pub(super) async fn all(&self) -> StoreResult<Arc<Vec<BridgeRecord>>> {
        let mut cache = self.cache.lock().await;
        if let Some(bridges) = &*cache {
            return Ok(bridges.clone());
        }
        let bridges = Arc::new(self.store.bridges().await?);
        *cache = Some(bridges.clone());
        Ok(bridges)
    }

    /// Saves a bridge and/or requests, in one write; saving a bridge drops the cached bridge
    /// table (requests alone leave it: every bridged call reads the cache).
    pub(super) async fn save(
        &self,
        bridge: Option<&BridgeRecord>,
        requests: &[BridgeRequestRecord],
    ) -> StoreResult<()> {
        let save = self.store.save_bridge(bridge, requests);
        if bridge.is_some() { self.changing(save).await } else { save.await }
    }

    /// Runs a store write that changes the bridge table, holding the cache so no read
    /// refills it meanwhile, then drops it.
    pub(super) async fn changing<T>(&self, write: impl Future<Output = T>) -> T {
        let mut cache = self.cache.lock().await;
        let done = write.await;
        *cache = None;
        done
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
