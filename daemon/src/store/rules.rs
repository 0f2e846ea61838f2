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
mod tests {
    use super::*;
    use crate::store::SourceRef;

    fn input(id: &str, source: Option<(&str, &str)>) -> InputRecord {
        InputRecord {
            id: id.into(),
            kind: if source.is_some() { InputKind::Message } else { InputKind::User },
            content: id.into(),
            message_id: source.map(|_| format!("msg_{id}")),
            source: source.map(|(host, thread)| SourceRef {
                host_id: host.into(),
                thread_id: thread.into(),
                workspace_id: String::new(),
            }),
            room: None,
            via: source.map(|(host, _)| host.to_string()).filter(|h| !h.is_empty()),
            now: 1,
        }
    }

    /// The ids of what an idle thread's turn takes.
    fn claim(
        queued: Vec<Queued>,
        arriving: Option<InputRecord>,
        take_messages: bool,
        disabled: &[String],
    ) -> Option<Vec<String>> {
        let facts = ClaimFacts { idle_turns: Some(0), cost: 0.0, queued, disabled_peers: disabled.to_vec() };
        plan_claim(facts, arriving, take_messages, None)
            .map(|plan| plan.inputs.into_iter().map(|i| i.id).collect())
    }

    #[test]
    fn a_follow_up_confirms_a_pending_message_in_time_and_expires_the_rest() {
        use MessageStatus::*;
        assert_eq!(follow_up(Pending, Some(100), false, 99), FollowUp::Confirm);
        assert_eq!(follow_up(Pending, Some(100), false, 100), FollowUp::Expire, "its deadline passed");
        assert_eq!(follow_up(Pending, Some(100), true, 50), FollowUp::Expire, "the source gave up");
        assert_eq!(follow_up(Pending, None, true, 50), FollowUp::Keep, "confirmed before");
        assert_eq!(follow_up(Delivered, Some(100), true, 500), FollowUp::Keep);
        let pending = crate::store::MessageRecord {
            id: "msg_1".into(),
            target_thread: "th_a".into(),
            source: None,
            content: "hi".into(),
            status: Pending,
            reason: String::new(),
            created_at: 1,
            delivered_at: None,
            turn_id: None,
            deadline: Some(100),
        };
        let expired = FollowUp::Expire.applied(pending.clone());
        assert_eq!(
            (expired.status, expired.reason.as_str(), expired.deadline),
            (Undeliverable, "expired", None)
        );
        assert_eq!(FollowUp::Confirm.applied(pending.clone()).deadline, None);
        assert_eq!(FollowUp::Keep.applied(pending.clone()), pending);
    }

    #[test]
    fn an_arrival_stands_delivered_or_held_and_its_receipt_says_so() {
        use crate::store::{TurnRecord, TurnStatus};
        let mut m = send(true);
        m.deadline = Some(900);
        let accepted = accept(&m);
        assert_eq!(accepted.input.id, "in_msg_1");
        assert_eq!(
            (accepted.input.content.as_str(), accepted.input.message_id.as_deref()),
            ("", Some("msg_1"))
        );
        assert_eq!(accepted.input.via.as_deref(), Some("PEER"), "the bridge that brought it");
        assert!(!accepted.owner_spoke, "a thread sent it");
        assert!(accept(&send(false)).owner_spoke, "the owner's send");
        let turn = |inputs: Vec<InputRecord>| ClaimedTurn {
            turn: TurnRecord {
                id: "tu_1".into(),
                thread_id: "th_t".into(),
                seq: 1,
                status: TurnStatus::Running,
                input: String::new(),
                output: String::new(),
                error: String::new(),
                started_at: m.now,
                ended_at: None,
                items: Vec::new(),
                usage: None,
            },
            inputs,
        };
        let took = turn(vec![input("in_msg_1", Some(("PEER", "th_s")))]);
        let delivered = arrival(&m, "in_msg_1", Some(&took));
        assert_eq!(
            (delivered.status, delivered.receipt),
            (MessageStatus::Delivered, OutboxStatus::Delivered)
        );
        assert_eq!(
            (delivered.turn_id.as_deref(), delivered.delivered_at, delivered.deadline),
            (Some("tu_1"), Some(m.now), None)
        );
        let other = turn(vec![input("in_other", None)]);
        for held in [arrival(&m, "in_msg_1", Some(&other)), arrival(&m, "in_msg_1", None)] {
            assert_eq!((held.status, held.receipt), (MessageStatus::Pending, OutboxStatus::Accepted));
            assert_eq!(
                (held.turn_id, held.delivered_at, held.deadline),
                (None, None, Some(900)),
                "held until its deadline"
            );
        }
        assert_eq!(undelivered_receipt(super::super::EXPIRED), OutboxStatus::Expired);
        assert_eq!(undelivered_receipt("thread_archived"), OutboxStatus::Rejected);
    }

