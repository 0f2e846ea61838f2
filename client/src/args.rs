//! Command-line values made into what a request needs: thread references, text read from a
//! file or stdin, workspace directories, per-thread cursors. A value that cannot be is a
//! [`UsageError`] (exit 2), like any other bad argument.

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

use anyhow::Result;
use kiki_proto as pb;

use crate::output::UsageError;

/// A thread reference, `SESSION` or `HOST/SESSION`.
pub fn reference(text: &str) -> Result<pb::ThreadRef> {
    Ok(pb::parse_ref(text).map_err(|e| UsageError(e.to_string()))?)
}

/// A workspace argument: a directory names the workspace it is in (the daemon needs it
/// absolute); anything else goes as given, for the daemon to check.
pub fn absolute_if_dir(workspace: String) -> String {
    if !Path::new(&workspace).is_dir() {
        return workspace;
    }
    std::path::absolute(&workspace).map_or(workspace, |dir| dir.display().to_string())
}

/// `--cursor REF=CURSOR` pairs (split at the first '=') as ThreadWait's map from a
/// reference to its cursor. Two cursors for one reference are refused rather than one
/// silently winning.
pub fn cursors_by_reference(pairs: &[String]) -> Result<HashMap<String, String>> {
    let mut cursors = HashMap::new();
    for pair in pairs {
        let (reference, cursor) = pair
            .split_once('=')
            .ok_or_else(|| UsageError(format!("--cursor {pair:?}: expected REF=CURSOR")))?;
        if cursors.insert(reference.to_string(), cursor.to_string()).is_some() {
            return Err(
                UsageError(format!("--cursor: two cursors for {reference:?}; give one per thread")).into()
            );
        }
    }
    Ok(cursors)
}

/// A text argument's file (`-`: stdin), for the field `flag` of at most `max_chars`
/// characters. At most `max_chars + 1` characters' worth of bytes are read (4 bytes each in
/// UTF-8), so an endless source (`/dev/zero`, a pipe that never closes its end of the
/// deal) is refused after that much, never read into memory whole. A file that cannot be
/// read as UTF-8 text, or that is longer than the field's limit, is a usage error (exit 2),
/// like any other bad argument.
pub fn read_text(path: &Path, flag: &str, max_chars: usize) -> Result<String> {
    let bound = (max_chars as u64 + 1) * 4;
    let source: Box<dyn Read> = if path.as_os_str() == "-" {
        Box::new(std::io::stdin())
    } else {
        Box::new(
            std::fs::File::open(path)
                .map_err(|e| UsageError(format!("{flag}: cannot read {}: {e}", path.display())))?,
        )
    };
    let mut bytes = Vec::new();
    source
        .take(bound)
        .read_to_end(&mut bytes)
        .map_err(|e| UsageError(format!("{flag}: cannot read {}: {e}", path.display())))?;
    let too_long =
        || UsageError(format!("{flag}: {} holds more than {max_chars} characters", path.display()));
    if bytes.len() as u64 == bound {
        return Err(too_long().into());
    }
    let text = String::from_utf8(bytes)
        .map_err(|e| UsageError(format!("{flag}: {} is not UTF-8 text: {e}", path.display())))?;
    if text.chars().count() > max_chars {
        return Err(too_long().into());
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_cursors_split_at_the_first_equals_sign_one_per_reference() {
        let pairs = ["th_a=c1=x".to_string(), "peer/th_b=c2".to_string()];
        let cursors = cursors_by_reference(&pairs).expect("valid pairs");
        assert_eq!(cursors["th_a"], "c1=x");
        assert_eq!(cursors["peer/th_b"], "c2");
        assert!(cursors_by_reference(&["th_a".to_string()]).is_err(), "no '='");
        assert!(cursors_by_reference(&["th_a=1".to_string(), "th_a=2".to_string()]).is_err(), "twice");
    }
}
