//! Threads: create, list, read, user input and archive — the API's rules on top of the
//! store. The gRPC layer only translates; every check lives here.

pub mod content;
pub mod cursor;
pub mod runner;
pub mod signals;
pub mod switches;
pub mod workspace;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kiki_proto::limits;
use tracing::instrument;

use crate::caller::Caller;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::store::{
    Archived, CommunicationSetting, InputKind, NewInput, NewThread, Store, ThreadQuery, ThreadRecord,
    TurnRecord, TurnStatus,
};
use crate::sync::uncancelled;
use crate::time::Clock;
use runner::TurnRunner;

/// Title of a thread created with neither a title nor a prompt.
pub const DEFAULT_TITLE: &str = "New thread";

/// The thread operations of one home.
#[derive(Clone)]
pub struct Threads {
    store: Arc<dyn Store>,
    config: Arc<Config>,
    runner: TurnRunner,
    home_id: String,
}

#[derive(Debug, Default, Clone)]
pub struct CreateRequest {
    pub cwd: Option<String>,
    pub profile: Option<String>,
    pub prompt: Option<String>,
    pub title: Option<String>,
    /// The prompt waits for the thread's first turn instead of starting it (a room's
    /// persona: its instructions go before the entry that first mentions it).
    pub hold_prompt: bool,
    /// The thread's own communication switch (a persona is made to talk in its room);
    /// `None`: the default, or off under a caller whose switch is off.
    pub communication: Option<CommunicationSetting>,
    /// An agent session the thread continues instead of starting one (`claude` profiles).
    pub resume_agent_session: Option<String>,
}

#[derive(Debug)]
pub struct Created {
    pub thread: ThreadRecord,
    pub prompt_started: bool,
}

/// How long a turn just claimed may take to reach the runner before a stop gives up on it.
const STARTING: Duration = Duration::from_secs(2);

/// A stopped turn (see [`Threads::stop`]).
#[derive(Debug)]
pub struct Stopped {
    pub turn_id: String,
    /// How it ended (`Cancelled`, or how it ended by itself first); `Running` if its end
    /// was not recorded within the wait (it is still being stopped).
    pub status: TurnStatus,
}

/// What became of user input (see [`Threads::say`]).
#[derive(Debug)]
pub struct Said {
    pub input_id: String,
    /// A turn started with it.
    pub turn_started: bool,
    /// Why none did; empty when one did.
    pub reason: String,
}

#[derive(Debug)]
pub struct ThreadPage {
    pub threads: Vec<ThreadRecord>,
    pub next_cursor: Option<String>,
}

