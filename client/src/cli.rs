//! The `kiki` command line (contract §4): its global flags, its commands, and which group
//! runs each.

use std::path::PathBuf;

use anyhow::Result;
use clap::{Parser, Subcommand};
use kiki_client::home_dir;

use crate::bridge::{self, BridgeCommand};
use crate::home::{self, HomeCommand};
use crate::thread::{self, ThreadCommand};

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
    #[command(flatten)]
    Home(HomeCommand),
    /// Threads: agent sessions of this home.
    #[command(subcommand)]
    Thread(ThreadCommand),
    /// Bridges: owner-approved one-way links to other homes.
    #[command(subcommand)]
    Bridge(BridgeCommand),
}

pub async fn run(args: Args) -> Result<()> {
    let home = home_dir(args.home)?;
    // Before any command touches the home or trusts a daemon on its socket.
    kiki_client::check_home(&home)?;
    match args.command {
        Command::Home(command) => home::run(&home, command, args.json).await,
        Command::Thread(command) => thread::run(&home, command, args.json).await,
        Command::Bridge(command) => bridge::run(&home, command, args.json).await,
    }
}
