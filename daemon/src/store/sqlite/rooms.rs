//! Rooms in SQLite: the room, its roster and its log, and posts written in one transaction
//! with the inputs (or turns) of the members they wake.

use async_trait::async_trait;

use super::*;

#[async_trait]
impl RoomStore for SqliteStore {
    async fn create_room(&self, room: &RoomRecord) -> StoreResult<()> {
        let r = room.clone();
        self.db
            .write(move |conn| {
                run(
                    conn,
                    "INSERT INTO rooms (id, name, host_thread, created_at, updated_at) VALUES (?, ?, ?, ?, ?)",
                    params![r.id, r.name, r.host_thread, r.created_at, r.updated_at],
                )?;
                Ok(())
            })
            .await
    }

    async fn room(&self, id: &str) -> StoreResult<Option<RoomRecord>> {
        let id = id.to_string();
        self.db.lookup(move |conn| room_by_id(conn, &id)).await
    }

    async fn list_rooms(&self, before_seq: Option<i64>, limit: u32) -> StoreResult<Vec<RoomRecord>> {
        let before = before_seq.unwrap_or(i64::MAX);
        self.db
            .read(move |conn| {
                page(
                    conn,
                    &format!("SELECT {ROOM_COLUMNS} FROM rooms WHERE seq < ? ORDER BY seq DESC"),
                    [before],
                    limit,
                    |row| room_from(row),
                )
            })
            .await
    }

    async fn room_members(&self, room_id: &str) -> StoreResult<Vec<MemberRecord>> {
        let room_id = room_id.to_string();
        self.db.lookup(move |conn| members_of(conn, &room_id)).await
    }