    #[test]
    fn a_claim_numbers_the_turn_and_says_what_it_takes_of_the_queue() {
        let user = Queued { input: input("user", None), wake: true };
        let bridged = Queued { input: input("bridged", Some(("PEER", "th_f"))), wake: true };
        let facts = ClaimFacts { idle_turns: Some(4), queued: vec![user, bridged], ..Default::default() };
        let plan =
            plan_claim(facts.clone(), Some(input("new", Some(("", "th_n")))), true, None).expect("a turn");
        assert_eq!(plan.seq, 5);
        assert_eq!(
            plan.taken,
            Taken {
                inputs: vec!["user".into(), "bridged".into()],
                messages: vec!["msg_bridged".into()],
                bridged: vec!["msg_bridged".into()],
            },
            "the arriving input is the send's, not the queue's"
        );
        // A busy, archived or missing thread starts none; nor one whose budget is spent.
        assert_eq!(plan_claim(ClaimFacts { idle_turns: None, ..facts.clone() }, None, true, None), None);
        let spent = ClaimFacts { cost: 2.0, ..facts.clone() };
        assert_eq!(plan_claim(spent.clone(), None, true, Some(2.0)), None, "its input waits");
        assert!(plan_claim(spent, None, true, Some(2.5)).is_some(), "under the budget");
    }

    #[test]
    fn a_running_turn_takes_only_the_asked_messages_the_inbox_gives() {
        let peer = Queued { input: input("peer", Some(("", "th_p"))), wake: true };
        let bridged = Queued { input: input("bridged", Some(("PEER", "th_f"))), wake: true };
        let user = Queued { input: input("user", None), wake: true };
        let asked = ["msg_bridged".to_string(), "user".to_string(), "msg_unknown".to_string()];
        let (inputs, taken) = plan_take(vec![peer, bridged, user], true, &[], &asked);
        assert_eq!(inputs.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(), ["bridged"]);
        assert_eq!(taken.bridged, ["msg_bridged"]);
    }

    #[test]
    fn a_turn_takes_what_it_may_in_order_and_starts_only_if_something_wakes_it() {
        let user = Queued { input: input("user", None), wake: true };
        let peer = Queued { input: input("peer", Some(("", "th_p"))), wake: true };
        let held = Queued { input: input("held", Some(("PEER", "th_f"))), wake: false };
        let arriving = input("new", Some(("", "th_n")));
        let all = vec![user.clone(), peer.clone(), held.clone()];
        assert_eq!(
            claim(all.clone(), Some(arriving.clone()), true, &[]),
            Some(vec!["user".into(), "peer".into(), "held".into(), "new".into()])
        );
        // Communication off: peer messages wait, the user's input goes.
        assert_eq!(claim(all.clone(), Some(arriving.clone()), false, &[]), Some(vec!["user".into()]));
        // A disabled bridge's messages wait.
        assert_eq!(claim(all, None, true, &["PEER".into()]), Some(vec!["user".into(), "peer".into()]));
        // An entry of a room of another home, written by a thread of a third: the bridge
        // that carried it decides, not its author's home.
        let mut entry = input("entry", Some(("AUTHOR", "th_a")));
        entry.via = Some("ROOMHOME".into());
        let entry = vec![Queued { input: entry, wake: true }];
        assert_eq!(claim(entry.clone(), None, true, &["AUTHOR".into()]), Some(vec!["entry".into()]));
        assert_eq!(claim(entry, None, true, &["ROOMHOME".into()]), None);
        // Nothing that wakes: no turn, whatever waits.
        assert_eq!(claim(vec![held.clone()], None, true, &[]), None);
        assert_eq!(claim(vec![held.clone()], Some(arriving.clone()), false, &[]), None);
        assert_eq!(claim(vec![held], Some(arriving), true, &[]), Some(vec!["held".into(), "new".into()]));
    }

