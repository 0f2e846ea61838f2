//! Pairing: how a bridge comes to be and ends. A peer files a request (rate-limited, at
//! most a few waiting per network and 32 in all, expiring undecided after `[bridge]
//! request_expiry`); this home's owner approves it with the permissions granted (perhaps
//! fewer, perhaps limited to workspaces), rejects it, revokes the bridge or turns its inbound
//! access off and on. At the source, `kiki bridge request` files the request and keeps an
//! outbound bridge, which `kiki bridge list` refreshes by pinging the target; revoking it
//! there tells the target (`WithdrawCall`). Every decision holds the owner's decisions lock.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kiki_proto::bridge::v1 as wire;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use wire::bridge_call::Call;
use wire::bridge_reply::Reply;

mod policy;

pub use policy::parse_permissions;
use policy::{ALIAS_MAX_CHARS, alias_problem};

use super::Decisions;
use super::codec::{Rejection, from_wire, permissions_from_wire, permissions_to_wire};
use super::links::Links;
use super::links::{call_link, dial_failure, link_failure, resolve, took};
use super::parked::ParkedCalls;
use super::table::BridgeTable;
use crate::error::{Error, Result};
use crate::store::Store;
use crate::store::{BridgeRecord, BridgeRequestRecord};
use crate::store::{BridgeState, Direction, Permissions, RequestStatus};
use crate::threads::new_id;
use crate::threads::runner::TurnRunner;

/// How long `kiki bridge list` waits for each peer's answer.
/// (Real time, like the dial's bound: one round trip the owner waits for, not a timing of
/// the home's.)
const PING_TIMEOUT: Duration = Duration::from_secs(2);

/// How this home introduces itself in a pairing request: the machine's host name (the home
/// id is shown beside it anyway), or the id's first characters if there is none.
fn home_name(home_id: &str) -> String {
    match kiki_proto::home::host_name().as_str() {
        "" => home_id.chars().take(8).collect(),
        host => host.chars().take(64).collect(),
    }
}

/// Pairing's part of the bridges, with what it works with.
/// What a ping over an outbound bridge found (see [`Pairing::probe`]).
#[derive(Debug, Clone)]
pub struct LinkProbe {
    pub rtt: Duration,
    /// Where the target says the bridge stands.
    pub grant: wire::GrantState,
    /// The target's clock minus this one's, when it said its time.
    pub skew_ms: Option<i64>,
}

pub(super) struct Pairing {
    pub(super) table: Arc<BridgeTable>,
    pub(super) links: Arc<Links>,
    pub(super) store: Arc<dyn Store>,
    /// Held by every decision (see [`Decisions`]).
    pub(super) decisions: Decisions,
    /// Ended when a bridge is revoked or turned off.
    pub(super) parked: Arc<ParkedCalls>,
    /// `[bridge] request_expiry`.
    pub(super) request_expiry: Duration,
    /// Takes a peer's messages held back while its access was off, once it is back on.
    pub(super) runner: TurnRunner,
}

impl Pairing {
    /// The time by the home's clock.
    pub(super) fn now(&self) -> crate::time::Millis {
        self.runner.clock().now_ms()
    }

    pub(super) async fn file_request(
        &self,
        peer: &str,
        from: IpAddr,
        pair: wire::PairCall,
    ) -> std::result::Result<wire::PairReply, Rejection> {
        let want = permissions_from_wire(&pair.want);
        if want.is_empty() {
            return Err(Error::invalid("want", "name at least one of read, send, wake, wait").into());
        }
        let _filing = self.decisions.lock().await;
        let now = self.now();
        let requests = self.requests().await?;
        if let Some((refusal, why)) = policy::filing_refused(&requests, peer, from, now) {
            return Err(Rejection::Wire(refusal, why));
        }
        let request = BridgeRequestRecord {
            id: new_id("breq"),
            peer_home_id: peer.to_string(),
            name: policy::shown_name(&pair.name),
            want,
            status: RequestStatus::Pending,
            created_at: now,
            decided_at: None,
            address: from.to_canonical().to_string(),
        };
        let saved = policy::filed(&requests, request.clone());
        self.table.save(None, &saved).await.map_err(Error::from)?;
        info!(peer, request_id = %request.id, "pairing request filed");
        Ok(wire::PairReply { request_id: request.id })
    }

