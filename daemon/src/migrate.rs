//! `kiki store migrate`: a stopped home's store copied to another backend (SQLite to
//! Postgres or back). The home's lock is held meanwhile, so no daemon starts on it; the
//! home's config is left as it is — its owner points `[store] url` at the copy.

use std::path::PathBuf;

use kiki_proto::home::{HomeDir, LockError};

use crate::config::Config;
use crate::store::{Counts, StoreLocation, copy_store};

/// What a migration did.
#[derive(Debug)]
pub struct Migrated {
    /// Where the store was, and where the copy is (no secrets).
    pub from: String,
    pub to: String,
    pub rows: Counts,
}

/// Copies the store of the stopped home into the empty store `to` (a `postgres://` URL, or
/// a SQLite file: `sqlite://PATH` or a path, relative to the current directory).
pub async fn migrate_stopped(
    home: Option<PathBuf>,
    config_file: Option<PathBuf>,
    to: &str,
    password_file: Option<PathBuf>,
) -> Result<Migrated, String> {
    let home = HomeDir::resolve(home).map_err(|e| e.to_string())?;
    if !home.root().exists() {
        return Err(format!("{} does not exist: there is no store to copy", home.root().display()));
    }
    let _lock = match home.lock() {
        Ok(lock) => lock,
        Err(LockError::Held { pid, .. }) => {
            return Err(format!("kikid pid {pid} serves this home: stop it first (`kiki down`)"));
        }
        Err(LockError::Io(e)) => return Err(e.to_string()),
    };
    let config_file = config_file.unwrap_or_else(|| home.config_file());
    let config = Config::load(&config_file, false).map_err(|e| e.to_string())?;
    let from = config.store.location(&home).map_err(|e| e.to_string())?;
    if from.sqlite_file().is_some_and(|file| !file.exists()) {
        return Err(format!("{} does not exist: there is no store to copy", from.describe()));
    }
    let here = std::env::current_dir().map_err(|e| e.to_string())?;
    let target = StoreLocation::resolve(Some(to), password_file.as_deref(), None, &here, PathBuf::new())
        .map_err(|e| e.to_string())?;
    if target.describe() == from.describe() {
        return Err(format!("{} is this home's store already", target.describe()));
    }
    let rows = copy_store(&from, &target).await.map_err(|e| e.to_string())?;
    Ok(Migrated { from: from.describe(), to: target.describe(), rows })
}
