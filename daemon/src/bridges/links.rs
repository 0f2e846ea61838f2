//! Links: this home's connections to the peers it dials, over the transport seam (QUIC in
//! a running home). One connection per peer, dialed on first use, shared by every call to
//! that peer; a call that finds it lost redials once; one no call used for
//! [`IDLE_CONNECTION`] is let go by [`Links::run_idle`].

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kiki_bridge::{BridgeEndpoint, BridgeIdentity, Link, LinkError, Transport};
use kiki_proto::bridge::v1 as wire;
use prost::Message;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::error::{Error, Result};
use crate::store::{BridgeRecord, BridgeState};
use crate::sync::lock;

/// How long a remote call may take before it is reported as a link error: a ThreadWait
/// may legitimately be held for up to 60 s.
/// (This, the dial's bound and [`IDLE_CONNECTION`] stay on real time, not the home's
/// clock: they bound what the network and QUIC do — see `crate::time`.)
const CALL_TIMEOUT: Duration = Duration::from_secs(75);
/// How long a dialed connection no call uses stays open. Its keep-alives notice a peer that
/// vanished while calls are under way; kept forever, they would ping every peer ever dialed,
/// and hold a stranger's slot at a target that has not approved this home (yet).
const IDLE_CONNECTION: Duration = Duration::from_secs(30);

/// How long a dial to one of a bridge's addresses may go unanswered before the next is
/// dialed too (RFC 8305's connection attempt delay).
const NEXT_ADDRESS_AFTER: Duration = Duration::from_millis(250);

/// The connection to one peer, if dialed.
type ConnectionSlot = Arc<tokio::sync::Mutex<Option<Cached>>>;

/// A dialed peer's connection, and when a call last took it: one no call took for
/// [`IDLE_CONNECTION`] is let go (see [`Links::run_idle`]).
struct Cached {
    link: Arc<dyn Link>,
    taken: Instant,
}

pub(super) struct Links {
    /// The seam to the network (QUIC in a running home).
    endpoint: Arc<dyn Transport>,
    /// Connections to peers we dialed, by peer home id: a slot per peer, so dialing a peer
    /// that does not answer holds up calls to that peer only.
    connections: std::sync::Mutex<HashMap<String, ConnectionSlot>>,
    /// How long a dial may take (`[bridge] connect_timeout`).
    connect_timeout: Duration,
    /// Bridges whose target answered a call although this home does not know it approved
    /// them (yet): their grant is asked for at once (see `Pairing::run_learning`), so the
    /// first call after the target's owner approved makes the bridge active here.
    answered_unconfirmed: std::sync::Mutex<HashSet<String>>,
    /// Rung when `answered_unconfirmed` gets a bridge.
    pub(super) unconfirmed_answered: tokio::sync::Notify,
    /// The address each peer last answered at, of those its bridge lists (a team home's
    /// replicas): dialed first next time.
    answered_at: std::sync::Mutex<HashMap<String, SocketAddr>>,
}

impl Links {
    pub(super) fn new(endpoint: Arc<dyn Transport>, connect_timeout: Duration) -> Self {
        Self {
            endpoint,
            connections: Default::default(),
            connect_timeout,
            answered_unconfirmed: Default::default(),
            unconfirmed_answered: Default::default(),
            answered_at: Default::default(),
        }
    }

    /// The transport the links go over; it also accepts the peers' connections.
    pub(super) fn endpoint(&self) -> &Arc<dyn Transport> {
        &self.endpoint
    }

    /// This home's id, as its peers verify it.
    pub(super) fn home_id(&self) -> &str {
        self.endpoint.home_id()
    }

