//! Turns and their input: queued input, claiming a turn (it takes what is queued), ending it, the agents of running turns.

use async_trait::async_trait;

use super::*;

/// A turn found `running` at startup: the last kikid stopped during it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterruptedTurn {
    pub turn_id: String,
    /// `None` for a turn without an `exec` agent; empty for an `exec` turn whose agent was not
    /// described yet (it never got its input); else the agent's record (see
    /// `executors::agent`).
    pub agent: Option<String>,
}

words! {
    InputKind {
        /// The user or another external client.
        User => "user",
        /// A ThreadSend message.
        Message => "message",
    }
}

/// Where a message came from, when a peer thread sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceRef {
    /// Empty for this home.
    pub host_id: String,
    pub thread_id: String,
    /// The source thread's workspace (empty for an external client's message).
    pub workspace_id: String,
}

/// Input waiting for (or taken by) a turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewInput {
    pub id: String,
    pub kind: InputKind,
    pub content: String,
    pub message_id: Option<String>,
    pub source: Option<SourceRef>,
    /// Set for a room entry: its room and its id there.
    pub room: Option<RoomTag>,
    /// The home whose bridge brought it (`None`: this home's own). For an entry of a room of
    /// another home, the room's home: the carrying bridge decides, the source is attribution.
    pub via: Option<String>,
    pub now: Millis,
}

/// The room entry an input is: the room's id and the entry's id in the room's log (a
/// message that brought it over a bridge has an id of its own).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoomTag {
    pub room: String,
    pub entry: String,
}

pub type InputRecord = NewInput;

/// How ThreadInbox names a queued message: its message id, or for a post of a room of this
/// home (which has none) its entry's id.
pub fn inbox_id(input: &InputRecord) -> Option<&str> {
    input.message_id.as_deref().or(input.room.as_ref().map(|r| r.entry.as_str()))
}

/// What ThreadRead shows of one input item (its text is part of the turn's `input`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnItem {
    pub kind: InputKind,
    pub message_id: Option<String>,
    pub source: Option<SourceRef>,
    pub room: Option<RoomTag>,
}

/// A turn just started, with the full items it took (executors need their text).
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimedTurn {
    pub turn: TurnRecord,
    pub inputs: Vec<InputRecord>,
}

impl ClaimedTurn {
    /// The turn a claim wrote: number `seq` of `thread_id`, running since `now` with `input`
    /// rendered from `inputs`.
    pub fn started(
        thread_id: &str,
        turn_id: &str,
        seq: i64,
        input: String,
        now: Millis,
        inputs: Vec<InputRecord>,
    ) -> Self {
        let items = inputs
            .iter()
            .map(|i| TurnItem {
                kind: i.kind,
                message_id: i.message_id.clone(),
                source: i.source.clone(),
                room: i.room.clone(),
            })
            .collect();
        let turn = TurnRecord {
            id: turn_id.to_string(),
            thread_id: thread_id.to_string(),
            seq,
            status: TurnStatus::Running,
            input,
            output: String::new(),
            error: String::new(),
            started_at: now,
            ended_at: None,
            items,
            usage: None,
        };
        Self { turn, inputs }
    }
}

words! {
    TurnStatus {
        Running => "running",
        Completed => "completed",
        Failed => "failed",
        Cancelled => "cancelled",
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct TurnRecord {
    pub id: String,
    pub thread_id: String,
    /// 1, 2, … within the thread.
    pub seq: i64,
    pub status: TurnStatus,
    /// The input exactly as the executor received it.
    pub input: String,
    pub output: String,
    pub error: String,
    pub started_at: Millis,
    pub ended_at: Option<Millis>,
    /// The items the input was made of, in order.
    pub items: Vec<TurnItem>,
    /// Tokens and cost, when its agent reported them.
    pub usage: Option<TurnUsage>,
}

/// A piece of a turn's progress, as it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnPart {
    pub seq: i64,
    pub kind: PartKind,
    pub text: String,
    pub at: Millis,
}

words! {
    /// A piece of a running turn: the agent's text, a tool call, or a tool's result.
    PartKind {
        Text => "text",
        Tool => "tool",
        ToolResult => "tool_result",
    }
}

/// Tokens and cost of one turn, as its agent reported them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TurnUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: f64,
}

/// How to start a turn (see [`TurnStore::claim_turn`]); the runner makes one per thread.
#[derive(Debug, Clone)]
pub struct TurnClaim {
    pub turn_id: String,
    /// Whether peer messages may be taken (the thread's communication is on).
    pub take_messages: bool,
    pub render: RenderInput,
    /// The turn runs an `exec` agent: its agent record starts empty until the agent is
    /// described, so a restart knows, without the config, that an empty record means the
    /// agent never got its input.
    pub exec: bool,
    /// The profile's `max_cost_usd`: a thread whose turns have cost this much starts none
    /// (its input waits).
    pub budget: Option<f64>,
    /// The replica claiming it (see `ReplicaStore`): the turn is its while its heartbeat
    /// is younger than the lease.
    pub replica: String,
    /// The SHA-256 (hex) of the token its agent gets (empty: none), so that any replica
    /// knows the turn a call with that token comes from.
    pub token_hash: String,
}

/// How a turn ended.
#[derive(Debug, Clone)]
pub struct TurnOutcome {
    pub turn_id: String,
    pub status: TurnStatus,
    pub output: String,
    pub error: String,
    pub now: Millis,
    pub usage: Option<TurnUsage>,
    /// The agent's own session, to resume at the thread's next turn.
    pub agent_session: Option<String>,
}

/// Renders the items a turn takes into the input its executor receives.
pub type RenderInput = fn(&[InputRecord]) -> String;

