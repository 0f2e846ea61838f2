//! An in-memory network implementing the [`Transport`] seam: homes "listen" on made-up
//! addresses, links are channels, and a partition between two homes is a switch. It runs the
//! daemon's real bridge logic deterministically and without sockets, for tests that need
//! faults QUIC on loopback cannot stage exactly.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, oneshot};

use crate::endpoint::EndpointError;
use crate::tls::WrongPeer;
use crate::transport::{BoxFuture, CallHandler, Link, LinkError, Transport, TrustCheck};

/// Calls waiting on one side of a link.
const LINK_QUEUE: usize = 256;
/// Links waiting to be accepted by one endpoint.
const ACCEPT_QUEUE: usize = 64;

type Call = (Vec<u8>, oneshot::Sender<Vec<u8>>);
/// A listening home: its id, and where its new links are handed over.
type Listener = (String, mpsc::Sender<Arc<dyn Link>>);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The network: who listens where, which pairs of homes are cut off, and which callers lose
/// their answers.
#[derive(Debug, Default)]
pub struct MemoryNetwork {
    listeners: Mutex<HashMap<SocketAddr, Listener>>,
    partitions: Mutex<HashSet<(String, String)>>,
    /// (caller, callee): the callee runs the call, the caller hears a failure.
    lost_answers: Mutex<HashSet<(String, String)>>,
    next_host: AtomicU16,
}

impl MemoryNetwork {
    pub fn new() -> Arc<Self> {
        Arc::new(Self { next_host: AtomicU16::new(1), ..Default::default() })
    }

    /// A new endpoint for the home `home_id` on a fresh address.
    pub fn endpoint(self: &Arc<Self>, home_id: &str) -> Arc<MemoryEndpoint> {
        // Each endpoint on an address of its own, as each home has on a real network.
        let [high, low] = self.next_host.fetch_add(1, Ordering::Relaxed).to_be_bytes();
        let addr = SocketAddr::from(([10, 0, high, low], 7443));
        let (tx, rx) = mpsc::channel(ACCEPT_QUEUE);
        lock(&self.listeners).insert(addr, (home_id.to_string(), tx));
        Arc::new(MemoryEndpoint {
            network: self.clone(),
            addr,
            home_id: home_id.to_string(),
            incoming: tokio::sync::Mutex::new(rx),
        })
    }

    /// Cuts (or heals) every link between two homes, both ways.
    pub fn partition(&self, a: &str, b: &str, cut: bool) {
        let mut partitions = lock(&self.partitions);
        for pair in [(a.to_string(), b.to_string()), (b.to_string(), a.to_string())] {
            if cut {
                partitions.insert(pair);
            } else {
                partitions.remove(&pair);
            }
        }
    }

    /// Makes `caller`'s calls to `callee` run there but fail on the way back (or heals that):
    /// the fault after which a caller retries something its peer already did.
    pub fn lose_answers(&self, caller: &str, callee: &str, lose: bool) {
        let pair = (caller.to_string(), callee.to_string());
        let mut lost = lock(&self.lost_answers);
        if lose {
            lost.insert(pair);
        } else {
            lost.remove(&pair);
        }
    }

    fn cut(&self, a: &str, b: &str) -> bool {
        lock(&self.partitions).contains(&(a.to_string(), b.to_string()))
    }

    fn answer_lost(&self, caller: &str, callee: &str) -> bool {
        lock(&self.lost_answers).contains(&(caller.to_string(), callee.to_string()))
    }
}

#[derive(Debug)]
pub struct MemoryEndpoint {
    network: Arc<MemoryNetwork>,
    addr: SocketAddr,
    home_id: String,
    incoming: tokio::sync::Mutex<mpsc::Receiver<Arc<dyn Link>>>,
}

/// One side of a link between two homes.
#[derive(Debug)]
pub struct MemoryLink {
    network: Arc<MemoryNetwork>,
    local: String,
    peer: String,
    peer_addr: SocketAddr,
    to_peer: mpsc::Sender<Call>,
    from_peer: Mutex<Option<mpsc::Receiver<Call>>>,
    closed: Arc<AtomicBool>,
}