    async fn add_member(&self, room_id: &str, member: &MemberRecord) -> StoreResult<AddOutcome> {
        let (room_id, m) = (room_id.to_string(), member.clone());
        self.db
            .write(move |conn| {
                let Some(room) = room_by_id(conn, &room_id)? else { return Ok(AddOutcome::RoomGone) };
                if room.archived {
                    return Ok(AddOutcome::Archived);
                }
                let members = members_of(conn, &room_id)?;
                let joined = |id: &str| rules::roster_entry(&room, &members, id).is_some();
                if joined(&m.member_id) || m.thread_id.as_deref().is_some_and(joined) {
                    return Ok(AddOutcome::AlreadyMember);
                }
                if members.len() >= ROOM_MEMBERS_MAX {
                    return Ok(AddOutcome::Full);
                }
                run(
                    conn,
                    &format!(
                        "INSERT INTO room_members ({MEMBER_COLUMNS}, room_id, joined)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7,
                                 (SELECT COALESCE(MAX(joined), 0) + 1 FROM room_members WHERE room_id = ?7))"
                    ),
                    params![
                        m.member_id,
                        m.kind.as_str(),
                        m.thread_id,
                        m.profile,
                        m.instructions,
                        m.added_at,
                        room_id
                    ],
                )?;
                run(conn, "UPDATE rooms SET updated_at = ? WHERE id = ?", params![m.added_at, room_id])?;
                Ok(AddOutcome::Added)
            })
            .await
    }

    async fn remove_member(&self, room_id: &str, member_id: &str, now: Millis) -> StoreResult<bool> {
        let (room_id, member_id) = (room_id.to_string(), member_id.to_string());
        self.db
            .write(move |conn| {
                let removed = run(
                    conn,
                    "DELETE FROM room_members WHERE room_id = ? AND (member_id = ? OR thread_id = ?)",
                    params![room_id, member_id, member_id],
                )?;
                if removed > 0 {
                    run(conn, "UPDATE rooms SET updated_at = ? WHERE id = ?", params![now, room_id])?;
                }
                Ok(removed > 0)
            })
            .await
    }

    async fn set_persona_thread(&self, room_id: &str, persona: &str, thread_id: &str) -> StoreResult<String> {
        let (room_id, persona, thread_id) = (room_id.to_string(), persona.to_string(), thread_id.to_string());
        self.db
            .write(move |conn| {
                run(
                    conn,
                    "UPDATE room_members SET thread_id = ?
                     WHERE room_id = ? AND member_id = ? AND kind = ? AND thread_id IS NULL",
                    params![thread_id, room_id, persona, MemberKind::Persona],
                )?;
                let now = first(
                    conn,
                    "SELECT thread_id FROM room_members WHERE room_id = ? AND member_id = ?",
                    params![room_id, persona],
                    |row| Ok(row.get::<_, Option<String>>(0)?),
                )?;
                now.flatten()
                    .ok_or_else(|| StoreError::Conflict(format!("{persona} is not a persona of {room_id}")))
            })
            .await
    }

    async fn change_room(
        &self,
        room_id: &str,
        change: RoomChange,
        reason: &str,
        now: Millis,
    ) -> StoreResult<Option<(RoomRecord, bool)>> {
        let (room_id, reason) = (room_id.to_string(), reason.to_string());
        self.db
            .write(move |conn| {
                let Some(room) = room_by_id(conn, &room_id)? else { return Ok(None) };
                let changed = !room.archived
                    && match change {
                        RoomChange::Pause => !room.paused,
                        RoomChange::Resume => room.paused,
                        RoomChange::Archive => true,
                    };
                if changed {
                    let sql = match change {
                        RoomChange::Pause => "UPDATE rooms SET paused = 1, paused_reason = ?, updated_at = ? WHERE id = ?",
                        RoomChange::Resume => {
                            "UPDATE rooms SET paused = 0, paused_reason = ?, agent_wakes = 0, updated_at = ? WHERE id = ?"
                        }
                        RoomChange::Archive => "UPDATE rooms SET archived = 1, paused_reason = ?, updated_at = ? WHERE id = ?",
                    };
                    let reason = if change == RoomChange::Pause { reason.as_str() } else { "" };
                    run(conn, sql, params![reason, now, room_id])?;
                }
                Ok(room_by_id(conn, &room_id)?.map(|room| (room, changed)))
            })
            .await
    }

    async fn post_to_room(&self, entry: &NewEntry) -> StoreResult<PostOutcome> {
        // Before the write: from then on a probe for their keys reads the outbox.
        for (_, outbound) in &entry.remote {
            self.outbox_keys.add(&outbound.key_scope, &outbound.key);
        }
        let (e, clock) = (entry.clone(), self.clock.clone());
        self.db.write(move |conn| post(conn, &e, &clock)).await
    }

    async fn room_entry_by_key(
        &self,
        room_id: &str,
        key_scope: &str,
        key: &str,
    ) -> StoreResult<Option<(String, EntryRecord)>> {
        let (room_id, key_scope, key) = (room_id.to_string(), key_scope.to_string(), key.to_string());
        self.db.read(move |conn| entry_by_key(conn, &room_id, &key_scope, &key)).await
    }

    async fn room_entries(&self, room_id: &str, after_seq: i64, limit: u32) -> StoreResult<Vec<EntryRecord>> {
        let room_id = room_id.to_string();
        self.db
            .read(move |conn| {
                page(
                    conn,
                    &format!(
                        "SELECT {ENTRY_COLUMNS} FROM room_entries WHERE room_id = ? AND seq > ? ORDER BY seq"
                    ),
                    params![room_id, after_seq],
                    limit,
                    |row| entry_from(row),
                )
            })
            .await
    }

    async fn entry_deliveries(&self, entry_id: &str) -> StoreResult<Vec<EntryDelivery>> {
        let entry_id = entry_id.to_string();
        self.db
            .read(move |conn| {
                all(
                    conn,
                    &format!(
                        "SELECT {DELIVERY_COLUMNS} FROM outbox WHERE room_entry = ? ORDER BY created_at, id"
                    ),
                    [&entry_id],
                    |row| delivery_from(row),
                )
            })
            .await
    }

    async fn room_home(&self, room_id: &str) -> StoreResult<Option<String>> {
        let room_id = room_id.to_string();
        self.db
            .read(move |conn| {
                first(conn, "SELECT home_id FROM remote_rooms WHERE room_id = ?", [&room_id], |row| {
                    Ok(row.get::<_, String>(0)?)
                })
            })
            .await
    }

    async fn bind_room(&self, room_id: &str, home_id: &str, now: Millis) -> StoreResult<String> {
        let (room_id, home_id) = (room_id.to_string(), home_id.to_string());
        self.db
            .write(move |conn| {
                run(
                    conn,
                    "INSERT INTO remote_rooms (room_id, home_id, updated_at) VALUES (?, ?, ?)
                     ON CONFLICT (room_id) DO NOTHING",
                    params![room_id, home_id, now],
                )?;
                let bound =
                    first(conn, "SELECT home_id FROM remote_rooms WHERE room_id = ?", [&room_id], |row| {
                        Ok(row.get::<_, String>(0)?)
                    })?;
                Ok(bound.unwrap_or_else(|| home_id.clone()))
            })
            .await
    }

    async fn rooms_of_thread(&self, thread_id: &str) -> StoreResult<Vec<String>> {
        let thread_id = thread_id.to_string();
        self.db
            .read(move |conn| {
                all(
                    conn,
                    "SELECT id FROM rooms WHERE host_thread = ?1
                     UNION SELECT room_id FROM room_members WHERE thread_id = ?1",
                    [&thread_id],
                    |row| Ok(row.get::<_, String>(0)?),
                )
            })
            .await
    }
}

