//! Bridges: owner-approved, one-way links between homes (contract §3).
//!
//! - **Target side** ([`Bridges::handle`]): every call from a peer is checked here, on every
//!   call, against the inbound bridge approved for the peer's verified home id: an unknown
//!   peer can only file a pairing request (rate-limited); ThreadList and ThreadRead need
//!   `read` and stay inside the granted workspaces; a revoked bridge answers
//!   `bridge_revoked` at once.
//! - **Source side**: `kiki bridge request` dials the target (pinned with `--expect`), files
//!   the request and keeps an outbound bridge; remote ThreadList/ThreadRead go over it.
//!   `kiki bridge list` pings every outbound bridge, so health comes from real round trips.
//!
//! Cross-home ThreadSend: the target's side is in [`inbox`], the source's outbox in [`outbox`].

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kiki_bridge::{BridgeEndpoint, BridgeIdentity, CallHandler, Link, LinkError, Transport, TrustCheck};
use kiki_proto as pb;
use pb::bridge_call::Call;
use pb::bridge_reply::Reply;
use prost::Message;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

mod inbox;
mod outbox;
mod receipts;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::store::{BridgeRecord, BridgeRequestRecord, EventRecord, OutboxRecord, ReceiptRecord, Store};
use crate::sync::{KeyLocks, lock};
use crate::threads::{Threads, new_id};
use crate::time::now_ms;

/// What a bridge can grant.
pub const PERMISSIONS: [&str; 4] = ["read", "send", "wake", "wait"];
/// Pairing requests one peer may file per [`REQUEST_WINDOW`].
const REQUESTS_PER_WINDOW: usize = 5;
const REQUEST_WINDOW: Duration = Duration::from_secs(60);
/// Requests waiting for the owner's decision, from all peers together: a new key is a new
/// peer, so the per-peer limit alone would let anyone fill this home's list (and store).
const MAX_WAITING_REQUESTS: usize = 32;
/// Of those, the most from one network (see [`network_of`]): a new key costs nothing, an
/// address does, so one machine cannot take the owner's whole list.
const MAX_WAITING_PER_NETWORK: usize = 8;
/// How often a busy link's `last_success` is written (every call would be a write).
const HEALTH_EVERY: Duration = Duration::from_secs(10);
/// How long `kiki bridge list` waits for each peer's answer.
const PING_TIMEOUT: Duration = Duration::from_secs(2);
/// How long dialing a peer may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a remote call may take before it is reported as a link error: a ThreadWait
/// may legitimately be held for up to 60 s.
const CALL_TIMEOUT: Duration = Duration::from_secs(75);

#[derive(Clone)]
pub struct Bridges {
    inner: Arc<Inner>,
}

/// The connection to one peer, if dialed.
type ConnectionSlot = Arc<tokio::sync::Mutex<Option<Cached>>>;

/// A dialed peer's connection, and when a call last took it: one no call took for
/// [`IDLE_CONNECTION`] is let go (see [`Bridges::run_idle_connections`]).
struct Cached {
    link: Arc<dyn Link>,
    taken: Instant,
}

/// How long a dialed connection no call uses stays open. Its keep-alives notice a peer that
/// vanished while calls are under way; kept forever, they would ping every peer ever dialed,
/// and hold a stranger's slot at a target that has not approved this home (yet).
const IDLE_CONNECTION: Duration = Duration::from_secs(30);

struct Inner {
    store: Arc<dyn Store>,
    threads: Threads,
    /// The seam to the network (QUIC in a running home).
    endpoint: Arc<dyn Transport>,
    config: Arc<Config>,
    /// Connections to peers we dialed, by peer home id: a slot per peer, so dialing a peer
    /// that does not answer holds up calls to that peer only.
    connections: std::sync::Mutex<HashMap<String, ConnectionSlot>>,
    /// Outcomes of sends already answered whose outbox write is still on its way: a send
    /// with the key looks here first (see `Bridges::run_recorder`).
    recording: std::sync::Mutex<outbox::Recording>,
    /// Told when `recording` queues its first outcome, or fills up.
    outcomes_queued: tokio::sync::Notify,
    /// Outbox entries with an attempt under way, or whose outcome waits in `recording`
    /// (see `outbox::Claim`).
    attempting: std::sync::Mutex<HashSet<String>>,
    /// Silent peers with a probe under way: the one entry the worker ships to such a peer
    /// at a time (see `Bridges::run_outbox`).
    probing: std::sync::Mutex<HashSet<String>>,
    /// The worker's attempts under way, by peer (see `outbox::PeerSlot`).
    shipping: std::sync::Mutex<HashMap<String, usize>>,
    /// Sends under way, one at a time per sender's key (shared with the mailbox).
    send_keys: Arc<KeyLocks>,
    /// Peers that answered since the last attempt that found them silent: none of their
    /// outbox entries is backing off (see `link_up`). Any other peer is silent, and gets
    /// one outbox attempt at a time (see `Bridges::probe`).
    settled: std::sync::Mutex<HashSet<String>>,
    /// When each peer last answered a call (see `link_up`).
    answered: std::sync::Mutex<HashMap<String, i64>>,
    /// When a call to each peer last went unanswered, in this run (see `Bridges::expire`).
    unreached: std::sync::Mutex<HashMap<String, i64>>,
    /// How often each peer's entries were made due again as it answered after a silence
    /// (see `link_up` and `Bridges::record`).
    resets: std::sync::Mutex<HashMap<String, u64>>,
    /// The bridge table, read through [`Bridges::all`].
    cache: tokio::sync::Mutex<Option<Arc<Vec<BridgeRecord>>>>,
    /// Set once at start (the mailbox and the bridges refer to each other).
    mailbox: std::sync::OnceLock<crate::mailbox::Mailbox>,
    /// Serialises changes to pairing requests: two racing approvals cannot both apply, and
    /// racing requests cannot pass their limits together.
    decisions: tokio::sync::Mutex<()>,
    /// Per peer, cancelled when its inbound bridge is revoked or turned off: its parked
    /// ThreadWait calls end at once instead of at their timeout.
    cut_off: std::sync::Mutex<HashMap<String, CancellationToken>>,
}

/// Parses and checks a permission list (`read,send` or repeated values).
pub fn parse_permissions(field: &'static str, values: &[String]) -> Result<Vec<String>> {
    let mut out: Vec<String> = Vec::new();
    for value in values.iter().flat_map(|v| v.split(',')).map(str::trim).filter(|v| !v.is_empty()) {
        if !PERMISSIONS.contains(&value) {
            return Err(Error::invalid(
                field,
                format!("unknown permission {value:?} (read, send, wake, wait)"),
            ));
        }
        if !out.iter().any(|p| p == value) {
            out.push(value.to_string());
        }
    }
    if out.is_empty() {
        return Err(Error::invalid(field, "name at least one of read, send, wake, wait"));
    }
    Ok(out)
}

/// The network whose pairing requests share one allowance: an IPv4 address, or an IPv6
/// /64 (what one machine or site is usually given).
fn network_of(ip: IpAddr) -> String {
    match ip.to_canonical() {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => {
            let [a, b, c, d, ..] = v6.segments();
            format!("{a:x}:{b:x}:{c:x}:{d:x}::/64")
        }
    }
}

