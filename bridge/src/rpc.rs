//! Framed calls over QUIC streams: each call opens a bidirectional stream, writes one
//! length-prefixed request and finishes its side; the peer answers with one length-prefixed
//! response. Streams are cheap in QUIC, so calls never block each other. The bytes are
//! protobuf messages encoded by the caller (see `kiki.bridge.v1.BridgeCall`/`BridgeReply`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::endpoint::PeerConnection;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Answers one call: request bytes in, response bytes out.
pub type CallHandler = Arc<dyn Fn(Vec<u8>) -> BoxFuture<'static, Vec<u8>> + Send + Sync>;

/// Whether the peer of a served link has a bridge here now (asked as its calls arrive). Any
/// key can connect, so until this says yes the peer gets a stranger's allowance: small
/// requests, a few at a time, on one of a few connections shared by all strangers (see
/// `endpoint`), so that fresh keys cannot make a home hold much memory.
pub type TrustCheck = Arc<dyn Fn() -> BoxFuture<'static, bool> + Send + Sync>;

/// The largest request a peer with a bridge may send: a ThreadSend of 100,000 characters is
/// at most ~400 KB, a follow-up of 256 keys less.
pub const MAX_REQUEST: usize = 1024 * 1024;

/// The largest request of a peer without a bridge: all it may do is file a pairing request
/// or ping, a few hundred bytes.
pub const MAX_STRANGER_REQUEST: usize = 16 * 1024;

/// How long a stranger's request may take to arrive once its stream is open: it cannot hold
/// a home's memory by sending slowly. (A peer with a bridge has none: a large message on a
/// slow link must get through.)
pub const STRANGER_REQUEST_DEADLINE: Duration = Duration::from_secs(30);

