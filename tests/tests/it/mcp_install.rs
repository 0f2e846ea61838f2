//! `kiki mcp install`: the real `kiki` binary writing each agent CLI's configuration, with
//! HOME and the current directory in a temporary directory.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use kiki_tests::binaries::{binary, mode};
use serde_json::{Value, json};

const AGENTS: [&str; 4] = ["claude", "codex", "gemini", "kimi"];

/// A user's HOME, a project directory (the current one) and a kiki home, all temporary.
struct Setup {
    _dir: tempfile::TempDir,
    user: PathBuf,
    project: PathBuf,
    kiki_home: PathBuf,
}

impl Setup {
    fn new() -> Setup {
        let dir = tempfile::Builder::new().prefix("kiki-mcp-install-").tempdir().expect("temp dir");
        // Resolved, as the paths kiki prints are (the current directory is).
        let root = dir.path().canonicalize().expect("canonical temp dir");
        let (user, project, kiki_home) = (root.join("user"), root.join("project"), root.join("kiki-home"));
        for dir in [&user, &project] {
            std::fs::create_dir(dir).expect("mkdir");
        }
        Setup { _dir: dir, user, project, kiki_home }
    }

    /// `kiki --home KIKI_HOME ARGS…` in the project directory, HOME the user directory,
    /// none of the variables a kiki turn or codex would set.
    fn kiki(&self, args: &[&str], env: &[(&str, &Path)]) -> Output {
        Command::new(binary("kiki"))
            .arg("--home")
            .arg(&self.kiki_home)
            .args(args)
            .current_dir(&self.project)
            .env("HOME", &self.user)
            .env_remove("CODEX_HOME")
            .env_remove("KIKI_HOME")
            .env_remove("KIKI_THREAD_ID")
            .env_remove("KIKI_TOKEN")
            .envs(env.iter().map(|(k, v)| (*k, *v)))
            .output()
            .expect("run kiki")
    }

    fn kiki_ok(&self, args: &[&str], env: &[(&str, &Path)]) -> String {
        let out = self.kiki(args, env);
        assert!(
            out.status.success(),
            "kiki {args:?} failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8(out.stdout).expect("utf-8 output")
    }

    fn user_path(&self, agent: &str) -> PathBuf {
        self.user.join(relative_path(agent))
    }

    fn project_path(&self, agent: &str) -> PathBuf {
        match agent {
            "claude" => self.project.join(".mcp.json"),
            _ => self.project.join(relative_path(agent)),
        }
    }

    fn kiki_home(&self) -> &str {
        self.kiki_home.to_str().expect("utf-8 temp dir")
    }

    /// A file kiki created: the kiki entry alone.
    fn assert_fresh(&self, agent: &str, path: &Path) {
        let text = read(path);
        if agent == "codex" {
            assert_eq!(text, expected_codex_table(self.kiki_home()));
        } else {
            let merged: Value = serde_json::from_str(&text).expect("json");
            assert_eq!(merged, json!({"mcpServers": {"kiki": expected_json_entry(agent, self.kiki_home())}}));
        }
    }
}

/// An agent's user config under HOME (codex: without CODEX_HOME).
fn relative_path(agent: &str) -> &'static str {
    match agent {
        "claude" => ".claude.json",
        "codex" => ".codex/config.toml",
        "gemini" => ".gemini/settings.json",
        "kimi" => ".kimi/mcp.json",
        _ => panic!("no agent {agent}"),
    }
}

/// The `kiki` binary the entries start: by absolute path, links resolved.
fn command() -> String {
    binary("kiki").canonicalize().expect("canonical kiki").to_str().expect("utf-8 path").to_string()
}

