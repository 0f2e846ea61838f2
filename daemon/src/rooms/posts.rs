//! Posts to a room of this home — by the owner, by an agent of a member thread, or by a
//! member of another home through its bridge — each one store transaction (see
//! [`crate::store::RoomStore::post_to_room`]), with the outbox entries that carry it to
//! the members of other homes it wakes.

use sha2::{Digest, Sha256};

use super::{Posted, RoomView, Rooms, archived, key_conflict, no_room, not_member};
use crate::caller::Caller;
use crate::error::{Error, Result};
use crate::store::{
    MemberKind, MemberRecord, NewEntry, OutboundEntry, OutboxRecord, PostOutcome, ROOM_MEMBERS_MAX,
    RoomRecord, RoomTag, SourceRef, room_delivery, rules,
};
use crate::sync::uncancelled;
use crate::threads::new_id;
use kiki_proto::limits::{self, ROOM_CONTENT_MAX_CHARS};

impl Rooms {
    /// ThreadSend to a room: by the caller's thread (a member, its communication on), or by
    /// the owner. Durable before it answers; the members it wakes have it queued, an idle
    /// one's turn started.
    #[tracing::instrument(level = "debug", skip_all, fields(room_id = %room_id))]
    pub async fn post(
        &self,
        caller: &Caller,
        room_id: &str,
        content: &str,
        mentions: &[String],
        key: &str,
    ) -> Result<Posted> {
        check_post(content, mentions, key)?;
        let view = self.posting_view(room_id).await?;
        let room = view.room.clone();
        let posted = async {
            let author = match caller.turn() {
                Some(turn) => {
                    let thread = self.admit(turn, &view, "ThreadSend").await?;
                    Some(SourceRef {
                        host_id: String::new(),
                        thread_id: thread.id,
                        workspace_id: thread.workspace_id,
                    })
                }
                None => None,
            };
            self.post_as(author, view, content, mentions, key).await
        }
        .await;
        let scope = caller.turn().map(|c| c.thread_id.as_str()).unwrap_or_default();
        self.or_replay(posted, &room, scope, content, mentions, key).await
    }

    /// A post by a thread of the home `peer` (its bridge grants `send`), attributed to that
    /// home and thread; refused unless the thread is a member.
    #[tracing::instrument(level = "debug", skip_all, fields(room_id = %room_id, peer = %peer))]
    pub async fn post_from_peer(
        &self,
        peer: &str,
        source: SourceRef,
        room_id: &str,
        content: &str,
        mentions: &[String],
        key: &str,
    ) -> Result<Posted> {
        check_post(content, mentions, key)?;
        let view = self.posting_view(room_id).await?;
        let room = view.room.clone();
        let author = SourceRef { host_id: peer.to_string(), ..source };
        let scope = rules::remote_member_id(peer, &author.thread_id);
        let posted = self.post_as(Some(author), view, content, mentions, key).await;
        self.or_replay(posted, &room, &scope, content, mentions, key).await
    }

    /// A refused post whose key made an entry before gets that entry instead, whatever
    /// changed since (the author's switch or membership, the roster, the room archived); a
    /// post accepted (or replayed) by the write is answered as it is.
    async fn or_replay(
        &self,
        posted: Result<Posted>,
        room: &RoomRecord,
        scope: &str,
        content: &str,
        mentions: &[String],
        key: &str,
    ) -> Result<Posted> {
        match posted {
            Err(refused) => self.replay(room, scope, content, mentions, key).await?.ok_or(refused),
            posted => posted,
        }
    }

    /// The entry `key` made for this author's same post (`None` if the key is new or none
    /// was given); a conflict if it made another post.
    async fn replay(
        &self,
        room: &RoomRecord,
        scope: &str,
        content: &str,
        mentions: &[String],
        key: &str,
    ) -> Result<Option<Posted>> {
        if key.is_empty() {
            return Ok(None);
        }
        match self.inner.store.room_entry_by_key(&room.id, scope, key).await? {
            Some((hash, entry)) if hash == post_hash(content, mentions) => {
                Ok(Some(Posted { entry, key: key.to_string(), replayed: true }))
            }
            Some((_, entry)) => Err(key_conflict(&entry.id, &room.id)),
            None => Ok(None),
        }
    }

