//! The limits of contract §2, checked before anything is written. A violation is an
//! `INVALID_ARGUMENT` that names the field and the limit.

use crate::error::{Error, Result};

pub const PROMPT_MAX_CHARS: usize = 100_000;
pub const CONTENT_MAX_CHARS: usize = 100_000;
pub const TITLE_MAX_CHARS: usize = 200;
/// ThreadSend's idempotency key.
pub const KEY_MAX_CHARS: usize = 256;
/// A thread id named for another home (ids are ~30 characters): bounds what a cross-home
/// send puts in its outbox and its bridge call.
pub const REMOTE_ID_MAX_CHARS: usize = 256;
/// An agent's own session id a thread is created to continue.
pub const AGENT_SESSION_MAX_CHARS: usize = 256;
/// A title taken from a prompt's first line is cut to this many characters.
pub const DERIVED_TITLE_CHARS: usize = 80;
pub const LIST_LIMIT_DEFAULT: u32 = 50;
pub const READ_LIMIT_DEFAULT: u32 = 20;
pub const PAGE_LIMIT_MAX: u32 = 100;
/// A turn field longer than this (UTF-16 code units) is returned as a preview plus a
/// content ref, and content-ref segments are at most this long.
pub const SEGMENT_UTF16: usize = 16_384;
/// How much of an oversized field ThreadRead shows inline.
pub const PREVIEW_UTF16: usize = 2_000;

/// `limit` of a page: 1–100, or the default when absent.
pub fn page_limit(field: &'static str, limit: Option<u32>, default: u32) -> Result<u32> {
    match limit {
        None => Ok(default),
        Some(n) if (1..=PAGE_LIMIT_MAX).contains(&n) => Ok(n),
        Some(n) => Err(Error::invalid(field, format!("must be between 1 and {PAGE_LIMIT_MAX}, got {n}"))),
    }
}

/// Non-empty text of at most `max` characters (Unicode scalar values).
pub fn text(field: &'static str, value: &str, max: usize) -> Result<()> {
    if value.is_empty() {
        return Err(Error::invalid(field, "must not be empty"));
    }
    let chars = value.chars().count();
    if chars > max {
        return Err(Error::invalid(field, format!("must be at most {max} characters, got {chars}")));
    }
    Ok(())
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
        assert!(text("content", "ééééé", 5).is_ok(), "characters, not bytes");
        let err = text("content", "abcdef", 5).expect_err("long").to_string();
        assert_eq!(err, "content: must be at most 5 characters, got 6");
    }
}
