//! The spaces this home knows, in `HOME/spaces.toml` (owner-only): for each, the SSH target
//! it was added from, the remote home, the remote `kiki` used, and the remote home's id and
//! bridge address as read over SSH when it was added.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

/// One remote space.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Space {
    /// `ssh://[user@]host[:port]`, as given.
    pub target: String,
    /// The remote home directory (`--remote-home`, default `~/.kiki` there).
    pub remote_home: String,
    /// The remote `kiki` used for the remote home (uploaded next to it, or found there).
    pub kiki: String,
    /// The remote home's id, read over SSH: its bridges are pinned to it.
    pub home_id: String,
    /// The remote home's bridge address, as this home dials it.
    pub bridge: String,
    /// With `--via-ssh`: the ports of the bridges carried over SSH (`carry.rs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub carried: Option<Carried>,
}

/// The loopback ports of a space's bridges carried over SSH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Carried {
    /// Here: the carrier's port, this home's bridge address for the space.
    pub local_port: u16,
    /// There: the relay's port, the space's home's bridge address for this home.
    pub remote_port: u16,
    /// There: the space's home's bridge port, which the relay dials.
    pub remote_bridge_port: u16,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct File {
    #[serde(default)]
    spaces: BTreeMap<String, Space>,
}

/// The spaces of the home at `home`.
pub struct Registry {
    path: PathBuf,
    file: File,
}

impl Registry {
    pub fn open(home: &Path) -> Result<Self> {
        let path = home.join("spaces.toml");
        let file = match std::fs::read_to_string(&path) {
            Ok(text) => toml::from_str(&text).with_context(|| format!("reading {}", path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => File::default(),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        Ok(Self { path, file })
    }

    pub fn get(&self, name: &str) -> Option<&Space> {
        self.file.spaces.get(name)
    }

    pub fn all(&self) -> impl Iterator<Item = (&String, &Space)> {
        self.file.spaces.iter()
    }

    pub fn put(&mut self, name: &str, space: Space) -> Result<()> {
        self.file.spaces.insert(name.to_string(), space);
        self.save()
    }

    pub fn remove(&mut self, name: &str) -> Result<Option<Space>> {
        let removed = self.file.spaces.remove(name);
        self.save()?;
        Ok(removed)
    }

    /// Written whole to a new owner-only file, then renamed over the old one.
    fn save(&self) -> Result<()> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let text = toml::to_string(&self.file).context("encoding the spaces")?;
        let tmp = self.path.with_extension("toml.tmp");
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .with_context(|| format!("writing {}", tmp.display()))?;
        out.write_all(text.as_bytes())?;
        out.sync_all()?;
        std::fs::rename(&tmp, &self.path).with_context(|| format!("writing {}", self.path.display()))?;
        Ok(())
    }
}

/// Why `name` cannot name a space, if it cannot: it names a bridge too (`NAME/SESSION`), so
/// it is one word of letters, digits, `-` and `_`.
pub fn name_problem(name: &str) -> Option<&'static str> {
    let fine = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    if name.is_empty() || name.len() > 64 || !name.chars().all(fine) || name == "local" {
        Some("1-64 of letters, digits, '-' and '_', not \"local\"")
    } else {
        None
    }
}
