//! The transport seam: bridge logic in the daemon talks to peers only through [`Transport`]
//! and [`Link`], which carry opaque request/response bytes. The QUIC endpoint implements
//! them; a deterministic in-memory network can implement them too, so the daemon's bridge
//! logic can run under simulation where quinn cannot.

use std::fmt::Debug;
use std::net::SocketAddr;
use std::sync::Arc;

use crate::endpoint::{BridgeEndpoint, EndpointError, PeerConnection};

pub use crate::rpc::{BoxFuture, CallHandler, TrustCheck};

/// A call that did not get an answer (the link failed, or the frame was bad).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct LinkError {
    pub message: String,
    /// The link failed (the connection was lost or reset, the peer is unreachable): a later
    /// call, redialed, may get through. False for a fault of the exchange itself (a frame
    /// over the limits, malformed, or dropped unanswered), which a retry repeats.
    pub lost: bool,
}

impl LinkError {
    pub fn lost(message: impl Into<String>) -> Self {
        Self { message: message.into(), lost: true }
    }

    pub fn fault(message: impl Into<String>) -> Self {
        Self { message: message.into(), lost: false }
    }
}

impl From<crate::rpc::RpcError> for LinkError {
    fn from(e: crate::rpc::RpcError) -> Self {
        use crate::rpc::RpcError::*;
        match e {
            Connection(_) | Write(_) | Read(_) | Closed(_) => Self::lost(e.to_string()),
            TooLarge { .. } | TooLong { .. } | Unanswered | Malformed(_) => Self::fault(e.to_string()),
        }
    }
}

/// An authenticated connection to one peer home.
pub trait Link: Send + Sync + Debug {
    /// The peer's home id, verified by the transport.
    fn peer_home_id(&self) -> &str;
    /// Where the peer's packets come from (not verified: it only groups strangers' requests).
    fn peer_addr(&self) -> SocketAddr;
    /// One call: request out, response back. A call dropped before its answer from
    /// `withdraw_after` on is withdrawn (see `rpc::call_bytes`); dropped earlier, or without
    /// it, its request still goes out.
    fn call(
        &self,
        request: Vec<u8>,
        withdraw_after: Option<std::time::Instant>,
    ) -> BoxFuture<'_, Result<Vec<u8>, LinkError>>;
    /// Serves the peer's calls until it goes away, within what `trusted` allows it.
    fn serve(&self, handler: CallHandler, trusted: TrustCheck) -> BoxFuture<'static, ()>;
    fn is_closed(&self) -> bool;
}

/// A home's endpoint for bridges: dials and accepts peers.
pub trait Transport: Send + Sync + Debug {
    fn home_id(&self) -> &str;
    /// Where peers reach this home.
    fn local_addr(&self) -> String;
    /// Dials `addr`; with `expect`, only that home is accepted.
    fn connect<'a>(
        &'a self,
        addr: SocketAddr,
        expect: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Arc<dyn Link>, EndpointError>>;
    /// The next peer that connected (its identity verified); `None` once closed.
    fn accept(&self) -> BoxFuture<'_, Option<Arc<dyn Link>>>;
    /// Closes every link and stops accepting.
    fn close(&self) -> BoxFuture<'_, ()>;
}

impl Link for PeerConnection {
    fn peer_home_id(&self) -> &str {
        &self.peer_home_id
    }

    fn peer_addr(&self) -> SocketAddr {
        self.connection.remote_address()
    }

    fn call(
        &self,
        request: Vec<u8>,
        withdraw_after: Option<std::time::Instant>,
    ) -> BoxFuture<'_, Result<Vec<u8>, LinkError>> {
        Box::pin(async move {
            crate::rpc::call_bytes(&self.connection, &request, withdraw_after).await.map_err(LinkError::from)
        })
    }

    fn serve(&self, handler: CallHandler, trusted: TrustCheck) -> BoxFuture<'static, ()> {
        Box::pin(crate::rpc::serve_bytes(self.clone(), handler, trusted))
    }

    fn is_closed(&self) -> bool {
        self.connection.close_reason().is_some()
    }
}

impl Transport for BridgeEndpoint {
    fn home_id(&self) -> &str {
        BridgeEndpoint::home_id(self)
    }

    fn local_addr(&self) -> String {
        BridgeEndpoint::local_addr(self).map(|a| a.to_string()).unwrap_or_default()
    }

    fn connect<'a>(
        &'a self,
        addr: SocketAddr,
        expect: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Arc<dyn Link>, EndpointError>> {
        Box::pin(async move {
            let peer = BridgeEndpoint::connect(self, addr, expect).await?;
            Ok(Arc::new(peer) as Arc<dyn Link>)
        })
    }

    fn accept(&self) -> BoxFuture<'_, Option<Arc<dyn Link>>> {
        Box::pin(
            async move { BridgeEndpoint::accept(self).await.map(|peer| Arc::new(peer) as Arc<dyn Link>) },
        )
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(BridgeEndpoint::close(self))
    }
}
