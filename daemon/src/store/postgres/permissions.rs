//! Permission requests on PostgreSQL.

use async_trait::async_trait;

use super::events::insert_event;
use super::*;

#[async_trait]
impl PermissionStore for PostgresStore {
    async fn ask_permission(&self, r: &PermissionRecord, reason: &str) -> StoreResult<()> {
        let mut tx = self.begin().await?;
        sqlx::query(&format!(
            "INSERT INTO permission_requests ({PERMISSION_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
        ))
        .bind(&r.id)
        .bind(&r.thread_id)
        .bind(&r.turn_id)
        .bind(&r.tool)
        .bind(&r.input)
        .bind(r.status)
        .bind(&r.reason)
        .bind(r.created_at)
        .bind(r.decided_at)
        .execute(tx.conn())
        .await?;
        let mut asked = event(&r.thread_id, EventKind::Attention, r.created_at);
        asked.turn_id = Some(r.turn_id.clone());
        asked.reason = reason.to_string();
        asked.request_id = Some(r.id.clone());
        insert_event(&mut tx, &asked).await?;
        self.commit(tx).await
    }

    async fn decide_permission(
        &self,
        id: &str,
        status: PermissionStatus,
        reason: &str,
        now: Millis,
    ) -> StoreResult<Option<PermissionRecord>> {
        let mut tx = self.begin().await?;
        sqlx::query(
            "UPDATE permission_requests SET status = $1, reason = $2, decided_at = $3 WHERE id = $4 AND status = $5",
        )
        .bind(status)
        .bind(reason)
        .bind(now)
        .bind(id)
        .bind(PermissionStatus::Pending)
        .execute(tx.conn())
        .await?;
        tx.note(Change::Answered(id.to_string()));
        let request = permission_in(tx.conn(), id).await?;
        self.commit(tx).await?;
        Ok(request)
    }

    async fn permission(&self, id: &str) -> StoreResult<Option<PermissionRecord>> {
        permission_in(&mut *self.read().await?, id).await
    }
}

async fn permission_in(conn: &mut PgConnection, id: &str) -> StoreResult<Option<PermissionRecord>> {
    let row = sqlx::query(&format!("SELECT {PERMISSION_COLUMNS} FROM permission_requests WHERE id = $1"))
        .bind(id)
        .fetch_optional(conn)
        .await?;
    row.as_ref().map(permission_from).transpose()
}