    pub(super) async fn ping_reply(&self, peer: &str) -> std::result::Result<wire::PingReply, Rejection> {
        let inbound =
            self.table.find(|b| b.direction == Direction::Inbound && b.peer_home_id == peer).await?;
        // Read only: a peer's ping writes nothing, even an expiry.
        let requests = self.store.bridge_requests().await.map_err(Error::from)?;
        let (state, bridge) =
            policy::grant_for_ping(inbound.as_ref(), &requests, peer, self.now(), self.request_expiry);
        let now_ms = self.now();
        if let Some(b) = bridge {
            return Ok(wire::PingReply {
                state: state as i32,
                permissions: permissions_to_wire(b.permissions),
                workspaces: b.workspaces,
                now_ms,
            });
        }
        Ok(wire::PingReply { state: state as i32, permissions: Vec::new(), workspaces: Vec::new(), now_ms })
    }

    /// `kiki doctor`'s look at an outbound bridge: a ping's round trip, what the target says
    /// of the grant, and its clock as it answered.
    pub(super) async fn probe(&self, bridge: &BridgeRecord) -> Result<LinkProbe> {
        let ping = wire::BridgeCall::new(Call::Ping(wire::PingCall {}));
        let (sent_at, started) = (self.now(), Instant::now());
        match tokio::time::timeout(PING_TIMEOUT, self.links.call(bridge, &ping, None)).await {
            Ok(Ok(wire::BridgeReply { reply: Some(Reply::Ping(p)) })) => {
                let rtt = started.elapsed();
                let grant = p.state();
                // The target's clock against this one's at the middle of the round trip.
                let skew_ms = (p.now_ms != 0).then(|| p.now_ms - (sent_at + rtt.as_millis() as i64 / 2));
                Ok(LinkProbe { rtt, grant, skew_ms })
            }
            Ok(Ok(wire::BridgeReply { reply: Some(Reply::Error(e)) })) => Err(from_wire(&bridge.alias, e)),
            Ok(Ok(_)) => {
                Err(Error::FailedPrecondition(format!("{}: unexpected answer to a ping", bridge.alias)))
            }
            Ok(Err(e)) => Err(e),
            Err(_) => Err(Error::Unavailable(format!("{}: no answer within {PING_TIMEOUT:?}", bridge.alias))),
        }
    }

    /// The peer revoked its side (see `WithdrawCall`): the inbound bridge its request made is
    /// revoked here too, or that request, if it still waits, is withdrawn.
    pub(super) async fn serve_withdraw(
        &self,
        peer: &str,
        call: wire::WithdrawCall,
    ) -> std::result::Result<wire::WithdrawReply, Rejection> {
        let _decision = self.decisions.lock().await;
        let inbound =
            self.table.find(|b| b.direction == Direction::Inbound && b.peer_home_id == peer).await?;
        if let Some(bridge) =
            inbound.filter(|b| b.state != BridgeState::Revoked && b.request_id == call.request_id)
        {
            self.revoke_bridge(bridge).await?;
        }
        let waiting = self.requests().await?.into_iter().find(|r| {
            r.peer_home_id == peer && r.id == call.request_id && r.status == RequestStatus::Pending
        });
        if let Some(request) = waiting {
            let withdrawn = BridgeRequestRecord {
                status: RequestStatus::Withdrawn,
                decided_at: Some(self.now()),
                ..request
            };
            self.table.save(None, &[withdrawn]).await.map_err(Error::from)?;
        }
        Ok(wire::WithdrawReply {})
    }

