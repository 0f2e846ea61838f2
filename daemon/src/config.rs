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
//! Every mistake is an error, and all of them are reported at once, one line each with its
//! key path, line and column: a wrongly typed value (each key is checked on its own, so two
//! bad keys of one section are two problems), an unknown section or key (with the known name
//! it most likely misspells), a section or key the config contract names but this kikid does
//! not implement yet (refused, so a config never seems to do what it does not), and a value
//! breaking a rule (see [`Config::validate`]). The known keys are learned from the structs'
//! serde derives, so adding a field is all it takes to accept a key.

use std::collections::BTreeMap;
use std::io::Read;
use std::ops::Range;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use toml::de::{DeTable, DeValue, ValueDeserializer};

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

/// The most a config file may hold: far beyond any real config, and it bounds what a mistaken
/// `--config` (say `/dev/zero`) can make kikid read into memory.
const MAX_CONFIG_BYTES: usize = 1024 * 1024;

/// Sections the config contract names that this kikid does not implement yet. They are
/// refused rather than ignored (a config relying on them would seem to work), but not
/// called typos.
const NOT_YET_SECTIONS: &[&str] = &["rooms", "threads", "otel", "metrics", "web", "log"];
/// The same for keys of a `[profiles.NAME]` table.
const NOT_YET_PROFILE_KEYS: &[&str] = &["max_cost_usd"];

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

/// A `[profiles.NAME]` table. Its `executor` is required: [`Config::parse`] refuses a profile
/// without one (the serde default only lets each key be checked on its own).
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct ProfileConfig {
    pub executor: ExecutorKind,
    /// Program and arguments for `exec` (no shell is involved).
    pub command: Vec<String>,
    /// Makes this the profile used when ThreadCreate names none.
    pub default: bool,
    /// A disabled profile cannot be chosen for new threads.
    pub enabled: bool,
    /// Opens (or closes) peer communication for this profile's threads when the home's
    /// `[thread_communication] enabled` is not `false` and the thread has no switch of its own.
    pub thread_communication: Option<bool>,
}

/// The built-in `echo` profile.
impl Default for ProfileConfig {
    fn default() -> Self {
        Self {
            executor: ExecutorKind::Echo,
            command: Vec::new(),
            default: false,
            enabled: true,
            thread_communication: None,
        }
    }
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
    /// environment.
    pub fn load(file: &Path, must_exist: bool) -> Result<Self, ConfigError> {
        let fail = |problem: String| ConfigError {
            source_name: Some(file.display().to_string()),
            problems: vec![problem],
        };
        let mut bytes = Vec::new();
        // One byte past the limit tells a file at the limit from a larger one.
        let read = std::fs::File::open(file)
            .and_then(|opened| opened.take(MAX_CONFIG_BYTES as u64 + 1).read_to_end(&mut bytes));
        match read {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !must_exist => {}
            Err(e) => return Err(fail(format!("cannot read: {e}"))),
            Ok(_) if bytes.len() > MAX_CONFIG_BYTES => {
                return Err(fail("larger than 1 MiB, the most a config file may hold".into()));
            }
            Ok(_) => {}
        }
        let text = String::from_utf8(bytes).map_err(|e| fail(format!("cannot read: not UTF-8 ({e})")))?;
        let mut config = Self::parse(&text).map_err(|mut e| {
            e.source_name = Some(file.display().to_string());
            e
        })?;
        config.apply_env();
        Ok(config)
    }

