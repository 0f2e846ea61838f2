//! The rules sends and turns are decided by, written once above every backend. A backend
//! reads the facts a decision rests on inside its transaction, asks the rule, and writes
//! what it says: a second backend writes the SQL that reads the facts and stores the
//! outcome, never the decision.
//!
//! - A send ([`refuse_send`]): stored unless its key, the target, its bridge or the id its
//!   source gave it refuses it ([`SendFacts`]: a few lookups by key).
//! - A turn ([`plan_claim`], [`plan_take`]): an idle thread's next turn takes the queued
//!   input it may take now, and starts only if something in it wakes the thread and its
//!   budget is not spent; a running turn takes the messages its agent asks for that the
//!   inbox gives. Both say what is delivered ([`Taken`]).
//! - A room post ([`plan_post`]): whom it wakes (the owner's unmentioned post the host, any
//!   other post the members it mentions), unless the room is paused or the loop guard
//!   pauses it now; a post whose key was used before is answered by the key
//!   ([`post_by_key`]).
//! - A turn's end ([`finish_turn`], [`fail_interrupted_turn`]): what else it writes
//!   ([`TurnEnd`]).

use super::{
    ClaimedTurn, EntryRecord, EventKind, EventRecord, InputKind, InputRecord, MemberKind, MemberRecord,
    MessageStatus, Millis, NewEntry, NewInput, NewMessage, OutboxStatus, PostOutcome, RoomRecord, RoomTag,
    SendOutcome, SourceRef, TurnOutcome, TurnStatus, event, local_sender, message_input_id,
};

/// What a send's decision rests on, read in the transaction that would store it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SendFacts {
    /// The sender's key, if kept: the request hash it was given for, and its message.
    pub key: Option<KeptKey>,
    /// A message the sender sent to another home with this key (its outbox entry's id).
    pub key_sent_away: Option<String>,
    /// A bridged key its source gave up on before any of its calls arrived (read only for
    /// a bridged send: [`may_be_given_up`]).
    pub key_given_up: bool,
    /// The target thread exists and is not archived.
    pub target_live: bool,
    /// A bridged send's inbound bridge is active now (read only for a bridged send:
    /// [`bridged_from`]; a local send's is `true`).
    pub bridge_open: bool,
    /// A bridged send's id is one this home already gave a message, or to one it sent
    /// (read only for a bridged send).
    pub id_taken: bool,
}

/// A kept idempotency key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptKey {
    pub request_hash: String,
    pub message_id: String,
}

/// The peer whose bridge brought a send, if one did: its bridge and its id are facts to
/// read. That is the carrier, not the author: an entry of a room of another home comes from
/// the room's home, whoever wrote it.
pub fn bridged_from(m: &NewMessage) -> Option<&str> {
    m.receipt.as_ref().map(|r| r.peer_home_id.as_str()).filter(|h| !h.is_empty())
}

/// Whether the send's key may have been given up by its source: only a bridged send with
/// a deadline (the source's retry window) can arrive after that.
pub fn may_be_given_up(m: &NewMessage) -> bool {
    m.deadline.is_some()
}

/// The outcome of a send that is not stored, in the order the rules apply: the key decides
/// first (the same request replays, another conflicts — also with a message sent to
/// another home), then a bridged key given up on, the target, the bridge and the id the
/// source named it by. `None`: the send is accepted and stored.
pub fn refuse_send(m: &NewMessage, facts: &SendFacts) -> Option<SendOutcome> {
    if let Some(key) = &facts.key {
        let message_id = key.message_id.clone();
        return Some(if key.request_hash == m.request_hash {
            SendOutcome::Replayed { message_id }
        } else {
            SendOutcome::KeyConflict { message_id }
        });
    }
    if let Some(message_id) = &facts.key_sent_away {
        return Some(SendOutcome::KeyConflict { message_id: message_id.clone() });
    }
    if may_be_given_up(m) && facts.key_given_up {
        return Some(SendOutcome::GivenUp);
    }
    if !facts.target_live {
        return Some(SendOutcome::TargetGone);
    }
    // A bridge's call is let in before this transaction: a revocation (which refuses what
    // the peer brought) may have committed in between. It keeps the id its source gave it,
    // which must not be one already given here.
    if bridged_from(m).is_some() {
        if !facts.bridge_open {
            return Some(SendOutcome::BridgeClosed);
        }
        if facts.id_taken {
            return Some(SendOutcome::IdTaken);
        }
    }
    None
}

