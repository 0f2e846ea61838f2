//! `kiki doctor`: what is wrong with a home, and what to do about it. The running daemon
//! answers it (`HomeService.Doctor`) with the store it has open; `kikid --check` runs the
//! same checks on a stopped home — one whose daemon will not start, say — while holding the
//! home's lock, so no daemon starts meanwhile.

use std::path::{Path, PathBuf};

use crate::config::Config;
use crate::identity::{Creation, Identity};
use crate::store::{PostgresStore, SqliteStore, Store, StoreLocation};
use kiki_proto::home::{self, HomeDir, LockError};

/// One thing looked at, and what was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// "home", "config", "identity", "store", "disk" or "daemon".
    pub check: &'static str,
    pub ok: bool,
    /// What was found, naming the path.
    pub message: String,
    /// What to do about it; empty when nothing needs doing.
    pub fix: String,
}

impl Finding {
    fn ok(check: &'static str, message: impl Into<String>) -> Self {
        Self { check, ok: true, message: message.into(), fix: String::new() }
    }

    fn wrong(check: &'static str, message: impl Into<String>, fix: impl Into<String>) -> Self {
        Self { check, ok: false, message: message.into(), fix: fix.into() }
    }
}

/// The store to check: the running daemon's, or a stopped home's.
pub enum StoreAt<'a> {
    Running(&'a dyn Store),
    Stopped,
}

/// Less free space than this on the store's disk is a problem: writes are about to fail
/// (`RESOURCE_EXHAUSTED`), and SQLite needs room to checkpoint.
const LOW_DISK_BYTES: u64 = 64 * 1024 * 1024;

/// Every check, in the order a person would fix things.
pub async fn examine(
    home: &HomeDir,
    config_file: &Path,
    location: &StoreLocation,
    store: StoreAt<'_>,
) -> Vec<Finding> {
    let mut findings = Vec::new();
    findings.push(match home::trusted(home.root(), "home directory") {
        Ok(()) => Finding::ok("home", format!("{} is yours and writable by you only", home.root().display())),
        Err(e) => Finding::wrong("home", e.to_string(), ""),
    });
    findings.push(config(config_file));
    findings.push(identity(home, location));
    match location {
        StoreLocation::Sqlite(path) => {
            findings.push(match &store {
                StoreAt::Running(store) => sqlite_integrity(store.check(true).await, path),
                StoreAt::Stopped if !path.exists() => {
                    Finding::ok("store", format!("{} does not exist yet (a new home)", path.display()))
                }
                StoreAt::Stopped => sqlite_integrity(SqliteStore::check_file(path).await, path),
            });
            for file in SqliteStore::files(path) {
                if let Err(e) = home::trusted_if_present(&file, "store file") {
                    findings.push(Finding::wrong("store", e.to_string(), ""));
                }
            }
            findings.push(disk(path));
        }
        StoreLocation::Postgres(options) => {
            let checked = match &store {
                StoreAt::Running(store) => store.check(true).await,
                StoreAt::Stopped => PostgresStore::check_database(options).await,
            };
            findings.push(postgres_schema(checked, &location.describe()));
        }
    }
    findings
}

/// [`examine`] for a home no daemon answers for: the home's lock is taken meanwhile, so no
/// daemon starts on it; one that holds it without answering is a finding of its own.
pub async fn examine_stopped(
    home: Option<PathBuf>,
    config_file: Option<PathBuf>,
) -> std::io::Result<Vec<Finding>> {
    let home = HomeDir::resolve(home)?;
    if !home.root().exists() {
        return Ok(vec![Finding::wrong(
            "home",
            format!("{} does not exist", home.root().display()),
            "`kiki up` creates a home at its first start",
        )]);
    }
    let config_file = config_file.unwrap_or_else(|| home.config_file());
    // The store the config names, or the default one when the config cannot say.
    let location = Config::load(&config_file, false)
        .ok()
        .and_then(|config| config.store.location(&home).ok())
        .unwrap_or_else(|| StoreLocation::Sqlite(home.sqlite_file()));
    let (daemon, _lock) = match home.lock() {
        Ok(lock) => (Finding::ok("daemon", "no kikid serves this home"), Some(lock)),
        Err(LockError::Held { pid, .. }) => (
            Finding::wrong(
                "daemon",
                format!("kikid pid {pid} holds this home but does not answer"),
                format!("stop it: `kill {pid}` (`kill -9 {pid}` if it does not stop), then `kiki up`"),
            ),
            None,
        ),
        Err(LockError::Io(e)) => return Err(e),
    };
    let mut findings = examine(&home, &config_file, &location, StoreAt::Stopped).await;
    findings.push(daemon);
    Ok(findings)
}

