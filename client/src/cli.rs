//! The `kiki` commands (contract §4) and what each prints.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use kiki_client::{Client, home_dir};
use kiki_proto as pb;

use crate::output::{UsageError, print_json};
use crate::up;

/// The longest prompt and message content (contract §2): a file holding more is refused
/// before more of it is read.
const PROMPT_MAX_CHARS: usize = 100_000;
const CONTENT_MAX_CHARS: usize = 100_000;

#[derive(Parser)]
#[command(name = "kiki", version, about = "Talk to a kiki home: threads, rooms and bridges between agents")]
pub struct Args {
    /// The home directory (default: $KIKI_HOME, else ~/.kiki).
    #[arg(long, global = true)]
    pub home: Option<PathBuf>,
    /// Print exactly one JSON document on stdout (errors too).
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Start the home's daemon (creating the home on first use); returns once it answers.
    Up {
        /// Give a home that lost its identity.key a new identity: its bridges stop working
        /// and must be requested and approved again. Without it such a home will not start.
        #[arg(long)]
        new_identity: bool,
    },
    /// Stop the home's daemon.
    Down,
    /// Describe the running home.
    Status,
    /// What is wrong with the home and what to do: its files' owners and modes, the config,
    /// the identity key, a full check of the store, free disk space. Works whether or not
    /// the daemon runs; exits 1 when it finds a problem.
    Doctor,
    /// Copy the running home (identity key, config, a consistent copy of the store) into
    /// DIR, a new or empty directory: `kikid --home DIR` or copying its files back restores it.
    Backup {
        /// Where the copy goes; made owner-only (it holds the home's private key).
        dir: PathBuf,
    },
    /// Threads: agent sessions of this home.
    #[command(subcommand)]
    Thread(ThreadCommand),
    /// Bridges: owner-approved one-way links to other homes.
    #[command(subcommand)]
    Bridge(BridgeCommand),
    /// Inside a turn: ask for the user (ThreadWait reports an `attention` event).
    Attention {
        #[arg(long)]
        reason: String,
    },
}

#[derive(Subcommand)]
pub enum BridgeCommand {
    /// Ask the home at ADDRESS (host:port of its QUIC endpoint) for a bridge.
    Request {
        /// The target's QUIC endpoint, host:port (`kiki status` there shows it).
        address: String,
        /// Permissions wanted: read,send,wake,wait.
        #[arg(long, required = true)]
        want: Vec<String>,
        /// Refuse the target unless its home id is this (the 52 characters `kiki status`
        /// prints there; either case).
        #[arg(long)]
        expect: Option<String>,
        /// Local name for the target, usable as HOST in references.
        #[arg(long)]
        name: Option<String>,
    },
    /// Pairing requests other homes filed with this one.
    Pending,
    /// Grant a request (possibly fewer permissions, possibly limited to workspaces).
    Approve {
        /// The request's id (`kiki bridge pending`).
        request: String,
        /// Permissions granted: read,send,wake,wait — at most what was asked for.
        #[arg(long, required = true)]
        allow: Vec<String>,
        /// A workspace the grant is limited to: its id (ws_…) or a directory in it.
        #[arg(long = "workspace")]
        workspaces: Vec<String>,
    },
    /// Reject a pending pairing request (target side): the source sees `rejected`.
    Reject {
        /// The request's id (`kiki bridge pending`).
        request: String,
    },
    /// Revoke a bridge (id, alias or peer home id; one that names bridges both ways is
    /// refused: use the id); takes effect at once.
    Revoke { bridge: String },
    /// Turn an inbound bridge's access off: calls are refused with `bridge_disabled`,
    /// messages it brought wait; nothing is deleted and the source keeps retrying.
    Disable { bridge: String },
    /// Turn an inbound bridge's access back on; held messages are delivered.
    Enable { bridge: String },
    /// Every bridge with its direction, peer, permissions and link health.
    List,
    /// The messages sent or received over a bridge and what became of them: the newest
    /// page first, each page oldest first.
    Receipts {
        /// The bridge: its id, alias or peer home id (both directions with that peer).
        bridge: String,
        /// Receipts per page, 1-100 (default 50).
        #[arg(long)]
        limit: Option<u32>,
        /// Older receipts: the cursor the previous page printed.
        #[arg(long)]
        cursor: Option<String>,
    },
}

