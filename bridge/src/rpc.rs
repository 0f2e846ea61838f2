//! Framed calls over QUIC streams: each call opens a bidirectional stream, writes one
//! length-prefixed request and finishes its side; the peer answers with one length-prefixed
//! response. Streams are cheap in QUIC, so calls never block each other. The bytes are
//! protobuf messages encoded by the caller (see `kiki.v1.BridgeCall`/`BridgeReply`).

use crate::transport::CallHandler;

/// The largest frame either side accepts: a 100,000-character message is at most ~400 KB,
/// and a ThreadRead page stays well under this.
pub const MAX_FRAME: usize = 16 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum RpcError {
    #[error("the connection failed: {0}")]
    Connection(#[from] quinn::ConnectionError),
    #[error("the stream failed: {0}")]
    Write(#[from] quinn::WriteError),
    #[error("reading the frame failed: {0}")]
    Read(#[from] quinn::ReadExactError),
    #[error("frame of {0} bytes exceeds the {MAX_FRAME}-byte limit")]
    TooLarge(usize),
    #[error("the stream was closed: {0}")]
    Closed(#[from] quinn::ClosedStream),
}

/// One call: request out, response back, on a fresh stream.
pub async fn call_bytes(connection: &quinn::Connection, request: &[u8]) -> Result<Vec<u8>, RpcError> {
    let (mut send, mut recv) = connection.open_bi().await?;
    write_frame(&mut send, request).await?;
    send.finish()?;
    read_frame(&mut recv).await
}

/// Serves every call arriving on `connection`, each on its own task, until the peer goes
/// away. A stream that does not carry a well-formed frame is dropped.
pub async fn serve_bytes(connection: quinn::Connection, handler: CallHandler) {
    while let Ok((mut send, mut recv)) = connection.accept_bi().await {
        let handler = handler.clone();
        tokio::spawn(async move {
            let request = match read_frame(&mut recv).await {
                Ok(request) => request,
                Err(e) => {
                    tracing::debug!(error = %e, "dropping a malformed bridge call");
                    return;
                }
            };
            let response = handler(request).await;
            if write_frame(&mut send, &response).await.is_ok() {
                let _ = send.finish();
            }
        });
    }
}

async fn write_frame(send: &mut quinn::SendStream, body: &[u8]) -> Result<(), RpcError> {
    if body.len() > MAX_FRAME {
        return Err(RpcError::TooLarge(body.len()));
    }
    send.write_all(&(body.len() as u32).to_be_bytes()).await?;
    send.write_all(body).await?;
    Ok(())
}

async fn read_frame(recv: &mut quinn::RecvStream) -> Result<Vec<u8>, RpcError> {
    let mut len = [0u8; 4];
    recv.read_exact(&mut len).await?;
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(RpcError::TooLarge(len));
    }
    let mut body = vec![0u8; len];
    recv.read_exact(&mut body).await?;
    Ok(body)
}