fn config(file: &Path) -> Finding {
    if !file.exists() {
        return Finding::ok("config", format!("{} does not exist: the defaults apply", file.display()));
    }
    if let Err(e) = home::trusted(file, "config file") {
        return Finding::wrong("config", e.to_string(), "");
    }
    match Config::load(file, true).map(drop) {
        Ok(()) => Finding::ok("config", format!("{} is valid", file.display())),
        Err(e) => Finding::wrong(
            "config",
            e.to_string(),
            "fix each line named; kikid does not start (or restart) with these mistakes",
        ),
    }
}

fn identity(home: &HomeDir, location: &StoreLocation) -> Finding {
    let path = home.identity_file();
    if !path.exists() && !location.sqlite_file().is_some_and(Path::exists) {
        return Finding::ok("identity", format!("{} is made at the first start", path.display()));
    }
    match Identity::load_or_create(&path, Creation::Refused, &location.describe()) {
        Ok(identity) => {
            Finding::ok("identity", format!("{}: home id {}", path.display(), identity.home_id()))
        }
        Err(e) => Finding::wrong("identity", e.to_string(), ""),
    }
}

fn sqlite_integrity(checked: crate::store::StoreResult<Vec<String>>, path: &Path) -> Finding {
    const RESTORE: &str = "stop the home (`kiki down`), then restore the store from a backup \
                           (`kiki backup` makes one), or move it aside (with its -wal and -shm \
                           files) to start with an empty store";
    match checked {
        Ok(problems) if problems.is_empty() => {
            Finding::ok("store", format!("{}: every page and index checked, sound", path.display()))
        }
        Ok(problems) => Finding::wrong(
            "store",
            format!("{} is damaged: {}", path.display(), problems.join("; ")),
            RESTORE,
        ),
        Err(e) => Finding::wrong("store", format!("{} cannot be checked: {e}", path.display()), RESTORE),
    }
}

/// A Postgres store: the server keeps its pages, kiki checks its schema is whole.
fn postgres_schema(checked: crate::store::StoreResult<Vec<String>>, database: &str) -> Finding {
    const AMCHECK: &str = "`pg_amcheck` checks the database's pages and indexes";
    match checked {
        Ok(problems) if problems.is_empty() => Finding::ok(
            "store",
            format!("{database}: reachable, every migration applied, every table readable ({AMCHECK})"),
        ),
        Ok(problems) => Finding::wrong(
            "store",
            format!("{database}: {}", problems.join("; ")),
            "start the kikid that migrated it, or restore the database from a dump (`pg_restore`)",
        ),
        Err(e) => Finding::wrong(
            "store",
            format!("{database} cannot be checked: {e}"),
            "start the database server, check [store] url and the password, then `kiki doctor` again",
        ),
    }
}

fn disk(store_path: &Path) -> Finding {
    let dir = store_path.parent().unwrap_or(Path::new("/"));
    match nix::sys::statvfs::statvfs(dir) {
        Ok(fs) => {
            let free = fs.blocks_available() * fs.fragment_size();
            let shown =
                format!("{} MiB free on the disk holding {}", free / (1024 * 1024), store_path.display());
            if free < LOW_DISK_BYTES {
                Finding::wrong("disk", shown, "free space there: writes fail once the disk is full")
            } else {
                Finding::ok("disk", shown)
            }
        }
        Err(e) => Finding::wrong("disk", format!("cannot read the free space of {}: {e}", dir.display()), ""),
    }
}