#[async_trait]
pub trait TurnStore: Send + Sync {
    /// Queues input for the thread's next turn. `None` if the thread does not exist, else
    /// whether a turn was running when the input was queued.
    async fn enqueue_input(&self, thread_id: &str, input: &NewInput) -> StoreResult<Option<bool>>;

    /// If the thread is not archived, has no running turn and has queued input, starts the
    /// turn `claim.turn_id` with all of it (in order), marks the thread running and its
    /// messages delivered. Peer messages (with a source thread) are taken only if
    /// `claim.take_messages` (the thread's communication is on); otherwise they stay queued.
    /// Messages from a peer home whose inbound bridge is `disabled` stay queued too. User
    /// input and external messages are always taken.
    async fn claim_turn(
        &self,
        thread_id: &str,
        claim: TurnClaim,
        now: Millis,
    ) -> StoreResult<Option<ClaimedTurn>>;

    /// The messages queued for the thread that would wake it and that a turn may take now
    /// (see [`rules::plan_inbox`]), oldest first: what an agent that takes input mid-turn
    /// is given.
    async fn inbox(&self, thread_id: &str, take_messages: bool) -> StoreResult<Vec<InputRecord>>;

    /// Puts those of the queued messages `ids` (see [`inbox_id`]) that are still queued and
    /// that the inbox may give (see [`rules::plan_inbox`]; overdue bridged messages expire
    /// first) into the thread's turn `turn_id` while it runs: they are delivered now (with their
    /// receipts), their text (by `render`) is appended to the turn's input, and no later turn
    /// takes them. Returns the ids taken (none if the turn has ended).
    async fn take_into_turn(
        &self,
        thread_id: &str,
        turn_id: &str,
        take_messages: bool,
        ids: Vec<String>,
        render: RenderInput,
        now: Millis,
    ) -> StoreResult<Vec<String>>;

    /// Appends a piece of a running turn's progress (`kind`: text, tool, tool_result).
    async fn add_turn_part(&self, turn_id: &str, kind: PartKind, text: &str, now: Millis) -> StoreResult<()>;

    /// A turn's parts with `seq > after`, oldest first, at most `limit`.
    async fn turn_parts(&self, turn_id: &str, after: i64, limit: u32) -> StoreResult<Vec<TurnPart>>;

    /// The thread's newest turn: its id and whether it still runs.
    async fn latest_turn(&self, thread_id: &str) -> StoreResult<Option<(String, TurnStatus)>>;

    /// The agent session the thread's next turn resumes, if it has one.
    async fn agent_session(&self, thread_id: &str) -> StoreResult<Option<String>>;

    /// Gives the thread an agent session to resume (a thread created from an existing one).
    async fn set_agent_session(&self, thread_id: &str, session: &str, now: Millis) -> StoreResult<()>;

    /// What the thread's agents (`None`: all the home's) have cost so far, in dollars.
    async fn cost(&self, thread_id: Option<&str>) -> StoreResult<f64>;

    /// Records how a running turn ended (with its usage, and the agent session to resume
    /// next), marks its thread idle and logs a `terminal` event.
    async fn finish_turn(&self, outcome: &TurnOutcome) -> StoreResult<()>;

    /// Records the process of a running turn's agent (an opaque record, see
    /// `executors::agent`); a turn that has ended is left alone.
    async fn record_agent(&self, turn_id: &str, agent: &str) -> StoreResult<()>;

    /// The turns still `running` whose replica is gone — none of the replicas with a
    /// heartbeat at or after `live_since` claimed them (at startup after a crash, and as a
    /// replica takes over another's work) — with their recorded agent.
    async fn interrupted_turns(&self, live_since: Millis) -> StoreResult<Vec<InterruptedTurn>>;

    /// Marks those turns failed with `reason` (see [`TurnStore::interrupted_turns`]), with a
    /// `terminal` event each, their threads idle again and their agents' pending permission
    /// requests expired. Returns the threads concerned.
    async fn fail_interrupted_turns(
        &self,
        reason: &str,
        now: Millis,
        live_since: Millis,
    ) -> StoreResult<Vec<String>>;

    /// The running turn whose token hashes to `token_hash` (see [`TurnClaim::token_hash`]):
    /// its thread and id. `None` once it has ended.
    async fn turn_of_token(&self, token_hash: &str) -> StoreResult<Option<(String, String)>>;

    /// Threads with queued input and no running turn.
    async fn threads_with_queued_input(&self) -> StoreResult<Vec<String>>;

    async fn running_turns(&self) -> StoreResult<u64>;

    /// Ended turns with `seq > after_seq`, oldest first, at most `limit`.
    async fn ended_turns(&self, thread_id: &str, after_seq: i64, limit: u32) -> StoreResult<Vec<TurnRecord>>;

    /// The newest `limit` ended turns, oldest first: read from the newest end, so a long
    /// history costs no more than a short one.
    async fn last_ended_turns(&self, thread_id: &str, limit: u32) -> StoreResult<Vec<TurnRecord>>;

    async fn turn(&self, thread_id: &str, turn_id: &str) -> StoreResult<Option<TurnRecord>>;

    /// The `seq` of the thread's turn that ended at `seq` exists (cursor validation).
    async fn ended_turn_exists(&self, thread_id: &str, seq: i64) -> StoreResult<bool>;

    /// The turn's agent never received its input: its messages become undeliverable with
    /// `reason`, with `undeliverable` events on the target and each source thread. Returns
    /// the threads that got events.
    async fn undeliver_turn_messages(
        &self,
        turn_id: &str,
        reason: &str,
        now: Millis,
    ) -> StoreResult<Vec<String>>;
}