/// The JSON entry `agent` (not codex) should have, naming `home` as the home outside a turn.
fn expected_json_entry(agent: &str, home: &str) -> Value {
    match agent {
        "claude" => json!({
            "type": "stdio",
            "command": command(),
            "args": ["mcp", "--default-home", home],
            "env": {
                "KIKI_HOME": "${KIKI_HOME:-}",
                "KIKI_THREAD_ID": "${KIKI_THREAD_ID:-}",
                "KIKI_TOKEN": "${KIKI_TOKEN:-}",
            },
        }),
        "gemini" => json!({
            "command": command(),
            "args": ["mcp", "--default-home", home],
            "env": {"KIKI_HOME": "$KIKI_HOME", "KIKI_THREAD_ID": "$KIKI_THREAD_ID", "KIKI_TOKEN": "$KIKI_TOKEN"},
            "timeout": 90000,
        }),
        "kimi" => json!({
            "command": command(),
            "args": ["mcp", "--default-home", home],
            "env": {"KIKI_HOME": "${KIKI_HOME}", "KIKI_THREAD_ID": "${KIKI_THREAD_ID}", "KIKI_TOKEN": "${KIKI_TOKEN}"},
        }),
        _ => panic!("no JSON agent {agent}"),
    }
}

/// The `[mcp_servers.kiki]` table codex should have, as kiki writes it, naming `home`.
fn expected_codex_table(home: &str) -> String {
    format!(
        "[mcp_servers.kiki]\ncommand = \"{}\"\nargs = [\"mcp\", \"--default-home\", \"{home}\"]\n\
         env_vars = [\"KIKI_HOME\", \"KIKI_THREAD_ID\", \"KIKI_TOKEN\"]\n\
         startup_timeout_sec = 10\ntool_timeout_sec = 90\n",
        command()
    )
}

/// The entry as `--json` reports it.
fn expected_config(agent: &str, home: &str) -> Value {
    match agent {
        "codex" => json!({
            "command": command(),
            "args": ["mcp", "--default-home", home],
            "env_vars": ["KIKI_HOME", "KIKI_THREAD_ID", "KIKI_TOKEN"],
            "startup_timeout_sec": 10,
            "tool_timeout_sec": 90,
        }),
        _ => expected_json_entry(agent, home),
    }
}

/// A config already there: another server and unrelated settings (codex: comments too).
fn existing_config(agent: &str) -> String {
    match agent {
        "codex" => "\
# My codex settings: keep this comment.
model = \"o3\" # the best one
approval_policy = \"never\"

[mcp_servers.docs]
# The docs server.
command = \"docs-mcp\"
args = [\"--port\", \"7\"]

[profiles.fast]
model = \"o4-mini\"
"
        .to_string(),
        // Written out: `json!` would sort the members.
        _ => r#"{
  "zeta": "first, and stays first",
  "mcpServers": {
    "docs": {"command": "docs-mcp", "args": ["--port", "7"], "env": {"A": "1"}}
  },
  "alpha": {"nested": [1, 2, {"deep": true}]}
}
"#
        .to_string(),
    }
}

fn write_with_mode(path: &Path, text: &str, mode: u32) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, text).expect("write config");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every line of `before` is in `after`, in the same order.
fn assert_lines_kept(before: &str, after: &str) {
    let mut rest = after.lines();
    for line in before.lines() {
        assert!(rest.any(|l| l == line), "line {line:?} lost or moved in:\n{after}");
    }
}

/// The merged file: the other content kept, the kiki entry right.
fn assert_merged(setup: &Setup, agent: &str, before: &str, after: &str) {
    if agent == "codex" {
        assert_lines_kept(before, after);
        assert!(after.contains(&expected_codex_table(setup.kiki_home())), "no kiki table in:\n{after}");
        assert_eq!(after.matches("[mcp_servers.kiki]").count(), 1, "{after}");
        assert_eq!(after.matches("command = ").count(), 2, "{after}");
        return;
    }
    let merged: Value = serde_json::from_str(after).expect("merged JSON");
    let mut expected: Value = serde_json::from_str(before).expect("existing JSON");
    expected["mcpServers"]["kiki"] = expected_json_entry(agent, setup.kiki_home());
    assert_eq!(merged, expected, "{after}");
    // The members keep their order.
    let at = |needle: &str| after.find(needle).unwrap_or_else(|| panic!("{needle} in {after}"));
    assert!(at("\"zeta\"") < at("\"mcpServers\"") && at("\"mcpServers\"") < at("\"alpha\""), "{after}");
    assert!(at("\"docs\"") < at("\"kiki\""), "{after}");
}

