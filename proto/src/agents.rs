//! What kiki and the agent CLIs must agree on so that an agent has kiki's MCP server: the
//! server's name, how `kiki` is started as one, the variables it takes its identity from,
//! and how each agent CLI takes an MCP server — where its servers are, their keys, how it
//! forwards environment variables, its timeouts.
//!
//! Two sides write these entries: kikid's executors hand a turn's agent one with the turn's
//! values (Claude Code's `--mcp-config`, Codex's config overrides, ACP's `mcpServers`), and
//! `kiki mcp install` writes one into the agent's own configuration file, forwarding the
//! variables from the agent's environment. Both crates depend on this one, so each shape is
//! written once, here.

use serde_json::{Map, Value, json};

/// The MCP server's name in every agent's configuration: Claude Code sees its tools as
/// `mcp__kiki__ThreadSend`.
pub const SERVER: &str = "kiki";

/// `kiki`'s arguments that serve MCP on stdio.
pub const MCP_ARGS: [&str; 1] = ["mcp"];

/// The variables `kiki mcp` takes its identity from; kikid sets them for a turn's agent.
/// Some agents start MCP servers with a filtered environment, so every entry passes them on
/// explicitly.
pub const IDENTITY: [&str; 3] = ["KIKI_HOME", "KIKI_THREAD_ID", "KIKI_TOKEN"];

/// How long an agent waits for `kiki mcp` to start (Codex, seconds).
pub const STARTUP_TIMEOUT_SECS: u64 = 10;

/// How long an agent waits for one tool call: above ThreadWait's longest answer (60 s).
pub const TOOL_TIMEOUT_SECS: u64 = 90;

/// An agent CLI whose MCP configuration kiki writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Agent {
    Claude,
    Codex,
    Gemini,
    Kimi,
}

/// The environment an entry starts `kiki mcp` with.
#[derive(Clone, Copy, Debug)]
pub enum Env<'a> {
    /// These values: a turn's, as kikid starts its agent.
    Given(&'a [(String, String)]),
    /// [`IDENTITY`], passed on from the agent's own environment in the form that agent
    /// expands: an entry of its configuration file.
    Forwarded,
}

/// The key of `agent`'s MCP servers in its configuration (a JSON object, a TOML table).
pub fn servers(agent: Agent) -> &'static str {
    match agent {
        Agent::Codex => "mcp_servers",
        Agent::Claude | Agent::Gemini | Agent::Kimi => "mcpServers",
    }
}

/// The [`SERVER`] entry of `agent`'s MCP servers, starting `command args` with `env`, its
/// members in the order the agent documents them. A Codex file entry forwards the identity
/// by name (`env_vars`) and names its timeouts; Gemini CLI's names its tool timeout (ms).
pub fn entry(agent: Agent, command: &str, args: &[&str], env: Env<'_>) -> Value {
    let mut entry = Map::new();
    if agent == Agent::Claude {
        entry.insert("type".into(), json!("stdio"));
    }
    entry.insert("command".into(), json!(command));
    entry.insert("args".into(), json!(args));
    match (agent, env) {
        (Agent::Codex, Env::Forwarded) => {
            entry.insert("env_vars".into(), json!(IDENTITY));
            entry.insert("startup_timeout_sec".into(), json!(STARTUP_TIMEOUT_SECS));
            entry.insert("tool_timeout_sec".into(), json!(TOOL_TIMEOUT_SECS));
        }
        (_, Env::Given(values)) => {
            let values = values.iter().map(|(name, value)| (name.clone(), json!(value)));
            entry.insert("env".into(), Value::Object(values.collect()));
        }
        (_, Env::Forwarded) => {
            let forms = IDENTITY.iter().map(|name| (name.to_string(), json!(forwarded(agent, name))));
            entry.insert("env".into(), Value::Object(forms.collect()));
        }
    }
    if agent == Agent::Gemini {
        entry.insert("timeout".into(), json!(TOOL_TIMEOUT_SECS * 1000));
    }
    Value::Object(entry)
}

/// How `agent` reads the variable `name` of its own environment in an MCP server's `env`;
/// Claude Code alone takes a default (`${VAR:-}`: empty when unset).
fn forwarded(agent: Agent, name: &str) -> String {
    match agent {
        Agent::Claude => format!("${{{name}:-}}"),
        Agent::Gemini => format!("${name}"),
        Agent::Codex | Agent::Kimi => format!("${{{name}}}"),
    }
}

/// kiki's MCP server as an ACP agent takes it in `session/new` and `session/load`
/// (`mcpServers`: Gemini CLI `--acp`, Kimi Code `acp`): a list item with its name, and its
/// environment as name/value pairs.
pub fn acp_server(command: &str, args: &[&str], env: &[(String, String)]) -> Value {
    let env: Vec<Value> = env.iter().map(|(name, value)| json!({"name": name, "value": value})).collect();
    json!({"name": SERVER, "command": command, "args": args, "env": env})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turns_entry_carries_its_values_and_a_file_entry_forwards_them() {
        let given = [("KIKI_TOKEN".to_string(), "t".to_string())];
        assert_eq!(
            entry(Agent::Claude, "/k", &MCP_ARGS, Env::Given(&given)),
            json!({"type": "stdio", "command": "/k", "args": ["mcp"], "env": {"KIKI_TOKEN": "t"}})
        );
        assert_eq!(
            entry(Agent::Codex, "/k", &MCP_ARGS, Env::Given(&given)),
            json!({"command": "/k", "args": ["mcp"], "env": {"KIKI_TOKEN": "t"}})
        );
        let codex = entry(Agent::Codex, "/k", &MCP_ARGS, Env::Forwarded);
        assert_eq!(codex["env_vars"], json!(IDENTITY));
        assert_eq!(
            (codex["startup_timeout_sec"].clone(), codex["tool_timeout_sec"].clone()),
            (json!(10), json!(90))
        );
        assert_eq!(entry(Agent::Claude, "/k", &[], Env::Forwarded)["env"]["KIKI_HOME"], "${KIKI_HOME:-}");
        assert_eq!(entry(Agent::Gemini, "/k", &[], Env::Forwarded)["env"]["KIKI_HOME"], "$KIKI_HOME");
        assert_eq!(entry(Agent::Kimi, "/k", &[], Env::Forwarded)["env"]["KIKI_HOME"], "${KIKI_HOME}");
        assert_eq!(
            acp_server("/k", &MCP_ARGS, &given),
            json!({"name": "kiki", "command": "/k", "args": ["mcp"], "env": [{"name": "KIKI_TOKEN", "value": "t"}]})
        );
    }
}