#[derive(Subcommand)]
pub enum ThreadCommand {
    /// Create a thread; with a prompt its first turn starts at once.
    Create {
        /// Absolute path of an existing directory (default: the current directory).
        #[arg(long)]
        cwd: Option<PathBuf>,
        #[arg(long)]
        profile: Option<String>,
        #[arg(long)]
        title: Option<String>,
        #[arg(long, conflicts_with = "prompt_file")]
        prompt: Option<String>,
        /// Read the prompt from a file ('-' for stdin).
        #[arg(long)]
        prompt_file: Option<PathBuf>,
    },
    /// List enabled, unarchived threads, newest first.
    List {
        #[arg(long)]
        bridge: Option<String>,
        #[arg(long)]
        workspace: Option<String>,
        #[arg(long)]
        limit: Option<u32>,
        #[arg(long)]
        cursor: Option<String>,
    },
    /// Read a thread's ended turns, oldest first (or one content ref in segments).
    Read {
        /// SESSION or HOST/SESSION.
        reference: String,
        #[arg(long)]
        limit: Option<u32>,
        #[arg(long)]
        cursor: Option<String>,
        #[arg(long)]
        content_ref: Option<String>,
    },
    /// Send a message to a thread: durable, idempotent by --key. From inside a turn the
    /// message is attributed to that turn's thread.
    Send {
        reference: String,
        /// Idempotency key: a retry with the same key and content never sends twice.
        #[arg(long)]
        key: String,
        #[arg(long, conflicts_with = "content_file", required_unless_present = "content_file")]
        content: Option<String>,
        /// Read the content from a file ('-' for stdin).
        #[arg(long)]
        content_file: Option<PathBuf>,
    },
    /// Wait for events (terminal, attention, lifecycle, undeliverable) on 1-8 threads.
    Wait {
        #[arg(required = true)]
        references: Vec<String>,
        #[arg(long)]
        timeout_ms: Option<u32>,
        /// REF=CURSOR from a previous wait (split at the first '='); repeat per thread.
        #[arg(long = "cursor")]
        cursors: Vec<String>,
    },
    /// Set a thread's peer-communication switch.
    Set {
        reference: String,
        #[arg(long, value_parser = ["on", "off", "default"])]
        communication: String,
    },
    /// User input to a thread: starts a turn (or waits for the running one).
    Say { reference: String, text: String },
    /// Archive a thread: it leaves ThreadList, keeps its history.
    Archive { reference: String },
    /// Bring an archived thread back.
    Unarchive { reference: String },
}

pub async fn run(args: Args) -> Result<()> {
    let home = home_dir(args.home.clone())?;
    kiki_client::check_home(&home)?;
    let json = args.json;
    match args.command {
        Command::Up { new_identity } => up::up(&home, new_identity, json).await,
        Command::Down => up::down(&home, json).await,
        Command::Doctor => up::doctor(&home, json).await,
        Command::Backup { dir } => {
            let dest = std::path::absolute(&dir).with_context(|| format!("{}", dir.display()))?;
            let request = pb::BackupRequest { dest: dest.display().to_string() };
            let backed = connect(&home).await?.home().backup(request).await?.into_inner();
            if json {
                print_json(&backed);
            } else {
                outln!(
                    "backed up into {}: {} (store {} bytes)",
                    backed.dest,
                    backed.files.join(", "),
                    backed.store_bytes
                );
            }
            Ok(())
        }
        Command::Status => {
            let mut service = connect(&home).await?.home();
            let asked = tokio::time::timeout(up::ANSWER_TIMEOUT, service.status(pb::StatusRequest {})).await;
            let status = asked.map_err(|_| {
                tonic::Status::unavailable(format!("kikid did not answer within {:?}", up::ANSWER_TIMEOUT))
            })??;
            show_status(&status.into_inner(), json);
            Ok(())
        }
        Command::Thread(command) => thread(&home, command, json).await,
        Command::Bridge(command) => bridge(&home, command, json).await,
        Command::Attention { reason } => {
            connect(&home).await?.threads().attention(pb::AttentionRequest { reason }).await?;
            if json {
                print_json(&pb::AttentionResponse {});
            } else {
                outln!("attention asked");
            }
            Ok(())
        }
    }
}