/// A post, as [`RoomStore::post_to_room`] describes it.
fn post(conn: &Connection, e: &NewEntry, clock: &Clock) -> StoreResult<PostOutcome> {
    let Some(room) = room_by_id(conn, &e.room_id)? else { return Ok(PostOutcome::RoomGone) };
    // The key decides first, whatever the room is now.
    if let Some((hash, entry)) = entry_by_key(conn, &e.room_id, &e.key_scope, &e.key)? {
        return Ok(rules::post_by_key(&e.request_hash, &hash, entry));
    }
    let members = members_of(conn, &e.room_id)?;
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
                    super::outbox::insert_outbox(conn, outbound)?;
                }
                woke.push(member.clone());
                continue;
            }
            rules::Woken::Thread { thread, .. } => thread,
        };
        // A thread archived meanwhile is skipped: the entry stays in the log.
        let Some(woken) = wake_member(conn, e, thread, woke.len(), clock)? else { continue };
        if !woken.taken {
            queued.push(thread.clone());
        }
        turns.extend(woken.turn);
        // As the roster shows it: a persona that has its thread by its thread's id.
        woke.push(thread.clone());
    }
    let entry = rules::entry(e, &room, woke);
    insert_entry(conn, &entry, e)?;
    record_loop_guard(conn, &room, e, &plan)?;
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
fn wake_member(
    conn: &Connection,
    e: &NewEntry,
    thread: &str,
    nth: usize,
    clock: &Clock,
) -> StoreResult<Option<Woken>> {
    let running =
        first(conn, "SELECT running FROM threads WHERE id = ? AND archived = 0", [thread], |row| {
            Ok(row.get::<_, bool>(0)?)
        })?;
    let Some(running) = running else { return Ok(None) };
    let input = rules::entry_input(e, nth);
    // A busy thread queues it without a claim.
    let claim = e.claims.iter().find(|(t, _)| t == thread).map(|(_, claim)| claim);
    let turn = match claim.filter(|_| !running) {
        Some(claim) => {
            let arriving = NewInput { content: e.content.clone(), ..input.clone() };
            claim_turn(conn, thread, claim, e.now, Some(arriving), clock)?
        }
        None => None,
    };
    let taken_by = rules::taken_by(turn.as_ref(), &input.id);
    insert_input(conn, thread, &input, true, taken_by.as_deref())?;
    Ok(Some(Woken { turn, taken: taken_by.is_some() }))
}

/// Writes the entry to its room's log, with its key.
fn insert_entry(conn: &Connection, entry: &EntryRecord, e: &NewEntry) -> StoreResult<()> {
    let (author_host, author) =
        entry.author.as_ref().map_or(("", ""), |a| (a.host_id.as_str(), a.thread_id.as_str()));
    run(
        conn,
        "INSERT INTO room_entries (room_id, seq, id, author_host, author, content, mentions, woke,
                                   key_scope, key, request_hash, at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        params![
            entry.room_id,
            entry.seq,
            entry.id,
            author_host,
            author,
            entry.content,
            entry.mentions.join(" "),
            entry.woke.join(" "),
            e.key_scope,
            e.key,
            e.request_hash,
            entry.at
        ],
    )
    .map(drop)
}

/// The loop guard's count after the post, and the room paused (with an `attention` event
/// on its host) if the post tripped it. The room's row changes only with the count or a
/// pause.
fn record_loop_guard(
    conn: &Connection,
    room: &RoomRecord,
    e: &NewEntry,
    plan: &rules::PostPlan,
) -> StoreResult<()> {
    if plan.agent_wakes != room.agent_wakes || plan.pause.is_some() {
        run(
            conn,
            "UPDATE rooms SET agent_wakes = ?, updated_at = ?,
                              paused = paused OR ?3, paused_reason = CASE WHEN ?3 THEN ?4 ELSE paused_reason END
             WHERE id = ?5",
            params![plan.agent_wakes, e.now, plan.pause.is_some(), plan.pause.as_deref().unwrap_or(""), e.room_id],
        )?;
    }
    if let Some(why) = &plan.pause {
        let notice = rules::paused_notice(&e.room_id, why);
        let mut event = EventRecord::attention(&room.host_thread, "", notice, e.now);
        (event.turn_id, event.message_id) = (None, Some(e.id.clone()));
        insert_event(conn, &event)?;
    }
    Ok(())
}

/// The entry a key made in a room, with its post's hash.
fn entry_by_key(
    conn: &Connection,
    room_id: &str,
    scope: &str,
    key: &str,
) -> StoreResult<Option<(String, EntryRecord)>> {
    first(
        conn,
        &format!(
            "SELECT request_hash, {ENTRY_COLUMNS} FROM room_entries WHERE room_id = ? AND key_scope = ? AND key = ?"
        ),
        params![room_id, scope, key],
        |row| Ok((row.get::<_, String>("request_hash")?, entry_from(row)?)),
    )
}

fn room_by_id(conn: &Connection, id: &str) -> StoreResult<Option<RoomRecord>> {
    first(conn, &format!("SELECT {ROOM_COLUMNS} FROM rooms WHERE id = ?"), [id], |row| room_from(row))
}

fn members_of(conn: &Connection, room_id: &str) -> StoreResult<Vec<MemberRecord>> {
    all(
        conn,
        &format!(
            "SELECT {MEMBER_COLUMNS} FROM room_members WHERE room_id = ? ORDER BY joined, added_at, member_id"
        ),
        [room_id],
        |row| member_from(row),
    )
}
