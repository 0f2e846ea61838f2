//! Rooms on PostgreSQL: the room, its roster and its log, and posts written in one
//! transaction with the inputs (or turns) of the members they wake.

use async_trait::async_trait;

use super::events::insert_event;
use super::outbox::insert_outbox;
use super::turns::{claim_turn, insert_input};
use super::*;

#[async_trait]
impl RoomStore for PostgresStore {
    async fn create_room(&self, room: &RoomRecord) -> StoreResult<()> {
        let mut tx = self.begin().await?;
        sqlx::query(
            "INSERT INTO rooms (id, name, host_thread, created_at, updated_at) VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(&room.id)
        .bind(&room.name)
        .bind(&room.host_thread)
        .bind(room.created_at)
        .bind(room.updated_at)
        .execute(tx.conn())
        .await?;
        self.commit(tx).await
    }

    async fn room(&self, id: &str) -> StoreResult<Option<RoomRecord>> {
        room_by_id(&mut *self.read().await?, id).await
    }

    async fn list_rooms(&self, before_seq: Option<i64>, limit: u32) -> StoreResult<Vec<RoomRecord>> {
        let sql = format!("SELECT {ROOM_COLUMNS} FROM rooms WHERE seq < $1 ORDER BY seq DESC LIMIT $2");
        sqlx::query(&sql)
            .bind(before_seq.unwrap_or(i64::MAX))
            .bind(i64::from(limit))
            .fetch_all(&mut *self.read().await?)
            .await?
            .iter()
            .map(room_from)
            .collect()
    }

    async fn room_members(&self, room_id: &str) -> StoreResult<Vec<MemberRecord>> {
        members_of(&mut *self.read().await?, room_id).await
    }

    async fn add_member(&self, room_id: &str, member: &MemberRecord) -> StoreResult<AddOutcome> {
        let mut tx = self.begin().await?;
        let Some(room) = room_by_id(tx.conn(), room_id).await? else { return Ok(AddOutcome::RoomGone) };
        if room.archived {
            return Ok(AddOutcome::Archived);
        }
        let members = members_of(tx.conn(), room_id).await?;
        let joined = |id: &str| rules::roster_entry(&room, &members, id).is_some();
        if joined(&member.member_id) || member.thread_id.as_deref().is_some_and(joined) {
            return Ok(AddOutcome::AlreadyMember);
        }
        if members.len() >= ROOM_MEMBERS_MAX {
            return Ok(AddOutcome::Full);
        }
        let sql = format!(
            "INSERT INTO room_members ({MEMBER_COLUMNS}, room_id, joined)
             VALUES ($1, $2, $3, $4, $5, $6, $7,
                     (SELECT COALESCE(MAX(joined), 0) + 1 FROM room_members WHERE room_id = $7))"
        );
        sqlx::query(&sql)
            .bind(&member.member_id)
            .bind(member.kind)
            .bind(&member.thread_id)
            .bind(&member.profile)
            .bind(&member.instructions)
            .bind(member.added_at)
            .bind(room_id)
            .execute(tx.conn())
            .await?;
        touch_room(&mut tx, room_id, member.added_at).await?;
        self.commit(tx).await?;
        Ok(AddOutcome::Added)
    }

    async fn remove_member(&self, room_id: &str, member_id: &str, now: Millis) -> StoreResult<bool> {
        let mut tx = self.begin().await?;
        let removed =
            sqlx::query("DELETE FROM room_members WHERE room_id = $1 AND (member_id = $2 OR thread_id = $2)")
                .bind(room_id)
                .bind(member_id)
                .execute(tx.conn())
                .await?
                .rows_affected()
                > 0;
        if removed {
            touch_room(&mut tx, room_id, now).await?;
        }
        self.commit(tx).await?;
        Ok(removed)
    }

    async fn set_persona_thread(&self, room_id: &str, persona: &str, thread_id: &str) -> StoreResult<String> {
        let mut tx = self.begin().await?;
        sqlx::query(
            "UPDATE room_members SET thread_id = $1
             WHERE room_id = $2 AND member_id = $3 AND kind = $4 AND thread_id IS NULL",
        )
        .bind(thread_id)
        .bind(room_id)
        .bind(persona)
        .bind(MemberKind::Persona)
        .execute(tx.conn())
        .await?;
        let now: Option<Option<String>> =
            sqlx::query_scalar("SELECT thread_id FROM room_members WHERE room_id = $1 AND member_id = $2")
                .bind(room_id)
                .bind(persona)
                .fetch_optional(tx.conn())
                .await?;
        let now = now
            .flatten()
            .ok_or_else(|| StoreError::Conflict(format!("{persona} is not a persona of {room_id}")))?;
        self.commit(tx).await?;
        Ok(now)
    }

    async fn change_room(
        &self,
        room_id: &str,
        change: RoomChange,
        reason: &str,
        now: Millis,
    ) -> StoreResult<Option<(RoomRecord, bool)>> {
        let mut tx = self.begin().await?;
        let Some(room) = room_by_id(tx.conn(), room_id).await? else { return Ok(None) };
        let changed = !room.archived
            && match change {
                RoomChange::Pause => !room.paused,
                RoomChange::Resume => room.paused,
                RoomChange::Archive => true,
            };
        if changed {
            let sql = match change {
                RoomChange::Pause => {
                    "UPDATE rooms SET paused = true, paused_reason = $1, updated_at = $2 WHERE id = $3"
                }
                RoomChange::Resume => {
                    "UPDATE rooms SET paused = false, paused_reason = $1, agent_wakes = 0, updated_at = $2 WHERE id = $3"
                }
                RoomChange::Archive => {
                    "UPDATE rooms SET archived = true, paused_reason = $1, updated_at = $2 WHERE id = $3"
                }
            };
            let reason = if change == RoomChange::Pause { reason } else { "" };
            sqlx::query(sql).bind(reason).bind(now).bind(room_id).execute(tx.conn()).await?;
        }
        let room = room_by_id(tx.conn(), room_id).await?;
        self.commit(tx).await?;
        Ok(room.map(|room| (room, changed)))
    }

    async fn post_to_room(&self, entry: &NewEntry) -> StoreResult<PostOutcome> {
        let mut tx = self.begin().await?;
        let outcome = post(&mut tx, entry).await?;
        self.commit(tx).await?;
        Ok(outcome)
    }

    async fn room_entry_by_key(
        &self,
        room_id: &str,
        key_scope: &str,
        key: &str,
    ) -> StoreResult<Option<(String, EntryRecord)>> {
        entry_by_key(&mut *self.read().await?, room_id, key_scope, key).await
    }

    async fn room_entries(&self, room_id: &str, after_seq: i64, limit: u32) -> StoreResult<Vec<EntryRecord>> {
        let sql = format!(
            "SELECT {ENTRY_COLUMNS} FROM room_entries WHERE room_id = $1 AND seq > $2 ORDER BY seq LIMIT $3"
        );
        sqlx::query(&sql)
            .bind(room_id)
            .bind(after_seq)
            .bind(i64::from(limit))
            .fetch_all(&mut *self.read().await?)
            .await?
            .iter()
            .map(entry_from)
            .collect()
    }

    async fn rooms_of_thread(&self, thread_id: &str) -> StoreResult<Vec<String>> {
        Ok(sqlx::query_scalar(
            "SELECT id FROM rooms WHERE host_thread = $1 UNION SELECT room_id FROM room_members WHERE thread_id = $1",
        )
        .bind(thread_id)
        .fetch_all(&mut *self.read().await?)
        .await?)
    }

    async fn entry_deliveries(&self, entry_id: &str) -> StoreResult<Vec<EntryDelivery>> {
        let rows = sqlx::query(&format!(
            "SELECT {DELIVERY_COLUMNS} FROM outbox WHERE room_entry = $1 ORDER BY created_at, id"
        ))
        .bind(entry_id)
        .fetch_all(&mut *self.read().await?)
        .await?;
        rows.iter().map(delivery_from).collect()
    }

    async fn room_home(&self, room_id: &str) -> StoreResult<Option<String>> {
        Ok(sqlx::query_scalar("SELECT home_id FROM remote_rooms WHERE room_id = $1")
            .bind(room_id)
            .fetch_optional(&mut *self.read().await?)
            .await?)
    }

    async fn bind_room(&self, room_id: &str, home_id: &str, now: Millis) -> StoreResult<String> {
        let mut tx = self.begin().await?;
        sqlx::query(
            "INSERT INTO remote_rooms (room_id, home_id, updated_at) VALUES ($1, $2, $3)
             ON CONFLICT (room_id) DO NOTHING",
        )
        .bind(room_id)
        .bind(home_id)
        .bind(now)
        .execute(tx.conn())
        .await?;
        let bound: Option<String> = sqlx::query_scalar("SELECT home_id FROM remote_rooms WHERE room_id = $1")
            .bind(room_id)
            .fetch_optional(tx.conn())
            .await?;
        self.commit(tx).await?;
        Ok(bound.unwrap_or_else(|| home_id.to_string()))
    }
}

/// A post, as [`RoomStore::post_to_room`] describes it.
async fn post(tx: &mut Tx, e: &NewEntry) -> StoreResult<PostOutcome> {
    let Some(room) = room_by_id(tx.conn(), &e.room_id).await? else { return Ok(PostOutcome::RoomGone) };
    // The key decides first, whatever the room is now.
    if let Some((hash, entry)) = entry_by_key(tx.conn(), &e.room_id, &e.key_scope, &e.key).await? {
        return Ok(rules::post_by_key(&e.request_hash, &hash, entry));
    }
    let members = members_of(tx.conn(), &e.room_id).await?;
    let plan = match rules::plan_post(&room, &members, e.author.as_ref(), &e.mentions, e.max_agent_wakes) {
        Ok(plan) => plan,
        Err(rules::PostRefusal::Archived) => return Ok(PostOutcome::Archived),
        Err(rules::PostRefusal::NotMember) => return Ok(PostOutcome::NotMember),
    };
    let (mut turns, mut queued, mut woke): (_, Vec<String>, _) = (Vec::new(), Vec::new(), Vec::new());
    for woken in &plan.wake {
        let thread = match woken {
            rules::Woken::Remote { member } => {
                if let Some((_, outbound)) = e.remote.iter().find(|(remote, _)| remote == member) {
                    insert_outbox(tx, outbound).await?;
                }
                woke.push(member.clone());
                continue;
            }
            rules::Woken::Thread { thread, .. } => thread,
        };
        // A thread archived meanwhile is skipped: the entry stays in the log.
        let Some(woken) = wake_member(tx, e, thread, woke.len()).await? else { continue };
        if !woken.taken {
            queued.push(thread.clone());
        }
        turns.extend(woken.turn);
        // As the roster shows it: a persona that has its thread by its thread's id.
        woke.push(thread.clone());
    }
    let entry = rules::entry(e, &room, woke);
    insert_entry(tx, &entry, e).await?;
    record_loop_guard(tx, &room, e, &plan).await?;
    Ok(PostOutcome::Posted { entry, turns, queued, paused: plan.pause })
}

/// A member thread of this home woken by a post: its input, taken by the turn the post's
/// claim starts if the thread is idle, else queued.
struct Woken {
    turn: Option<ClaimedTurn>,
    taken: bool,
}

/// Wakes `thread` with entry `e` (its `nth` woken member); `None` if the thread is gone or
/// archived.
async fn wake_member(tx: &mut Tx, e: &NewEntry, thread: &str, nth: usize) -> StoreResult<Option<Woken>> {
    let running: Option<bool> =
        sqlx::query_scalar("SELECT running FROM threads WHERE id = $1 AND NOT archived")
            .bind(thread)
            .fetch_optional(tx.conn())
            .await?;
    let Some(running) = running else { return Ok(None) };
    let input = rules::entry_input(e, nth);
    // A busy thread queues it without a claim.
    let claim = e.claims.iter().find(|(t, _)| t == thread).map(|(_, claim)| claim);
    let turn = match claim.filter(|_| !running) {
        Some(claim) => {
            let arriving = NewInput { content: e.content.clone(), ..input.clone() };
            claim_turn(tx, thread, claim, e.now, Some(arriving)).await?
        }
        None => None,
    };
    let taken_by = rules::taken_by(turn.as_ref(), &input.id);
    insert_input(tx, thread, &input, true, taken_by.as_deref()).await?;
    Ok(Some(Woken { turn, taken: taken_by.is_some() }))
}

/// Writes the entry to its room's log, with its key.
async fn insert_entry(tx: &mut Tx, entry: &EntryRecord, e: &NewEntry) -> StoreResult<()> {
    let (author_host, author) =
        entry.author.as_ref().map_or(("", ""), |a| (a.host_id.as_str(), a.thread_id.as_str()));
    sqlx::query(
        "INSERT INTO room_entries (room_id, seq, id, author_host, author, content, mentions, woke,
                                   key_scope, key, request_hash, at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
    )
    .bind(&entry.room_id)
    .bind(entry.seq)
    .bind(&entry.id)
    .bind(author_host)
    .bind(author)
    .bind(&entry.content)
    .bind(entry.mentions.join(" "))
    .bind(entry.woke.join(" "))
    .bind(&e.key_scope)
    .bind(&e.key)
    .bind(&e.request_hash)
    .bind(entry.at)
    .execute(tx.conn())
    .await?;
    Ok(())
}

/// The loop guard's count after the post, and the room paused (with an `attention` event
/// on its host) if the post tripped it. The room's row changes only with the count or a
/// pause.
async fn record_loop_guard(
    tx: &mut Tx,
    room: &RoomRecord,
    e: &NewEntry,
    plan: &rules::PostPlan,
) -> StoreResult<()> {
    if plan.agent_wakes != room.agent_wakes || plan.pause.is_some() {
        sqlx::query(
            "UPDATE rooms SET agent_wakes = $1, updated_at = $2,
                              paused = paused OR $3, paused_reason = CASE WHEN $3 THEN $4 ELSE paused_reason END
             WHERE id = $5",
        )
        .bind(plan.agent_wakes)
        .bind(e.now)
        .bind(plan.pause.is_some())
        .bind(plan.pause.as_deref().unwrap_or(""))
        .bind(&e.room_id)
        .execute(tx.conn())
        .await?;
    }
    if let Some(why) = &plan.pause {
        let notice = rules::paused_notice(&e.room_id, why);
        let mut event = EventRecord::attention(&room.host_thread, "", notice, e.now);
        (event.turn_id, event.message_id) = (None, Some(e.id.clone()));
        insert_event(tx, &event).await?;
    }
    Ok(())
}

/// A roster change shows in the room's `updated_at`.
async fn touch_room(tx: &mut Tx, room_id: &str, now: Millis) -> StoreResult<()> {
    sqlx::query("UPDATE rooms SET updated_at = $1 WHERE id = $2")
        .bind(now)
        .bind(room_id)
        .execute(tx.conn())
        .await?;
    Ok(())
}

/// The entry a key made in a room, with its post's hash.
async fn entry_by_key(
    conn: &mut PgConnection,
    room_id: &str,
    scope: &str,
    key: &str,
) -> StoreResult<Option<(String, EntryRecord)>> {
    let sql = format!(
        "SELECT request_hash, {ENTRY_COLUMNS} FROM room_entries WHERE room_id = $1 AND key_scope = $2 AND key = $3"
    );
    let row = sqlx::query(&sql).bind(room_id).bind(scope).bind(key).fetch_optional(conn).await?;
    row.map(|row| Ok((row.try_get("request_hash")?, entry_from(&row)?))).transpose()
}

async fn room_by_id(conn: &mut PgConnection, id: &str) -> StoreResult<Option<RoomRecord>> {
    let sql = format!("SELECT {ROOM_COLUMNS} FROM rooms WHERE id = $1");
    sqlx::query(&sql).bind(id).fetch_optional(conn).await?.as_ref().map(room_from).transpose()
}

async fn members_of(conn: &mut PgConnection, room_id: &str) -> StoreResult<Vec<MemberRecord>> {
    let sql = format!(
        "SELECT {MEMBER_COLUMNS} FROM room_members WHERE room_id = $1 ORDER BY joined, added_at, member_id"
    );
    sqlx::query(&sql).bind(room_id).fetch_all(conn).await?.iter().map(member_from).collect()
}
