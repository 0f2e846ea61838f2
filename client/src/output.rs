//! How results and errors are printed: one JSON document with `--json`, text otherwise.

use std::io::{ErrorKind, Write};
use std::process::ExitCode;

use kiki_client::ClientError;
use serde::Serialize;
use tonic::Code;

/// Writes a result to stdout. A reader that went away (`kiki thread list --json | head`)
/// ends kiki quietly (exit 0, nothing on stderr) instead of a panic on the broken pipe.
pub fn write_out(text: std::fmt::Arguments) {
    if let Err(e) = std::io::stdout().lock().write_fmt(text) {
        if e.kind() == ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("kiki: cannot write the result: {e}");
        std::process::exit(1);
    }
}

/// Writes a hint to stderr. A hint is no part of the result: if stderr cannot take it (a
/// reader gone away), it is dropped rather than ending or failing the command.
pub fn write_hint(text: std::fmt::Arguments) {
    let _ = std::io::stderr().lock().write_fmt(text);
}

/// Prints `value` as one JSON document (proto field names, snake_case).
pub fn print_json<T: Serialize>(value: &T) {
    match serde_json::to_string_pretty(value) {
        Ok(text) => outln!("{text}"),
        Err(e) => eprintln!("kiki: cannot encode the result as JSON: {e}"),
    }
}

pub fn print_error_json(code: &str, message: &str) {
    print_json(&serde_json::json!({ "error": { "code": code, "message": message } }));
}

/// A command-line error in one line, for `--json`'s `message` (the whole text, with the
/// usage, goes to stderr): the error's first line without clap's `error: `. A first line
/// that announces a list (`the following required arguments were not provided:`) takes the
/// list's indented lines after it, so the message still names what is wrong. A command
/// named without its subcommand (`kiki thread`) is clap's help, not an error line: it is
/// said so.
pub fn usage_error_line(e: &clap::Error) -> String {
    if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        return "a subcommand is required but none was given (the usage is on stderr)".into();
    }
    let text = e.to_string();
    let mut lines = text.lines();
    let first = lines.next().unwrap_or_default();
    let mut line = first.strip_prefix("error: ").unwrap_or(first).trim_end().to_string();
    if line.ends_with(':') {
        for item in lines.take_while(|l| l.starts_with(' ') && !l.trim().is_empty()) {
            line.push(' ');
            line.push_str(item.trim());
        }
    }
    line
}

/// `InvalidArgument` → `"invalid_argument"`.
pub fn code_word(code: Code) -> String {
    let mut word = String::new();
    for (i, c) in format!("{code:?}").chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            word.push('_');
        }
        word.push(c.to_ascii_lowercase());
    }
    word
}

/// Exit codes (documented in the README): 2 bad input, 3 not found, 4 unreachable or an
/// outcome unknown (worth retrying: the home, or a bridge's peer), 5 conflict, 6 wrong state,
/// 7 not allowed, 8 out of space or too busy, 9 a damaged store, 1 anything else.
fn exit_code(code: Code) -> u8 {
    match code {
        Code::InvalidArgument | Code::OutOfRange => 2,
        Code::NotFound => 3,
        Code::Unavailable => 4,
        Code::AlreadyExists | Code::Aborted => 5,
        Code::FailedPrecondition => 6,
        Code::PermissionDenied | Code::Unauthenticated => 7,
        Code::ResourceExhausted => 8,
        Code::DataLoss => 9,
        _ => 1,
    }
}

/// The code of a kikid that exited before answering, from its exit status (the same table).
fn kikid_code(status: Option<i32>) -> Code {
    match status {
        Some(2) => Code::InvalidArgument,
        Some(6) => Code::FailedPrecondition,
        Some(7) => Code::PermissionDenied,
        Some(8) => Code::ResourceExhausted,
        Some(9) => Code::DataLoss,
        _ => Code::Internal,
    }
}

