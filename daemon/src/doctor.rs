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
    /// "home", "config", "identity", "store", "disk", "daemon", and for a running daemon
    /// "bridge", "clock", "turns", "permissions".
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

/// A peer's clock further off than this is a problem: retry windows, expiry and permission
/// timeouts are compared across homes.
pub const MAX_SKEW_MS: i64 = 2_000;
/// A turn running longer than this is worth a look.
pub const LONG_TURN_MS: i64 = 3_600_000;
/// A thread that has spent this part of its budget is nearly out.
pub const BUDGET_WARNING: f64 = 0.8;
/// How many of the newest threads have their spending looked at.
pub const BUDGET_THREADS: u32 = 1000;

/// The running daemon's look at its links: each outbound bridge pinged (a real round trip:
/// the peer answering, what it says of the grant, its clock), each revoked one named.
pub fn links(
    checked: Vec<(crate::store::BridgeRecord, Option<crate::error::Result<crate::bridges::LinkProbe>>)>,
) -> Vec<Finding> {
    use crate::store::{BridgeState, Direction};
    use kiki_proto::bridge::v1::GrantState;
    let mut findings = Vec::new();
    for (bridge, probe) in checked {
        let name = format!("bridge {} ({})", bridge.alias, bridge.peer_home_id);
        let again =
            format!("kiki bridge request {} --want … --expect {}", bridge.address, bridge.peer_home_id);
        match (bridge.direction, bridge.state, probe) {
            (Direction::Outbound, BridgeState::Revoked, _) => findings.push(Finding::wrong(
                "bridge",
                format!("{name} is revoked: nothing goes over it"),
                format!("ask its owner and request it again ({again}), or leave it"),
            )),
            (Direction::Outbound, _, Some(Err(e))) => findings.push(Finding::wrong(
                "bridge",
                format!("{name} at {}: {e}", bridge.address),
                "is that home running (`kiki up` there) and its address right? Sends wait in the outbox meanwhile",
            )),
            (Direction::Outbound, _, Some(Ok(probe))) => {
                let ms = probe.rtt.as_secs_f64() * 1000.0;
                findings.push(match probe.grant {
                    GrantState::Active => Finding::ok("bridge", format!("{name} answered in {ms:.1} ms; active")),
                    GrantState::Revoked => Finding::wrong(
                        "bridge",
                        format!("{name}: its owner revoked it"),
                        format!("ask its owner and request it again ({again})"),
                    ),
                    GrantState::Disabled => Finding::wrong(
                        "bridge",
                        format!("{name}: its owner turned its access off for now; sends wait"),
                        "ask its owner to `kiki bridge enable` it",
                    ),
                    GrantState::Pending => Finding::wrong(
                        "bridge",
                        format!("{name}: the request waits for its owner's decision"),
                        "ask its owner to `kiki bridge approve` it",
                    ),
                    other => Finding::wrong(
                        "bridge",
                        format!("{name}: the target has {} it", other.as_str_name().trim_start_matches("GRANT_STATE_").to_lowercase()),
                        format!("request it again ({again})"),
                    ),
                });
                if let Some(skew) = probe.skew_ms.filter(|s| s.abs() > MAX_SKEW_MS) {
                    let way = if skew > 0 { "ahead of" } else { "behind" };
                    findings.push(Finding::wrong(
                        "clock",
                        format!("{}'s clock is {:.1} s {way} this one's", bridge.peer_home_id, skew.abs() as f64 / 1000.0),
                        "synchronize both machines' clocks (NTP): retry windows and expiry are compared across homes",
                    ));
                }
            }
            _ => {}
        }
    }
    findings
}

/// Turns this daemon has run for longer than [`LONG_TURN_MS`] at `now`.
pub fn long_turns(
    running: &[(String, String, crate::store::Millis)],
    now: crate::store::Millis,
) -> Vec<Finding> {
    running
        .iter()
        .filter(|(_, _, started)| now - started > LONG_TURN_MS)
        .map(|(thread, turn, started)| {
            Finding::wrong(
                "turns",
                format!("turn {turn} of {thread} has run for {:.1} h", (now - started) as f64 / 3_600_000.0),
                format!("see what it does with `kiki thread read {thread} --follow`; stop it with `kiki thread stop {thread}`"),
            )
        })
        .collect()
}

/// A bridge whose oldest unacknowledged message has waited more than half its retry window
/// (`waited` of `window`): it expires at the window's end.
pub fn stale_outbox(
    bridge: &crate::store::BridgeRecord,
    waited: std::time::Duration,
    window: std::time::Duration,
) -> Option<Finding> {
    (waited > window / 2).then(|| {
        Finding::wrong(
            "outbox",
            format!(
                "bridge {} ({}): a message has waited {} of its {} retry window",
                bridge.alias,
                bridge.peer_home_id,
                humantime::format_duration(std::time::Duration::from_secs(waited.as_secs())),
                humantime::format_duration(window)
            ),
            format!("it expires at the window's end unless {} answers: see the bridge's finding above, `kiki bridge receipts {}`", bridge.alias, bridge.alias),
        )
    })
}

/// A thread that has spent at least [`BUDGET_WARNING`] of its profile's budget.
pub fn budget(thread: &str, profile: &str, spent: f64, budget: f64) -> Option<Finding> {
    (spent >= budget * BUDGET_WARNING).then(|| {
        Finding::wrong(
            "budget",
            format!("thread {thread} has spent ${spent:.2} of its profile {profile}'s ${budget:.2}"),
            if spent >= budget {
                format!("it starts no more turns: raise `max_cost_usd` of [profiles.{profile}] and restart kikid")
            } else {
                format!("it stops at ${budget:.2}; raise `max_cost_usd` of [profiles.{profile}] if it should go on")
            },
        )
    })
}

/// Agents' permission requests that wait for the owner.
pub fn waiting_permissions(waiting: usize) -> Option<Finding> {
    (waiting > 0).then(|| {
        Finding::wrong(
            "permissions",
            format!("{waiting} agent permission request(s) wait for an answer"),
            "`kiki attention list`, then `kiki approve ID` or `kiki deny ID`",
        )
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_nearly_or_wholly_spent_is_flagged_with_what_to_do() {
        assert_eq!(budget("th_1", "claude", 0.5, 1.0), None);
        let nearly = budget("th_1", "claude", 0.8, 1.0).expect("nearly spent");
        assert!(nearly.message.contains("$0.80 of its profile claude's $1.00"), "{nearly:?}");
        assert!(nearly.fix.contains("it stops at $1.00"), "{nearly:?}");
        let spent = budget("th_1", "claude", 1.2, 1.0).expect("spent");
        assert!(spent.fix.starts_with("it starts no more turns"), "{spent:?}");
    }

    #[test]
    fn permission_requests_waiting_are_counted() {
        assert_eq!(waiting_permissions(0), None);
        let two = waiting_permissions(2).expect("two wait");
        assert!(
            two.message.starts_with("2 agent permission") && two.fix.contains("kiki attention list"),
            "{two:?}"
        );
    }
}
