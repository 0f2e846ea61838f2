//! ThreadWait served beside tonic's router rather than through it, and each connection's
//! limits applied to every call.
//!
//! A ThreadWait call mostly parks, and a home may hold thousands at once (the benchmarks
//! budget 10,000 parked calls at < 50 MB). Through the generated service each parked call carries
//! tonic's per-call state: the generated handler's boxed future (~1.8 KB), the router's
//! boxed future (~0.5 KB) and the handler's own boxed future — more than the call's
//! actual state. This layer answers `/kiki.v1.ThreadService/ThreadWait` itself with the
//! plain gRPC wire format (one length-prefixed protobuf message each way, `grpc-status`
//! in the trailers) and hands every other call to the router unchanged. Everything around
//! it (connection handling, `grpc-timeout`) is still tonic's, and the answer is the one
//! `ThreadServiceImpl::wait` gives the generated path.
//!
//! The connection's limits ([`ConnectionLimits`], a request extension tonic adds to each
//! call) are counted apart: a ThreadWait takes one of the connection's
//! [`WAITS_PER_CONNECTION`] places or is refused at once, and keeps it until it ends or is
//! given up; any other call waits for one of its [`super::CALLS_PER_CONNECTION`] places and
//! keeps it until its answer is ready. So parked waits never hold back the connection's
//! sends, and what waits in the queue is bounded by the connection's HTTP/2 streams.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderValue};
use http_body_util::{BodyExt, Full, Limited};
use kiki_proto as pb;
use prost::Message;
use tokio::sync::{OwnedSemaphorePermit, TryAcquireError};
use tonic::Status;
use tonic::body::Body;

use super::ThreadServiceImpl;
use super::connection::{ConnectionLimits, WAITS_PER_CONNECTION};
use kiki_proto::limits::WAIT_TARGETS_MAX;

const PATH: &str = "/kiki.v1.ThreadService/ThreadWait";
/// A ThreadWait request is a few hundred bytes (≤ 8 targets and their cursors).
const REQUEST_MAX_BYTES: usize = 64 * 1024;
/// gRPC's message prefix: a compression flag and a big-endian length.
const PREFIX: usize = 5;

/// Wraps the router: ThreadWait calls are answered here, the rest go on to `inner`.
#[derive(Clone)]
pub struct WaitRouteLayer {
    service: Arc<ThreadServiceImpl>,
}

impl WaitRouteLayer {
    pub fn new(service: ThreadServiceImpl) -> Self {
        Self { service: Arc::new(service) }
    }
}

impl<S> tower::Layer<S> for WaitRouteLayer {
    type Service = WaitRoute<S>;

    fn layer(&self, inner: S) -> WaitRoute<S> {
        WaitRoute { inner, service: self.service.clone() }
    }
}

#[derive(Clone)]
pub struct WaitRoute<S> {
    inner: S,
    service: Arc<ThreadServiceImpl>,
}

/// A call's answer: one boxed future, whether answered here or by the router.
pub type Answer = Pin<Box<dyn Future<Output = Result<http::Response<Body>, tower::BoxError>> + Send>>;

impl<S> tower::Service<http::Request<Body>> for WaitRoute<S>
where
    S: tower::Service<http::Request<Body>, Response = http::Response<Body>> + Clone + Send + 'static,
    S::Error: Into<tower::BoxError>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = tower::BoxError;
    type Future = Answer;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut request: http::Request<Body>) -> Answer {
        // Taken out: nothing past this point reads it, and a parked wait keeps no request.
        let Some(limits) = request.extensions_mut().remove::<ConnectionLimits>() else {
            // `serve` accepts only connections that carry their limits.
            return answer_now(Status::internal("a call without its connection's limits"));
        };
        if request.uri().path() != PATH {
            // The router was made ready for this call: it is the one that runs it, later.
            let ready = self.inner.clone();
            let mut inner = std::mem::replace(&mut self.inner, ready);
            return Box::pin(async move {
                // Queued, not refused. (The semaphores are never closed.)
                let Ok(_place) = limits.calls.acquire_owned().await else {
                    return Ok(Status::unavailable("the connection's call limit is closed").into_http());
                };
                inner.call(request).await.map_err(Into::into)
            });
        }
        let place = match limits.waits.try_acquire_owned() {
            Ok(place) => place,
            Err(TryAcquireError::NoPermits) => return answer_now(too_many_waits()),
            Err(TryAcquireError::Closed) => {
                return answer_now(Status::unavailable("the connection's wait limit is closed"));
            }
        };
        let service = self.service.clone();
        let token =
            request.headers().get(kiki_proto::TOKEN_METADATA_KEY).map(|v| v.to_str().map(String::from));
        // Boxed apart, and the request not captured by the answer's future: an async
        // block keeps every captured value's space for its whole life, and neither the
        // request nor the decoding state is needed once the call parks.
        let request = Box::pin(decode(request));
        Box::pin(async move {
            // Held while the call lives: dropped when it answers or its caller gives up.
            let _place: OwnedSemaphorePermit = place;
            let token = token.as_ref().map(|t| t.as_deref().map_err(drop));
            let answer = match (service.admit_peer_tool(token, "ThreadWait").await, request.await) {
                (Err(status), _) | (_, Err(status)) => Err(status),
                (Ok(()), Ok(r)) => service.wait(r).await,
            };
            Ok(match answer {
                Ok(response) => encode(&response),
                Err(status) => status.into_http(),
            })
        })
    }
}

fn answer_now(status: Status) -> Answer {
    Box::pin(std::future::ready(Ok(status.into_http())))
}

