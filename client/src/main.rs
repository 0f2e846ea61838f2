//! `kiki`: the command line of a kiki home. Every command takes `--json` and then prints
//! exactly one JSON document on stdout (errors too, as `{"error": {"code", "message"}}`).

/// `print!` for kiki's results, through [`output::write_out`].
macro_rules! out {
    ($($arg:tt)*) => { $crate::output::write_out(format_args!($($arg)*)) };
}

/// `println!` for kiki's results, through [`output::write_out`].
macro_rules! outln {
    () => { $crate::output::write_out(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::output::write_out(format_args!("{}\n", format_args!($($arg)*))) };
}

/// A paging hint (`more: --cursor C`), for people: on stderr, so stdout holds the result
/// alone, through [`output::write_hint`].
macro_rules! hint {
    ($($arg:tt)*) => { $crate::output::write_hint(format_args!("{}\n", format_args!($($arg)*))) };
}

mod args;
mod bridge;
mod cli;
mod connect;
mod home;
mod mcp;
mod output;
mod render;
mod room;
mod space;
mod thread;
mod tool;

use std::process::ExitCode;

use clap::Parser;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args = match cli::Args::try_parse() {
        Ok(args) => args,
        Err(e) if e.use_stderr() && std::env::args_os().any(|a| a == "--json") => {
            // On stderr as always, with the usage; on stdout as JSON, the error in one line.
            eprint!("{e}");
            output::print_error_json("invalid_argument", &output::usage_error_line(&e));
            return ExitCode::from(2);
        }
        Err(e)
            if e.kind() == clap::error::ErrorKind::DisplayVersion
                && std::env::args_os().any(|a| a == "--json") =>
        {
            // Through the results' writer: a closed or full stdout is no panic.
            outln!("{}", serde_json::json!({ "version": env!("CARGO_PKG_VERSION") }));
            return ExitCode::SUCCESS;
        }
        Err(e) => e.exit(),
    };
    let json = args.json;
    match cli::run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => output::report(&e, json),
    }
}
