//! The `kiki` command line: its global flags, its commands, and which group
//! runs each.

use std::path::PathBuf;

use anyhow::Result;
use clap::{Parser, Subcommand};
use kiki_client::home_dir;

use crate::bridge::{self, BridgeCommand};
use crate::home::{self, HomeCommand};
use crate::mcp::{self, McpArgs};
use crate::output::UsageError;
use crate::room::{self, RoomCommand};
use crate::space::{self, SpaceCommand};
use crate::thread::{self, ThreadCommand};

/// Examples under `kiki --help` (and `kiki help`): a first thread, reading it, scripting.
const EXAMPLES: &str = "\
Examples:
  kiki up && kiki thread create --prompt \"hello, kiki\" --wait && kiki down
  kiki thread read th_01…          # its newest 20 turns
  kiki --json thread list          # any command: one JSON document on stdout
  kiki room read room_01…          # a room's roster and posts; kiki room --help
  kiki thread --help               # the thread commands; kiki room --help, kiki bridge --help, …";

/// Examples under `kiki thread --help`.
const THREAD_EXAMPLES: &str = "\
Examples:
  kiki thread create --prompt \"fix the build\" --wait   # prints the first turn once it ends
  kiki thread read th_01… --last 5                     # the newest 5 turns
  kiki thread read th_01… --content-ref tu_01….output --all
  kiki thread send th_01… --key k1 --content \"ping\"
  kiki thread wait th_01… --timeout-ms 10000
  kiki thread stop th_01…                              # interrupts the running turn";

/// Examples under `kiki room --help`.
const ROOM_EXAMPLES: &str = "\
Examples:
  kiki room create --host th_01… --name review   # the host answers the owner's posts
  kiki room add room_01… th_02…                  # another thread joins as a member
  kiki room persona room_01… critic --profile claude --instructions \"find the flaws\"
  kiki room send room_01… --content \"ready\" --mention th_02… --mention critic
  kiki room read room_01…                        # then --after-id C for what came since
  kiki room pause room_01…                       # posts wake nobody until `kiki room resume`";

/// Examples under `kiki bridge --help`.
const BRIDGE_EXAMPLES: &str = "\
Examples:
  kiki bridge request 192.0.2.7:7443 --want read,send --name laptop   # on the source home
  kiki bridge approve breq_01… --allow read,send                      # on the target home
  kiki thread read laptop/th_01…                                      # then, on the source";

/// Examples under `kiki space --help`.
const SPACE_EXAMPLES: &str = "\
Examples:
  kiki space add ssh://me@devbox --name dev --grant send,wake   # bridges both ways
  kiki --space dev thread create --profile codex --prompt \"run the tests\"
  kiki thread send dev/th_01… --key k1 --content \"ping\"        # over the bridge
  kiki space list                                               # bridges and link health
  kiki space remove dev --stop                                  # revoked at both ends";

#[derive(Parser)]
#[command(
    name = "kiki",
    version,
    about = "Talk to a kiki home: threads, rooms and bridges between agents",
    after_help = EXAMPLES
)]
pub struct Args {
    /// The home directory (default: $KIKI_HOME, else ~/.kiki).
    #[arg(long, global = true)]
    pub home: Option<PathBuf>,
    /// Print exactly one JSON document on stdout (errors too, their message in one line).
    #[arg(long, global = true)]
    pub json: bool,
    /// Run the command against the home of this space (`kiki space add`), through its
    /// socket forwarded over the space's SSH connection.
    #[arg(long, global = true)]
    pub space: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    #[command(flatten)]
    Home(HomeCommand),
    /// Threads: agent sessions of this home.
    #[command(subcommand, after_help = THREAD_EXAMPLES)]
    Thread(ThreadCommand),
    /// Rooms: shared logs where the owner, threads and personas post and wake each other by
    /// mentions.
    #[command(subcommand, after_help = ROOM_EXAMPLES)]
    Room(RoomCommand),
    /// Bridges: owner-approved one-way links to other homes.
    #[command(subcommand, after_help = BRIDGE_EXAMPLES)]
    Bridge(BridgeCommand),
    /// The collaboration tools as an MCP server on stdio, for agent CLIs; `kiki mcp install`
    /// sets an agent up to start it.
    Mcp(McpArgs),
    /// The home's session tools (files, shell, tasks, todo, cron): list them, or call one
    /// for a thread.
    #[command(subcommand, after_help = crate::tool::TOOL_EXAMPLES)]
    Tool(crate::tool::ToolCommand),
    /// Spaces: machines reached over SSH, each a home of its own, bridged with this one.
    #[command(subcommand, after_help = SPACE_EXAMPLES)]
    Space(SpaceCommand),
    /// The home's store: copy it to another backend.
    #[command(subcommand, after_help = home::STORE_EXAMPLES)]
    Store(home::StoreCommand),
}

pub async fn run(args: Args) -> Result<()> {
    // `kiki mcp --default-home DIR`: what an agent's entry names, for when it runs outside a
    // turn (no KIKI_HOME) — below --home and KIKI_HOME, above ~/.kiki.
    let flag = args.home.or_else(|| match &args.command {
        Command::Mcp(mcp) if kiki_client::env_var("KIKI_HOME").is_none() => mcp.default_home(),
        _ => None,
    });
    // Checked before any command touches the home or trusts a daemon on its socket.
    let mut home = home_dir(flag)?;
    if let Some(name) = &args.space {
        if matches!(&args.command, Command::Space(_) | Command::Home(HomeCommand::Up { .. })) {
            return Err(UsageError(format!(
                "--space {name}: not with this command (kiki space up {name} starts the space's home)"
            ))
            .into());
        }
        home = space::home_of(&home, name).await?;
    }
    match args.command {
        Command::Home(command) => home::run(&home, command, args.json).await,
        Command::Thread(command) => thread::run(&home, command, args.json).await,
        Command::Room(command) => room::run(&home, command, args.json).await,
        Command::Bridge(command) => bridge::run(&home, command, args.json).await,
        Command::Mcp(command) => mcp::run(&home, command, args.json).await,
        Command::Tool(command) => crate::tool::run(&home, command, args.json).await,
        Command::Space(command) => space::run(&home, command, args.json).await,
        Command::Store(command) => home::store(&home, command, args.json).await,
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    /// Every flag and argument of every command says what it is in a line of help, and
    /// `kiki`, each command group and each home command show examples.
    #[test]
    fn every_argument_has_help_and_every_group_examples() {
        let kiki = Args::command();
        kiki.clone().debug_assert();
        assert!(kiki.get_after_help().is_some(), "kiki --help has examples");
        let mut missing = Vec::new();
        for group in kiki.get_subcommands().filter(|c| c.get_name() != "help") {
            let nested: Vec<&clap::Command> =
                group.get_subcommands().filter(|c| c.get_name() != "help").collect();
            // A group (`thread`, `bridge`) shows examples; a home command (`up`) itself.
            if group.get_after_help().is_none() {
                missing.push(format!("examples of kiki {}", group.get_name()));
            }
            let commands = if nested.is_empty() { vec![group] } else { nested };
            for command in commands {
                for arg in
                    command.get_arguments().filter(|a| !["help", "version"].contains(&a.get_id().as_str()))
                {
                    if arg.get_help().is_none_or(|h| h.to_string().trim().is_empty()) {
                        missing.push(format!("help of {} {}", command.get_name(), arg.get_id()));
                    }
                }
            }
        }
        assert!(missing.is_empty(), "missing: {missing:?}");
    }
}
