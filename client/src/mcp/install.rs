//! `kiki mcp install`: writes an agent CLI's own configuration so that it starts kiki's MCP
//! server (`kiki mcp`, server name `kiki`, its tools seen as `mcp__kiki__ThreadSend`).
//!
//! The configuration is merged, never clobbered: every other key and server stays, only the
//! `kiki` entry is replaced. Both kinds of file are edited in place, keeping their comments,
//! order and layout: JSON through jsonc-parser's syntax tree (Gemini CLI's settings may hold
//! `//` and `/* */` comments, which it strips before parsing; the other agents read strict
//! JSON, so their files must be JSON), TOML (codex) through toml_edit. A file that exists but
//! cannot be parsed as its agent reads it is refused (bad input, naming the file and what is
//! wrong) and left untouched. Writes are atomic (a temporary file in the same directory,
//! renamed over the old one) and keep the old file's permissions; a new file is owner-only
//! (0600).
//!
//! The identity `kiki mcp` acts as comes from its environment (`KIKI_HOME`,
//! `KIKI_THREAD_ID`, `KIKI_TOKEN`, set by kikid for the agent CLI of a turn). Some agents
//! start MCP servers with a filtered environment, so every entry forwards the three
//! explicitly, in the form that agent expands. Outside a turn there is no `KIKI_HOME`: every
//! entry also names the home it was installed for (`kiki mcp --default-home HOME`), which
//! `kiki mcp` uses when neither `--home` nor `KIKI_HOME` names one.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use jsonc_parser::ParseOptions;
use jsonc_parser::cst::{CstInputValue, CstObject, CstObjectProp, CstRootNode};
use serde_json::{Value, json};

use crate::output::{UsageError, print_json};

/// The MCP server's name in every agent's configuration.
const SERVER: &str = "kiki";

/// The variables `kiki mcp` takes its identity from, forwarded by every entry.
const IDENTITY: [&str; 3] = ["KIKI_HOME", "KIKI_THREAD_ID", "KIKI_TOKEN"];

/// How long an agent waits for `kiki mcp` to start (codex, seconds).
const STARTUP_TIMEOUT_SECS: u64 = 10;

/// How long an agent waits for one tool call: above ThreadWait's longest answer (60 s).
const TOOL_TIMEOUT_SECS: u64 = 90;

/// How many times a file changed by someone else between its read and its replacement is
/// read and merged again before kiki gives up.
const ATTEMPTS: usize = 3;

#[derive(clap::Args, Debug)]
pub struct InstallArgs {
    /// Which agent CLI to set up.
    #[arg(value_enum)]
    pub agent: AgentCli,
    /// user: the agent's per-user config; project: the config in the current directory.
    #[arg(long, value_enum, default_value = "user")]
    pub scope: Scope,
    /// Print the configuration instead of writing it.
    #[arg(long)]
    pub print: bool,
    /// Also add a profile NAME to the home's config.toml that runs this agent as kiki
    /// threads (claude and codex by their own executors; gemini and kimi over ACP).
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
}

/// An agent CLI whose configuration kiki knows how to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AgentCli {
    /// Claude Code: ~/.claude.json, or .mcp.json in the project.
    Claude,
    /// Codex CLI: $CODEX_HOME/config.toml (~/.codex), or .codex/config.toml in the project.
    Codex,
    /// Gemini CLI: ~/.gemini/settings.json, or .gemini/settings.json in the project.
    Gemini,
    /// Kimi Code CLI: ~/.kimi/mcp.json, or .kimi/mcp.json in the project.
    Kimi,
}

impl AgentCli {
    fn name(self) -> &'static str {
        match self {
            AgentCli::Claude => "claude",
            AgentCli::Codex => "codex",
            AgentCli::Gemini => "gemini",
            AgentCli::Kimi => "kimi",
        }
    }

    /// The kiki profile that runs this agent as threads: its executor, and its command
    /// when the executor has no default.
    fn profile(self) -> (&'static str, Option<[&'static str; 2]>) {
        match self {
            AgentCli::Claude => ("claude", None),
            AgentCli::Codex => ("codex", None),
            AgentCli::Gemini => ("acp", Some(["gemini", "--acp"])),
            AgentCli::Kimi => ("acp", Some(["kimi", "acp"])),
        }
    }

    /// Where in its file the entry goes, as people read it.
    fn entry_key(self) -> &'static str {
        match self {
            AgentCli::Codex => "[mcp_servers.kiki]",
            _ => "mcpServers.kiki",
        }
    }
}

/// Whose configuration is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Scope {
    /// The agent's per-user configuration, under $HOME.
    User,
    /// The configuration in the current directory, for this project only.
    Project,
}

impl Scope {
    fn name(self) -> &'static str {
        match self {
            Scope::User => "user",
            Scope::Project => "project",
        }
    }
}

