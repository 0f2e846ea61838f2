//! A configuration file replaced atomically with what a merge makes of it: a temporary
//! file in the same directory, renamed over the old one, keeping the old file's mode and
//! owner (a new one is owner-only, 0600); a file someone else changed meanwhile is merged
//! again; a link stays a link.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use super::{malformed, same_kind};

/// How many times a file changed by someone else between its read and its replacement is
/// read and merged again before kiki gives up.
const ATTEMPTS: usize = 3;

/// Replaces the file at `path` with what `merge` makes of it, atomically. A file changed by
/// someone else meanwhile (an agent saving its state) is merged again.
pub fn write_merged(path: &Path, what: &str, merge: impl Fn(Option<&str>) -> Result<String>) -> Result<()> {
    let path = resolve_link(path)?;
    for _ in 0..ATTEMPTS {
        let (existing, stamp) = read_existing(&path)?;
        let text = merge(existing.as_deref()).map_err(|e| {
            same_kind(e, format!("cannot add {what} to {}", path.display()), "the file is left unchanged")
        })?;
        if write_atomic(&path, &text, &stamp)? {
            return Ok(());
        }
    }
    bail!("{} kept changing while kiki wrote it; try again", path.display())
}

/// A link's target, so that the link (a dotfiles checkout, say) stays one.
fn resolve_link(path: &Path) -> Result<PathBuf> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => {
            path.canonicalize().with_context(|| format!("cannot follow the link {}", path.display()))
        }
        _ => Ok(path.to_path_buf()),
    }
}

/// What a file looked like when it was read: it is replaced only if it still does.
#[derive(Debug, PartialEq, Eq)]
pub struct Stamp(Option<(u64, u64, u64, i64, i64)>);

impl Stamp {
    fn of(path: &Path) -> std::io::Result<Stamp> {
        match std::fs::metadata(path) {
            Ok(m) => Ok(Stamp(Some((m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec())))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Stamp(None)),
            Err(e) => Err(e),
        }
    }
}

pub fn read_existing(path: &Path) -> Result<(Option<String>, Stamp)> {
    let stamp = Stamp::of(path).with_context(|| format!("cannot read {}", path.display()))?;
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((None, Stamp(None))),
        Err(e) => bail!("cannot read {}: {e}", path.display()),
    };
    let text = String::from_utf8(bytes).map_err(|e| {
        malformed(format!(
            "cannot parse {}: it is not UTF-8 text ({e}); the file is left unchanged",
            path.display()
        ))
    })?;
    Ok((Some(text), stamp))
}

/// Writes `text` to `path` through a temporary file in its directory, renamed over it,
/// with the old file's permissions and owner (0600, ours, for a new one), unless the file
/// no longer looks like `read` (then `false`: nothing was written). Creates the missing
/// directories (owner-only).
fn write_atomic(path: &Path, text: &str, read: &Stamp) -> Result<bool> {
    let shown = path.display();
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        bail!("{shown} is not a file's path");
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("cannot create {}", dir.display()))?;
    // The old file's mode, and its owner if it is not ours (`sudo kiki …` with the user's
    // HOME must not leave the user a config file they cannot write).
    let (mode, owner) = match std::fs::metadata(path) {
        Ok(meta) => {
            let mine = (meta.uid(), meta.gid())
                == (nix::unistd::geteuid().as_raw(), nix::unistd::getegid().as_raw());
            (meta.permissions().mode() & 0o777, (!mine).then(|| (meta.uid(), meta.gid())))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => (0o600, None),
        Err(e) => bail!("cannot read {shown}: {e}"),
    };
    let temp = dir.join(format!(".{}.kiki-{}.tmp", name.to_string_lossy(), std::process::id()));
    // Left by a kiki of the same pid that died before its rename.
    let _ = std::fs::remove_file(&temp);
    let written = (|| -> std::io::Result<bool> {
        let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&temp)?;
        file.write_all(text.as_bytes())?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::fchown(&file, Some(uid), Some(gid))?;
        }
        file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        file.sync_all()?;
        if Stamp::of(path)? != *read {
            return Ok(false);
        }
        std::fs::rename(&temp, path)?;
        Ok(true)
    })();
    if !matches!(written, Ok(true)) {
        let _ = std::fs::remove_file(&temp);
    }
    let written = written.with_context(|| format!("cannot write {shown}"))?;
    if written && let Ok(dir) = std::fs::File::open(dir) {
        // The rename itself, durable; a file system that cannot sync a directory still
        // has the new file in place.
        let _ = dir.sync_all();
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::super::agent::AgentCli;
    use super::super::install;
    use super::super::testing::{entry_for, parse};
    use super::*;

    #[test]
    fn install_writes_atomically_keeping_the_mode_and_refuses_a_bad_file() {
        let dir = std::env::temp_dir().join(format!("kiki-install-unit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mode = |path: &Path| std::fs::metadata(path).expect("metadata").permissions().mode() & 0o777;

        // A new file, its directories created.
        let fresh = dir.join("a").join("b").join("mcp.json");
        install(AgentCli::Kimi, &fresh, &entry_for(AgentCli::Kimi)).expect("install");
        assert_eq!(mode(&fresh), 0o600);
        assert_eq!(mode(&dir.join("a")), 0o700);

        // An existing file keeps its mode; a link stays a link.
        let target = dir.join("real.json");
        std::fs::write(&target, "{\"theme\": \"dark\"}\n").expect("write");
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let link = dir.join("settings.json");
        std::os::unix::fs::symlink(&target, &link).expect("symlink");
        install(AgentCli::Gemini, &link, &entry_for(AgentCli::Gemini)).expect("install");
        assert!(std::fs::symlink_metadata(&link).expect("link").file_type().is_symlink());
        assert_eq!(mode(&target), 0o644);
        let merged = parse(&std::fs::read_to_string(&target).expect("read"));
        assert_eq!(merged["theme"], "dark");
        assert_eq!(merged["mcpServers"]["kiki"]["timeout"], 90000);

        // A bad file: refused, named, untouched; no temporary file left behind.
        let bad = dir.join("config.toml");
        std::fs::write(&bad, "model = [\n").expect("write");
        let error = install(AgentCli::Codex, &bad, &entry_for(AgentCli::Codex)).expect_err("bad");
        let message = format!("{error:#}");
        assert!(
            message.contains(&bad.display().to_string()) && message.contains("not valid TOML"),
            "{message}"
        );
        assert_eq!(std::fs::read_to_string(&bad).expect("read"), "model = [\n");
        let names: Vec<_> =
            std::fs::read_dir(&dir).expect("dir").map(|e| e.expect("entry").file_name()).collect();
        assert_eq!(names.len(), 4, "{names:?}");

        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}
