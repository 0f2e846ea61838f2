//! `kiki thread …`: create, list, read, send to, wait on, set, say to, stop and archive threads.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::{ArgGroup, Subcommand};
use kiki_client::Client;
use kiki_proto as pb;
use kiki_proto::limits;

use crate::args::{absolute_if_dir, cursors_by_reference, read_text, reference};
use crate::connect::connect;
use crate::output::print_json;
use crate::render::{shell_word, show_turn, show_turns, show_wait};

/// How many turns `kiki thread read` shows a person by default: the newest, like a chat.
const READ_LAST_DEFAULT: u32 = 20;

#[derive(Subcommand)]
pub enum ThreadCommand {
    /// Create a thread; with a prompt its first turn starts at once.
    #[command(group(ArgGroup::new("first_prompt").args(["prompt", "prompt_file"])))]
    Create {
        /// Absolute path of an existing directory (default: the current directory).
        #[arg(long)]
        cwd: Option<PathBuf>,
        /// The profile whose agent runs the thread's turns (default: the home's default one).
        #[arg(long)]
        profile: Option<String>,
        /// One line of at most 200 characters (default: the prompt's first line, else
        /// `New thread`).
        #[arg(long)]
        title: Option<String>,
        /// The first turn's input, at most 100,000 characters: the turn starts at once.
        #[arg(long, conflicts_with = "prompt_file")]
        prompt: Option<String>,
        /// Read the prompt from a file ('-' for stdin).
        #[arg(long)]
        prompt_file: Option<PathBuf>,
        /// Wait for the first turn to end, then print it as `kiki thread read` does (needs a
        /// prompt; with --json: {"thread": CREATED, "turn": TURN}).
        #[arg(long, requires = "first_prompt")]
        wait: bool,
        /// Continue this existing agent session (the session id of a `claude`, `codex` or `acp`
        /// profile's agent) instead of starting a new one.
        #[arg(long)]
        resume_agent_session: Option<String>,
    },
    /// List enabled, unarchived threads, newest first.
    List {
        /// The threads of the home behind this bridge (its id or local name), not this home's.
        #[arg(long)]
        bridge: Option<String>,
        /// Only one workspace's threads: its id (ws_…) or a directory in it (across a bridge,
        /// the id only).
        #[arg(long)]
        workspace: Option<String>,
        /// Threads per page, 1-100 (default 50).
        #[arg(long)]
        limit: Option<u32>,
        /// The next page: the cursor the previous page printed.
        #[arg(long)]
        cursor: Option<String>,
    },
    /// Read a thread's ended turns: as text the newest 20; with --limit, --cursor or --json
    /// pages from the oldest (or one content ref in segments).
    #[command(long_about = "Read a thread's ended turns, oldest first on the page.\n\n\
            As text, without --limit, --cursor or --content-ref, it shows the newest 20 turns \
            (--last N for another number). --limit and --cursor page from the oldest turn; \
            with --json and none of these flags the page starts at the oldest turn too (the \
            API's default), so scripts see the order they always saw.")]
    Read {
        /// SESSION or HOST/SESSION.
        reference: String,
        /// The newest N turns, 1-100, oldest first (text default: 20); not with --limit,
        /// --cursor or --content-ref.
        #[arg(long, conflicts_with_all = ["limit", "cursor", "content_ref"])]
        last: Option<u32>,
        /// Turns per page from the oldest, 1-100 (default 20).
        #[arg(long)]
        limit: Option<u32>,
        /// The next page (or with --content-ref the next segment): the cursor printed last.
        #[arg(long)]
        cursor: Option<String>,
        /// A field a page cut short, TURN_ID.input or TURN_ID.output: read it whole, in
        /// segments.
        #[arg(long)]
        content_ref: Option<String>,
        /// With --content-ref: read every segment and print the whole field once.
        #[arg(long, requires = "content_ref", conflicts_with = "cursor")]
        all: bool,
        /// After the newest turns, follow the thread: each turn's progress (the agent's text,
        /// tool calls and results) as it runs, until interrupted (with --json: one JSON line
        /// per part).
        #[arg(long, conflicts_with_all = ["limit", "cursor", "content_ref"])]
        follow: bool,
        /// The thread's session-tool calls (name, arguments, outcome, duration) instead of its
        /// turns, oldest first: a page of --limit from --cursor.
        #[arg(long, conflicts_with_all = ["last", "content_ref", "follow"])]
        tools: bool,
    },
    /// Send a message to a thread: durable, idempotent by --key. From inside a turn the
    /// message is attributed to that turn's thread.
    Send {
        /// The thread: SESSION or HOST/SESSION.
        reference: String,
        /// Idempotency key: a retry with the same key and content never sends twice.
        #[arg(long)]
        key: String,
        /// The message, at most 100,000 characters.
        #[arg(long, conflicts_with = "content_file", required_unless_present = "content_file")]
        content: Option<String>,
        /// Read the content from a file ('-' for stdin).
        #[arg(long)]
        content_file: Option<PathBuf>,
    },
    /// Wait for events (terminal, attention, lifecycle, undeliverable) on 1-8 threads. Without
    /// a cursor a wait starts where the thread's latest turn started, or from now for a thread
    /// that never ran one: `kiki attention list` shows attention raised before.
    Wait {
        /// The threads, 1-8 of them: SESSION or HOST/SESSION each.
        #[arg(required = true)]
        references: Vec<String>,
        /// How long to wait for an event, 0-60000 ms (default 30000; 0 checks once).
        #[arg(long)]
        timeout_ms: Option<u32>,
        /// REF=CURSOR from a previous wait (split at the first '='); repeat per thread.
        #[arg(long = "cursor")]
        cursors: Vec<String>,
    },
    /// Set a thread's peer-communication switch.
    Set {
        /// One of this home's threads: SESSION.
        reference: String,
        /// Whether the thread takes and sends peer messages; `default` leaves it to its
        /// profile and the config.
        #[arg(long, value_parser = ["on", "off", "default"])]
        communication: String,
    },
    /// User input to a thread: starts a turn (or waits for the running one).
    Say {
        /// One of this home's threads: SESSION.
        reference: String,
        /// The input, as if the user typed it (at most 100,000 characters).
        text: String,
    },
    /// Stop a thread's running turn: its agent is interrupted, the turn ends `cancelled`,
    /// its agent session stays resumable and the input it had not taken stays queued.
    Stop {
        /// One of this home's threads: SESSION.
        reference: String,
    },
    /// Archive a thread: it leaves ThreadList, keeps its history.
    Archive {
        /// One of this home's threads: SESSION.
        reference: String,
    },
    /// Bring an archived thread back.
    Unarchive {
        /// One of this home's threads: SESSION.
        reference: String,
    },
}

pub async fn run(home: &Path, command: ThreadCommand, json: bool) -> Result<()> {
    let client = connect(home).await?;
    match command {
        ThreadCommand::Create { cwd, profile, title, prompt, prompt_file, wait, resume_agent_session } => {
            let prompt = match prompt_file {
                Some(file) => Some(read_text(&file, "--prompt-file", limits::PROMPT_MAX_CHARS)?),
                None => prompt,
            };
            let cwd = match cwd {
                Some(dir) => std::path::absolute(&dir).with_context(|| format!("--cwd {}", dir.display()))?,
                None => std::env::current_dir().context("the current directory")?,
            };
            let request = pb::ThreadCreateRequest {
                cwd: Some(cwd.display().to_string()),
                profile,
                prompt,
                title,
                resume_agent_session,
            };
            create(&client, request, wait, json).await
        }
        ThreadCommand::List { bridge, workspace, limit, cursor } => {
            list(&client, bridge, workspace, limit, cursor, json).await
        }
        ThreadCommand::Read { reference: target, last, follow: true, .. } => {
            let target = reference(&target)?;
            if !json {
                let last = last.or(Some(READ_LAST_DEFAULT));
                let request =
                    pb::ThreadReadRequest { target: Some(target.clone()), last, ..Default::default() };
                read(&client, request, json).await?;
            }
            follow(&client, target, json).await
        }
        ThreadCommand::Read { reference: target, limit, cursor, tools: true, .. } => {
            let request = pb::ThreadReadRequest {
                target: Some(reference(&target)?),
                limit,
                cursor: cursor.unwrap_or_default(),
                tool_calls: true,
                ..Default::default()
            };
            read_tool_calls(&client, request, json).await
        }
        ThreadCommand::Read { reference: target, last, limit, cursor, content_ref, all, .. } => {
            // A person reads a thread from its end; a script (--json) keeps the API's order.
            let paged = limit.is_some() || cursor.is_some() || content_ref.is_some();
            let last = last.or((!json && !paged).then_some(READ_LAST_DEFAULT));
            let request = pb::ThreadReadRequest {
                target: Some(reference(&target)?),
                limit,
                cursor: cursor.unwrap_or_default(),
                content_ref: content_ref.unwrap_or_default(),
                last,
                tool_calls: false,
            };
            if all {
                read_whole_field(&client, request, json).await
            } else {
                read(&client, request, json).await
            }
        }
        ThreadCommand::Send { reference, key, content, content_file } => {
            send(&client, &reference, key, content, content_file, json).await
        }
        ThreadCommand::Wait { references, timeout_ms, cursors } => {
            wait(&client, &references, timeout_ms, &cursors, json).await
        }
        ThreadCommand::Set { reference, communication } => {
            set(&client, &reference, &communication, json).await
        }
        ThreadCommand::Say { reference, text } => say(&client, &reference, text, json).await,
        ThreadCommand::Stop { reference } => stop(&client, &reference, json).await,
        ThreadCommand::Archive { reference } => archive(&client, &reference, true, json).await,
        ThreadCommand::Unarchive { reference } => archive(&client, &reference, false, json).await,
    }
}

/// `kiki thread read --tools`: a page of the thread's session-tool calls.
async fn read_tool_calls(client: &Client, request: pb::ThreadReadRequest, json: bool) -> Result<()> {
    let page = client.threads().thread_read(request).await?.into_inner();
    if json {
        print_json(&serde_json::json!({ "tool_calls": page.tool_calls, "next_cursor": page.next_cursor }));
        return Ok(());
    }
    for call in &page.tool_calls {
        let outcome =
            pb::ToolOutcome::try_from(call.outcome).map(|o| kiki_proto::Word::word(&o)).unwrap_or_default();
        let by = if call.turn_id.is_empty() { "owner".to_string() } else { call.turn_id.clone() };
        outln!("#{} {} {}  {} in {} ms  ({by})", call.seq, call.at, call.name, outcome, call.duration_ms);
        outln!("  {}", call.arguments);
        if let Some(first) = call.result.lines().next() {
            outln!("  → {first}");
        }
    }
    if let Some(cursor) = &page.next_cursor {
        outln!("more: --cursor {cursor}");
    }
    Ok(())
}

/// `kiki thread create`; with `wait`, also waits for the first turn and prints it.
async fn create(client: &Client, request: pb::ThreadCreateRequest, wait: bool, json: bool) -> Result<()> {
    let created = client.threads().thread_create(request).await?.into_inner();
    if !json {
        // Before any wait: a person sees the new thread while its agent works.
        outln!("{}  {}", created.id, created.title);
        outln!("  profile {}, cwd {}", created.profile, created.cwd);
        if created.prompt_started {
            outln!("  first turn started");
        }
    }
    if !wait {
        if json {
            print_json(&created);
        }
        return Ok(());
    }
    // clap lets --wait through only with a prompt, so a first turn has started.
    let turn = match first_turn(client, &created.id).await {
        Ok(turn) => turn,
        Err(e) => {
            // The error is the wait's: the thread stands, and its id must not be lost.
            eprintln!("kiki: thread {} was created, but waiting for its first turn failed", created.id);
            return Err(e);
        }
    };
    if json {
        print_json(&CreatedAndTurn { thread: &created, turn: &turn });
    } else {
        show_turn(&turn);
    }
    Ok(())
}

/// What `kiki --json thread create --wait` prints: the create response and the first turn
/// as ThreadRead shows it.
#[derive(serde::Serialize)]
struct CreatedAndTurn<'a> {
    thread: &'a pb::ThreadCreateResponse,
    turn: &'a pb::Turn,
}