pub fn run(home: &Path, args: InstallArgs, json: bool) -> Result<()> {
    if let Some(name) = &args.profile {
        check_profile_name(name)?;
    }
    let command = kiki_command()?;
    let home_dir = home;
    let home = home.to_str().ok_or_else(|| anyhow!("the home {} is not UTF-8", home.display()))?;
    let entry = entry(args.agent, &command, home);
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let path = config_path(
        args.agent,
        args.scope,
        std::env::var_os("HOME").as_deref(),
        std::env::var_os("CODEX_HOME").as_deref(),
        &cwd,
    )?;
    let profile_file = home_dir.join("config.toml");
    if let Some(name) = &args.profile {
        // Refused before anything is written.
        let (existing, _) = read_existing(&profile_file)?;
        merge_profile(existing.as_deref(), name, args.agent).map_err(|e| {
            same_kind(
                e,
                format!("cannot add the profile to {}", profile_file.display()),
                "nothing was written",
            )
        })?;
    }
    if !args.print {
        install(args.agent, &path, &entry)?;
        if let Some(name) = &args.profile {
            add_profile(&profile_file, name, args.agent)?;
        }
    }
    if json {
        let mut report = json!({
            "agent": args.agent.name(),
            "scope": args.scope.name(),
            "path": path.to_string_lossy(),
            "written": !args.print,
            "config": entry,
        });
        if let Some(name) = &args.profile {
            report["profile"] = json!({
                "name": name,
                "path": profile_file.to_string_lossy(),
                "config": profile_text(name, args.agent)?,
            });
        }
        print_json(&report);
    } else if args.print {
        out!("{}", merge(args.agent, None, &entry)?);
        let scope = if args.scope == Scope::Project { " --scope project" } else { "" };
        hint!("# for {} (kiki mcp install {}{scope} writes it there)", path.display(), args.agent.name());
        if let Some(name) = &args.profile {
            out!("{}", profile_text(name, args.agent)?);
            hint!("# for {}", profile_file.display());
        }
    } else {
        outln!("wrote {} to {}", args.agent.entry_key(), path.display());
        if let Some(name) = &args.profile {
            outln!("wrote [profiles.{name}] to {} (restart kikid to use it)", profile_file.display());
        }
    }
    Ok(())
}

/// kikid's rule for profile names (`profiles.NAME`).
fn check_profile_name(name: &str) -> Result<()> {
    let valid = (1..=64).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    if !valid {
        return Err(UsageError(format!(
            "invalid --profile {name:?}: a profile name is 1-64 characters of a-z, 0-9, '-' and '_'"
        ))
        .into());
    }
    Ok(())
}

/// `[profiles.NAME]` for the agent.
fn profile_table(agent: AgentCli) -> toml_edit::Table {
    let (executor, command) = agent.profile();
    let mut table = toml_edit::Table::new();
    table.insert("executor", toml_edit::value(executor));
    if let Some(command) = command {
        table.insert("command", toml_edit::value(toml_edit::Array::from_iter(command)));
    }
    table
}

/// The profile as it is written, alone.
fn profile_text(name: &str, agent: AgentCli) -> Result<String> {
    merge_profile(None, name, agent)
}

/// The home's config with `[profiles.NAME]` added. A profile of that name already there is
/// kept if it is the same, else refused: the owner's settings are never replaced.
fn merge_profile(existing: Option<&str>, name: &str, agent: AgentCli) -> Result<String> {
    let text = existing.unwrap_or_default();
    let mut doc: toml_edit::DocumentMut =
        text.parse().map_err(|e| malformed(format!("it is not valid TOML: {}", toml_problem(text, &e))))?;
    let profiles = doc.entry("profiles").or_insert_with(|| {
        let mut profiles = toml_edit::Table::new();
        profiles.set_implicit(true);
        toml_edit::Item::Table(profiles)
    });
    let toml_edit::Item::Table(profiles) = profiles else {
        return Err(malformed("its `profiles` is not a table"));
    };
    let wanted = profile_table(agent);
    match profiles.get(name) {
        Some(toml_edit::Item::Table(old)) => {
            let same = |key: &str| {
                old.get(key).and_then(|v| v.as_value()).map(|v| v.to_string().trim().to_string())
                    == wanted.get(key).and_then(|v| v.as_value()).map(|v| v.to_string().trim().to_string())
            };
            if !(same("executor") && same("command")) {
                bail!(
                    "a profile {name:?} is there already, with other settings; \
                     choose another --profile or edit it"
                );
            }
        }
        Some(_) => return Err(malformed(format!("its `profiles.{name}` is not a table"))),
        None => {
            profiles.insert(name, toml_edit::Item::Table(wanted));
        }
    }
    Ok(doc.to_string())
}

/// Adds the profile to the home's config file (see [`merge_profile`]).
fn add_profile(path: &Path, name: &str, agent: AgentCli) -> Result<()> {
    write_merged(path, "the profile", |existing| merge_profile(existing, name, agent))
}

/// The running `kiki`, by absolute path with links resolved: what the entry starts.
fn kiki_command() -> Result<String> {
    let exe = std::env::current_exe().context("cannot find the running kiki binary")?;
    let exe = exe.canonicalize().with_context(|| format!("cannot resolve {}", exe.display()))?;
    exe.into_os_string()
        .into_string()
        .map_err(|exe| anyhow!("the kiki binary's path {} is not UTF-8", Path::new(&exe).display()))
}

/// The `kiki` entry for `agent`, starting `command mcp --default-home HOME` with the
/// identity forwarded: a turn's `KIKI_HOME` wins, and outside a turn `kiki mcp` reaches
/// `home`, the home it was installed for.
fn entry(agent: AgentCli, command: &str, home: &str) -> Value {
    let args = json!(["mcp", "--default-home", home]);
    let env = |form: &dyn Fn(&str) -> String| {
        Value::Object(IDENTITY.iter().map(|name| (name.to_string(), Value::String(form(name)))).collect())
    };
    match agent {
        AgentCli::Claude => json!({
            "type": "stdio",
            "command": command,
            "args": args,
            "env": env(&|name| format!("${{{name}:-}}")),
        }),
        AgentCli::Codex => json!({
            "command": command,
            "args": args,
            "env_vars": IDENTITY,
            "startup_timeout_sec": STARTUP_TIMEOUT_SECS,
            "tool_timeout_sec": TOOL_TIMEOUT_SECS,
        }),
        AgentCli::Gemini => json!({
            "command": command,
            "args": args,
            "env": env(&|name| format!("${name}")),
            "timeout": TOOL_TIMEOUT_SECS * 1000,
        }),
        AgentCli::Kimi => json!({
            "command": command,
            "args": args,
            "env": env(&|name| format!("${{{name}}}")),
        }),
    }
}