    async fn post_as(
        &self,
        author: Option<SourceRef>,
        view: RoomView,
        content: &str,
        mentions: &[String],
        key: &str,
    ) -> Result<Posted> {
        let room_id = view.room.id.as_str();
        if view.room.archived {
            return Err(archived(&view.room));
        }
        let mut members = view.members.clone();
        for mention in mentions {
            let Some((_, thread)) = rules::roster_entry(&view.room, &members, mention) else {
                let roster: Vec<&str> = std::iter::once(view.room.host_thread.as_str())
                    .chain(members.iter().map(|m| m.member_id.as_str()))
                    .collect();
                return Err(Error::invalid(
                    "mentions",
                    format!("{mention:?} is not in room {}'s roster ({})", view.room.id, roster.join(", ")),
                ));
            };
            if thread.is_none()
                && let Some(persona) = members.iter_mut().find(|m| m.member_id == *mention)
                && persona.kind == MemberKind::Persona
            {
                persona.thread_id = Some(self.persona_thread(&view.room, persona).await?);
            }
        }
        // Every thread the post may wake gets a claim, so an idle one starts its turn in the
        // post's own commit.
        let may_wake: Vec<String> = match (&author, mentions.is_empty()) {
            (None, true) => vec![view.room.host_thread.clone()],
            _ => mentions.iter().filter_map(|m| rules::roster_entry(&view.room, &members, m)?.1).collect(),
        };
        let mut woken = Vec::with_capacity(may_wake.len());
        for thread in may_wake {
            if let Ok(thread) = self.inner.threads.get("", "", &thread).await {
                woken.push(thread);
            }
        }
        let runner = self.inner.threads.runner();
        let key = if key.is_empty() { new_id("key") } else { key.to_string() };
        let entry_id = new_id("msg");
        let remote =
            self.outbound_entries(&view, &members, mentions, &entry_id, author.as_ref(), content).await?;
        let entry = NewEntry {
            room_id: view.room.id.clone(),
            id: entry_id,
            author: author.clone(),
            content: content.to_string(),
            mentions: mentions.to_vec(),
            // Keys are their author's: a thread of another home has its own.
            key_scope: match &author {
                Some(a) if a.host_id.is_empty() => a.thread_id.clone(),
                Some(a) => rules::remote_member_id(&a.host_id, &a.thread_id),
                None => String::new(),
            },
            key: key.clone(),
            request_hash: post_hash(content, mentions),
            claims: woken.iter().map(|t| (t.id.clone(), runner.claim_for(t))).collect(),
            remote,
            max_agent_wakes: i64::from(self.inner.config.rooms.max_agent_wakes),
            now: self.now(),
        };
        let (store, runner) = (self.inner.store.clone(), runner.clone());
        let outcome = uncancelled(async move {
            let outcome = store.post_to_room(&entry).await?;
            if let PostOutcome::Posted { turns, queued, .. } = &outcome {
                for turn in turns {
                    if let Some(thread) = woken.iter().find(|t| t.id == turn.turn.thread_id) {
                        runner.start_claimed(thread.clone(), turn.clone());
                    }
                }
                for thread in queued {
                    runner.kick(thread);
                }
            }
            Ok(outcome)
        })
        .await?;
        match outcome {
            PostOutcome::Posted { entry, paused, .. } => {
                self.inner.threads.observer().room_post(
                    &entry.room_id,
                    &entry.id,
                    &entry.woke,
                    paused.is_some(),
                );
                Ok(Posted { entry, key, replayed: false })
            }
            PostOutcome::Replayed(entry) => Ok(Posted { entry, key, replayed: true }),
            PostOutcome::KeyConflict { entry_id } => Err(key_conflict(&entry_id, &view.room.id)),
            PostOutcome::RoomGone => Err(no_room(room_id)),
            PostOutcome::Archived => Err(archived(&view.room)),
            PostOutcome::NotMember => Err(not_member(&view.room, "ThreadSend")),
        }
    }

    /// The outbox entries that carry a post to the members of other homes it mentions (see
    /// [`crate::store::room_delivery`]), for those this home has a bridge to.
    async fn outbound_entries(
        &self,
        view: &RoomView,
        members: &[MemberRecord],
        mentions: &[String],
        entry_id: &str,
        author: Option<&SourceRef>,
        content: &str,
    ) -> Result<Vec<(String, OutboxRecord)>> {
        let remote: Vec<&MemberRecord> = members
            .iter()
            .filter(|m| m.kind == MemberKind::Remote && mentions.contains(&m.member_id))
            .collect();
        if remote.is_empty() {
            return Ok(Vec::new());
        }
        let bridges = self.inner.store.bridges().await?;
        let now = self.now();
        // The post's trace: the wakes in other homes join it.
        let trace = crate::observe::traces::traceparent(&tracing::Span::current());
        Ok(remote
            .into_iter()
            .filter_map(|member| {
                let entry = OutboundEntry {
                    tag: RoomTag { room: view.room.id.clone(), entry: entry_id.to_string() },
                    author: author.cloned(),
                };
                let record = room_delivery(
                    &bridges,
                    member.member_id.split_once('/')?,
                    entry,
                    content,
                    now,
                    trace.clone(),
                )?;
                Some((member.member_id.clone(), record))
            })
            .collect())
    }
}

/// A post's own limits, checked before anything is looked up.
fn check_post(content: &str, mentions: &[String], key: &str) -> Result<()> {
    limits::text("content", content, ROOM_CONTENT_MAX_CHARS)?;
    if !key.is_empty() {
        limits::text("idempotency_key", key, limits::KEY_MAX_CHARS)?;
    }
    if mentions.len() > ROOM_MEMBERS_MAX + 1 {
        return Err(Error::invalid(
            "mentions",
            format!("at most {} (a room's host and members), got {}", ROOM_MEMBERS_MAX + 1, mentions.len()),
        ));
    }
    for (i, mention) in mentions.iter().enumerate() {
        if mentions[..i].contains(mention) {
            return Err(Error::invalid("mentions", format!("{mention:?} is named twice")));
        }
    }
    Ok(())
}

/// Identifies a post for its key: the same key must come with the same content and mentions.
fn post_hash(content: &str, mentions: &[String]) -> String {
    let mut hash = Sha256::new();
    for mention in mentions {
        hash.update(mention.as_bytes());
        hash.update([0]);
    }
    hash.update([1]);
    hash.update(content.as_bytes());
    data_encoding::HEXLOWER.encode(&hash.finalize())
}
