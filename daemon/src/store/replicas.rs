//! The kikid processes serving the home: each one's row, kept fresh by its heartbeat.
//!
//! A SQLite home has one (its file is locked by it); a Postgres home may have several
//! replicas sharing the store, and what one of them has claimed (a turn, an outbox entry)
//! is its own only while its heartbeat is younger than the home's lease.

use async_trait::async_trait;

use super::*;

/// A kikid serving the home, as its last heartbeat left it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaRecord {
    /// Made by the process as it starts: a restart is a new replica.
    pub id: String,
    /// The machine it runs on, and its home directory there: a kikid that holds that home's
    /// lock knows every other replica of the same machine and home is gone.
    pub host: String,
    pub home: String,
    pub pid: u32,
    /// Its QUIC endpoint's address, as it bound it.
    pub bridge_listen: String,
    pub started_at: Millis,
    pub heartbeat_at: Millis,
}

#[async_trait]
pub trait ReplicaStore: Send + Sync {
    /// Records `replica` with its heartbeat (`heartbeat_at`), adding it if it is new, and
    /// forgets the replicas whose last heartbeat was before `forget_before`.
    async fn heartbeat(&self, replica: &ReplicaRecord, forget_before: Millis) -> StoreResult<()>;

    /// Every replica on record, the longest running first.
    async fn replicas(&self) -> StoreResult<Vec<ReplicaRecord>>;

    /// Removes a replica that stops.
    async fn retire_replica(&self, id: &str) -> StoreResult<()>;

    /// The home this store belongs to (its identity's id): records `ours` when none is on
    /// record yet, or instead of the one on record when `replace` (the home was given a new
    /// identity), and answers the one on record after that.
    async fn claim_home(&self, ours: &str, replace: bool) -> StoreResult<String>;
}

/// [`ReplicaStore::claim_home`] in one statement, for both backends (`$1` ours, `$2` replace).
pub(super) const CLAIM_HOME: &str = "INSERT INTO home (only_row, home_id) VALUES (1, $1)
     ON CONFLICT (only_row) DO UPDATE SET home_id = CASE WHEN $2 THEN excluded.home_id ELSE home.home_id END
     RETURNING home_id";
