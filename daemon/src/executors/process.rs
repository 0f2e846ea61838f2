//! An agent's process for one turn: the command in the thread's cwd, recorded with its
//! turn, the end of its stderr kept for a failure. [`run`] is how `exec` and `claude` use it
//! (the turn's input on stdin, stdout collected up to the output limit); `codex` and `acp`
//! hold a conversation on its stdio instead ([`Spawned`], see `rpc`).
//!
//! The agent runs in its own process group. When the turn is stopped (daemon shutdown) or
//! its output overflows, the whole group is killed, so nothing it spawned outlives the turn
//! by accident. When its owner stops the turn (`kiki thread stop`) the group gets SIGTERM,
//! and SIGKILL if it has not exited [`STOP_GRACE`] later. A turn ends when the agent exits: a background process it left holding
//! stdout does not keep the turn open.

use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::process::{ChildStdin, ChildStdout, Command};

use super::agent::Agent;
use super::turn::{STOP_GRACE, TurnFailure, TurnInput};

/// How much of stderr a failed turn's error keeps (the end, where the reason usually is).
const STDERR_TAIL_BYTES: usize = 4096;
/// After the agent exits, how long output still in flight is collected.
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(1);

/// Kills the agent's process group when dropped, unless the agent finished by itself.
struct GroupGuard {
    pgid: Option<Pid>,
}

impl GroupGuard {
    fn disarm(&mut self) {
        self.pgid = None;
    }