    /// Dials `addrs` (the replicas of one home) pinned to `expect` when given, the first
    /// first and each next one when the last has not answered within [`NEXT_ADDRESS_AFTER`]
    /// or failed (as happy eyeballs does), and takes the first connection made; the first
    /// failure if none is (a wrong peer at once). For a new bridge, the connection is kept
    /// for the peer's later calls once the caller knows who answered (see [`Links::keep`]).
    pub(super) async fn dial_any(
        &self,
        addrs: &[SocketAddr],
        expect: Option<&str>,
    ) -> std::result::Result<(SocketAddr, Arc<dyn Link>), kiki_bridge::EndpointError> {
        let mut waiting = addrs.iter().copied();
        let mut dialing = tokio::task::JoinSet::new();
        let mut first_failure = None;
        let dial_next = |dialing: &mut tokio::task::JoinSet<_>, next: Option<SocketAddr>| {
            let Some(addr) = next else { return false };
            let (endpoint, timeout, expect) =
                (self.endpoint.clone(), self.connect_timeout, expect.map(str::to_string));
            dialing.spawn(async move { (addr, dial(&*endpoint, timeout, addr, expect.as_deref()).await) });
            true
        };
        dial_next(&mut dialing, waiting.next());
        loop {
            tokio::select! {
                Some(done) = dialing.join_next() => {
                    let Ok((addr, dialed)) = done else { continue };
                    match dialed {
                        // The others, if any, are dropped with `dialing`.
                        Ok(link) => return Ok((addr, link)),
                        Err(e @ kiki_bridge::EndpointError::WrongPeer(_)) => return Err(e),
                        Err(e) => {
                            debug!(%addr, error = %e, "bridge address did not answer");
                            first_failure.get_or_insert(e);
                            if !dial_next(&mut dialing, waiting.next()) && dialing.is_empty() {
                                break;
                            }
                        }
                    }
                }
                () = tokio::time::sleep(NEXT_ADDRESS_AFTER), if waiting.len() > 0 => {
                    dial_next(&mut dialing, waiting.next());
                }
                else => break,
            }
        }
        Err(first_failure.unwrap_or_else(|| kiki_bridge::EndpointError::Connect {
            addr: SocketAddr::from(([0, 0, 0, 0], 0)),
            message: "no address to dial".into(),
        }))
    }

    /// Keeps `link` as the connection to `peer`.
    pub(super) async fn keep(&self, peer: &str, link: Arc<dyn Link>) {
        *self.connection_slot(peer).lock().await = Some(Cached { link, taken: Instant::now() });
    }

    /// Lets go of every connection and closes the endpoint (shutdown).
    pub(super) async fn close(&self) {
        lock(&self.connections).clear();
        self.endpoint.close().await;
    }

    /// One call over `bridge`, reconnecting once if the cached connection is gone. Dropped
    /// from `withdraw_after` on, its request is withdrawn (see `Link::call`).
    #[tracing::instrument(name = "bridge call", level = "debug", skip_all, fields(bridge_id = %bridge.id, peer = %bridge.peer_home_id))]
    pub(super) async fn call(
        &self,
        bridge: &BridgeRecord,
        call: &wire::BridgeCall,
        withdraw_after: Option<Instant>,
    ) -> Result<wire::BridgeReply> {
        self.call_in_current_span(bridge, call, withdraw_after).await
    }

    /// [`Links::call`] in the caller's span, for a caller whose span stands for the call and
    /// names its bridge (an outbox attempt): one span less per message carried, which is
    /// what tracing a cross-home send costs.
    pub(super) async fn call_in_current_span(
        &self,
        bridge: &BridgeRecord,
        call: &wire::BridgeCall,
        withdraw_after: Option<Instant>,
    ) -> Result<wire::BridgeReply> {
        let started = Instant::now();
        let request = traced_request(call, &crate::observe::traces::traceparent(&tracing::Span::current()));
        let mut failed: Option<Arc<dyn Link>> = None;
        for attempt in 0..2 {
            let peer = self.connection(bridge, failed.as_ref()).await.map_err(|e| took(e, started))?;
            let answer = send_request(peer.as_ref(), request.clone(), withdraw_after);
            match tokio::time::timeout(CALL_TIMEOUT, answer).await {
                Ok(Ok(reply)) => {
                    self.answered(bridge, &reply);
                    return Ok(reply);
                }
                Ok(Err(e)) if attempt == 0 && e.lost => {
                    debug!(error = %e, "bridge call failed; reconnecting");
                    failed = Some(peer);
                }
                Ok(Err(e)) => return Err(took(link_failure(&bridge.alias, e), started)),
                Err(_) => {
                    return Err(Error::Unavailable(format!(
                        "{}: no answer within {CALL_TIMEOUT:?}",
                        bridge.alias
                    )));
                }
            }
        }
        unreachable!("the loop returns on its second attempt")
    }