/// Connects to the home, acting as the calling turn when `KIKI_TOKEN` is set.
pub async fn connect(home: &std::path::Path) -> Result<Client> {
    as_caller(Client::connect(&home.join("kikid.sock")).await?)
}

/// The client acting as the calling turn when `KIKI_TOKEN` is set: the daemon then refuses
/// owner actions.
pub fn as_caller(client: Client) -> Result<Client> {
    Ok(match std::env::var("KIKI_TOKEN").ok().filter(|t| !t.is_empty()) {
        Some(token) => client.with_token(&token)?,
        None => client,
    })
}

fn reference(text: &str) -> Result<pb::ThreadRef> {
    Ok(pb::parse_ref(text).map_err(|e| UsageError(e.to_string()))?)
}

/// `text` as one shell word, to paste back: quoted if it holds anything but plain
/// characters.
fn shell_word(text: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./:=@%+,".contains(c);
    if !text.is_empty() && text.chars().all(plain) {
        return text.to_string();
    }
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// A workspace argument: a directory names the workspace it is in (the daemon needs it
/// absolute); anything else goes as given, for the daemon to check.
fn absolute_if_dir(workspace: String) -> String {
    if !std::path::Path::new(&workspace).is_dir() {
        return workspace;
    }
    std::path::absolute(&workspace).map_or(workspace, |dir| dir.display().to_string())
}

/// A text argument's file (`-`: stdin), for the field `flag` of at most `max_chars`
/// characters. At most `max_chars + 1` characters' worth of bytes are read (4 bytes each in
/// UTF-8), so an endless source (`/dev/zero`, a pipe that never closes its end of the
/// deal) is refused after that much, never read into memory whole. A file that cannot be
/// read as UTF-8 text, or that is longer than the field's limit, is a usage error (exit 2),
/// like any other bad argument.
fn read_text(path: &std::path::Path, flag: &str, max_chars: usize) -> Result<String> {
    use std::io::Read;
    let bound = (max_chars as u64 + 1) * 4;
    let source: Box<dyn Read> = if path.as_os_str() == "-" {
        Box::new(std::io::stdin())
    } else {
        Box::new(
            std::fs::File::open(path)
                .map_err(|e| UsageError(format!("{flag}: cannot read {}: {e}", path.display())))?,
        )
    };
    let mut bytes = Vec::new();
    source
        .take(bound)
        .read_to_end(&mut bytes)
        .map_err(|e| UsageError(format!("{flag}: cannot read {}: {e}", path.display())))?;
    let too_long =
        || UsageError(format!("{flag}: {} holds more than {max_chars} characters", path.display()));
    if bytes.len() as u64 == bound {
        return Err(too_long().into());
    }
    let text = String::from_utf8(bytes)
        .map_err(|e| UsageError(format!("{flag}: {} is not UTF-8 text: {e}", path.display())))?;
    if text.chars().count() > max_chars {
        return Err(too_long().into());
    }
    Ok(text)
}

async fn thread(home: &std::path::Path, command: ThreadCommand, json: bool) -> Result<()> {
    let client = connect(home).await?;
    match command {
        ThreadCommand::Create { cwd, profile, title, prompt, prompt_file } => {
            let prompt = match prompt_file {
                Some(file) => Some(read_text(&file, "--prompt-file", PROMPT_MAX_CHARS)?),
                None => prompt,
            };
            let cwd = match cwd {
                Some(dir) => std::path::absolute(&dir).with_context(|| format!("--cwd {}", dir.display()))?,
                None => std::env::current_dir().context("the current directory")?,
            };
            let request =
                pb::ThreadCreateRequest { cwd: Some(cwd.display().to_string()), profile, prompt, title };
            let created = client.threads().thread_create(request).await?.into_inner();
            if json {
                print_json(&created);
            } else {
                outln!("{}  {}", created.id, created.title);
                outln!("  profile {}, cwd {}", created.profile, created.cwd);
                if created.prompt_started {
                    outln!("  first turn started");
                }
            }
        }
        ThreadCommand::List { bridge, workspace, limit, cursor } => {
            // A directory names its workspace; the daemon needs it absolute.
            let workspace = workspace.map(absolute_if_dir);
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
            } else {
                for t in &page.threads {
                    let state = pb::json::enum_word(t.state().as_str_name(), "THREAD_STATE_");
                    outln!("{host}{}  {:<7}  {:<8}  {}  ({})", t.id, state, t.profile, t.title, t.cwd);
                }
                if page.threads.is_empty() {
                    outln!("(no threads)");
                }
                if let Some(next) = &page.next_cursor {
                    outln!("more: {more}--cursor {next}");
                }
            }
        }
        ThreadCommand::Read { reference: r, limit, cursor, content_ref } => {
            let request = pb::ThreadReadRequest {
                target: Some(reference(&r)?),
                limit,
                cursor: cursor.unwrap_or_default(),
                content_ref: content_ref.unwrap_or_default(),
            };
            let page = client.threads().thread_read(request).await?.into_inner();
            if json {
                print_json(&page);
            } else if let Some(segment) = &page.segment {
                out!("{}", segment.text);
                if let Some(next) = &segment.next {
                    eprintln!("\nmore: --content-ref {} --cursor {next}", segment.content_ref);
                }
            } else {
                show_turns(&page);
            }
        }
        ThreadCommand::Send { reference: r, key, content, content_file } => {
            let content = match content_file {
                Some(file) => read_text(&file, "--content-file", CONTENT_MAX_CHARS)?,
                None => content.unwrap_or_default(),
            };
            let request = pb::ThreadSendRequest {
                target: Some(reference(&r)?),
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
                let reason =
                    if sent.reason.is_empty() { String::new() } else { format!(": {}", sent.reason) };
                outln!("{} {status}{reason}{replay}", sent.message_id);
            }
        }
        ThreadCommand::Wait { references, timeout_ms, cursors } => {
            let targets = references.iter().map(|r| reference(r)).collect::<Result<Vec<_>>>()?;
            let mut map = std::collections::HashMap::new();
            for pair in &cursors {
                let (r, c) = pair
                    .split_once('=')
                    .ok_or_else(|| UsageError(format!("--cursor {pair:?}: expected REF=CURSOR")))?;
                if map.insert(r.to_string(), c.to_string()).is_some() {
                    return Err(
                        UsageError(format!("--cursor: two cursors for {r:?}; give one per thread")).into()
                    );
                }
            }
            let request = pb::ThreadWaitRequest { targets, timeout_ms, cursors: map };
            let waited = client.threads().thread_wait(request).await?.into_inner();
            if json {
                print_json(&waited);
            } else {
                show_wait(&waited);
            }
        }
        ThreadCommand::Set { reference: r, communication } => {
            let setting = match communication.as_str() {
                "on" => pb::Communication::On,
                "off" => pb::Communication::Off,
                _ => pb::Communication::Default,
            };
            let request =
                pb::ThreadSetRequest { target: Some(reference(&r)?), communication: setting as i32 };
            let set = client.home().thread_set(request).await?.into_inner();
            if json {
                print_json(&set);
            } else if let Some(t) = set.thread {
                outln!("{}: communication {}", t.id, communication);
            }
        }
        ThreadCommand::Say { reference: r, text } => {
            let request = pb::ThreadSayRequest { target: Some(reference(&r)?), content: text };
            let said = client.home().thread_say(request).await?.into_inner();
            if json {
                print_json(&said);
            } else if said.turn_started {
                outln!("turn started");
            } else {
                outln!("queued: the next turn takes it");
            }
        }
        ThreadCommand::Archive { reference: r } => archive(&client, &r, true, json).await?,
        ThreadCommand::Unarchive { reference: r } => archive(&client, &r, false, json).await?,
    }
    Ok(())
}