fn wire_error(code: &str, message: impl Into<String>) -> pb::BridgeReply {
    pb::BridgeReply {
        reply: Some(Reply::Error(pb::WireError { code: code.into(), message: message.into() })),
    }
}

/// The longest bridge alias (and pairing name kept).
const ALIAS_MAX_CHARS: usize = 64;

/// Why `alias` cannot name a bridge, if it cannot: a user types it to address the bridge
/// (`ALIAS/SESSION`, `kiki bridge revoke ALIAS`) and reads it in listings, so it is one
/// printable word, and never taken for a home id, a bridge id or this home.
fn alias_problem(alias: &str) -> Option<&'static str> {
    if alias.is_empty() || alias.chars().count() > ALIAS_MAX_CHARS {
        Some("1-64 characters")
    } else if alias.chars().any(|c| c.is_control() || c.is_whitespace() || c == '/') {
        Some("no spaces, control characters or '/'")
    } else if alias == "local"
        || kiki_bridge::is_home_id(&alias.to_ascii_uppercase())
        || alias.starts_with("br_")
    {
        Some("not \"local\", and not shaped like a home id or a bridge id")
    } else {
        None
    }
}

/// How this home introduces itself in a pairing request: the machine's host name (the home
/// id is shown beside it anyway), or the id's first characters if there is none.
fn home_name(home_id: &str) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    match host.trim() {
        "" => home_id.chars().take(8).collect(),
        host => host.chars().take(64).collect(),
    }
}

/// A daemon error as the peer sees it.
fn to_wire(e: Error) -> pb::BridgeReply {
    let code = match &e {
        Error::InvalidArgument { .. } => "invalid_argument",
        Error::NotFound(_) => "thread_not_found",
        Error::PermissionDenied(_) => "permission_denied",
        Error::FailedPrecondition(_) => "failed_precondition",
        _ => "internal",
    };
    wire_error(code, e.to_string())
}

/// A peer's error as this home's caller sees it.
fn from_wire(host: &str, e: pb::WireError) -> Error {
    let message = format!("{host}: {}: {}", e.code, e.message);
    match e.code.as_str() {
        "thread_not_found" => Error::NotFound(message),
        "permission_denied" | "bridge_revoked" => Error::PermissionDenied(message),
        "bridge_disabled" => Error::Unavailable(message),
        "invalid_argument" => Error::InvalidArgument { field: "remote", message },
        "too_large" => Error::InvalidArgument { field: "content", message },
        _ => Error::FailedPrecondition(message),
    }
}

impl Bridges {
    /// Starts answering peers on `endpoint` and shipping the outbox, until `stop`.
    pub fn start(
        store: Arc<dyn Store>,
        threads: Threads,
        config: Arc<Config>,
        endpoint: Arc<dyn Transport>,
        send_keys: Arc<KeyLocks>,
        stop: CancellationToken,
    ) -> Self {
        let bridges = Self {
            inner: Arc::new(Inner {
                store,
                threads,
                endpoint,
                config,
                connections: std::sync::Mutex::new(HashMap::new()),
                settled: std::sync::Mutex::new(HashSet::new()),
                answered: std::sync::Mutex::new(HashMap::new()),
                unreached: std::sync::Mutex::new(HashMap::new()),
                resets: std::sync::Mutex::new(HashMap::new()),
                recording: std::sync::Mutex::new(Default::default()),
                outcomes_queued: tokio::sync::Notify::new(),
                attempting: std::sync::Mutex::new(HashSet::new()),
                probing: std::sync::Mutex::new(HashSet::new()),
                shipping: std::sync::Mutex::new(HashMap::new()),
                send_keys,
                mailbox: std::sync::OnceLock::new(),
                cache: tokio::sync::Mutex::new(None),
                decisions: tokio::sync::Mutex::new(()),
                cut_off: std::sync::Mutex::new(HashMap::new()),
            }),
        };
        tokio::spawn(bridges.clone().run_outbox(stop.clone()));
        tokio::spawn(bridges.clone().run_recorder(stop.clone()));
        tokio::spawn(bridges.clone().run_expiry(stop.clone()));
        tokio::spawn(bridges.clone().run_idle_connections(stop.clone()));
        let accepting = bridges.clone();
        tokio::spawn(async move {
            loop {
                let next = tokio::select! {
                    () = stop.cancelled() => break,
                    next = accepting.inner.endpoint.accept() => next,
                };
                let Some(peer) = next else { break };
                // A peer with a bridge here gets a known peer's allowance — also when the
                // bridge is disabled, or revoked within the time its keys are kept: its
                // retries and follow-ups about what it sent are answered (large sends
                // included), the rest refused. Anyone else gets a stranger's.
                let trusted: TrustCheck = {
                    let (checking, peer_id) = (accepting.clone(), peer.peer_home_id().to_string());
                    let kept = accepting.inner.config.mailbox.key_retention.as_millis() as i64;
                    Arc::new(move || {
                        let (checking, peer_id) = (checking.clone(), peer_id.clone());
                        Box::pin(async move {
                            let inbound =
                                checking.bridge(|b| b.direction == "inbound" && b.peer_home_id == peer_id);
                            matches!(
                                inbound.await,
                                Ok(Some(b)) if b.state != "revoked" || now_ms() - b.updated_at < kept
                            )
                        })
                    })
                };
                let serving = accepting.clone();
                let (peer_id, from) = (peer.peer_home_id().to_string(), peer.peer_addr().ip());
                let handler: CallHandler = Arc::new(move |request: Vec<u8>| {
                    let serving = serving.clone();
                    let peer_id = peer_id.clone();
                    Box::pin(async move {
                        let reply = match pb::BridgeCall::decode(request.as_slice()) {
                            Ok(call) => serving.handle(&peer_id, from, call).await,
                            Err(e) => wire_error("invalid_argument", format!("undecodable call: {e}")),
                        };
                        reply.encode_to_vec()
                    })
                });
                tokio::spawn(peer.serve(handler, trusted));
            }
            accepting.inner.endpoint.close().await;
        });
        bridges
    }

    /// Closes every bridge connection and the endpoint (shutdown).
    pub async fn close(&self) {
        // What the recorder had no time to write; a send answered after this writes its own.
        self.record_answered(true).await;
        lock(&self.inner.connections).clear();
        self.inner.endpoint.close().await;
    }

    /// Lets peers wait on this home's threads through `mailbox`.
    pub fn attach_mailbox(&self, mailbox: crate::mailbox::Mailbox) {
        let _ = self.inner.mailbox.set(mailbox);
    }

    /// The address the QUIC endpoint is bound to.
    pub fn listen_addr(&self) -> String {
        self.inner.endpoint.local_addr()
    }

    // ----- target side -----------------------------------------------------------------

    /// Answers one call from `peer` (a verified home id) at the address `from`. A call over
    /// an inbound bridge is a real round trip from the peer: it is that bridge's link health.
    pub async fn handle(&self, peer: &str, from: IpAddr, call: pb::BridgeCall) -> pb::BridgeReply {
        let reply = self.answer(peer, from, call).await;
        self.heard_from(peer).await;
        reply
    }