/// Input waiting for a turn, as a claim reads it.
#[derive(Debug, Clone)]
pub struct Queued {
    pub input: InputRecord,
    /// It may start a turn by itself (user input, a message with `wake`); otherwise it waits
    /// for a turn that starts.
    pub wake: bool,
}

/// Whether a turn may take `input` now: a peer's message only while the thread takes peer
/// messages (`take_messages`: its communication is on), and a bridged one only while the
/// inbound access of the bridge that brought it is on (`disabled_peers` are the peers whose
/// access is off).
pub fn takeable(input: &InputRecord, take_messages: bool, disabled_peers: &[String]) -> bool {
    (take_messages || input.source.is_none())
        && input.via.as_deref().is_none_or(|p| !disabled_peers.iter().any(|d| d == p))
}

/// What a claim's decision rests on, read in its transaction.
#[derive(Debug, Clone, Default)]
pub struct ClaimFacts {
    /// The thread's turn count, if it exists, is not archived and runs no turn.
    pub idle_turns: Option<i64>,
    /// What its agents have cost so far, read when the claim has a budget.
    pub cost: f64,
    /// Everything queued for it, oldest first.
    pub queued: Vec<Queued>,
    /// The peers whose bridge's inbound access is off.
    pub disabled_peers: Vec<String>,
}

/// When a claimed turn starts: when it was asked for, but never before the thread's last
/// turn ended (a claim asked for while that turn ran, and queued behind its end, starts
/// after it).
pub fn turn_start(asked: Millis, last_ended: Option<Millis>) -> Millis {
    asked.max(last_ended.unwrap_or(0))
}

/// The time a write that may expire what is overdue or start a turn decides by: the time
/// it was asked at, or the clock's (`running`) as it runs if that is later (it may have
/// waited for other writes, and a replay answered meanwhile may have declared a message
/// expired).
pub fn write_time(asked: Millis, running: Millis) -> Millis {
    asked.max(running)
}

/// What a claim writes: the turn (`seq`, and the inputs it takes in order, `arriving`
/// last), and of the queued ones it takes, what [`Taken`] says.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimPlan {
    pub seq: i64,
    pub inputs: Vec<InputRecord>,
    pub taken: Taken,
}

/// Queued input a turn takes (at its start, or mid-turn): each input row gets the turn, each
/// message is delivered to it, and each bridged one's receipt says `delivered`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Taken {
    pub inputs: Vec<String>,
    pub messages: Vec<String>,
    pub bridged: Vec<String>,
}

impl Taken {
    fn of<'a>(inputs: impl IntoIterator<Item = &'a InputRecord>) -> Self {
        let mut taken = Taken::default();
        for input in inputs {
            taken.inputs.push(input.id.clone());
            if let Some(message) = &input.message_id {
                taken.messages.push(message.clone());
                if input.via.is_some() {
                    taken.bridged.push(message.clone());
                }
            }
        }
        taken
    }
}

/// An idle thread's next turn: it takes its queued input it may take now (see
/// [`takeable`]), then `arriving`, the input of a send that wakes it (written by the send,
/// already the turn's) — or `None`: the thread is busy, archived or gone, its `budget` is
/// spent (its input waits), or nothing it may take starts a turn by itself (it waits for one
/// that starts).
pub fn plan_claim(
    facts: ClaimFacts,
    arriving: Option<InputRecord>,
    take_messages: bool,
    budget: Option<f64>,
) -> Option<ClaimPlan> {
    let turns = facts.idle_turns?;
    if budget.is_some_and(|budget| facts.cost >= budget) {
        return None;
    }
    let disabled = &facts.disabled_peers;
    let taken: Vec<Queued> =
        facts.queued.into_iter().filter(|q| takeable(&q.input, take_messages, disabled)).collect();
    let arriving = arriving.filter(|input| takeable(input, take_messages, disabled));
    if arriving.is_none() && !taken.iter().any(|q| q.wake) {
        return None;
    }
    let taken_queued = Taken::of(taken.iter().map(|q| &q.input));
    let inputs: Vec<InputRecord> = taken.into_iter().map(|q| q.input).chain(arriving).collect();
    let taken = taken_queued;
    Some(ClaimPlan { seq: turns + 1, inputs, taken })
}