/// A turn as ThreadRead shows it: oversized fields cut to a preview.
#[derive(Debug)]
pub struct TurnView {
    pub turn: TurnRecord,
    pub input_truncated: bool,
    pub output_truncated: bool,
    /// (content_ref, field, full UTF-16 length) of each cut field.
    pub content_refs: Vec<(String, &'static str, usize)>,
}

#[derive(Debug)]
pub struct TurnPage {
    pub thread: ThreadRecord,
    pub turns: Vec<TurnView>,
    pub next_cursor: Option<String>,
}

/// What a ThreadRead gives: a page of turns, or a segment of one oversized field.
#[derive(Debug)]
pub enum Read {
    Turns(TurnPage),
    Segment(Segment),
}

#[derive(Debug)]
pub struct Segment {
    pub thread: ThreadRecord,
    pub content_ref: String,
    pub text: String,
    pub offset: usize,
    pub total: usize,
    pub next: Option<String>,
}

impl Threads {
    pub fn new(store: Arc<dyn Store>, config: Arc<Config>, runner: TurnRunner, home_id: String) -> Self {
        Self { store, config, runner, home_id }
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub fn config(&self) -> &Arc<Config> {
        &self.config
    }

    pub fn runner(&self) -> &TurnRunner {
        &self.runner
    }

    /// The home's observer: its metrics and event feed.
    pub fn observer(&self) -> &Arc<crate::observe::Observer> {
        self.runner.observer()
    }

    /// The home's clock (the runner's).
    pub fn clock(&self) -> &Clock {
        self.runner.clock()
    }

    pub fn home_id(&self) -> &str {
        &self.home_id
    }

    /// Accepts an empty host, `local`, or this home's id; other homes need a bridge.
    pub fn resolve_host(&self, host_id: &str) -> Result<()> {
        if host_id.is_empty() || host_id == "local" || host_id.eq_ignore_ascii_case(&self.home_id) {
            Ok(())
        } else {
            Err(Error::NotFound(format!(
                "host {host_id:?} is not this home: this call acts on this home's threads only (another home's are reached by ThreadList, ThreadRead, ThreadSend and ThreadWait, over a bridge)"
            )))
        }
    }

    /// The thread of this home a reference names, checking its optional workspace.
    pub async fn named(&self, target: &kiki_proto::ThreadRef) -> Result<ThreadRecord> {
        self.get(&target.host_id, &target.workspace_id, &target.session_id).await
    }

    /// The thread a reference names, checking the optional workspace.
    pub async fn get(&self, host_id: &str, workspace_id: &str, session_id: &str) -> Result<ThreadRecord> {
        self.resolve_host(host_id)?;
        if session_id.is_empty() {
            return Err(Error::invalid("target.session_id", "must not be empty"));
        }
        match self.store.thread(session_id).await? {
            Some(t) if workspace_id.is_empty() || workspace_id == t.workspace_id => Ok(t),
            Some(_) => {
                Err(Error::NotFound(format!("thread {session_id} is not in workspace {workspace_id}")))
            }
            None => Err(Error::NotFound(format!("no thread {session_id} in this home"))),
        }
    }

    #[instrument(level = "debug", skip_all)]
    pub async fn create(&self, caller: &Caller, req: CreateRequest) -> Result<Created> {
        if let Some(prompt) = &req.prompt {
            limits::text("prompt", prompt, limits::PROMPT_MAX_CHARS)?;
        }
        if let Some(title) = &req.title {
            limits::text("title", title, limits::TITLE_MAX_CHARS)?;
            // Listed one per line: a title is one printable line, not blank.
            if title.chars().any(char::is_control) || title.trim().is_empty() {
                return Err(Error::invalid("title", "one line of printable characters, not blank"));
            }
        }
        let (profile, settings) =
            self.config.usable_profile(req.profile.as_deref()).map_err(|e| Error::invalid("profile", e))?;
        if let Some(session) = &req.resume_agent_session {
            limits::text("resume_agent_session", session, limits::AGENT_SESSION_MAX_CHARS)?;
            // It goes on the agent's command line: an id, never something read as an option.
            let id_like = session.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
            if !id_like || session.starts_with('-') {
                return Err(Error::invalid(
                    "resume_agent_session",
                    "a session id: letters, digits, '-', '_' and '.', not starting with '-'",
                ));
            }
            if !settings.executor.keeps_session() {
                return Err(Error::invalid(
                    "resume_agent_session",
                    format!(
                        "profile {profile:?} does not keep an agent session (a claude, codex or acp profile does)"
                    ),
                ));
            }
        }
        let parent = match caller.turn() {
            Some(turn) => Some(self.get("", "", &turn.thread_id).await?),
            None => None,
        };
        // A thread whose owner closed its peer tools must not reopen them through a thread
        // it creates: that one starts closed too.
        let communication = match (&parent, req.communication) {
            (Some(p), _) if p.communication == CommunicationSetting::Off => CommunicationSetting::Off,
            (_, Some(setting)) => setting,
            _ => CommunicationSetting::Default,
        };
        let cwd = match &req.cwd {
            Some(cwd) => workspace::checked_dir("cwd", cwd)?,
            None => match &parent {
                Some(parent) => workspace::root_of(Path::new(&parent.cwd)),
                None => {
                    return Err(Error::invalid(
                        "cwd",
                        "required when the caller is not a thread (the kiki CLI sends its working directory)",
                    ));
                }
            },
        };
        let title = match (&req.title, &req.prompt) {
            (Some(title), _) => title.clone(),
            (None, Some(prompt)) => title_from_prompt(prompt),
            (None, None) => DEFAULT_TITLE.to_string(),
        };
        let now = self.clock().now_ms();
        let new = NewThread {
            id: new_id("th"),
            workspace_id: workspace::id_of(&workspace::root_of(&cwd)),
            cwd: cwd.display().to_string(),
            title,
            profile,
            communication,
            agent_session: req.resume_agent_session.clone(),
            now,
        };
        let first = req.prompt.as_ref().map(|prompt| user_input(prompt, now));
        let prompt_started = first.is_some() && !req.hold_prompt;
        let (store, runner) = (self.store.clone(), self.runner.clone());
        let thread = uncancelled(async move {
            let thread = store.create_thread(&new, first.as_ref()).await?;
            if prompt_started {
                runner.kick(&thread.id);
            }
            Ok(thread)
        })
        .await?;
        Ok(Created { thread, prompt_started })
    }

    /// A page of enabled, unarchived threads, newest first. `scope` (a bridge grant limited
    /// to workspaces) keeps only threads of those workspaces.
    #[instrument(level = "debug", skip_all)]
    pub async fn list(
        &self,
        workspace_id: Option<String>,
        limit: Option<u32>,
        cursor: &str,
        scope: &[String],
    ) -> Result<ThreadPage> {
        let limit = limits::page_limit("limit", limit, limits::LIST_LIMIT_DEFAULT)?;
        let workspace_id = workspace_id.filter(|w| !w.is_empty());
        // A cursor is bound to its query: it names the workspace filter it came from, so a
        // page of one query is never continued as another's.
        let filter = workspace_id.clone().unwrap_or_default();
        let before_seq = if cursor.is_empty() {
            None
        } else {
            let parts = cursor::decode("cursor", "list", cursor, 2)?;
            if parts[1] != filter {
                let was = if parts[1].is_empty() { "no workspace filter".into() } else { parts[1].clone() };
                return Err(Error::invalid(
                    "cursor",
                    format!(
                        "continues a list with {was}, not this one: repeat the cursor's query, or start without a cursor"
                    ),
                ));
            }
            Some(cursor::decode_number("cursor", "list", &parts[0])?)
        };
        if let Some(w) = &workspace_id
            && !scope.is_empty()
            && !scope.contains(w)
        {
            return Ok(ThreadPage { threads: Vec::new(), next_cursor: None });
        }
        // A scope of one workspace is that workspace's index walk, not a filter over them all.
        let workspace_id = workspace_id.or_else(|| (scope.len() == 1).then(|| scope[0].clone()));
        let mut query = ThreadQuery { workspace_id, before_seq, limit: limit + 1 };
        let mut threads = Vec::new();
        // Keyset pages of the store, filtered to the scope, until a page is full.
        loop {
            let page = self.store.list_threads(&query).await?;
            let exhausted = page.len() < query.limit as usize;
            query.before_seq = page.last().map(|t| t.seq).or(query.before_seq);
            threads.extend(page.into_iter().filter(|t| scope.is_empty() || scope.contains(&t.workspace_id)));
            if exhausted || threads.len() > limit as usize {
                break;
            }
        }
        let next_cursor = if threads.len() > limit as usize {
            threads.truncate(limit as usize);
            threads.last().map(|t| cursor::encode("list", &[&t.seq.to_string(), &filter]))
        } else {
            None
        };
        Ok(ThreadPage { threads, next_cursor })
    }

    /// A page of ended turns, oldest first. Never starts or wakes anything.
    #[instrument(level = "debug", skip_all, fields(thread_id = %thread.id))]
    pub async fn read(&self, thread: ThreadRecord, limit: Option<u32>, cursor: &str) -> Result<TurnPage> {
        let limit = limits::page_limit("limit", limit, limits::READ_LIMIT_DEFAULT)?;
        let after = if cursor.is_empty() {
            0
        } else {
            let parts = cursor::decode("cursor", "read", cursor, 2)?;
            if parts[0] != thread.id {
                return Err(Error::invalid(
                    "cursor",
                    "belongs to another thread; restart from the first page",
                ));
            }
            let seq = cursor::decode_number("cursor", "read", &parts[1])?;
            if !self.store.ended_turn_exists(&thread.id, seq).await? {
                return Err(Error::FailedPrecondition(
                    "cursor: the thread's history was rewritten since this cursor was made; restart from the first page"
                        .into(),
                ));
            }
            seq
        };
        let mut turns = self.store.ended_turns(&thread.id, after, limit + 1).await?;
        let next_cursor = if turns.len() > limit as usize {
            turns.truncate(limit as usize);
            turns.last().map(|t| cursor::encode("read", &[&thread.id, &t.seq.to_string()]))
        } else {
            None
        };
        let turns = turns.into_iter().map(view).collect();
        Ok(TurnPage { thread, turns, next_cursor })
    }

    /// The newest `last` ended turns, oldest first. The page reaches the newest turn, so it
    /// has no next cursor. Read from the newest end: a long history costs nothing more.
    #[instrument(level = "debug", skip_all, fields(thread_id = %thread.id))]
    pub async fn read_last(&self, thread: ThreadRecord, last: u32) -> Result<TurnPage> {
        let last = limits::page_limit("last", Some(last), limits::READ_LIMIT_DEFAULT)?;
        let turns = self.store.last_ended_turns(&thread.id, last).await?;
        let turns = turns.into_iter().map(view).collect();
        Ok(TurnPage { thread, turns, next_cursor: None })
    }

    /// The agent's own session the thread continues, if its agent named one.
    pub async fn agent_session(&self, thread_id: &str) -> Result<Option<String>> {
        Ok(self.store.agent_session(thread_id).await?)
    }

    /// Whether `thread`'s peer communication is open now, and the switch that decides it.
    pub fn communication(&self, thread: &ThreadRecord) -> (bool, String) {
        switches::decide(&self.config, thread)
    }

    /// The thread a read is of, whichever shape it took.
    pub fn read_thread(read: &Read) -> &ThreadRecord {
        match read {
            Read::Turns(page) => &page.thread,
            Read::Segment(segment) => &segment.thread,
        }
    }

    /// ThreadRead: a page of `thread`'s ended turns (the oldest first, or with `last` the
    /// newest), or with `content_ref` one segment of an oversized field (`limit` does not go
    /// with it: segments have a fixed size).
    #[instrument(level = "debug", skip_all, fields(thread_id = %thread.id))]
    pub async fn read_any(
        &self,
        thread: ThreadRecord,
        limit: Option<u32>,
        cursor: &str,
        content_ref: &str,
        last: Option<u32>,
    ) -> Result<Read> {
        read_shape(limit, cursor, content_ref, last)?;
        if let Some(last) = last {
            return Ok(Read::Turns(self.read_last(thread, last).await?));
        }
        if content_ref.is_empty() {
            return Ok(Read::Turns(self.read(thread, limit, cursor).await?));
        }
        Ok(Read::Segment(self.read_content(thread, content_ref, cursor).await?))
    }

    /// One segment of an oversized turn field.
    pub async fn read_content(
        &self,
        thread: ThreadRecord,
        content_ref: &str,
        cursor: &str,
    ) -> Result<Segment> {
        let (turn_id, field) = content_ref
            .rsplit_once('.')
            .filter(|(t, f)| !t.is_empty() && (*f == "input" || *f == "output"))
            .ok_or_else(|| Error::invalid("content_ref", "not a content ref returned by ThreadRead"))?;
        let turn = self
            .store
            .turn(&thread.id, turn_id)
            .await?
            .filter(|t| t.status != crate::store::TurnStatus::Running)
            .ok_or_else(|| {
                Error::NotFound(format!(
                    "content ref {content_ref}: no such ended turn in thread {}",
                    thread.id
                ))
            })?;
        let text = if field == "input" { turn.input } else { turn.output };
        let total = content::utf16_len(&text);
        let offset = if cursor.is_empty() {
            0
        } else {
            let parts = cursor::decode("cursor", "segment", cursor, 2)?;
            if parts[1] != content_ref {
                return Err(Error::invalid(
                    "cursor",
                    "belongs to another content ref; restart without a cursor",
                ));
            }
            cursor::decode_number("cursor", "segment", &parts[0])? as usize
        };
        let start = content::byte_index(&text, offset).ok_or_else(|| {
            Error::invalid("cursor", "does not point into this content; restart without a cursor")
        })?;
        let piece = content::prefix(&text[start..], limits::SEGMENT_UTF16);
        let end = offset + content::utf16_len(piece);
        let next = (end < total).then(|| cursor::encode("segment", &[&end.to_string(), content_ref]));
        Ok(Segment {
            thread,
            content_ref: content_ref.to_string(),
            text: piece.to_string(),
            offset,
            total,
            next,
        })
    }

    /// External user input: queued durably, then a turn starts — or it waits, for the
    /// running turn or because the thread's budget is spent, and the answer says which.
    #[instrument(level = "debug", skip_all, fields(thread_id = %target.session_id))]
    pub async fn say(&self, caller: &Caller, target: &kiki_proto::ThreadRef, content: &str) -> Result<Said> {
        caller.owner_only("thread say")?;
        let thread = &self.named(target).await?;
        limits::text("content", content, limits::CONTENT_MAX_CHARS)?;
        if thread.archived {
            return Err(Error::FailedPrecondition(format!(
                "thread {} is archived; unarchive it first",
                thread.id
            )));
        }
        let input = user_input(content, self.clock().now_ms());
        let (store, runner, thread_id) = (self.store.clone(), self.runner.clone(), thread.id.clone());
        let running = uncancelled(async move {
            let running = store
                .enqueue_input(&thread_id, &input)
                .await?
                .ok_or_else(|| Error::NotFound(format!("no thread {thread_id} in this home")))?;
            runner.kick(&thread_id);
            Ok((running, input.id))
        });
        let (running, input_id) = running.await?;
        if running {
            let reason = "a turn is running: the thread's next turn takes the input".to_string();
            return Ok(Said { input_id, turn_started: false, reason });
        }
        // An idle thread whose budget is spent starts no turn (the claim refuses it; the
        // input waits). Its cost changes only when a turn ends, so this is what the claim saw.
        if let Some(reason) = self.runner.budget_spent(thread).await? {
            return Ok(Said { input_id, turn_started: false, reason });
        }
        Ok(Said { input_id, turn_started: true, reason: String::new() })
    }

    /// Input for a thread from the home itself (a background task's end, a cron's fire):
    /// queued durably, then a turn starts if the thread is idle.
    pub async fn queue_input(&self, thread_id: &str, content: &str) -> Result<()> {
        let input = user_input(content, self.clock().now_ms());
        let (store, runner, thread_id) = (self.store.clone(), self.runner.clone(), thread_id.to_string());
        uncancelled(async move {
            store
                .enqueue_input(&thread_id, &input)
                .await?
                .ok_or_else(|| Error::NotFound(format!("no thread {thread_id} in this home")))?;
            runner.kick(&thread_id);
            Ok(())
        })
        .await
    }

    /// The owner stops the thread's running turn (`kiki thread stop`): its agent is
    /// interrupted and the turn ends `cancelled`, its agent session kept to resume; input it
    /// had not taken stays queued. Waits up to `wait` for the turn's end to be recorded.
    #[instrument(level = "debug", skip_all, fields(thread_id = %target.session_id))]
    pub async fn stop(
        &self,
        caller: &Caller,
        target: &kiki_proto::ThreadRef,
        wait: Duration,
    ) -> Result<Stopped> {
        caller.owner_only("thread stop")?;
        let thread = &self.named(target).await?;
        let no_turn = || {
            Error::FailedPrecondition(format!("thread {} has no running turn: nothing to stop", thread.id))
        };
        // A turn claimed an instant ago is the runner's once its agent is being started.
        // Real time here: these bound a process being started and stopped, not a timing
        // of kiki's (see crate::time).
        let started = tokio::time::Instant::now();
        let stopping = loop {
            if let Some(stopping) = self.runner.stop(&thread.id) {
                break stopping;
            }
            let running = matches!(self.store.latest_turn(&thread.id).await?, Some((_, TurnStatus::Running)));
            if !running || started.elapsed() > STARTING {
                return Err(no_turn());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let ended = tokio::time::timeout(wait, stopping.ended.cancelled()).await.is_ok();
        let status = match self.store.turn(&thread.id, &stopping.turn_id).await? {
            Some(turn) if ended => turn.status,
            _ => TurnStatus::Running,
        };
        Ok(Stopped { turn_id: stopping.turn_id, status })
    }

    #[instrument(level = "debug", skip_all, fields(thread_id = %thread_id))]
    pub async fn set_archived(&self, thread_id: &str, archived: bool) -> Result<Archived> {
        self.store
            .set_archived(thread_id, archived, self.clock().now_ms())
            .await?
            .ok_or_else(|| Error::NotFound(format!("no thread {thread_id} in this home")))
    }
}

/// The ThreadRead fields that do not go together, refused before anything is read (and
/// before a read goes to another home): `last` is a page of its own (the newest turns, no
/// cursor, its own size), and segments of `content_ref` have a fixed size.
pub fn read_shape(limit: Option<u32>, cursor: &str, content_ref: &str, last: Option<u32>) -> Result<()> {
    if let Some(last) = last {
        let given = [
            ("limit", limit.is_some()),
            ("cursor", !cursor.is_empty()),
            ("content_ref", !content_ref.is_empty()),
        ];
        let clashing: Vec<&str> = given.iter().filter(|(_, set)| *set).map(|(field, _)| *field).collect();
        if !clashing.is_empty() {
            return Err(Error::invalid(
                "last",
                format!(
                    "does not go with {} (last reads the newest turns in one page, without a cursor)",
                    clashing.join(" or ")
                ),
            ));
        }
        limits::page_limit("last", Some(last), limits::READ_LIMIT_DEFAULT)?;
    }
    if !content_ref.is_empty() && limit.is_some() {
        return Err(Error::invalid("limit", "not used with content_ref (segments have a fixed size)"));
    }
    Ok(())
}

fn view(turn: TurnRecord) -> TurnView {
    let mut content_refs = Vec::new();
    let mut cut = |text: &mut String, field: &'static str, turn_id: &str| {
        let len = content::utf16_len(text);
        if len <= limits::SEGMENT_UTF16 {
            return false;
        }
        content_refs.push((format!("{turn_id}.{field}"), field, len));
        let preview = content::prefix(text, limits::PREVIEW_UTF16).len();
        text.truncate(preview);
        true
    };
    let mut turn = turn;
    let id = turn.id.clone();
    let input_truncated = cut(&mut turn.input, "input", &id);
    let output_truncated = cut(&mut turn.output, "output", &id);
    TurnView { turn, input_truncated, output_truncated, content_refs }
}

pub(crate) fn user_input(content: &str, now: i64) -> NewInput {
    NewInput {
        id: new_id("in"),
        kind: InputKind::User,
        content: content.to_string(),
        message_id: None,
        source: None,
        room: None,
        via: None,
        now,
    }
}

/// `PREFIX_` + a lower-case ULID: unique, and sorts by creation time.
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", ulid::Ulid::new().to_string().to_lowercase())
}

/// Whether `id` has the shape [`new_id`] gives a message: `msg_` and a lowercase ULID (what
/// a peer home may name a bridged message by).
pub fn is_message_id(id: &str) -> bool {
    is_id("msg", id)
}

/// Whether `id` has the shape [`new_id`] gives a thread: `th_` and a lowercase ULID (what a
/// peer home may name the source thread of a bridged message by: a plain id of its own
/// threads, never a path through other homes).
pub fn is_thread_id(id: &str) -> bool {
    is_id("th", id)
}

fn is_id(prefix: &str, id: &str) -> bool {
    id.strip_prefix(prefix).and_then(|rest| rest.strip_prefix('_')).is_some_and(|ulid| {
        !ulid.bytes().any(|b| b.is_ascii_uppercase()) && ulid::Ulid::from_string(ulid).is_ok()
    })
}

/// The first non-blank line of the prompt, trimmed and cut to 80 characters.
fn title_from_prompt(prompt: &str) -> String {
    let printable = |line: &str| line.chars().filter(|c| !c.is_control()).collect::<String>();
    let line = prompt.lines().map(|l| printable(l).trim().to_string()).find(|l| !l.is_empty());
    line.unwrap_or_else(|| DEFAULT_TITLE.into()).chars().take(limits::DERIVED_TITLE_CHARS).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn title_is_first_line_cut_to_80() {
        assert_eq!(title_from_prompt("fix the build\nthen tests"), "fix the build");
        assert_eq!(title_from_prompt("\n  \n  second  \n"), "second");
        let long = "é".repeat(100);
        assert_eq!(title_from_prompt(&long).chars().count(), 80);
    }

    #[test]
    fn a_message_id_is_what_new_id_makes_for_a_message() {
        assert!(is_message_id(&new_id("msg")));
        assert!(!is_message_id(&new_id("th")));
        assert!(is_thread_id(&new_id("th")));
        assert!(!is_thread_id(&new_id("msg")));
        assert!(!is_thread_id(&format!("AHOME/{}", new_id("th"))), "a path through a home");
        assert!(!is_message_id(&new_id("msg").to_uppercase()));
        assert!(!is_message_id("msg_01ARZ3NDEKTSV4RRFFQ69G5FA"), "25 characters");
        assert!(!is_message_id("msg_01arz3ndektsv4rrffq69g5fa\n"));
        assert!(!is_message_id("msg_01arz3ndektsv4rrffq69g5fau"), "u is no Crockford digit");
        assert!(!is_message_id(""));
    }
}
