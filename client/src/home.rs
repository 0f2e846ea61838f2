//! The home itself: start its daemon in the background and wait until it answers (`up`),
//! ask it to stop and wait until it is gone (`down`), describe it (`status`), check it
//! (`doctor`), copy it (`backup`); and `attention`, a turn's call for its user.

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Subcommand;
use kiki_client::Client;
use kiki_proto as pb;
use kiki_proto::Word;
use kiki_proto::home::HomeDir;

use crate::connect::{as_caller, connect, socket};
use crate::output::{KikidFailed, ProblemsFound, print_json};
use crate::render::show_status;

/// How long `kiki up` waits for a new daemon to answer (a first start creates the key and
/// the store) and `kiki down` for it to stop (running turns are recorded first).
const START_TIMEOUT: Duration = Duration::from_secs(20);
const STOP_TIMEOUT: Duration = Duration::from_secs(20);
/// How often `kiki up` and `kiki down` look again while they wait.
const POLL: Duration = Duration::from_millis(5);
/// How long one status or shutdown call may take.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// `kiki attention list`.
#[derive(Subcommand)]
pub enum AttentionCommand {
    /// Every open attention of the home's threads, oldest first, with what to do: a
    /// permission request still waiting for `kiki approve` / `kiki deny`, and any other
    /// attention raised since the owner last gave that thread input (a ThreadWait without a
    /// cursor starts from now, so it does not show those raised before it).
    #[command(after_help = "Examples:\n  kiki attention list\n  kiki --json attention list")]
    List,
}

/// Flattened into `kiki`'s own commands: `kiki up`, not `kiki home up`.
#[derive(Subcommand)]
pub enum HomeCommand {
    /// Start the home's daemon (creating the home on first use); returns once it answers.
    #[command(
        after_help = "Examples:\n  kiki up\n  kiki --home /tmp/kiki-demo up   # another home (or KIKI_HOME)"
    )]
    Up {
        /// Give a home that lost its identity.key a new identity: its bridges stop working
        /// and must be requested and approved again. Without it such a home will not start.
        #[arg(long)]
        new_identity: bool,
    },
    /// Stop the home's daemon.
    #[command(
        after_help = "Examples:\n  kiki down\n  kiki --json down   # {\"stopped\": true}, or false if none was running"
    )]
    Down,
    /// Describe the running home.
    #[command(
        after_help = "Examples:\n  kiki status\n  kiki status --workers   # and what each background worker is doing\n  kiki --json status   # home_id, pid, socket, store, profiles, bridge_listen, …"
    )]
    Status {
        /// Also list the home's background workers: what each is doing and its last error.
        #[arg(long)]
        workers: bool,
    },
    /// What is wrong with the home and what to do: its files' owners and modes, the config,
    /// the identity key, a full check of the store, free disk space. Works whether or not
    /// the daemon runs; exits 1 when it finds a problem.
    #[command(
        after_help = "Examples:\n  kiki doctor\n  kiki --json doctor   # the findings, each with what to do"
    )]
    Doctor,
    /// The home's event feed: sends, refusals, turns started and ended, permission
    /// requests, room posts, outbox attempts and bridge decisions since kikid started (the
    /// last 1,000), oldest first; with --follow, each new one as it happens.
    #[command(
        after_help = "Examples:\n  kiki events\n  kiki events --follow --thread th_01…\n  kiki --json events --follow --bridge laptop   # one JSON object a line"
    )]
    Events {
        /// Keep watching: print each new event as it happens, until interrupted.
        #[arg(long)]
        follow: bool,
        /// Only this thread's events.
        #[arg(long, value_name = "THREAD")]
        thread: Option<String>,
        /// Only this room's events.
        #[arg(long, value_name = "ROOM")]
        room: Option<String>,
        /// Only what came over or went out on this bridge (its id, name or peer home id).
        #[arg(long, value_name = "BRIDGE")]
        bridge: Option<String>,
    },
    /// Copy the running home (identity key, config, a consistent copy of the store) into
    /// DIR, a new or empty directory: `kikid --home DIR` or copying its files back restores it.
    #[command(
        after_help = "Examples:\n  kiki backup ~/kiki-backup\n  kiki --home ~/kiki-backup up   # run the copy in place of the original"
    )]
    Backup {
        /// Where the copy goes; made owner-only (it holds the home's private key).
        dir: PathBuf,
    },
    /// Inside a turn: ask for the user (ThreadWait reports an `attention` event). The owner's
    /// `kiki attention list` shows every attention still waiting, with what to do.
    // Listed after `thread` and `bridge`, where it was before the commands were grouped.
    #[command(
        display_order = 100,
        args_conflicts_with_subcommands = true,
        subcommand_negates_reqs = true,
        after_help = "Examples (an agent, inside its turn):\n  kiki attention --reason \"which database should I migrate?\"\n\
                      Examples (the owner):\n  kiki attention list"
    )]
    Attention {
        /// What the user is needed for, at most 2,000 characters.
        #[arg(long, required = true)]
        reason: Option<String>,
        #[command(subcommand)]
        list: Option<AttentionCommand>,
    },
    /// Allow what an agent asked to do (a permission request an `attention` event names).
    #[command(display_order = 101, after_help = "Examples:\n  kiki approve perm_01…")]
    Approve {
        /// The request's id (perm_…), as its attention event names it.
        id: String,
    },
    /// Refuse what an agent asked to do; it is told the reason.
    #[command(display_order = 102, after_help = "Examples:\n  kiki deny perm_01… --reason \"not on main\"")]
    Deny {
        /// The request's id (perm_…), as its attention event names it.
        id: String,
        /// What the agent is told, at most 2,000 characters (default: denied by the owner).
        #[arg(long, default_value = "")]
        reason: String,
    },
}

