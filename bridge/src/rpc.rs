//! Framed RPC over QUIC streams: each call opens a bidirectional stream, writes one
//! length-prefixed protobuf request and finishes its side; the peer answers with one
//! length-prefixed response. Streams are cheap in QUIC, so calls never block each other.

use prost::Message;

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
    #[error("cannot decode the frame: {0}")]
    Decode(#[from] prost::DecodeError),
    #[error("the stream was closed: {0}")]
    Closed(#[from] quinn::ClosedStream),
}

pub async fn write_frame<M: Message>(send: &mut quinn::SendStream, message: &M) -> Result<(), RpcError> {
    let body = message.encode_to_vec();
    if body.len() > MAX_FRAME {
        return Err(RpcError::TooLarge(body.len()));
    }
    send.write_all(&(body.len() as u32).to_be_bytes()).await?;
    send.write_all(&body).await?;
    Ok(())
}

pub async fn read_frame<M: Message + Default>(recv: &mut quinn::RecvStream) -> Result<M, RpcError> {
    let mut len = [0u8; 4];
    recv.read_exact(&mut len).await?;
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(RpcError::TooLarge(len));
    }
    let mut body = vec![0u8; len];
    recv.read_exact(&mut body).await?;
    Ok(M::decode(body.as_slice())?)
}

/// One call: request out, response back, on a fresh stream.
pub async fn call<Req: Message, Resp: Message + Default>(
    connection: &quinn::Connection,
    request: &Req,
) -> Result<Resp, RpcError> {
    let (mut send, mut recv) = connection.open_bi().await?;
    write_frame(&mut send, request).await?;
    send.finish()?;
    read_frame(&mut recv).await
}

/// Serves every call arriving on `connection`, each on its own task, until the peer goes
/// away. A stream that does not carry a well-formed request is dropped.
pub async fn serve<Req, Resp, H, Fut>(connection: quinn::Connection, handler: H)
where
    Req: Message + Default + Send + 'static,
    Resp: Message + Send + 'static,
    H: Fn(Req) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Resp> + Send + 'static,
{
    while let Ok((mut send, mut recv)) = connection.accept_bi().await {
        let handler = handler.clone();
        tokio::spawn(async move {
            let request = match read_frame::<Req>(&mut recv).await {
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
