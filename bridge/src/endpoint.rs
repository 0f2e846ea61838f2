//! One QUIC endpoint per home: it accepts peers' connections and dials peers, and reports
//! each connection's verified peer home id.

use std::net::SocketAddr;
use std::sync::Arc;

use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use rustls::pki_types::CertificateDer;

use crate::identity::{BridgeIdentity, home_id_of_cert};
use crate::tls;

#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    #[error("TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
    #[error("QUIC TLS configuration: {0}")]
    QuicTls(String),
    #[error("cannot bind the bridge endpoint on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("cannot dial {addr}: {message}")]
    Connect { addr: SocketAddr, message: String },
    #[error("the peer presented no usable certificate")]
    NoPeerIdentity,
    /// Dialed with an expected home id, and another home answered.
    #[error("{0}")]
    WrongPeer(crate::tls::WrongPeer),
    #[error("the endpoint is closed")]
    Closed,
}

/// A connection with the peer's verified home id.
#[derive(Debug, Clone)]
pub struct PeerConnection {
    pub peer_home_id: String,
    pub connection: quinn::Connection,
}

/// The home's QUIC endpoint for bridges.
#[derive(Debug, Clone)]
pub struct BridgeEndpoint {
    endpoint: quinn::Endpoint,
    identity: BridgeIdentity,
}

impl BridgeEndpoint {
    /// Binds `addr` (e.g. `127.0.0.1:0`) and starts accepting QUIC connections.
    pub fn bind(addr: SocketAddr, identity: BridgeIdentity) -> Result<Self, EndpointError> {
        let server = QuicServerConfig::try_from(tls::server_config(&identity)?)
            .map_err(|e| EndpointError::QuicTls(e.to_string()))?;
        let server = quinn::ServerConfig::with_crypto(Arc::new(server));
        let endpoint =
            quinn::Endpoint::server(server, addr).map_err(|source| EndpointError::Bind { addr, source })?;
        Ok(Self { endpoint, identity })
    }

    /// The address actually bound (the real port when bound to port 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.endpoint.local_addr()
    }

    pub fn home_id(&self) -> &str {
        self.identity.home_id()
    }

    /// Dials `addr`. With `expect`, the handshake fails unless the peer is that home.
    pub async fn connect(
        &self,
        addr: SocketAddr,
        expect: Option<&str>,
    ) -> Result<PeerConnection, EndpointError> {
        let (tls, refused) = tls::client_config(&self.identity, expect)?;
        let client = QuicClientConfig::try_from(tls).map_err(|e| EndpointError::QuicTls(e.to_string()))?;
        let connecting = self
            .endpoint
            .connect_with(quinn::ClientConfig::new(Arc::new(client)), addr, tls::SERVER_NAME)
            .map_err(|e| EndpointError::Connect { addr, message: e.to_string() })?;
        let connection =
            connecting.await.map_err(|e| match refused.lock().unwrap_or_else(|p| p.into_inner()).take() {
                Some(wrong) => EndpointError::WrongPeer(wrong),
                None => EndpointError::Connect { addr, message: e.to_string() },
            })?;
        peer(connection)
    }

    /// The next incoming connection whose handshake succeeded; `None` once closed.
    pub async fn accept(&self) -> Option<Result<PeerConnection, EndpointError>> {
        loop {
            let incoming = self.endpoint.accept().await?;
            match incoming.await {
                Ok(connection) => return Some(peer(connection)),
                // A failed handshake (wrong ALPN, bad certificate) costs nothing more.
                Err(e) => tracing::debug!(error = %e, "bridge handshake refused"),
            }
        }
    }

    /// Closes every connection and stops accepting.
    pub async fn close(&self) {
        self.endpoint.close(0u32.into(), b"home stopping");
        self.endpoint.wait_idle().await;
    }
}

fn peer(connection: quinn::Connection) -> Result<PeerConnection, EndpointError> {
    let certificates = connection
        .peer_identity()
        .and_then(|identity| identity.downcast::<Vec<CertificateDer<'static>>>().ok())
        .ok_or(EndpointError::NoPeerIdentity)?;
    let peer_home_id =
        certificates.first().and_then(|c| home_id_of_cert(c)).ok_or(EndpointError::NoPeerIdentity)?;
    Ok(PeerConnection { peer_home_id, connection })
}