pub const STORE_EXAMPLES: &str = "Examples:\n  kiki down\n  kiki store migrate --to postgres://kiki@db.example/kiki --password-file ~/.kiki/pg.pass\n  \
     # then in config.toml: [store] url = \"postgres://kiki@db.example/kiki\", password_file = \"pg.pass\"\n  \
     kiki up";

#[derive(Subcommand)]
pub enum StoreCommand {
    /// Copy this stopped home's store into an empty store of another backend (SQLite to
    /// Postgres or back): every table, row for row, counted on both sides after. The home's
    /// config is left as it is: point `[store] url` at the copy to use it.
    Migrate {
        /// The target: `postgres://[user@]host[:port]/database`, or a SQLite file
        /// (`sqlite://PATH` or a path, relative to the current directory).
        #[arg(long, value_name = "URL")]
        to: String,
        /// The Postgres password's owner-only file (else the URL's password or
        /// KIKI_STORE_PASSWORD).
        #[arg(long, value_name = "FILE")]
        password_file: Option<PathBuf>,
    },
}

/// `kiki store migrate`: `kikid --migrate-store-to`, which holds the home's lock (so the home
/// must be stopped) while it copies.
pub async fn store(home: &Path, command: StoreCommand, json: bool) -> Result<()> {
    let StoreCommand::Migrate { to, password_file } = command;
    let binary = kikid_binary();
    let mut kikid = Command::new(&binary);
    kikid.arg("--home").arg(home).arg("--migrate-store-to").arg(&to);
    if let Some(file) = password_file {
        kikid.arg("--password-file").arg(std::path::absolute(&file).unwrap_or(file));
    }
    let out = kikid
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {} --migrate-store-to", binary.display()))?;
    if !out.status.success() {
        let said = String::from_utf8_lossy(&out.stderr);
        let message =
            said.lines().rev().find_map(|line| line.strip_prefix("kikid: ")).unwrap_or(&said).trim();
        return Err(
            KikidFailed { code: out.status.code(), message: format!("store migrate: {message}") }.into()
        );
    }
    let migrated: serde_json::Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("{} --migrate-store-to printed no result", binary.display()))?;
    if json {
        print_json(&migrated);
    } else {
        let rows = migrated["rows"].as_object().cloned().unwrap_or_default();
        let total: u64 = rows.values().filter_map(serde_json::Value::as_u64).sum();
        let (from, to) =
            (migrated["from"].as_str().unwrap_or_default(), migrated["to"].as_str().unwrap_or_default());
        outln!("copied {total} rows from {from} to {to}, every table counted on both sides:");
        for (table, n) in rows {
            outln!("  {table:<20} {n}");
        }
        outln!("point [store] url at {to} in the home's config.toml to use the copy");
    }
    Ok(())
}

