//! Workspaces: a thread works in a directory; its workspace is the enclosing repository
//! root (the nearest ancestor holding `.git`), or the directory itself outside a repository.
//! `workspace_id` is derived from the root's path, so it is stable for the same root.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The workspace root of `dir` (an absolute, canonical path).
pub fn root_of(dir: &Path) -> PathBuf {
    dir.ancestors().find(|d| d.join(".git").exists()).unwrap_or(dir).to_path_buf()
}

/// `ws_` + 16 hex digits of SHA-256 of the root path.
pub fn id_of(root: &Path) -> String {
    let digest = Sha256::digest(root.as_os_str().as_encoded_bytes());
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("ws_{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repository_root_is_the_workspace() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canon");
        std::fs::create_dir_all(root.join(".git")).expect("git");
        std::fs::create_dir_all(root.join("src/deep")).expect("deep");
        assert_eq!(root_of(&root.join("src/deep")), root);
        assert_eq!(id_of(&root_of(&root.join("src"))), id_of(&root));
        assert_ne!(id_of(&root), id_of(&root.join("src")));
    }
}