    #[test]
    fn a_running_turn_is_given_the_messages_that_would_wake_it_and_may_be_taken() {
        let user = Queued { input: input("user", None), wake: true };
        let peer = Queued { input: input("peer", Some(("", "th_p"))), wake: true };
        let held = Queued { input: input("held", Some(("", "th_q"))), wake: false };
        let bridged = Queued { input: input("bridged", Some(("PEER", "th_f"))), wake: true };
        let all = vec![user, peer, held, bridged];
        let given = |take_messages, disabled: &[String]| -> Vec<String> {
            plan_inbox(all.clone(), take_messages, disabled).into_iter().map(|i| i.id).collect()
        };
        assert_eq!(given(true, &[]), vec!["peer", "bridged"], "no user input, nothing that may not wake");
        assert_eq!(given(true, &["PEER".into()]), vec!["peer"], "a disabled bridge's messages wait");
        assert!(given(false, &[]).is_empty(), "communication off: peers' messages wait");
    }

    #[test]
    fn two_agents_wake_each_other_up_to_the_cap_then_wait() {
        assert_eq!(agent_wake(3, 3), AgentWake::Wakes);
        assert_eq!(agent_wake(4, 3), AgentWake::Held { first: true });
        assert_eq!(agent_wake(5, 3), AgentWake::Held { first: false });
        let from = |host: &str, thread: &str| SourceRef {
            host_id: host.into(),
            thread_id: thread.into(),
            workspace_id: String::new(),
        };
        assert_eq!(agent_pair(&from("", "th_b"), "th_a"), Some(("th_a".into(), "th_b".into())));
        assert_eq!(agent_pair(&from("", "th_a"), "th_b"), Some(("th_a".into(), "th_b".into())), "either way");
        assert_eq!(agent_pair(&from("HOME", "th_z"), "th_a"), Some(("HOME/th_z".into(), "th_a".into())));
        assert_eq!(agent_pair(&from("HOME", ""), "th_a"), None, "an external client is no agent");
    }

    fn send(bridged: bool) -> NewMessage {
        NewMessage {
            room: None,
            id: "msg_1".into(),
            target_thread: "th_t".into(),
            source: bridged.then(|| SourceRef {
                host_id: "PEER".into(),
                thread_id: "th_s".into(),
                workspace_id: String::new(),
            }),
            content: "hi".into(),
            key_scope: "scope".into(),
            key: "k".into(),
            request_hash: "h".into(),
            wake: true,
            claim: None,
            receipt: bridged.then(|| crate::store::ReceiptRecord {
                peer_home_id: "PEER".into(),
                key: "k".into(),
                message_id: String::new(),
                target: "th_t".into(),
                status: crate::store::OutboxStatus::Accepted,
                reason: String::new(),
                at: 1,
            }),
            deadline: bridged.then_some(10),
            max_agent_wakes: None,
            now: 1,
        }
    }

    fn open() -> SendFacts {
        SendFacts { target_live: true, bridge_open: true, ..SendFacts::default() }
    }

    fn kept(hash: &str) -> Option<KeptKey> {
        Some(KeptKey { request_hash: hash.into(), message_id: "msg_0".into() })
    }