async fn archive(client: &Client, r: &str, archived: bool, json: bool) -> Result<()> {
    let request = pb::ThreadArchiveRequest { target: Some(reference(r)?), archived };
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

fn show_turns(page: &pb::ThreadReadResponse) {
    for turn in &page.turns {
        let status = pb::json::enum_word(turn.status().as_str_name(), "TURN_STATUS_");
        outln!("── turn {} · {} · {}", turn.seq, status, turn.ended_at);
        for line in turn.input.lines() {
            outln!("> {line}");
        }
        if turn.input_truncated {
            outln!("> … (input cut; read it with --content-ref {}.input)", turn.id);
        }
        outln!("{}", turn.output);
        if turn.output_truncated {
            outln!("… (output cut; read it with --content-ref {}.output)", turn.id);
        }
        if !turn.error.is_empty() {
            outln!("error: {}", turn.error);
        }
    }
    if page.turns.is_empty() {
        outln!("(no ended turns)");
    }
    if let Some(next) = &page.next_cursor {
        outln!("more: --cursor {next}");
    }
}

/// `kiki bridge disable|enable BRIDGE`.
async fn set_inbound(
    bridges: &mut kiki_client::BridgeClient,
    bridge: String,
    enabled: bool,
    json: bool,
) -> Result<()> {
    let set = bridges.bridge_set_inbound(pb::BridgeSetInboundRequest { bridge, enabled }).await?.into_inner();
    if json {
        print_json(&set);
    } else if let Some(b) = &set.bridge {
        let done = if enabled { "enabled" } else { "disabled" };
        outln!("{done} {} ({} {})", b.id, b.direction, b.peer_home_id);
    }
    Ok(())
}

async fn bridge(home: &std::path::Path, command: BridgeCommand, json: bool) -> Result<()> {
    let mut bridges = connect(home).await?.bridges();
    match command {
        BridgeCommand::Request { address, want, expect, name } => {
            let request = pb::BridgeRequestRequest {
                address,
                want,
                expect: expect.unwrap_or_default(),
                name: name.unwrap_or_default(),
            };
            let done = bridges.bridge_request(request).await?.into_inner();
            if json {
                print_json(&done);
            } else if let Some(b) = &done.bridge {
                outln!(
                    "requested {} as {:?} (request {}); waiting for its owner's approval",
                    b.peer_home_id,
                    b.alias,
                    done.request_id
                );
            }
        }
        BridgeCommand::Pending => {
            let pending = bridges.bridge_pending(pb::BridgePendingRequest {}).await?.into_inner();
            if json {
                print_json(&pending);
            } else {
                for r in &pending.requests {
                    outln!(
                        "{}  from {} ({}, at {})  wants {}  since {}",
                        r.id,
                        r.peer_home_id,
                        r.name,
                        if r.address.is_empty() { "an unknown address" } else { &r.address },
                        r.want.join(","),
                        r.created_at
                    );
                }
                if pending.requests.is_empty() {
                    outln!("(no pending requests)");
                }
            }
        }
        BridgeCommand::Approve { request, allow, workspaces } => {
            let workspaces = workspaces.into_iter().map(absolute_if_dir).collect();
            let approved = bridges
                .bridge_approve(pb::BridgeApproveRequest { request_id: request, allow, workspaces })
                .await?
                .into_inner();
            if json {
                print_json(&approved);
            } else if let Some(b) = &approved.bridge {
                outln!("bridge {} from {}: {}{}", b.id, b.peer_home_id, granted(b), scope(b));
            }
        }
        BridgeCommand::Reject { request } => {
            let rejected =
                bridges.bridge_reject(pb::BridgeRejectRequest { request_id: request }).await?.into_inner();
            if json {
                print_json(&rejected);
            } else {
                outln!("rejected");
            }
        }
        BridgeCommand::Disable { bridge } => set_inbound(&mut bridges, bridge, false, json).await?,
        BridgeCommand::Enable { bridge } => set_inbound(&mut bridges, bridge, true, json).await?,
        BridgeCommand::Revoke { bridge } => {
            let revoked = bridges.bridge_revoke(pb::BridgeRevokeRequest { bridge }).await?.into_inner();
            if json {
                print_json(&revoked);
            } else if let Some(b) = &revoked.bridge {
                outln!("revoked {} ({} {})", b.id, b.direction, b.peer_home_id);
            }
        }
        BridgeCommand::Receipts { bridge, limit, cursor } => {
            let request = pb::BridgeReceiptsRequest { bridge, limit, cursor: cursor.unwrap_or_default() };
            let receipts = bridges.bridge_receipts(request).await?.into_inner();
            if json {
                print_json(&receipts);
            } else {
                for r in &receipts.receipts {
                    let reason = match r.reason.as_str() {
                        "" => String::new(),
                        same if same == r.status => String::new(),
                        reason => format!(" ({reason})"),
                    };
                    // A refusal at the target stored no message: it has no id.
                    let id = if r.message_id.is_empty() { "-" } else { &r.message_id };
                    outln!(
                        "{}  {:<8} {}  key {}  {}{reason}  attempts {}  {}",
                        id,
                        r.direction,
                        r.target,
                        r.idempotency_key,
                        r.status,
                        r.attempts,
                        r.at
                    );
                }
                if receipts.receipts.is_empty() {
                    outln!("(no receipts)");
                }
                if let Some(next) = &receipts.next_cursor {
                    outln!("older: --cursor {next}");
                }
            }
        }
        BridgeCommand::List => {
            let list = bridges.bridge_list(pb::BridgeListRequest {}).await?.into_inner();
            if json {
                print_json(&list);
            } else {
                outln!("listening on {}", list.listen);
                for b in &list.bridges {
                    let never = |at: &str| if at.is_empty() { "never".to_string() } else { at.to_string() };
                    let mut health = format!("last success {}", never(&b.last_success));
                    if !b.last_error_at.is_empty() {
                        health.push_str(&format!(", last error {} ({})", b.last_error_at, b.last_error));
                    }
                    outln!(
                        "{}  {:<8} {:<9} {} ({})  [{}]{}  {health}, {} pending",
                        b.id,
                        b.direction,
                        b.state,
                        b.peer_home_id,
                        b.alias,
                        granted(b),
                        scope(b),
                        b.pending
                    );
                }
                if list.bridges.is_empty() {
                    outln!("(no bridges)");
                }
            }
        }
    }
    Ok(())
}

fn show_wait(w: &pb::ThreadWaitResponse) {
    for result in &w.results {
        let target = result.target.as_ref().map(pb::format_ref).unwrap_or_default();
        for e in &result.events {
            let kind = pb::json::enum_word(e.kind().as_str_name(), "EVENT_KIND_");
            let detail = match e.kind() {
                pb::EventKind::Terminal => {
                    let status = pb::json::enum_word(e.turn_status().as_str_name(), "TURN_STATUS_");
                    format!("turn {} {status}", e.turn_id)
                }
                pb::EventKind::Lifecycle => e.lifecycle.clone(),
                pb::EventKind::Undeliverable => format!("message {}: {}", e.message_id, e.reason),
                _ => e.reason.clone(),
            };
            outln!("{target}  {}  {kind}  {detail}", e.at);
        }
    }
    if w.timed_out {
        outln!("(timed out: no new events)");
    }
    for result in &w.results {
        let target = result.target.as_ref().map(pb::format_ref).unwrap_or_default();
        outln!("--cursor {target}={}", result.cursor);
    }
}

/// A bridge's permissions as `kiki bridge list` shows them.
fn granted(b: &pb::Bridge) -> String {
    if b.permissions.is_empty() { "none yet".into() } else { b.permissions.join(",") }
}

/// The workspaces a bridge's grant is limited to, if it is.
fn scope(b: &pb::Bridge) -> String {
    if b.workspaces.is_empty() { String::new() } else { format!(" in {}", b.workspaces.join(",")) }
}

pub fn show_status(s: &pb::StatusResponse, json: bool) {
    if json {
        print_json(s);
        return;
    }
    outln!("home      {}", s.home);
    outln!("home id   {}", s.home_id);
    outln!("kikid     pid {} · version {} · since {}", s.pid, s.version, s.started_at);
    outln!("socket    {}", s.socket);
    outln!("store     {}", s.store);
    outln!("threads   {} ({} running turns)", s.threads, s.running_turns);
    outln!("profiles  {} (default {})", s.profiles.join(", "), s.default_profile);
    outln!("bridges   listening on {} (QUIC)", s.bridge_listen);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hint_quotes_what_a_shell_would_split() {
        assert_eq!(shell_word("ws_0123456789abcdef"), "ws_0123456789abcdef");
        assert_eq!(shell_word("/tmp/a dir"), "'/tmp/a dir'");
        assert_eq!(shell_word("it's"), "'it'\\''s'");
        assert_eq!(shell_word(""), "''");
    }
}
