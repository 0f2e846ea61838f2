//! Permission requests in SQLite.

use async_trait::async_trait;

use super::*;

#[async_trait]
impl PermissionStore for SqliteStore {
    async fn ask_permission(&self, request: &PermissionRecord, reason: &str) -> StoreResult<()> {
        let (r, reason) = (request.clone(), reason.to_string());
        self.db
            .write(move |conn| {
                run(
                    conn,
                    &format!(
                        "INSERT INTO permission_requests ({PERMISSION_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
                    ),
                    params![
                        r.id,
                        r.thread_id,
                        r.turn_id,
                        r.tool,
                        r.input,
                        r.status.as_str(),
                        r.reason,
                        r.created_at,
                        r.decided_at
                    ],
                )?;
                let mut asked = event(&r.thread_id, EventKind::Attention, r.created_at);
                asked.turn_id = Some(r.turn_id.clone());
                asked.reason = reason.clone();
                asked.request_id = Some(r.id.clone());
                insert_event(conn, &asked).map(drop)
            })
            .await
    }

    async fn decide_permission(
        &self,
        id: &str,
        status: PermissionStatus,
        reason: &str,
        now: Millis,
    ) -> StoreResult<Option<PermissionRecord>> {
        let (id, reason) = (id.to_string(), reason.to_string());
        self.db
            .write(move |conn| {
                run(
                    conn,
                    sql!(
                        "UPDATE permission_requests SET status = ?, reason = ?, decided_at = ?
                         WHERE id = ? AND status = '{pending}'",
                        pending = PermissionStatus::Pending
                    ),
                    params![status.as_str(), reason, now, id],
                )?;
                note(Change::Answered(id.clone()));
                permission_in(conn, &id)
            })
            .await
    }

    async fn permission(&self, id: &str) -> StoreResult<Option<PermissionRecord>> {
        let id = id.to_string();
        self.db.read(move |conn| permission_in(conn, &id)).await
    }
}

fn permission_in(conn: &Connection, id: &str) -> StoreResult<Option<PermissionRecord>> {
    first(conn, &format!("SELECT {PERMISSION_COLUMNS} FROM permission_requests WHERE id = ?"), [id], |row| {
        permission_from(row)
    })
}