/// The first turn of the new thread `thread_id`, once it has ended: ThreadWait until its
/// `terminal` event (a wait without a cursor starts where the thread's latest turn started,
/// so a turn that ended before the first call is seen too; other events are passed over,
/// their cursor carried on), then that turn as ThreadRead shows it.
async fn first_turn(client: &Client, thread_id: &str) -> Result<pb::Turn> {
    let target = pb::ThreadRef { session_id: thread_id.to_string(), ..Default::default() };
    let mut cursors = HashMap::new();
    let ended = loop {
        let request = pb::ThreadWaitRequest {
            targets: vec![target.clone()],
            timeout_ms: Some(limits::WAIT_TIMEOUT_MAX_MS),
            cursors: cursors.clone(),
        };
        let waited = client.threads().thread_wait(request).await?.into_inner();
        let Some(result) = waited.results.into_iter().next() else {
            bail!("the home answered a wait on {thread_id} without its result");
        };
        if let Some(event) = result.events.iter().find(|e| e.kind() == pb::EventKind::Terminal) {
            break event.turn_id.clone();
        }
        cursors.insert(thread_id.to_string(), result.cursor);
    };
    // The first turn is the oldest: the first page of one turn holds it.
    let request = pb::ThreadReadRequest { target: Some(target), limit: Some(1), ..Default::default() };
    let page = client.threads().thread_read(request).await?.into_inner();
    match page.turns.into_iter().next() {
        Some(turn) if turn.id == ended => Ok(turn),
        _ => bail!("turn {ended} of thread {thread_id} ended, but is not its first turn"),
    }
}

