//! The agent CLIs `kiki mcp install` sets up: their names, where each keeps its MCP
//! servers, the `kiki` entry in the shape each takes (`kiki_proto::agents`, which kikid's
//! executors use too), and the kiki profile that runs each as threads.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use kiki_proto::agents::{self, Env};
use serde_json::Value;

use super::{Scope, word};

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
    /// The kiki profile that runs this agent as threads: its executor, and its command
    /// when the executor has no default.
    pub fn profile(self) -> (&'static str, Option<[&'static str; 2]>) {
        match self {
            AgentCli::Claude => ("claude", None),
            AgentCli::Codex => ("codex", None),
            AgentCli::Gemini => ("acp", Some(["gemini", "--acp"])),
            AgentCli::Kimi => ("acp", Some(["kimi", "acp"])),
        }
    }

    /// The shape of its configuration (`kiki_proto::agents`).
    pub fn shape(self) -> agents::Agent {
        match self {
            AgentCli::Claude => agents::Agent::Claude,
            AgentCli::Codex => agents::Agent::Codex,
            AgentCli::Gemini => agents::Agent::Gemini,
            AgentCli::Kimi => agents::Agent::Kimi,
        }
    }

    /// Where in its file the entry goes, as people read it.
    pub fn entry_key(self) -> String {
        let key = format!("{}.{}", agents::servers(self.shape()), agents::SERVER);
        if self == AgentCli::Codex { format!("[{key}]") } else { key }
    }
}

/// The `kiki` entry for `agent`, starting `command mcp --default-home HOME` with the
/// identity forwarded: a turn's `KIKI_HOME` wins, and outside a turn `kiki mcp` reaches
/// `home`, the home it was installed for.
pub fn entry(agent: AgentCli, command: &str, home: &str) -> Value {
    let mut args = agents::MCP_ARGS.to_vec();
    args.extend(["--default-home", home]);
    agents::entry(agent.shape(), command, &args, Env::Forwarded)
}

/// The file `agent` reads its MCP servers from: under `home_var` ($HOME) for the user
/// scope (codex: `codex_home`, $CODEX_HOME, when set), under `cwd` for the project scope.
pub fn config_path(
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
        bail!("HOME is not set, so {}'s user config cannot be found (try --scope project)", word(&agent));
    };
    let user = cwd.join(user);
    Ok(match agent {
        AgentCli::Claude => user.join(".claude.json"),
        AgentCli::Codex => user.join(".codex").join("config.toml"),
        AgentCli::Gemini => user.join(".gemini").join("settings.json"),
        AgentCli::Kimi => user.join(".kimi").join("mcp.json"),
    })
}

#[cfg(test)]
mod tests {
    use super::super::testing::KIKI;
    use super::*;

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
}