/// Of the queued messages `ids` (see `inbox_id`), those a running turn takes now: what the
/// inbox gives ([`plan_inbox`]), in its order.
pub fn plan_take(
    queued: Vec<Queued>,
    take_messages: bool,
    disabled_peers: &[String],
    ids: &[String],
) -> (Vec<InputRecord>, Taken) {
    let inputs: Vec<InputRecord> = plan_inbox(queued, take_messages, disabled_peers)
        .into_iter()
        .filter(|i| super::inbox_id(i).is_some_and(|id| ids.iter().any(|given| given == id)))
        .collect();
    let taken = Taken::of(&inputs);
    (inputs, taken)
}

/// What a running turn's agent may be given mid-turn (see `TurnStore::inbox`): queued
/// messages (not user input, which starts a turn of its own) that would wake the thread
/// and that a turn may take now. A message that may not wake it (a bridge without `wake`,
/// a room post that does not mention it) waits for a turn that starts, as ever.
pub fn plan_inbox(queued: Vec<Queued>, take_messages: bool, disabled_peers: &[String]) -> Vec<InputRecord> {
    queued
        .into_iter()
        .filter(|q| {
            q.wake && q.input.kind == InputKind::Message && takeable(&q.input, take_messages, disabled_peers)
        })
        .map(|q| q.input)
        .collect()
}

/// Whether a message between two threads' agents may wake its target: the `count`-th wake
/// between the pair since the owner last spoke to either, under the cap `limit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentWake {
    Wakes,
    /// Past the cap: it waits without waking; `first` for the one that crossed it (its
    /// target's owner is told).
    Held {
        first: bool,
    },
}

/// What a thread's owner is told when two agents' messages stop waking each other.
pub fn loop_guard_notice(a: &str, b: &str, limit: u32) -> String {
    format!(
        "{a} and {b} have woken each other {limit} times without you ([threads] max_agent_wakes): their \
         messages now wait for a turn you start; give either thread input to let them go on"
    )
}

/// How a send the rules did not refuse is stored, before the thread's turn is known: its one
/// input, which refers to the message for its content (a message of up to 100,000
/// characters is not copied into its queued input); whether it is the owner speaking (which
/// resets the loop guard between agents); and whether it may start a turn at once.
#[derive(Debug, Clone, PartialEq)]
pub struct Acceptance {
    pub input: NewInput,
    pub owner_spoke: bool,
}

pub fn accept(m: &NewMessage) -> Acceptance {
    Acceptance {
        input: NewInput {
            id: message_input_id(&m.id),
            kind: InputKind::Message,
            content: String::new(),
            message_id: Some(m.id.clone()),
            source: m.source.clone(),
            room: m.room.clone(),
            via: bridged_from(m).map(str::to_string),
            now: m.now,
        },
        owner_spoke: m.source.is_none(),
    }
}

/// How an accepted message stands once the turn its commit started (if any) is known:
/// delivered to that turn if it took the message's input (it may have started for other
/// queued input without it), else pending until its deadline; and a bridged one's receipt
/// says `delivered`, or `accepted` (held here, not yet in a turn: the word its source uses
/// too).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arrival {
    pub status: MessageStatus,
    pub receipt: OutboxStatus,
    /// The turn that took it.
    pub turn_id: Option<String>,
    pub delivered_at: Option<Millis>,
    pub deadline: Option<Millis>,
}

pub fn arrival(m: &NewMessage, input_id: &str, turn: Option<&ClaimedTurn>) -> Arrival {
    match taken_by(turn, input_id) {
        Some(turn_id) => Arrival {
            status: MessageStatus::Delivered,
            receipt: OutboxStatus::Delivered,
            turn_id: Some(turn_id),
            delivered_at: Some(m.now),
            deadline: None,
        },
        None => Arrival {
            status: MessageStatus::Pending,
            receipt: OutboxStatus::Accepted,
            turn_id: None,
            delivered_at: None,
            deadline: m.deadline,
        },
    }
}

