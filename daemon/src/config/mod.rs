//! Typed configuration, layered: built-in defaults → `HOME/config.toml` (or `--config FILE`)
//! → environment (`KIKI_STORE_URL`) → what the embedding code sets (tests build a [`Config`]
//! in code). Every key is optional.
//!
//! ```toml
//! [store]
//! url = "sqlite://…"            # default: HOME/kiki.db; or "postgres://user@host/db"
//! password_file = "pg.pass"     # Postgres: the password's owner-only file (or KIKI_STORE_PASSWORD)
//! pool_size = 8                 # Postgres: the most connections kept to the server
//! lease = "10s"                 # a team home's replicas: what one claimed is its own this long without a heartbeat
//!
//! [thread_communication]
//! enabled = true                # unset: off by default, threads opt in
//!
//! [turns]
//! max_output_bytes = 10485760   # a turn's output beyond this fails the turn
//!
//! [bridge]
//! listen = "127.0.0.1:0"        # the QUIC endpoint for bridges (port 0: any free port)
//! retry_window = "15m"          # unacknowledged cross-home sends expire after this (<= 24h)
//! request_expiry = "24h"        # a pairing request the owner has not decided expires
//! connect_timeout = "5s"       # dialing a peer longer than this: unreachable (exit 4)
//!
//! [mailbox]
//! delivery_wait = "3s"          # ThreadSend answers `pending` after this
//! key_retention = "7d"          # idempotency keys are kept this long (>= 24h)
//!
//! [rooms]
//! max_agent_wakes = 20          # agents' posts wake this often without the owner, then the room pauses
//!
//! [threads]
//! max_agent_wakes = 20          # two threads' agents wake each other this often without the owner
//! permission_timeout = "10m"    # an agent's permission request is denied unanswered after this
//!
//! [log]
//! level = "info"                # tracing directives; KIKI_LOG wins
//! format = "text"               # or "json", one object per line
//! file = "logs/kikid.log"       # under the home, rotated daily, 7 kept; default stderr
//!
//! [metrics]
//! listen = "127.0.0.1:9464"     # serve the Prometheus text format here; default: not served
//!
//! [otel]
//! endpoint = "http://127.0.0.1:4317"   # export traces over OTLP/gRPC here; default: not exported
//!
//! [background]
//! bash_auto_background_on_timeout = true   # a timed-out foreground Bash command goes on as a task
//! bash_task_timeout_s = 600     # a background task's budget; 0: none
//!
//! [profiles.claude]
//! executor = "claude"           # "echo" | "exec" | "claude" | "codex" | "acp"
//! command = ["claude"]          # claude, codex: the CLI and its arguments; exec, acp: the whole command
//! default = true                # at most one profile; otherwise `echo` is the default
//! enabled = true
//! thread_communication = true   # this profile's threads opt in to peer communication
//! allowed_tools = ["mcp__kiki__ThreadSend", "Bash"]   # tools allowed without asking (session tools: any executor)
//! max_cost_usd = 5.0            # a thread's agent may spend this much, then the thread pauses
//! ```
//!
//! Every mistake is an error, and all of them are reported at once, one line each with its
//! key path, line and column: a wrongly typed value (each key is checked on its own, so two
//! bad keys of one section are two problems), an unknown section or key (with the known name
//! it most likely misspells), a section or key of kiki's config that this kikid does not
//! implement yet (refused, so a config never seems to do what it does not), and a value
//! breaking a rule (see [`Config::validate`]). The known keys are learned from the structs'
//! serde derives, so adding a field is all it takes to accept a key.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use crate::store::words;

mod reader;
use reader::*;
use toml::de::{DeTable, ValueDeserializer};

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

/// Sections of kiki's config that this kikid does not implement yet. They are
/// refused rather than ignored (a config relying on them would seem to work), but not
/// called typos.
const NOT_YET_SECTIONS: &[&str] = &["web"];

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct Config {
    pub store: StoreConfig,
    pub thread_communication: ThreadCommunicationConfig,
    pub turns: TurnsConfig,
    pub mailbox: MailboxConfig,
    pub bridge: BridgeConfig,
    pub rooms: RoomsConfig,
    pub threads: ThreadsConfig,
    pub log: LogConfig,
    pub metrics: MetricsConfig,
    pub otel: OtelConfig,
    pub background: BackgroundConfig,
    /// Named executors; `echo` exists even when not listed.
    pub profiles: BTreeMap<String, ProfileConfig>,
}

