//! `kiki`: the command line of a kiki home. Every command takes `--json` and then prints
//! exactly one JSON document on stdout (errors too, as `{"error": {"code", "message"}}`).

mod cli;
mod output;
mod up;

use std::process::ExitCode;

use clap::Parser;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args = match cli::Args::try_parse() {
        Ok(args) => args,
        Err(e) if e.use_stderr() && std::env::args().any(|a| a == "--json") => {
            // On stderr as always, and also as JSON on stdout.
            eprint!("{e}");
            output::print_error_json("invalid_argument", &e.to_string());
            return ExitCode::from(2);
        }
        Err(e) => e.exit(),
    };
    let json = args.json;
    match cli::run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => output::report(&e, json),
    }
}