    /// Sends `signal` to the whole group.
    fn signal(&self, signal: Signal) {
        if let Some(pgid) = self.pgid {
            let _ = killpg(pgid, signal);
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.pgid {
            let _ = killpg(pgid, Signal::SIGKILL);
        }
    }
}

/// How an agent process ended: all it wrote to stdout, its exit status, and the end of its
/// stderr (read only when it failed).
pub struct Exited {
    pub stdout: Vec<u8>,
    pub status: std::process::ExitStatus,
    pub stderr_tail: String,
}

impl Exited {
    /// Why a failed agent failed: its exit status and the end of its stderr.
    pub fn failure_reason(&self) -> String {
        let reason = match self.status.code() {
            Some(code) => format!("the agent exited with status {code}"),
            None => format!("the agent was killed ({})", self.status),
        };
        let stderr = self.stderr_tail.trim();
        if stderr.is_empty() { reason } else { format!("{reason}: {stderr}") }
    }
}

/// An agent process started for a turn: in its own process group (killed when this is
/// dropped, unless [`Spawned::finished`] says it ended by itself), recorded with its turn,
/// the end of its stderr kept.
pub struct Spawned {
    child: tokio::process::Child,
    stderr: tokio::task::JoinHandle<Vec<u8>>,
    guard: GroupGuard,
}

impl Spawned {
    /// Starts `command` (program and arguments) in the turn's cwd with its env, and tells
    /// the runner (`on_agent_start`) before anything is written to it. `Err` when it could
    /// not start or could not be recorded: the agent got nothing. Its stdin and stdout are
    /// the caller's.
    pub async fn start(
        command: &[String],
        input: &TurnInput<'_>,
    ) -> Result<(Self, ChildStdin, ChildStdout), TurnFailure> {
        let (program, args) = command
            .split_first()
            .ok_or_else(|| TurnFailure::before_agent("the profile has no command".into()))?;
        let mut child = Command::new(program)
            .args(args)
            .current_dir(input.cwd)
            .envs(input.env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .map_err(|e| TurnFailure::before_agent(format!("cannot start {program:?}: {e}")))?;
        let guard = GroupGuard { pgid: child.id().map(|pid| Pid::from_raw(pid as i32)) };
        if let Some(recorded) = &input.on_agent_start {
            // `None` if the process cannot be described (it exited already, or there is no
            // /proc): recorded all the same, as an agent that cannot be stopped later.
            // Dropping the guard on this error kills the agent before it got its input.
            recorded(child.id().and_then(Agent::of)).await.map_err(TurnFailure::before_agent)?;
        }
        let (Some(stdin), Some(stdout), Some(mut stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(started_failure(String::new(), "child process has no stdio pipes".into()));
        };
        // Only the tail is kept (it goes into the turn's error): a chatty agent's stderr must
        // not grow kikid's memory. Pumped by a task of its own, so it never blocks the agent.
        let stderr = tokio::spawn(async move {
            let (mut tail, mut chunk) = (Vec::new(), vec![0; 8192]);
            while let Ok(n @ 1..) = stderr.read(&mut chunk).await {
                tail.extend_from_slice(&chunk[..n]);
                if tail.len() > 2 * STDERR_TAIL_BYTES {
                    tail.drain(..tail.len() - STDERR_TAIL_BYTES);
                }
            }
            tail
        });
        Ok((Self { child, stderr, guard }, stdin, stdout))
    }

    /// The end of what the agent wrote to stderr (not waiting for a background process it
    /// left holding the pipe).
    pub async fn stderr_tail(&mut self) -> String {
        let err = match tokio::time::timeout(DRAIN_AFTER_EXIT, &mut self.stderr).await {
            Ok(Ok(err)) => err,
            _ => Vec::new(),
        };
        let tail = &err[err.len().saturating_sub(STDERR_TAIL_BYTES)..];
        String::from_utf8_lossy(tail).into_owned()
    }

    /// Waits up to `grace` for the agent to exit by itself (its stdin is closed by now),
    /// else kills its group; then why it ended, if that was a failure.
    pub async fn end(mut self, grace: Duration) -> Option<String> {
        let status = tokio::time::timeout(grace, self.child.wait()).await.ok().and_then(Result::ok)?;
        self.guard.disarm();
        if status.success() {
            return None;
        }
        let stderr_tail = self.stderr_tail().await;
        Some(Exited { stdout: Vec::new(), status, stderr_tail }.failure_reason())
    }
}

/// A failure after the agent got its input.
fn started_failure(output: String, error: String) -> TurnFailure {
    TurnFailure { output, error, agent_started: true }
}

/// Runs `command` (program and arguments) for one turn, its input on stdin, and collects
/// what it writes, handing each line of stdout to `on_line` as it comes. `Err` when it could
/// not start, or its output overflowed (it is stopped).
pub async fn run(
    command: &[String],
    input: &TurnInput<'_>,
    on_line: &mut (dyn FnMut(&[u8]) + Send),
) -> Result<Exited, TurnFailure> {
    let (mut agent, mut stdin, stdout) = Spawned::start(command, input).await?;
    let fail = started_failure;
    // Stdin and stderr are pumped by their own tasks while stdout is read here, so neither
    // a large input nor a chatty stderr can deadlock the turn. An agent that exits without
    // reading its input is not an error of the turn.
    let rendered = input.rendered.as_bytes().to_vec();
    let write = tokio::spawn(async move {
        let _ = stdin.write_all(&rendered).await;
    });
    let limit = input.max_output_bytes;
    let mut out = Vec::new();
    let mut reader = tokio::io::BufReader::new(stdout.take(limit as u64 + 1));
    let exited = {
        // Ok(true) when the output went past the limit.
        let read = async {
            let mut line = Vec::new();
            loop {
                line.clear();
                if reader.read_until(b'\n', &mut line).await? == 0 {
                    return Ok::<_, std::io::Error>(out.len() > limit);
                }
                out.extend_from_slice(&line);
                on_line(&line);
            }
        };
        tokio::pin!(read);
        let mut read_all = false;
        // Once the owner stops the turn: when the group, sent SIGTERM, gets SIGKILL.
        let mut kill_at: Option<tokio::time::Instant> = None;
        let mut killed = false;
        loop {
            tokio::select! {
                read_result = &mut read, if !read_all => match read_result {
                    Ok(true) => break None,
                    // All of stdout: the turn ends when the agent exits.
                    Ok(false) => read_all = true,
                    Err(e) => return Err(fail(String::new(), format!("reading the agent's output: {e}"))),
                },
                status = agent.child.wait() => {
                    // Collect what is still in the pipe, without waiting on leftovers.
                    if !read_all {
                        let _ = tokio::time::timeout(DRAIN_AFTER_EXIT, &mut read).await;
                    }
                    break Some(status);
                }
                () = input.stop.cancelled(), if kill_at.is_none() => {
                    agent.guard.signal(Signal::SIGTERM);
                    kill_at = Some(tokio::time::Instant::now() + STOP_GRACE);
                }
                () = tokio::time::sleep_until(kill_at.unwrap_or_else(tokio::time::Instant::now)),
                    if kill_at.is_some() && !killed =>
                {
                    agent.guard.signal(Signal::SIGKILL);
                    killed = true;
                }
            }
        }
    };
    write.abort();
    let status = match exited {
        Some(status) if out.len() <= limit => status,
        _ => {
            drop(agent); // kills the group
            return Err(fail(
                String::from_utf8_lossy(&out[..limit.min(out.len())]).into_owned(),
                format!("output exceeded turns.max_output_bytes ({limit} bytes); the agent was stopped"),
            ));
        }
    }
    .map_err(|e| fail(String::new(), format!("waiting for the agent: {e}")))?;
    agent.guard.disarm();
    if status.success() {
        agent.stderr.abort();
        return Ok(Exited { stdout: out, status, stderr_tail: String::new() });
    }
    let stderr_tail = agent.stderr_tail().await;
    Ok(Exited { stdout: out, status, stderr_tail })
}
