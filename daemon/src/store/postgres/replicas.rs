//! A team home's replicas on PostgreSQL. A heartbeat takes no write lock: it touches its
//! own row only, and must land even while the home's writes queue.

use async_trait::async_trait;

use super::*;

#[async_trait]
impl ReplicaStore for PostgresStore {
    async fn heartbeat(&self, r: &ReplicaRecord, forget_before: Millis) -> StoreResult<()> {
        sqlx::query(
            "WITH forgotten AS (DELETE FROM replicas WHERE heartbeat_at < $7 AND id <> $1)
             INSERT INTO replicas (id, host, home, pid, bridge_listen, started_at, heartbeat_at)
             VALUES ($1, $2, $8, $3, $4, $5, $6)
             ON CONFLICT (id) DO UPDATE SET heartbeat_at = $6, bridge_listen = $4",
        )
        .bind(&r.id)
        .bind(&r.host)
        .bind(i64::from(r.pid))
        .bind(&r.bridge_listen)
        .bind(r.started_at)
        .bind(r.heartbeat_at)
        .bind(forget_before)
        .bind(&r.home)
        .execute(&mut *self.read().await?)
        .await?;
        Ok(())
    }

    async fn replicas(&self) -> StoreResult<Vec<ReplicaRecord>> {
        sqlx::query(&format!("SELECT {REPLICA_COLUMNS} FROM replicas ORDER BY started_at, id"))
            .fetch_all(&mut *self.read().await?)
            .await?
            .iter()
            .map(replica_from)
            .collect()
    }

    async fn retire_replica(&self, id: &str) -> StoreResult<()> {
        sqlx::query("DELETE FROM replicas WHERE id = $1").bind(id).execute(&mut *self.read().await?).await?;
        Ok(())
    }

    async fn claim_home(&self, ours: &str, replace: bool) -> StoreResult<String> {
        Ok(sqlx::query_scalar(CLAIM_HOME)
            .bind(ours)
            .bind(replace)
            .fetch_one(&mut *self.read().await?)
            .await?)
    }
}
