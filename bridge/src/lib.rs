//! kiki-bridge: the transport of bridges between homes. The only crate that names quinn or
//! rustls types.
//!
//! # Layout
//!
//! - [`identity`]: a home's self-signed certificate of its key; the home id is the SHA-256
//!   fingerprint (base32) of the certificate's public key.
//! - [`tls`]: pinned mutual TLS 1.3 — peers are identified by fingerprint, never by a CA;
//!   0-RTT is off on both sides.
//! - [`endpoint`]: one QUIC endpoint per home (ALPN `kiki-bridge/1`) that both accepts and
//!   dials, reporting each connection's verified peer home id.
//! - [`rpc`]: length-prefixed protobuf frames, one request and one response per stream.
//! - [`transport`]: the seam the daemon's bridge logic uses ([`Transport`], [`Link`]), so
//!   that logic can also run over a simulated network ([`memory`]).
//!
//! Whether a peer may do anything (approved bridge, permissions) is decided by the daemon
//! on every call, from the peer home id this crate verified.

mod der;
pub mod endpoint;
pub mod identity;
pub mod memory;
pub mod rpc;
pub mod tls;
pub mod transport;

pub use endpoint::{BridgeEndpoint, EndpointError, PeerConnection};
pub use identity::{BridgeIdentity, IdentityError, home_id_of, home_id_of_cert, is_home_id};
pub use transport::{BoxFuture, CallHandler, Link, LinkError, Transport, TrustCheck};
