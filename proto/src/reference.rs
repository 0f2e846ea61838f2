//! The text form of a thread reference: `SESSION` (this home) or `HOST/SESSION`, where HOST
//! is a home id or a bridge's local name and `local` (or nothing) means the executing home.

use crate::ThreadRef;

/// Why a reference's text form was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseRefError(pub String);

impl std::fmt::Display for ParseRefError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ParseRefError {}

/// Parses `SESSION` or `HOST/SESSION`.
pub fn parse_ref(text: &str) -> Result<ThreadRef, ParseRefError> {
    let (host, session) = match text.split_once('/') {
        Some((host, session)) => (host, session),
        None => ("", text),
    };
    if session.is_empty() {
        return Err(ParseRefError(format!(
            "thread reference {text:?} has no session id (expected SESSION or HOST/SESSION)"
        )));
    }
    if session.contains('/') {
        return Err(ParseRefError(format!(
            "thread reference {text:?} has more than one '/' (expected SESSION or HOST/SESSION)"
        )));
    }
    let host_id = if host == "local" { "" } else { host };
    Ok(ThreadRef {
        host_id: host_id.to_string(),
        workspace_id: String::new(),
        session_id: session.to_string(),
    })
}

/// The text form of a reference: `SESSION` for this home, else `HOST/SESSION`.
pub fn format_ref(r: &ThreadRef) -> String {
    if r.host_id.is_empty() || r.host_id == "local" {
        r.session_id.clone()
    } else {
        format!("{}/{}", r.host_id, r.session_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_local_and_remote_forms() {
        assert_eq!(parse_ref("th_1").map(|r| format_ref(&r)), Ok("th_1".into()));
        assert_eq!(parse_ref("local/th_1").map(|r| r.host_id), Ok(String::new()));
        let remote = parse_ref("laptop/th_1").expect("valid");
        assert_eq!((remote.host_id.as_str(), remote.session_id.as_str()), ("laptop", "th_1"));
        assert_eq!(format_ref(&remote), "laptop/th_1");
    }

    #[test]
    fn refuses_malformed_references() {
        assert!(parse_ref("").is_err());
        assert!(parse_ref("host/").is_err());
        assert!(parse_ref("a/b/c").is_err());
    }
}
