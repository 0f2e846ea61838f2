//! Bridge transport on real QUIC over loopback: pinned mutual TLS, 0-RTT off, framed RPC.

use std::net::SocketAddr;

use std::sync::Arc;

use kiki_bridge::{BridgeEndpoint, BridgeIdentity, CallHandler, Link};
use kiki_proto as pb;
use prost::Message;

fn home() -> BridgeEndpoint {
    let key = rcgen::KeyPair::generate().expect("key");
    let identity = BridgeIdentity::from_key_pem(&key.serialize_pem()).expect("identity");
    BridgeEndpoint::bind("127.0.0.1:0".parse().expect("addr"), identity).expect("bind")
}

fn addr(e: &BridgeEndpoint) -> SocketAddr {
    e.local_addr().expect("local addr")
}

#[tokio::test]
async fn both_sides_learn_the_verified_peer_id() {
    let (a, b) = (home(), home());
    let b_accepts = {
        let b = b.clone();
        tokio::spawn(async move { b.accept().await.expect("incoming").expect("handshake") })
    };
    let to_b = a.connect(addr(&b), Some(b.home_id())).await.expect("pinned connect");
    assert_eq!(to_b.peer_home_id, b.home_id());
    let from_a = b_accepts.await.expect("task");
    assert_eq!(from_a.peer_home_id, a.home_id(), "the target learns the source from its certificate");
}

#[tokio::test]
async fn a_different_key_than_expected_is_refused_in_the_handshake() {
    let (a, b, c) = (home(), home(), home());
    let accept = {
        let b = b.clone();
        tokio::spawn(async move { b.accept().await })
    };
    let err = a.connect(addr(&b), Some(c.home_id())).await.expect_err("pinned to c, reached b");
    let expected = kiki_bridge::tls::WrongPeer { expected: c.home_id().into(), actual: b.home_id().into() };
    assert!(matches!(&err, kiki_bridge::EndpointError::WrongPeer(wrong) if *wrong == expected), "{err}");
    accept.abort();
}

/// 0-RTT is off: even a second connection to a known peer cannot send early data.
#[tokio::test]
async fn zero_rtt_is_off() {
    let (a, b) = (home(), home());
    let server = b.clone();
    tokio::spawn(async move { while let Some(_c) = server.accept().await {} });
    let first = a.connect(addr(&b), Some(b.home_id())).await.expect("first");
    first.connection.close(0u32.into(), b"done");
    // Dial again through a raw quinn endpoint with the same client TLS, and ask for 0-RTT.
    let identity =
        BridgeIdentity::from_key_pem(&rcgen::KeyPair::generate().expect("k").serialize_pem()).expect("id");
    let (tls, _) = kiki_bridge::tls::client_config(&identity, Some(b.home_id())).expect("tls");
    assert!(!tls.enable_early_data);
    let client = quinn::ClientConfig::new(std::sync::Arc::new(
        quinn::crypto::rustls::QuicClientConfig::try_from(tls).expect("quic tls"),
    ));
    let mut raw = quinn::Endpoint::client("127.0.0.1:0".parse().expect("addr")).expect("client");
    raw.set_default_client_config(client);
    for _ in 0..2 {
        let connecting = raw.connect(addr(&b), kiki_bridge::tls::SERVER_NAME).expect("connect");
        match connecting.into_0rtt() {
            Ok(_) => panic!("0-RTT must be refused"),
            Err(connecting) => {
                connecting.await.expect("a full handshake works");
            }
        }
    }
    let server_tls = kiki_bridge::tls::server_config(&identity).expect("server tls");
    assert_eq!(server_tls.max_early_data_size, 0);
}

#[tokio::test]
async fn a_peer_with_another_alpn_is_refused() {
    let b = home();
    let server = b.clone();
    tokio::spawn(async move { while let Some(_c) = server.accept().await {} });
    let identity =
        BridgeIdentity::from_key_pem(&rcgen::KeyPair::generate().expect("k").serialize_pem()).expect("id");
    let (mut tls, _) = kiki_bridge::tls::client_config(&identity, None).expect("tls");
    tls.alpn_protocols = vec![b"h3".to_vec()];
    let client = quinn::ClientConfig::new(std::sync::Arc::new(
        quinn::crypto::rustls::QuicClientConfig::try_from(tls).expect("quic tls"),
    ));
    let raw = quinn::Endpoint::client("127.0.0.1:0".parse().expect("addr")).expect("client");
    let result = raw.connect_with(client, addr(&b), kiki_bridge::tls::SERVER_NAME).expect("connect").await;
    assert!(result.is_err(), "no shared ALPN, no connection");
}

#[tokio::test]
async fn framed_calls_round_trip_concurrently() {
    let (a, b) = (home(), home());
    let server = b.clone();
    tokio::spawn(async move {
        let peer = server.accept().await.expect("incoming").expect("handshake");
        let handler: CallHandler = Arc::new(|request: Vec<u8>| {
            Box::pin(async move {
                let r = pb::ThreadRef::decode(request.as_slice()).expect("request");
                pb::ThreadRef { host_id: "answered".into(), ..r }.encode_to_vec()
            })
        });
        peer.serve(handler).await;
    });
    let peer = a.connect(addr(&b), Some(b.home_id())).await.expect("connect");
    let big = "x".repeat(400_000);
    let peer = Arc::new(peer);
    let calls = (0..8).map(|i| {
        let peer = peer.clone();
        let session = format!("{i}{big}");
        async move {
            let request =
                pb::ThreadRef { host_id: String::new(), workspace_id: String::new(), session_id: session };
            let reply = peer.call(request.encode_to_vec()).await?;
            Ok::<_, kiki_bridge::LinkError>(pb::ThreadRef::decode(reply.as_slice()).expect("reply"))
        }
    });
    let mut answers = Vec::new();
    for call in calls {
        answers.push(tokio::spawn(call));
    }
    for (i, answer) in answers.into_iter().enumerate() {
        let r = answer.await.expect("task").expect("call");
        assert_eq!(r.host_id, "answered");
        assert!(
            r.session_id.starts_with(&i.to_string()) && r.session_id.len() == big.len() + i.to_string().len()
        );
    }
}
