//! One QUIC endpoint per home: it accepts peers' connections and dials peers, and reports
//! each connection's verified peer home id.
//!
//! Any key can complete a handshake (an unknown peer must be able to file a pairing
//! request), so what a peer can make this home hold is bounded before anyone knows who it
//! is: handshakes run side by side, each for at most [`HANDSHAKE_TIMEOUT`], at most
//! [`MAX_HANDSHAKES`] at once, and while more than [`RETRY_ABOVE`] are under way a new peer
//! proves its address first (a flood of Initials costs no handshake work); a new connection may open [`STRANGER_STREAMS`] streams and
//! have [`STRANGER_WINDOW`] bytes in flight, requests of at most `rpc::MAX_STRANGER_REQUEST`,
//! and all such connections together take at most [`MAX_STRANGER_CONNECTIONS`] slots —
//! until the daemon says the peer has a bridge (`TrustCheck`): then [`open_up`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use rustls::pki_types::CertificateDer;
use tokio::sync::{Mutex, Semaphore, mpsc};

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

impl EndpointError {
    /// Whether dialing failed on the way (no route, no answer, a lost handshake), so a later
    /// dial may get through — unlike another home answering, or this home's own setup.
    pub fn lost(&self) -> bool {
        matches!(self, EndpointError::Connect { .. })
    }
}

/// The longest a peer's handshake may take before it is dropped.
/// The most a closing endpoint waits for its connections to drain (see [`BridgeEndpoint::close`]).
pub const CLOSE_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes under way at once; more are refused until some end.
pub const MAX_HANDSHAKES: usize = 64;
/// Above this many handshakes under way, a new peer must first prove its address (a QUIC
/// Retry: one round trip, answered by any real peer's stack): a flood of Initials from
/// addresses that never answer — spoofed, or a sprayer's — then costs a Retry packet each,
/// no handshake work (key exchange, signature) and no slot of [`MAX_HANDSHAKES`], so real
/// peers still get through.
pub const RETRY_ABOVE: usize = 8;
/// Connection attempts quinn holds until the accept loop takes them, and the bytes of
/// their early packets, in all: beyond these it refuses them itself.
const MAX_INCOMING: usize = 1024;
const INCOMING_BUFFER_BYTES: u64 = 8 * 1024 * 1024;
/// Connections from peers without a bridge at once, all of them together; another one is
/// closed at once (busy).
pub const MAX_STRANGER_CONNECTIONS: usize = 64;
/// Streams a peer without a bridge may have open at once on a connection.
pub const STRANGER_STREAMS: u32 = 4;
/// Bytes a peer without a bridge may have in flight on a connection.
pub const STRANGER_WINDOW: u32 = 256 * 1024;
/// A peer with a bridge: up to 256 calls at once (the source's outbox makes at most 128 to
/// one peer, plus its users' calls), and a connection window that carries them.
pub const TRUSTED_STREAMS: u32 = 256;
pub const TRUSTED_WINDOW: u32 = 32 * 1024 * 1024;
/// A dialed connection that hears nothing from its peer for this long is closed, so calls
/// to a peer that vanished (killed, or its machine gone) fail and redial instead of waiting
/// for QUIC's default 30 s; [`KEEP_ALIVE`] keeps a live but quiet connection open.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(10);
pub const KEEP_ALIVE: Duration = Duration::from_secs(3);
/// The length of this home's connection ids (see `endpoint_config`).
const CONNECTION_ID_BYTES: usize = 16;

/// A connection with the peer's verified home id.
#[derive(Debug, Clone)]
pub struct PeerConnection {
    pub peer_home_id: String,
    pub connection: quinn::Connection,
    /// The endpoint's slots for connections of peers without a bridge.
    pub(crate) stranger_slots: Arc<Semaphore>,
}

/// The home's QUIC endpoint for bridges.
#[derive(Debug, Clone)]
pub struct BridgeEndpoint {
    endpoint: quinn::Endpoint,
    identity: BridgeIdentity,
    /// Connections whose handshake succeeded, from the task that runs the handshakes.
    accepted: Arc<Mutex<mpsc::Receiver<PeerConnection>>>,
    stranger_slots: Arc<Semaphore>,
}

impl BridgeEndpoint {
    /// Binds `addr` (e.g. `127.0.0.1:0`) and starts accepting QUIC connections.
    pub fn bind(addr: SocketAddr, identity: BridgeIdentity) -> Result<Self, EndpointError> {
        let server = QuicServerConfig::try_from(tls::server_config(&identity)?)
            .map_err(|e| EndpointError::QuicTls(e.to_string()))?;
        let mut server = quinn::ServerConfig::with_crypto(Arc::new(server));
        let mut stranger = quinn::TransportConfig::default();
        stranger
            .max_concurrent_bidi_streams(STRANGER_STREAMS.into())
            .max_concurrent_uni_streams(0u32.into())
            .receive_window(STRANGER_WINDOW.into());
        server.transport_config(Arc::new(stranger));
        // What the endpoint holds for connections nobody has accepted yet is bounded: a
        // flood of Initials beyond it is refused by quinn before it reaches us.
        server.max_incoming(MAX_INCOMING).incoming_buffer_size_total(INCOMING_BUFFER_BYTES);
        let socket =
            std::net::UdpSocket::bind(addr).map_err(|source| EndpointError::Bind { addr, source })?;
        let endpoint = quinn::Endpoint::new(
            endpoint_config(&identity),
            Some(server),
            socket,
            Arc::new(quinn::TokioRuntime),
        )
        .map_err(|source| EndpointError::Bind { addr, source })?;
        let stranger_slots = Arc::new(Semaphore::new(MAX_STRANGER_CONNECTIONS));
        let (handshaken, accepted) = mpsc::channel(MAX_HANDSHAKES);
        tokio::spawn(run_handshakes(endpoint.clone(), handshaken, stranger_slots.clone()));
        Ok(Self { endpoint, identity, accepted: Arc::new(Mutex::new(accepted)), stranger_slots })
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
        let mut client = quinn::ClientConfig::new(Arc::new(client));
        // The dialed peer answers calls; it opens no streams of its own.
        let mut transport = quinn::TransportConfig::default();
        transport
            .max_concurrent_bidi_streams(0u32.into())
            .max_concurrent_uni_streams(0u32.into())
            .keep_alive_interval(Some(KEEP_ALIVE))
            .max_idle_timeout(Some(IDLE_TIMEOUT.try_into().expect("a few seconds fit a QUIC idle timeout")));
        client.transport_config(Arc::new(transport));
        let connecting = self
            .endpoint
            .connect_with(client, addr, tls::SERVER_NAME)
            .map_err(|e| EndpointError::Connect { addr, message: e.to_string() })?;
        let connection =
            connecting.await.map_err(|e| match refused.lock().unwrap_or_else(|p| p.into_inner()).take() {
                Some(wrong) => EndpointError::WrongPeer(wrong),
                None => EndpointError::Connect { addr, message: e.to_string() },
            })?;
        peer(connection, &self.stranger_slots)
    }