    #[test]
    fn the_key_decides_first_then_the_target_then_the_bridge() {
        let local = send(false);
        assert_eq!(refuse_send(&local, &open()), None, "accepted");
        let replay = SendFacts { key: kept("h"), target_live: false, ..open() };
        assert_eq!(refuse_send(&local, &replay), Some(SendOutcome::Replayed { message_id: "msg_0".into() }));
        let other = SendFacts { key: kept("other"), ..open() };
        assert_eq!(
            refuse_send(&local, &other),
            Some(SendOutcome::KeyConflict { message_id: "msg_0".into() })
        );
        let away = SendFacts { key_sent_away: Some("msg_9".into()), ..open() };
        assert_eq!(refuse_send(&local, &away), Some(SendOutcome::KeyConflict { message_id: "msg_9".into() }));
        assert_eq!(
            refuse_send(&local, &SendFacts { target_live: false, ..open() }),
            Some(SendOutcome::TargetGone)
        );
        // A local send has no bridge to be closed, nor an id of its source's.
        let closed = SendFacts { bridge_open: false, id_taken: true, ..open() };
        assert_eq!(refuse_send(&local, &closed), None);
    }

    #[test]
    fn a_bridged_send_also_needs_its_key_kept_its_bridge_open_and_a_free_id() {
        let bridged = send(true);
        assert_eq!(bridged_from(&bridged), Some("PEER"));
        // The bridge that carried it, not its author's home (a room entry's).
        let mut entry = send(true);
        entry.source.as_mut().expect("source").host_id = "AUTHOR".into();
        assert_eq!(bridged_from(&entry), Some("PEER"));
        assert_eq!(refuse_send(&bridged, &open()), None);
        let given_up = SendFacts { key_given_up: true, target_live: false, ..open() };
        assert_eq!(refuse_send(&bridged, &given_up), Some(SendOutcome::GivenUp), "before the target");
        let closed = SendFacts { bridge_open: false, id_taken: true, ..open() };
        assert_eq!(refuse_send(&bridged, &closed), Some(SendOutcome::BridgeClosed), "before the id");
        assert_eq!(
            refuse_send(&bridged, &SendFacts { id_taken: true, ..open() }),
            Some(SendOutcome::IdTaken)
        );
    }

    fn room(paused: bool, agent_wakes: i64) -> RoomRecord {
        RoomRecord {
            seq: 1,
            id: "room_1".into(),
            name: "r".into(),
            host_thread: "th_host".into(),
            paused,
            paused_reason: String::new(),
            archived: false,
            agent_wakes,
            last_seq: 0,
            created_at: 1,
            updated_at: 1,
        }
    }

    fn member(id: &str, kind: MemberKind, thread: Option<&str>) -> MemberRecord {
        MemberRecord {
            member_id: id.into(),
            kind,
            thread_id: thread.map(String::from),
            profile: String::new(),
            instructions: String::new(),
            added_at: 1,
        }
    }

    fn local(thread: &str) -> SourceRef {
        SourceRef { host_id: String::new(), thread_id: thread.into(), workspace_id: String::new() }
    }

    fn woken(plan: &PostPlan) -> Vec<&str> {
        plan.wake.iter().map(Woken::member).collect()
    }

    #[test]
    fn the_owner_wakes_the_host_or_whom_it_mentions_and_members_only_whom_they_mention() {
        let members = [
            member("th_a", MemberKind::Thread, Some("th_a")),
            member("reviewer", MemberKind::Persona, Some("th_p")),
            member("HOME/th_far", MemberKind::Remote, None),
        ];
        let r = room(false, 0);
        let plan = |author: Option<&SourceRef>, mentions: &[&str]| {
            let mentions: Vec<String> = mentions.iter().map(|m| m.to_string()).collect();
            plan_post(&r, &members, author, &mentions, 20)
        };
        let wakes =
            |author: Option<&SourceRef>, mentions: &[&str]| plan(author, mentions).expect("a member's post");
        assert_eq!(woken(&wakes(None, &[])), ["th_host"]);
        assert_eq!(woken(&wakes(None, &["th_a", "th_a", "th_p"])), ["th_a", "reviewer"]);
        let a = local("th_a");
        assert!(woken(&wakes(Some(&a), &[])).is_empty(), "an unmentioned agent post wakes nobody");
        let to_self = wakes(Some(&a), &["th_a", "th_host"]);
        assert_eq!(woken(&to_self), ["th_host"], "an author never wakes itself");
        assert_eq!(to_self.agent_wakes, 1);
        let far = SourceRef { host_id: "HOME".into(), ..local("th_far") };
        assert_eq!(
            wakes(Some(&far), &["reviewer"]).wake,
            [Woken::Thread { member: "reviewer".into(), thread: "th_p".into() }]
        );
        assert_eq!(wakes(None, &["HOME/th_far"]).wake, [Woken::Remote { member: "HOME/th_far".into() }]);
        assert_eq!(plan(Some(&local("th_stranger")), &[]), Err(PostRefusal::NotMember));
        let elsewhere = SourceRef { host_id: "OTHER".into(), ..local("th_far") };
        assert_eq!(
            plan(Some(&elsewhere), &[]),
            Err(PostRefusal::NotMember),
            "the same session in another home"
        );
    }

