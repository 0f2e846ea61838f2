//! Conversions between the daemon's records and `kiki.v1` messages, written once for the
//! two edges that speak protobuf: the gRPC layer (`grpc/`) and the bridge wire codec (this
//! home's answers to a peer are built as the local API's, then translated to the wire's).
//! The daemon's enums (its `words!`) map to the API's here, value by value; the tests check
//! that each prints as the word the daemon spells it with. No service imports this module.

use kiki_proto as pb;
use kiki_proto::Word;

use crate::mailbox::{Progress, Sent, WaitResult};
use crate::observe::workers::{WorkerState, WorkerView};
use crate::rooms::{Posted, RoomPage, RoomView};
use crate::store::{
    BridgeState, CommunicationSetting, Direction, EntryRecord, EventKind, EventRecord, InputKind,
    InputRecord, MemberKind, MessageStatus, OutboxStatus, PartKind, PermissionStatus, Permissions,
    RequestStatus, SourceRef, ThreadRecord, ToolCallRecord, ToolOutcome, TurnStatus, rules,
};
use crate::threads::{Read, TurnView};
use crate::time::rfc3339;
use crate::tools::Approval;

/// A thread as the API shows it; `communication` is whether its peer communication is open
/// now and which switch decides it (see `threads::switches::decide`).
pub fn thread_to_pb(t: &ThreadRecord, host_id: &str, communication: (bool, String)) -> pb::Thread {
    pb::Thread {
        id: t.id.clone(),
        workspace_id: t.workspace_id.clone(),
        cwd: t.cwd.clone(),
        title: t.title.clone(),
        profile: t.profile.clone(),
        created_at: rfc3339(t.created_at),
        updated_at: rfc3339(t.updated_at),
        archived: t.archived,
        enabled: t.enabled,
        state: if t.running { pb::ThreadState::Running } else { pb::ThreadState::Idle } as i32,
        communication: match t.communication {
            CommunicationSetting::Default => pb::Communication::Default,
            CommunicationSetting::On => pb::Communication::On,
            CommunicationSetting::Off => pb::Communication::Off,
        } as i32,
        host_id: host_id.to_string(),
        communication_open: communication.0,
        communication_why: communication.1,
        // Only ThreadRead looks it up (see the thread service).
        agent_session: String::new(),
    }
}

pub fn turn_status_to_pb(s: TurnStatus) -> pb::TurnStatus {
    match s {
        TurnStatus::Running => pb::TurnStatus::Running,
        TurnStatus::Completed => pb::TurnStatus::Completed,
        TurnStatus::Failed => pb::TurnStatus::Failed,
        TurnStatus::Cancelled => pb::TurnStatus::Cancelled,
    }
}

pub fn turn_to_pb(v: TurnView) -> pb::Turn {
    let t = v.turn;
    pb::Turn {
        id: t.id,
        seq: t.seq as u64,
        status: turn_status_to_pb(t.status) as i32,
        input: t.input,
        output: t.output,
        input_truncated: v.input_truncated,
        output_truncated: v.output_truncated,
        content_refs: v
            .content_refs
            .into_iter()
            .map(|(content_ref, field, len)| pb::ContentRef {
                content_ref,
                field: pb::ContentField::from_word(field).unwrap_or_default() as i32,
                utf16_length: len as u64,
            })
            .collect(),
        inputs: t
            .items
            .into_iter()
            .map(|item| pb::TurnInput {
                kind: match item.kind {
                    InputKind::User => pb::InputKind::User,
                    InputKind::Message => pb::InputKind::Message,
                } as i32,
                message_id: item.message_id.unwrap_or_default(),
                source: item.source.map(source_to_pb),
                room: item.room.as_ref().map(|r| r.room.clone()).unwrap_or_default(),
                room_entry: item.room.map(|r| r.entry).unwrap_or_default(),
            })
            .collect(),
        started_at: rfc3339(t.started_at),
        ended_at: t.ended_at.map(rfc3339).unwrap_or_default(),
        error: t.error,
        usage: t.usage.map(|u| pb::TurnUsage {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            cost_usd: u.cost_usd,
        }),
    }
}

