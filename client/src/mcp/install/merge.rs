//! An agent's configuration with the `kiki` entry merged in, edited in place: JSON through
//! jsonc-parser's syntax tree, TOML through toml_edit, so that comments, order and layout
//! outside the entry stay byte for byte. A text its agent could not read is refused.

use anyhow::{Result, bail};
use jsonc_parser::ParseOptions;
use jsonc_parser::cst::{CstInputValue, CstObject, CstObjectProp, CstRootNode};
use kiki_proto::agents::{self, SERVER};
use serde_json::{Value, json};

use super::agent::AgentCli;
use super::malformed;

/// `existing` (a file's text, or `None` for no file) with `entry` as its `kiki` server.
pub fn merge(agent: AgentCli, existing: Option<&str>, entry: &Value) -> Result<String> {
    let servers = agents::servers(agent.shape());
    match agent {
        AgentCli::Codex => merge_toml(existing, servers, entry),
        // Gemini CLI strips comments from its settings before parsing them.
        AgentCli::Gemini => merge_json(existing, servers, entry, true),
        AgentCli::Claude | AgentCli::Kimi => merge_json(existing, servers, entry, false),
    }
}

/// `existing` JSON (or none) with `servers.kiki` (`mcpServers`) set to `entry`, edited in place:
/// everything else — order, layout and, where the agent takes them (`comments`), comments —
/// stays as it was. A `kiki` entry already there is replaced where it is.
fn merge_json(existing: Option<&str>, servers: &str, entry: &Value, comments: bool) -> Result<String> {
    let Some(text) = existing.filter(|text| !text.trim().is_empty()) else {
        // A new file: the entry alone, indented by two spaces as the agents write theirs.
        let mut text = serde_json::to_string_pretty(&json!({servers: {SERVER: entry}}))?;
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
    let key = servers;
    let servers = match last_member(&top, key) {
        None => top.append(key, CstInputValue::Object(Vec::new())).object_value(),
        Some(servers) if servers.value().is_some_and(|v| v.as_null_keyword().is_some()) => {
            servers.set_value(CstInputValue::Object(Vec::new()));
            servers.object_value()
        }
        Some(servers) => servers.object_value(),
    };
    let servers = servers.ok_or_else(|| malformed(format!("its `{key}` is not a JSON object")))?;
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

/// `existing` TOML (or none) with `[servers.kiki]` (`mcp_servers`) set to `entry`, everything else
/// (comments and layout too) kept. A `kiki` table already there is replaced where it is,
/// with the comments above it.
fn merge_toml(existing: Option<&str>, servers: &str, entry: &Value) -> Result<String> {
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
    let key = servers;
    let servers = doc.entry(key).or_insert_with(|| {
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
        _ => return Err(malformed(format!("its `{key}` is not a table"))),
    }
    Ok(doc.to_string())
}

/// A TOML parse error in one line, where it is: toml_edit's own display quotes the line
/// over several.
pub fn toml_problem(text: &str, error: &toml_edit::TomlError) -> String {
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
    use super::super::UsageError;
    use super::super::testing::{KIKI, entry_for, parse};
    use super::*;

    fn merge_toml_codex(existing: Option<&str>, entry: &Value) -> Result<String> {
        merge_toml(existing, "mcp_servers", entry)
    }

    /// A strict agent's JSON merge (claude, kimi).
    fn merged(existing: Option<&str>, agent: AgentCli) -> Result<String> {
        merge(agent, existing, &entry_for(agent))
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
        let text = merge_toml_codex(None, &entry_for(AgentCli::Codex)).expect("merge");
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
        let text = merge_toml_codex(Some(CODEX), &entry_for(AgentCli::Codex)).expect("merge");
        let kiki = format!(
            "[mcp_servers.kiki]\ncommand = \"{KIKI}\"\nargs = [\"mcp\", \"--default-home\", \"/home/u/.kiki\"]\n\
             env_vars = [\"KIKI_HOME\", \"KIKI_THREAD_ID\", \"KIKI_TOKEN\"]\n\
             startup_timeout_sec = 10\ntool_timeout_sec = 90\n"
        );
        // Next to the other server, set apart by a blank line; everything else byte for byte.
        let (before, after) = CODEX.split_at(CODEX.find("[profiles.fast]").expect("profiles"));
        assert_eq!(text, format!("{before}{kiki}\n{after}"));
        // And again: replaced where it is, nothing added.
        assert_eq!(merge_toml_codex(Some(&text), &entry_for(AgentCli::Codex)).expect("again"), text);
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
        let text = merge_toml_codex(Some(existing), &entry_for(AgentCli::Codex)).expect("merge");
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
        let text = merge_toml_codex(Some(inline), &entry_for(AgentCli::Codex)).expect("inline");
        let doc: toml_edit::DocumentMut = text.parse().expect("toml");
        assert_eq!(doc["mcp_servers"]["docs"]["command"].as_str(), Some("docs-mcp"));
        assert_eq!(doc["mcp_servers"]["kiki"]["command"].as_str(), Some(KIKI));

        let dotted = "mcp_servers.docs.command = \"docs-mcp\"\nmcp_servers.kiki.command = \"/old\"\n";
        let text = merge_toml_codex(Some(dotted), &entry_for(AgentCli::Codex)).expect("dotted");
        let doc: toml_edit::DocumentMut = text.parse().expect("toml");
        assert_eq!(doc["mcp_servers"]["docs"]["command"].as_str(), Some("docs-mcp"));
        assert_eq!(doc["mcp_servers"]["kiki"]["command"].as_str(), Some(KIKI));
        assert_eq!(doc["mcp_servers"]["kiki"]["tool_timeout_sec"].as_integer(), Some(90));
        assert!(!text.contains("/old"), "{text}");
    }

    #[test]
    fn toml_without_a_final_newline() {
        let text = merge_toml_codex(Some("model = \"o3\""), &entry_for(AgentCli::Codex)).expect("merge");
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
            let error =
                merge_toml_codex(Some(text), &entry_for(AgentCli::Codex)).expect_err(text).to_string();
            assert!(error.contains(problem), "{text}: {error}");
            assert!(!error.contains('\n'), "one line: {error}");
        }
    }
}
