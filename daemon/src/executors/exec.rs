//! The `exec` executor: runs the profile's command in the thread's cwd with the turn input
//! on stdin; stdout is the output, a non-zero exit a failed turn.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use super::{TurnFailure, TurnInput};

/// How much of stderr a failed turn's error keeps (the end, where the reason usually is).
const STDERR_TAIL_BYTES: usize = 4096;

pub async fn run(command: &[String], input: TurnInput<'_>) -> Result<String, TurnFailure> {
    let fail = |output: String, error: String| TurnFailure { output, error };
    let (program, args) =
        command.split_first().ok_or_else(|| fail(String::new(), "the profile has no command".into()))?;
    let mut child = Command::new(program)
        .args(args)
        .current_dir(input.cwd)
        .envs(input.env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Dropping the turn (daemon shutdown) must not leave the agent running.
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| fail(String::new(), format!("cannot start {program:?}: {e}")))?;

    let (Some(mut stdin), Some(stdout), Some(mut stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(fail(String::new(), "child process has no stdio pipes".into()));
    };
    // Stdin and stderr are pumped by their own tasks while stdout is read here, so neither
    // a large input nor a chatty stderr can deadlock the turn, and a runaway output can be
    // cut off. An agent that exits without reading its input is not an error of the turn.
    let rendered = input.rendered.as_bytes().to_vec();
    let write = tokio::spawn(async move {
        let _ = stdin.write_all(&rendered).await;
    });
    let read_err = tokio::spawn(async move {
        let mut err = Vec::new();
        let _ = stderr.read_to_end(&mut err).await;
        err
    });
    let limit = input.max_output_bytes;
    let mut out = Vec::new();
    let read = stdout.take(limit as u64 + 1).read_to_end(&mut out).await;
    if let Err(e) = read {
        return Err(fail(String::new(), format!("reading the agent's output: {e}")));
    }
    if out.len() > limit {
        let _ = child.kill().await;
        write.abort();
        return Err(fail(
            String::from_utf8_lossy(&out[..limit]).into_owned(),
            format!("output exceeded turns.max_output_bytes ({limit} bytes); the agent was stopped"),
        ));
    }
    let status =
        child.wait().await.map_err(|e| fail(String::new(), format!("waiting for the agent: {e}")))?;
    let output = String::from_utf8_lossy(&out).into_owned();
    if status.success() {
        write.abort();
        read_err.abort();
        return Ok(output);
    }
    write.abort();
    // A background process the agent left behind may hold stderr open; don't wait for it.
    let err = match tokio::time::timeout(Duration::from_secs(1), read_err).await {
        Ok(Ok(err)) => err,
        _ => Vec::new(),
    };
    let tail = &err[err.len().saturating_sub(STDERR_TAIL_BYTES)..];
    let stderr = String::from_utf8_lossy(tail);
    let stderr = stderr.trim();
    let reason = match status.code() {
        Some(code) => format!("the agent exited with status {code}"),
        None => format!("the agent was killed ({status})"),
    };
    Err(fail(output, if stderr.is_empty() { reason } else { format!("{reason}: {stderr}") }))
}
