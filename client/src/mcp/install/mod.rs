//! `kiki mcp install`: writes an agent CLI's own configuration so that it starts kiki's MCP
//! server (`kiki mcp`, server name `kiki`, its tools seen as `mcp__kiki__ThreadSend`).
//!
//! The configuration is merged, never clobbered: every other key and server stays, only the
//! `kiki` entry is replaced. Both kinds of file are edited in place, keeping their comments,
//! order and layout: JSON through jsonc-parser's syntax tree (Gemini CLI's settings may hold
//! `//` and `/* */` comments, which it strips before parsing; the other agents read strict
//! JSON, so their files must be JSON), TOML (codex) through toml_edit. A file that exists but
//! cannot be parsed as its agent reads it is refused (bad input, naming the file and what is
//! wrong) and left untouched. Writes are atomic (a temporary file in the same directory,
//! renamed over the old one) and keep the old file's permissions; a new file is owner-only
//! (0600).
//!
//! The identity `kiki mcp` acts as comes from its environment (`KIKI_HOME`,
//! `KIKI_THREAD_ID`, `KIKI_TOKEN`, set by kikid for the agent CLI of a turn). Some agents
//! start MCP servers with a filtered environment, so every entry forwards the three
//! explicitly, in the form that agent expands. Outside a turn there is no `KIKI_HOME`: every
//! entry also names the home it was installed for (`kiki mcp --default-home HOME`), which
//! `kiki mcp` uses when neither `--home` nor `KIKI_HOME` names one.
//!
//! The files, by job: `agent.rs` (the agents: where each keeps its servers, the `kiki` entry
//! in its shape, from `kiki_proto::agents`), `merge.rs` (the entry merged into a file's
//! text), `write.rs` (the file replaced atomically), `profile.rs` (a kiki profile that runs
//! the agent as threads).

mod agent;
mod merge;
mod profile;
mod write;

use std::path::Path;

use anyhow::{Context, Result, anyhow};
use serde_json::{Value, json};

pub use self::agent::AgentCli;
use self::agent::{config_path, entry};
use self::merge::merge;
use self::profile::{add_profile, check_profile_name, merge_profile, profile_text};
use self::write::{read_existing, write_merged};
use crate::output::{UsageError, print_json};

#[derive(clap::Args, Debug)]
pub struct InstallArgs {
    /// Which agent CLI to set up.
    #[arg(value_enum)]
    pub agent: AgentCli,
    /// user: the agent's per-user config; project: the config in the current directory.
    #[arg(long, value_enum, default_value = "user")]
    pub scope: Scope,
    /// Print the configuration instead of writing it.
    #[arg(long)]
    pub print: bool,
    /// Also add a profile NAME to the home's config.toml that runs this agent as kiki
    /// threads (claude and codex by their own executors; gemini and kimi over ACP).
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
}

/// Whose configuration is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Scope {
    /// The agent's per-user configuration, under $HOME.
    User,
    /// The configuration in the current directory, for this project only.
    Project,
}

/// The word a user types for `value` (clap's spelling of a `ValueEnum`: the CLI's own enums
/// have that one), for what kiki prints about it.
fn word(value: &impl clap::ValueEnum) -> String {
    value.to_possible_value().map(|v| v.get_name().to_string()).unwrap_or_default()
}

pub fn run(home: &Path, args: InstallArgs, json: bool) -> Result<()> {
    if let Some(name) = &args.profile {
        check_profile_name(name)?;
    }
    let command = kiki_command()?;
    let home_dir = home;
    let home = home.to_str().ok_or_else(|| anyhow!("the home {} is not UTF-8", home.display()))?;
    let entry = entry(args.agent, &command, home);
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let path = config_path(
        args.agent,
        args.scope,
        std::env::var_os("HOME").as_deref(),
        std::env::var_os("CODEX_HOME").as_deref(),
        &cwd,
    )?;
    let profile_file = home_dir.join("config.toml");
    if let Some(name) = &args.profile {
        // Refused before anything is written.
        let (existing, _) = read_existing(&profile_file)?;
        merge_profile(existing.as_deref(), name, args.agent).map_err(|e| {
            same_kind(
                e,
                format!("cannot add the profile to {}", profile_file.display()),
                "nothing was written",
            )
        })?;
    }
    if !args.print {
        install(args.agent, &path, &entry)?;
        if let Some(name) = &args.profile {
            add_profile(&profile_file, name, args.agent)?;
        }
    }
    if json {
        let mut report = json!({
            "agent": word(&args.agent),
            "scope": word(&args.scope),
            "path": path.to_string_lossy(),
            "written": !args.print,
            "config": entry,
        });
        if let Some(name) = &args.profile {
            report["profile"] = json!({
                "name": name,
                "path": profile_file.to_string_lossy(),
                "config": profile_text(name, args.agent)?,
            });
        }
        print_json(&report);
    } else if args.print {
        out!("{}", merge(args.agent, None, &entry)?);
        let scope =
            if args.scope == Scope::User { String::new() } else { format!(" --scope {}", word(&args.scope)) };
        hint!("# for {} (kiki mcp install {}{scope} writes it there)", path.display(), word(&args.agent));
        if let Some(name) = &args.profile {
            out!("{}", profile_text(name, args.agent)?);
            hint!("# for {}", profile_file.display());
        }
    } else {
        outln!("wrote {} to {}", args.agent.entry_key(), path.display());
        if let Some(name) = &args.profile {
            outln!("wrote [profiles.{name}] to {} (restart kikid to use it)", profile_file.display());
        }
    }
    Ok(())
}

/// The running `kiki`, by absolute path with links resolved: what the entry starts.
fn kiki_command() -> Result<String> {
    let exe = std::env::current_exe().context("cannot find the running kiki binary")?;
    let exe = exe.canonicalize().with_context(|| format!("cannot resolve {}", exe.display()))?;
    exe.into_os_string()
        .into_string()
        .map_err(|exe| anyhow!("the kiki binary's path {} is not UTF-8", Path::new(&exe).display()))
}

/// A file that cannot be read as its agent reads it: bad input (exit 2), not a failure.
pub(super) fn malformed(problem: impl Into<String>) -> anyhow::Error {
    UsageError(problem.into()).into()
}

/// `error` said of a file (`about`, then what happened to it), of the same kind: bad input
/// stays bad input.
pub(super) fn same_kind(error: anyhow::Error, about: String, outcome: &str) -> anyhow::Error {
    let message = format!("{about}: {error:#}; {outcome}");
    if error.downcast_ref::<UsageError>().is_some() { UsageError(message).into() } else { anyhow!(message) }
}

/// Merges `entry` into the file at `path` (see [`write_merged`]).
pub(super) fn install(agent: AgentCli, path: &Path, entry: &Value) -> Result<()> {
    write_merged(path, "the kiki server", |existing| merge(agent, existing, entry))
}

#[cfg(test)]
mod testing {
    use serde_json::Value;

    use super::agent::{AgentCli, entry};

    pub const KIKI: &str = "/opt/kiki/bin/kiki";

    pub fn entry_for(agent: AgentCli) -> Value {
        entry(agent, KIKI, "/home/u/.kiki")
    }

    pub fn parse(text: &str) -> Value {
        serde_json::from_str(text).expect("json")
    }
}