fn source_to_pb(s: SourceRef) -> pb::ThreadRef {
    pb::ThreadRef { host_id: s.host_id, workspace_id: s.workspace_id, session_id: s.thread_id }
}

/// A piece of a running turn's progress (ThreadFollow).
pub fn progress_to_pb(progress: Progress) -> pb::TurnProgress {
    match progress {
        Progress::Part { turn_id, part } => pb::TurnProgress {
            turn_id,
            seq: part.seq as u64,
            kind: part_kind_to_pb(part.kind) as i32,
            text: part.text,
            at: rfc3339(part.at),
        },
        Progress::End { turn_id, status } => pb::TurnProgress {
            turn_id,
            seq: 0,
            kind: pb::PartKind::End as i32,
            text: status.as_str().into(),
            at: rfc3339(crate::time::now_ms()),
        },
    }
}

/// A message given to a running turn (ThreadInbox).
pub fn inbox_item_to_pb(input: InputRecord) -> pb::InboxItem {
    pb::InboxItem {
        id: crate::store::inbox_id(&input).unwrap_or_default().to_string(),
        message_id: input.message_id.unwrap_or_default(),
        source: input.source.map(source_to_pb),
        room: input.room.as_ref().map(|r| r.room.clone()).unwrap_or_default(),
        room_entry: input.room.map(|r| r.entry).unwrap_or_default(),
        content: input.content,
        at: rfc3339(input.now),
    }
}

pub fn event_to_pb(e: EventRecord) -> pb::Event {
    pb::Event {
        seq: e.seq as u64,
        kind: match e.kind {
            EventKind::Terminal => pb::EventKind::Terminal,
            EventKind::Attention => pb::EventKind::Attention,
            EventKind::Lifecycle => pb::EventKind::Lifecycle,
            EventKind::Undeliverable => pb::EventKind::Undeliverable,
            EventKind::Task => pb::EventKind::Task,
        } as i32,
        at: rfc3339(e.at),
        turn_id: e.turn_id.unwrap_or_default(),
        turn_status: e.turn_status.map(turn_status_to_pb).unwrap_or(pb::TurnStatus::Unspecified) as i32,
        reason: e.reason,
        lifecycle: e.lifecycle.and_then(|l| pb::Lifecycle::from_word(l.as_str())).unwrap_or_default() as i32,
        message_id: e.message_id.unwrap_or_default(),
        request_id: e.request_id.unwrap_or_default(),
    }
}

/// A peer's event, as this home keeps one; `None` for a kind this home does not know (a
/// newer peer's), which it cannot show.
pub fn event_from_pb(e: pb::Event, thread_id: &str) -> Option<EventRecord> {
    let kind = match e.kind() {
        pb::EventKind::Terminal => EventKind::Terminal,
        pb::EventKind::Attention => EventKind::Attention,
        pb::EventKind::Lifecycle => EventKind::Lifecycle,
        pb::EventKind::Undeliverable => EventKind::Undeliverable,
        pb::EventKind::Task => EventKind::Task,
        pb::EventKind::Unspecified => return None,
    };
    let turn_status = match e.turn_status() {
        pb::TurnStatus::Unspecified => None,
        pb::TurnStatus::Running => Some(TurnStatus::Running),
        pb::TurnStatus::Completed => Some(TurnStatus::Completed),
        pb::TurnStatus::Failed => Some(TurnStatus::Failed),
        pb::TurnStatus::Cancelled => Some(TurnStatus::Cancelled),
    };
    let at = humantime::parse_rfc3339(&e.at)
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis() as i64);
    let some = |text: String| (!text.is_empty()).then_some(text);
    let lifecycle = crate::store::Lifecycle::parse(&e.lifecycle().word());
    Some(EventRecord {
        seq: e.seq as i64,
        thread_id: thread_id.to_string(),
        kind,
        turn_id: some(e.turn_id),
        turn_status,
        reason: e.reason,
        lifecycle,
        message_id: some(e.message_id),
        request_id: some(e.request_id),
        at,
    })
}