/// A message made undeliverable (`reason`): the event telling its target thread, and its
/// sender too when that is a thread of this home (a peer's thread learns from its home's
/// follow-ups).
pub fn undeliverable_events(
    message_id: &str,
    target: &str,
    source: Option<String>,
    source_host: Option<&str>,
    reason: &str,
    now: Millis,
) -> Vec<EventRecord> {
    std::iter::once(target.to_string())
        .chain(local_sender(source, source_host))
        .map(|thread| EventRecord {
            reason: reason.to_string(),
            message_id: Some(message_id.to_string()),
            ..event(&thread, EventKind::Undeliverable, now)
        })
        .collect()
}

/// The turn that took the input `input_id`, if the turn started in its commit did: it may
/// have started for other queued input without it.
pub fn taken_by(turn: Option<&ClaimedTurn>, input_id: &str) -> Option<String> {
    turn.filter(|t| t.inputs.iter().any(|i| i.id == input_id)).map(|t| t.turn.id.clone())
}

/// The input a room entry queues for the `nth` member it wakes. It refers to the entry for
/// its content (a post of up to 20,000 characters is written once, not again per member);
/// its id follows the entry's, which grows with time, so the inputs' id index is appended
/// to. An author of another home posted through its own bridge to this one.
pub fn entry_input(e: &NewEntry, nth: usize) -> NewInput {
    NewInput {
        id: format!("in_{}_{nth}", e.id),
        kind: InputKind::Message,
        content: String::new(),
        message_id: Some(e.id.clone()),
        source: e.author.clone(),
        room: Some(RoomTag { room: e.room_id.clone(), entry: e.id.clone() }),
        via: e.author.as_ref().map(|a| a.host_id.clone()).filter(|h| !h.is_empty()),
        now: e.now,
    }
}

/// A post's entry as logged: next in its room's log, naming whom it woke.
pub fn entry(e: &NewEntry, room: &RoomRecord, woke: Vec<String>) -> EntryRecord {
    EntryRecord {
        room_id: e.room_id.clone(),
        seq: room.last_seq + 1,
        id: e.id.clone(),
        author: e.author.clone(),
        content: e.content.clone(),
        mentions: e.mentions.clone(),
        woke,
        at: e.now,
        deliveries: Vec::new(),
    }
}

/// What a source's follow-up of its bridged message does to it (see
/// `MessageStore::follow_up`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FollowUp {
    /// Confirmed: its deadline is dropped, it waits for its turn however long.
    Confirm,
    /// Its deadline passed, or the source gave up (`window_over`) without learning it
    /// arrived: it expires.
    Expire,
    /// Delivered, undeliverable or confirmed already: it stays as it is.
    Keep,
}

pub fn follow_up(
    status: MessageStatus,
    deadline: Option<super::Millis>,
    window_over: bool,
    now: super::Millis,
) -> FollowUp {
    match deadline {
        Some(deadline) if status == MessageStatus::Pending => {
            if window_over || deadline <= now {
                FollowUp::Expire
            } else {
                FollowUp::Confirm
            }
        }
        _ => FollowUp::Keep,
    }
}

impl FollowUp {
    /// The message as it stands once the follow-up's writes are made.
    pub fn applied(self, message: super::MessageRecord) -> super::MessageRecord {
        match self {
            FollowUp::Expire => super::MessageRecord {
                status: MessageStatus::Undeliverable,
                reason: super::EXPIRED.into(),
                deadline: None,
                ..message
            },
            FollowUp::Confirm => super::MessageRecord { deadline: None, ..message },
            FollowUp::Keep => message,
        }
    }
}

/// Whether an attempt's outcome may still change an outbox entry standing at `status` (and
/// due at `next_attempt_at`): one in flight (pending or accepted) moves on, and so does an
/// expired one whose target is still to be asked where it stands (due before never); any
/// other outcome is final. So an event is given once: an expired entry's new outcome
/// carries none.
pub fn outcome_applies(status: OutboxStatus, next_attempt_at: Millis) -> bool {
    match status {
        OutboxStatus::Pending | OutboxStatus::Accepted => true,
        OutboxStatus::Expired => next_attempt_at < Millis::MAX,
        OutboxStatus::Delivered | OutboxStatus::Rejected => false,
    }
}

/// The receipt of a bridged message that became undeliverable here for `reason`.
pub fn undelivered_receipt(reason: &str) -> OutboxStatus {
    if reason == super::EXPIRED { OutboxStatus::Expired } else { OutboxStatus::Rejected }
}

pub fn agent_wake(count: i64, limit: u32) -> AgentWake {
    let limit = i64::from(limit);
    if count <= limit { AgentWake::Wakes } else { AgentWake::Held { first: count == limit + 1 } }
}

