//! Workspaces: a thread works in a directory; its workspace is the enclosing repository
//! root (the nearest ancestor holding `.git`), or the directory itself outside a repository.
//! `workspace_id` is derived from the root's path, so it is stable for the same root.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// The workspace root of `dir` (an absolute, canonical path).
pub fn root_of(dir: &Path) -> PathBuf {
    dir.ancestors().find(|d| d.join(".git").exists()).unwrap_or(dir).to_path_buf()
}

/// `ws_` + 16 hex digits of SHA-256 of the root path.
pub fn id_of(root: &Path) -> String {
    let digest = Sha256::digest(root.as_os_str().as_encoded_bytes());
    format!("ws_{}", data_encoding::HEXLOWER.encode(&digest[..8]))
}

/// `value` as an absolute path to an existing directory, canonical; else an error naming
/// `field`.
pub fn checked_dir(field: &'static str, value: &str) -> Result<PathBuf> {
    let path = Path::new(value);
    if !path.is_absolute() {
        return Err(Error::invalid(field, format!("must be an absolute path, got {value:?}")));
    }
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => {
            path.canonicalize().map_err(|e| Error::invalid(field, format!("cannot resolve {value:?}: {e}")))
        }
        Ok(_) => Err(Error::invalid(field, format!("{value:?} is not a directory"))),
        Err(_) => Err(Error::invalid(field, format!("{value:?} does not exist"))),
    }
}

/// A workspace named by a caller: its id (`ws_` + 16 hex digits) as given, or an absolute
/// directory (in it or below its root) as that workspace's id.
pub fn named(field: &'static str, value: &str) -> Result<String> {
    if is_id(value) {
        return Ok(value.to_ascii_lowercase());
    }
    if value.starts_with("ws_") || !Path::new(value).is_absolute() {
        return Err(Error::invalid(
            field,
            format!("a workspace id (ws_ and 16 hex digits) or an absolute directory, got {value:?}"),
        ));
    }
    Ok(id_of(&root_of(&checked_dir(field, value)?)))
}

/// Whether `value` has a workspace id's shape (`ws_` + 16 hex digits).
pub fn is_id(value: &str) -> bool {
    value.strip_prefix("ws_").is_some_and(|hex| hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A repository root (its directory kept alive by the guard) with `sub` inside it.
    fn repository(sub: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canon");
        std::fs::create_dir_all(root.join(".git")).expect("git");
        std::fs::create_dir_all(root.join(sub)).expect("sub");
        (dir, root)
    }

    #[test]
    fn a_workspace_is_named_by_its_id_or_a_directory_in_it() {
        let (_dir, root) = repository("src");
        let id = id_of(&root);
        assert_eq!(named("workspaces", &id).expect("id"), id);
        assert_eq!(named("workspaces", &root.join("src").display().to_string()).expect("dir"), id);
        for bad in ["/tmp/kiki-no-such-dir", "src", "ws_123", "ws_zzzzzzzzzzzzzzzz", ""] {
            let err = named("workspaces", bad).expect_err(bad);
            assert!(err.to_string().contains("workspaces"), "{err}");
        }
    }

    #[test]
    fn repository_root_is_the_workspace() {
        let (_dir, root) = repository("src/deep");
        assert_eq!(root_of(&root.join("src/deep")), root);
        assert_eq!(id_of(&root_of(&root.join("src"))), id_of(&root));
        assert_ne!(id_of(&root), id_of(&root.join("src")));
    }
}