/// RESOURCE_EXHAUSTED for a wait past the connection's limit, saying what to do instead.
fn too_many_waits() -> Status {
    Status::resource_exhausted(format!(
        "ThreadWait: this connection already has {WAITS_PER_CONNECTION} waits parked, the most \
         one connection may hold; open another connection, or park fewer waits (one ThreadWait \
         waits for up to {WAIT_TARGETS_MAX} threads)"
    ))
}

/// The call's one request message. Only the body is kept past this point.
async fn decode(request: http::Request<Body>) -> Result<pb::ThreadWaitRequest, Status> {
    let (parts, body) = request.into_parts();
    if let Some(encoding) = parts.headers.get("grpc-encoding")
        && encoding != "identity"
    {
        return Err(Status::unimplemented(format!(
            "Content is compressed with `{}` which isn't supported",
            encoding.to_str().unwrap_or("?")
        )));
    }
    drop(parts);
    let mut bytes = Limited::new(body, REQUEST_MAX_BYTES + PREFIX)
        .collect()
        .await
        .map_err(|e| match e.downcast::<http_body_util::LengthLimitError>() {
            Ok(_) => {
                Status::out_of_range(format!("ThreadWait request: larger than {REQUEST_MAX_BYTES} bytes"))
            }
            Err(e) => Status::cancelled(format!("ThreadWait request body: {e}")),
        })?
        .to_bytes();
    if bytes.len() < PREFIX {
        return Err(Status::invalid_argument("ThreadWait: the request has no message"));
    }
    let compressed = bytes.get_u8();
    let length = bytes.get_u32() as usize;
    if compressed != 0 {
        return Err(Status::unimplemented("compressed messages are not supported"));
    }
    if length != bytes.len() {
        return Err(Status::invalid_argument(format!(
            "ThreadWait carries exactly one message: its prefix says {length} bytes, the body has {}",
            bytes.len()
        )));
    }
    pb::ThreadWaitRequest::decode(bytes).map_err(|e| pb::codec::not_a_valid::<pb::ThreadWaitRequest>(&e))
}

/// A successful answer: one length-prefixed message, then `grpc-status: 0`.
fn encode(response: &pb::ThreadWaitResponse) -> http::Response<Body> {
    let length = response.encoded_len();
    let mut frame = BytesMut::with_capacity(PREFIX + length);
    frame.put_u8(0);
    frame.put_u32(length as u32);
    response.encode(&mut frame).expect("capacity reserved for the whole message");
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from_static("0"));
    let body = Full::new(Bytes::from(frame)).with_trailers(std::future::ready(Some(Ok(trailers))));
    let mut answer = http::Response::new(Body::new(body));
    answer.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(body: Vec<u8>, encoding: Option<&'static str>) -> http::Request<Body> {
        let mut request = http::Request::new(Body::new(Full::new(Bytes::from(body))));
        *request.uri_mut() = http::Uri::from_static(PATH);
        if let Some(encoding) = encoding {
            request.headers_mut().insert("grpc-encoding", HeaderValue::from_static(encoding));
        }
        request
    }

    fn framed(flag: u8, message: &[u8]) -> Vec<u8> {
        let mut frame = vec![flag];
        frame.extend((message.len() as u32).to_be_bytes());
        frame.extend(message);
        frame
    }

    fn sample() -> pb::ThreadWaitRequest {
        pb::ThreadWaitRequest {
            targets: vec![pb::ThreadRef { session_id: "th_1".into(), ..Default::default() }],
            timeout_ms: Some(0),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn decodes_one_framed_message() {
        let decoded = decode(call(framed(0, &sample().encode_to_vec()), Some("identity"))).await;
        assert_eq!(decoded.expect("decoded"), sample());
    }

    #[tokio::test]
    async fn refuses_what_it_cannot_read_with_a_grpc_status() {
        let message = sample().encode_to_vec();
        let cases = [
            (call(framed(1, &message), None), tonic::Code::Unimplemented, "compressed"),
            (call(framed(0, &message), Some("gzip")), tonic::Code::Unimplemented, "gzip"),
            (call(Vec::new(), None), tonic::Code::InvalidArgument, "no message"),
            (
                call(framed(0, &[0xff; 11]), None),
                tonic::Code::InvalidArgument,
                "not a valid kiki.v1.ThreadWaitRequest",
            ),
            (call(framed(0, &message)[..PREFIX + 2].to_vec(), None), tonic::Code::InvalidArgument, "prefix"),
            (call(framed(0, &vec![0; REQUEST_MAX_BYTES + 1]), None), tonic::Code::OutOfRange, "larger than"),
        ];
        for (request, code, words) in cases {
            let status = decode(request).await.expect_err("refused");
            assert_eq!(status.code(), code, "{status:?}");
            assert!(status.message().contains(words), "{status:?} should say {words}");
        }
    }

    #[tokio::test]
    async fn an_answer_is_one_framed_message_then_status_ok() {
        let response = pb::ThreadWaitResponse { results: Vec::new(), timed_out: true };
        let answer = encode(&response);
        assert_eq!(answer.headers()[CONTENT_TYPE], "application/grpc");
        let collected = answer.into_body().collect().await.expect("body");
        let trailers = collected.trailers().cloned().expect("trailers");
        assert_eq!(trailers["grpc-status"], "0");
        let mut bytes = collected.to_bytes();
        assert_eq!(bytes.get_u8(), 0, "not compressed");
        assert_eq!(bytes.get_u32() as usize, bytes.len());
        assert_eq!(pb::ThreadWaitResponse::decode(bytes).expect("message"), response);
    }
}
