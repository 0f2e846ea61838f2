//! Pinned mutual TLS 1.3 for bridges. No certificate authority is involved: a home is its
//! key, and a peer is trusted only by the fingerprint its owner approved.
//!
//! - The dialing side pins the target's home id when it knows it (`--expect`, or a bridge
//!   already approved) and refuses any other key during the handshake.
//! - The accepting side requires a client certificate and proves possession of its key (the
//!   TLS 1.3 signature), but accepts any key: an unknown peer must be able to file a pairing
//!   request, and everything else is refused by the daemon, per call, from the verified id.
//! - 0-RTT is off on both sides: early data could be replayed.

use std::sync::{Arc, Mutex};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, OtherError, SignatureScheme};

use crate::identity::{BridgeIdentity, home_id_of_cert};

/// The ALPN protocol of kiki bridges; a peer speaking anything else is refused.
pub const ALPN: &[u8] = b"kiki-bridge/1";
/// The server name both sides use (certificates are not checked against names).
pub const SERVER_NAME: &str = "kiki";

/// Where a dial notes the peer it refused (see [`client_config`]).
pub type RefusedPeer = Arc<Mutex<Option<WrongPeer>>>;

/// The expected peer is not the one that answered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("peer is home {actual}, but {expected} was expected")]
pub struct WrongPeer {
    pub expected: String,
    pub actual: String,
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn peer_id(certificate: &CertificateDer<'_>) -> Result<String, rustls::Error> {
    home_id_of_cert(certificate).ok_or(rustls::Error::InvalidCertificate(CertificateError::BadEncoding))
}

/// Dialing side: the target must be `expect` (when given). A mismatch is also noted in
/// `refused`, so the dialer can say so plainly (the handshake's error is a string).
#[derive(Debug)]
struct PinnedServer {
    expect: Option<String>,
    refused: RefusedPeer,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for PinnedServer {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let actual = peer_id(end_entity)?;
        match &self.expect {
            Some(expected) if *expected != actual => {
                let wrong = WrongPeer { expected: expected.clone(), actual };
                let error = rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(
                    wrong.clone(),
                ))));
                *self.refused.lock().unwrap_or_else(|p| p.into_inner()) = Some(wrong);
                Err(error)
            }
            _ => Ok(ServerCertVerified::assertion()),
        }
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::PeerIncompatible(rustls::PeerIncompatible::Tls13RequiredForQuic))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

/// Accepting side: any key that proves itself; who it is decides what it may do.
#[derive(Debug)]
struct AnyProvenPeer {
    provider: Arc<CryptoProvider>,
}

impl ClientCertVerifier for AnyProvenPeer {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        peer_id(end_entity)?;
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::PeerIncompatible(rustls::PeerIncompatible::Tls13RequiredForQuic))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

/// TLS for accepting bridge connections.
pub fn server_config(identity: &BridgeIdentity) -> Result<rustls::ServerConfig, rustls::Error> {
    let provider = provider();
    let mut config = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_client_cert_verifier(Arc::new(AnyProvenPeer { provider }))
        .with_single_cert(vec![identity.certificate()], identity.key())?;
    config.alpn_protocols = vec![ALPN.to_vec()];
    // 0-RTT off: early data is replayable. (0 is rustls's default; QUIC allows 0 or u32::MAX.)
    config.max_early_data_size = 0;
    Ok(config)
}

/// TLS for dialing a peer, pinned to `expect` when given, and where a refused identity is
/// noted (see [`PinnedServer`]).
pub fn client_config(
    identity: &BridgeIdentity,
    expect: Option<&str>,
) -> Result<(rustls::ClientConfig, RefusedPeer), rustls::Error> {
    let provider = provider();
    let refused = RefusedPeer::default();
    let verifier = PinnedServer {
        expect: expect.map(str::to_string),
        refused: refused.clone(),
        provider: provider.clone(),
    };
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(verifier))
        .with_client_auth_cert(vec![identity.certificate()], identity.key())?;
    config.alpn_protocols = vec![ALPN.to_vec()];
    config.enable_early_data = false;
    Ok((config, refused))
}