pub async fn run(home: &Path, command: HomeCommand, json: bool) -> Result<()> {
    match command {
        HomeCommand::Up { new_identity } => up(home, new_identity, json).await,
        HomeCommand::Down => down(home, json).await,
        HomeCommand::Status { workers } => status(home, workers, json).await,
        HomeCommand::Doctor => doctor(home, json).await,
        HomeCommand::Events { follow, thread, room, bridge } => {
            let request = pb::EventsRequest {
                follow,
                thread_id: thread.unwrap_or_default(),
                room_id: room.unwrap_or_default(),
                bridge: bridge.unwrap_or_default(),
            };
            events(home, request, json).await
        }
        HomeCommand::Backup { dir } => backup(home, &dir, json).await,
        HomeCommand::Attention { list: Some(AttentionCommand::List), .. } => attention_list(home, json).await,
        HomeCommand::Attention { reason, list: None } => {
            attention(home, reason.unwrap_or_default(), json).await
        }
        HomeCommand::Approve { id } => decide(home, id, true, String::new(), json).await,
        HomeCommand::Deny { id, reason } => decide(home, id, false, reason, json).await,
    }
}

/// `kiki up`: a home whose daemon answers is left as it is; otherwise kikid is started in
/// the background, with its output in `kikid.log`, and waited for until it answers.
async fn up(home: &Path, new_identity: bool, json: bool) -> Result<()> {
    let socket = socket(home);
    if let Some(s) = status_if_answering(&socket).await? {
        if !json {
            outln!("already running");
        }
        print_status(&s, json);
        return Ok(());
    }
    // Owner-only, like everything the daemon keeps in the home.
    let dir = HomeDir::new(home);
    dir.create()?;
    let log_path = dir.log_file();
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        // Never through a symlink planted in the home.
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(&log_path)
        .with_context(|| format!("opening {}", log_path.display()))?;
    // Where this start's lines begin: an earlier failed start's stay above them.
    let log_start = log.metadata().map(|m| m.len()).unwrap_or(0);
    let binary = kikid_binary();
    let mut child = {
        use std::os::unix::process::CommandExt;
        Command::new(&binary)
            .arg("--home")
            .arg(home)
            .args(new_identity.then_some("--new-identity"))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            // Its own process group: a Ctrl-C in this terminal does not stop the home.
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?
    };
    let started = Instant::now();
    loop {
        match status_if_answering(&socket).await {
            Ok(Some(s)) => {
                print_status(&s, json);
                return Ok(());
            }
            Ok(None) => {}
            // It answers, but not well: a daemon that cannot serve is not left behind.
            Err(e) => {
                stop(&mut child).await;
                return Err(e).context("kikid started but its status call failed; it was stopped");
            }
        }
        if let Some(exit) = child.try_wait()? {
            // Another `kiki up` may have won the race for the home's lock: while its kikid
            // holds the lock, wait for that one to answer (the loop's next turns).
            if lock_held(home) {
                if started.elapsed() > START_TIMEOUT {
                    bail!(
                        "the home's kikid did not answer within {START_TIMEOUT:?}; see {}",
                        log_path.display()
                    );
                }
                tokio::time::sleep(POLL).await;
                continue;
            }
            if let Some(s) = status_if_answering(&socket).await? {
                print_status(&s, json);
                return Ok(());
            }
            return Err(KikidFailed {
                code: exit.code(),
                message: format!(
                    "kikid exited ({exit}) before answering:\n{}",
                    start_error(&log_path, log_start)
                ),
            }
            .into());
        }
        if started.elapsed() > START_TIMEOUT {
            stop(&mut child).await;
            bail!(
                "kikid did not answer within {START_TIMEOUT:?} and was stopped; see {}",
                log_path.display()
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// `kiki down`: asks the daemon to stop, then waits until it has let go of the home.
async fn down(home: &Path, json: bool) -> Result<()> {
    let Ok(client) = Client::connect(&socket(home)).await else {
        if json {
            print_json(&pb::ShutdownResponse { stopped: false });
        } else {
            outln!("not running");
        }
        return Ok(());
    };
    // An agent's `kiki down` (its turn's token set) is refused: stopping the home is the owner's.
    let mut home_service = as_caller(client)?.home();
    tokio::time::timeout(ANSWER_TIMEOUT, home_service.shutdown(pb::ShutdownRequest {}))
        .await
        .map_err(|_| anyhow::anyhow!("kikid did not answer within {ANSWER_TIMEOUT:?}"))??;
    let started = Instant::now();
    // The daemon releases the home's lock as its very last step (or the OS does, at exit).
    while lock_held(home) {
        if started.elapsed() > STOP_TIMEOUT {
            bail!("kikid did not stop within {STOP_TIMEOUT:?}");
        }
        tokio::time::sleep(POLL).await;
    }
    if json {
        print_json(&pb::ShutdownResponse { stopped: true });
    } else {
        outln!("stopped");
    }
    Ok(())
}

async fn status(home: &Path, workers: bool, json: bool) -> Result<()> {
    let mut service = connect(home).await?.home();
    let asked = tokio::time::timeout(ANSWER_TIMEOUT, service.status(pb::StatusRequest { workers })).await;
    let status = asked.map_err(|_| {
        tonic::Status::unavailable(format!("kikid did not answer within {ANSWER_TIMEOUT:?}"))
    })??;
    print_status(&status.into_inner(), json);
    Ok(())
}

/// `kiki doctor`: the running daemon's findings, or — when none answers — those of
/// `kikid --check`, which looks at the stopped home itself.
async fn doctor(home: &Path, json: bool) -> Result<()> {
    let socket = socket(home);
    let asked = async {
        let Ok(client) = Client::connect(&socket).await else { return Ok(None) };
        // A KIKI_TOKEN that is no token is the caller's mistake, reported as such: taken for
        // "no daemon answers", it had `kikid --check` blame the running daemon.
        let mut service = as_caller(client)?.home();
        anyhow::Ok(Some(service.doctor(pb::DoctorRequest {}).await?))
    };
    let report = match tokio::time::timeout(ANSWER_TIMEOUT, asked).await.unwrap_or(Ok(None))? {
        Some(answer) => answer.into_inner(),
        None => {
            let binary = kikid_binary();
            let out = Command::new(&binary)
                .arg("--home")
                .arg(home)
                .arg("--check")
                .stdin(Stdio::null())
                .stderr(Stdio::inherit())
                .output()
                .with_context(|| format!("running {} --check", binary.display()))?;
            serde_json::from_slice::<pb::DoctorResponse>(&out.stdout).with_context(|| {
                format!("{} --check printed no findings ({})", binary.display(), out.status)
            })?
        }
    };
    if json {
        print_json(&report);
    } else {
        for f in &report.findings {
            let mark = if f.ok { "ok  " } else { "FAIL" };
            outln!("{mark}  {:<8}  {}", f.check, f.message);
            if !f.fix.is_empty() {
                outln!("                fix: {}", f.fix);
            }
        }
    }
    if report.findings.iter().all(|f| f.ok) { Ok(()) } else { Err(ProblemsFound.into()) }
}

async fn backup(home: &Path, dir: &Path, json: bool) -> Result<()> {
    // The daemon writes the copy: a relative DIR would be resolved in its working directory.
    let dest = std::path::absolute(dir).with_context(|| format!("{}", dir.display()))?;
    let request = pb::BackupRequest { dest: dest.display().to_string() };
    let backed = connect(home).await?.home().backup(request).await?.into_inner();
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

async fn attention(home: &Path, reason: String, json: bool) -> Result<()> {
    connect(home).await?.threads().attention(pb::AttentionRequest { reason }).await?;
    if json {
        print_json(&pb::AttentionResponse {});
    } else {
        outln!("attention asked");
    }
    Ok(())
}

/// `kiki attention list`: what waits for the owner.
async fn attention_list(home: &Path, json: bool) -> Result<()> {
    let open = connect(home).await?.home().attention_list(pb::AttentionListRequest {}).await?.into_inner();
    if json {
        print_json(&open);
        return Ok(());
    }
    if open.open.is_empty() {
        outln!("nothing waits for you");
    }
    for attention in &open.open {
        let event = attention.event.clone().unwrap_or_default();
        outln!("{}  {}  {}: {}", event.at, attention.thread_id, attention.thread_title, event.reason);
        outln!("    {}", attention.next);
    }
    if open.more {
        hint!("more are open than shown: answer these first");
    }
    Ok(())
}

/// `kiki events`: a line per event (with --json, one document of them, or with --follow one
/// JSON object a line, as they come).
async fn events(home: &Path, request: pb::EventsRequest, json: bool) -> Result<()> {
    let follow = request.follow;
    let mut feed = connect(home).await?.home().events(request).await?.into_inner();
    let mut all = Vec::new();
    while let Some(event) = feed.message().await? {
        match (json, follow) {
            (true, true) => outln!("{}", serde_json::to_string(&event)?),
            (true, false) => all.push(event),
            (false, _) => {
                outln!("{}  {:<18} {}", event.at, event.kind().word(), event.summary);
            }
        }
    }
    if json && !follow {
        print_json(&serde_json::json!({ "events": all }));
    }
    Ok(())
}

/// `kiki approve` / `kiki deny`: the owner's answer to a permission request.
async fn decide(home: &Path, request_id: String, allow: bool, reason: String, json: bool) -> Result<()> {
    let request = pb::PermissionDecideRequest { request_id: request_id.clone(), allow, reason };
    let stands = connect(home).await?.threads().permission_decide(request).await?.into_inner();
    if json {
        print_json(&stands);
    } else {
        outln!("{request_id} {}: {} for {}", stands.status().word(), stands.tool, stands.thread_id);
    }
    Ok(())
}

/// The home's status, as `kiki status` prints it.
fn print_status(status: &pb::StatusResponse, json: bool) {
    if json {
        print_json(status);
    } else {
        show_status(status);
    }
}

/// The home's status if its daemon answers within [`ANSWER_TIMEOUT`] (a stopped or wedged
/// daemon is not waited for): `None` when none answers, the error when one answers with it.
async fn status_if_answering(socket: &Path) -> Result<Option<pb::StatusResponse>, tonic::Status> {
    let ask = async {
        let Ok(client) = Client::connect(socket).await else { return Ok(None) };
        match client.home().status(pb::StatusRequest::default()).await {
            Ok(status) => Ok(Some(status.into_inner())),
            // Nobody there after all: a status this client made from a broken connection (it
            // has a source; a daemon's answer never does) — the daemon stopped between the two
            // steps, or a killed one's last thread still held the socket and reset the call.
            Err(e) if std::error::Error::source(&e).is_some() => Ok(None),
            Err(e) => Err(e),
        }
    };
    tokio::time::timeout(ANSWER_TIMEOUT, ask).await.unwrap_or(Ok(None))
}

/// `kikid` next to this `kiki`, else from `PATH`.
fn kikid_binary() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("kikid")))
        .filter(|path| path.is_file())
        .unwrap_or_else(|| PathBuf::from("kikid"))
}

/// Stops the kikid this `kiki up` started: SIGTERM (and SIGCONT, so a stopped process gets
/// it), then SIGKILL if it has not exited within [`KILL_AFTER`].
async fn stop(child: &mut std::process::Child) {
    use nix::sys::signal::{Signal, kill};
    /// A kikid that did not answer in 20 s is not waited for long: its turns never started.
    const KILL_AFTER: Duration = Duration::from_secs(5);
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let _ = kill(pid, Signal::SIGTERM);
    let _ = kill(pid, Signal::SIGCONT);
    let started = Instant::now();
    while child.try_wait().ok().flatten().is_none() {
        if started.elapsed() > KILL_AFTER {
            let _ = child.kill();
            let _ = child.wait();
            return;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Whether a kikid holds the home's lock: it runs, whether or not it answers.
fn lock_held(home: &Path) -> bool {
    HomeDir::new(home).lock_held()
}

/// Why kikid stopped before answering, from the lines this start wrote to its log: the
/// error kikid printed as it exited (from its line that begins `kikid: ` on) alone, without
/// the log lines before it; the log's last lines if it printed none (it was killed, say).
fn start_error(path: &Path, from: u64) -> String {
    let tail = log_tail(path, from);
    let lines: Vec<&str> = tail.lines().collect();
    match lines.iter().rposition(|l| l.starts_with("kikid: ")) {
        Some(at) => lines[at..].join("\n"),
        None => tail,
    }
}

/// The last lines `path` got from byte `from` on: read from at most the last 64 KiB, so a
/// log grown huge costs no more.
fn log_tail(path: &Path, from: u64) -> String {
    use std::io::{Read, Seek, SeekFrom};
    const TAIL_BYTES: u64 = 64 * 1024;
    let mut bytes = Vec::new();
    if let Ok(mut file) = std::fs::File::open(path) {
        let end = file.metadata().map(|m| m.len()).unwrap_or(0);
        let start = from.max(end.saturating_sub(TAIL_BYTES));
        if file.seek(SeekFrom::Start(start)).is_ok() {
            let _ = file.take(TAIL_BYTES).read_to_end(&mut bytes);
        }
    }
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(10)..].join("\n")
}
