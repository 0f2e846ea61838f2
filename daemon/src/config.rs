//! Typed configuration, layered: built-in defaults → `HOME/config.toml` (or `--config FILE`)
//! → environment (`KIKI_STORE_URL`) → what the embedding code sets (tests build a [`Config`]
//! in code). Every key is optional.
//!
//! ```toml
//! [store]
//! url = "sqlite://…"            # default: HOME/kiki.db
//!
//! [thread_communication]
//! enabled = true                # unset: off by default, threads opt in
//!
//! [turns]
//! max_output_bytes = 10485760   # exec output beyond this fails the turn
//!
//! [bridge]
//! listen = "127.0.0.1:0"        # the QUIC endpoint for bridges (port 0: any free port)
//! retry_window = "15m"          # unacknowledged cross-home sends expire after this (<= 24h)
//! request_expiry = "24h"        # a pairing request the owner has not decided expires
//!
//! [mailbox]
//! delivery_wait = "3s"          # ThreadSend answers `pending` after this
//! key_retention = "7d"          # idempotency keys are kept this long (>= 24h)
//!
//! [profiles.claude]
//! executor = "exec"             # "echo" | "exec"
//! command = ["claude", "-p"]
//! default = true                # at most one profile; otherwise `echo` is the default
//! enabled = true
//! thread_communication = true   # this profile's threads opt in to peer communication
//! ```
//!
//! Unknown keys are reported as warnings (they may belong to a newer kiki); invalid values
//! are errors, all reported at once.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

/// The name of the built-in deterministic profile, always available.
pub const ECHO_PROFILE: &str = "echo";

/// The longest a pairing request may wait for its owner (`[bridge] request_expiry`).
const MAX_REQUEST_EXPIRY: Duration = Duration::from_secs(365 * 24 * 3600);