    #[test]
    fn a_paused_room_wakes_nobody_and_the_loop_guard_pauses_one_past_its_limit() {
        let members = [member("th_a", MemberKind::Thread, Some("th_a"))];
        let mentions = vec!["th_a".to_string()];
        let paused = plan_post(&room(true, 0), &members, None, &mentions, 20).expect("a post");
        assert!(paused.wake.is_empty());
        let host = local("th_host");
        let at_limit = plan_post(&room(false, 19), &members, Some(&host), &mentions, 20).expect("a post");
        assert_eq!(
            (woken(&at_limit), at_limit.agent_wakes, at_limit.pause.is_none()),
            (vec!["th_a"], 20, true)
        );
        let past = plan_post(&room(false, 20), &members, Some(&host), &mentions, 20).expect("a post");
        assert!(past.wake.is_empty());
        assert!(past.pause.as_deref().is_some_and(|why| why.contains("21 times")), "{past:?}");
        let owner = plan_post(&room(false, 20), &members, None, &mentions, 20).expect("a post");
        assert_eq!(
            (woken(&owner), owner.agent_wakes),
            (vec!["th_a"], 0),
            "the owner's post starts the count over"
        );
        let archived = RoomRecord { archived: true, ..room(false, 0) };
        assert_eq!(plan_post(&archived, &members, None, &[], 20), Err(PostRefusal::Archived));
    }

    #[test]
    fn a_post_queues_one_input_per_woken_member_and_logs_the_next_entry() {
        let post = NewEntry {
            room_id: "room_1".into(),
            id: "ent_1".into(),
            author: Some(SourceRef {
                host_id: "PEER".into(),
                thread_id: "th_far".into(),
                workspace_id: String::new(),
            }),
            content: "hello @a".into(),
            mentions: vec!["a".into()],
            key_scope: "th_far".into(),
            key: "k".into(),
            request_hash: "h".into(),
            claims: Vec::new(),
            remote: Vec::new(),
            max_agent_wakes: 20,
            now: 7,
        };
        let second = entry_input(&post, 1);
        assert_eq!(second.id, "in_ent_1_1", "after the entry's id, one per woken member");
        assert_eq!(
            (second.content.as_str(), second.message_id.as_deref()),
            ("", Some("ent_1")),
            "refers to the entry"
        );
        assert_eq!(second.room, Some(RoomTag { room: "room_1".into(), entry: "ent_1".into() }));
        assert_eq!(second.via.as_deref(), Some("PEER"), "came through the author's home's bridge");
        let owners = NewEntry { author: None, ..post.clone() };
        assert_eq!(entry_input(&owners, 0).via, None);
        let logged = entry(&post, &RoomRecord { last_seq: 41, ..room(false, 0) }, vec!["th_a".into()]);
        assert_eq!((logged.seq, logged.woke.as_slice(), logged.at), (42, ["th_a".to_string()].as_slice(), 7));
        assert_eq!(taken_by(None, "in_ent_1_0"), None);
    }

    #[test]
    fn an_undeliverable_message_is_told_to_its_target_and_its_own_sender() {
        let told = |source: Option<&str>, host: Option<&str>| -> Vec<String> {
            undeliverable_events("msg_1", "th_t", source.map(str::to_string), host, "thread_archived", 5)
                .into_iter()
                .map(|e| {
                    assert_eq!(
                        (e.kind, e.reason.as_str(), e.message_id.as_deref(), e.at),
                        (EventKind::Undeliverable, "thread_archived", Some("msg_1"), 5)
                    );
                    e.thread_id
                })
                .collect()
        };
        assert_eq!(told(Some("th_s"), Some("")), ["th_t", "th_s"], "a sender of this home");
        assert_eq!(told(Some("th_s"), Some("PEER")), ["th_t"], "a peer's sender learns from its home");
        assert_eq!(told(None, None), ["th_t"], "the owner");
    }

