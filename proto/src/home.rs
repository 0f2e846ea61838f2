//! The home directory, as kikid and its clients both use it: where a home keeps its
//! identity, config, store and socket, who may use it (the running user, and nobody else
//! may write it), and the lock that lets only one `kikid` serve it.
//!
//! ```text
//! HOME/
//!   config.toml     optional; see the config module
//!   identity.key    the home's private key (PKCS#8 PEM, 0600)
//!   kiki.db         the SQLite store (+ -wal, -shm)
//!   kikid.sock      the gRPC socket (0600)
//!   kikid.lock      held (flock) by the running kikid; holds its pid
//!   kikid.log       the daemon's log when started by `kiki up`
//! ```

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Paths inside one home directory.
#[derive(Debug, Clone)]
pub struct HomeDir {
    root: PathBuf,
}

impl HomeDir {
    /// `--home DIR`, else `KIKI_HOME` (see [`env_var`]), else `~/.kiki`.
    pub fn resolve(flag: Option<PathBuf>) -> std::io::Result<Self> {
        let root = match flag.or_else(|| env_var("KIKI_HOME").map(PathBuf::from)) {
            Some(dir) => dir,
            None => {
                let home = std::env::var_os("HOME")
                    .ok_or_else(|| std::io::Error::other("neither --home, KIKI_HOME nor HOME is set"))?;
                PathBuf::from(home).join(".kiki")
            }
        };
        // Absolute: the path is handed to agents (KIKI_HOME), which run in other directories.
        Ok(Self::new(std::path::absolute(&root)?))
    }

    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
    pub fn config_file(&self) -> PathBuf {
        self.root.join("config.toml")
    }
    pub fn identity_file(&self) -> PathBuf {
        self.root.join("identity.key")
    }
    pub fn sqlite_file(&self) -> PathBuf {
        self.root.join("kiki.db")
    }
    pub fn socket(&self) -> PathBuf {
        self.root.join("kikid.sock")
    }
    pub fn lock_file(&self) -> PathBuf {
        self.root.join("kikid.lock")
    }
    pub fn log_file(&self) -> PathBuf {
        self.root.join("kikid.log")
    }

    /// Creates the directory owner-only (0700), or checks an existing one: it must be the
    /// running user's and writable by nobody else (see [`trusted`]); one that others may only
    /// read is made owner-only, as the socket and the store inside rely on it.
    pub fn create(&self) -> Result<(), Untrusted> {
        let io = |source| Untrusted::Io { path: self.root.clone(), source };
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&self.root).map_err(io)?;
        trusted(&self.root, "home directory")?;
        let mode = std::fs::metadata(&self.root).map_err(io)?.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            std::fs::set_permissions(&self.root, std::fs::Permissions::from_mode(0o700)).map_err(io)?;
        }
        Ok(())
    }

    /// Checks a home a client is about to use: it may not exist yet (`kiki up` creates it);
    /// if it does, it is a directory of the running user's that nobody else may write (see
    /// [`trusted`]) — a daemon answering on its socket could otherwise be anyone's.
    pub fn check(&self) -> Result<(), Untrusted> {
        match std::fs::metadata(&self.root) {
            Ok(meta) if !meta.is_dir() => Err(Untrusted::Io {
                path: self.root.clone(),
                source: std::io::Error::other("not a directory"),
            }),
            Ok(_) => trusted(&self.root, "home directory"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(Untrusted::Io { path: self.root.clone(), source }),
        }
    }

    /// Whether a kikid holds the home's lock: it runs, whether or not it answers.
    pub fn lock_held(&self) -> bool {
        match File::open(self.lock_file()) {
            Ok(file) => matches!(file.try_lock(), Err(std::fs::TryLockError::WouldBlock)),
            Err(_) => false,
        }
    }

    /// Takes the home's lock, or says which daemon holds it.
    pub fn lock(&self) -> Result<HomeLock, LockError> {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(self.lock_file())
            .map_err(LockError::Io)?;
        file.set_permissions(std::fs::Permissions::from_mode(0o600)).map_err(LockError::Io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut pid = String::new();
                let _ = file.read_to_string(&mut pid);
                return Err(LockError::Held { home: self.root.clone(), pid: pid.trim().to_string() });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(LockError::Io(e)),
        }
        file.set_len(0).map_err(LockError::Io)?;
        file.rewind().map_err(LockError::Io)?;
        write!(file, "{}", std::process::id()).map_err(LockError::Io)?;
        Ok(HomeLock { _file: file })
    }
}

/// An environment variable kiki takes (`KIKI_HOME`, `KIKI_TOKEN`), or `None` when it is
/// unset, empty, or still an unexpanded `$NAME` / `${NAME}`: some agent CLIs hand an MCP
/// server a placeholder they did not expand (the variable unset outside a turn).
pub fn env_var(name: &str) -> Option<String> {
    let value = std::env::var(name).ok()?;
    let placeholder = value.strip_prefix('$').is_some_and(|rest| {
        let rest = rest.strip_prefix('{').and_then(|r| r.strip_suffix('}')).unwrap_or(rest);
        rest.split(":-").next().is_some_and(|n| n == name)
    });
    (!value.is_empty() && !placeholder).then_some(value)
}