    /// `kiki bridge request ADDRESS --want … [--expect ID] [--name ALIAS]`.
    pub(super) async fn request(
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
        let addrs = resolve(address).await?;
        let started = Instant::now();
        let expect = (!expect.is_empty()).then_some(expect.as_str());
        let (_, peer) = self.links.dial_any(&addrs, expect).await.map_err(|e| match e {
            kiki_bridge::EndpointError::WrongPeer(wrong) => Error::FailedPrecondition(format!(
                "{address} is home {}, not the expected {}; nothing was filed",
                wrong.actual, wrong.expected
            )),
            e => took(dial_failure(&format!("cannot reach {address}"), e), started),
        })?;
        let peer_home_id = peer.peer_home_id().to_string();
        if peer_home_id == self.links.home_id() {
            return Err(Error::invalid("address", "that is this home"));
        }
        let existing = self.table.all().await?;
        let previous = existing
            .iter()
            .find(|b| b.direction == Direction::Outbound && b.peer_home_id == peer_home_id)
            .cloned();
        // A bridge requested again keeps its name: references to it must go on working. A
        // new name is the rename command's (and refused before anything is filed).
        let alias = match &previous {
            Some(b) if !name.is_empty() && name != b.alias => {
                return Err(Error::invalid(
                    "name",
                    format!(
                        "this home's bridge to {peer_home_id} is named {:?}; keep it, or rename it with `kiki bridge rename {} {name}`",
                        b.alias, b.alias
                    ),
                ));
            }
            Some(b) => b.alias.clone(),
            None if name.is_empty() => peer_home_id[..8].to_ascii_lowercase(),
            None => name.to_string(),
        };
        self.name_is_free(&alias, &peer_home_id, &existing)?;
        let pair = wire::BridgeCall::new(Call::Pair(wire::PairCall {
            name: home_name(self.links.home_id()),
            want: permissions_to_wire(want),
        }));
        let request_id = match call_link(peer.as_ref(), &pair, None).await {
            Ok(wire::BridgeReply { reply: Some(Reply::Pair(p)) }) => p.request_id,
            Ok(wire::BridgeReply { reply: Some(Reply::Error(e)) }) => return Err(from_wire(address, e)),
            Ok(_) => {
                return Err(Error::FailedPrecondition(format!(
                    "{address}: unexpected answer to a pairing request"
                )));
            }
            Err(e) => return Err(link_failure(address, e)),
        };
        let now = self.now();
        let bridge = BridgeRecord {
            id: previous.as_ref().map(|b| b.id.clone()).unwrap_or_else(|| new_id("br")),
            direction: Direction::Outbound,
            peer_home_id: peer_home_id.clone(),
            alias,
            address: addrs.iter().map(SocketAddr::to_string).collect::<Vec<_>>().join(","),
            state: BridgeState::Requested,
            permissions: previous.as_ref().map(|b| b.permissions).unwrap_or_default(),
            workspaces: previous.as_ref().map(|b| b.workspaces.clone()).unwrap_or_default(),
            request_id: request_id.clone(),
            created_at: previous.as_ref().map(|b| b.created_at).unwrap_or(now),
            updated_at: now,
            last_success: Some(now),
            last_error: String::new(),
            last_error_at: None,
            revoked_by_peer: false,
            requested: want,
        };
        self.table.save(Some(&bridge), &[]).await?;
        self.links.keep(&peer_home_id, peer).await;
        Ok((bridge, request_id))
    }

    /// `kiki bridge pending`: the requests waiting for the owner's decision.
    pub(super) async fn pending(&self) -> Result<Vec<BridgeRequestRecord>> {
        let _decisions = self.decisions.lock().await;
        Ok(self.requests().await?.into_iter().filter(|r| r.status == RequestStatus::Pending).collect())
    }

