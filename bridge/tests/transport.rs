//! Bridge transport on real QUIC over loopback: pinned mutual TLS, 0-RTT off, framed RPC.
//!
//! A test binary of its own, apart from `kiki-tests`' one integration binary: it links only
//! this crate (and `kiki-proto` for messages to carry), so it builds in seconds without the
//! daemon, and it uses only the crate's public API, as the daemon does.

use std::net::SocketAddr;

use std::sync::Arc;

use kiki_bridge::{BridgeEndpoint, BridgeIdentity, CallHandler, Link, TrustCheck};
use kiki_proto as pb;
use prost::Message;

/// A new home's identity, from a fresh key.
fn identity() -> BridgeIdentity {
    BridgeIdentity::from_key_pem(&rcgen::KeyPair::generate().expect("key").serialize_pem()).expect("identity")
}

fn home() -> BridgeEndpoint {
    BridgeEndpoint::bind("127.0.0.1:0".parse().expect("addr"), identity()).expect("bind")
}

fn addr(e: &BridgeEndpoint) -> SocketAddr {
    e.local_addr().expect("local addr")
}

/// Every peer has a bridge here.
fn trusted() -> TrustCheck {
    Arc::new(|| Box::pin(async { true }))
}

/// Whether the peer has a bridge here is `flag`.
fn trusted_if(flag: &Arc<std::sync::atomic::AtomicBool>) -> TrustCheck {
    let flag = flag.clone();
    Arc::new(move || {
        let trusted = flag.load(std::sync::atomic::Ordering::SeqCst);
        Box::pin(async move { trusted })
    })
}

/// Echoes each request.
fn echo() -> CallHandler {
    Arc::new(|request: Vec<u8>| Box::pin(async move { request }))
}