/// A call's failure as a person and a script need it. A status the client made itself from
/// a broken connection (it has a source; a daemon's answer never does), other than a failed
/// connect, means the call may or may not have taken effect: it is worth retrying — safely,
/// as every write is idempotent (a send by its key) — so it is `UNAVAILABLE`, exit 4.
fn status_report(status: &tonic::Status) -> (Code, String) {
    if std::error::Error::source(status).is_some() && status.code() != Code::Unavailable {
        let cause = error_chain(status);
        return (
            Code::Unavailable,
            format!(
                "the connection to kikid was lost before it answered ({cause}): the call's outcome is \
                 unknown; retry it (a send with the same idempotency key is safe)"
            ),
        );
    }
    (status.code(), status.message().to_string())
}

/// The innermost causes of `e`, joined: what a person needs ("connection reset by peer").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut causes = Vec::new();
    let mut cause = e.source();
    while let Some(next) = cause {
        causes.push(next.to_string());
        cause = next.source();
    }
    causes.last().cloned().unwrap_or_else(|| e.to_string())
}

/// Reports an error on stderr (and as JSON on stdout with `--json`); returns the exit code.
pub fn report(error: &anyhow::Error, json: bool) -> ExitCode {
    // The findings are the output, already printed.
    if error.downcast_ref::<ProblemsFound>().is_some() || error.downcast_ref::<ToolFailed>().is_some() {
        return ExitCode::FAILURE;
    }
    let (code, message) = match error.downcast_ref::<ClientError>() {
        Some(ClientError::Status(status)) => status_report(status),
        Some(ClientError::Unreachable { .. }) => (Code::Unavailable, error.to_string()),
        Some(ClientError::UntrustedHome(_)) => (Code::PermissionDenied, error.to_string()),
        _ => match (error.downcast_ref::<tonic::Status>(), error.downcast_ref::<KikidFailed>()) {
            (Some(status), _) => status_report(status),
            (None, Some(failed)) => (kikid_code(failed.code), error.to_string()),
            (None, None) => match error.downcast_ref::<UsageError>() {
                Some(_) => (Code::InvalidArgument, error.to_string()),
                None => (Code::Unknown, format!("{error:#}")),
            },
        },
    };
    eprintln!("kiki: {message}");
    if json {
        print_error_json(&code_word(code), &message);
    }
    ExitCode::from(exit_code(code))
}

/// A mistake in the command line that clap cannot see (e.g. a malformed reference).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// kikid stopped before answering, with its exit status: it tells what kind of failure it
/// was (`StartError::exit_code`, the same table as kiki's own exit codes).
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct KikidFailed {
    pub code: Option<i32>,
    pub message: String,
}

/// `kiki tool call`: the tool ran into an error or was denied (its answer, printed, says
/// why): exit 1.
#[derive(Debug, thiserror::Error)]
#[error("the tool's outcome: {0}")]
pub struct ToolFailed(pub String);

/// `kiki doctor` found something wrong: exit 1, the findings already printed.
#[derive(Debug, thiserror::Error)]
#[error("kiki doctor found problems (above)")]
pub struct ProblemsFound;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_usage_error_is_one_line_naming_what_is_wrong() {
        use clap::{Arg, Command};
        let command = || {
            Command::new("kiki")
                .subcommand(Command::new("read").arg(Arg::new("reference").required(true)))
                .subcommand_required(true)
        };
        let unknown = command().try_get_matches_from(["kiki", "frobnicate"]).expect_err("unknown");
        assert_eq!(usage_error_line(&unknown), "unrecognized subcommand 'frobnicate'");
        let missing = command().try_get_matches_from(["kiki", "read"]).expect_err("missing");
        assert_eq!(
            usage_error_line(&missing),
            "the following required arguments were not provided: <reference>"
        );
    }

    #[test]
    fn codes_are_snake_case_words() {
        assert_eq!(code_word(Code::InvalidArgument), "invalid_argument");
        assert_eq!(code_word(Code::NotFound), "not_found");
        assert_eq!(code_word(Code::Ok), "ok");
    }
}