    /// Parses and validates TOML text. Each key of each section (and of each profile) is read
    /// on its own, so one mistake does not hide the others.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let one = |problem: String| ConfigError { source_name: None, problems: vec![problem] };
        let root = DeTable::parse(text).map_err(|e| one(located(text, &e)))?.into_inner();
        let mut config = Config::default();
        let mut read = Reader { text, problems: Vec::new() };
        for (key, value) in in_file_order(root) {
            let span = key.span();
            let key = key.into_inner();
            match &*key {
                "store" => read.section(&key, value, &mut config.store),
                "thread_communication" => read.section(&key, value, &mut config.thread_communication),
                "turns" => read.section(&key, value, &mut config.turns),
                "mailbox" => read.section(&key, value, &mut config.mailbox),
                "bridge" => read.section(&key, value, &mut config.bridge),
                "profiles" => read.profiles(value, &mut config.profiles),
                _ => read.unknown(&key, &key, span, "section", field_names::<Config>(), NOT_YET_SECTIONS),
            }
        }
        if let Err(invalid) = config.validate() {
            read.problems.extend(invalid.problems);
        }
        match read.problems.is_empty() {
            true => Ok(config),
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
            problems.extend(profile_name_problem(name));
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
            None if name == ECHO_PROFILE => Some(ProfileConfig::default()),
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

type Value<'t> = toml::Spanned<DeValue<'t>>;
type Key<'t> = toml::Spanned<toml::de::DeString<'t>>;

/// Reads a config's sections key by key, gathering every problem.
struct Reader<'t> {
    text: &'t str,
    problems: Vec<String>,
}

impl<'t> Reader<'t> {
    /// Reads the section at `path` into `slot`. Its valid keys are set even when others are
    /// not, so that [`Config::validate`] checks their values too.
    fn section<T: Deserialize<'t> + Default>(&mut self, path: &str, value: Value<'t>, slot: &mut T) {
        if let Some(table) = self.table(path, value, "a table") {
            (*slot, _) = self.keys(path, table, &[]);
        }
    }

    /// Reads `[profiles.NAME]` tables. A profile with a bad or missing key is left out: the
    /// rules across its keys (a command per executor, one default) would only report
    /// knock-on mistakes.
    fn profiles(&mut self, value: Value<'t>, profiles: &mut BTreeMap<String, ProfileConfig>) {
        let Some(table) = self.table("profiles", value, "a table of profiles") else { return };
        for (name, value) in in_file_order(table.into_inner()) {
            let name_span = name.span();
            let name = name.into_inner().into_owned();
            let path = format!("profiles.{name}");
            let Some(table) = self.table(&path, value, "a table") else { continue };
            // `executor` is required, but its serde default (there so that each key can be
            // checked on its own) would hide its absence.
            let has_executor = table.get_ref().contains_key("executor");
            if !has_executor {
                self.problems.push(format!("{path}.executor: {}required", place(self.text, Some(name_span))));
            }
            let (profile, all_valid) = self.keys::<ProfileConfig>(&path, table, NOT_YET_PROFILE_KEYS);
            if all_valid && has_executor {
                profiles.insert(name, profile);
            } else {
                // Left out of `Config::validate`, whose check of the name this would miss.
                self.problems.extend(profile_name_problem(&name));
            }
        }
    }

    /// The table at `path`; none if it is something else (the problem is noted, with its line).
    fn table(&mut self, path: &str, value: Value<'t>, expected: &str) -> Option<toml::Spanned<DeTable<'t>>> {
        let span = value.span();
        match value.into_inner() {
            DeValue::Table(table) => Some(toml::Spanned::new(span, table)),
            _ => {
                self.problems.push(format!("{path}: {}must be {expected}", place(self.text, Some(span))));
                None
            }
        }
    }

    /// Builds a `T` (a `#[serde(default)]` struct) from the keys of `table` at `path`, each
    /// checked on its own against `T`'s fields, and whether all of them were valid. Unknown
    /// keys, `not_yet` keys and wrongly typed values are noted; the valid keys make the `T`.
    fn keys<T: Deserialize<'t> + Default>(
        &mut self,
        path: &str,
        table: toml::Spanned<DeTable<'t>>,
        not_yet: &[&str],
    ) -> (T, bool) {
        let known = field_names::<T>();
        let span = table.span();
        let mut valid = DeTable::new();
        let mut all_valid = true;
        for (key, value) in in_file_order(table.into_inner()) {
            let name: &str = key.get_ref();
            let key_path = format!("{path}.{name}");
            if !known.contains(&name) {
                self.unknown(&key_path, name, key.span(), "key", known, not_yet);
                all_valid = false;
                continue;
            }
            let alone = DeTable::from_iter([(key.clone(), value.clone())]);
            match from_table::<T>(span.clone(), alone) {
                Ok(_) => {
                    valid.insert(key, value);
                }
                Err(e) => {
                    self.problems.push(format!("{key_path}: {}", located(self.text, &e)));
                    all_valid = false;
                }
            }
        }
        // Keys valid one by one are valid together: no struct here has rules across keys
        // in serde (those are `Config::validate`'s), so this is only a safety net.
        match from_table::<T>(span, valid) {
            Ok(section) => (section, all_valid),
            Err(e) => {
                self.problems.push(format!("{path}: {}", located(self.text, &e)));
                (T::default(), false)
            }
        }
    }