impl Link for MemoryLink {
    fn peer_home_id(&self) -> &str {
        &self.peer
    }

    fn peer_addr(&self) -> SocketAddr {
        self.peer_addr
    }

    /// In memory nothing is retransmitted after a partition, so nothing needs withdrawing.
    fn call(
        &self,
        request: Vec<u8>,
        _withdraw_after: Option<std::time::Instant>,
    ) -> BoxFuture<'_, Result<Vec<u8>, LinkError>> {
        Box::pin(async move {
            if self.network.cut(&self.local, &self.peer) {
                return Err(LinkError::lost(format!("partitioned from {}", self.peer)));
            }
            let (reply, answer) = oneshot::channel();
            self.to_peer.send((request, reply)).await.map_err(|_| LinkError::lost("link closed"))?;
            let response = answer.await.map_err(|_| LinkError::lost("the peer dropped the call"))?;
            if self.network.cut(&self.local, &self.peer) {
                return Err(LinkError::lost(format!("partitioned from {}", self.peer)));
            }
            if self.network.answer_lost(&self.local, &self.peer) {
                return Err(LinkError::lost(format!("the answer from {} was lost", self.peer)));
            }
            Ok(response)
        })
    }

    /// In memory a peer holds nothing beyond its calls in the link's queue: no allowance.
    fn serve(&self, handler: CallHandler, _trusted: TrustCheck) -> BoxFuture<'static, ()> {
        let inbox = lock(&self.from_peer).take();
        Box::pin(async move {
            let Some(mut inbox) = inbox else { return };
            while let Some((request, reply)) = inbox.recv().await {
                let handler = handler.clone();
                tokio::spawn(async move {
                    let _ = reply.send(handler(request).await);
                });
            }
        })
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst) || self.to_peer.is_closed()
    }
}

impl Transport for MemoryEndpoint {
    fn home_id(&self) -> &str {
        &self.home_id
    }

    fn local_addr(&self) -> String {
        self.addr.to_string()
    }

    fn connect<'a>(
        &'a self,
        addr: SocketAddr,
        expect: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Arc<dyn Link>, EndpointError>> {
        Box::pin(async move {
            let refused = |message: String| EndpointError::Connect { addr, message };
            let (peer, accept) = lock(&self.network.listeners)
                .get(&addr)
                .cloned()
                .ok_or_else(|| refused("nobody listens there".into()))?;
            if self.network.cut(&self.home_id, &peer) {
                return Err(refused("no answer (partitioned)".into()));
            }
            if let Some(expected) = expect
                && expected != peer
            {
                return Err(EndpointError::WrongPeer(WrongPeer {
                    expected: expected.to_string(),
                    actual: peer,
                }));
            }
            let (to_server, server_inbox) = mpsc::channel(LINK_QUEUE);
            let (to_client, client_inbox) = mpsc::channel(LINK_QUEUE);
            let closed = Arc::new(AtomicBool::new(false));
            let server_side = MemoryLink {
                network: self.network.clone(),
                local: peer.clone(),
                peer: self.home_id.clone(),
                peer_addr: self.addr,
                to_peer: to_client,
                from_peer: Mutex::new(Some(server_inbox)),
                closed: closed.clone(),
            };
            accept.send(Arc::new(server_side)).await.map_err(|_| refused("the endpoint is closed".into()))?;
            Ok(Arc::new(MemoryLink {
                network: self.network.clone(),
                local: self.home_id.clone(),
                peer,
                peer_addr: addr,
                to_peer: to_server,
                from_peer: Mutex::new(Some(client_inbox)),
                closed,
            }) as Arc<dyn Link>)
        })
    }

    fn accept(&self) -> BoxFuture<'_, Option<Arc<dyn Link>>> {
        Box::pin(async move { self.incoming.lock().await.recv().await })
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            lock(&self.network.listeners).remove(&self.addr);
            self.incoming.lock().await.close();
        })
    }
}