    /// Records that `peer` reached its inbound bridge, when the last record is stale
    /// (written when it changes, not on every call).
    async fn heard_from(&self, peer: &str) {
        let Ok(Some(bridge)) = self.bridge(|b| b.direction == "inbound" && b.peer_home_id == peer).await
        else {
            return;
        };
        let now = now_ms();
        if bridge.state == "revoked"
            || bridge.last_success.is_some_and(|t| now - t <= HEALTH_EVERY.as_millis() as i64)
        {
            return;
        }
        // Only that column: the record read above may be outdated by a decision meanwhile.
        if let Err(e) = self.changing_bridges(self.inner.store.bridge_heard_from(&bridge.id, now)).await {
            warn!(error = %e, "cannot record an inbound bridge's health");
        }
    }

    async fn answer(&self, peer: &str, from: IpAddr, call: pb::BridgeCall) -> pb::BridgeReply {
        let result = match call.call {
            Some(Call::Pair(pair)) => self.file_request(peer, from, pair).await.map(Reply::Pair),
            Some(Call::Ping(_)) => self.ping_reply(peer).await.map(Reply::Ping),
            Some(Call::ThreadList(request)) => self.serve_list(peer, request).await.map(Reply::ThreadList),
            Some(Call::ThreadRead(request)) => self.serve_read(peer, request).await.map(Reply::ThreadRead),
            Some(Call::ThreadWait(request)) => self.serve_wait(peer, request).await.map(Reply::ThreadWait),
            Some(Call::ThreadSend(request)) => Ok(Reply::ThreadSend(self.serve_send(peer, request).await)),
            Some(Call::FollowUp(call)) => self.serve_follow_up(peer, call).await.map(Reply::FollowUp),
            Some(Call::Withdraw(call)) => self.serve_withdraw(peer, call).await.map(Reply::Withdraw),
            None => return wire_error("invalid_argument", "empty call"),
        };
        match result {
            Ok(reply) => pb::BridgeReply { reply: Some(reply) },
            Err(Rejection::Wire(code, message)) => wire_error(code, message),
            Err(Rejection::Daemon(e)) => to_wire(e),
        }
    }

    async fn file_request(
        &self,
        peer: &str,
        from: IpAddr,
        pair: pb::PairCall,
    ) -> std::result::Result<pb::PairReply, Rejection> {
        let want = parse_permissions("want", &pair.want)?;
        let _filing = self.inner.decisions.lock().await;
        let now = now_ms();
        let requests = self.requests().await?;
        let recent = requests
            .iter()
            .filter(|r| r.peer_home_id == peer && r.created_at > now - REQUEST_WINDOW.as_millis() as i64)
            .count();
        if recent >= REQUESTS_PER_WINDOW {
            return Err(Rejection::Wire(
                "rate_limited",
                format!("at most {REQUESTS_PER_WINDOW} pairing requests per minute"),
            ));
        }
        // (A peer's own waiting request does not count: its new one replaces it.)
        let others_waiting = || requests.iter().filter(|r| r.status == "pending" && r.peer_home_id != peer);
        let network = network_of(from);
        let address = from.to_canonical().to_string();
        if others_waiting().filter(|r| r.address.parse().is_ok_and(|ip| network_of(ip) == network)).count()
            >= MAX_WAITING_PER_NETWORK
        {
            return Err(Rejection::Wire(
                "rate_limited",
                format!(
                    "{MAX_WAITING_PER_NETWORK} pairing requests from {network} already wait for this home's owner; try again once they are decided"
                ),
            ));
        }
        if others_waiting().count() >= MAX_WAITING_REQUESTS {
            return Err(Rejection::Wire(
                "rate_limited",
                format!(
                    "{MAX_WAITING_REQUESTS} pairing requests already wait for this home's owner; try again once they are decided"
                ),
            ));
        }
        // Shown to the owner beside the peer's home id: nothing in it may move the cursor or
        // recolour the terminal (a name can not pass itself off as another home's id).
        let name: String = pair.name.chars().filter(|c| !c.is_control()).take(ALIAS_MAX_CHARS).collect();
        let request = BridgeRequestRecord {
            id: new_id("breq"),
            peer_home_id: peer.to_string(),
            name,
            want,
            status: "pending".into(),
            created_at: now,
            decided_at: None,
            address,
        };
        // A peer's newest request replaces the ones still waiting (in the same write): the
        // owner decides on what it wants now, and cannot approve a stale request (changing
        // the grant) by mistake.
        let replaced =
            requests.iter().filter(|r| r.peer_home_id == peer && r.status == "pending").map(|stale| {
                BridgeRequestRecord { status: "replaced".into(), decided_at: Some(now), ..stale.clone() }
            });
        let saved: Vec<BridgeRequestRecord> = std::iter::once(request.clone()).chain(replaced).collect();
        self.save_bridge(None, &saved).await.map_err(Error::from)?;
        info!(peer, request_id = %request.id, "pairing request filed");
        Ok(pb::PairReply { request_id: request.id })
    }

    async fn ping_reply(&self, peer: &str) -> std::result::Result<pb::PingReply, Rejection> {
        let inbound = self.bridge(|b| b.direction == "inbound" && b.peer_home_id == peer).await?;
        // Read only: a peer's ping writes nothing, even an expiry.
        let requests = self.inner.store.bridge_requests().await.map_err(Error::from)?;
        // A revoked bridge gives way to a request the peer filed since (or as it was revoked).
        let since = inbound.as_ref().filter(|b| b.state == "revoked").map_or(i64::MIN, |b| b.updated_at);
        let newer = requests.iter().rev().find(|r| r.peer_home_id == peer && r.created_at >= since);
        if let Some(b) = inbound.filter(|b| b.state != "revoked" || newer.is_none()) {
            return Ok(pb::PingReply {
                state: b.state,
                permissions: b.permissions,
                workspaces: b.workspaces,
            });
        }
        let state = match newer {
            Some(r) if self.expired(r, now_ms()) => "expired",
            Some(r) if r.status == "rejected" || r.status == "expired" => &r.status,
            Some(r) if r.status == "withdrawn" => "revoked",
            Some(_) => "pending",
            None => "unknown",
        };
        Ok(pb::PingReply { state: state.into(), permissions: Vec::new(), workspaces: Vec::new() })
    }

    /// The peer revoked its side (see `WithdrawCall`): the inbound bridge its request made is
    /// revoked here too, or that request, if it still waits, is withdrawn.
    async fn serve_withdraw(
        &self,
        peer: &str,
        call: pb::WithdrawCall,
    ) -> std::result::Result<pb::WithdrawReply, Rejection> {
        let _decision = self.inner.decisions.lock().await;
        let inbound = self.bridge(|b| b.direction == "inbound" && b.peer_home_id == peer).await?;
        if let Some(bridge) = inbound.filter(|b| b.state != "revoked" && b.request_id == call.request_id) {
            self.revoke_bridge(bridge).await?;
        }
        let waiting = self
            .requests()
            .await?
            .into_iter()
            .find(|r| r.peer_home_id == peer && r.id == call.request_id && r.status == "pending");
        if let Some(request) = waiting {
            let withdrawn =
                BridgeRequestRecord { status: "withdrawn".into(), decided_at: Some(now_ms()), ..request };
            self.save_bridge(None, &[withdrawn]).await.map_err(Error::from)?;
        }
        Ok(pb::WithdrawReply {})
    }

