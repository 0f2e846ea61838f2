//! The messages that cross between homes, translated between the local API (`kiki.v1`, what
//! this home's callers see) and the wire (`kiki.bridge.v1`). A peer's answer becomes the
//! local API's as it arrives; this home's answer to a peer becomes the wire's as it leaves.
//!
//! Each pair is declared once, with how each field crosses. Both messages are spelled out in
//! full (no `..`), so a field added to either package does not compile until it is given its
//! way across — or a translation of its own, where the two have come apart.

use kiki_proto as pb;
use kiki_proto::Word;
use kiki_proto::bridge::v1 as wire;

/// A message or enum of the local API and its counterpart on the wire. A message's fields
/// that are this home's own (`+ local { … }`) do not cross: left out going out, empty coming in.
pub(in crate::bridges) trait Mirror: Sized {
    type Wire;
    fn to_wire(self) -> Self::Wire;
    fn from_wire(wire: Self::Wire) -> Self;
}

/// An enum field on its way to the wire: a value this home does not know keeps its number.
fn enum_to_wire<E>(value: i32) -> i32
where
    E: Mirror + TryFrom<i32>,
    E::Wire: Into<i32>,
{
    E::try_from(value).map_or(value, |e| e.to_wire().into())
}

/// An enum field from the wire: a value this home does not know (a newer peer's) keeps its
/// number.
fn enum_from_wire<E>(value: i32) -> i32
where
    E: Mirror + Into<i32>,
    E::Wire: TryFrom<i32>,
{
    E::Wire::try_from(value).map_or(value, |w| E::from_wire(w).into())
}

/// An enum field of the local API on its way to the wire, where it is a word.
fn word_to_wire<E: Word + TryFrom<i32>>(value: i32) -> String {
    E::try_from(value).map(|e| e.word()).unwrap_or_default()
}

/// A word from the wire as the local API's enum: unspecified for a word this home does not
/// know (a newer peer's) or an empty one.
fn word_from_wire<E: Word + Into<i32>>(word: &str) -> i32 {
    E::from_word(word).map_or(0, Into::into)
}

/// `pb::Name = wire::Name { field: how, … }`, where `how` is `same` (the value as it is),
/// `one` (an optional message), `many` (a repeated message), an enum's name (an enum on both
/// sides), or `(word Enum)` (an enum of the local API that is a word on the wire).
macro_rules! mirror {
    (@to (word $enum:ident) $f:ident) => { word_to_wire::<pb::$enum>($f) };
    (@from (word $enum:ident) $f:ident) => { word_from_wire::<pb::$enum>(&$f) };
    (@to same $f:ident) => { $f };
    (@from same $f:ident) => { $f };
    (@to one $f:ident) => { $f.map(Mirror::to_wire) };
    (@from one $f:ident) => { $f.map(Mirror::from_wire) };
    (@to many $f:ident) => { $f.into_iter().map(Mirror::to_wire).collect() };
    (@from many $f:ident) => { $f.into_iter().map(Mirror::from_wire).collect() };
    (@to $enum:ident $f:ident) => { enum_to_wire::<pb::$enum>($f) };
    (@from $enum:ident $f:ident) => { enum_from_wire::<pb::$enum>($f) };
    ($($local:ident = $wire:ident { $($field:ident: $how:tt),* $(,)? } $(+ local { $($only:ident),* })?)*) => {$(
        impl Mirror for pb::$local {
            type Wire = wire::$wire;
            fn to_wire(self) -> wire::$wire {
                let pb::$local { $($field,)* $($($only: _,)*)? } = self;
                wire::$wire { $($field: mirror!(@to $how $field)),* }
            }
            fn from_wire(w: wire::$wire) -> Self {
                let wire::$wire { $($field),* } = w;
                pb::$local { $($field: mirror!(@from $how $field),)* $($($only: Default::default(),)*)? }
            }
        }
    )*};
}

/// `Name { Value, … }`: the same values on both sides.
macro_rules! mirror_enum {
    ($($name:ident { $($value:ident),* $(,)? })*) => {$(
        impl Mirror for pb::$name {
            type Wire = wire::$name;
            fn to_wire(self) -> wire::$name {
                match self {
                    $(pb::$name::$value => wire::$name::$value,)*
                }
            }
            fn from_wire(w: wire::$name) -> Self {
                match w {
                    $(wire::$name::$value => pb::$name::$value,)*
                }
            }
        }
    )*};
}