    /// Notes the unknown section or key `name` at `path`: not supported yet when the config
    /// contract names it, else with the known name it most likely misspells, or all of them.
    fn unknown(
        &mut self,
        path: &str,
        name: &str,
        span: Range<usize>,
        what: &str,
        known: &[&str],
        not_yet: &[&str],
    ) {
        let said = if not_yet.contains(&name) {
            format!(
                "not supported by this version of kikid yet (a {what} of the config contract, not a typo); remove it"
            )
        } else if let Some(meant) = closest(name, known) {
            format!("unknown {what}; did you mean `{meant}`?")
        } else {
            let all: Vec<String> = known.iter().map(|k| format!("`{k}`")).collect();
            format!("unknown {what}; the known ones are {}", all.join(", "))
        };
        self.problems.push(format!("{path}: {}{said}", place(self.text, Some(span))));
    }
}

fn from_table<'t, T: Deserialize<'t>>(span: Range<usize>, table: DeTable<'t>) -> Result<T, toml::de::Error> {
    T::deserialize(ValueDeserializer::from(toml::Spanned::new(span, DeValue::Table(table))))
}

/// A table's entries in the order they are written (the table itself sorts them by name),
/// so problems are listed as one reads the file.
fn in_file_order(table: DeTable<'_>) -> Vec<(Key<'_>, Value<'_>)> {
    let mut entries: Vec<_> = table.into_iter().collect();
    entries.sort_by_key(|(key, _)| key.span().start);
    entries
}

/// The field names of the struct `T`, learned from serde: its derived `Deserialize` hands
/// them to `deserialize_struct`, where this recorder keeps them (and refuses to go on). So
/// the known keys are never a list kept by hand beside the structs.
fn field_names<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    struct FieldRecorder<'r>(&'r mut &'static [&'static str]);

    impl<'de> serde::Deserializer<'de> for FieldRecorder<'_> {
        type Error = serde::de::value::Error;

        fn deserialize_struct<V: serde::de::Visitor<'de>>(
            self,
            _name: &'static str,
            fields: &'static [&'static str],
            _visitor: V,
        ) -> Result<V::Value, Self::Error> {
            *self.0 = fields;
            Err(serde::de::Error::custom("only the field names were wanted"))
        }

        fn deserialize_any<V: serde::de::Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Self::Error> {
            Err(serde::de::Error::custom("not a struct"))
        }

        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
            option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
            ignored_any
        }
    }

    let mut fields: &'static [&'static str] = &[];
    // Always an error: the recorder never builds a value, only the names matter.
    let _refused = T::deserialize(FieldRecorder(&mut fields));
    fields
}

/// The name in `known` that `name` most likely misspells: the nearest by edit distance
/// (letter case aside), if at most a third of its letters (1 to 3) are off, so a short
/// word is not "corrected" into an unrelated one.
fn closest<'k>(name: &str, known: &[&'k str]) -> Option<&'k str> {
    let name = name.to_lowercase();
    let length = name.chars().count();
    known
        .iter()
        .filter_map(|&candidate| {
            let limit = (candidate.chars().count() / 3).clamp(1, 3);
            // Lengths this far apart cannot be within the limit: spares a long key the work.
            if length.abs_diff(candidate.chars().count()) > limit {
                return None;
            }
            let distance = edit_distance(&name, candidate);
            (distance <= limit).then_some((distance, candidate))
        })
        .min()
        .map(|(_, candidate)| candidate)
}

