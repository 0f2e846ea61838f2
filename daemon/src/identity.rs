//! The home's identity: one private key, created on first start, whose public key's
//! fingerprint is the home id (like a Syncthing device id). Bridges will present a
//! self-signed certificate of this key and peers pin the fingerprint.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The home's key pair and the id derived from it.
pub struct Identity {
    key: rcgen::KeyPair,
    home_id: String,
    /// Made by this start (the key file did not exist).
    created: bool,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity").field("home_id", &self.home_id).finish_non_exhaustive()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("identity key {path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error("identity key {path} is not a valid key: {message}")]
    Invalid { path: String, message: String },
    #[error("identity key {path} is readable by others (mode {mode:o}); run `chmod 600 {path}`")]
    Exposed { path: String, mode: u32 },
    #[error(transparent)]
    Untrusted(#[from] kiki_proto::home::Untrusted),
    /// The home has data but lost its key: a new key would be another home to every peer.
    #[error(
        "identity key {path} is missing, but this home already has a store ({store}): its bridges' \
         peers know this home by that key, and a new one would silently break every bridge. \
         Restore identity.key from a backup (`kiki backup` keeps it), or give the home a new \
         identity with `kiki up --new-identity` (`kikid --new-identity`); every bridge must then \
         be requested and approved again"
    )]
    Missing { path: String, store: String },
    /// The store is another identity's: a replica (or a restored home) started with the
    /// wrong key would serve the store's threads and bridges as another home.
    #[error(
        "the store ({store}) belongs to home {recorded}, but identity key {path} is home {ours}: \
         every kikid serving one home needs the same identity.key. Copy it from a running replica \
         or a backup (`kiki backup` keeps it), or make this key the home's with `kikid \
         --new-identity`; every bridge must then be requested and approved again"
    )]
    OtherHome { path: String, store: String, recorded: String, ours: String },
}

/// Whether a missing key may be created: only for a new home, or when its owner asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Creation {
    Allowed,
    /// The home has a store (shown in the error): its key must be there.
    Refused,
}

impl Identity {
    /// Loads the key at `path` (it must be the running user's and private), or creates it
    /// (0600) if it does not exist and `creation` allows. `store` names the home's store for
    /// the error when it may not.
    pub fn load_or_create(path: &Path, creation: Creation, store: &str) -> Result<Self, IdentityError> {
        let shown = path.display().to_string();
        let io = |source| IdentityError::Io { path: shown.clone(), source };
        match std::fs::read_to_string(path) {
            Ok(pem) => {
                if let Some(mode) = kiki_proto::home::exposed(path, "identity key")? {
                    return Err(IdentityError::Exposed { path: shown, mode });
                }
                let key = rcgen::KeyPair::from_pem(&pem)
                    .map_err(|e| IdentityError::Invalid { path: shown.clone(), message: e.to_string() })?;
                Ok(Self::from_key(key, false))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && creation == Creation::Refused => {
                Err(IdentityError::Missing { path: shown, store: store.to_string() })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let key = rcgen::KeyPair::generate()
                    .map_err(|e| IdentityError::Invalid { path: shown.clone(), message: e.to_string() })?;
                // Written whole under another name, then renamed into place (and the rename
                // synced): a crash part-way leaves no key file, never an empty or partial one
                // that would lock the home out. The home's lock keeps a second kikid away.
                let partial = path.with_extension("key.partial");
                // One left by a crash is not reused: it may have another owner's mode.
                match std::fs::remove_file(&partial) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(e)),
                    _ => {}
                }
                let mut file = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&partial)
                    .map_err(io)?;
                file.write_all(key.serialize_pem().as_bytes()).map_err(io)?;
                file.sync_all().map_err(io)?;
                std::fs::rename(&partial, path).map_err(io)?;
                if let Some(dir) = path.parent() {
                    std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(io)?;
                }
                Ok(Self::from_key(key, true))
            }
            Err(e) => Err(io(e)),
        }
    }

    fn from_key(key: rcgen::KeyPair, created: bool) -> Self {
        let home_id = kiki_bridge::home_id_of(&rcgen::PublicKeyData::subject_public_key_info(&key));
        Self { key, home_id, created }
    }

    /// Whether this start made the key (its file did not exist).
    pub fn created(&self) -> bool {
        self.created
    }

    /// Base32 (RFC 4648, no padding) of the SHA-256 of the public key's
    /// SubjectPublicKeyInfo DER: 52 characters, stable for the key's lifetime.
    pub fn home_id(&self) -> &str {
        &self.home_id
    }

    /// The key pair, for the bridge's self-signed certificate.
    pub fn key(&self) -> &rcgen::KeyPair {
        &self.key
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn created_once_then_stable() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("identity.key");
        let first = Identity::load_or_create(&path, Creation::Allowed, "").expect("create");
        let again = Identity::load_or_create(&path, Creation::Allowed, "").expect("load");
        assert_eq!(first.home_id(), again.home_id());
        assert_eq!(first.home_id().len(), 52);
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let names: Vec<_> =
            std::fs::read_dir(dir.path()).expect("dir").map(|e| e.expect("entry").file_name()).collect();
        assert_eq!(names, ["identity.key"], "no partial file left");
    }

    /// A crash while the key was being written leaves a partial file beside it, never an
    /// empty key: the next start writes the key afresh.
    #[test]
    fn a_partial_key_from_a_crash_is_written_over() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("identity.key");
        std::fs::write(dir.path().join("identity.key.partial"), b"-----BEGIN PRIV").expect("partial");
        let created = Identity::load_or_create(&path, Creation::Allowed, "").expect("create");
        assert_eq!(
            Identity::load_or_create(&path, Creation::Allowed, "").expect("load").home_id(),
            created.home_id()
        );
    }

    #[test]
    fn refuses_a_world_readable_key() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("identity.key");
        Identity::load_or_create(&path, Creation::Allowed, "").expect("create");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let err = Identity::load_or_create(&path, Creation::Allowed, "").expect_err("exposed");
        assert!(err.to_string().contains("chmod 600"), "{err}");
    }

    #[test]
    fn a_missing_key_is_created_only_when_allowed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("identity.key");
        let err = Identity::load_or_create(&path, Creation::Refused, "/h/kiki.db").expect_err("refused");
        assert!(matches!(err, IdentityError::Missing { .. }), "{err}");
        assert!(err.to_string().contains("this home already has a store (/h/kiki.db)"), "{err}");
        assert!(err.to_string().contains("--new-identity"), "{err}");
        assert!(!path.exists(), "no key was made");
        let made = Identity::load_or_create(&path, Creation::Allowed, "").expect("create");
        let loaded = Identity::load_or_create(&path, Creation::Refused, "/h/kiki.db").expect("present");
        assert_eq!(made.home_id(), loaded.home_id());
    }
}