/// Held for the daemon's lifetime; the OS releases it if the process dies.
#[derive(Debug)]
pub struct HomeLock {
    _file: File,
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "home {} is already served by another kikid (pid {pid}); stop it with `kiki down` first",
        home.display()
    )]
    Held { home: PathBuf, pid: String },
    #[error("cannot lock the home: {0}")]
    Io(std::io::Error),
}

/// Why kikid will not use a file or directory of its home.
#[derive(Debug, thiserror::Error)]
pub enum Untrusted {
    /// Another user could have written it: a planted `config.toml` runs its `exec` profiles
    /// as this user, a planted `identity.key` becomes this home's identity.
    #[error(
        "{what} {} belongs to uid {owner}, not to you (uid {me}): kiki uses only a home of its own \
         user's, since whoever owns it decides what runs as you; use another --home, or if it \
         really is yours, `chown -R {me} {}`",
        path.display(), path.display()
    )]
    NotYours { what: &'static str, path: PathBuf, owner: u32, me: u32 },
    #[error(
        "{what} {} is writable by group or others (mode {mode:03o}): someone else may have changed \
         it; check it, then run `chmod go-w {}`",
        path.display(), path.display()
    )]
    Writable { what: &'static str, path: PathBuf, mode: u32 },
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
}

/// Checks that `path` (followed if a symlink, as a home may be) belongs to the running user
/// and that nobody else may write it — what OpenSSH asks of `~/.ssh`. `what` names it in
/// the error ("config file", "store").
pub fn trusted(path: &Path, what: &'static str) -> Result<(), Untrusted> {
    let meta =
        std::fs::metadata(path).map_err(|source| Untrusted::Io { path: path.to_path_buf(), source })?;
    trusted_as(&meta, path, what, nix::unistd::geteuid().as_raw())
}

/// The name of the machine this runs on (empty if it has none).
pub fn host_name() -> String {
    nix::unistd::gethostname().map(|name| name.to_string_lossy().trim().to_string()).unwrap_or_default()
}

/// [`trusted`], for a file that must be its owner's alone (a key, a password): the mode it
/// has (`& 0o777`) if others may read it too, `None` if they may not.
pub fn exposed(path: &Path, what: &'static str) -> Result<Option<u32>, Untrusted> {
    let meta =
        std::fs::metadata(path).map_err(|source| Untrusted::Io { path: path.to_path_buf(), source })?;
    trusted_as(&meta, path, what, nix::unistd::geteuid().as_raw())?;
    let mode = meta.permissions().mode() & 0o777;
    Ok((mode & 0o077 != 0).then_some(mode))
}

/// [`trusted`] for a user id given (tests check another user's view of a file of theirs).
fn trusted_as(meta: &std::fs::Metadata, path: &Path, what: &'static str, me: u32) -> Result<(), Untrusted> {
    if meta.uid() != me {
        return Err(Untrusted::NotYours { what, path: path.to_path_buf(), owner: meta.uid(), me });
    }
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o022 != 0 {
        return Err(Untrusted::Writable { what, path: path.to_path_buf(), mode });
    }
    Ok(())
}

/// [`trusted`] for a path that may not exist yet (a file kikid is about to create).
pub fn trusted_if_present(path: &Path, what: &'static str) -> Result<(), Untrusted> {
    match trusted(path, what) {
        Err(Untrusted::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => Ok(()),
        checked => checked,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_of_another_user_or_writable_by_others_is_refused_naming_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config.toml");
        std::fs::write(&path, "").expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let meta = std::fs::metadata(&path).expect("meta");
        trusted_as(&meta, &path, "config file", meta.uid()).expect("the owner's own file");
        let other = trusted_as(&meta, &path, "config file", meta.uid() + 1).expect_err("another user's");
        let said = other.to_string();
        assert!(said.starts_with(&format!("config file {} belongs to uid", path.display())), "{said}");
        assert!(said.contains("chown -R"), "{said}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o664)).expect("chmod");
        let meta = std::fs::metadata(&path).expect("meta");
        let writable = trusted_as(&meta, &path, "config file", meta.uid()).expect_err("group-writable");
        assert!(writable.to_string().contains("mode 664"), "{writable}");
        assert!(writable.to_string().contains(&format!("chmod go-w {}", path.display())), "{writable}");
        // Readable by others is the identity key's own check, not this one's.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        trusted(&path, "config file").expect("readable is not writable");
        trusted_if_present(&dir.path().join("absent"), "store").expect("nothing to check yet");
    }

    #[test]
    fn a_home_others_may_write_is_refused_one_they_may_read_is_made_owner_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = HomeDir::new(dir.path().join("home"));
        std::fs::create_dir(home.root()).expect("mkdir");
        std::fs::set_permissions(home.root(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
        home.create().expect("readable by others: tightened");
        let mode = std::fs::metadata(home.root()).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        std::fs::set_permissions(home.root(), std::fs::Permissions::from_mode(0o777)).expect("chmod");
        let err = home.create().expect_err("world-writable");
        assert!(matches!(err, Untrusted::Writable { mode: 0o777, .. }), "{err}");
    }
}