    /// The pairing requests filed with this home, oldest first; those left undecided past
    /// `[bridge] request_expiry` are marked `expired` first. A request decided (or expired)
    /// longer ago than that is forgotten, so the table stays small however many peers ask:
    /// its source keeps showing the outcome (see [`Pairing::refresh`]). The caller holds
    /// `decisions`.
    async fn requests(&self) -> Result<Vec<BridgeRequestRecord>> {
        let now = self.now();
        // (Under a minute of expiry, a peer's requests that the owner decided at once stop
        // counting against its rate limit early: the cap on waiting requests still holds.)
        let decided_before = now - self.request_expiry.as_millis() as i64;
        let forgotten = |r: &BridgeRequestRecord| r.decided_at.is_some_and(|at| at < decided_before);
        let mut requests = self.store.bridge_requests().await?;
        if requests.iter().any(forgotten) {
            self.store.prune_bridge_requests(decided_before).await?;
            requests.retain(|r| !forgotten(r));
        }
        for request in requests.iter_mut().filter(|r| policy::expired(r, now, self.request_expiry)) {
            request.status = RequestStatus::Expired;
            request.decided_at = Some(now);
            self.table.save(None, std::slice::from_ref(request)).await?;
        }
        Ok(requests)
    }

    /// The request the owner decides on (the caller holds `decisions`).
    async fn pending_request(&self, request_id: &str) -> Result<BridgeRequestRecord> {
        let request = self
            .requests()
            .await?
            .into_iter()
            .find(|r| r.id == request_id)
            .ok_or_else(|| Error::NotFound(format!("no pairing request {request_id}")))?;
        if request.status == RequestStatus::Expired {
            return Err(Error::FailedPrecondition(format!(
                "request {request_id} expired undecided (after [bridge] request_expiry); its peer may file a new one"
            )));
        }
        if request.status != RequestStatus::Pending {
            return Err(Error::FailedPrecondition(format!(
                "request {request_id} is already {}",
                request.status
            )));
        }
        Ok(request)
    }

    /// `kiki bridge approve REQUEST --allow … [--workspace W]… [--name ALIAS]`.
    pub(super) async fn approve(
        &self,
        request_id: &str,
        allow: &[String],
        workspaces: &[String],
        name: &str,
    ) -> Result<BridgeRecord> {
        if let Some(problem) = (!name.is_empty()).then(|| alias_problem(name)).flatten() {
            return Err(Error::invalid("name", problem));
        }
        let allow = parse_permissions("allow", allow)?;
        let workspaces = workspaces
            .iter()
            .map(|w| crate::threads::workspace::named("workspaces", w))
            .collect::<Result<Vec<_>>>()?;
        let _decision = self.decisions.lock().await;
        let mut request = self.pending_request(request_id).await?;
        if let Some(extra) = allow.iter().find(|p| !request.want.contains(*p)) {
            return Err(Error::invalid(
                "allow",
                format!("{:?} was not requested (wanted: {})", extra.as_str(), request.want.joined()),
            ));
        }
        let now = self.now();
        let previous = self
            .table
            .find(|b| b.direction == Direction::Inbound && b.peer_home_id == request.peer_home_id)
            .await?;
        let alias = match &previous {
            _ if !name.is_empty() => {
                self.name_is_free(name, &request.peer_home_id, &self.table.all().await?)?;
                name.to_string()
            }
            Some(b) => b.alias.clone(),
            None => self.inbound_alias(&request.name, &request.peer_home_id).await?,
        };
        let bridge = BridgeRecord {
            id: previous.as_ref().map(|b| b.id.clone()).unwrap_or_else(|| new_id("br")),
            direction: Direction::Inbound,
            peer_home_id: request.peer_home_id.clone(),
            alias,
            address: String::new(),
            state: BridgeState::Active,
            permissions: allow,
            workspaces,
            request_id: request.id.clone(),
            created_at: previous.as_ref().map(|b| b.created_at).unwrap_or(now),
            updated_at: now,
            last_success: None,
            last_error: String::new(),
            last_error_at: None,
            revoked_by_peer: false,
            requested: Permissions::default(),
        };
        request.status = RequestStatus::Approved;
        request.decided_at = Some(now);
        self.table.save(Some(&bridge), std::slice::from_ref(&request)).await?;
        info!(bridge_id = %bridge.id, peer = %bridge.peer_home_id, "bridge approved");
        let granted: Vec<&str> = bridge.permissions.iter().map(|p| p.as_str()).collect();
        self.runner.observer().bridge_changed(&bridge, &format!("approved: {}", granted.join(",")));
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
        let taken = self.table.all().await?;
        let free = |alias: &str| alias_problem(alias).is_none() && !taken.iter().any(|b| b.answers_to(alias));
        Ok(if free(&cleaned) {
            cleaned
        } else if alias_problem(&cleaned).is_some() {
            id_part
        } else {
            format!("{cleaned}-{id_part}")
        })
    }

