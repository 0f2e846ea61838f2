//! The home directory: where a home keeps its identity, config, store and socket, and the
//! lock that lets only one `kikid` serve it.
//!
//! ```text
//! HOME/
//!   config.toml     optional; see config.rs
//!   identity.key    the home's private key (PKCS#8 PEM, 0600)
//!   kiki.db         the SQLite store (+ -wal, -shm)
//!   kikid.sock      the gRPC socket (0600)
//!   kikid.lock      held (flock) by the running kikid; holds its pid
//!   kikid.log       the daemon's log when started by `kiki up`
//! ```

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Paths inside one home directory.
#[derive(Debug, Clone)]
pub struct HomeDir {
    root: PathBuf,
}

impl HomeDir {
    /// `--home DIR`, else `KIKI_HOME`, else `~/.kiki`.
    pub fn resolve(flag: Option<PathBuf>) -> std::io::Result<Self> {
        let root = match flag.or_else(|| std::env::var_os("KIKI_HOME").map(PathBuf::from)) {
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

    /// Creates the directory owner-only (0700), or makes an existing one owner-only: the
    /// socket and the store inside rely on it.
    pub fn create(&self) -> std::io::Result<()> {
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&self.root)?;
        let mode = std::fs::metadata(&self.root)?.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            std::fs::set_permissions(&self.root, std::fs::Permissions::from_mode(0o700))?;
        }
        Ok(())
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