    /// Notes a bridge whose target served a call only an approved bridge gets served while
    /// this home does not know it approved.
    fn answered(&self, bridge: &BridgeRecord, reply: &wire::BridgeReply) {
        use wire::bridge_reply::Reply;
        let served = match &reply.reply {
            Some(Reply::ThreadList(_) | Reply::ThreadRead(_) | Reply::ThreadWait(_)) => true,
            Some(Reply::RoomJoin(_) | Reply::RoomPost(_) | Reply::RoomRead(_)) => true,
            Some(Reply::ThreadSend(sent)) => sent.status() != wire::SendStatus::Undeliverable,
            // A ping, pairing call or follow-up is answered whatever the grant; a refusal is none.
            _ => false,
        };
        if !served || matches!(bridge.state, BridgeState::Active | BridgeState::Revoked) {
            return;
        }
        if lock(&self.answered_unconfirmed).insert(bridge.id.clone()) {
            self.unconfirmed_answered.notify_one();
        }
    }

    /// The bridges [`Links::answered`] noted since the last time.
    pub(super) fn take_answered_unconfirmed(&self) -> Vec<String> {
        lock(&self.answered_unconfirmed).drain().collect()
    }

    /// The connection to the bridge's peer, dialed if there is none, it closed, or it is
    /// `failed` (a call on it just failed). Calls to one peer wait for one dial rather than
    /// each dialing, and a connection another call has just redialed is reused.
    async fn connection(
        &self,
        bridge: &BridgeRecord,
        failed: Option<&Arc<dyn Link>>,
    ) -> Result<Arc<dyn Link>> {
        let slot = self.connection_slot(&bridge.peer_home_id);
        let mut slot = slot.lock().await;
        if let Some(cached) = slot.as_mut()
            && !cached.link.is_closed()
            && !failed.is_some_and(|f| Arc::ptr_eq(f, &cached.link))
        {
            cached.taken = Instant::now();
            return Ok(cached.link.clone());
        }
        let mut addrs: Vec<SocketAddr> =
            bridge.address.split(',').filter_map(|a| a.trim().parse().ok()).collect();
        if addrs.is_empty() {
            return Err(Error::FailedPrecondition(format!("bridge {} has no usable address", bridge.id)));
        }
        // The address that answered last, first.
        if let Some(last) = lock(&self.answered_at).get(&bridge.peer_home_id)
            && let Some(at) = addrs.iter().position(|a| a == last)
        {
            addrs[..=at].rotate_right(1);
        }
        let (addr, peer) = self
            .dial_any(&addrs, Some(&bridge.peer_home_id))
            .await
            .map_err(|e| dial_failure(&bridge.alias, e))?;
        lock(&self.answered_at).insert(bridge.peer_home_id.clone(), addr);
        *slot = Some(Cached { link: peer.clone(), taken: Instant::now() });
        Ok(peer)
    }

    /// Lets go of the dialed connections no call has taken for [`IDLE_CONNECTION`] and none
    /// holds now, every few seconds until `stop` (the next call dials again).
    pub(super) async fn run_idle(&self, stop: CancellationToken, worker: crate::observe::workers::Worker) {
        loop {
            worker.idle();
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(IDLE_CONNECTION / 3) => {}
            }
            worker.busy();
            let slots: Vec<ConnectionSlot> = lock(&self.connections).values().cloned().collect();
            for slot in slots {
                // A slot busy dialing is in use.
                let Ok(mut slot) = slot.try_lock() else { continue };
                let idle = slot
                    .as_ref()
                    .is_some_and(|c| c.taken.elapsed() >= IDLE_CONNECTION && Arc::strong_count(&c.link) == 1);
                if idle {
                    // The last handle: dropping it closes the connection.
                    *slot = None;
                }
            }
        }
    }

    fn connection_slot(&self, peer: &str) -> ConnectionSlot {
        lock(&self.connections).entry(peer.to_string()).or_default().clone()
    }
}

/// One call over a link: the request encoded, the reply decoded. Dropped from
/// `withdraw_after` on, the request is withdrawn (see `Link::call`).
pub(super) async fn call_link(
    link: &dyn Link,
    call: &wire::BridgeCall,
    withdraw_after: Option<Instant>,
) -> std::result::Result<wire::BridgeReply, LinkError> {
    send_request(link, call.encode_to_vec(), withdraw_after).await
}

