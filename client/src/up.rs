//! `kiki up` and `kiki down`: start the home's daemon in the background and wait until it
//! answers; ask it to stop and wait until it is gone.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};

use anyhow::{Context, Result, bail};
use kiki_client::Client;
use kiki_proto as pb;

use crate::cli::show_status;
use crate::output::print_json;

/// How long `kiki up` waits for a new daemon to answer (a first start creates the key and
/// the store) and `kiki down` for it to stop (running turns are recorded first).
const START_TIMEOUT: Duration = Duration::from_secs(20);
const STOP_TIMEOUT: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(5);
/// How long one status or shutdown call may take.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// The home's status, if its daemon answers within [`ANSWER_TIMEOUT`] (a stopped or wedged
/// daemon is not waited for).
async fn status(socket: &Path) -> Option<pb::StatusResponse> {
    let ask = async {
        let client = Client::connect(socket).await.ok()?;
        Some(client.home().status(pb::StatusRequest {}).await.ok()?.into_inner())
    };
    tokio::time::timeout(ANSWER_TIMEOUT, ask).await.ok().flatten()
}

/// `kikid` next to this `kiki`, else from `PATH`.
fn kikid_binary() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("kikid")))
        .filter(|path| path.is_file())
        .unwrap_or_else(|| PathBuf::from("kikid"))
}

pub async fn up(home: &Path, json: bool) -> Result<()> {
    let socket = home.join("kikid.sock");
    if let Some(s) = status(&socket).await {
        if !json {
            outln!("already running");
        }
        show_status(&s, json);
        return Ok(());
    }
    // A home someone else made is not written into (kikid refuses it too).
    if let Ok(existing) = std::fs::symlink_metadata(home) {
        use std::os::unix::fs::MetadataExt;
        // `/proc/self` belongs to this process's effective user.
        let me = std::fs::metadata("/proc/self").map(|m| m.uid()).ok();
        if !existing.is_dir() || me.is_some_and(|me| existing.uid() != me) {
            bail!("{} is not a directory of yours; a home must be", home.display());
        }
    }
    // Owner-only, like everything the daemon keeps in the home.
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(home)
        .with_context(|| format!("creating {}", home.display()))?;
    let log_path = home.join("kikid.log");
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
        if let Some(s) = status(&socket).await {
            show_status(&s, json);
            return Ok(());
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
            if let Some(s) = status(&socket).await {
                show_status(&s, json);
                return Ok(());
            }
            bail!("kikid exited ({exit}) before answering:\n{}", log_tail(&log_path, log_start));
        }
        if started.elapsed() > START_TIMEOUT {
            bail!("kikid did not answer within {START_TIMEOUT:?}; see {}", log_path.display());
        }
        tokio::time::sleep(POLL).await;
    }
}

pub async fn down(home: &Path, json: bool) -> Result<()> {
    let socket = home.join("kikid.sock");
    let Ok(client) = Client::connect(&socket).await else {
        if json {
            print_json(&pb::ShutdownResponse { stopped: false });
        } else {
            outln!("not running");
        }
        return Ok(());
    };
    // An agent's `kiki down` (its turn's token set) is refused: stopping the home is the owner's.
    let mut home_service = crate::cli::as_caller(client)?.home();
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

fn lock_held(home: &Path) -> bool {
    match std::fs::File::open(home.join("kikid.lock")) {
        Ok(file) => matches!(file.try_lock(), Err(std::fs::TryLockError::WouldBlock)),
        Err(_) => false,
    }
}

/// The last lines `path` got from byte `from` on.
fn log_tail(path: &Path, from: u64) -> String {
    let bytes = std::fs::read(path).unwrap_or_default();
    let text = String::from_utf8_lossy(bytes.get(from as usize..).unwrap_or_default());
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(10)..].join("\n")
}