/// The session tools' shell: what happens to a command that outlives its time.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct BackgroundConfig {
    /// A foreground `Bash` command that hits its timeout moves to the background (true,
    /// the default) instead of being ended.
    pub bash_auto_background_on_timeout: bool,
    /// A background task's budget in seconds (0: none). Default 600.
    pub bash_task_timeout_s: u64,
}

impl Default for BackgroundConfig {
    fn default() -> Self {
        Self { bash_auto_background_on_timeout: true, bash_task_timeout_s: 600 }
    }
}

/// kikid's metrics.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct MetricsConfig {
    /// A TCP address to serve the home's metrics on, in the Prometheus text format
    /// (`127.0.0.1:9464`); default none (not served). Anyone who reaches it reads them.
    pub listen: Option<std::net::SocketAddr>,
}

/// kikid's traces.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct OtelConfig {
    /// An OpenTelemetry collector's OTLP/gRPC address (`http://127.0.0.1:4317`) to export
    /// the home's spans to; default none (not exported).
    pub endpoint: Option<String>,
}

/// kikid's log: what, in which form, where.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct LogConfig {
    /// What is logged, as `tracing` directives (`info`, `warn,kiki_daemon::bridges=debug`);
    /// `KIKI_LOG` in kikid's environment wins. Default `info`.
    pub level: String,
    /// `text` (default) or `json`, one object per line.
    pub format: LogFormat,
    /// A file under the home to log to instead of stderr (`logs/kikid.log`), rotated daily
    /// (`logs/kikid.log.2026-12-05`), the last 7 kept. Default: stderr.
    pub file: Option<std::path::PathBuf>,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self { level: "info".into(), format: LogFormat::Text, file: None }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct StoreConfig {
    /// `sqlite://PATH` (or a bare path), or `postgres://…`. Default: `HOME/kiki.db`.
    pub url: Option<String>,
    /// A Postgres store's password, in an owner-only file (a relative path is the home's).
    pub password_file: Option<std::path::PathBuf>,
    /// The most connections to a Postgres store.
    pub pool_size: Option<u32>,
    /// How long what a replica of a team home claimed stays its own without a heartbeat:
    /// each replica writes one every third of it. Default `10s`.
    #[serde(with = "duration")]
    pub lease: Duration,
}

