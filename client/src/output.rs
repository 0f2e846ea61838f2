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

/// `InvalidArgument` → `"invalid_argument"`.
fn code_word(code: Code) -> String {
    let mut word = String::new();
    for (i, c) in format!("{code:?}").chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            word.push('_');
        }
        word.push(c.to_ascii_lowercase());
    }
    word
}

/// Exit codes (documented in the README): 2 bad input, 3 not found, 4 unreachable (the home,
/// or a bridge's peer),
/// 5 conflict, 6 wrong state, 7 not allowed, 1 anything else.
fn exit_code(code: Code) -> u8 {
    match code {
        Code::InvalidArgument | Code::OutOfRange => 2,
        Code::NotFound => 3,
        Code::Unavailable => 4,
        Code::AlreadyExists | Code::Aborted => 5,
        Code::FailedPrecondition => 6,
        Code::PermissionDenied | Code::Unauthenticated => 7,
        _ => 1,
    }
}

/// Reports an error on stderr (and as JSON on stdout with `--json`); returns the exit code.
pub fn report(error: &anyhow::Error, json: bool) -> ExitCode {
    let (code, message) = match error.downcast_ref::<ClientError>() {
        Some(ClientError::Status(status)) => (status.code(), status.message().to_string()),
        Some(ClientError::Unreachable { .. }) => (Code::Unavailable, error.to_string()),
        _ => match error.downcast_ref::<tonic::Status>() {
            Some(status) => (status.code(), status.message().to_string()),
            None => match error.downcast_ref::<UsageError>() {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_snake_case_words() {
        assert_eq!(code_word(Code::InvalidArgument), "invalid_argument");
        assert_eq!(code_word(Code::NotFound), "not_found");
        assert_eq!(code_word(Code::Ok), "ok");
    }
}