mirror_enum! {
    ThreadState { Unspecified, Idle, Running }
    Communication { Unspecified, Default, On, Off }
    TurnStatus { Unspecified, Running, Completed, Failed, Cancelled }
    InputKind { Unspecified, User, Message }
    EventKind { Unspecified, Terminal, Attention, Lifecycle, Undeliverable, Task }
    SendStatus { Unspecified, Delivered, Pending, Undeliverable }
}

mirror! {
    ThreadRef = ThreadRef { host_id: same, workspace_id: same, session_id: same }

    ThreadListResponse = ThreadListReply { threads: many, next_cursor: same }
    Thread = Thread {
        id: same,
        workspace_id: same,
        cwd: same,
        title: same,
        profile: same,
        created_at: same,
        updated_at: same,
        archived: same,
        enabled: same,
        state: ThreadState,
        communication: Communication,
        host_id: same,
        communication_open: same,
        communication_why: same,
        agent_session: same,
    }

    ThreadReadResponse = ThreadReadReply {
        turns: many,
        next_cursor: same,
        segment: one,
        thread: one,
        coverage: one,
    } + local { tool_calls }
    Coverage = Coverage { turns_total: same, first_seq: same, last_seq: same, complete: same }
    Turn = Turn {
        id: same,
        seq: same,
        status: TurnStatus,
        input: same,
        output: same,
        input_truncated: same,
        output_truncated: same,
        content_refs: many,
        inputs: many,
        started_at: same,
        ended_at: same,
        error: same,
        usage: one,
    }
    TurnInput = TurnInput { kind: InputKind, message_id: same, source: one, room: same, room_entry: same }
    ContentRef = ContentRef { content_ref: same, field: (word ContentField), utf16_length: same }
    TurnUsage = TurnUsage { input_tokens: same, output_tokens: same, cost_usd: same }
    ContentSegment = ContentSegment {
        content_ref: same,
        text: same,
        offset: same,
        utf16_length: same,
        next: same,
    }

    ThreadWaitResponse = ThreadWaitReply { results: many, timed_out: same }
    WaitResult = WaitResult { target: one, events: many, cursor: same, home_id: same }
    Event = Event {
        seq: same,
        kind: EventKind,
        at: same,
        turn_id: same,
        turn_status: TurnStatus,
        reason: same,
        lifecycle: (word Lifecycle),
        message_id: same,
        request_id: same,
    }

    ThreadSendResponse = SendReply {
        message_id: same,
        status: SendStatus,
        replayed: same,
        reason: same,
        idempotency_key: same,
        room_seq: same,
        woke: same,
    }

    RoomReadResponse = RoomReadReply {
        room: same,
        host: same,
        members: many,
        paused: same,
        archived: same,
        entries: many,
        next_cursor: same,
        name: same,
        paused_reason: same,
    }
    RoomMember = RoomMember {
        id: same,
        role: (word MemberRole),
        kind: (word MemberKind),
        thread_id: same,
        profile: same,
    }
    RoomEntry = RoomEntry {
        id: same,
        at: same,
        author: same,
        content: same,
        mentions: same,
        seq: same,
        woke: same,
        deliveries: many,
    }
    RoomDelivery = RoomDelivery { member: same, status: (word DeliveryStatus), reason: same }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;

    fn thread_ref(session: &str) -> pb::ThreadRef {
        pb::ThreadRef { host_id: "h".into(), workspace_id: "ws_1".into(), session_id: session.into() }
    }

    fn read_page() -> pb::ThreadReadResponse {
        let turn = pb::Turn {
            id: "tu_1".into(),
            seq: 3,
            status: pb::TurnStatus::Completed as i32,
            input: "in".into(),
            output: "out".into(),
            input_truncated: true,
            output_truncated: false,
            content_refs: vec![pb::ContentRef {
                content_ref: "tu_1.input".into(),
                field: pb::ContentField::Input as i32,
                utf16_length: 70_000,
            }],
            inputs: vec![pb::TurnInput {
                kind: pb::InputKind::Message as i32,
                message_id: "msg_1".into(),
                source: Some(thread_ref("th_src")),
                room: "rm_1".into(),
                room_entry: "re_1".into(),
            }],
            started_at: "2026-01-01T00:00:00.000Z".into(),
            ended_at: "2026-01-01T00:00:01.000Z".into(),
            error: "e".into(),
            usage: Some(pb::TurnUsage { input_tokens: 1, output_tokens: 2, cost_usd: 0.5 }),
        };
        pb::ThreadReadResponse {
            // This home's own: does not cross.
            tool_calls: Vec::new(),
            turns: vec![turn],
            next_cursor: Some("c".into()),
            segment: Some(pb::ContentSegment {
                content_ref: "r".into(),
                text: "t".into(),
                offset: 1,
                utf16_length: 2,
                next: Some("n".into()),
            }),
            thread: Some(pb::Thread {
                id: "th_1".into(),
                state: pb::ThreadState::Running as i32,
                communication: pb::Communication::Off as i32,
                communication_open: true,
                communication_why: "why".into(),
                ..Default::default()
            }),
            coverage: Some(pb::Coverage { turns_total: 9, first_seq: 3, last_seq: 3, complete: true }),
        }
    }

    #[test]
    fn a_message_crosses_both_ways_unchanged() {
        let page = read_page();
        let on_wire = page.clone().to_wire();
        assert_eq!(on_wire.turns[0].content_refs[0].field, "input", "a word on the wire, as before");
        assert_eq!(pb::ThreadReadResponse::from_wire(on_wire), page);

        let waited = pb::ThreadWaitResponse {
            results: vec![pb::WaitResult {
                target: Some(thread_ref("th_1")),
                events: vec![pb::Event {
                    seq: 4,
                    kind: pb::EventKind::Lifecycle as i32,
                    lifecycle: pb::Lifecycle::Archived as i32,
                    ..Default::default()
                }],
                cursor: "c".into(),
                home_id: "home".into(),
            }],
            timed_out: true,
        };
        let on_wire = waited.clone().to_wire();
        assert_eq!(on_wire.results[0].events[0].lifecycle, "archived");
        assert_eq!(pb::ThreadWaitResponse::from_wire(on_wire), waited);

        let sent = pb::ThreadSendResponse {
            message_id: "msg_1".into(),
            status: pb::SendStatus::Undeliverable as i32,
            replayed: true,
            reason: "too_large".into(),
            idempotency_key: "k".into(),
            room_seq: 2,
            woke: vec!["th_2".into()],
        };
        let on_wire = sent.clone().to_wire();
        // The two packages' messages have the same shape here: the same bytes.
        assert_eq!(on_wire.encode_to_vec(), sent.encode_to_vec());
        assert_eq!(pb::ThreadSendResponse::from_wire(on_wire), sent);

        let room = pb::RoomReadResponse {
            room: "rm_1".into(),
            members: vec![pb::RoomMember {
                id: "critic".into(),
                role: pb::MemberRole::Member as i32,
                kind: pb::MemberKind::Persona as i32,
                profile: "echo".into(),
                ..Default::default()
            }],
            entries: vec![pb::RoomEntry {
                id: "re_1".into(),
                deliveries: vec![pb::RoomDelivery {
                    member: "home/th_x".into(),
                    status: pb::DeliveryStatus::Undeliverable as i32,
                    reason: "no bridge".into(),
                }],
                ..Default::default()
            }],
            next_cursor: Some("re_1".into()),
            ..Default::default()
        };
        let on_wire = room.clone().to_wire();
        let member = &on_wire.members[0];
        assert_eq!((member.role.as_str(), member.kind.as_str()), ("member", "persona"));
        assert_eq!(on_wire.entries[0].deliveries[0].status, "undeliverable");
        assert_eq!(pb::RoomReadResponse::from_wire(on_wire), room);
    }

    #[test]
    fn a_word_this_home_does_not_know_reads_as_unspecified() {
        let member = wire::RoomMember { kind: "robot".into(), role: "host".into(), ..Default::default() };
        let member = pb::RoomMember::from_wire(member);
        assert_eq!((member.kind(), member.role()), (pb::MemberKind::Unspecified, pb::MemberRole::Host));
        assert_eq!(pb::Event::from_wire(wire::Event::default()).lifecycle, 0, "no word: unset");
    }

    #[test]
    fn an_enum_value_this_home_does_not_know_keeps_its_number() {
        let event = pb::Event { kind: 99, ..Default::default() };
        assert_eq!(event.clone().to_wire().kind, 99);
        assert_eq!(pb::Event::from_wire(wire::Event { kind: 99, ..Default::default() }).kind, 99);
    }
}
