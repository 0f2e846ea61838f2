//! Opaque paging cursors. A cursor is base64url of `KIND:part:part…`; callers must treat it
//! as opaque, and the daemon refuses one of the wrong kind or for another thread.

use data_encoding::BASE64URL_NOPAD;

use crate::error::{Error, Result};

pub fn encode(kind: &str, parts: &[&str]) -> String {
    let mut text = kind.to_string();
    for part in parts {
        text.push(':');
        text.push_str(part);
    }
    BASE64URL_NOPAD.encode(text.as_bytes())
}

/// The parts of a cursor of `kind`, exactly `n` of them; the last may contain `:`.
pub fn decode(field: &'static str, kind: &str, cursor: &str, n: usize) -> Result<Vec<String>> {
    let parts = split(field, kind, cursor, n + 1)?;
    if parts.len() != n {
        return Err(invalid(field, kind));
    }
    Ok(parts)
}

/// The parts of a cursor of `kind`, however many it has (none may contain `:`).
pub fn decode_parts(field: &'static str, kind: &str, cursor: &str) -> Result<Vec<String>> {
    split(field, kind, cursor, usize::MAX)
}

/// The parts after `kind`, split at up to `pieces - 1` colons.
fn split(field: &'static str, kind: &str, cursor: &str, pieces: usize) -> Result<Vec<String>> {
    let bytes = BASE64URL_NOPAD.decode(cursor.as_bytes()).map_err(|_| invalid(field, kind))?;
    let text = String::from_utf8(bytes).map_err(|_| invalid(field, kind))?;
    let mut parts = text.splitn(pieces, ':');
    if parts.next() != Some(kind) {
        return Err(invalid(field, kind));
    }
    Ok(parts.map(str::to_string).collect())
}

pub fn decode_number(field: &'static str, kind: &str, part: &str) -> Result<i64> {
    part.parse::<i64>().ok().filter(|n| *n >= 0).ok_or_else(|| invalid(field, kind))
}

/// The error for a cursor this call did not make.
pub fn invalid(field: &'static str, kind: &str) -> Error {
    Error::invalid(field, format!("not a cursor returned by this call ({kind}); restart from the first page"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_kind_check() {
        let c = encode("list", &["42"]);
        assert_eq!(decode("cursor", "list", &c, 1).expect("valid"), vec!["42".to_string()]);
        assert!(decode("cursor", "read", &c, 1).is_err());
        assert!(decode("cursor", "list", "!!!", 1).is_err());
        assert!(decode("cursor", "list", &c, 2).is_err());
    }
}