    /// `kiki bridge rename BRIDGE NAME`: another local name for a bridge (either direction),
    /// usable as HOST from then on; the old one names nothing any more.
    pub(super) async fn rename(&self, which: &str, name: &str) -> Result<BridgeRecord> {
        if let Some(problem) = alias_problem(name) {
            return Err(Error::invalid("name", problem));
        }
        let _decision = self.decisions.lock().await;
        let bridges = self.table.all().await?;
        let mut bridge = self.one_named(which, &bridges)?;
        self.name_is_free(name, &bridge.peer_home_id, &bridges)?;
        bridge.alias = name.to_string();
        bridge.updated_at = self.now();
        self.table.save(Some(&bridge), &[]).await?;
        info!(bridge_id = %bridge.id, alias = %bridge.alias, "bridge renamed");
        Ok(bridge)
    }

    /// Whether `alias` may name a bridge with `peer`: no bridge with another home answers to
    /// it (the two directions with one peer may share a name).
    fn name_is_free(&self, alias: &str, peer: &str, bridges: &[BridgeRecord]) -> Result<()> {
        match bridges.iter().find(|b| b.answers_to(alias) && b.peer_home_id != peer) {
            Some(other) => Err(Error::invalid(
                "name",
                format!(
                    "{alias:?} already names the {} bridge {} ({})",
                    other.direction, other.id, other.peer_home_id
                ),
            )),
            None => Ok(()),
        }
    }

    /// The one bridge `name` (id, alias or peer home id) names; one that names bridges both
    /// ways is refused: the owner names one by its id.
    fn one_named(&self, name: &str, bridges: &[BridgeRecord]) -> Result<BridgeRecord> {
        match bridges.iter().filter(|b| b.answers_to(name)).collect::<Vec<_>>()[..] {
            [] => Err(Error::NotFound(format!("no bridge {name:?}"))),
            [one] => Ok(one.clone()),
            ref both => {
                let named: Vec<String> = both.iter().map(|b| format!("{} {}", b.direction, b.id)).collect();
                Err(Error::invalid(
                    "bridge",
                    format!("{name:?} names {}: name one by its id", named.join(" and ")),
                ))
            }
        }
    }

    /// `kiki bridge reject REQUEST`.
    pub(super) async fn reject(&self, request_id: &str) -> Result<BridgeRequestRecord> {
        let _decision = self.decisions.lock().await;
        let mut request = self.pending_request(request_id).await?;
        request.status = RequestStatus::Rejected;
        request.decided_at = Some(self.now());
        self.table.save(None, std::slice::from_ref(&request)).await?;
        Ok(request)
    }