async fn list(
    client: &Client,
    bridge: Option<String>,
    workspace: Option<String>,
    limit: Option<u32>,
    cursor: Option<String>,
    json: bool,
) -> Result<()> {
    let workspace = workspace.map(absolute_if_dir);
    // The next page's command repeats this one's filters.
    let more = [("--bridge", &bridge), ("--workspace", &workspace)]
        .iter()
        .filter_map(|(flag, value)| value.as_ref().map(|v| format!("{flag} {} ", shell_word(v))))
        .chain(limit.map(|n| format!("--limit {n} ")))
        .collect::<String>();
    // Threads behind a bridge print as references usable as they are (`HOST/SESSION`).
    let host = bridge.as_ref().map(|b| format!("{b}/")).unwrap_or_default();
    let request = pb::ThreadListRequest {
        bridge: bridge.unwrap_or_default(),
        workspace_id: workspace.unwrap_or_default(),
        limit,
        cursor: cursor.unwrap_or_default(),
    };
    let page = client.threads().thread_list(request).await?.into_inner();
    if json {
        print_json(&page);
        return Ok(());
    }
    for t in &page.threads {
        let state = pb::json::enum_word(t.state().as_str_name(), "THREAD_STATE_");
        let peers = if t.communication_open { "peers on" } else { "peers off" };
        outln!("{host}{}  {:<7}  {:<8}  {:<9}  {}  ({})", t.id, state, t.profile, peers, t.title, t.cwd);
    }
    if page.threads.is_empty() {
        outln!("(no threads)");
    }
    // On stderr, like every paging hint: stdout holds the result alone.
    if let Some(next) = &page.next_cursor {
        hint!("more: {more}--cursor {next}");
    }
    Ok(())
}

