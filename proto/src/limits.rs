//! The API's limits, written once: kikid checks every call against them before anything
//! is written, and the clients (`kiki`, `kiki mcp`) check the same limits with the same
//! words where they would otherwise send, or read, more than kikid takes. A violation
//! names the field and the limit: `content: must be at most 100000 characters, got N`.

/// ThreadCreate's `prompt`.
pub const PROMPT_MAX_CHARS: usize = 100_000;
/// ThreadSend's `content` to a thread.
pub const CONTENT_MAX_CHARS: usize = 100_000;
/// ThreadSend's `content` to a room.
pub const ROOM_CONTENT_MAX_CHARS: usize = 20_000;
/// A persona's instructions (the prompt its thread starts with).
pub const INSTRUCTIONS_MAX_CHARS: usize = 20_000;
/// A thread's title, one printable line.
pub const TITLE_MAX_CHARS: usize = 200;
/// A title taken from a prompt's first line is cut to this many characters.
pub const DERIVED_TITLE_CHARS: usize = 80;
/// ThreadSend's `idempotency_key`.
pub const KEY_MAX_CHARS: usize = 256;
/// An id a call names — a room, a thread of another home — (ids are ~30 characters):
/// bounds what a call, or a cross-home call, carries.
pub const ID_MAX_CHARS: usize = 256;
/// An agent's own session id a thread is created to continue.
pub const AGENT_SESSION_MAX_CHARS: usize = 256;
/// A persona's roster id.
pub const PERSONA_ID_MAX_CHARS: usize = 64;
/// `kiki attention --reason`, and the reason a permission request is denied with.
pub const REASON_MAX_CHARS: usize = 2_000;
/// A permission request's tool name.
pub const TOOL_MAX_CHARS: usize = 200;
/// A permission request's tool input (JSON text).
pub const TOOL_INPUT_MAX_CHARS: usize = 100_000;

/// ThreadList's `limit` when absent.
pub const LIST_LIMIT_DEFAULT: u32 = 50;
/// ThreadRead's `limit` when absent.
pub const READ_LIMIT_DEFAULT: u32 = 20;
/// Any page's `limit`: 1 to this.
pub const PAGE_LIMIT_MAX: u32 = 100;
/// A turn field longer than this (UTF-16 code units) comes as a preview plus a content
/// ref, and content-ref segments are at most this long.
pub const SEGMENT_UTF16: usize = 16_384;
/// How much of an oversized field ThreadRead shows inline.
pub const PREVIEW_UTF16: usize = 2_000;

/// ThreadWait's targets: 1 to this many distinct threads.
pub const WAIT_TARGETS_MAX: usize = 8;
/// ThreadWait's `timeout_ms`: 0 (check once) to this.
pub const WAIT_TIMEOUT_MAX_MS: u32 = 60_000;
/// ThreadWait's `timeout_ms` when absent.
pub const WAIT_TIMEOUT_DEFAULT_MS: u32 = 30_000;

/// The largest message kikid's gRPC services read (tonic's default, which they keep): a
/// call larger than this never reaches them, so clients check their fields' limits first.
pub const MESSAGE_MAX_BYTES: usize = 4 * 1024 * 1024;

/// A limit a field broke: the field, and what the limit says (`must be at most …`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub field: &'static str,
    pub message: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

impl std::error::Error for Violation {}

/// Non-empty text of at most `max` characters (Unicode scalar values, not bytes).
pub fn text(field: &'static str, value: &str, max: usize) -> Result<(), Violation> {
    if value.is_empty() {
        return Err(Violation { field, message: "must not be empty".into() });
    }
    at_most(field, value, max)
}

/// Text of at most `max` characters (Unicode scalar values, not bytes); empty is fine.
pub fn at_most(field: &'static str, value: &str, max: usize) -> Result<(), Violation> {
    chars_at_most(field, value.chars().count(), max)
}

/// A field of `chars` characters against its limit `max`.
pub fn chars_at_most(field: &'static str, chars: usize, max: usize) -> Result<(), Violation> {
    if chars > max {
        return Err(Violation { field, message: format!("must be at most {max} characters, got {chars}") });
    }
    Ok(())
}

/// A page's `limit`: 1 to [`PAGE_LIMIT_MAX`], or `default` when absent.
pub fn page_limit(field: &'static str, limit: Option<u32>, default: u32) -> Result<u32, Violation> {
    match limit {
        None => Ok(default),
        Some(n) if (1..=PAGE_LIMIT_MAX).contains(&n) => Ok(n),
        Some(n) => {
            Err(Violation { field, message: format!("must be between 1 and {PAGE_LIMIT_MAX}, got {n}") })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_name_field_and_bound() {
        assert_eq!(page_limit("limit", None, 50).ok(), Some(50));
        assert_eq!(page_limit("limit", Some(100), 50).ok(), Some(100));
        let err = page_limit("limit", Some(0), 50).expect_err("zero").to_string();
        assert_eq!(err, "limit: must be between 1 and 100, got 0");
        assert!(page_limit("limit", Some(101), 50).is_err());
        assert!(text("content", "", 5).is_err());
        assert!(at_most("content", "", 5).is_ok());
        assert!(text("content", "ééééé", 5).is_ok(), "characters, not bytes");
        let err = text("content", "abcdef", 5).expect_err("long").to_string();
        assert_eq!(err, "content: must be at most 5 characters, got 6");
    }
}