/// The file `agent` reads its MCP servers from: under `home_var` ($HOME) for the user
/// scope (codex: `codex_home`, $CODEX_HOME, when set), under `cwd` for the project scope.
fn config_path(
    agent: AgentCli,
    scope: Scope,
    home_var: Option<&std::ffi::OsStr>,
    codex_home: Option<&std::ffi::OsStr>,
    cwd: &Path,
) -> Result<PathBuf> {
    if scope == Scope::Project {
        return Ok(match agent {
            AgentCli::Claude => cwd.join(".mcp.json"),
            AgentCli::Codex => cwd.join(".codex").join("config.toml"),
            AgentCli::Gemini => cwd.join(".gemini").join("settings.json"),
            AgentCli::Kimi => cwd.join(".kimi").join("mcp.json"),
        });
    }
    if agent == AgentCli::Codex
        && let Some(dir) = codex_home.filter(|dir| !dir.is_empty())
    {
        return Ok(cwd.join(dir).join("config.toml"));
    }
    let Some(user) = home_var.filter(|dir| !dir.is_empty()) else {
        bail!("HOME is not set, so {}'s user config cannot be found (try --scope project)", agent.name());
    };
    let user = cwd.join(user);
    Ok(match agent {
        AgentCli::Claude => user.join(".claude.json"),
        AgentCli::Codex => user.join(".codex").join("config.toml"),
        AgentCli::Gemini => user.join(".gemini").join("settings.json"),
        AgentCli::Kimi => user.join(".kimi").join("mcp.json"),
    })
}

/// `existing` (a file's text, or `None` for no file) with `entry` as its `kiki` server.
fn merge(agent: AgentCli, existing: Option<&str>, entry: &Value) -> Result<String> {
    match agent {
        AgentCli::Codex => merge_toml(existing, entry),
        // Gemini CLI strips comments from its settings before parsing them.
        AgentCli::Gemini => merge_json(existing, entry, true),
        AgentCli::Claude | AgentCli::Kimi => merge_json(existing, entry, false),
    }
}

/// A file that cannot be read as its agent reads it: bad input (exit 2), not a failure.
fn malformed(problem: impl Into<String>) -> anyhow::Error {
    UsageError(problem.into()).into()
}

/// `error` said of a file (`about`, then what happened to it), of the same kind: bad input
/// stays bad input.
fn same_kind(error: anyhow::Error, about: String, outcome: &str) -> anyhow::Error {
    let message = format!("{about}: {error:#}; {outcome}");
    if error.downcast_ref::<UsageError>().is_some() { UsageError(message).into() } else { anyhow!(message) }
}

/// Merges `entry` into the file at `path` (see [`write_merged`]).
fn install(agent: AgentCli, path: &Path, entry: &Value) -> Result<()> {
    write_merged(path, "the kiki server", |existing| merge(agent, existing, entry))
}

/// Replaces the file at `path` with what `merge` makes of it, atomically. A file changed by
/// someone else meanwhile (an agent saving its state) is merged again.
fn write_merged(path: &Path, what: &str, merge: impl Fn(Option<&str>) -> Result<String>) -> Result<()> {
    let path = resolve_link(path)?;
    for _ in 0..ATTEMPTS {
        let (existing, stamp) = read_existing(&path)?;
        let text = merge(existing.as_deref()).map_err(|e| {
            same_kind(e, format!("cannot add {what} to {}", path.display()), "the file is left unchanged")
        })?;
        if write_atomic(&path, &text, &stamp)? {
            return Ok(());
        }
    }
    bail!("{} kept changing while kiki wrote it; try again", path.display())
}

/// A link's target, so that the link (a dotfiles checkout, say) stays one.
fn resolve_link(path: &Path) -> Result<PathBuf> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => {
            path.canonicalize().with_context(|| format!("cannot follow the link {}", path.display()))
        }
        _ => Ok(path.to_path_buf()),
    }
}

/// What a file looked like when it was read: it is replaced only if it still does.
#[derive(Debug, PartialEq, Eq)]
struct Stamp(Option<(u64, u64, u64, i64, i64)>);

impl Stamp {
    fn of(path: &Path) -> std::io::Result<Stamp> {
        match std::fs::metadata(path) {
            Ok(m) => Ok(Stamp(Some((m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec())))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Stamp(None)),
            Err(e) => Err(e),
        }
    }
}

fn read_existing(path: &Path) -> Result<(Option<String>, Stamp)> {
    let stamp = Stamp::of(path).with_context(|| format!("cannot read {}", path.display()))?;
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((None, Stamp(None))),
        Err(e) => bail!("cannot read {}: {e}", path.display()),
    };
    let text = String::from_utf8(bytes).map_err(|e| {
        malformed(format!(
            "cannot parse {}: it is not UTF-8 text ({e}); the file is left unchanged",
            path.display()
        ))
    })?;
    Ok((Some(text), stamp))
}

