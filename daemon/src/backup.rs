//! `kiki backup DIR`: a copy of a running home in a new directory — its identity key, its
//! config file and a consistent copy of its store (SQLite's online backup: one read
//! transaction, so the copy is one moment of the store while calls go on). The directory
//! is a home: `kikid --home DIR` (or copying its files into place) restores it.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::store::Store;
use kiki_proto::home::HomeDir;

/// What a backup wrote.
#[derive(Debug, Clone)]
pub struct Backed {
    pub dest: PathBuf,
    /// File names within `dest`.
    pub files: Vec<String>,
    pub store_bytes: u64,
}

/// Writes the backup of `home` (read with `config_file`, serving `store`) into `dest`, an
/// absolute path that does not exist yet or an empty directory. Made owner-only, like a
/// home: it holds the home's private key.
pub async fn write(home: &HomeDir, config_file: &Path, store: &dyn Store, dest: &Path) -> Result<Backed> {
    if !dest.is_absolute() {
        return Err(Error::invalid("dest", format!("must be an absolute path, got {:?}", dest.display())));
    }
    // A store on a database server is backed up with the server's tools: its backup says
    // which, and nothing is written here.
    if crate::store::is_postgres_url(&store.describe()) {
        let why = store.backup(dest).await.err().map(|e| e.to_string()).unwrap_or_default();
        return Err(Error::FailedPrecondition(why));
    }
    let io = |what: &str, e: std::io::Error| Error::FailedPrecondition(format!("backup {what}: {e}"));
    match std::fs::read_dir(dest).map(|mut entries| entries.next().is_none()) {
        Ok(false) => {
            return Err(Error::invalid(
                "dest",
                format!("{} is not empty; a backup goes into a new or empty directory", dest.display()),
            ));
        }
        Ok(true) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dest)
                .map_err(|e| io("directory", e))?;
        }
        Err(e) => return Err(io("directory", e)),
    }
    let backup = HomeDir::new(dest);
    let mut files = Vec::new();
    copy_private(&home.identity_file(), &backup.identity_file()).map_err(|e| io("identity key", e))?;
    files.push("identity.key".to_string());
    if config_file.exists() {
        copy_private(config_file, &backup.config_file()).map_err(|e| io("config", e))?;
        files.push("config.toml".to_string());
    }
    store.backup(&backup.sqlite_file()).await?;
    files.push("kiki.db".to_string());
    let store_bytes = std::fs::metadata(backup.sqlite_file()).map_err(|e| io("store", e))?.len();
    std::fs::File::open(dest).and_then(|d| d.sync_all()).map_err(|e| io("directory", e))?;
    Ok(Backed { dest: dest.to_path_buf(), files, store_bytes })
}

/// Copies `from` to the new file `to` (0600), synced.
fn copy_private(from: &Path, to: &Path) -> std::io::Result<()> {
    let bytes = std::fs::read(from)?;
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(to)?;
    file.write_all(&bytes)?;
    file.sync_all()
}