#[test]
fn user_configs_are_merged_keeping_everything_else_and_the_mode() {
    let setup = Setup::new();
    for agent in AGENTS {
        let path = setup.user_path(agent);
        let before = existing_config(agent);
        write_with_mode(&path, &before, 0o640);

        let out = setup.kiki_ok(&["mcp", "install", agent], &[]);
        assert!(out.contains(&path.display().to_string()), "{agent}: {out}");
        assert_eq!(out.lines().count(), 1, "{agent}: {out}");

        let after = read(&path);
        assert_merged(&setup, agent, &before, &after);
        assert_eq!(mode(&path), 0o640, "{agent} keeps the file's mode");

        // Again: the same file, one kiki entry.
        setup.kiki_ok(&["mcp", "install", agent, "--scope", "user"], &[]);
        assert_eq!(read(&path), after, "{agent}: a second install changes nothing");
        let entries = match agent {
            "codex" => after.matches("[mcp_servers.kiki]").count(),
            _ => after.matches("\"kiki\":").count(),
        };
        assert_eq!(entries, 1, "{agent}: {after}");
    }
    // Nothing else was written: no temporary files, no project files.
    let leftovers: Vec<_> =
        walk(&setup.user).into_iter().filter(|p| p.to_string_lossy().contains(".tmp")).collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    assert!(walk(&setup.project).is_empty());
}

#[test]
fn an_existing_kiki_entry_is_replaced() {
    let setup = Setup::new();
    let path = setup.user_path("claude");
    write_with_mode(
        &path,
        r#"{"mcpServers": {"kiki": {"command": "/old/kiki", "args": ["--old"]}, "docs": {"command": "d"}}}"#,
        0o600,
    );
    setup.kiki_ok(&["mcp", "install", "claude"], &[]);
    let merged: Value = serde_json::from_str(&read(&path)).expect("json");
    assert_eq!(merged["mcpServers"]["kiki"], expected_json_entry("claude", setup.kiki_home()));
    assert_eq!(merged["mcpServers"]["docs"], json!({"command": "d"}));

    let path = setup.user_path("codex");
    write_with_mode(&path, "# mine\n[mcp_servers.kiki]\ncommand = \"/old/kiki\"\nenabled = false\n", 0o600);
    setup.kiki_ok(&["mcp", "install", "codex"], &[]);
    assert_eq!(read(&path), format!("# mine\n{}", expected_codex_table(setup.kiki_home())));
}

#[test]
fn new_files_and_their_directories_are_created_owner_only() {
    let setup = Setup::new();
    for agent in AGENTS {
        setup.kiki_ok(&["mcp", "install", agent], &[]);
        let path = setup.user_path(agent);
        assert_eq!(mode(&path), 0o600, "{agent}");
        setup.assert_fresh(agent, &path);
    }
    assert_eq!(mode(&setup.user.join(".codex")), 0o700);
}

#[test]
fn codex_home_is_where_codex_reads_its_user_config() {
    let setup = Setup::new();
    let codex_home = setup.user.join("elsewhere");
    setup.kiki_ok(&["mcp", "install", "codex"], &[("CODEX_HOME", &codex_home)]);
    setup.assert_fresh("codex", &codex_home.join("config.toml"));
    assert!(!setup.user_path("codex").exists());
}

#[test]
fn project_scope_writes_the_files_in_the_current_directory() {
    let setup = Setup::new();
    for agent in AGENTS {
        let out = setup.kiki_ok(&["mcp", "install", agent, "--scope", "project"], &[]);
        let path = setup.project_path(agent);
        assert!(out.contains(&path.display().to_string()), "{agent}: {out}");
        setup.assert_fresh(agent, &path);
        assert_eq!(mode(&path), 0o600, "{agent}");
    }
    assert!(walk(&setup.user).is_empty(), "nothing under HOME: {:?}", walk(&setup.user));
    // A project file already there is merged like a user one.
    let path = setup.project_path("gemini");
    let before = existing_config("gemini");
    write_with_mode(&path, &before, 0o644);
    setup.kiki_ok(&["mcp", "install", "gemini", "--scope", "project"], &[]);
    assert_merged(&setup, "gemini", &before, &read(&path));
    assert_eq!(mode(&path), 0o644);
}