/// The pair a message between two threads counts for: its source (as `HOME/SESSION` from
/// another home) and target, in a fixed order — a wake either way counts for both.
pub fn agent_pair(source: &SourceRef, target: &str) -> Option<(String, String)> {
    if source.thread_id.is_empty() {
        return None; // an external client, not an agent
    }
    let from = if source.host_id.is_empty() {
        source.thread_id.clone()
    } else {
        format!("{}/{}", source.host_id, source.thread_id)
    };
    let target = target.to_string();
    Some(if from < target { (from, target) } else { (target, from) })
}

/// What a room post does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostPlan {
    /// The members it wakes, in the order they were mentioned.
    pub wake: Vec<Woken>,
    /// The loop guard's count after the post.
    pub agent_wakes: i64,
    /// Set when the loop guard pauses the room now (the post wakes nobody): why.
    pub pause: Option<String>,
}

/// What the host of room `room_id` is told (an `attention` event) when the loop guard
/// pauses it for `why`.
pub fn paused_notice(room_id: &str, why: &str) -> String {
    format!("room {room_id} paused: {why}")
}

/// A member a post wakes, as the post's transaction reaches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Woken {
    /// A thread of this home (the host, a thread member, a persona's thread): the entry is
    /// queued for it, or taken by the turn the post starts if it is idle.
    Thread { member: String, thread: String },
    /// A thread of another home: the outbox entry for its home carries the entry if this
    /// home has a bridge there; the log shows it woken either way.
    Remote { member: String },
}