/// A peer's answer for one waited target, as this home's own.
pub fn wait_result_from_pb(r: pb::WaitResult) -> WaitResult {
    let target = r.target.unwrap_or_default();
    let events = r.events.into_iter().filter_map(|e| event_from_pb(e, &target.session_id)).collect();
    WaitResult { target, home_id: r.home_id, events, cursor: r.cursor }
}

pub fn finding_to_pb(f: crate::doctor::Finding) -> pb::DoctorFinding {
    pb::DoctorFinding { check: f.check.to_string(), ok: f.ok, message: f.message, fix: f.fix }
}

pub fn sent_to_pb(sent: Sent) -> pb::ThreadSendResponse {
    pb::ThreadSendResponse {
        message_id: sent.message_id,
        status: match sent.status {
            MessageStatus::Delivered => pb::SendStatus::Delivered,
            MessageStatus::Pending => pb::SendStatus::Pending,
            MessageStatus::Undeliverable => pb::SendStatus::Undeliverable,
        } as i32,
        replayed: sent.replayed,
        reason: sent.reason,
        ..Default::default()
    }
}

pub fn wait_result_to_pb(r: WaitResult) -> pb::WaitResult {
    pb::WaitResult {
        target: Some(r.target),
        home_id: r.home_id,
        events: r.events.into_iter().map(event_to_pb).collect(),
        cursor: r.cursor,
    }
}

/// A ThreadRead answer for a thread of this home (local callers and bridge peers alike);
/// `host_id` is how the thread's home is named to the caller ("" for this home).
pub fn read_to_pb(read: Read, host_id: &str, communication: (bool, String)) -> pb::ThreadReadResponse {
    match read {
        Read::Segment(s) => pb::ThreadReadResponse {
            turns: Vec::new(),
            next_cursor: None,
            thread: Some(thread_to_pb(&s.thread, host_id, communication)),
            coverage: None,
            tool_calls: Vec::new(),
            segment: Some(pb::ContentSegment {
                content_ref: s.content_ref,
                text: s.text,
                offset: s.offset as u64,
                utf16_length: s.total as u64,
                next: s.next,
            }),
        },
        Read::Turns(page) => {
            let turns: Vec<pb::Turn> = page.turns.into_iter().map(turn_to_pb).collect();
            let last_seq = turns.last().map_or(0, |t| t.seq);
            let coverage = pb::Coverage {
                // The thread was read just before its turns: a turn that ended in between is
                // on the page, and counts.
                turns_total: ((page.thread.turn_count - i64::from(page.thread.running)).max(0) as u64)
                    .max(last_seq),
                first_seq: turns.first().map_or(0, |t| t.seq),
                last_seq,
                complete: page.next_cursor.is_none(),
            };
            pb::ThreadReadResponse {
                thread: Some(thread_to_pb(&page.thread, host_id, communication)),
                turns,
                next_cursor: page.next_cursor,
                segment: None,
                coverage: Some(coverage),
                tool_calls: Vec::new(),
            }
        }
    }
}

/// The roster as the API shows it: the host, then the members. A persona is named by its
/// id until its thread exists, then by its thread (its id still works in mentions).
pub fn roster_to_pb(view: &RoomView) -> Vec<pb::RoomMember> {
    let host = pb::RoomMember {
        id: view.room.host_thread.clone(),
        role: pb::MemberRole::Host as i32,
        kind: member_kind_to_pb(MemberKind::Thread) as i32,
        thread_id: view.room.host_thread.clone(),
        profile: String::new(),
    };
    let members = view.members.iter().map(|m| pb::RoomMember {
        id: match (m.kind, &m.thread_id) {
            (MemberKind::Persona, Some(thread)) => thread.clone(),
            _ => m.member_id.clone(),
        },
        role: pb::MemberRole::Member as i32,
        kind: member_kind_to_pb(m.kind) as i32,
        thread_id: m.thread_id.clone().unwrap_or_default(),
        profile: m.profile.clone(),
    });
    std::iter::once(host).chain(members).collect()
}

