//! A home's identity on the wire: a self-signed certificate of the home's key. Peers pin
//! the home id — the fingerprint of the certificate's public key — so the certificate can be
//! re-issued (new validity, new serial) without changing who the home is.

use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use sha2::{Digest, Sha256};

use crate::der;

/// Base32 (RFC 4648, no padding) of the SHA-256 of a SubjectPublicKeyInfo DER: 52 characters.
pub fn home_id_of(spki_der: &[u8]) -> String {
    data_encoding::BASE32_NOPAD.encode(&Sha256::digest(spki_der))
}

/// Whether `text` has a home id's shape (what [`home_id_of`] makes; not whether such a home
/// exists).
pub fn is_home_id(text: &str) -> bool {
    text.len() == 52 && data_encoding::BASE32_NOPAD.decode(text.as_bytes()).is_ok_and(|d| d.len() == 32)
}

/// The home id a certificate proves, or `None` if it cannot be parsed.
pub fn home_id_of_cert(certificate_der: &[u8]) -> Option<String> {
    der::subject_public_key_info(certificate_der).map(home_id_of)
}

#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("the home key is not a valid PKCS#8 PEM key: {0}")]
    Key(String),
    #[error("cannot issue the home certificate: {0}")]
    Certificate(String),
}

/// The key and certificate a home presents to its peers.
#[derive(Clone)]
pub struct BridgeIdentity {
    home_id: String,
    certificate: CertificateDer<'static>,
    key: Arc<PrivatePkcs8KeyDer<'static>>,
}

impl std::fmt::Debug for BridgeIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BridgeIdentity").field("home_id", &self.home_id).finish_non_exhaustive()
    }
}

impl BridgeIdentity {
    /// Issues a fresh self-signed certificate for the home key (PKCS#8 PEM).
    pub fn from_key_pem(pem: &str) -> Result<Self, IdentityError> {
        let key = rcgen::KeyPair::from_pem(pem).map_err(|e| IdentityError::Key(e.to_string()))?;
        let params = rcgen::CertificateParams::new(vec!["kiki".to_string()])
            .map_err(|e| IdentityError::Certificate(e.to_string()))?;
        let certificate = params.self_signed(&key).map_err(|e| IdentityError::Certificate(e.to_string()))?;
        let home_id = home_id_of(&rcgen::PublicKeyData::subject_public_key_info(&key));
        Ok(Self {
            home_id,
            certificate: certificate.der().clone(),
            key: Arc::new(PrivatePkcs8KeyDer::from(key.serialize_der())),
        })
    }

    pub fn home_id(&self) -> &str {
        &self.home_id
    }

    pub(crate) fn certificate(&self) -> CertificateDer<'static> {
        self.certificate.clone()
    }

    pub(crate) fn key(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::Pkcs8(self.key.as_ref().clone_key())
    }

    /// A secret for `purpose`, derived from the home key: the same on every start of the
    /// home, and different for every purpose and every home.
    pub(crate) fn derived_secret(&self, purpose: &str) -> [u8; 32] {
        let mut hash = Sha256::new();
        hash.update(b"kiki derived secret\0");
        hash.update(purpose.as_bytes());
        hash.update(b"\0");
        hash.update(self.key.secret_pkcs8_der());
        hash.finalize().into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_certificate_proves_the_key_fingerprint() {
        let key = rcgen::KeyPair::generate().expect("key");
        let identity = BridgeIdentity::from_key_pem(&key.serialize_pem()).expect("identity");
        assert_eq!(identity.home_id().len(), 52);
        assert_eq!(home_id_of_cert(&identity.certificate()), Some(identity.home_id().to_string()));
        let again = BridgeIdentity::from_key_pem(&key.serialize_pem()).expect("identity");
        assert_eq!(again.home_id(), identity.home_id(), "stable for the same key");
        assert!(BridgeIdentity::from_key_pem("not a key").is_err());
        assert_eq!(again.derived_secret("a"), identity.derived_secret("a"), "stable for the same key");
        assert_ne!(identity.derived_secret("a"), identity.derived_secret("b"), "one per purpose");
        let other = BridgeIdentity::from_key_pem(&rcgen::KeyPair::generate().expect("key").serialize_pem())
            .expect("identity");
        assert_ne!(other.derived_secret("a"), identity.derived_secret("a"), "one per home");
    }
}
