//! The home's replicas in SQLite (one: the process holding the file).

use async_trait::async_trait;

use super::*;

#[async_trait]
impl ReplicaStore for SqliteStore {
    async fn heartbeat(&self, r: &ReplicaRecord, forget_before: Millis) -> StoreResult<()> {
        let r = r.clone();
        self.db
            .write(move |conn| {
                run(
                    conn,
                    "INSERT INTO replicas (id, host, home, pid, bridge_listen, started_at, heartbeat_at)
                     VALUES (?1, ?2, ?7, ?3, ?4, ?5, ?6)
                     ON CONFLICT (id) DO UPDATE SET heartbeat_at = ?6, bridge_listen = ?4",
                    params![r.id, r.host, r.pid, r.bridge_listen, r.started_at, r.heartbeat_at, r.home],
                )?;
                run(
                    conn,
                    "DELETE FROM replicas WHERE heartbeat_at < ? AND id <> ?",
                    params![forget_before, r.id],
                )?;
                Ok(())
            })
            .await
    }

    async fn replicas(&self) -> StoreResult<Vec<ReplicaRecord>> {
        self.db
            .read(|conn| {
                all(
                    conn,
                    &format!("SELECT {REPLICA_COLUMNS} FROM replicas ORDER BY started_at, id"),
                    [],
                    |row| replica_from(row),
                )
            })
            .await
    }

    async fn retire_replica(&self, id: &str) -> StoreResult<()> {
        let id = id.to_string();
        self.db.write(move |conn| run(conn, "DELETE FROM replicas WHERE id = ?", [&id]).map(drop)).await
    }

    async fn claim_home(&self, ours: &str, replace: bool) -> StoreResult<String> {
        let ours = ours.to_string();
        self.db
            .write(move |conn| {
                let claimed = first(conn, CLAIM_HOME, params![ours, replace], |row| Ok(row.get(0)?))?;
                claimed.ok_or_else(|| StoreError::Backend("the home's record was not written".into()))
            })
            .await
    }
}