#[test]
fn print_writes_nothing_and_prints_the_entry() {
    let setup = Setup::new();
    for agent in AGENTS {
        for scope in ["user", "project"] {
            let out = setup.kiki_ok(&["mcp", "install", agent, "--scope", scope, "--print"], &[]);
            if agent == "codex" {
                assert_eq!(out.trim_end(), expected_codex_table(setup.kiki_home()).trim_end(), "{agent}");
            } else {
                let printed: Value = serde_json::from_str(&out).expect("the snippet is JSON");
                assert_eq!(
                    printed,
                    json!({"mcpServers": {"kiki": expected_json_entry(agent, setup.kiki_home())}})
                );
            }
        }
    }
    // Even over an existing file: it stays as it was.
    let path = setup.user_path("kimi");
    write_with_mode(&path, "{\"mcpServers\": {}}", 0o600);
    setup.kiki_ok(&["mcp", "install", "kimi", "--print"], &[]);
    assert_eq!(read(&path), "{\"mcpServers\": {}}");
    std::fs::remove_file(&path).expect("remove");
    std::fs::remove_dir(path.parent().expect("parent")).expect("rmdir");
    assert!(walk(&setup.user).is_empty(), "{:?}", walk(&setup.user));
    assert!(walk(&setup.project).is_empty(), "{:?}", walk(&setup.project));
}

#[test]
fn json_reports_the_agent_scope_path_and_entry() {
    let setup = Setup::new();
    for agent in AGENTS {
        let out = setup.kiki_ok(&["--json", "mcp", "install", agent], &[]);
        let doc: Value = serde_json::from_str(&out).expect("one JSON document");
        assert_eq!(
            doc,
            json!({
                "agent": agent,
                "scope": "user",
                "path": setup.user_path(agent).to_str().expect("utf-8"),
                "written": true,
                "config": expected_config(agent, setup.kiki_home()),
            })
        );

        let out = setup.kiki_ok(&["--json", "mcp", "install", agent, "--scope", "project", "--print"], &[]);
        let doc: Value = serde_json::from_str(&out).expect("one JSON document");
        assert_eq!(
            doc,
            json!({
                "agent": agent,
                "scope": "project",
                "path": setup.project_path(agent).to_str().expect("utf-8"),
                "written": false,
                "config": expected_config(agent, setup.kiki_home()),
            })
        );
        assert!(!setup.project_path(agent).exists(), "{agent}: --print wrote nothing");
    }
}