pub fn room_to_pb(view: &RoomView) -> pb::Room {
    let room = &view.room;
    pb::Room {
        id: room.id.clone(),
        name: room.name.clone(),
        host: room.host_thread.clone(),
        members: roster_to_pb(view),
        paused: room.paused,
        paused_reason: room.paused_reason.clone(),
        archived: room.archived,
        created_at: rfc3339(room.created_at),
        entries: room.last_seq as u64,
    }
}

pub fn entry_to_pb(e: EntryRecord) -> pb::RoomEntry {
    pb::RoomEntry {
        id: e.id,
        at: rfc3339(e.at),
        author: match e.author {
            Some(a) if a.host_id.is_empty() => a.thread_id,
            Some(a) => format!("{}/{}", a.host_id, a.thread_id),
            None => String::new(),
        },
        content: e.content,
        mentions: e.mentions,
        seq: e.seq as u64,
        deliveries: e
            .woke
            .iter()
            .filter(|member| rules::is_remote_member(member))
            .map(|member| match e.deliveries.iter().find(|d| d.member == *member) {
                Some(d) => pb::RoomDelivery {
                    member: member.clone(),
                    status: delivery_status_to_pb(d.status) as i32,
                    reason: d.reason.clone(),
                },
                None => pb::RoomDelivery {
                    member: member.clone(),
                    status: pb::DeliveryStatus::Undeliverable as i32,
                    reason: "this home had no bridge to its home when the entry was posted".into(),
                },
            })
            .collect(),
        woke: e.woke,
    }
}

pub fn room_page_to_pb(page: RoomPage) -> pb::RoomReadResponse {
    let room = &page.view.room;
    pb::RoomReadResponse {
        room: room.id.clone(),
        host: room.host_thread.clone(),
        members: roster_to_pb(&page.view),
        paused: room.paused,
        archived: room.archived,
        name: room.name.clone(),
        paused_reason: room.paused_reason.clone(),
        entries: page.entries.into_iter().map(entry_to_pb).collect(),
        next_cursor: Some(page.next_cursor),
    }
}

/// A room post's answer: `delivered` (the log has it), with its place and whom it woke.
pub fn posted_to_pb(posted: Posted) -> pb::ThreadSendResponse {
    pb::ThreadSendResponse {
        message_id: posted.entry.id,
        status: pb::SendStatus::Delivered as i32,
        replayed: posted.replayed,
        reason: String::new(),
        idempotency_key: posted.key,
        room_seq: posted.entry.seq as u64,
        woke: posted.entry.woke,
    }
}

pub fn direction_to_pb(d: Direction) -> pb::Direction {
    match d {
        Direction::Inbound => pb::Direction::Inbound,
        Direction::Outbound => pb::Direction::Outbound,
    }
}

pub fn bridge_state_to_pb(s: BridgeState) -> pb::BridgeState {
    match s {
        BridgeState::Requested => pb::BridgeState::Requested,
        BridgeState::Active => pb::BridgeState::Active,
        BridgeState::Disabled => pb::BridgeState::Disabled,
        BridgeState::Rejected => pb::BridgeState::Rejected,
        BridgeState::Expired => pb::BridgeState::Expired,
        BridgeState::Revoked => pb::BridgeState::Revoked,
    }
}

/// A set of permissions, in its order (read, send, wake, wait).
pub fn permissions_to_pb(set: Permissions) -> Vec<i32> {
    set.iter()
        .map(|p| match p {
            crate::store::Permission::Read => pb::Permission::Read,
            crate::store::Permission::Send => pb::Permission::Send,
            crate::store::Permission::Wake => pb::Permission::Wake,
            crate::store::Permission::Wait => pb::Permission::Wait,
        } as i32)
        .collect()
}

pub fn request_status_to_pb(s: RequestStatus) -> pb::BridgeRequestStatus {
    match s {
        RequestStatus::Pending => pb::BridgeRequestStatus::Pending,
        RequestStatus::Approved => pb::BridgeRequestStatus::Approved,
        RequestStatus::Rejected => pb::BridgeRequestStatus::Rejected,
        RequestStatus::Expired => pb::BridgeRequestStatus::Expired,
        RequestStatus::Replaced => pb::BridgeRequestStatus::Replaced,
        RequestStatus::Withdrawn => pb::BridgeRequestStatus::Withdrawn,
    }
}

