//! A handshake flood: valid QUIC Initial packets (each a fresh connection's first datagram,
//! a TLS ClientHello with kiki's ALPN and a stranger's certificate offered) sent at a
//! home's bridge port from many source ports, never followed up — what an attacker who
//! knows the port can cost a home. Built with quinn-proto's client state machine, so every
//! packet is what a real peer sends; none of its later packets is ever sent.

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A flood under way; [`Flood::stop`] ends it and says how many Initials went out.
pub struct Flood {
    sent: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// Connections made per client endpoint before it is thrown away (with their state).
const PER_ENDPOINT: usize = 1_000;

impl Flood {
    /// Sends about `per_second` Initials at `target`, round-robin from `ports` sockets (each
    /// its own source port), until stopped.
    pub fn start(target: SocketAddr, per_second: u32, ports: usize) -> Self {
        let sent = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (sent, stop) = (sent.clone(), stop.clone());
            std::thread::Builder::new()
                .name("kiki-flood".into())
                .spawn(move || flood(target, per_second, ports, &sent, &stop))
                .expect("flood thread")
        };
        Self { sent, stop, thread: Some(thread) }
    }

    /// Initials sent so far.
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// Ends the flood; the Initials sent in all.
    pub fn stop(mut self) -> u64 {
        self.halt();
        self.sent()
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        self.halt();
    }
}

fn flood(target: SocketAddr, per_second: u32, ports: usize, sent: &AtomicU64, stop: &AtomicBool) {
    let sockets: Vec<UdpSocket> =
        (0..ports.max(1)).map(|_| UdpSocket::bind("127.0.0.1:0").expect("a source port")).collect();
    // A stranger: a key of its own, offered as a client certificate like any peer's.
    let key = rcgen::KeyPair::generate().expect("key").serialize_pem();
    let identity = kiki_bridge::BridgeIdentity::from_key_pem(&key).expect("identity");
    let (tls, _) = kiki_bridge::tls::client_config(&identity, None).expect("tls");
    let crypto = quinn_proto::crypto::rustls::QuicClientConfig::try_from(tls).expect("quic tls");
    let config = quinn_proto::ClientConfig::new(Arc::new(crypto));
    let endpoint_config = Arc::new(quinn_proto::EndpointConfig::default());
    let mut endpoint = quinn_proto::Endpoint::new(endpoint_config.clone(), None, false, None);
    let mut made = 0;
    let mut buf = Vec::with_capacity(1500);
    // Sent in bursts every 5 ms, as many as the rate allows so far.
    let started = Instant::now();
    let mut n: u64 = 0;
    while !stop.load(Ordering::Relaxed) {
        let due = (started.elapsed().as_secs_f64() * f64::from(per_second)) as u64;
        while n < due {
            if made == PER_ENDPOINT {
                endpoint = quinn_proto::Endpoint::new(endpoint_config.clone(), None, false, None);
                made = 0;
            }
            made += 1;
            let now = Instant::now();
            let Ok((_, mut connection)) =
                endpoint.connect(now, config.clone(), target, kiki_bridge::tls::SERVER_NAME)
            else {
                continue;
            };
            buf.clear();
            if let Some(transmit) = connection.poll_transmit(now, 1, &mut buf) {
                let socket = &sockets[(n as usize) % sockets.len()];
                // A full socket buffer drops the packet, as the network would.
                if socket.send_to(&buf[..transmit.size], target).is_ok() {
                    sent.fetch_add(1, Ordering::Relaxed);
                }
            }
            n += 1;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