    /// The peer's approved inbound bridge, whether its access is on or off now; a revoked
    /// bridge, or none, is refused.
    async fn approved(&self, peer: &str) -> std::result::Result<BridgeRecord, Rejection> {
        match self.bridge(|b| b.direction == "inbound" && b.peer_home_id == peer).await? {
            Some(b) if b.state == "revoked" => {
                Err(Rejection::Wire("bridge_revoked", "the target's owner revoked this bridge".into()))
            }
            Some(b) if b.state == "active" || b.state == "disabled" => Ok(b),
            _ => Err(Rejection::Wire(
                "permission_denied",
                "no approved bridge from your home; file a request with `kiki bridge request`".into(),
            )),
        }
    }

    /// The peer's inbound bridge, if active and granting `permission`.
    async fn granted(&self, peer: &str, permission: &str) -> std::result::Result<BridgeRecord, Rejection> {
        match self.approved(peer).await? {
            b if b.state == "disabled" => Err(Rejection::Wire(
                "bridge_disabled",
                "the target's owner turned this bridge's inbound access off for now; nothing was deleted"
                    .into(),
            )),
            b if b.permissions.iter().any(|p| p == permission) => Ok(b),
            b => Err(Rejection::Wire(
                "permission_denied",
                format!("this bridge does not grant {permission:?} (granted: {})", b.permissions.join(",")),
            )),
        }
    }

    async fn serve_list(
        &self,
        peer: &str,
        request: pb::ThreadListRequest,
    ) -> std::result::Result<pb::ThreadListResponse, Rejection> {
        let bridge = self.granted(peer, "read").await?;
        // Named by id only: a directory would be looked up on this home's disk.
        if !request.workspace_id.is_empty() && !crate::threads::workspace::is_id(&request.workspace_id) {
            return Err(Error::invalid("workspace_id", "a workspace id (ws_ and 16 hex digits)").into());
        }
        let page = self
            .inner
            .threads
            .list(
                Some(request.workspace_id.to_ascii_lowercase()),
                request.limit,
                &request.cursor,
                &bridge.workspaces,
            )
            .await?;
        let home = self.inner.endpoint.home_id().to_string();
        Ok(pb::ThreadListResponse {
            threads: page.threads.iter().map(|t| crate::grpc::thread_to_pb(t, &home)).collect(),
            next_cursor: page.next_cursor,
        })
    }

    async fn serve_read(
        &self,
        peer: &str,
        request: pb::ThreadReadRequest,
    ) -> std::result::Result<pb::ThreadReadResponse, Rejection> {
        let bridge = self.granted(peer, "read").await?;
        let thread = self.scoped_thread(&bridge, &request.target.unwrap_or_default()).await?;
        crate::grpc::read_response(
            &self.inner.threads,
            thread,
            request.limit,
            &request.cursor,
            &request.content_ref,
            self.inner.endpoint.home_id(),
        )
        .await
        .map_err(Rejection::Daemon)
    }

    /// ThreadWait for a peer: needs `wait`, stays inside the scope, never wakes anything.
    async fn serve_wait(
        &self,
        peer: &str,
        request: pb::ThreadWaitRequest,
    ) -> std::result::Result<pb::ThreadWaitResponse, Rejection> {
        // Taken before the grant is checked, so a revocation in between still ends this call;
        // but only for a peer with a bridge here (a stranger's calls must leave nothing).
        self.approved(peer).await?;
        let cut_off = lock(&self.inner.cut_off).entry(peer.to_string()).or_default().clone();
        let bridge = self.granted(peer, "wait").await?;
        crate::mailbox::wait_target_count(request.targets.len())?;
        if !bridge.workspaces.is_empty() {
            for target in &request.targets {
                self.scoped_thread(&bridge, target).await?;
            }
        }
        let Some(mailbox) = self.inner.mailbox.get() else {
            return Err(Error::FailedPrecondition("the home is starting".into()).into());
        };
        let (results, timed_out) = tokio::select! {
            waited = mailbox.wait(request.targets, request.timeout_ms, request.cursors) => waited?,
            // Whatever the bridge's state now refuses (bridge_revoked, bridge_disabled).
            () = cut_off.cancelled() => return Err(self.granted(peer, "wait").await.err().unwrap_or_else(|| {
                Rejection::Wire("bridge_revoked", "the target's owner changed this bridge".into())
            })),
        };
        Ok(pb::ThreadWaitResponse {
            results: results.into_iter().map(crate::grpc::wait_result_to_pb).collect(),
            timed_out,
        })
    }

    /// The thread `target` names, as a peer limited to `bridge`'s scope sees it: outside the
    /// scope is exactly like absent — also when the peer names a workspace, where "not in
    /// that workspace" would tell it the thread exists.
    async fn scoped_thread(
        &self,
        bridge: &BridgeRecord,
        target: &pb::ThreadRef,
    ) -> std::result::Result<crate::store::ThreadRecord, Rejection> {
        if bridge.workspaces.is_empty() {
            return Ok(self.inner.threads.get("", &target.workspace_id, &target.session_id).await?);
        }
        let absent = || Error::NotFound(format!("no thread {} in this home", target.session_id));
        let thread = self.inner.threads.get("", "", &target.session_id).await?;
        let named_elsewhere = !target.workspace_id.is_empty() && target.workspace_id != thread.workspace_id;
        if named_elsewhere || !bridge.workspaces.contains(&thread.workspace_id) {
            return Err(absent().into());
        }
        Ok(thread)
    }

    // ----- owner actions ---------------------------------------------------------------

    /// Ends the parked calls of an inbound bridge's peer (revoked or turned off).
    fn cut_off(&self, bridge: &BridgeRecord) {
        if bridge.direction == "inbound"
            && let Some(parked) = lock(&self.inner.cut_off).remove(&bridge.peer_home_id)
        {
            parked.cancel();
        }
    }

    /// Every bridge, from memory: the table is read once and re-read after each change, so
    /// the per-call permission check costs no store read.
    async fn all(&self) -> crate::store::StoreResult<Arc<Vec<BridgeRecord>>> {
        let mut cache = self.inner.cache.lock().await;
        if let Some(bridges) = &*cache {
            return Ok(bridges.clone());
        }
        let bridges = Arc::new(self.inner.store.bridges().await?);
        *cache = Some(bridges.clone());
        Ok(bridges)
    }

    /// Saves a bridge and/or requests, in one write; saving a bridge drops the cached bridge
    /// table (requests alone leave it: every bridged call reads the cache).
    async fn save_bridge(
        &self,
        bridge: Option<&BridgeRecord>,
        requests: &[BridgeRequestRecord],
    ) -> crate::store::StoreResult<()> {
        let save = self.inner.store.save_bridge(bridge, requests);
        if bridge.is_some() { self.changing_bridges(save).await } else { save.await }
    }

