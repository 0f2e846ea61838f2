//! Where a home's store is: the embedded SQLite file (the default) or a Postgres database,
//! as `[store]` and the environment say.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::postgres::{DEFAULT_POOL_SIZE, PostgresOptions, PostgresStore, is_postgres_url, redacted};
use super::{SqliteStore, Store, StoreError, StoreResult};
use crate::time::Clock;

/// The environment variable holding a Postgres store's password (when neither the URL nor
/// `[store] password_file` has it).
pub const PASSWORD_ENV: &str = "KIKI_STORE_PASSWORD";

#[derive(Debug, Clone)]
pub enum StoreLocation {
    Sqlite(PathBuf),
    Postgres(PostgresOptions),
}

impl StoreLocation {
    /// The store `url` names (none: the SQLite file `default_file`), a relative SQLite path
    /// taken from `home`. A Postgres store's password comes from the URL, else from
    /// `password_file` (owner-only, its first line), else from `KIKI_STORE_PASSWORD`.
    pub fn resolve(
        url: Option<&str>,
        password_file: Option<&Path>,
        pool_size: Option<u32>,
        home: &Path,
        default_file: PathBuf,
    ) -> StoreResult<Self> {
        let Some(url) = url.filter(|url| is_postgres_url(url)) else {
            return Ok(Self::Sqlite(match url {
                Some(url) => SqliteStore::path_of(url, home)?,
                None => default_file,
            }));
        };
        // A URL without its password reads differently: then it has one, and it wins.
        let in_url = redacted(url) != url;
        let password = match password_file {
            _ if in_url => None,
            Some(file) => Some(read_password(&home.join(file))?),
            None => std::env::var(PASSWORD_ENV).ok().filter(|p| !p.is_empty()),
        };
        Ok(Self::Postgres(PostgresOptions {
            url: url.to_string(),
            password,
            pool_size: pool_size.unwrap_or(DEFAULT_POOL_SIZE),
        }))
    }

    /// Opens the store (creating and migrating it as needed), its writes reading `clock`
    /// (see [`SqliteStore::on_clock`]).
    pub async fn open(&self, clock: &Clock) -> StoreResult<Arc<dyn Store>> {
        Ok(match self {
            Self::Sqlite(path) => Arc::new(SqliteStore::open_path(path).await?.on_clock(clock.clone())),
            Self::Postgres(options) => Arc::new(PostgresStore::open(options).await?.on_clock(clock.clone())),
        })
    }

    /// Where the store is, with no secret (for messages and `kiki status`).
    pub fn describe(&self) -> String {
        match self {
            Self::Sqlite(path) => path.display().to_string(),
            Self::Postgres(options) => redacted(&options.url),
        }
    }

    /// The SQLite file, for a store that is one.
    pub fn sqlite_file(&self) -> Option<&Path> {
        match self {
            Self::Sqlite(path) => Some(path),
            Self::Postgres(_) => None,
        }
    }
}

/// The first line of an owner-only password file (one others may read is refused: the
/// password would not be the owner's alone).
fn read_password(file: &Path) -> StoreResult<String> {
    let unusable =
        |why: String| StoreError::Backend(format!("store.password_file {}: {why}", file.display()));
    if let Some(mode) =
        kiki_proto::home::exposed(file, "store password file").map_err(|e| unusable(e.to_string()))?
    {
        return Err(unusable(format!(
            "others may read it (mode {mode:o}); make it the owner's only: chmod 600 {}",
            file.display()
        )));
    }
    let text = std::fs::read_to_string(file).map_err(|e| unusable(e.to_string()))?;
    let password = text.lines().next().unwrap_or_default().trim_end();
    if password.is_empty() {
        return Err(unusable("is empty".into()));
    }
    Ok(password.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_in_the_url_wins_over_the_file_and_the_environment() {
        let home = tempfile::tempdir().expect("home");
        let url = "postgres://kiki:in-the-url@db/kiki";
        // The file is never read (it does not even exist).
        let location = StoreLocation::resolve(
            Some(url),
            Some(Path::new("absent.pass")),
            None,
            home.path(),
            PathBuf::new(),
        )
        .expect("resolved");
        let StoreLocation::Postgres(options) = location else { panic!("a Postgres store") };
        assert_eq!(options.password, None, "the URL's own is used");
        let file = home.path().join("pg.pass");
        std::fs::write(&file, "from-the-file\n").expect("write");
        std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("chmod");
        let location = StoreLocation::resolve(
            Some("postgres://kiki@db/kiki"),
            Some(Path::new("pg.pass")),
            None,
            home.path(),
            PathBuf::new(),
        )
        .expect("resolved");
        let StoreLocation::Postgres(options) = location else { panic!("a Postgres store") };
        assert_eq!(options.password.as_deref(), Some("from-the-file"));
    }
}