/// How a bridged message stands (a receipt, a room entry's delivery).
pub fn delivery_status_to_pb(s: OutboxStatus) -> pb::DeliveryStatus {
    match s {
        OutboxStatus::Pending => pb::DeliveryStatus::Pending,
        OutboxStatus::Accepted => pb::DeliveryStatus::Accepted,
        OutboxStatus::Delivered => pb::DeliveryStatus::Delivered,
        OutboxStatus::Rejected => pb::DeliveryStatus::Rejected,
        OutboxStatus::Expired => pb::DeliveryStatus::Expired,
    }
}

pub fn permission_status_to_pb(s: PermissionStatus) -> pb::PermissionStatus {
    match s {
        PermissionStatus::Pending => pb::PermissionStatus::Pending,
        PermissionStatus::Allowed => pb::PermissionStatus::Allowed,
        PermissionStatus::Denied => pb::PermissionStatus::Denied,
        PermissionStatus::Expired => pb::PermissionStatus::Expired,
    }
}

fn member_kind_to_pb(k: MemberKind) -> pb::MemberKind {
    match k {
        MemberKind::Thread => pb::MemberKind::Thread,
        MemberKind::Persona => pb::MemberKind::Persona,
        MemberKind::Remote => pb::MemberKind::Remote,
    }
}

fn part_kind_to_pb(k: PartKind) -> pb::PartKind {
    match k {
        PartKind::Text => pb::PartKind::Text,
        PartKind::Tool => pb::PartKind::Tool,
        PartKind::ToolResult => pb::PartKind::ToolResult,
    }
}

/// A cross-home send as its source's receipts show it: an entry of the outbox of the bridge
/// called `alias`.
pub fn outbound_receipt_to_pb(alias: &str, e: crate::store::OutboxRecord) -> pb::Receipt {
    pb::Receipt {
        target: format!("{alias}/{}", e.target_session),
        message_id: e.id,
        direction: direction_to_pb(crate::store::Direction::Outbound) as i32,
        idempotency_key: e.key,
        status: delivery_status_to_pb(e.status) as i32,
        reason: e.reason,
        attempts: e.attempts as u32,
        at: rfc3339(e.updated_at),
    }
}

/// A bridged send as its target's receipts show it.
pub fn inbound_receipt_to_pb(r: crate::store::ReceiptRecord) -> pb::Receipt {
    pb::Receipt {
        message_id: r.message_id,
        direction: direction_to_pb(crate::store::Direction::Inbound) as i32,
        target: r.target,
        idempotency_key: r.key,
        status: delivery_status_to_pb(r.status) as i32,
        reason: r.reason,
        attempts: 1,
        at: rfc3339(r.at),
    }
}

/// An event of the home's feed, as `kiki events` shows it.
pub fn feed_event_to_pb(e: &crate::observe::feed::FeedEvent) -> pb::HomeEvent {
    use crate::observe::feed::FeedKind;
    let kind = match e.kind {
        FeedKind::Send => pb::HomeEventKind::Send,
        FeedKind::Refusal => pb::HomeEventKind::Refusal,
        FeedKind::TurnStarted => pb::HomeEventKind::TurnStarted,
        FeedKind::TurnEnded => pb::HomeEventKind::TurnEnded,
        FeedKind::PermissionRequest => pb::HomeEventKind::PermissionRequest,
        FeedKind::RoomPost => pb::HomeEventKind::RoomPost,
        FeedKind::Outbox => pb::HomeEventKind::Outbox,
        FeedKind::Bridge => pb::HomeEventKind::Bridge,
    };
    pb::HomeEvent {
        seq: e.seq,
        at: crate::time::rfc3339(e.at),
        kind: kind as i32,
        thread_id: e.thread_id.clone(),
        room_id: e.room_id.clone(),
        peer_home_id: e.peer_home_id.clone(),
        message_id: e.message_id.clone(),
        turn_id: e.turn_id.clone(),
        summary: e.summary.clone(),
    }
}