    /// `kiki bridge revoke BRIDGE` (id, alias or peer home id). Takes effect at once: the
    /// next call over it is refused with `bridge_revoked`.
    pub(super) async fn revoke(&self, name: &str) -> Result<BridgeRecord> {
        let decision = self.decisions.lock().await;
        let bridges = self.table.all().await?;
        // A peer's home id (or an alias both directions share) may name two bridges, and
        // revoking the wrong one would cut the other direction: the owner names one.
        let bridge = self.one_named(name, &bridges)?;
        // Revoked already, it is not written again; an outbound one tells its target again.
        let bridge =
            if bridge.state == BridgeState::Revoked { bridge } else { self.revoke_bridge(bridge).await? };
        drop(decision);
        if bridge.direction == Direction::Outbound {
            // Tell the target, so its owner's list agrees and a new request needs a new
            // approval. Best effort, briefly: the revocation here stands either way.
            let withdraw = wire::WithdrawCall { request_id: bridge.request_id.clone() };
            let withdraw = wire::BridgeCall::new(Call::Withdraw(withdraw));
            // Given up, it is withdrawn (its stream reset) rather than left to arrive late.
            let given_up = Some(Instant::now());
            match tokio::time::timeout(PING_TIMEOUT, self.links.call(&bridge, &withdraw, given_up)).await {
                Ok(Ok(wire::BridgeReply { reply: Some(Reply::Withdraw(_)) })) => {
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
        bridge.state = BridgeState::Revoked;
        bridge.updated_at = self.now();
        if bridge.direction == Direction::Inbound {
            // What the peer brought and no turn has taken yet is refused with it.
            self.store.revoke_inbound(&bridge, bridge.updated_at).await?;
        } else {
            self.table.save(Some(&bridge), &[]).await?;
            // Its pending sends are refused now (`bridge_revoked`), not when their backoff
            // would have brought them round. Best effort: the revocation stands either way.
            if let Err(e) = self.store.outbox_retry_now(&bridge.peer_home_id, bridge.updated_at).await {
                warn!(error = %e, "cannot make a revoked bridge's pending sends due");
            }
        }
        self.parked.cut_off(&bridge);
        warn!(bridge_id = %bridge.id, peer = %bridge.peer_home_id, "bridge revoked");
        self.runner.observer().bridge_changed(&bridge, "revoked");
        Ok(bridge)
    }

    /// `kiki bridge disable|enable BRIDGE`: turns an inbound bridge's access off or back on.
    /// Off, every call over it is refused with `bridge_disabled` (not final: the source
    /// keeps retrying within its window) and messages it brought wait at their threads;
    /// nothing is deleted. Back on, held messages are delivered.
    pub(super) async fn set_inbound(&self, name: &str, enabled: bool) -> Result<BridgeRecord> {
        let _decision = self.decisions.lock().await;
        let bridges = self.table.all().await?;
        let Some(bridge) = bridges.iter().find(|b| b.direction == Direction::Inbound && b.answers_to(name))
        else {
            return Err(if bridges.iter().any(|b| b.answers_to(name)) {
                Error::FailedPrecondition(format!(
                    "{name:?} is an outbound bridge: only its target's owner can turn its access off"
                ))
            } else {
                Error::NotFound(format!("no bridge {name:?}"))
            });
        };
        let mut bridge = bridge.clone();
        bridge.state = policy::inbound_switched(&bridge, enabled)?;
        bridge.updated_at = self.now();
        self.table.save(Some(&bridge), &[]).await?;
        info!(bridge_id = %bridge.id, peer = %bridge.peer_home_id, enabled, "bridge inbound access set");
        self.runner.observer().bridge_changed(&bridge, if enabled { "enabled" } else { "disabled" });
        if enabled {
            // Messages held back while it was off may start turns now.
            for thread in self.store.threads_with_queued_input().await? {
                self.runner.kick(&thread);
            }
        } else {
            self.parked.cut_off(&bridge);
        }
        Ok(bridge)
    }

    /// `kiki bridge list`: every bridge, outbound ones refreshed by a real round trip.
    pub(super) async fn list(&self) -> Result<Vec<BridgeRecord>> {
        let bridges = self.table.all().await?;
        let mut refreshed = Vec::with_capacity(bridges.len());
        for bridge in bridges.iter().cloned() {
            if bridge.direction == Direction::Outbound && bridge.state != BridgeState::Revoked {
                refreshed.push(self.refresh(bridge).await?);
            } else {
                refreshed.push(bridge);
            }
        }
        Ok(refreshed)
    }

    /// Asks the targets of bridges whose calls they answered, though this home did not know
    /// they approved them (see `Links::answered`), what they granted, until `stop`.
    pub(super) async fn run_learning(
        &self,
        stop: CancellationToken,
        worker: crate::observe::workers::Worker,
    ) {
        loop {
            worker.idle();
            tokio::select! {
                () = stop.cancelled() => return,
                () = self.links.unconfirmed_answered.notified() => {}
            }
            worker.busy();
            for id in self.links.take_answered_unconfirmed() {
                let bridge = match self.table.find(|b| b.id == id).await {
                    Ok(Some(b)) if !matches!(b.state, BridgeState::Active | BridgeState::Revoked) => b,
                    Ok(_) => continue,
                    Err(e) => {
                        warn!(error = %e, "cannot read a bridge to learn its grant");
                        continue;
                    }
                };
                if let Err(e) = self.refresh(bridge).await {
                    warn!(error = %e, "cannot learn a bridge's grant");
                    worker.failed(&e);
                }
            }
        }
    }

    /// Pings the target: records link health and learns what it granted.
    async fn refresh(&self, mut bridge: BridgeRecord) -> Result<BridgeRecord> {
        let ping = wire::BridgeCall::new(Call::Ping(wire::PingCall {}));
        let was = bridge.state;
        match tokio::time::timeout(PING_TIMEOUT, self.links.call(&bridge, &ping, None)).await {
            Ok(Ok(wire::BridgeReply { reply: Some(Reply::Ping(p)) })) => {
                bridge.state = policy::learnt_state(p.state(), bridge.state);
                // A permission this home cannot read (a newer peer's) grants nothing here.
                bridge.permissions = permissions_from_wire(&p.permissions);
                bridge.workspaces = p.workspaces;
                bridge.last_success = Some(self.now());
            }
            Ok(Ok(_)) => self.note_error(&mut bridge, "unexpected answer to a ping".into()),
            Ok(Err(e)) => self.note_error(&mut bridge, e.to_string()),
            Err(_) => self.note_error(&mut bridge, format!("no answer within {PING_TIMEOUT:?}")),
        }
        bridge.updated_at = self.now();
        // Saved with the state: the worker never sees the one without the other.
        let revoked_there = bridge.state == BridgeState::Revoked && was != BridgeState::Revoked;
        bridge.revoked_by_peer |= revoked_there;
        let bridge = self.save_learnt(&bridge, true).await?;
        if revoked_there {
            warn!(bridge_id = %bridge.id, peer = %bridge.peer_home_id, "the target revoked this bridge");
            // Its messages are asked about at once (the target answers for what it holds and
            // refuses the rest), not at their next turn.
            if let Err(e) = self.store.outbox_retry_now(&bridge.peer_home_id, bridge.updated_at).await {
                warn!(error = %e, "cannot make a revoked bridge's messages due");
            }
        }
        Ok(bridge)
    }

    /// Saves what a call over `learnt` (a copy read before the call) found out — its link's
    /// health and, with `grant`, the state and grant the target reported — onto the bridge as
    /// it is now, under the owner's decisions: a revocation made here during the call stands.
    pub(super) async fn save_learnt(&self, learnt: &BridgeRecord, grant: bool) -> Result<BridgeRecord> {
        let _decision = self.decisions.lock().await;
        let Some(mut current) = self.table.find(|b| b.id == learnt.id).await? else {
            return Ok(learnt.clone());
        };
        (current.last_success, current.last_error_at) = (learnt.last_success, learnt.last_error_at);
        current.last_error.clone_from(&learnt.last_error);
        if grant && current.state != BridgeState::Revoked {
            current.state.clone_from(&learnt.state);
            current.permissions.clone_from(&learnt.permissions);
            current.workspaces.clone_from(&learnt.workspaces);
            current.revoked_by_peer = learnt.revoked_by_peer;
        }
        current.updated_at = learnt.updated_at;
        self.table.save(Some(&current), &[]).await?;
        Ok(current)
    }

    pub(super) fn note_error(&self, bridge: &mut BridgeRecord, error: String) {
        bridge.last_error = error;
        bridge.last_error_at = Some(self.now());
    }
}