/// The largest response a home accepts: a ThreadRead page of up to 100 turns, whose fields
/// may each be 16,384 UTF-16 units, stays under this.
pub const MAX_RESPONSE: usize = 16 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum RpcError {
    #[error("the connection failed: {0}")]
    Connection(#[from] quinn::ConnectionError),
    #[error("the stream failed: {0}")]
    Write(#[from] quinn::WriteError),
    #[error("reading the frame failed: {0}")]
    Read(#[from] quinn::ReadError),
    #[error("a frame of {size} bytes exceeds the {limit}-byte limit")]
    TooLarge { size: usize, limit: usize },
    #[error("a frame over the {limit}-byte limit")]
    TooLong { limit: usize },
    #[error("the peer dropped the call unanswered (a request or answer over the limits?)")]
    Unanswered,
    #[error("malformed frame: {0}")]
    Malformed(&'static str),
    #[error("the stream was closed: {0}")]
    Closed(#[from] quinn::ClosedStream),
}

/// One call: request out, response back, on a fresh stream. Given up from `withdraw_after`
/// on (see [`Request`]), the request is withdrawn; given up earlier, it still goes out.
pub async fn call_bytes(
    connection: &quinn::Connection,
    request: &[u8],
    withdraw_after: Option<Instant>,
) -> Result<Vec<u8>, RpcError> {
    let (send, mut recv) = connection.open_bi().await?;
    let mut call = Request { send, settled: false, withdraw_after };
    write_frame(&mut call.send, request, MAX_REQUEST).await?;
    call.send.finish()?;
    let answer = read_frame(&mut recv, MAX_RESPONSE).await;
    call.settled = true;
    answer
}

/// A call's request. Given up before its answer came (its caller stopped waiting), it
/// still goes out — QUIC keeps sending what was lost, so a large message on a slow link
/// arrives in the end and the next attempt's replay finds it — unless it was given up from
/// `withdraw_after` on (a message whose retry window is over): then the stream is reset,
/// QUIC sends none of it again, and a peer cut off meanwhile does not get it once the link
/// heals, after its sender declared it expired. What the peer had already read stays there.
struct Request {
    send: quinn::SendStream,
    /// Answered, or failed: nothing left to withdraw.
    settled: bool,
    withdraw_after: Option<Instant>,
}

impl Drop for Request {
    fn drop(&mut self) {
        if !self.settled && self.withdraw_after.is_some_and(|t| Instant::now() >= t) {
            let _ = self.send.reset(0u32.into());
        }
    }
}

/// Serves every call arriving on `peer`'s connection, each on its own task, until the peer
/// goes away. A stream that does not carry a well-formed frame is dropped. Until `trusted`
/// says the peer has a bridge, it is held to a stranger's allowance (see `endpoint`, and
/// [`STRANGER_REQUEST_DEADLINE`]): without a free stranger slot its connection is closed.
pub async fn serve_bytes(peer: PeerConnection, handler: CallHandler, trusted: TrustCheck) {
    let connection = peer.connection;
    let mut stranger_slot = None;
    let mut is_trusted = trusted().await;
    if is_trusted {
        crate::endpoint::open_up(&connection);
    } else {
        match peer.stranger_slots.try_acquire_owned() {
            Ok(slot) => stranger_slot = Some(slot),
            Err(_) => {
                tracing::debug!(peer = %peer.peer_home_id, "too many connections of peers without a bridge");
                return connection.close(0u32.into(), b"busy");
            }
        }
    }
    while let Ok((mut send, mut recv)) = connection.accept_bi().await {
        if !is_trusted && trusted().await {
            is_trusted = true;
            stranger_slot = None;
            crate::endpoint::open_up(&connection);
        }
        let (limit, deadline) = if is_trusted {
            (MAX_REQUEST, None)
        } else {
            (MAX_STRANGER_REQUEST, Some(STRANGER_REQUEST_DEADLINE))
        };
        let handler = handler.clone();
        tokio::spawn(async move {
            let read = read_frame(&mut recv, limit);
            let read = async {
                match deadline {
                    Some(deadline) => tokio::time::timeout(deadline, read).await,
                    None => Ok(read.await),
                }
            };
            let request = match read.await {
                Ok(Ok(request)) => request,
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "dropping a bridge call (malformed, oversized or withdrawn)");
                    return;
                }
                Err(_) => {
                    tracing::debug!(
                        "dropping a stranger's call that did not arrive within {STRANGER_REQUEST_DEADLINE:?}"
                    );
                    let _ = recv.stop(0u32.into());
                    return;
                }
            };
            let response = handler(request).await;
            if write_frame(&mut send, &response, MAX_RESPONSE).await.is_ok() {
                let _ = send.finish();
            }
        });
    }
    drop(stranger_slot);
}

async fn write_frame(send: &mut quinn::SendStream, body: &[u8], limit: usize) -> Result<(), RpcError> {
    if body.len() > limit {
        return Err(RpcError::TooLarge { size: body.len(), limit });
    }
    send.write_all(&(body.len() as u32).to_be_bytes()).await?;
    send.write_all(body).await?;
    Ok(())
}

/// The frame the peer sent on `recv`, which it then finished. Memory follows the bytes that
/// actually arrive, up to `limit`: never what a length prefix merely claims.
async fn read_frame(recv: &mut quinn::RecvStream, limit: usize) -> Result<Vec<u8>, RpcError> {
    let mut frame = recv.read_to_end(limit + 4).await.map_err(|e| match e {
        quinn::ReadToEndError::Read(e) => RpcError::Read(e),
        quinn::ReadToEndError::TooLong => RpcError::TooLong { limit },
    })?;
    if frame.is_empty() {
        return Err(RpcError::Unanswered);
    }
    let Some(prefix) = frame.first_chunk::<4>() else {
        return Err(RpcError::Malformed("shorter than its length prefix"));
    };
    if u32::from_be_bytes(*prefix) as usize != frame.len() - 4 {
        return Err(RpcError::Malformed("its length prefix does not match its body"));
    }
    frame.drain(..4);
    Ok(frame)
}