/// A file its agent could not read is bad input (exit 2, `invalid_argument`), named with
/// what is wrong, and left as it was.
#[test]
fn a_file_that_cannot_be_parsed_is_refused_and_left_alone() {
    let setup = Setup::new();
    for (agent, broken, problem) in [
        ("claude", "{\"numStartups\": 3,\n  \"mcpServers\": {", "not valid JSON"),
        ("codex", "# mine\nmodel = \"o3\n[mcp_servers.docs]\n", "not valid TOML"),
        // Gemini CLI takes comments, not trailing commas.
        ("gemini", "{\n  // my settings\n  \"theme\": \"dark\",\n}\n", "not valid JSON"),
        ("kimi", "[\"not\", \"an object\"]", "not a JSON object"),
    ] {
        let path = setup.user_path(agent);
        write_with_mode(&path, broken, 0o640);
        let out = setup.kiki(&["mcp", "install", agent], &[]);
        assert_eq!(out.status.code(), Some(2), "{agent}: bad input: {out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(&path.display().to_string()), "{agent}: the error names no file: {stderr}");
        assert!(stderr.contains(problem), "{agent}: the error says not what is wrong: {stderr}");
        assert_eq!(std::fs::read(&path).expect("read"), broken.as_bytes(), "{agent}: the file changed");
        assert_eq!(mode(&path), 0o640);

        // With --json: an error document, the file still untouched.
        let out = setup.kiki(&["--json", "mcp", "install", agent], &[]);
        assert_eq!(out.status.code(), Some(2), "{agent}");
        let doc: Value = serde_json::from_slice(&out.stdout).expect("an error document");
        assert_eq!(doc["error"]["code"], "invalid_argument", "{agent}: {doc}");
        let message = doc["error"]["message"].as_str().expect("message");
        assert!(message.contains(&path.display().to_string()), "{agent}: {message}");
        assert!(!message.contains('\n'), "{agent}: one line: {message}");
        assert_eq!(std::fs::read(&path).expect("read"), broken.as_bytes());
    }
    let names: Vec<_> = walk(&setup.user).into_iter().filter(|p| p.is_file()).collect();
    assert_eq!(names.len(), 4, "no temporary file left: {names:?}");
}

/// Gemini CLI reads its settings with comments: kiki takes such a file and writes it back
/// with every comment in its place.
#[test]
fn gemini_settings_with_comments_are_merged_keeping_the_comments() {
    let setup = Setup::new();
    let path = setup.user_path("gemini");
    let before = "{\n  // Written by hand.\n  \"theme\": \"dark\", /* for the night */\n  \"mcpServers\": {\n    // Docs.\n    \"docs\": {\"command\": \"docs-mcp\"}\n  }\n}\n";
    write_with_mode(&path, before, 0o600);
    setup.kiki_ok(&["mcp", "install", "gemini"], &[]);
    let after = read(&path);
    for comment in ["// Written by hand.", "/* for the night */", "// Docs."] {
        assert!(after.contains(comment), "{comment} lost:\n{after}");
    }
    assert!(
        after.starts_with("{\n  // Written by hand.\n  \"theme\": \"dark\", /* for the night */\n"),
        "{after}"
    );
    // Read as Gemini CLI reads it: JSON once the comments are gone.
    let merged: Value =
        jsonc_parser::parse_to_serde_value(&after, &jsonc_parser::ParseOptions::default()).expect("JSONC");
    assert_eq!(merged["theme"], "dark");
    assert_eq!(merged["mcpServers"]["docs"], json!({"command": "docs-mcp"}));
    assert_eq!(merged["mcpServers"]["kiki"], expected_json_entry("gemini", setup.kiki_home()));
    setup.kiki_ok(&["mcp", "install", "gemini"], &[]);
    assert_eq!(read(&path), after, "a second install changes nothing");
}

#[test]
fn help_names_the_agents_and_flags() {
    let setup = Setup::new();
    let help = setup.kiki_ok(&["mcp", "install", "--help"], &[]);
    for word in AGENTS.iter().chain(&["--scope", "--print", "user", "project"]) {
        assert!(help.contains(word), "{word} in:\n{help}");
    }
}

/// Every file and directory under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut all = Vec::new();
    for entry in std::fs::read_dir(dir).expect("read dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            all.extend(walk(&path));
        }
        all.push(path);
    }
    all
}

