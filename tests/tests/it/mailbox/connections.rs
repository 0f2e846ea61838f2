//! One connection's calls: parked waits leave its other calls free, it parks a bounded
//! number of them, and a body that is not a protobuf message is refused.

use std::collections::HashMap;
use std::time::Duration;

use kiki_proto as pb;
use kiki_tests::{TestHome, eventually, local};
use tonic::Code;

use super::{send, wait_req};

/// A ThreadWait on `thread` that parks for 30 s, on `client`'s connection.
fn park_wait(
    client: &kiki_client::Client,
    thread: &str,
) -> tokio::task::JoinHandle<Result<pb::ThreadWaitResponse, tonic::Status>> {
    let mut threads = client.threads();
    let request = pb::ThreadWaitRequest {
        targets: vec![local(thread)],
        timeout_ms: Some(30_000),
        ..Default::default()
    };
    tokio::spawn(async move { threads.thread_wait(request).await.map(|r| r.into_inner()) })
}

fn all_parked<T>(waits: &[tokio::task::JoinHandle<T>]) -> bool {
    waits.iter().all(|wait| !wait.is_finished())
}

/// Waits parked on a connection leave its other calls free: a send and a list on the same
/// channel answer while every wait is still parked.
#[tokio::test]
async fn parked_waits_do_not_hold_up_other_calls_on_their_connection() {
    let home = TestHome::builder().start().await;
    let idle = home.thread("echo", None).await;
    let target = home.thread("echo", None).await;
    let waits: Vec<_> = (0..100).map(|_| park_wait(home.client(), &idle.id)).collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(all_parked(&waits), "the waits park (the thread is idle)");

    let sent = home.client().threads().thread_send(send(&target.id, "past the waits", "k")).await;
    assert!(all_parked(&waits), "the send answered while every wait was parked");
    assert_eq!(sent.expect("send").into_inner().status(), pb::SendStatus::Delivered);
    let listed = home.client().threads().thread_list(pb::ThreadListRequest::default()).await;
    assert!(all_parked(&waits), "the list answered while every wait was parked");
    assert_eq!(listed.expect("list").into_inner().threads.len(), 2);
    for wait in waits {
        wait.abort();
    }
}

/// One connection parks at most `WAITS_PER_CONNECTION` waits: one more is refused with
/// RESOURCE_EXHAUSTED naming the limit, a wait given up frees its place, and another
/// connection has its own.
#[tokio::test]
async fn a_connection_parks_a_bounded_number_of_waits() {
    use kiki_daemon::grpc::WAITS_PER_CONNECTION;
    let home = TestHome::builder().start().await;
    let idle = home.thread("echo", None).await;
    let mut waits: Vec<_> = (0..WAITS_PER_CONNECTION).map(|_| park_wait(home.client(), &idle.id)).collect();
    // A probe that returns at once passes until every wait has taken its place. A probe
    // holds a place while it runs, so a wait arriving then is refused: it is parked again.
    let refused = eventually("every wait parked", || {
        for wait in waits.iter_mut().filter(|wait| wait.is_finished()) {
            *wait = park_wait(home.client(), &idle.id);
        }
        async { wait_req(&home, &[&idle.id], Some(0), HashMap::new()).await.err() }
    })
    .await;
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(refused.message().contains(&WAITS_PER_CONNECTION.to_string()), "names the limit: {refused:?}");
    assert!(refused.message().contains("another connection"), "says what to do: {refused:?}");
    assert!(all_parked(&waits), "the refused wait was one too many, no parked wait ended");

    home.client().threads().thread_list(pb::ThreadListRequest::default()).await.expect("other calls pass");
    let other = kiki_client::Client::connect(&home.handle().socket_path()).await.expect("connect");
    let elsewhere =
        pb::ThreadWaitRequest { targets: vec![local(&idle.id)], timeout_ms: Some(0), ..Default::default() };
    other.threads().thread_wait(elsewhere).await.expect("another connection has its own waits");

    // A wait its caller gives up frees its place.
    waits.pop().expect("a wait").abort();
    eventually("the given-up wait's place", || async {
        wait_req(&home, &[&idle.id], Some(0), HashMap::new()).await.ok()
    })
    .await;
    assert!(all_parked(&waits));
    for wait in waits {
        wait.abort();
    }
}

/// Sends raw bytes as a call's one message and hands back the raw reply.
#[derive(Clone, Copy, Default)]
struct RawCodec;

impl tonic::codec::Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> RawCodec {
        RawCodec
    }

    fn decoder(&mut self) -> RawCodec {
        RawCodec
    }
}

impl tonic::codec::Encoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn encode(&mut self, item: Vec<u8>, buf: &mut tonic::codec::EncodeBuf<'_>) -> Result<(), tonic::Status> {
        prost::bytes::BufMut::put_slice(buf, &item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn decode(&mut self, buf: &mut tonic::codec::DecodeBuf<'_>) -> Result<Option<Vec<u8>>, tonic::Status> {
        let remaining = prost::bytes::Buf::remaining(buf);
        Ok(Some(prost::bytes::Buf::copy_to_bytes(buf, remaining).to_vec()))
    }
}

/// A body that is not a protobuf message is the caller's error, INVALID_ARGUMENT — through
/// the generated services and through ThreadWait's own route alike — and changes nothing.
#[tokio::test]
async fn a_garbage_request_body_is_an_invalid_argument() {
    let home = TestHome::builder().start().await;
    // A field key whose varint never ends.
    let garbage = vec![0xff; 11];
    for (method, message) in [
        ("ThreadCreate", "kiki.v1.ThreadCreateRequest"),
        ("ThreadWait", "kiki.v1.ThreadWaitRequest"),
        ("ThreadList", "kiki.v1.ThreadListRequest"),
    ] {
        let mut grpc = tonic::client::Grpc::new(home.client().channel());
        grpc.ready().await.expect("ready");
        let path = format!("/kiki.v1.ThreadService/{method}");
        let path = tonic::codegen::http::uri::PathAndQuery::try_from(path).expect("path");
        let status = grpc
            .unary(tonic::Request::new(garbage.clone()), path, RawCodec)
            .await
            .expect_err("garbage is refused");
        assert_eq!(status.code(), Code::InvalidArgument, "{method}: {status:?}");
        assert!(status.message().contains(message), "{method}: names the message: {status:?}");
    }
    let listed = home.client().threads().thread_list(pb::ThreadListRequest::default()).await.expect("list");
    assert!(listed.into_inner().threads.is_empty(), "nothing was created");
}