/// Writes `text` to `path` through a temporary file in its directory, renamed over it,
/// with the old file's permissions and owner (0600, ours, for a new one), unless the file
/// no longer looks like `read` (then `false`: nothing was written). Creates the missing
/// directories (owner-only).
fn write_atomic(path: &Path, text: &str, read: &Stamp) -> Result<bool> {
    let shown = path.display();
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        bail!("{shown} is not a file's path");
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("cannot create {}", dir.display()))?;
    // The old file's mode, and its owner if it is not ours (`sudo kiki …` with the user's
    // HOME must not leave the user a config file they cannot write).
    let (mode, owner) = match std::fs::metadata(path) {
        Ok(meta) => {
            let mine = (meta.uid(), meta.gid())
                == (nix::unistd::geteuid().as_raw(), nix::unistd::getegid().as_raw());
            (meta.permissions().mode() & 0o777, (!mine).then(|| (meta.uid(), meta.gid())))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => (0o600, None),
        Err(e) => bail!("cannot read {shown}: {e}"),
    };
    let temp = dir.join(format!(".{}.kiki-{}.tmp", name.to_string_lossy(), std::process::id()));
    // Left by a kiki of the same pid that died before its rename.
    let _ = std::fs::remove_file(&temp);
    let written = (|| -> std::io::Result<bool> {
        let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&temp)?;
        file.write_all(text.as_bytes())?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::fchown(&file, Some(uid), Some(gid))?;
        }
        file.set_permissions(std::fs::Permissions::from_mode(mode))?;
        file.sync_all()?;
        if Stamp::of(path)? != *read {
            return Ok(false);
        }
        std::fs::rename(&temp, path)?;
        Ok(true)
    })();
    if !matches!(written, Ok(true)) {
        let _ = std::fs::remove_file(&temp);
    }
    let written = written.with_context(|| format!("cannot write {shown}"))?;
    if written && let Ok(dir) = std::fs::File::open(dir) {
        // The rename itself, durable; a file system that cannot sync a directory still
        // has the new file in place.
        let _ = dir.sync_all();
    }
    Ok(written)
}

/// `existing` JSON (or none) with `mcpServers.kiki` set to `entry`, edited in place:
/// everything else — order, layout and, where the agent takes them (`comments`), comments —
/// stays as it was. A `kiki` entry already there is replaced where it is.
fn merge_json(existing: Option<&str>, entry: &Value, comments: bool) -> Result<String> {
    let Some(text) = existing.filter(|text| !text.trim().is_empty()) else {
        // A new file: the entry alone, indented by two spaces as the agents write theirs.
        let mut text = serde_json::to_string_pretty(&json!({"mcpServers": {SERVER: entry}}))?;
        text.push('\n');
        return Ok(text);
    };
    // Read as the agent reads it: strict JSON (serde_json's), or JSON with comments.
    if !comments {
        serde_json::from_str::<serde::de::IgnoredAny>(text)
            .map_err(|e| malformed(format!("it is not valid JSON: {e}")))?;
    }
    let options = ParseOptions {
        allow_comments: comments,
        allow_loose_object_property_names: false,
        allow_trailing_commas: false,
        allow_missing_commas: false,
        allow_single_quoted_strings: false,
        allow_hexadecimal_numbers: false,
        allow_unary_plus_numbers: false,
        allow_bare_decimal_point_numbers: false,
        allow_non_finite_numbers: false,
        allow_extended_string_escapes: false,
    };
    let root = CstRootNode::parse(text, &options).map_err(|e| {
        let kind = if comments { "JSON (with comments)" } else { "JSON" };
        malformed(format!("it is not valid {kind}: {e}"))
    })?;
    let top = root.object_value().ok_or_else(|| malformed("its top level is not a JSON object"))?;
    let servers = match last_member(&top, "mcpServers") {
        None => top.append("mcpServers", CstInputValue::Object(Vec::new())).object_value(),
        Some(servers) if servers.value().is_some_and(|v| v.as_null_keyword().is_some()) => {
            servers.set_value(CstInputValue::Object(Vec::new()));
            servers.object_value()
        }
        Some(servers) => servers.object_value(),
    };
    let servers = servers.ok_or_else(|| malformed("its `mcpServers` is not a JSON object"))?;
    match last_member(&servers, SERVER) {
        Some(old) => old.set_value(cst_value(entry)),
        None => drop(servers.append(SERVER, cst_value(entry))),
    }
    Ok(root.to_string())
}

/// The member `name` of `object`; of several, the last, which is the one agents read
/// (`JSON.parse` keeps the last).
fn last_member(object: &CstObject, name: &str) -> Option<CstObjectProp> {
    object.properties().into_iter().rev().find(|member| member.decoded_name().as_deref() == Some(name))
}

/// `value` as jsonc-parser inserts it, its members in order.
fn cst_value(value: &Value) -> CstInputValue {
    match value {
        Value::Null => CstInputValue::Null,
        Value::Bool(b) => CstInputValue::Bool(*b),
        Value::Number(n) => CstInputValue::Number(n.to_string()),
        Value::String(s) => CstInputValue::String(s.clone()),
        Value::Array(items) => CstInputValue::Array(items.iter().map(cst_value).collect()),
        Value::Object(members) => CstInputValue::Object(
            members.iter().map(|(key, value)| (key.clone(), cst_value(value))).collect(),
        ),
    }
}