    /// Runs a store write that changes the bridge table, holding the cache so no read
    /// refills it meanwhile, then drops it.
    async fn changing_bridges<T>(&self, write: impl Future<Output = T>) -> T {
        let mut cache = self.inner.cache.lock().await;
        let done = write.await;
        *cache = None;
        done
    }

    async fn bridge(&self, pick: impl Fn(&BridgeRecord) -> bool) -> Result<Option<BridgeRecord>> {
        Ok(self.all().await?.iter().find(|b| pick(b)).cloned())
    }

    /// `kiki bridge request ADDRESS --want … [--expect ID] [--name ALIAS]`.
    pub async fn request(
        &self,
        address: &str,
        want: &[String],
        expect: &str,
        name: &str,
    ) -> Result<(BridgeRecord, String)> {
        let want = parse_permissions("want", want)?;
        let expect = expect.to_ascii_uppercase();
        if !expect.is_empty() && !kiki_bridge::is_home_id(&expect) {
            return Err(Error::invalid(
                "expect",
                "a home id: 52 characters of A-Z and 2-7 (`kiki status` shows it)",
            ));
        }
        if let Some(problem) = (!name.is_empty()).then(|| alias_problem(name)).flatten() {
            return Err(Error::invalid("name", problem));
        }
        let addr = resolve(address).await?;
        let expect = (!expect.is_empty()).then_some(expect.as_str());
        let peer = self.inner.endpoint.connect(addr, expect).await.map_err(|e| match e {
            kiki_bridge::EndpointError::WrongPeer(wrong) => Error::FailedPrecondition(format!(
                "{address} is home {}, not the expected {}; nothing was filed",
                wrong.actual, wrong.expected
            )),
            e => dial_failure(&format!("cannot reach {address}"), e),
        })?;
        let peer_home_id = peer.peer_home_id().to_string();
        if peer_home_id == self.inner.endpoint.home_id() {
            return Err(Error::invalid("address", "that is this home"));
        }
        let alias = if name.is_empty() { peer_home_id[..8].to_ascii_lowercase() } else { name.to_string() };
        let existing = self.all().await?;
        if existing.iter().any(|b| b.alias == alias && b.peer_home_id != peer_home_id) {
            return Err(Error::invalid("name", format!("{alias:?} already names another bridge")));
        }
        let pair = pb::BridgeCall {
            call: Some(Call::Pair(pb::PairCall { name: home_name(self.inner.endpoint.home_id()), want })),
        };
        let request_id = match call_link(peer.as_ref(), &pair, None).await {
            Ok(pb::BridgeReply { reply: Some(Reply::Pair(p)) }) => p.request_id,
            Ok(pb::BridgeReply { reply: Some(Reply::Error(e)) }) => return Err(from_wire(address, e)),
            Ok(_) => {
                return Err(Error::FailedPrecondition(format!(
                    "{address}: unexpected answer to a pairing request"
                )));
            }
            Err(e) => return Err(link_failure(address, e)),
        };
        let now = now_ms();
        let previous =
            existing.iter().find(|b| b.direction == "outbound" && b.peer_home_id == peer_home_id).cloned();
        let bridge = BridgeRecord {
            id: previous.as_ref().map(|b| b.id.clone()).unwrap_or_else(|| new_id("br")),
            direction: "outbound".into(),
            peer_home_id: peer_home_id.clone(),
            alias,
            address: addr.to_string(),
            state: "requested".into(),
            permissions: previous.as_ref().map(|b| b.permissions.clone()).unwrap_or_default(),
            workspaces: previous.as_ref().map(|b| b.workspaces.clone()).unwrap_or_default(),
            request_id: request_id.clone(),
            created_at: previous.as_ref().map(|b| b.created_at).unwrap_or(now),
            updated_at: now,
            last_success: Some(now),
            last_error: String::new(),
            last_error_at: None,
            revoked_by_peer: false,
        };
        self.save_bridge(Some(&bridge), &[]).await?;
        *self.connection_slot(&peer_home_id).lock().await =
            Some(Cached { link: peer, taken: Instant::now() });
        Ok((bridge, request_id))
    }

    /// `kiki bridge pending`: the requests waiting for the owner's decision.
    pub async fn pending(&self) -> Result<Vec<BridgeRequestRecord>> {
        let _decisions = self.inner.decisions.lock().await;
        Ok(self.requests().await?.into_iter().filter(|r| r.status == "pending").collect())
    }

    /// The pairing requests filed with this home, oldest first; those left undecided past
    /// `[bridge] request_expiry` are marked `expired` first. A request decided (or expired)
    /// longer ago than that is forgotten, so the table stays small however many peers ask:
    /// its source keeps showing the outcome (see [`Bridges::refresh`]). The caller holds
    /// `decisions`.
    async fn requests(&self) -> Result<Vec<BridgeRequestRecord>> {
        let now = now_ms();
        // (Under a minute of expiry, a peer's requests that the owner decided at once stop
        // counting against its rate limit early: the cap on waiting requests still holds.)
        let decided_before = now - self.inner.config.bridge.request_expiry.as_millis() as i64;
        let forgotten = |r: &BridgeRequestRecord| r.decided_at.is_some_and(|at| at < decided_before);
        let mut requests = self.inner.store.bridge_requests().await?;
        if requests.iter().any(forgotten) {
            self.inner.store.prune_bridge_requests(decided_before).await?;
            requests.retain(|r| !forgotten(r));
        }
        for request in requests.iter_mut().filter(|r| self.expired(r, now)) {
            request.status = "expired".into();
            request.decided_at = Some(now);
            self.save_bridge(None, std::slice::from_ref(request)).await?;
        }
        Ok(requests)
    }

    /// Whether `request` is still pending but has waited past `[bridge] request_expiry`.
    fn expired(&self, request: &BridgeRequestRecord, now: i64) -> bool {
        let expiry = self.inner.config.bridge.request_expiry.as_millis() as i64;
        request.status == "pending" && now - request.created_at >= expiry
    }

    /// The request the owner decides on (the caller holds `decisions`).
    async fn pending_request(&self, request_id: &str) -> Result<BridgeRequestRecord> {
        let request = self
            .requests()
            .await?
            .into_iter()
            .find(|r| r.id == request_id)
            .ok_or_else(|| Error::NotFound(format!("no pairing request {request_id}")))?;
        if request.status == "expired" {
            return Err(Error::FailedPrecondition(format!(
                "request {request_id} expired undecided (after [bridge] request_expiry); its peer may file a new one"
            )));
        }
        if request.status != "pending" {
            return Err(Error::FailedPrecondition(format!(
                "request {request_id} is already {}",
                request.status
            )));
        }
        Ok(request)
    }