async fn read(client: &Client, request: pb::ThreadReadRequest, json: bool) -> Result<()> {
    let last = request.last;
    let page = client.threads().thread_read(request).await?.into_inner();
    if json {
        print_json(&page);
    } else if let Some(segment) = &page.segment {
        out!("{}", segment.text);
        // On stderr: stdout holds the field's text alone, to be joined segment by segment.
        if let Some(next) = &segment.next {
            hint!("\nmore: --content-ref {} --cursor {next}", segment.content_ref);
        }
    } else {
        show_turns(&page);
        if let Some(session) = page.thread.as_ref().map(|t| &t.agent_session).filter(|s| !s.is_empty()) {
            hint!("agent session: {session}");
        }
        // Only the newest turns are shown: the older ones are read from the oldest on (on
        // stderr, like every paging hint).
        let first = page.coverage.as_ref().map_or(0, |c| c.first_seq);
        match first.saturating_sub(1) {
            older @ 1..=100 if last.is_some() => hint!("older: --limit {older}"),
            101.. if last.is_some() => hint!("older: --limit 100 (from the oldest; then --cursor)"),
            _ => {}
        }
    }
    Ok(())
}

/// `kiki thread read REF --content-ref R --all`: every segment of the field, following
/// `next`, printed once whole. With --json, one document in the last segment's shape with
/// the whole text from offset 0 and no `next`. Each segment must go on where the last one
/// ended, within the length the first one gave, so a faulty answer cannot loop forever.
/// Follows the thread's turns as they run, one after another, until interrupted.
async fn follow(client: &Client, target: pb::ThreadRef, json: bool) -> Result<()> {
    loop {
        let request = pb::ThreadFollowRequest {
            target: Some(target.clone()),
            turn_id: String::new(),
            wait_ms: Some(60_000),
        };
        let mut progress = client.threads().thread_follow(request).await?.into_inner();
        while let Some(part) = progress.message().await? {
            if json {
                outln!("{}", serde_json::to_string(&part)?);
                continue;
            }
            match part.kind() {
                pb::PartKind::End => outln!("── turn {} {}", part.turn_id, part.text),
                pb::PartKind::Tool => outln!("⚙ {}", part.text),
                pb::PartKind::ToolResult => outln!("  ↳ {}", part.text.lines().next().unwrap_or_default()),
                _ => outln!("{}", part.text),
            }
        }
    }
}