/// The least time any home keeps idempotency keys (`[mailbox] key_retention`).
const MIN_KEY_RETENTION: Duration = Duration::from_secs(24 * 3600);
/// The longest `[bridge] retry_window`: a retry or follow-up must find its key at the
/// target, whose keys live 24h at least.
pub const MAX_RETRY_WINDOW: Duration = MIN_KEY_RETENTION;
/// The most: ten years (far beyond any use, and well within the store's millisecond times).
const MAX_KEY_RETENTION: Duration = Duration::from_secs(3650 * 24 * 3600);

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Config {
    pub store: StoreConfig,
    pub thread_communication: ThreadCommunicationConfig,
    pub turns: TurnsConfig,
    pub mailbox: MailboxConfig,
    pub bridge: BridgeConfig,
    /// Named executors; `echo` exists even when not listed.
    pub profiles: BTreeMap<String, ProfileConfig>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct StoreConfig {
    /// `sqlite://PATH` (or a bare path). Default: `HOME/kiki.db`.
    pub url: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ThreadCommunicationConfig {
    /// `false`: peer communication off completely. `true`: on by default.
    /// Unset: off by default, a thread opts in.
    pub enabled: Option<bool>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct TurnsConfig {
    /// An `exec` turn whose stdout grows past this many bytes is stopped and marked failed,
    /// so a runaway agent cannot exhaust the daemon's memory. Default 10 MiB.
    pub max_output_bytes: usize,
}

impl Default for TurnsConfig {
    fn default() -> Self {
        Self { max_output_bytes: 10 * 1024 * 1024 }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct BridgeConfig {
    /// The UDP address of the home's QUIC endpoint; port 0 picks a free one (`kiki status`
    /// and `kiki bridge list` show the real address). Default `127.0.0.1:0`; use a routable
    /// address for homes on other machines.
    pub listen: std::net::SocketAddr,
    /// How long a cross-home send that the target has not acknowledged keeps being retried
    /// (with its original key) before it becomes `expired`. Default `15m`.
    #[serde(with = "duration")]
    pub retry_window: Duration,
    /// How long a pairing request filed with this home waits for its owner's decision
    /// before it expires (the peer may file a new one). Default `24h`.
    #[serde(with = "duration")]
    pub request_expiry: Duration,
}

impl Default for BridgeConfig {
    fn default() -> Self {
        Self {
            listen: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
            retry_window: Duration::from_secs(15 * 60),
            request_expiry: Duration::from_secs(24 * 3600),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct MailboxConfig {
    /// How long ThreadSend waits for the message to enter the target's prompt before it
    /// answers `pending` (delivery goes on in the background). Default `3s`.
    #[serde(with = "duration")]
    pub delivery_wait: Duration,
    /// How long idempotency keys are kept (at least 24 h). Default `7d`.
    #[serde(with = "duration")]
    pub key_retention: Duration,
}

impl Default for MailboxConfig {
    fn default() -> Self {
        Self { delivery_wait: Duration::from_secs(3), key_retention: Duration::from_secs(7 * 24 * 3600) }
    }
}

/// Durations written the human way: `"3s"`, `"250ms"`, `"15m"`, `"7d"`.
mod duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_duration(&text).map_err(|e| serde::de::Error::custom(format!("{text:?}: {e}")))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExecutorKind {
    /// Built-in, deterministic: one `echo: …` line per input item.
    Echo,
    /// Runs `command` per turn with the input on stdin; stdout is the output.
    Exec,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ProfileConfig {
    pub executor: ExecutorKind,
    /// Program and arguments for `exec` (no shell is involved).
    #[serde(default)]
    pub command: Vec<String>,
    /// Makes this the profile used when ThreadCreate names none.
    #[serde(default)]
    pub default: bool,
    /// A disabled profile cannot be chosen for new threads.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Opens (or closes) peer communication for this profile's threads when the home's
    /// `[thread_communication] enabled` is not `false` and the thread has no switch of its own.
    #[serde(default)]
    pub thread_communication: Option<bool>,
}

fn yes() -> bool {
    true
}

/// Every problem found in a config, reported together.
#[derive(Debug, thiserror::Error)]
#[error("invalid configuration{}:\n  - {}", source_name.as_deref().map(|s| format!(" in {s}")).unwrap_or_default(), problems.join("\n  - "))]
pub struct ConfigError {
    pub source_name: Option<String>,
    pub problems: Vec<String>,
}

impl Config {
    /// Reads `file` if it exists (a missing default file is not an error), then applies the
    /// environment. Returns the config and the unknown keys it ignored.
    pub fn load(file: &Path, must_exist: bool) -> Result<(Self, Vec<String>), ConfigError> {
        let text = match std::fs::read_to_string(file) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !must_exist => String::new(),
            Err(e) => {
                return Err(ConfigError {
                    source_name: Some(file.display().to_string()),
                    problems: vec![format!("cannot read: {e}")],
                });
            }
        };
        let (mut config, unknown) = Self::parse(&text).map_err(|mut e| {
            e.source_name = Some(file.display().to_string());
            e
        })?;
        config.apply_env();
        Ok((config, unknown))
    }

    /// Parses and validates TOML text. Each section (and each profile) is read on its own,
    /// so a wrong type in one does not hide the problems of the others.
    pub fn parse(text: &str) -> Result<(Self, Vec<String>), ConfigError> {
        let one = |problem: String| ConfigError { source_name: None, problems: vec![problem] };
        let root = toml::de::DeTable::parse(text).map_err(|e| one(located(text, &e)))?.into_inner();
        let mut config = Config::default();
        let mut read = Reader { text, unknown: Vec::new(), problems: Vec::new() };
        for (key, value) in root {
            let key = key.into_inner();
            match &*key {
                "store" => read.section(&key, value, &mut config.store),
                "thread_communication" => read.section(&key, value, &mut config.thread_communication),
                "turns" => read.section(&key, value, &mut config.turns),
                "mailbox" => read.section(&key, value, &mut config.mailbox),
                "bridge" => read.section(&key, value, &mut config.bridge),
                "profiles" => match (value.span(), value.into_inner()) {
                    (_, toml::de::DeValue::Table(profiles)) => {
                        for (name, value) in profiles {
                            let name = name.into_inner().into_owned();
                            if let Some(profile) = read.value(&format!("profiles.{name}"), value) {
                                config.profiles.insert(name, profile);
                            }
                        }
                    }
                    (span, _) => read
                        .problems
                        .push(format!("profiles: {}must be a table of profiles", place(text, Some(span)))),
                },
                _ => read.unknown.push(key.into_owned()),
            }
        }
        if let Err(invalid) = config.validate() {
            read.problems.extend(invalid.problems);
        }
        match read.problems.is_empty() {
            true => Ok((config, read.unknown)),
            false => Err(ConfigError { source_name: None, problems: read.problems }),
        }
    }

    fn apply_env(&mut self) {
        if let Some(url) = std::env::var("KIKI_STORE_URL").ok().filter(|u| !u.is_empty()) {
            self.store.url = Some(url);
        }
    }

    /// Checks the rules serde cannot express; every violation is listed.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut problems = Vec::new();
        let mut defaults = Vec::new();
        for (name, profile) in &self.profiles {
            if !valid_profile_name(name) {
                problems.push(format!(
                    "profiles.{name}: a profile name is 1-64 characters of a-z, 0-9, '-' and '_'"
                ));
            }
            match profile.executor {
                ExecutorKind::Exec
                    if profile.command.first().is_none_or(|program| program.trim().is_empty()) =>
                {
                    problems.push(format!("profiles.{name}.command: an exec profile needs a command"))
                }
                ExecutorKind::Echo if !profile.command.is_empty() => {
                    problems.push(format!("profiles.{name}.command: the echo executor takes no command"))
                }
                _ => {}
            }
            if profile.default {
                defaults.push(name.as_str());
                if !profile.enabled {
                    problems.push(format!("profiles.{name}: the default profile must be enabled"));
                }
            }
        }
        if defaults.len() > 1 {
            problems.push(format!(
                "profiles: at most one profile may be the default, found {}",
                defaults.join(", ")
            ));
        }
        if self.mailbox.key_retention < MIN_KEY_RETENTION || self.mailbox.key_retention > MAX_KEY_RETENTION {
            problems.push("mailbox.key_retention: must be at least 24h and at most 3650d".into());
        }
        if self.bridge.retry_window.is_zero() {
            problems.push("bridge.retry_window: must be more than 0".into());
        }
        if self.bridge.retry_window > MAX_RETRY_WINDOW {
            problems
                .push("bridge.retry_window: must be at most 24h (the least time a home keeps keys)".into());
        }
        if self.bridge.request_expiry.is_zero() || self.bridge.request_expiry > MAX_REQUEST_EXPIRY {
            problems.push("bridge.request_expiry: must be more than 0 and at most 365d".into());
        }
        if self.mailbox.delivery_wait > Duration::from_secs(60) {
            problems.push("mailbox.delivery_wait: must be at most 60s".into());
        }
        if self.turns.max_output_bytes == 0 {
            problems.push("turns.max_output_bytes: must be at least 1".into());
        }
        if problems.is_empty() { Ok(()) } else { Err(ConfigError { source_name: None, problems }) }
    }

    /// The profile ThreadCreate uses when none is named.
    pub fn default_profile(&self) -> &str {
        self.profiles.iter().find(|(_, p)| p.default).map(|(name, _)| name.as_str()).unwrap_or(ECHO_PROFILE)
    }

    /// The profile called `name`, with the built-in `echo` when not overridden.
    pub fn profile(&self, name: &str) -> Option<ProfileConfig> {
        match self.profiles.get(name) {
            Some(p) => Some(p.clone()),
            None if name == ECHO_PROFILE => Some(ProfileConfig {
                executor: ExecutorKind::Echo,
                command: Vec::new(),
                default: false,
                enabled: true,
                thread_communication: None,
            }),
            None => None,
        }
    }

    /// Names of all profiles, the built-in one included.
    pub fn profile_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.profiles.keys().cloned().collect();
        if !self.profiles.contains_key(ECHO_PROFILE) {
            names.push(ECHO_PROFILE.to_string());
            names.sort();
        }
        names
    }
}

type Value<'t> = toml::Spanned<toml::de::DeValue<'t>>;

/// Reads a config's sections one by one, gathering their unknown keys and problems.
struct Reader<'t> {
    text: &'t str,
    unknown: Vec<String>,
    problems: Vec<String>,
}

impl<'t> Reader<'t> {
    /// Reads the section at `path` into `slot`, which keeps its default if the section is
    /// invalid.
    fn section<T: Deserialize<'t>>(&mut self, path: &str, value: Value<'t>, slot: &mut T) {
        if let Some(value) = self.value(path, value) {
            *slot = value;
        }
    }

    /// The value at `path`; none if it is invalid (the problem is noted, with its line).
    fn value<T: Deserialize<'t>>(&mut self, path: &str, value: Value<'t>) -> Option<T> {
        let unknown = &mut self.unknown;
        let de = toml::de::ValueDeserializer::from(value);
        serde_ignored::deserialize(de, |key| unknown.push(format!("{path}.{key}")))
            .map_err(|e| self.problems.push(format!("{path}: {}", located(self.text, &e))))
            .ok()
    }
}

/// "line L, column C: MESSAGE": one line per problem, so a list of them reads at a glance,
/// also in the tail of the log that `kiki up` shows.
fn located(text: &str, e: &toml::de::Error) -> String {
    format!("{}{}", place(text, e.span()), e.message())
}

/// "line L, column C (`the line`): " for a byte range of the text, or nothing.
fn place(text: &str, span: Option<std::ops::Range<usize>>) -> String {
    let Some(at) = span.map(|s| s.start.min(text.len())) else { return String::new() };
    let (before, after) = text.split_at(text.floor_char_boundary(at));
    let line = before.matches('\n').count() + 1;
    let start = before.rsplit('\n').next().unwrap_or_default();
    let column = start.chars().count() + 1;
    let shown: String =
        format!("{start}{}", after.split('\n').next().unwrap_or_default()).trim().chars().take(60).collect();
    format!("line {line}, column {column} (`{shown}`): ")
}

fn valid_profile_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_config_defaults_to_echo() {
        let (config, unknown) = Config::parse("").expect("valid");
        assert!(unknown.is_empty());
        assert_eq!(config.default_profile(), "echo");
        assert!(config.profile("echo").is_some());
        assert!(config.profile("nope").is_none());
    }

    #[test]
    fn exec_profile_and_default() {
        let text = "[profiles.cat]\nexecutor = \"exec\"\ncommand = [\"cat\"]\ndefault = true\n";
        let (config, _) = Config::parse(text).expect("valid");
        assert_eq!(config.default_profile(), "cat");
        assert_eq!(config.profile_names(), vec!["cat".to_string(), "echo".to_string()]);
    }

    #[test]
    fn all_problems_reported_at_once() {
        let text = "[profiles.a]\nexecutor = \"exec\"\ndefault = true\n[profiles.B]\nexecutor = \"echo\"\ndefault = true\n";
        let err = Config::parse(text).expect_err("invalid");
        assert_eq!(err.problems.len(), 3, "{err}");
        assert!(err.to_string().contains("profiles.a.command"));
        assert!(err.to_string().contains("at most one profile"));
    }

    #[test]
    fn wrong_types_in_several_sections_are_all_reported_with_their_lines() {
        let err = Config::parse("[bridge]\nretry_window = \"1s\"\n[turns\n").expect_err("not TOML");
        assert_eq!(err.problems.len(), 1, "{err}");
        assert!(err.problems[0].starts_with("line 3, column 7 (`[turns`): "), "{err}");
        let err = Config::parse("profiles = 5\n").expect_err("not a table");
        assert_eq!(
            err.problems,
            ["profiles: line 1, column 12 (`profiles = 5`): must be a table of profiles"]
        );
        let text = "[bridge]\nretry_window = 5\n[turns]\nmax_output_bytes = \"big\"\n\
                    [mailbox]\ndelivery_wait = \"2m\"\n[profiles.a]\nexecutor = \"shell\"\n\
                    [profiles.b]\nexecutor = \"exec\"\n";
        let err = Config::parse(text).expect_err("invalid");
        let said = err.to_string();
        assert_eq!(err.problems.len(), 5, "{said}");
        for says in [
            "bridge: line 2, column 16 (`retry_window = 5`): invalid type: integer `5`, expected a string",
            "turns: line 4, column 20 (`max_output_bytes = \"big\"`): invalid type: string \"big\", expected usize",
            "profiles.a: line 8, column 12 (`executor = \"shell\"`): unknown variant `shell`, expected `echo` or `exec`",
            "mailbox.delivery_wait: must be at most 60s",
            "profiles.b.command: an exec profile needs a command",
        ] {
            assert!(err.problems.iter().any(|p| p.starts_with(says)), "{says:?} in {said}");
        }
    }

    #[test]
    fn empty_windows_programs_and_endless_retention_are_refused() {
        for (text, says) in [
            ("[bridge]\nretry_window = \"0s\"\n", "bridge.retry_window: must be more than 0"),
            ("[profiles.a]\nexecutor = \"exec\"\ncommand = [\"\"]\n", "profiles.a.command"),
            ("[mailbox]\nkey_retention = \"18446744073709551615s\"\n", "mailbox.key_retention"),
        ] {
            let err = Config::parse(text).expect_err(text);
            assert!(err.to_string().contains(says), "{text}: {err}");
        }
    }

    #[test]
    fn a_bridge_retry_window_outliving_the_targets_keys_is_refused() {
        let err = Config::parse("[bridge]\nretry_window = \"25h\"\n").expect_err("invalid");
        assert!(err.to_string().contains("bridge.retry_window: must be at most 24h"), "{err}");
        Config::parse("[bridge]\nretry_window = \"24h\"\n").expect("the limit itself is fine");
    }

    #[test]
    fn pairing_requests_expire_after_a_day_unless_configured() {
        assert_eq!(Config::default().bridge.request_expiry, Duration::from_secs(24 * 3600));
        let (set, _) = Config::parse("[bridge]\nrequest_expiry = \"7d\"\n").expect("valid");
        assert_eq!(set.bridge.request_expiry, Duration::from_secs(7 * 24 * 3600));
        for bad in ["0s", "366d"] {
            let err = Config::parse(&format!("[bridge]\nrequest_expiry = \"{bad}\"\n")).expect_err("invalid");
            assert!(
                err.to_string().contains("bridge.request_expiry: must be more than 0 and at most 365d"),
                "{err}"
            );
        }
    }

    #[test]
    fn unknown_keys_are_reported_not_fatal() {
        let (_, unknown) = Config::parse("[otel]\nendpoint = \"x\"\n").expect("valid");
        assert_eq!(unknown, vec!["otel".to_string()]);
        // Inside a profile too.
        let text = "[profiles.agent]\nexecutor = \"echo\"\nmodel = \"y\"\n";
        let (config, unknown) = Config::parse(text).expect("valid");
        assert_eq!(unknown, vec!["profiles.agent.model".to_string()]);
        assert!(config.profile("agent").is_some());
    }
}