    /// `kiki bridge approve REQUEST --allow … [--workspace W]…`.
    pub async fn approve(
        &self,
        request_id: &str,
        allow: &[String],
        workspaces: &[String],
    ) -> Result<BridgeRecord> {
        let allow = parse_permissions("allow", allow)?;
        let workspaces = workspaces
            .iter()
            .map(|w| crate::threads::workspace::named("workspaces", w))
            .collect::<Result<Vec<_>>>()?;
        let _decision = self.inner.decisions.lock().await;
        let mut request = self.pending_request(request_id).await?;
        if let Some(extra) = allow.iter().find(|p| !request.want.contains(p)) {
            return Err(Error::invalid(
                "allow",
                format!("{extra:?} was not requested (wanted: {})", request.want.join(",")),
            ));
        }
        let now = now_ms();
        let previous =
            self.bridge(|b| b.direction == "inbound" && b.peer_home_id == request.peer_home_id).await?;
        let alias = match &previous {
            Some(b) => b.alias.clone(),
            None => self.inbound_alias(&request.name, &request.peer_home_id).await?,
        };
        let bridge = BridgeRecord {
            id: previous.as_ref().map(|b| b.id.clone()).unwrap_or_else(|| new_id("br")),
            direction: "inbound".into(),
            peer_home_id: request.peer_home_id.clone(),
            alias,
            address: String::new(),
            state: "active".into(),
            permissions: allow,
            workspaces,
            request_id: request.id.clone(),
            created_at: previous.as_ref().map(|b| b.created_at).unwrap_or(now),
            updated_at: now,
            last_success: None,
            last_error: String::new(),
            last_error_at: None,
            revoked_by_peer: false,
        };
        request.status = "approved".into();
        request.decided_at = Some(now);
        self.save_bridge(Some(&bridge), std::slice::from_ref(&request)).await?;
        info!(bridge_id = %bridge.id, peer = %bridge.peer_home_id, "bridge approved");
        Ok(bridge)
    }

    /// A new inbound bridge's alias: the name the peer gave, made usable (one printable word,
    /// see [`alias_problem`]) and unique on this home — the peer chose it, and two machines may share a
    /// host name — by the peer id's first characters if needed.
    async fn inbound_alias(&self, name: &str, peer: &str) -> Result<String> {
        let cleaned: String = name
            .chars()
            .filter(|c| *c != '/' && !c.is_whitespace() && !c.is_control())
            .take(ALIAS_MAX_CHARS - 9)
            .collect();
        let id_part = peer.chars().take(8).collect::<String>().to_ascii_lowercase();
        let taken = self.all().await?;
        let free = |alias: &str| alias_problem(alias).is_none() && !taken.iter().any(|b| b.answers_to(alias));
        Ok(if free(&cleaned) {
            cleaned
        } else if alias_problem(&cleaned).is_some() {
            id_part
        } else {
            format!("{cleaned}-{id_part}")
        })
    }

    /// `kiki bridge reject REQUEST`.
    pub async fn reject(&self, request_id: &str) -> Result<BridgeRequestRecord> {
        let _decision = self.inner.decisions.lock().await;
        let mut request = self.pending_request(request_id).await?;
        request.status = "rejected".into();
        request.decided_at = Some(now_ms());
        self.save_bridge(None, std::slice::from_ref(&request)).await?;
        Ok(request)
    }

    /// `kiki bridge revoke BRIDGE` (id, alias or peer home id). Takes effect at once: the
    /// next call over it is refused with `bridge_revoked`.
    pub async fn revoke(&self, name: &str) -> Result<BridgeRecord> {
        let decision = self.inner.decisions.lock().await;
        let bridges = self.all().await?;
        // A peer's home id (or an alias both directions share) may name two bridges, and
        // revoking the wrong one would cut the other direction: the owner names one.
        let bridge = match bridges.iter().filter(|b| b.answers_to(name)).collect::<Vec<_>>()[..] {
            [] => return Err(Error::NotFound(format!("no bridge {name:?}"))),
            [one] => one.clone(),
            ref both => {
                let named: Vec<String> = both.iter().map(|b| format!("{} {}", b.direction, b.id)).collect();
                return Err(Error::invalid(
                    "bridge",
                    format!("{name:?} names {}: revoke one by its id", named.join(" and ")),
                ));
            }
        };
        // Revoked already, it is not written again; an outbound one tells its target again.
        let bridge = if bridge.state == "revoked" { bridge } else { self.revoke_bridge(bridge).await? };
        drop(decision);
        if bridge.direction == "outbound" {
            // Tell the target, so its owner's list agrees and a new request needs a new
            // approval. Best effort, briefly: the revocation here stands either way.
            let withdraw = pb::WithdrawCall { request_id: bridge.request_id.clone() };
            let withdraw = pb::BridgeCall { call: Some(Call::Withdraw(withdraw)) };
            // Given up, it is withdrawn (its stream reset) rather than left to arrive late.
            let given_up = Some(Instant::now());
            match tokio::time::timeout(PING_TIMEOUT, self.call(&bridge, &withdraw, given_up)).await {
                Ok(Ok(pb::BridgeReply { reply: Some(Reply::Withdraw(_)) })) => {
                    info!(bridge_id = %bridge.id, "the target revoked its side too");
                }
                other => {
                    warn!(bridge_id = %bridge.id, outcome = ?other, "the target was not told of the revocation")
                }
            }
        }
        Ok(bridge)
    }

    /// Revokes `bridge` here (the caller holds `decisions`).
    async fn revoke_bridge(&self, mut bridge: BridgeRecord) -> Result<BridgeRecord> {
        bridge.state = "revoked".into();
        bridge.updated_at = now_ms();
        if bridge.direction == "inbound" {
            // What the peer brought and no turn has taken yet is refused with it.
            let threads =
                self.changing_bridges(self.inner.store.revoke_inbound(&bridge, bridge.updated_at)).await?;
            if let Some(mailbox) = self.inner.mailbox.get() {
                for thread in threads {
                    mailbox.notify(&thread);
                }
            }
        } else {
            self.save_bridge(Some(&bridge), &[]).await?;
            // Its pending sends are refused now (`bridge_revoked`), not when their backoff
            // would have brought them round. Best effort: the revocation stands either way.
            if let Err(e) = self.inner.store.outbox_retry_now(&bridge.peer_home_id, bridge.updated_at).await {
                warn!(error = %e, "cannot make a revoked bridge's pending sends due");
            }
        }
        self.cut_off(&bridge);
        warn!(bridge_id = %bridge.id, peer = %bridge.peer_home_id, "bridge revoked");
        Ok(bridge)
    }