/// `--profile NAME` also gives the home a profile that runs the agent as threads; kikid
/// takes the config as written, and a name already used otherwise is refused untouched.
#[test]
fn a_profile_for_the_agent_is_added_to_the_homes_config() {
    let setup = Setup::new();
    std::fs::create_dir_all(&setup.kiki_home).expect("kiki home");
    let config = setup.kiki_home.join("config.toml");
    std::fs::write(&config, "# mine\n[mailbox]\ndelivery_wait = \"5s\"\n").expect("config");
    for (agent, name) in [("claude", "cc"), ("codex", "cx"), ("gemini", "gem"), ("kimi", "km")] {
        let said = setup.kiki_ok(&["mcp", "install", agent, "--profile", name], &[]);
        assert!(said.contains(&format!("wrote [profiles.{name}] to {}", config.display())), "{said}");
    }
    let loaded = kiki_daemon::config::Config::load(&config, true).expect("kikid takes it");
    let executor = |name: &str| format!("{:?}", loaded.profile(name).expect("profile").executor);
    assert_eq!([executor("cc"), executor("cx"), executor("gem")], ["Claude", "Codex", "Acp"]);
    assert_eq!(loaded.profile("km").expect("km").command, ["kimi", "acp"]);
    assert_eq!(loaded.mailbox.delivery_wait, std::time::Duration::from_secs(5), "the rest is kept");
    let before = std::fs::read_to_string(&config).expect("read");
    assert!(before.starts_with("# mine\n"), "{before}");

    let refused = setup.kiki(&["mcp", "install", "codex", "--scope", "project", "--profile", "gem"], &[]);
    assert_eq!(refused.status.code(), Some(1), "{refused:?}");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("\"gem\" is there already") && said.contains("nothing was written"), "{said}");
    assert_eq!(std::fs::read_to_string(&config).expect("read"), before, "left untouched");
    assert!(!setup.project_path("codex").exists(), "nor the agent's config written");
    let bad = setup.kiki(&["mcp", "install", "codex", "--profile", "No Good"], &[]);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("a profile name is 1-64 characters"), "{bad:?}");
}

/// Outside a turn there is no KIKI_HOME: each agent's entry, run as written with the
/// environment that agent gives it when the variables are unset, reaches the home it was
/// installed for (`kiki --home X mcp install`), not ~/.kiki.
#[tokio::test]
async fn outside_a_turn_every_agents_entry_reaches_the_home_it_was_installed_for() {
    let home = kiki_tests::TestHome::builder().start().await;
    let thread = home.thread("echo", None).await.id;
    // HOME without a ~/.kiki: a server that fell back on it would find no kikid.
    let setup = Setup::new();
    for agent in AGENTS {
        let out = Command::new(binary("kiki"))
            .arg("--home")
            .arg(home.dir())
            .args(["--json", "mcp", "install", agent, "--print"])
            .env("HOME", &setup.user)
            .env_remove("KIKI_HOME")
            .output()
            .expect("run kiki");
        assert!(out.status.success(), "{agent}: {}", String::from_utf8_lossy(&out.stderr));
        let config = serde_json::from_slice::<Value>(&out.stdout).expect("JSON")["config"].clone();
        let command = std::path::PathBuf::from(config["command"].as_str().expect("command"));
        let args: Vec<&str> =
            config["args"].as_array().expect("args").iter().filter_map(Value::as_str).collect();
        assert_eq!(args.first(), Some(&"mcp"), "{agent}: {config}");
        // What each agent passes for an unset variable: Claude Code's `${NAME:-DEFAULT}` is
        // the default; Gemini's `$NAME` and Kimi's `${NAME}` may stay as written; codex
        // forwards nothing.
        let unset = |value: &str| match value.strip_prefix("${").and_then(|v| v.strip_suffix('}')) {
            Some(inner) if inner.contains(":-") => inner.split_once(":-").map(|(_, d)| d.to_string()),
            _ => None,
        };
        let mut env: Vec<(String, String)> = match config["env"].as_object() {
            Some(env) => env
                .iter()
                .map(|(name, value)| {
                    let value = value.as_str().unwrap_or_default();
                    (name.clone(), unset(value).unwrap_or_else(|| value.to_string()))
                })
                .collect(),
            None => vec![("KIKI_HOME".into(), String::new())],
        };
        env.push(("HOME".into(), setup.user.display().to_string()));
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let (session, _) = kiki_tests::mcp::start(&command, None, &args[1..], &env, false)
            .await
            .unwrap_or_else(|e| panic!("{agent}: the entry's server starts: {e}"));
        let result = kiki_tests::mcp::call(&session, "ThreadList", json!({})).await.expect("ThreadList");
        let listed = kiki_tests::mcp::text(&result);
        assert_ne!(result.is_error, Some(true), "{agent}: {listed}");
        assert!(listed.contains(&thread), "{agent}: not the installed home's threads: {listed}");
    }
}