/// `existing` TOML (or none) with `[mcp_servers.kiki]` set to `entry`, everything else
/// (comments and layout too) kept. A `kiki` table already there is replaced where it is,
/// with the comments above it.
fn merge_toml(existing: Option<&str>, entry: &Value) -> Result<String> {
    let text = existing.unwrap_or_default();
    let mut doc: toml_edit::DocumentMut =
        text.parse().map_err(|e| malformed(format!("it is not valid TOML: {}", toml_problem(text, &e))))?;
    let Value::Object(fields) = entry else {
        bail!("the entry is not an object");
    };
    let mut table = toml_edit::Table::new();
    for (key, value) in fields {
        table.insert(key, toml_edit::Item::Value(toml_value(value)?));
    }
    let servers = doc.entry("mcp_servers").or_insert_with(|| {
        let mut servers = toml_edit::Table::new();
        servers.set_implicit(true);
        toml_edit::Item::Table(servers)
    });
    match servers {
        toml_edit::Item::Table(servers) => match servers.get_mut(SERVER) {
            Some(toml_edit::Item::Table(old)) if !old.is_dotted() => {
                table.set_position(old.position());
                *table.decor_mut() = old.decor().clone();
                *old = table;
            }
            _ => {
                servers.insert(SERVER, toml_edit::Item::Table(table));
            }
        },
        toml_edit::Item::Value(toml_edit::Value::InlineTable(servers)) => {
            servers.insert(SERVER, toml_edit::Value::InlineTable(table.into_inline_table()));
        }
        _ => return Err(malformed("its `mcp_servers` is not a table")),
    }
    Ok(doc.to_string())
}

/// A TOML parse error in one line, where it is: toml_edit's own display quotes the line
/// over several.
fn toml_problem(text: &str, error: &toml_edit::TomlError) -> String {
    let message =
        error.message().lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ");
    let Some(before) = error.span().and_then(|span| text.get(..span.start)) else {
        return message;
    };
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().unwrap_or_default().chars().count() + 1;
    format!("{message} at line {line}, column {column}")
}