async fn read_whole_field(client: &Client, mut request: pb::ThreadReadRequest, json: bool) -> Result<()> {
    let mut text = String::new();
    let (mut units, mut total) = (0u64, None);
    let mut page = loop {
        let mut page = client.threads().thread_read(request.clone()).await?.into_inner();
        let Some(segment) = page.segment.as_mut() else {
            bail!("the home answered a content ref without a segment");
        };
        let length = *total.get_or_insert(segment.utf16_length);
        let piece = segment.text.encode_utf16().count() as u64;
        if segment.offset != units || segment.utf16_length != length || units + piece > length {
            bail!("the home's segments of {} do not follow each other; read it again", segment.content_ref);
        }
        text.push_str(&segment.text);
        units += piece;
        match segment.next.take() {
            Some(next) if piece > 0 => request.cursor = next,
            Some(_) => bail!("the home's segments of {} do not advance", segment.content_ref),
            None => break page,
        }
    };
    if json {
        if let Some(segment) = page.segment.as_mut() {
            segment.text = text;
            segment.offset = 0;
        }
        print_json(&page);
    } else {
        out!("{text}");
    }
    Ok(())
}

async fn send(
    client: &Client,
    target: &str,
    key: String,
    content: Option<String>,
    content_file: Option<PathBuf>,
    json: bool,
) -> Result<()> {
    let content = match content_file {
        Some(file) => read_text(&file, "--content-file", limits::CONTENT_MAX_CHARS)?,
        // clap requires one of the two.
        None => content.unwrap_or_default(),
    };
    let request = pb::ThreadSendRequest {
        target: Some(reference(target)?),
        content,
        idempotency_key: key,
        ..Default::default()
    };
    let sent = client.threads().thread_send(request).await?.into_inner();
    if json {
        print_json(&sent);
    } else {
        let status = pb::json::enum_word(sent.status().as_str_name(), "SEND_STATUS_");
        let replay = if sent.replayed { " (replayed: sent before with this key)" } else { "" };
        let reason = if sent.reason.is_empty() { String::new() } else { format!(": {}", sent.reason) };
        outln!("{} {status}{reason}{replay}", sent.message_id);
    }
    Ok(())
}