/// Levenshtein distance: the fewest one-letter insertions, deletions and substitutions.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, from) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, &to) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1).min(row[j] + 1).min(diagonal + usize::from(from != to));
            diagonal = above;
        }
    }
    row[b.len()]
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

/// What is wrong with a profile's name, if anything.
fn profile_name_problem(name: &str) -> Option<String> {
    let valid = (1..=64).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    (!valid).then(|| format!("profiles.{name}: a profile name is 1-64 characters of a-z, 0-9, '-' and '_'"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The problems of a config that must be invalid.
    fn problems(text: &str) -> Vec<String> {
        Config::parse(text).expect_err(text).problems
    }

    #[test]
    fn empty_config_defaults_to_echo() {
        let config = Config::parse("").expect("valid");
        assert_eq!(config.default_profile(), "echo");
        assert!(config.profile("echo").is_some());
        assert!(config.profile("nope").is_none());
    }

    #[test]
    fn exec_profile_and_default() {
        let text = "[profiles.cat]\nexecutor = \"exec\"\ncommand = [\"cat\"]\ndefault = true\n";
        let config = Config::parse(text).expect("valid");
        assert_eq!(config.default_profile(), "cat");
        assert_eq!(config.profile_names(), vec!["cat".to_string(), "echo".to_string()]);
        let cat = config.profile("cat").expect("cat");
        assert_eq!(
            (cat.executor, cat.command, cat.enabled),
            (ExecutorKind::Exec, vec!["cat".to_string()], true)
        );
    }

    #[test]
    fn every_section_and_key_is_read() {
        let text = "[store]\nurl = \"sqlite://x.db\"\n[thread_communication]\nenabled = false\n\
                    [turns]\nmax_output_bytes = 7\n[mailbox]\ndelivery_wait = \"1s\"\nkey_retention = \"2d\"\n\
                    [bridge]\nlisten = \"127.0.0.1:4433\"\nretry_window = \"1m\"\nrequest_expiry = \"2h\"\n\
                    [profiles.a]\nexecutor = \"echo\"\nenabled = false\nthread_communication = true\n";
        let config = Config::parse(text).expect("valid");
        assert_eq!(config.store.url.as_deref(), Some("sqlite://x.db"));
        assert_eq!(config.thread_communication.enabled, Some(false));
        assert_eq!(config.turns.max_output_bytes, 7);
        assert_eq!(config.mailbox.delivery_wait, Duration::from_secs(1));
        assert_eq!(config.mailbox.key_retention, Duration::from_secs(2 * 24 * 3600));
        assert_eq!(config.bridge.listen, std::net::SocketAddr::from(([127, 0, 0, 1], 4433)));
        assert_eq!(config.bridge.retry_window, Duration::from_secs(60));
        assert_eq!(config.bridge.request_expiry, Duration::from_secs(2 * 3600));
        let a = config.profile("a").expect("a");
        assert_eq!((a.executor, a.enabled, a.thread_communication), (ExecutorKind::Echo, false, Some(true)));
    }

    #[test]
    fn known_keys_are_learned_from_serde() {
        assert_eq!(field_names::<BridgeConfig>(), ["listen", "retry_window", "request_expiry"]);
        assert_eq!(
            field_names::<ProfileConfig>(),
            ["executor", "command", "default", "enabled", "thread_communication"]
        );
        // Every section `Config` has is read, none is taken for an unknown one.
        let text: String = field_names::<Config>().iter().map(|section| format!("[{section}]\n")).collect();
        assert_eq!(field_names::<Config>().len(), 6);
        Config::parse(&text).expect("every section, empty");
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
        assert_eq!(
            problems("profiles = 5\n"),
            ["profiles: line 1, column 12 (`profiles = 5`): must be a table of profiles"]
        );
        assert_eq!(problems("bridge = 5\n"), ["bridge: line 1, column 10 (`bridge = 5`): must be a table"]);
        let text = "[bridge]\nretry_window = 5\n[turns]\nmax_output_bytes = \"big\"\n\
                    [mailbox]\ndelivery_wait = \"2m\"\n[profiles.a]\nexecutor = \"shell\"\n\
                    [profiles.b]\nexecutor = \"exec\"\n";
        assert_eq!(
            problems(text),
            [
                "bridge.retry_window: line 2, column 16 (`retry_window = 5`): invalid type: integer `5`, expected a string",
                "turns.max_output_bytes: line 4, column 20 (`max_output_bytes = \"big\"`): invalid type: string \"big\", expected usize",
                "profiles.a.executor: line 8, column 12 (`executor = \"shell\"`): unknown variant `shell`, expected `echo` or `exec`",
                "profiles.b.command: an exec profile needs a command",
                "mailbox.delivery_wait: must be at most 60s",
            ]
        );
    }

    #[test]
    fn every_bad_key_of_one_section_is_reported() {
        let text = "[bridge]\nlisten = 5\nretry_window = true\nrequest_expiry = \"soon\"\n";
        assert_eq!(
            problems(text),
            [
                "bridge.listen: line 2, column 10 (`listen = 5`): invalid type: integer `5`, expected socket address",
                "bridge.retry_window: line 3, column 16 (`retry_window = true`): invalid type: boolean `true`, expected a string",
                "bridge.request_expiry: line 4, column 18 (`request_expiry = \"soon\"`): \"soon\": expected number at 0",
            ]
        );
        // The section's valid keys are still read, and their rules checked.
        let said = problems("[bridge]\nlisten = 5\nretry_window = \"25h\"\n");
        assert_eq!(said.len(), 2, "{said:?}");
        assert!(said[0].starts_with("bridge.listen: line 2"), "{said:?}");
        assert!(said[1].starts_with("bridge.retry_window: must be at most 24h"), "{said:?}");
    }

    #[test]
    fn bad_keys_across_sections_and_profiles_are_all_reported_with_their_lines() {
        let text = "[thread_comunication]\nenabled = true\n\
                    [bridge]\nretry_windw = \"1m\"\nlisten = 5\n\
                    [profiles.a]\nexecutor = \"echo\"\nenable = false\ndefault = \"yes\"\n\
                    [profiles.B]\ncommand = [\"cat\"]\n\
                    [otel]\nendpoint = \"x\"\n";
        assert_eq!(
            problems(text),
            [
                "thread_comunication: line 1, column 2 (`[thread_comunication]`): unknown section; did you mean `thread_communication`?",
                "bridge.retry_windw: line 4, column 1 (`retry_windw = \"1m\"`): unknown key; did you mean `retry_window`?",
                "bridge.listen: line 5, column 10 (`listen = 5`): invalid type: integer `5`, expected socket address",
                "profiles.a.enable: line 8, column 1 (`enable = false`): unknown key; did you mean `enabled`?",
                "profiles.a.default: line 9, column 11 (`default = \"yes\"`): invalid type: string \"yes\", expected a boolean",
                "profiles.B.executor: line 10, column 11 (`[profiles.B]`): required",
                "profiles.B: a profile name is 1-64 characters of a-z, 0-9, '-' and '_'",
                "otel: line 12, column 2 (`[otel]`): not supported by this version of kikid yet (a section of the config contract, not a typo); remove it",
            ]
        );
    }

    #[test]
    fn unknown_keys_without_a_close_name_list_the_known_ones() {
        assert_eq!(
            problems("[turns]\ncolour = 1\n"),
            [
                "turns.colour: line 2, column 1 (`colour = 1`): unknown key; the known ones are `max_output_bytes`"
            ]
        );
        let said = problems("[profiles.agent]\nexecutor = \"echo\"\nmodel = \"y\"\n");
        assert_eq!(
            said,
            ["profiles.agent.model: line 3, column 1 (`model = \"y\"`): unknown key; the known ones are \
                 `executor`, `command`, `default`, `enabled`, `thread_communication`"]
        );
        let said = problems("nonsense = 1\n");
        assert!(
            said[0].starts_with(
                "nonsense: line 1, column 1 (`nonsense = 1`): unknown section; the known ones are `store`, "
            ),
            "{said:?}"
        );
    }

    #[test]
    fn contract_sections_and_keys_not_implemented_yet_are_refused_as_such() {
        for section in ["rooms", "threads", "otel", "metrics", "web", "log"] {
            let said = problems(&format!("[{section}]\nx = 1\n"));
            assert_eq!(
                said,
                [format!(
                    "{section}: line 1, column 2 (`[{section}]`): not supported by this version of kikid yet \
                     (a section of the config contract, not a typo); remove it"
                )]
            );
        }
        assert_eq!(
            problems("[profiles.a]\nexecutor = \"echo\"\nmax_cost_usd = 5.0\n"),
            [
                "profiles.a.max_cost_usd: line 3, column 1 (`max_cost_usd = 5.0`): not supported by this version \
                 of kikid yet (a key of the config contract, not a typo); remove it"
            ]
        );
        // Only in a profile: elsewhere it is just unknown.
        assert!(problems("[turns]\nmax_cost_usd = 5.0\n")[0].contains("unknown key"));
    }

    #[test]
    fn only_close_names_are_suggested() {
        let known = field_names::<BridgeConfig>();
        assert_eq!(closest("lisen", known), Some("listen"));
        assert_eq!(closest("LISTEN", known), Some("listen"));
        assert_eq!(closest("retrywindow", known), Some("retry_window"));
        assert_eq!(closest("request_expiry_time", known), None);
        assert_eq!(closest("port", known), None);
        assert_eq!(closest("urn", &["url"]), Some("url"));
        assert_eq!(closest("tls", &["url"]), None);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
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
        let set = Config::parse("[bridge]\nrequest_expiry = \"7d\"\n").expect("valid");
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
    fn a_config_file_is_read_up_to_1_mib() {
        let dir = tempfile::tempdir().expect("dir");
        let file = dir.path().join("config.toml");
        // Spaces are an empty TOML document: only the size matters.
        std::fs::write(&file, " ".repeat(MAX_CONFIG_BYTES)).expect("write");
        Config::load(&file, true).expect("the limit itself is fine");
        std::fs::write(&file, " ".repeat(MAX_CONFIG_BYTES + 1)).expect("write");
        let err = Config::load(&file, true).expect_err("too large");
        assert_eq!(err.problems, ["larger than 1 MiB, the most a config file may hold"]);
        assert_eq!(err.source_name, Some(file.display().to_string()));
        // An endless file is refused too, instead of filling the memory.
        let err = Config::load(Path::new("/dev/zero"), true).expect_err("endless");
        assert_eq!(err.problems, ["larger than 1 MiB, the most a config file may hold"]);
    }

    #[test]
    fn a_missing_file_is_an_error_only_when_named() {
        let dir = tempfile::tempdir().expect("dir");
        let file = dir.path().join("absent.toml");
        Config::load(&file, false).expect("a missing default file is fine");
        let err = Config::load(&file, true).expect_err("a named file must exist");
        assert!(err.problems[0].starts_with("cannot read: "), "{err}");
        std::fs::write(&file, b"[store]\nurl = \"\xff\"\n").expect("write");
        let err = Config::load(&file, true).expect_err("not UTF-8");
        assert!(err.problems[0].starts_with("cannot read: not UTF-8"), "{err}");
        std::fs::write(&file, "[turns]\nmax_output_bytes = 0\n").expect("write");
        let err = Config::load(&file, true).expect_err("invalid");
        assert_eq!(
            err.to_string(),
            format!(
                "invalid configuration in {}:\n  - turns.max_output_bytes: must be at least 1",
                file.display()
            )
        );
    }
}