    /// `kiki bridge disable|enable BRIDGE`: turns an inbound bridge's access off or back on.
    /// Off, every call over it is refused with `bridge_disabled` (not final: the source
    /// keeps retrying within its window) and messages it brought wait at their threads;
    /// nothing is deleted. Back on, held messages are delivered.
    pub async fn set_inbound(&self, name: &str, enabled: bool) -> Result<BridgeRecord> {
        let _decision = self.inner.decisions.lock().await;
        let bridges = self.all().await?;
        let Some(bridge) = bridges.iter().find(|b| b.direction == "inbound" && b.answers_to(name)) else {
            return Err(if bridges.iter().any(|b| b.answers_to(name)) {
                Error::FailedPrecondition(format!(
                    "{name:?} is an outbound bridge: only its target's owner can turn its access off"
                ))
            } else {
                Error::NotFound(format!("no bridge {name:?}"))
            });
        };
        let mut bridge = bridge.clone();
        bridge.state = match (bridge.state.as_str(), enabled) {
            ("active" | "disabled", true) => "active".into(),
            ("active" | "disabled", false) => "disabled".into(),
            (state, _) => {
                return Err(Error::FailedPrecondition(format!(
                    "bridge {} is {state}; only an approved bridge can be turned off or on",
                    bridge.id
                )));
            }
        };
        bridge.updated_at = now_ms();
        self.save_bridge(Some(&bridge), &[]).await?;
        info!(bridge_id = %bridge.id, peer = %bridge.peer_home_id, enabled, "bridge inbound access set");
        if enabled {
            // Messages held back while it was off may start turns now.
            for thread in self.inner.store.threads_with_queued_input().await? {
                self.inner.threads.runner().kick(&thread);
            }
        } else {
            self.cut_off(&bridge);
        }
        Ok(bridge)
    }

    /// `kiki bridge list`: every bridge, outbound ones refreshed by a real round trip.
    pub async fn list(&self) -> Result<Vec<BridgeRecord>> {
        let bridges = self.all().await?;
        let mut refreshed = Vec::with_capacity(bridges.len());
        for bridge in bridges.iter().cloned() {
            if bridge.direction == "outbound" && bridge.state != "revoked" {
                refreshed.push(self.refresh(bridge).await?);
            } else {
                refreshed.push(bridge);
            }
        }
        Ok(refreshed)
    }

    /// Pings the target: records link health and learns what it granted.
    async fn refresh(&self, mut bridge: BridgeRecord) -> Result<BridgeRecord> {
        let ping = pb::BridgeCall { call: Some(Call::Ping(pb::PingCall {})) };
        let was = bridge.state.clone();
        match tokio::time::timeout(PING_TIMEOUT, self.call(&bridge, &ping, None)).await {
            Ok(Ok(pb::BridgeReply { reply: Some(Reply::Ping(p)) })) => {
                bridge.state = match p.state.as_str() {
                    "active" | "disabled" | "revoked" | "rejected" | "expired" => p.state,
                    "pending" => "requested".into(),
                    // The target keeps no record of the request: it forgot it some time after
                    // deciding it (the outcome shown here stays), or never had it.
                    _ if matches!(bridge.state.as_str(), "rejected" | "expired") => bridge.state,
                    _ => "expired".into(),
                };
                bridge.permissions = p.permissions;
                bridge.workspaces = p.workspaces;
                bridge.last_success = Some(now_ms());
            }
            Ok(Ok(_)) => self.note_error(&mut bridge, "unexpected answer to a ping".into()),
            Ok(Err(e)) => self.note_error(&mut bridge, e.to_string()),
            Err(_) => self.note_error(&mut bridge, format!("no answer within {PING_TIMEOUT:?}")),
        }
        bridge.updated_at = now_ms();
        // Saved with the state: the worker never sees the one without the other.
        let revoked_there = bridge.state == "revoked" && was != "revoked";
        bridge.revoked_by_peer |= revoked_there;
        let bridge = self.save_learnt(&bridge, true).await?;
        if revoked_there {
            warn!(bridge_id = %bridge.id, peer = %bridge.peer_home_id, "the target revoked this bridge");
            // Its messages are asked about at once (the target answers for what it holds and
            // refuses the rest), not at their next turn.
            if let Err(e) = self.inner.store.outbox_retry_now(&bridge.peer_home_id, bridge.updated_at).await {
                warn!(error = %e, "cannot make a revoked bridge's messages due");
            }
        }
        Ok(bridge)
    }

    /// Saves what a call over `learnt` (a copy read before the call) found out — its link's
    /// health and, with `grant`, the state and grant the target reported — onto the bridge as
    /// it is now, under the owner's decisions: a revocation made here during the call stands.
    async fn save_learnt(&self, learnt: &BridgeRecord, grant: bool) -> Result<BridgeRecord> {
        let _decision = self.inner.decisions.lock().await;
        let Some(mut current) = self.bridge(|b| b.id == learnt.id).await? else {
            return Ok(learnt.clone());
        };
        (current.last_success, current.last_error_at) = (learnt.last_success, learnt.last_error_at);
        current.last_error.clone_from(&learnt.last_error);
        if grant && current.state != "revoked" {
            current.state.clone_from(&learnt.state);
            current.permissions.clone_from(&learnt.permissions);
            current.workspaces.clone_from(&learnt.workspaces);
            current.revoked_by_peer = learnt.revoked_by_peer;
        }
        current.updated_at = learnt.updated_at;
        self.save_bridge(Some(&current), &[]).await?;
        Ok(current)
    }

    fn note_error(&self, bridge: &mut BridgeRecord, error: String) {
        bridge.last_error = error;
        bridge.last_error_at = Some(now_ms());
    }

    // ----- source side: calls over an outbound bridge ----------------------------------

    /// The outbound bridge HOST names (alias, peer home id or bridge id).
    pub async fn outbound(&self, host: &str) -> Result<BridgeRecord> {
        self.bridge(|b| b.direction == "outbound" && b.answers_to(host)).await?.ok_or_else(|| {
            Error::NotFound(format!("host {host:?}: not this home and no bridge by that name or id"))
        })
    }