impl Woken {
    /// Its roster id.
    pub fn member(&self) -> &str {
        match self {
            Woken::Thread { member, .. } | Woken::Remote { member } => member,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostRefusal {
    Archived,
    /// The author's thread is not in the room.
    NotMember,
}

/// The roster id `id` names in `room` (the host, a member, or a persona by its id or its
/// thread's), with its thread of this home if it has one.
pub fn roster_entry(
    room: &RoomRecord,
    members: &[MemberRecord],
    id: &str,
) -> Option<(String, Option<String>)> {
    if id == room.host_thread {
        return Some((id.to_string(), Some(id.to_string())));
    }
    members
        .iter()
        .find(|m| m.member_id == id || m.thread_id.as_deref() == Some(id))
        .map(|m| (m.member_id.clone(), m.thread_id.clone()))
}

/// The roster id of a thread of another home: `HOME_ID/SESSION`.
pub fn remote_member_id(home_id: &str, session: &str) -> String {
    format!("{home_id}/{session}")
}

/// Whether a roster id names a thread of another home (thread and persona ids have no `/`).
pub fn is_remote_member(id: &str) -> bool {
    id.contains('/')
}

/// Whether `author` (a thread of this home, or a peer's) is the room's host or a member.
fn author_roster_id(room: &RoomRecord, members: &[MemberRecord], author: &SourceRef) -> Option<String> {
    if author.host_id.is_empty() {
        return roster_entry(room, members, &author.thread_id).map(|(id, _)| id);
    }
    let remote = remote_member_id(&author.host_id, &author.thread_id);
    members
        .iter()
        .find(|m| m.kind == MemberKind::Remote && m.member_id == remote)
        .map(|m| m.member_id.clone())
}

/// Decides a post by `author` (`None`: the owner) mentioning `mentions` (roster ids,
/// checked by the caller): the owner's post without mentions wakes the host, any other
/// post the members it mentions (an author never wakes itself). A paused room wakes
/// nobody. Wakes caused by agents' posts are counted until the owner posts; the post that
/// would take the count past `max_agent_wakes` pauses the room instead.
pub fn plan_post(
    room: &RoomRecord,
    members: &[MemberRecord],
    author: Option<&SourceRef>,
    mentions: &[String],
    max_agent_wakes: i64,
) -> Result<PostPlan, PostRefusal> {
    if room.archived {
        return Err(PostRefusal::Archived);
    }
    let author_id = match author {
        Some(author) => Some(author_roster_id(room, members, author).ok_or(PostRefusal::NotMember)?),
        None => None,
    };
    let named: Vec<&str> = match (&author_id, mentions.is_empty()) {
        (None, true) => vec![room.host_thread.as_str()],
        _ => mentions.iter().map(String::as_str).collect(),
    };
    let mut wake: Vec<(String, Option<String>)> = Vec::new();
    for id in named {
        if let Some(entry) = roster_entry(room, members, id)
            && Some(&entry.0) != author_id.as_ref()
            && !wake.iter().any(|(w, _)| *w == entry.0)
        {
            wake.push(entry);
        }
    }
    // A persona with no thread yet (the rooms service makes it before the post) wakes nobody.
    let wake = wake
        .into_iter()
        .filter_map(|(member, thread)| match thread {
            Some(thread) => Some(Woken::Thread { member, thread }),
            None if is_remote_member(&member) => Some(Woken::Remote { member }),
            None => None,
        })
        .collect();
    let mut plan = PostPlan { wake, agent_wakes: room.agent_wakes, pause: None };
    if author_id.is_none() {
        plan.agent_wakes = 0;
    }
    if room.paused {
        plan.wake.clear();
    } else if author_id.is_some() && !plan.wake.is_empty() {
        plan.agent_wakes += plan.wake.len() as i64;
        if plan.agent_wakes > max_agent_wakes {
            plan.pause = Some(format!(
                "loop guard: agents' posts would have woken members {} times without the owner's input \
                 (`[rooms] max_agent_wakes` = {max_agent_wakes}); resume the room to go on",
                plan.agent_wakes
            ));
            plan.wake.clear();
        }
    }
    Ok(plan)
}

/// Why a permission request still pending when its turn ends is answered `expired`.
pub const PERMISSION_OUTLIVED_TURN: &str = "the turn ended before an answer";
/// … and one still pending when kikid stopped (found so at the next start).
pub const PERMISSION_OUTLIVED_DAEMON: &str = "kikid stopped before an answer";

/// What ending a turn writes once its row says it ended (only a running turn ends, once):
/// its thread is idle again, its permission requests still pending are answered `expired`
/// (nobody can act on the answer now), the agent's session is kept for the thread's next
/// turn, and the thread's log gets the terminal event.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnEnd {
    pub thread_id: String,
    pub turn_id: String,
    /// When the thread went idle and the requests were answered.
    pub now: Millis,
    /// Why its pending permission requests expired.
    pub permissions_expired: &'static str,
    pub agent_session: Option<String>,
    pub terminal: EventRecord,
}

/// A turn of `thread_id` its runner finished with `outcome`.
pub fn finish_turn(thread_id: &str, outcome: &TurnOutcome) -> TurnEnd {
    turn_end(thread_id, &outcome.turn_id, outcome.status, &outcome.error, outcome.now)
        .with_session(outcome.agent_session.clone())
}

/// A turn of `thread_id` failed for `reason` because the kikid that ran it is gone: no
/// session to keep (its agent never said), its requests outlived that kikid.
pub fn fail_interrupted_turn(thread_id: &str, turn_id: &str, reason: &str, now: Millis) -> TurnEnd {
    TurnEnd {
        permissions_expired: PERMISSION_OUTLIVED_DAEMON,
        ..turn_end(thread_id, turn_id, TurnStatus::Failed, reason, now)
    }
}

fn turn_end(thread_id: &str, turn_id: &str, status: TurnStatus, reason: &str, now: Millis) -> TurnEnd {
    TurnEnd {
        thread_id: thread_id.to_string(),
        turn_id: turn_id.to_string(),
        now,
        permissions_expired: PERMISSION_OUTLIVED_TURN,
        agent_session: None,
        terminal: EventRecord {
            turn_id: Some(turn_id.to_string()),
            turn_status: Some(status),
            reason: reason.to_string(),
            ..event(thread_id, EventKind::Terminal, now)
        },
    }
}

impl TurnEnd {
    fn with_session(self, agent_session: Option<String>) -> Self {
        TurnEnd { agent_session, ..self }
    }
}

/// A post whose key was used before in its room (by the post of hash `kept_hash`, which
/// logged `entry`) is answered by its key, even if the room changed since: the same post
/// again replays its entry, another post conflicts with it.
pub fn post_by_key(request_hash: &str, kept_hash: &str, entry: EntryRecord) -> PostOutcome {
    if kept_hash == request_hash {
        PostOutcome::Replayed(entry)
    } else {
        PostOutcome::KeyConflict { entry_id: entry.id }
    }
}

#[cfg(test)]
mod tests;