async fn wait(
    client: &Client,
    targets: &[String],
    timeout_ms: Option<u32>,
    cursors: &[String],
    json: bool,
) -> Result<()> {
    let targets = targets.iter().map(|target| reference(target)).collect::<Result<Vec<_>>>()?;
    let cursors = cursors_by_reference(cursors)?;
    let request = pb::ThreadWaitRequest { targets, timeout_ms, cursors };
    let waited = client.threads().thread_wait(request).await?.into_inner();
    if json {
        print_json(&waited);
    } else {
        show_wait(&waited);
    }
    Ok(())
}

async fn set(client: &Client, target: &str, communication: &str, json: bool) -> Result<()> {
    let setting = match communication {
        "on" => pb::Communication::On,
        "off" => pb::Communication::Off,
        _ => pb::Communication::Default,
    };
    let request = pb::ThreadSetRequest { target: Some(reference(target)?), communication: setting as i32 };
    let set = client.home().thread_set(request).await?.into_inner();
    if json {
        print_json(&set);
    } else if let Some(t) = set.thread {
        // The thread's own switch is one of several: say what is in force, and why.
        let open = if t.communication_open { "open" } else { "closed" };
        outln!(
            "{}: communication switch {communication}; peer communication is {open}: {}",
            t.id,
            t.communication_why
        );
    }
    Ok(())
}

async fn say(client: &Client, target: &str, text: String, json: bool) -> Result<()> {
    let request = pb::ThreadSayRequest { target: Some(reference(target)?), content: text };
    let said = client.home().thread_say(request).await?.into_inner();
    if json {
        print_json(&said);
    } else if said.turn_started {
        outln!("turn started");
    } else if said.reason.is_empty() {
        outln!("queued: the next turn takes it");
    } else {
        outln!("queued: {}", said.reason);
    }
    Ok(())
}

/// `kiki thread stop REFERENCE`: answered once the turn has ended (or is still stopping).
async fn stop(client: &Client, target: &str, json: bool) -> Result<()> {
    let request = pb::ThreadStopRequest { target: Some(reference(target)?) };
    let stopped = client.home().thread_stop(request).await?.into_inner();
    if json {
        print_json(&stopped);
        return Ok(());
    }
    match pb::TurnStatus::try_from(stopped.turn_status) {
        Ok(pb::TurnStatus::Cancelled) => outln!("stopped turn {}", stopped.turn_id),
        Ok(pb::TurnStatus::Running) => {
            outln!("stopping turn {}: it has not ended yet (kiki thread wait shows its end)", stopped.turn_id)
        }
        // It ended by itself before the stop reached it.
        _ => outln!("turn {} had ended already", stopped.turn_id),
    }
    Ok(())
}

/// `kiki thread archive|unarchive REFERENCE`.
async fn archive(client: &Client, target: &str, archived: bool, json: bool) -> Result<()> {
    let request = pb::ThreadArchiveRequest { target: Some(reference(target)?), archived };
    let done = client.home().thread_archive(request).await?.into_inner();
    if json {
        print_json(&done);
    } else {
        let word = if archived { "archived" } else { "unarchived" };
        match (done.changed, &done.thread) {
            (true, Some(t)) => outln!("{word} {}", t.id),
            (false, Some(t)) => outln!("{} was already {word}", t.id),
            _ => {}
        }
    }
    Ok(())
}