    /// One call over `bridge`, reconnecting once if the cached connection is gone. Dropped
    /// from `withdraw_after` on, its request is withdrawn (see `Link::call`).
    async fn call(
        &self,
        bridge: &BridgeRecord,
        call: &pb::BridgeCall,
        withdraw_after: Option<Instant>,
    ) -> Result<pb::BridgeReply> {
        let mut failed: Option<Arc<dyn Link>> = None;
        for attempt in 0..2 {
            let peer = self.connection(bridge, failed.as_ref()).await?;
            match tokio::time::timeout(CALL_TIMEOUT, call_link(peer.as_ref(), call, withdraw_after)).await {
                Ok(Ok(reply)) => return Ok(reply),
                Ok(Err(e)) if attempt == 0 && e.lost => {
                    debug!(error = %e, "bridge call failed; reconnecting");
                    failed = Some(peer);
                }
                Ok(Err(e)) => return Err(link_failure(&bridge.alias, e)),
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
        let addr: SocketAddr = bridge
            .address
            .parse()
            .map_err(|_| Error::FailedPrecondition(format!("bridge {} has no usable address", bridge.id)))?;
        let dial = self.inner.endpoint.connect(addr, Some(&bridge.peer_home_id));
        let peer = match tokio::time::timeout(CONNECT_TIMEOUT, dial).await {
            Ok(connected) => connected.map_err(|e| dial_failure(&bridge.alias, e))?,
            Err(_) => {
                return Err(Error::Unavailable(format!(
                    "{}: no connection within {CONNECT_TIMEOUT:?}",
                    bridge.alias
                )));
            }
        };
        *slot = Some(Cached { link: peer.clone(), taken: Instant::now() });
        Ok(peer)
    }

    /// Lets go of the dialed connections no call has taken for [`IDLE_CONNECTION`] and none
    /// holds now, every few seconds until `stop` (the next call dials again).
    async fn run_idle_connections(self, stop: CancellationToken) {
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(IDLE_CONNECTION / 3) => {}
            }
            let slots: Vec<ConnectionSlot> = lock(&self.inner.connections).values().cloned().collect();
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
        lock(&self.inner.connections).entry(peer.to_string()).or_default().clone()
    }

    /// A call whose answer must be `expect`ed; other answers and wire errors are errors.
    async fn remote<T>(&self, host: &str, call: Call, pick: fn(Reply) -> Option<T>) -> Result<T> {
        let mut bridge = self.outbound(host).await?;
        if bridge.state == "revoked" {
            return Err(Error::PermissionDenied(format!("{host}: bridge_revoked")));
        }
        let result = self.call(&bridge, &pb::BridgeCall { call: Some(call) }, None).await;
        // Link health is written when it changes, not on every successful call.
        let now = now_ms();
        let stale = bridge.last_success.is_none_or(|t| now - t > HEALTH_EVERY.as_millis() as i64);
        match &result {
            Ok(_) if stale || bridge.last_error_at > bridge.last_success => {
                bridge.last_success = Some(now);
                let _ = self.save_learnt(&bridge, false).await;
            }
            Ok(_) => {}
            Err(e) => {
                self.note_error(&mut bridge, e.to_string());
                let _ = self.save_learnt(&bridge, false).await;
            }
        }
        match result?.reply {
            Some(Reply::Error(e)) => Err(from_wire(host, e)),
            Some(reply) => {
                pick(reply).ok_or_else(|| Error::FailedPrecondition(format!("{host}: unexpected answer")))
            }
            None => Err(Error::FailedPrecondition(format!("{host}: empty answer"))),
        }
    }

    /// ThreadList of the home behind `host`.
    pub async fn list_remote(
        &self,
        host: &str,
        mut request: pb::ThreadListRequest,
    ) -> Result<pb::ThreadListResponse> {
        request.bridge = String::new();
        self.remote(host, Call::ThreadList(request), |r| match r {
            Reply::ThreadList(page) => Some(page),
            _ => None,
        })
        .await
    }

    /// ThreadWait on threads behind `host` (all targets on that one home, each named by its
    /// alias or home id). Cursor keys and result targets are translated between
    /// `HOST/SESSION` here and `SESSION` there.
    pub async fn wait_remote(
        &self,
        host: &str,
        targets: &[pb::ThreadRef],
        timeout_ms: Option<u32>,
        cursors: &HashMap<String, String>,
    ) -> Result<pb::ThreadWaitResponse> {
        let local_targets: Vec<pb::ThreadRef> =
            targets.iter().map(|t| pb::ThreadRef { host_id: String::new(), ..t.clone() }).collect();
        let cursors: HashMap<String, String> = cursors
            .iter()
            .map(|(key, cursor)| {
                let session = key.rsplit_once('/').map(|(_, s)| s).unwrap_or(key);
                (session.to_string(), cursor.clone())
            })
            .collect();
        let request = pb::ThreadWaitRequest { targets: local_targets, timeout_ms, cursors };
        let mut answer = self
            .remote(host, Call::ThreadWait(request), |r| match r {
                Reply::ThreadWait(answer) => Some(answer),
                _ => None,
            })
            .await?;
        // Each result is named back as the caller named its target (alias or home id).
        for target in answer.results.iter_mut().filter_map(|r| r.target.as_mut()) {
            let asked = targets.iter().find(|t| t.session_id == target.session_id);
            target.host_id = asked.map_or(host, |t| &t.host_id).to_string();
        }
        Ok(answer)
    }

    /// ThreadRead of a thread behind `host`.
    pub async fn read_remote(
        &self,
        host: &str,
        mut request: pb::ThreadReadRequest,
    ) -> Result<pb::ThreadReadResponse> {
        if let Some(target) = request.target.as_mut() {
            target.host_id = String::new();
        }
        self.remote(host, Call::ThreadRead(request), |r| match r {
            Reply::ThreadRead(page) => Some(page),
            _ => None,
        })
        .await
    }
}

/// Why a peer's call was refused: a wire code and message, or a daemon error to translate.
enum Rejection {
    Wire(&'static str, String),
    Daemon(Error),
}

impl From<Error> for Rejection {
    fn from(e: Error) -> Self {
        Rejection::Daemon(e)
    }
}

impl From<crate::store::StoreError> for Rejection {
    fn from(e: crate::store::StoreError) -> Self {
        Rejection::Daemon(e.into())
    }
}

/// One call over a link: the request encoded, the reply decoded. Dropped from
/// `withdraw_after` on, the request is withdrawn (see `Link::call`).
async fn call_link(
    link: &dyn Link,
    call: &pb::BridgeCall,
    withdraw_after: Option<Instant>,
) -> std::result::Result<pb::BridgeReply, LinkError> {
    let reply = link.call(call.encode_to_vec(), withdraw_after).await?;
    // A peer on another build may answer what this one cannot read: retrying repeats it.
    pb::BridgeReply::decode(reply.as_slice()).map_err(|e| LinkError::fault(format!("undecodable reply: {e}")))
}

/// A failed call as this home's caller sees it: a lost link is worth retrying
/// (`UNAVAILABLE`), a faulty exchange is not.
fn link_failure(what: &str, e: LinkError) -> Error {
    unreached(e.lost, format!("{what}: {e}"))
}

/// A failed dial, likewise: another home answering at the address is no passing fault.
fn dial_failure(what: &str, e: kiki_bridge::EndpointError) -> Error {
    unreached(e.lost(), format!("{what}: {e}"))
}

fn unreached(lost: bool, message: String) -> Error {
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

async fn resolve(address: &str) -> Result<SocketAddr> {
    if let Ok(addr) = address.parse() {
        return Ok(addr);
    }
    tokio::net::lookup_host(address)
        .await
        .ok()
        .and_then(|mut addrs| addrs.next())
        .ok_or_else(|| Error::invalid("address", format!("{address:?} is not host:port")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_machine_is_one_network_for_pairing_requests() {
        let network = |ip: &str| network_of(ip.parse().expect("ip"));
        assert_eq!(network("192.0.2.7"), "192.0.2.7");
        assert_eq!(network("::ffff:192.0.2.7"), "192.0.2.7", "an IPv4 peer on a dual-stack socket");
        assert_eq!(network("2001:db8:1:2:aaaa::1"), "2001:db8:1:2::/64");
        assert_eq!(network("2001:db8:1:2:bbbb::9"), network("2001:db8:1:2:aaaa::1"), "one /64");
        assert_ne!(network("2001:db8:1:3::1"), network("2001:db8:1:2::1"));
    }

    #[test]
    fn permissions_are_checked_and_deduplicated() {
        let p = parse_permissions("want", &["read,send".into(), "read".into()]).expect("valid");
        assert_eq!(p, ["read", "send"]);
        assert!(parse_permissions("want", &["fly".into()]).expect_err("unknown").to_string().contains("fly"));
        assert!(parse_permissions("want", &[]).is_err());
    }
}