fn toml_value(value: &Value) -> Result<toml_edit::Value> {
    Ok(match value {
        Value::Null => bail!("TOML has no null"),
        Value::Bool(b) => (*b).into(),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => i.into(),
            (None, Some(f)) => f.into(),
            (None, None) => bail!("{n} does not fit TOML"),
        },
        Value::String(s) => s.as_str().into(),
        Value::Array(items) => toml_edit::Value::Array(items.iter().map(toml_value).collect::<Result<_>>()?),
        Value::Object(members) => {
            let mut table = toml_edit::InlineTable::new();
            for (key, value) in members {
                table.insert(key, toml_value(value)?);
            }
            toml_edit::Value::InlineTable(table)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const KIKI: &str = "/opt/kiki/bin/kiki";

    fn entry_for(agent: AgentCli) -> Value {
        entry(agent, KIKI, "/home/u/.kiki")
    }

    /// A strict agent's JSON merge (claude, kimi).
    fn merged(existing: Option<&str>, agent: AgentCli) -> Result<String> {
        merge(agent, existing, &entry_for(agent))
    }

    fn parse(text: &str) -> serde_json::Value {
        serde_json::from_str(text).expect("json")
    }

    #[test]
    fn a_new_json_file_holds_the_entry_alone() {
        let text = merged(None, AgentCli::Claude).expect("merge");
        assert_eq!(
            text,
            format!(
                r#"{{
  "mcpServers": {{
    "kiki": {{
      "type": "stdio",
      "command": "{KIKI}",
      "args": [
        "mcp",
        "--default-home",
        "/home/u/.kiki"
      ],
      "env": {{
        "KIKI_HOME": "${{KIKI_HOME:-}}",
        "KIKI_THREAD_ID": "${{KIKI_THREAD_ID:-}}",
        "KIKI_TOKEN": "${{KIKI_TOKEN:-}}"
      }}
    }}
  }}
}}
"#
            )
        );
        // An empty file is as good as none.
        assert_eq!(merged(Some(" \n"), AgentCli::Claude).expect("merge"), text);
    }

    #[test]
    fn every_entry_names_the_home_it_was_installed_for() {
        for agent in [AgentCli::Claude, AgentCli::Codex, AgentCli::Gemini, AgentCli::Kimi] {
            let entry = entry(agent, KIKI, "/srv/my home/.kiki");
            assert_eq!(entry["args"], serde_json::json!(["mcp", "--default-home", "/srv/my home/.kiki"]));
        }
        // Any home: Claude Code's `${…}` no longer has to carry it.
        assert_eq!(entry(AgentCli::Claude, KIKI, "/u/we}ird")["args"][2], "/u/we}ird");
    }

    #[test]
    fn json_keeps_other_servers_and_settings_in_their_order() {
        let existing = r#"{
  "numStartups": 7,
  "mcpServers": {
    "zeta": {"command": "zeta-mcp", "args": []},
    "alpha": {"command": "alpha-mcp"}
  },
  "autoUpdates": false,
  "projects": {"/src/app": {"allowedTools": ["Bash"], "big": 12345678901234567890, "f": 1.5}}
}"#;
        let text = merged(Some(existing), AgentCli::Gemini).expect("merge");
        let mut expected = parse(existing);
        expected["mcpServers"]["kiki"] = serde_json::json!({
            "command": KIKI,
            "args": ["mcp", "--default-home", "/home/u/.kiki"],
            "env": {"KIKI_HOME": "$KIKI_HOME", "KIKI_THREAD_ID": "$KIKI_THREAD_ID", "KIKI_TOKEN": "$KIKI_TOKEN"},
            "timeout": 90000,
        });
        assert_eq!(parse(&text), expected);
        // Everything before the new server is as it was, byte for byte.
        let kept = existing.find("\n  },\n  \"autoUpdates\"").expect("end of the servers");
        assert!(text.starts_with(&existing[..kept]), "{text}");
        // Members keep their order; the new server comes last.
        let at = |needle: &str| text.find(needle).unwrap_or_else(|| panic!("{needle} in {text}"));
        assert!(at("numStartups") < at("mcpServers"));
        assert!(at("mcpServers") < at("autoUpdates"));
        assert!(at("\"zeta\"") < at("\"alpha\""));
        assert!(at("\"alpha\"") < at("\"kiki\""));
        assert!(at("\"kiki\"") < at("autoUpdates"));
        assert!(!text.ends_with('\n'), "no newline was there, none is added");
    }

    #[test]
    fn json_replaces_an_existing_kiki_entry_in_place() {
        let existing = r#"{"mcpServers": {"kiki": {"command": "/old/kiki", "args": ["mcp", "--old"], "extra": 1}, "other": {"command": "x"}}}"#;
        let text = merged(Some(existing), AgentCli::Kimi).expect("merge");
        let result = parse(&text);
        assert_eq!(
            result["mcpServers"]["kiki"],
            serde_json::json!({
                "command": KIKI,
                "args": ["mcp", "--default-home", "/home/u/.kiki"],
                "env": {"KIKI_HOME": "${KIKI_HOME}", "KIKI_THREAD_ID": "${KIKI_THREAD_ID}", "KIKI_TOKEN": "${KIKI_TOKEN}"},
            })
        );
        assert_eq!(result["mcpServers"]["other"], serde_json::json!({"command": "x"}));
        assert_eq!(text.matches("\"kiki\"").count(), 1);
        assert!(text.find("\"kiki\"") < text.find("\"other\""), "kept its place: {text}");
        // Merging again changes nothing.
        assert_eq!(merged(Some(&text), AgentCli::Kimi).expect("again"), text);
    }

    #[test]
    fn json_with_null_servers_gets_an_object() {
        let text = merged(Some(r#"{"mcpServers": null}"#), AgentCli::Kimi).expect("merge");
        assert_eq!(parse(&text)["mcpServers"]["kiki"]["command"], KIKI);
    }

    #[test]
    fn json_that_is_not_an_object_of_servers_is_refused() {
        for agent in [AgentCli::Claude, AgentCli::Gemini] {
            for (text, problem) in [
                ("{\"mcpServers\": {", "not valid JSON"),
                ("{\"a\": 1,}", "not valid JSON"),
                ("{'a': 1}", "not valid JSON"),
                ("[1, 2]", "top level is not a JSON object"),
                ("{\"mcpServers\": [\"kiki\"]}", "`mcpServers` is not a JSON object"),
            ] {
                let error = merged(Some(text), agent).expect_err(text);
                assert!(error.downcast_ref::<UsageError>().is_some(), "bad input: {error}");
                let error = error.to_string();
                assert!(error.contains(problem), "{agent:?} {text}: {error}");
                assert!(!error.contains('\n'), "one line: {error}");
            }
        }
        // Comments: strict JSON for the agents that read it so, fine for Gemini CLI.
        let error = merged(Some("// a comment\n{}"), AgentCli::Claude).expect_err("comment").to_string();
        assert!(error.contains("not valid JSON"), "{error}");
        assert!(merged(Some("// a comment\n{}"), AgentCli::Gemini).is_ok());
    }

    #[test]
    fn gemini_settings_keep_their_comments() {
        let existing = r#"{
  // My Gemini settings.
  "theme": "GitHub", /* the light one */
  "mcpServers": {
    // Docs lookup.
    "docs": {"command": "docs-mcp"}
  },
  "general": {"vimMode": true} // trailing note
}
"#;
        let text = merged(Some(existing), AgentCli::Gemini).expect("merge");
        for comment in
            ["// My Gemini settings.", "/* the light one */", "// Docs lookup.", "// trailing note"]
        {
            assert!(text.contains(comment), "{comment} kept in:\n{text}");
        }
        let read: Value =
            jsonc_parser::parse_to_serde_value(&text, &jsonc_parser::ParseOptions::default()).expect("JSONC");
        assert_eq!(read["mcpServers"]["kiki"], entry_for(AgentCli::Gemini));
        assert_eq!(
            (read["theme"].clone(), read["general"]["vimMode"].clone()),
            (json!("GitHub"), json!(true))
        );
        assert!(text.find("\"docs\"") < text.find("\"kiki\""), "{text}");
        // Again: the same file.
        assert_eq!(merged(Some(&text), AgentCli::Gemini).expect("again"), text);
        // A file without servers gets them, its comments kept.
        let text =
            merged(Some("{\n  // only a comment\n  \"theme\": \"x\"\n}\n"), AgentCli::Gemini).expect("merge");
        assert!(text.contains("// only a comment"), "{text}");
        let read: Value =
            jsonc_parser::parse_to_serde_value(&text, &jsonc_parser::ParseOptions::default()).expect("JSONC");
        assert_eq!(read["mcpServers"]["kiki"]["timeout"], 90000);
    }

    #[test]
    fn a_duplicate_key_keeps_its_first_place_and_last_value() {
        let text = merged(Some(r#"{"a": 1, "b": 2, "a": 3}"#), AgentCli::Kimi).expect("merge");
        assert!(text.find("\"a\"") < text.find("\"b\""), "{text}");
        assert_eq!(parse(&text)["a"], 3);
    }

    #[test]
    fn a_new_toml_file_holds_the_table_alone() {
        let text = merge_toml(None, &entry_for(AgentCli::Codex)).expect("merge");
        assert_eq!(
            text,
            format!(
                "[mcp_servers.kiki]\ncommand = \"{KIKI}\"\nargs = [\"mcp\", \"--default-home\", \"/home/u/.kiki\"]\n\
                 env_vars = [\"KIKI_HOME\", \"KIKI_THREAD_ID\", \"KIKI_TOKEN\"]\n\
                 startup_timeout_sec = 10\ntool_timeout_sec = 90\n"
            )
        );
    }

    const CODEX: &str = "\
# My codex settings.
model = \"o3\" # the best one

[mcp_servers.docs]
# Docs lookup.
command = \"docs-mcp\"
args = [\"--port\", \"1\"]

[profiles.fast]
model = \"o4-mini\"
";

    #[test]
    fn toml_keeps_comments_other_servers_and_layout() {
        let text = merge_toml(Some(CODEX), &entry_for(AgentCli::Codex)).expect("merge");
        let kiki = format!(
            "[mcp_servers.kiki]\ncommand = \"{KIKI}\"\nargs = [\"mcp\", \"--default-home\", \"/home/u/.kiki\"]\n\
             env_vars = [\"KIKI_HOME\", \"KIKI_THREAD_ID\", \"KIKI_TOKEN\"]\n\
             startup_timeout_sec = 10\ntool_timeout_sec = 90\n"
        );
        // Next to the other server, set apart by a blank line; everything else byte for byte.
        let (before, after) = CODEX.split_at(CODEX.find("[profiles.fast]").expect("profiles"));
        assert_eq!(text, format!("{before}{kiki}\n{after}"));
        // And again: replaced where it is, nothing added.
        assert_eq!(merge_toml(Some(&text), &entry_for(AgentCli::Codex)).expect("again"), text);
    }

    #[test]
    fn toml_replaces_an_existing_kiki_table_with_its_comment() {
        let existing = "\
model = \"o3\"

# kiki, the collaboration tools.
[mcp_servers.kiki]
command = \"/old/kiki\"
args = [\"mcp\", \"--old\"]
enabled = false

[mcp_servers.kiki.env]
X = \"1\"

[mcp_servers.docs]
command = \"docs-mcp\"
";
        let text = merge_toml(Some(existing), &entry_for(AgentCli::Codex)).expect("merge");
        assert_eq!(text.matches("[mcp_servers.kiki]").count(), 1, "{text}");
        assert!(text.contains("# kiki, the collaboration tools.\n[mcp_servers.kiki]\n"), "{text}");
        assert!(!text.contains("/old/kiki") && !text.contains("enabled") && !text.contains("X = "), "{text}");
        assert!(text.find("[mcp_servers.kiki]") < text.find("[mcp_servers.docs]"), "kept its place: {text}");
        assert!(text.ends_with("[mcp_servers.docs]\ncommand = \"docs-mcp\"\n"), "{text}");
        assert!(text.starts_with("model = \"o3\"\n"), "{text}");
    }

    #[test]
    fn toml_servers_as_an_inline_table_or_dotted_keys() {
        let inline = "mcp_servers = { docs = { command = \"docs-mcp\" } }\n";
        let text = merge_toml(Some(inline), &entry_for(AgentCli::Codex)).expect("inline");
        let doc: toml_edit::DocumentMut = text.parse().expect("toml");
        assert_eq!(doc["mcp_servers"]["docs"]["command"].as_str(), Some("docs-mcp"));
        assert_eq!(doc["mcp_servers"]["kiki"]["command"].as_str(), Some(KIKI));

        let dotted = "mcp_servers.docs.command = \"docs-mcp\"\nmcp_servers.kiki.command = \"/old\"\n";
        let text = merge_toml(Some(dotted), &entry_for(AgentCli::Codex)).expect("dotted");
        let doc: toml_edit::DocumentMut = text.parse().expect("toml");
        assert_eq!(doc["mcp_servers"]["docs"]["command"].as_str(), Some("docs-mcp"));
        assert_eq!(doc["mcp_servers"]["kiki"]["command"].as_str(), Some(KIKI));
        assert_eq!(doc["mcp_servers"]["kiki"]["tool_timeout_sec"].as_integer(), Some(90));
        assert!(!text.contains("/old"), "{text}");
    }

    #[test]
    fn toml_without_a_final_newline() {
        let text = merge_toml(Some("model = \"o3\""), &entry_for(AgentCli::Codex)).expect("merge");
        assert!(text.starts_with("model = \"o3\"\n"), "{text}");
        assert!(text.contains("\n[mcp_servers.kiki]\n"), "{text}");
    }

    #[test]
    fn toml_that_cannot_hold_servers_is_refused() {
        for (text, problem) in [
            ("model = \n", "not valid TOML: "),
            ("a = 1\nb = [\n", "not valid TOML: unclosed array, expected `]` at line 2, column 6"),
            ("[mcp_servers.kiki\n", "not valid TOML"),
            ("a = 1\na = 2\n", "not valid TOML"),
            ("mcp_servers = \"none\"\n", "`mcp_servers` is not a table"),
        ] {
            let error = merge_toml(Some(text), &entry_for(AgentCli::Codex)).expect_err(text).to_string();
            assert!(error.contains(problem), "{text}: {error}");
            assert!(!error.contains('\n'), "one line: {error}");
        }
    }

    #[test]
    fn config_paths() {
        let cwd = Path::new("/src/app");
        let home = Some(std::ffi::OsStr::new("/home/u"));
        let path = |agent, scope, codex_home: Option<&str>| {
            config_path(agent, scope, home, codex_home.map(std::ffi::OsStr::new), cwd).expect("path")
        };
        assert_eq!(path(AgentCli::Claude, Scope::User, None), Path::new("/home/u/.claude.json"));
        assert_eq!(path(AgentCli::Claude, Scope::Project, None), Path::new("/src/app/.mcp.json"));
        assert_eq!(path(AgentCli::Codex, Scope::User, None), Path::new("/home/u/.codex/config.toml"));
        assert_eq!(path(AgentCli::Codex, Scope::User, Some("")), Path::new("/home/u/.codex/config.toml"));
        assert_eq!(path(AgentCli::Codex, Scope::User, Some("/etc/cx")), Path::new("/etc/cx/config.toml"));
        assert_eq!(path(AgentCli::Codex, Scope::User, Some("cx")), Path::new("/src/app/cx/config.toml"));
        assert_eq!(
            path(AgentCli::Codex, Scope::Project, Some("/etc/cx")),
            Path::new("/src/app/.codex/config.toml")
        );
        assert_eq!(path(AgentCli::Gemini, Scope::User, None), Path::new("/home/u/.gemini/settings.json"));
        assert_eq!(path(AgentCli::Gemini, Scope::Project, None), Path::new("/src/app/.gemini/settings.json"));
        assert_eq!(path(AgentCli::Kimi, Scope::User, None), Path::new("/home/u/.kimi/mcp.json"));
        assert_eq!(path(AgentCli::Kimi, Scope::Project, None), Path::new("/src/app/.kimi/mcp.json"));
        let error = config_path(AgentCli::Kimi, Scope::User, None, None, cwd).expect_err("no HOME");
        assert!(error.to_string().contains("HOME is not set"), "{error}");
        assert!(config_path(AgentCli::Kimi, Scope::Project, None, None, cwd).is_ok());
    }

    #[test]
    fn install_writes_atomically_keeping_the_mode_and_refuses_a_bad_file() {
        let dir = std::env::temp_dir().join(format!("kiki-install-unit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mode = |path: &Path| std::fs::metadata(path).expect("metadata").permissions().mode() & 0o777;

        // A new file, its directories created.
        let fresh = dir.join("a").join("b").join("mcp.json");
        install(AgentCli::Kimi, &fresh, &entry_for(AgentCli::Kimi)).expect("install");
        assert_eq!(mode(&fresh), 0o600);
        assert_eq!(mode(&dir.join("a")), 0o700);

        // An existing file keeps its mode; a link stays a link.
        let target = dir.join("real.json");
        std::fs::write(&target, "{\"theme\": \"dark\"}\n").expect("write");
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let link = dir.join("settings.json");
        std::os::unix::fs::symlink(&target, &link).expect("symlink");
        install(AgentCli::Gemini, &link, &entry_for(AgentCli::Gemini)).expect("install");
        assert!(std::fs::symlink_metadata(&link).expect("link").file_type().is_symlink());
        assert_eq!(mode(&target), 0o644);
        let merged = parse(&std::fs::read_to_string(&target).expect("read"));
        assert_eq!(merged["theme"], "dark");
        assert_eq!(merged["mcpServers"]["kiki"]["timeout"], 90000);

        // A bad file: refused, named, untouched; no temporary file left behind.
        let bad = dir.join("config.toml");
        std::fs::write(&bad, "model = [\n").expect("write");
        let error = install(AgentCli::Codex, &bad, &entry_for(AgentCli::Codex)).expect_err("bad");
        let message = format!("{error:#}");
        assert!(
            message.contains(&bad.display().to_string()) && message.contains("not valid TOML"),
            "{message}"
        );
        assert_eq!(std::fs::read_to_string(&bad).expect("read"), "model = [\n");
        let names: Vec<_> =
            std::fs::read_dir(&dir).expect("dir").map(|e| e.expect("entry").file_name()).collect();
        assert_eq!(names.len(), 4, "{names:?}");

        std::fs::remove_dir_all(&dir).expect("clean up");
    }

    #[test]
    fn a_profile_is_added_next_to_what_is_there_and_never_replaced() {
        let existing = "# my home\n[mailbox]\ndelivery_wait = \"5s\"\n\n[profiles.mine]\nexecutor = \"exec\"\ncommand = [\"x\"]\n";
        let merged = merge_profile(Some(existing), "gem", AgentCli::Gemini).expect("merged");
        assert!(merged.starts_with(existing), "{merged}");
        assert!(
            merged.ends_with("[profiles.gem]\nexecutor = \"acp\"\ncommand = [\"gemini\", \"--acp\"]\n"),
            "{merged}"
        );
        // The same again changes nothing; other settings under that name are refused.
        assert_eq!(merge_profile(Some(&merged), "gem", AgentCli::Gemini).expect("same"), merged);
        let taken = merge_profile(Some(&merged), "mine", AgentCli::Codex).expect_err("taken");
        assert!(taken.to_string().contains("\"mine\" is there already"), "{taken}");
        assert_eq!(profile_text("c", AgentCli::Codex).expect("text"), "[profiles.c]\nexecutor = \"codex\"\n");
        assert!(check_profile_name("Bad Name").is_err() && check_profile_name("ok-1").is_ok());
    }
}
