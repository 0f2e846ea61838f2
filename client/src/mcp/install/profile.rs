//! A kiki profile that runs the agent as threads, added to the home's `config.toml` next
//! to what is there (`kiki mcp install AGENT --profile NAME`); one already there with other
//! settings is never replaced.

use std::path::Path;

use anyhow::{Result, bail};

use super::agent::AgentCli;
use super::merge::toml_problem;
use super::write::write_merged;
use super::{UsageError, malformed};

/// kikid's rule for profile names (`profiles.NAME`).
pub fn check_profile_name(name: &str) -> Result<()> {
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
pub fn profile_text(name: &str, agent: AgentCli) -> Result<String> {
    merge_profile(None, name, agent)
}

/// The home's config with `[profiles.NAME]` added. A profile of that name already there is
/// kept if it is the same, else refused: the owner's settings are never replaced.
pub fn merge_profile(existing: Option<&str>, name: &str, agent: AgentCli) -> Result<String> {
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
pub fn add_profile(path: &Path, name: &str, agent: AgentCli) -> Result<()> {
    write_merged(path, "the profile", |existing| merge_profile(existing, name, agent))
}

#[cfg(test)]
mod tests {
    use super::*;

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