    #[test]
    fn an_outcome_moves_an_entry_in_flight_or_one_still_to_be_asked_about() {
        use OutboxStatus::*;
        assert!(outcome_applies(Pending, 5) && outcome_applies(Accepted, 5));
        assert!(outcome_applies(Expired, 5), "expired, its target still to be asked");
        assert!(!outcome_applies(Expired, Millis::MAX), "expired and settled");
        assert!(!outcome_applies(Delivered, 5) && !outcome_applies(Rejected, 5), "final");
    }

    #[test]
    fn a_finished_turn_idles_its_thread_expires_its_requests_and_keeps_its_session() {
        let outcome = TurnOutcome {
            turn_id: "tu_1".into(),
            status: TurnStatus::Failed,
            output: "half".into(),
            error: "agent exited 1".into(),
            now: 9,
            usage: None,
            agent_session: Some("sess_7".into()),
        };
        let end = finish_turn("th_a", &outcome);
        let terminal = EventRecord {
            turn_id: Some("tu_1".into()),
            turn_status: Some(TurnStatus::Failed),
            reason: "agent exited 1".into(),
            ..event("th_a", EventKind::Terminal, 9)
        };
        assert_eq!(
            end,
            TurnEnd {
                thread_id: "th_a".into(),
                turn_id: "tu_1".into(),
                now: 9,
                permissions_expired: PERMISSION_OUTLIVED_TURN,
                agent_session: Some("sess_7".into()),
                terminal,
            }
        );
        let done = finish_turn(
            "th_a",
            &TurnOutcome { status: TurnStatus::Completed, error: String::new(), ..outcome },
        );
        assert_eq!(
            (done.terminal.turn_status, done.terminal.reason.as_str()),
            (Some(TurnStatus::Completed), "")
        );
    }

    #[test]
    fn an_interrupted_turn_fails_and_its_requests_outlived_kikid() {
        let end = fail_interrupted_turn("th_a", "tu_1", "kikid stopped during this turn", 5);
        assert_eq!(end.permissions_expired, PERMISSION_OUTLIVED_DAEMON);
        assert_eq!(end.agent_session, None, "its agent never said");
        assert_eq!(end.terminal.turn_status, Some(TurnStatus::Failed));
        assert_eq!(end.terminal.reason, "kikid stopped during this turn");
        assert_eq!((end.terminal.kind, end.terminal.at, end.now), (EventKind::Terminal, 5, 5));
        assert_eq!(end.terminal.turn_id.as_deref(), Some("tu_1"));
    }

    #[test]
    fn a_posts_key_replays_the_same_post_and_refuses_another() {
        let entry = EntryRecord {
            room_id: "rm_1".into(),
            seq: 3,
            id: "en_1".into(),
            author: None,
            content: "hi".into(),
            mentions: Vec::new(),
            woke: Vec::new(),
            at: 1,
            deliveries: Vec::new(),
        };
        assert!(matches!(post_by_key("h1", "h1", entry.clone()), PostOutcome::Replayed(e) if e == entry));
        let conflict = post_by_key("h2", "h1", entry);
        assert!(
            matches!(&conflict, PostOutcome::KeyConflict { entry_id } if entry_id == "en_1"),
            "{conflict:?}"
        );
    }

    #[test]
    fn a_turn_starts_when_asked_but_never_before_the_last_one_ended() {
        assert_eq!(turn_start(10, None), 10, "the thread's first turn");
        assert_eq!(turn_start(10, Some(7)), 10);
        assert_eq!(turn_start(10, Some(12)), 12, "asked for while the last one ran");
    }

    #[test]
    fn a_write_decides_by_the_clock_when_it_ran_later_than_asked() {
        assert_eq!(write_time(10, 15), 15, "it waited for other writes");
        assert_eq!(write_time(10, 8), 10, "asked for a later time than the clock's");
    }
}