/// `call` encoded, continuing the trace `traceparent` names (if any) so that the target's
/// spans for it join it. The field is appended to the call's encoding rather than set on a
/// copy of the call: concatenated encodings decode as one message, and a send's content is
/// not copied for it.
fn traced_request(call: &wire::BridgeCall, traceparent: &str) -> Vec<u8> {
    let mut request = call.encode_to_vec();
    if !traceparent.is_empty() {
        let trace = wire::BridgeCall { call: None, traceparent: traceparent.to_string() };
        trace.encode(&mut request).expect("a Vec grows as needed");
    }
    request
}

/// An encoded call over a link, its reply decoded.
async fn send_request(
    link: &dyn Link,
    request: Vec<u8>,
    withdraw_after: Option<Instant>,
) -> std::result::Result<wire::BridgeReply, LinkError> {
    let reply = link.call(request, withdraw_after).await?;
    // A peer on another build may answer what this one cannot read: retrying repeats it.
    wire::BridgeReply::decode(reply.as_slice())
        .map_err(|e| LinkError::fault(format!("undecodable reply: {e}")))
}

/// Dials `addr` (pinned to `expect` when given), for at most `timeout`.
async fn dial(
    endpoint: &dyn Transport,
    timeout: Duration,
    addr: SocketAddr,
    expect: Option<&str>,
) -> std::result::Result<Arc<dyn Link>, kiki_bridge::EndpointError> {
    match tokio::time::timeout(timeout, endpoint.connect(addr, expect)).await {
        Ok(dialed) => dialed,
        // QUIC would wait out its idle timeout: the home's one bound on reaching a peer.
        Err(_) => Err(kiki_bridge::EndpointError::Connect {
            addr,
            message: format!(
                "no answer within {} (`[bridge] connect_timeout`)",
                humantime::format_duration(timeout)
            ),
        }),
    }
}

/// A failed call as this home's caller sees it: a lost link is worth retrying
/// (`UNAVAILABLE`), a faulty exchange is not.
/// A peer left unreached, with how long this home tried in all (a call may have waited for
/// a connection that turned out dead, then dialed again): the real time, not a bound.
pub(super) fn took(e: Error, started: Instant) -> Error {
    match e {
        Error::Unavailable(message) => {
            Error::Unavailable(format!("{message} ({:.1} s in all)", started.elapsed().as_secs_f64()))
        }
        other => other,
    }
}

pub(super) fn link_failure(what: &str, e: LinkError) -> Error {
    failure(e.lost, format!("{what}: {e}"))
}

/// A failed dial, likewise: another home answering at the address is no passing fault.
pub(super) fn dial_failure(what: &str, e: kiki_bridge::EndpointError) -> Error {
    failure(e.lost(), format!("{what}: {e}"))
}

fn failure(lost: bool, message: String) -> Error {
    if lost { Error::Unavailable(message) } else { Error::FailedPrecondition(message) }
}

/// Binds the home's QUIC endpoint for bridges. A fixed port may still be held for a moment
/// by this home's previous endpoint, so binding is retried briefly.
pub async fn quic_transport(
    key_pem: &str,
    listen: SocketAddr,
) -> std::result::Result<Arc<dyn Transport>, kiki_bridge::EndpointError> {
    let identity = BridgeIdentity::from_key_pem(key_pem)
        .map_err(|e| kiki_bridge::EndpointError::QuicTls(e.to_string()))?;
    let mut tries = 0;
    loop {
        match BridgeEndpoint::bind(listen, identity.clone()) {
            Ok(endpoint) => return Ok(Arc::new(endpoint)),
            Err(kiki_bridge::EndpointError::Bind { source, .. })
                if source.kind() == std::io::ErrorKind::AddrInUse && tries < 40 =>
            {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// A bridge's address: one `host:port`, or several separated by commas (a team home's
/// replicas, tried in turn); a host name stands for every address it resolves to.
pub(super) async fn resolve(address: &str) -> Result<Vec<SocketAddr>> {
    let mut all = Vec::new();
    for one in address.split(',').map(str::trim) {
        let resolved: Vec<SocketAddr> = match one.parse() {
            Ok(addr) => vec![addr],
            Err(_) => tokio::net::lookup_host(one).await.map(Iterator::collect).unwrap_or_default(),
        };
        if resolved.is_empty() {
            return Err(Error::invalid(
                "address",
                format!("{one:?} is not host:port (several are separated by commas)"),
            ));
        }
        for addr in resolved {
            if !all.contains(&addr) {
                all.push(addr);
            }
        }
    }
    Ok(all)
}