    /// The next incoming connection whose handshake succeeded (its peer proved its key);
    /// `None` once closed.
    pub async fn accept(&self) -> Option<PeerConnection> {
        self.accepted.lock().await.recv().await
    }

    /// Closes every connection and stops accepting. The close frames go out at once; waiting
    /// for the connections to finish draining (three probe timeouts each, which a link that
    /// lost packets has backed off to seconds) is bounded by [`CLOSE_GRACE`], so a home stops
    /// promptly whatever its links went through.
    pub async fn close(&self) {
        self.endpoint.close(0u32.into(), b"home stopping");
        let _ = tokio::time::timeout(CLOSE_GRACE, self.endpoint.wait_idle()).await;
    }
}

/// The endpoint's stateless-reset key, derived from the home key so it outlives a restart:
/// a home restarted after a crash answers the packets of its connections from before with a
/// reset its peers can verify, so their calls fail at once and redial instead of waiting out
/// [`IDLE_TIMEOUT`] on a connection nobody serves. Connection ids are 16 random bytes, never
/// reused, so a token once seen (a reset travels in clear) is worth nothing after, as RFC
/// 9000 §10.3.2 asks of a static key.
fn endpoint_config(identity: &BridgeIdentity) -> quinn::EndpointConfig {
    let reset_key =
        ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &identity.derived_secret("quic stateless reset"));
    let mut config = quinn::EndpointConfig::new(Arc::new(reset_key));
    config.cid_generator(|| Box::new(quinn_proto::RandomConnectionIdGenerator::new(CONNECTION_ID_BYTES)));
    config
}

/// Runs each incoming handshake on a task of its own (one that stalls holds up no other),
/// and hands the connections that made it to [`BridgeEndpoint::accept`].
async fn run_handshakes(
    endpoint: quinn::Endpoint,
    handshaken: mpsc::Sender<PeerConnection>,
    stranger_slots: Arc<Semaphore>,
) {
    let under_way = Arc::new(Semaphore::new(MAX_HANDSHAKES));
    while let Some(incoming) = endpoint.accept().await {
        let busy = MAX_HANDSHAKES - under_way.available_permits() >= RETRY_ABOVE;
        if busy && !incoming.remote_address_validated() && incoming.may_retry() {
            // Cannot fail: a retry is possible (`may_retry`).
            let _ = incoming.retry();
            continue;
        }
        let Ok(slot) = under_way.clone().try_acquire_owned() else {
            tracing::debug!(from = %incoming.remote_address(), "too many bridge handshakes under way; refused");
            incoming.refuse();
            continue;
        };
        let (handshaken, stranger_slots) = (handshaken.clone(), stranger_slots.clone());
        tokio::spawn(async move {
            let connection = match tokio::time::timeout(HANDSHAKE_TIMEOUT, incoming).await {
                Ok(Ok(connection)) => connection,
                // A failed handshake (wrong ALPN, bad certificate) costs nothing more.
                Ok(Err(e)) => return tracing::debug!(error = %e, "bridge handshake refused"),
                Err(_) => return tracing::debug!("a bridge handshake took too long; dropped"),
            };
            drop(slot);
            match peer(connection, &stranger_slots) {
                Ok(peer) => {
                    let _ = handshaken.send(peer).await;
                }
                Err(e) => tracing::debug!(error = %e, "bridge connection without identity"),
            }
        });
    }
}

/// A connection whose peer has a bridge here: the streams and window it needs (see the
/// module's notes).
pub(crate) fn open_up(connection: &quinn::Connection) {
    connection.set_max_concurrent_bi_streams(TRUSTED_STREAMS.into());
    connection.set_receive_window(TRUSTED_WINDOW.into());
}

fn peer(
    connection: quinn::Connection,
    stranger_slots: &Arc<Semaphore>,
) -> Result<PeerConnection, EndpointError> {
    let certificates = connection
        .peer_identity()
        .and_then(|identity| identity.downcast::<Vec<CertificateDer<'static>>>().ok())
        .ok_or(EndpointError::NoPeerIdentity)?;
    let peer_home_id =
        certificates.first().and_then(|c| home_id_of_cert(c)).ok_or(EndpointError::NoPeerIdentity)?;
    Ok(PeerConnection { peer_home_id, connection, stranger_slots: stranger_slots.clone() })
}