impl StoreConfig {
    /// Where this config puts the store of the home `home` (see [`StoreLocation::resolve`]).
    ///
    /// [`StoreLocation::resolve`]: crate::store::StoreLocation::resolve
    pub fn location(
        &self,
        home: &kiki_proto::home::HomeDir,
    ) -> crate::store::StoreResult<crate::store::StoreLocation> {
        crate::store::StoreLocation::resolve(
            self.url.as_deref(),
            self.password_file.as_deref(),
            self.pool_size,
            home.root(),
            home.sqlite_file(),
        )
    }
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self { url: None, password_file: None, pool_size: None, lease: Duration::from_secs(10) }
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ThreadCommunicationConfig {
    /// `false`: peer communication off completely. `true`: on by default.
    /// Unset: off by default, a thread opts in.
    pub enabled: Option<bool>,
}

impl ThreadCommunicationConfig {
    /// The switch in words, as `kiki status` shows it.
    pub fn describe(&self) -> &'static str {
        match self.enabled {
            Some(false) => "off for every thread ([thread_communication] enabled = false)",
            Some(true) => "on by default ([thread_communication] enabled = true)",
            None => "off by default: threads opt in (kiki thread set REF --communication on)",
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct TurnsConfig {
    /// A turn whose agent's output grows past this many bytes is stopped and marked failed,
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
    /// How long dialing a peer may take before it counts as unreachable (`kiki bridge
    /// request`, and any call over a bridge whose connection must be made). Default `5s`.
    #[serde(with = "duration")]
    pub connect_timeout: Duration,
}

impl Default for BridgeConfig {
    fn default() -> Self {
        Self {
            listen: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
            retry_window: Duration::from_secs(15 * 60),
            request_expiry: Duration::from_secs(24 * 3600),
            connect_timeout: Duration::from_secs(5),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct RoomsConfig {
    /// The loop guard: how many wakes agents' posts may cause in a room without the owner's
    /// input; the post past it pauses the room and tells the host (`attention`). Default 20.
    pub max_agent_wakes: u32,
}

impl Default for RoomsConfig {
    fn default() -> Self {
        Self { max_agent_wakes: 20 }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct ThreadsConfig {
    /// The loop guard between two threads: how many times their agents' messages may wake
    /// one another without the owner's input; past it their messages wait for a turn the
    /// owner starts, and the woken thread gets an `attention` event. Default 20.
    pub max_agent_wakes: u32,
    /// How long an agent's permission request waits for `kiki approve` / `deny` before it
    /// is denied. Default 10 minutes.
    #[serde(with = "duration")]
    pub permission_timeout: Duration,
}

impl Default for ThreadsConfig {
    fn default() -> Self {
        Self { max_agent_wakes: 20, permission_timeout: Duration::from_secs(600) }
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

words! {
    /// What runs a profile's turns; its word is the one configs (and metrics' labels) use.
    ExecutorKind {
        /// Built-in, deterministic: one `echo: …` line per input item.
        Echo => "echo",
        /// Runs `command` per turn with the input on stdin; stdout is the output.
        Exec => "exec",
        /// Claude Code's headless mode, the thread's session resumed at every turn.
        Claude => "claude",
        /// The Codex app-server (JSON-RPC over stdio), the thread's Codex thread resumed at
        /// every turn, messages steered into a running turn.
        Codex => "codex",
        /// Any Agent Client Protocol agent, the thread's ACP session loaded at every turn.
        Acp => "acp",
    }
}

/// Read from its word; another word is refused naming the words there are.
impl<'de> Deserialize<'de> for ExecutorKind {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        static WORDS: [&str; ExecutorKind::ALL.len()] = {
            let mut words = [""; ExecutorKind::ALL.len()];
            let mut i = 0;
            while i < words.len() {
                words[i] = ExecutorKind::ALL[i].as_str();
                i += 1;
            }
            words
        };
        let word = String::deserialize(d)?;
        ExecutorKind::parse(&word).ok_or_else(|| serde::de::Error::unknown_variant(&word, &WORDS))
    }
}

impl ExecutorKind {
    /// Whether the executor keeps the agent's own session and resumes it turn after turn.
    pub fn keeps_session(&self) -> bool {
        matches!(self, Self::Claude | Self::Codex | Self::Acp)
    }
}

/// A `[profiles.NAME]` table. Its `executor` is required: [`Config::parse`] refuses a profile
/// without one (the serde default only lets each key be checked on its own).
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct ProfileConfig {
    pub executor: ExecutorKind,
    /// Program and arguments (no shell is involved): the whole command for `exec` and `acp`;
    /// the CLI and arguments after it for `claude` and `codex` (default `claude` / `codex`).
    pub command: Vec<String>,
    /// Makes this the profile used when ThreadCreate names none.
    pub default: bool,
    /// A disabled profile cannot be chosen for new threads.
    pub enabled: bool,
    /// Opens (or closes) peer communication for this profile's threads when the home's
    /// `[thread_communication] enabled` is not `false` and the thread has no switch of its own.
    pub thread_communication: Option<bool>,
    /// Tools the agent may use without asking the owner: the home's session tools by name
    /// (`Bash`, or `mcp__kiki__Bash`), for any executor; and for `claude`, `codex`, `acp` the
    /// agent's own (Claude Code's `--allowedTools`; Codex's `command`, `file_change` and
    /// `permissions`; an ACP tool call's kind or title).
    pub allowed_tools: Vec<String>,
    /// What one thread's agent may spend in all (as the agent reports its cost); once
    /// spent, the thread starts no more turns and its owner gets an `attention` event.
    pub max_cost_usd: Option<f64>,
}

impl ProfileConfig {
    /// The program and arguments it runs: `claude` runs `claude` and `codex` runs `codex`
    /// unless told otherwise.
    pub fn program(&self) -> Vec<String> {
        match self.executor {
            ExecutorKind::Claude if self.command.is_empty() => vec!["claude".into()],
            ExecutorKind::Codex if self.command.is_empty() => vec!["codex".into()],
            _ => self.command.clone(),
        }
    }
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
            allowed_tools: Vec::new(),
            max_cost_usd: None,
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
                "rooms" => read.section(&key, value, &mut config.rooms),
                "threads" => read.section(&key, value, &mut config.threads),
                "log" => read.section(&key, value, &mut config.log),
                "metrics" => read.section(&key, value, &mut config.metrics),
                "otel" => read.section(&key, value, &mut config.otel),
                "background" => read.section(&key, value, &mut config.background),
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
        let problems = [
            self.profile_problems(),
            self.delivery_problems(),
            self.store_problems(),
            self.observability_problems(),
            self.agent_problems(),
        ]
        .concat();
        if problems.is_empty() { Ok(()) } else { Err(ConfigError { source_name: None, problems }) }
    }

    /// `[profiles.*]`: each profile as its executor takes it, and at most one default.
    fn profile_problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let mut defaults = Vec::new();
        for (name, profile) in &self.profiles {
            problems.extend(profile_name_problem(name));
            match profile.executor {
                ExecutorKind::Exec | ExecutorKind::Acp
                    if profile.command.first().is_none_or(|program| program.trim().is_empty()) =>
                {
                    let kind = if profile.executor == ExecutorKind::Acp { "an acp" } else { "an exec" };
                    problems.push(format!("profiles.{name}.command: {kind} profile needs a command"))
                }
                ExecutorKind::Echo if !profile.command.is_empty() => {
                    problems.push(format!("profiles.{name}.command: the echo executor takes no command"))
                }
                _ => {}
            }
            if let Some(budget) = profile.max_cost_usd
                && !(budget.is_finite() && budget > 0.0)
            {
                problems.push(format!(
                    "profiles.{name}.max_cost_usd: must be a positive number of dollars, got {budget}"
                ));
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
        problems
    }

    /// How sends wait, travel between homes and end: `[mailbox]`, `[bridge]`, `[turns]`.
    fn delivery_problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
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
        if self.bridge.connect_timeout.is_zero() || self.bridge.connect_timeout > Duration::from_secs(60) {
            problems.push("bridge.connect_timeout: must be more than 0 and at most 60s".into());
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
        problems
    }

    /// `[store]`.
    fn store_problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if !(Duration::from_secs(1)..=Duration::from_secs(600)).contains(&self.store.lease) {
            problems.push("store.lease: must be between 1s and 10m".into());
        }
        if self.store.pool_size.is_some_and(|size| !(1..=1_000).contains(&size)) {
            problems.push("store.pool_size: must be between 1 and 1000".into());
        }
        if self.store.password_file.is_some()
            && !self.store.url.as_deref().is_some_and(crate::store::is_postgres_url)
        {
            problems.push("store.password_file: only a postgres:// store takes a password".into());
        }
        problems
    }

    /// `[log]` and `[otel]`.
    fn observability_problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if let Err(e) = tracing_subscriber::EnvFilter::builder().parse(&self.log.level) {
            problems.push(format!(
                "log.level: not a log filter ({e}); e.g. \"info\" or \"warn,kiki_daemon=debug\""
            ));
        }
        if let Some(file) = &self.log.file
            && (file.is_absolute()
                || file.file_name().is_none()
                || file.components().any(|c| !matches!(c, std::path::Component::Normal(_))))
        {
            problems.push(format!(
                "log.file: a file under the home, like \"logs/kikid.log\" (no leading /, no ..), got {}",
                file.display()
            ));
        }
        if let Some(endpoint) = &self.otel.endpoint
            && !endpoint.parse::<http::Uri>().is_ok_and(|uri| {
                matches!(uri.scheme_str(), Some("http" | "https")) && uri.authority().is_some()
            })
        {
            problems.push(format!(
                "otel.endpoint: an OTLP/gRPC collector's URL, like \"http://127.0.0.1:4317\", got {endpoint:?}"
            ));
        }
        problems
    }

    /// How far agents go without the owner: `[rooms]` and `[threads]`.
    fn agent_problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if !(1..=10_000).contains(&self.rooms.max_agent_wakes) {
            problems.push("rooms.max_agent_wakes: must be between 1 and 10000".into());
        }
        if !(1..=10_000).contains(&self.threads.max_agent_wakes) {
            problems.push("threads.max_agent_wakes: must be between 1 and 10000".into());
        }
        if !(Duration::from_secs(1)..=Duration::from_secs(86_400)).contains(&self.threads.permission_timeout)
        {
            problems.push("threads.permission_timeout: must be between 1s and 24h".into());
        }
        problems
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

    /// The enabled profile a caller names, or the default one when it names none: its name
    /// and settings, or why it cannot be used (for the caller's `profile` field).
    pub fn usable_profile(&self, name: Option<&str>) -> Result<(String, ProfileConfig), String> {
        let named = name.is_some();
        let name = name.unwrap_or_else(|| self.default_profile());
        match self.profile(name) {
            Some(p) if p.enabled => Ok((name.to_string(), p)),
            Some(_) if named => Err(format!("profile {name:?} is disabled")),
            Some(_) => Err(format!("the default profile {name:?} is disabled; name an enabled one")),
            None => Err(format!("no profile {name:?}; this home has: {}", self.profile_names().join(", "))),
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

/// What is wrong with a profile's name, if anything.
fn profile_name_problem(name: &str) -> Option<String> {
    let valid = (1..=64).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    (!valid).then(|| format!("profiles.{name}: a profile name is 1-64 characters of a-z, 0-9, '-' and '_'"))
}

#[cfg(test)]
mod tests;