/// A session-tool call as ThreadRead shows it.
pub fn tool_call_to_pb(c: ToolCallRecord) -> pb::ToolCallRecord {
    pb::ToolCallRecord {
        seq: c.seq as u64,
        turn_id: c.turn_id.unwrap_or_default(),
        name: c.name,
        arguments: c.arguments,
        outcome: tool_outcome_to_pb(c.outcome) as i32,
        result: c.result,
        duration_ms: c.duration_ms.max(0) as u64,
        at: rfc3339(c.at),
    }
}

pub fn tool_outcome_to_pb(outcome: ToolOutcome) -> pb::ToolOutcome {
    match outcome {
        ToolOutcome::Ok => pb::ToolOutcome::Ok,
        ToolOutcome::Error => pb::ToolOutcome::Error,
        ToolOutcome::Denied => pb::ToolOutcome::Denied,
    }
}

pub fn approval_to_pb(approval: Approval) -> pb::Approval {
    match approval {
        Approval::Never => pb::Approval::Never,
        Approval::OutsideWorkspace => pb::Approval::OutsideWorkspace,
        Approval::Always => pb::Approval::Always,
    }
}

/// A background worker as `kiki status --workers` shows it.
pub fn worker_to_pb(w: WorkerView) -> pb::Worker {
    pb::Worker {
        name: w.name.to_string(),
        state: worker_state_to_pb(w.state) as i32,
        rounds: w.rounds,
        last_error_at: w.last_error.as_ref().map(|(at, _)| rfc3339(*at)).unwrap_or_default(),
        last_error: w.last_error.map(|(_, e)| e).unwrap_or_default(),
    }
}

fn worker_state_to_pb(s: WorkerState) -> pb::WorkerState {
    match s {
        WorkerState::Idle => pb::WorkerState::Idle,
        WorkerState::Busy => pb::WorkerState::Busy,
        WorkerState::Stopped => pb::WorkerState::Stopped,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Permission;

    /// `kiki --json` printed the daemon's own words for these before they were enums: each
    /// value still prints as that word.
    #[test]
    fn each_value_prints_as_the_word_the_daemon_spells_it_with() {
        for d in Direction::ALL {
            assert_eq!(direction_to_pb(*d).word(), d.as_str());
        }
        for s in BridgeState::ALL {
            assert_eq!(bridge_state_to_pb(*s).word(), s.as_str());
        }
        for p in Permission::ALL {
            let one: Permissions = [*p].into_iter().collect();
            assert_eq!(kiki_proto::json::joined::<pb::Permission>(&permissions_to_pb(one)), p.as_str());
        }
        for s in RequestStatus::ALL {
            assert_eq!(request_status_to_pb(*s).word(), s.as_str());
        }
        for s in OutboxStatus::ALL {
            assert_eq!(delivery_status_to_pb(*s).word(), s.as_str());
        }
        for s in PermissionStatus::ALL {
            assert_eq!(permission_status_to_pb(*s).word(), s.as_str());
        }
        for k in MemberKind::ALL {
            assert_eq!(member_kind_to_pb(*k).word(), k.as_str());
        }
        for k in PartKind::ALL {
            assert_eq!(part_kind_to_pb(*k).word(), k.as_str());
        }
        for a in Approval::ALL {
            assert_eq!(approval_to_pb(*a).word(), a.as_str());
        }
        for s in WorkerState::ALL {
            assert_eq!(worker_state_to_pb(*s).word(), s.as_str());
        }
        // Words spelled where they are made.
        assert_eq!(pb::DeliveryStatus::Undeliverable.word(), "undeliverable");
        assert_eq!(pb::PartKind::End.word(), "end");
        assert_eq!(
            (pb::MemberRole::Host.word(), pb::MemberRole::Member.word()),
            ("host".into(), "member".into())
        );
        for field in ["input", "output"] {
            assert_eq!(pb::ContentField::from_word(field).map(|f| f.word()).as_deref(), Some(field));
        }
        for change in crate::store::Lifecycle::ALL {
            let word = change.as_str();
            assert_eq!(pb::Lifecycle::from_word(word).map(|l| l.word()).as_deref(), Some(word));
        }
    }
}
