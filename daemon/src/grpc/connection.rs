//! Each accepted connection's own limits: how many ThreadWaits it may park and how many of
//! its other calls run at once.
//!
//! The two are apart because a parked wait costs a few KB and no work while a short call
//! holds the store or a bridge: one limit for both let 64 parked waits (each up to 60 s)
//! hold back every send on their connection. tonic hands a connection's
//! [`Connected::connect_info`] to each of its calls as a request extension, so the limits
//! are made when the connection is accepted and [`super::wait_route`] applies them per call.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::UnixStream;
use tokio::sync::Semaphore;
use tonic::transport::server::Connected;

/// ThreadWaits one connection may have parked; one more is refused (RESOURCE_EXHAUSTED).
/// A parked wait costs ~4 KB in the daemon (10,000 are budgeted at < 50 MB), so a full
/// connection pins ~4 MB — bounded, yet far above one client's need: a CLI or an agent
/// parks a handful, and one call waits for up to 8 threads. Refused rather than queued: a
/// queued wait would be waiting for a wait, and its caller is better told to spread out.
pub const WAITS_PER_CONNECTION: usize = 1024;

/// Other calls one connection runs at once; more queue until one ends (they are not
/// refused). These do the work (store transactions, bridge round trips): one connection
/// takes at most 64 callers' worth of the daemon and other connections keep their share.
/// The number is the per-connection limit every call shared before waits were counted apart.
pub const CALLS_PER_CONNECTION: usize = 64;

/// HTTP/2 streams one connection may have open: room for its most parked waits and running
/// calls, the rest of the count (when fewer waits are parked) for calls queued behind them.
/// A client past it waits for a stream in its own HTTP/2 layer, so what one connection
/// costs the daemon stays bounded by flow control rather than by an unbounded queue.
pub const STREAMS_PER_CONNECTION: u32 = (WAITS_PER_CONNECTION + CALLS_PER_CONNECTION) as u32;

/// One connection's places, shared by all of its calls.
#[derive(Clone)]
pub struct ConnectionLimits {
    /// Parked ThreadWaits: taken with `try_acquire`, held for the call's whole life.
    pub waits: Arc<Semaphore>,
    /// Running other calls: waited for, held until the call's answer is ready.
    pub calls: Arc<Semaphore>,
}

impl ConnectionLimits {
    fn new() -> Self {
        Self {
            waits: Arc::new(Semaphore::new(WAITS_PER_CONNECTION)),
            calls: Arc::new(Semaphore::new(CALLS_PER_CONNECTION)),
        }
    }
}

/// An accepted Unix connection carrying its [`ConnectionLimits`] to tonic.
pub struct LimitedConnection {
    stream: UnixStream,
    limits: ConnectionLimits,
}

impl LimitedConnection {
    pub fn new(stream: UnixStream) -> Self {
        Self { stream, limits: ConnectionLimits::new() }
    }
}

impl Connected for LimitedConnection {
    type ConnectInfo = ConnectionLimits;

    /// Called once per connection; every call on it gets a clone (the same semaphores).
    fn connect_info(&self) -> ConnectionLimits {
        self.limits.clone()
    }
}

impl AsyncRead for LimitedConnection {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for LimitedConnection {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}