#[tokio::test]
async fn both_sides_learn_the_verified_peer_id() {
    let (a, b) = (home(), home());
    let b_accepts = {
        let b = b.clone();
        tokio::spawn(async move { b.accept().await.expect("incoming") })
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

/// A raw quinn client that asks for 0-RTT, pinned to `server_id`: kiki's client TLS with
/// early data turned on (it is off in kiki's own). Its session tickets stay in its config.
fn early_data_client(server_id: &str) -> quinn::Endpoint {
    let identity = identity();
    let (mut tls, _) = kiki_bridge::tls::client_config(&identity, Some(server_id)).expect("tls");
    assert!(!tls.enable_early_data, "kiki's own client never sends early data");
    tls.enable_early_data = true;
    let client = quinn::ClientConfig::new(Arc::new(
        quinn::crypto::rustls::QuicClientConfig::try_from(tls).expect("quic tls"),
    ));
    let mut raw = quinn::Endpoint::client("127.0.0.1:0".parse().expect("addr")).expect("client");
    raw.set_default_client_config(client);
    raw
}

/// Whether `client` gets to send 0-RTT data to `server` on a later connection, trying for up
/// to 3 s after a first one (whose session tickets may take a moment to arrive).
async fn a_later_connection_gets_0rtt(client: &quinn::Endpoint, server: SocketAddr) -> bool {
    let first = client.connect(server, kiki_bridge::tls::SERVER_NAME).expect("connect").await.expect("first");
    let started = std::time::Instant::now();
    let granted = loop {
        let connecting = client.connect(server, kiki_bridge::tls::SERVER_NAME).expect("connect");
        match connecting.into_0rtt() {
            Ok((connection, accepted)) => {
                let _ = accepted.await;
                connection.close(0u32.into(), b"done");
                break true;
            }
            Err(connecting) => {
                connecting.await.expect("a full handshake works").close(0u32.into(), b"done");
            }
        }
        if started.elapsed() > std::time::Duration::from_secs(3) {
            break false;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    first.close(0u32.into(), b"done");
    granted
}

/// 0-RTT is off: a client that asks for it on its second connection to a kiki endpoint gets
/// a full handshake — while the same client gets 0-RTT from a server that allows it.
#[tokio::test]
async fn zero_rtt_is_off() {
    let b = home();
    let server = b.clone();
    tokio::spawn(async move { while let Some(_c) = server.accept().await {} });
    assert!(!a_later_connection_gets_0rtt(&early_data_client(b.home_id()), addr(&b)).await);

    // The control: kiki's server TLS with early data allowed, on a raw quinn endpoint.
    let identity = identity();
    let mut tls = kiki_bridge::tls::server_config(&identity).expect("server tls");
    assert_eq!(tls.max_early_data_size, 0, "kiki's own server accepts no early data");
    tls.max_early_data_size = u32::MAX;
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(tls).expect("quic tls");
    let open = quinn::Endpoint::server(
        quinn::ServerConfig::with_crypto(Arc::new(crypto)),
        "127.0.0.1:0".parse().expect("addr"),
    )
    .expect("server");
    let accepting = open.clone();
    tokio::spawn(async move {
        while let Some(incoming) = accepting.accept().await {
            tokio::spawn(async move {
                if let Ok(connecting) = incoming.accept() {
                    let _ = connecting.await;
                }
            });
        }
    });
    let to_open = early_data_client(identity.home_id());
    assert!(
        a_later_connection_gets_0rtt(&to_open, open.local_addr().expect("addr")).await,
        "the control: this client does get 0-RTT where it is allowed"
    );
}

#[tokio::test]
async fn a_peer_with_another_alpn_is_refused() {
    let b = home();
    let server = b.clone();
    tokio::spawn(async move { while let Some(_c) = server.accept().await {} });
    let identity = identity();
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
        let peer = server.accept().await.expect("incoming");
        let handler: CallHandler = Arc::new(|request: Vec<u8>| {
            Box::pin(async move {
                let r = pb::ThreadRef::decode(request.as_slice()).expect("request");
                pb::ThreadRef { host_id: "answered".into(), ..r }.encode_to_vec()
            })
        });
        peer.serve(handler, trusted()).await;
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
            let reply = peer.call(request.encode_to_vec(), None).await?;
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

/// Requests are bounded on both sides: the caller refuses to send one over
/// `MAX_REQUEST`, and the server drops a stream whose frame is over it or whose length
/// prefix lies, without calling the handler or holding what the prefix claimed.
#[tokio::test]
async fn oversized_or_malformed_requests_never_reach_the_handler() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let (a, b) = (home(), home());
    let handled = Arc::new(AtomicUsize::new(0));
    let server = b.clone();
    let counted = handled.clone();
    tokio::spawn(async move {
        let peer = server.accept().await.expect("incoming");
        let handler: CallHandler = Arc::new(move |request: Vec<u8>| {
            counted.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move { request })
        });
        peer.serve(handler, trusted()).await;
    });
    let peer = a.connect(addr(&b), Some(b.home_id())).await.expect("connect");

    let refused =
        peer.call(vec![7; kiki_bridge::rpc::MAX_REQUEST + 1], None).await.expect_err("over the limit");
    assert!(refused.message.contains(&kiki_bridge::rpc::MAX_REQUEST.to_string()), "{refused}");
    assert!(!refused.lost, "a fault of the exchange, not of the link: a retry repeats it");

    // By hand: a body over the limit, then a prefix that claims more than the body holds.
    let raw = |frame: Vec<u8>| {
        let connection = peer.connection.clone();
        async move {
            let (mut send, mut recv) = connection.open_bi().await.expect("stream");
            // The server may stop reading before all of it is sent.
            let _ = send.write_all(&frame).await;
            let _ = send.finish();
            recv.read_to_end(1024).await.unwrap_or_default()
        }
    };
    let mut oversized = ((kiki_bridge::rpc::MAX_REQUEST + 1) as u32).to_be_bytes().to_vec();
    oversized.extend(vec![7; kiki_bridge::rpc::MAX_REQUEST + 1]);
    assert!(raw(oversized).await.is_empty(), "no answer to an oversized frame");
    let mut lying = 1_000_000u32.to_be_bytes().to_vec();
    lying.extend(b"short");
    assert!(raw(lying).await.is_empty(), "no answer to a frame shorter than its prefix");
    let mut trailing = 5u32.to_be_bytes().to_vec();
    trailing.extend(b"short, and more");
    assert!(raw(trailing).await.is_empty(), "no answer to a frame longer than its prefix");

    // The connection still serves well-formed calls, and only those reached the handler.
    assert_eq!(peer.call(b"fine".to_vec(), None).await.expect("call"), b"fine");
    assert_eq!(handled.load(Ordering::SeqCst), 1);
}

/// Until the daemon says a peer has a bridge, it gets a stranger's allowance: requests of at
/// most `MAX_STRANGER_REQUEST`, `STRANGER_STREAMS` at a time. Trusted, the same connection
/// opens up: large requests, many at once.
#[tokio::test]
async fn a_stranger_sends_small_requests_a_few_at_a_time_until_trusted() {
    use kiki_bridge::endpoint::STRANGER_STREAMS;
    use kiki_bridge::rpc::MAX_STRANGER_REQUEST;
    use std::time::Duration;
    let (a, b) = (home(), home());
    let known = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (server, trust) = (b.clone(), trusted_if(&known));
    tokio::spawn(async move {
        let peer = server.accept().await.expect("incoming");
        peer.serve(echo(), trust).await;
    });
    let peer = a.connect(addr(&b), Some(b.home_id())).await.expect("connect");
    assert_eq!(peer.call(b"ping".to_vec(), None).await.expect("a small call"), b"ping");
    peer.call(vec![7; MAX_STRANGER_REQUEST + 1], None).await.expect_err("over a stranger's limit");

    // Its streams, open and unfinished, take all it may have; another call waits.
    let mut open = Vec::new();
    for _ in 0..STRANGER_STREAMS {
        let (mut send, recv) = peer.connection.open_bi().await.expect("stream");
        send.write_all(&[0, 0]).await.expect("part of a prefix");
        open.push((send, recv));
    }
    let waiting = tokio::time::timeout(Duration::from_millis(500), peer.call(b"fifth".to_vec(), None)).await;
    assert!(waiting.is_err(), "a fifth stream at once: {waiting:?}");

    known.store(true, std::sync::atomic::Ordering::SeqCst);
    for (mut send, _) in open {
        send.reset(0u32.into()).expect("reset");
    }
    assert_eq!(peer.call(b"fifth".to_vec(), None).await.expect("answered"), b"fifth");
    let calls: Vec<_> = (0..16)
        .map(|_| {
            let peer = peer.clone();
            tokio::spawn(async move { peer.call(vec![7; 400_000], None).await })
        })
        .collect();
    for call in calls {
        let answer = call.await.expect("task").expect("trusted: large calls, many at once");
        assert_eq!(answer.len(), 400_000);
    }
}

/// Fresh keys are free, so connections of peers without a bridge share a few slots: one
/// more is closed at once, and a slot frees when a stranger goes away.
#[tokio::test]
async fn strangers_share_a_few_connections() {
    use kiki_bridge::endpoint::MAX_STRANGER_CONNECTIONS;
    let b = home();
    let server = b.clone();
    let stranger = trusted_if(&Arc::new(std::sync::atomic::AtomicBool::new(false)));
    tokio::spawn(async move {
        while let Some(peer) = server.accept().await {
            tokio::spawn(peer.serve(echo(), stranger.clone()));
        }
    });
    let mut strangers = Vec::new();
    for _ in 0..MAX_STRANGER_CONNECTIONS {
        let a = home();
        let peer = a.connect(addr(&b), Some(b.home_id())).await.expect("connect");
        assert_eq!(peer.call(b"hi".to_vec(), None).await.expect("served"), b"hi");
        strangers.push((a, peer));
    }
    let one_more = home();
    let peer = one_more.connect(addr(&b), Some(b.home_id())).await.expect("the handshake succeeds");
    peer.call(b"hi".to_vec(), None).await.expect_err("no slot left: closed at once");
    assert!(peer.is_closed());

    let (gone, connection) = strangers.pop().expect("a stranger");
    connection.connection.close(0u32.into(), b"bye");
    drop(gone);
    // Once the server has seen it go (a moment later), a new stranger gets its slot.
    let again = home();
    let mut answered = None;
    for _ in 0..50 {
        let peer = again.connect(addr(&b), Some(b.home_id())).await.expect("connect");
        if let Ok(answer) = peer.call(b"hi".to_vec(), None).await {
            answered = Some(answer);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(answered.is_some(), "a freed slot is taken again");
}

/// A dialer's certificate check that takes `pause` (then accepts any certificate): its
/// handshake stalls at the server, waiting for the dialer's last flight.
#[derive(Debug)]
struct SlowVerifier {
    pause: std::time::Duration,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl rustls::client::danger::ServerCertVerifier for SlowVerifier {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        std::thread::sleep(self.pause);
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &rustls::pki_types::CertificateDer<'_>,
        _dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::General("TLS 1.3 only".into()))
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

/// Handshakes run side by side: one that stalls (its dialer takes 3 s to check the server's
/// certificate) holds up no other peer's connection.
#[tokio::test]
async fn a_stalled_handshake_holds_up_no_other() {
    use std::time::{Duration, Instant};
    let (a, b) = (home(), home());
    let server = b.clone();
    tokio::spawn(async move {
        while let Some(peer) = server.accept().await {
            tokio::spawn(peer.serve(echo(), trusted()));
        }
    });
    let (target, target_id) = (addr(&b), b.home_id().to_string());
    let stalled = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        runtime.block_on(async move {
            let (mut tls, _) = kiki_bridge::tls::client_config(&identity(), Some(&target_id)).expect("tls");
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            tls.dangerous()
                .set_certificate_verifier(Arc::new(SlowVerifier { pause: Duration::from_secs(3), provider }));
            let client = quinn::ClientConfig::new(Arc::new(
                quinn::crypto::rustls::QuicClientConfig::try_from(tls).expect("quic tls"),
            ));
            let raw = quinn::Endpoint::client("127.0.0.1:0".parse().expect("addr")).expect("client");
            let connecting =
                raw.connect_with(client, target, kiki_bridge::tls::SERVER_NAME).expect("connect");
            let _ = connecting.await;
        });
    });
    // The stalled dialer's first flight has reached the server.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let peer = a.connect(addr(&b), Some(b.home_id())).await.expect("connect");
    assert_eq!(peer.call(b"hi".to_vec(), None).await.expect("served"), b"hi");
    assert!(started.elapsed() < Duration::from_millis(1500), "waited {:?}", started.elapsed());
    stalled.join().expect("the stalled dialer");
}
