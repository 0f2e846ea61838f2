//! What the Codex a `codex` profile runs can do, from its own `--help`: whether it has the
//! app-server, and, for the `codex exec` fallback of one that has not, the flags its `exec`
//! takes.
//!
//! Real releases decide this, not their exit: Codex before 0.44 has no `app-server` and takes
//! the word for a prompt of its interactive mode, which fails without a terminal (`Error: No
//! such device or address (os error 6)`). So kiki asks `COMMAND --help` first, once per
//! command while kikid runs: a `Commands:` list naming `app-server` means the app-server, one
//! without it means `codex exec`, and help kiki cannot read (another program, a wrapper)
//! means the app-server is tried. A decision that proves wrong (an app-server that ends
//! before its handshake) is forgotten, so the next turn asks again.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use tokio::process::Command;

use super::turn::TurnInput;
use crate::sync::lock;

/// How long `codex --help` may take (the npm launcher starts node, then Codex).
const PROBE_TIMEOUT: Duration = Duration::from_secs(15);

/// What a Codex release can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// It has `codex app-server` (0.44 and later).
    AppServer,
    /// It has none: turns run `codex exec`, with what its `exec --help` lists.
    Exec(ExecFlags),
}

/// What a release's `codex exec` takes, besides `--json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExecFlags {
    /// `--skip-git-repo-check`: needed outside a git repository (every release from 0.8 has
    /// it).
    pub skip_git_repo_check: bool,
    /// `--experimental-json` (0.42–0.43, whose `--json` is an older format that names no
    /// session): the events of later releases' `--json`.
    pub experimental_json: bool,
    /// `exec resume SESSION` (0.39 and later).
    pub resume: bool,
}

/// Decisions made so far, by the profile's command.
static RELEASES: LazyLock<Mutex<HashMap<Vec<String>, Release>>> = LazyLock::new(Default::default);

/// What the Codex of `command` can do; `None` when its help says nothing kiki can read.
pub async fn release(command: &[String], input: &TurnInput<'_>) -> Option<Release> {
    if let Some(known) = lock(&RELEASES).get(command) {
        return Some(*known);
    }
    let help = help(command, &["--help"], input).await?;
    let release = if commands(&help)?.contains(&"app-server") {
        Release::AppServer
    } else {
        Release::Exec(exec_flags(command, input).await)
    };
    lock(&RELEASES).insert(command.to_vec(), release);
    Some(release)
}

/// Forgets what was decided for `command` (it did not hold): the next turn asks again.
pub fn forget(command: &[String]) {
    lock(&RELEASES).remove(command);
}

/// What `COMMAND exec --help` lists; nothing if it cannot be read.
pub async fn exec_flags(command: &[String], input: &TurnInput<'_>) -> ExecFlags {
    let Some(help) = help(command, &["exec", "--help"], input).await else {
        return ExecFlags::default();
    };
    ExecFlags {
        skip_git_repo_check: help.contains("--skip-git-repo-check"),
        experimental_json: help.contains("--experimental-json"),
        resume: commands(&help).is_some_and(|c| c.contains(&"resume")),
    }
}

/// What `COMMAND ARGS` prints, run as a turn's agent is (its cwd and env); `None` if it
/// fails or takes too long.
async fn help(command: &[String], args: &[&str], input: &TurnInput<'_>) -> Option<String> {
    let (program, before) = command.split_first()?;
    let run = Command::new(program)
        .args(before)
        .args(args)
        .current_dir(input.cwd)
        .envs(input.env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .output();
    match tokio::time::timeout(PROBE_TIMEOUT, run).await {
        Ok(Ok(out)) if out.status.success() => Some(String::from_utf8_lossy(&out.stdout).into_owned()),
        Ok(Ok(out)) => {
            tracing::debug!(status = %out.status, ?args, "the Codex help failed");
            None
        }
        Ok(Err(e)) => {
            tracing::debug!(error = %e, ?args, "cannot run the Codex help");
            None
        }
        Err(_) => {
            tracing::warn!(?args, "the Codex help took over {PROBE_TIMEOUT:?}");
            None
        }
    }
}

/// The subcommands a clap help lists under `Commands:` (each on a line of its own, two
/// spaces in; a wrapped description is indented further); `None` without that list.
fn commands(help: &str) -> Option<Vec<&str>> {
    let mut lines = help.lines().skip_while(|line| line.trim_end() != "Commands:");
    lines.next()?;
    let listed = lines
        .take_while(|line| !line.trim().is_empty())
        .filter_map(|line| line.strip_prefix("  "))
        .filter(|line| !line.starts_with(' '))
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    Some(listed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The heads of `codex --help` of real releases (0.39.0 and 0.171.0, from npm).
    const OLD: &str = "Codex CLI\n\nIf no subcommand is specified, options will be forwarded to the interactive CLI.\n\n\
        Usage: codex [OPTIONS] [PROMPT]\n       codex [OPTIONS] [PROMPT] <COMMAND>\n\nCommands:\n  \
        exec        Run Codex non-interactively [aliases: e]\n  login       Manage login\n  \
        proto       Run the Protocol stream via stdin/stdout [aliases: p]\n  \
        apply       Apply the latest diff produced by Codex agent as a `git apply` to your local working\n              \
        tree [aliases: a]\n  resume      Resume a previous interactive session\n  \
        help        Print this message or the help of the given subcommand(s)\n\nArguments:\n  [PROMPT]\n";
    const NEW: &str = "Codex CLI\n\nCommands:\n  agents            Open the agent command center\n  \
        exec              Run Codex non-interactively [aliases: e]\n  \
        app-server        [experimental] Run the app server or related tooling\n  \
        remote-control    [experimental] Manage the app-server daemon with remote control enabled\n\n\
        Arguments:\n  [PROMPT]\n";

    #[test]
    fn the_commands_list_says_whether_there_is_an_app_server() {
        let old = commands(OLD).expect("a list");
        assert_eq!(old, ["exec", "login", "proto", "apply", "resume", "help"]);
        assert!(!old.contains(&"app-server"));
        assert!(commands(NEW).expect("a list").contains(&"app-server"));
        assert_eq!(commands("usage: wrapper [args]\n"), None, "no list: nothing to go by");
    }
}
