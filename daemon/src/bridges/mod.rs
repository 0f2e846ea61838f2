//! Bridges: owner-approved, one-way links between homes. One small type per
//! job, and [`Bridges`], the facade the gRPC layer calls, which owns them and their tasks:
//!
//! - `table`: the bridge records, kept in memory (every peer call checks them).
//! - `links`: the connections this home dials, one per peer, redialed when lost and let go
//!   when idle.
//! - `pairing`: requests, approval, rejection, revocation, turning inbound access off and
//!   on, and refreshing an outbound bridge from its target (learning a grant as soon as the
//!   target serves a call); its decisions are pure, in `pairing/policy.rs`.
//! - `parked`: peers' parked calls, ended when their bridge is revoked or turned off.
//! - `inbound`: serving peers' calls — every call checked against the peer's grant — and
//!   the target's side of cross-home sends.
//! - `outbox`: the source's side of cross-home sends: the transactional outbox, its
//!   worker, backoff and follow-ups, and the recorder of answered sends' outcomes.
//! - `remote`: ThreadList, ThreadRead and ThreadWait over an outbound bridge.
//! - `receipts`: what both sides show of the messages they exchanged.
//! - `codec`: what travels between homes as the wire spells it: errors, refusals, the
//!   bridges' words, and the calls' and answers' messages translated to and from the local
//!   API's.
//!
//! Each part is given what it uses, named (the table, the links, the store, the owner's
//! decisions lock, …), not one shared context. Every background task (the accept loop and
//! the peers it serves, the outbox worker and its attempts, the recorder, the expiry sweep,
//! the idle-connection sweep, learning grants) runs on the
//! facade's task tracker and is joined by [`Bridges::close`], in the home's ordered
//! shutdown.

mod codec;
mod inbound;
mod links;
mod outbox;
mod pairing;
mod parked;
mod receipts;
mod remote;
mod table;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kiki_bridge::Transport;
use kiki_proto as pb;
use kiki_proto::bridge::v1 as wire;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::warn;

pub use links::quic_transport;
pub use pairing::{LinkProbe, parse_permissions};
pub use receipts::ReceiptPage;

use crate::caller::Caller;
use crate::config::Config;
use crate::error::Result;
use crate::mailbox::{Mailbox, Sent, WaitResult, Waits};
use crate::rooms::Rooms;
use crate::store::{BridgeRecord, BridgeRequestRecord, BridgeState, Direction, SourceRef, Store};
use crate::sync::KeyLocks;
use crate::threads::Threads;
use inbound::Inbound;
use links::Links;
use outbox::Outbox;
use pairing::Pairing;
use parked::ParkedCalls;
use receipts::Receipts;
use remote::Remote;
use table::BridgeTable;

/// How often a busy link's `last_success` is written (every call would be a write).
const HEALTH_EVERY: Duration = Duration::from_secs(10);
/// How long a stopping home waits for the bridges' tasks before it goes on without them.
const CLOSE_WITHIN: Duration = Duration::from_secs(10);

/// A page of ThreadList, as asked of a peer.
#[derive(Debug, Clone, Copy)]
pub struct ListQuery<'a> {
    pub workspace_id: &'a str,
    pub limit: Option<u32>,
    pub cursor: &'a str,
}

/// A ThreadRead, as asked of a peer.
#[derive(Debug, Clone, Copy)]
pub struct ReadQuery<'a> {
    pub limit: Option<u32>,
    pub cursor: &'a str,
    pub content_ref: &'a str,
    /// The newest turns instead of the oldest (ThreadRead's `last`).
    pub last: Option<u32>,
}

/// A peer's answer, passed on as the peer gave it (translated from the wire into the
/// `kiki.v1` message the local API answers with): the services route it without looking
/// inside, and only the gRPC edge opens it.
#[derive(Debug)]
pub struct FromPeer<T>(T);

impl<T> FromPeer<T> {
    /// The answer as the peer gave it, for the protobuf edge.
    pub fn into_pb(self) -> T {
        self.0
    }
}

/// A peer's page of threads, as its ThreadList answered.
pub type PeerThreads = FromPeer<pb::ThreadListResponse>;
/// A peer's page of turns (or segment), as its ThreadRead answered.
pub type PeerRead = FromPeer<pb::ThreadReadResponse>;

/// What the owner's decisions hold: two racing approvals cannot both apply, racing
/// requests cannot pass their limits together, and a revocation made during a call stands.
type Decisions = Arc<tokio::sync::Mutex<()>>;

/// What of the home the bridges serve peers from and ship for.
pub struct HomeParts {
    pub store: Arc<dyn Store>,
    pub threads: Threads,
    pub config: Arc<Config>,
    pub mailbox: Mailbox,
    pub waits: Waits,
    pub rooms: Rooms,
    /// One send at a time per sender's key, shared with the mailbox.
    pub send_keys: Arc<KeyLocks>,
    /// Rung by whatever writes outbox entries (room posts too): the worker looks again.
    pub outbox_work: Arc<tokio::sync::Notify>,
    /// Whether this replica works the outbox's retries now.
    pub outbox_duty: Arc<crate::replica::OutboxDuty>,
}

/// The bridges of one home. Cheap to clone.
#[derive(Clone)]
pub struct Bridges {
    inner: Arc<Parts>,
}

struct Parts {
    table: Arc<BridgeTable>,
    links: Arc<Links>,
    store: Arc<dyn Store>,
    pairing: Arc<Pairing>,
    remote: Remote,
    outbox: Outbox,
    /// Ends the background tasks (a child of the home's shutdown).
    stop: CancellationToken,
    tasks: TaskTracker,
}

impl Bridges {
    /// Starts answering peers on `endpoint` and shipping the outbox, until the home shuts
    /// down (`shutdown`) and [`Bridges::close`] joins what was started.
    pub fn start(home: HomeParts, endpoint: Arc<dyn Transport>, shutdown: &CancellationToken) -> Self {
        let HomeParts { store, threads, config, mailbox, waits, rooms, send_keys, outbox_work, outbox_duty } =
            home;
        let observer = threads.observer().clone();
        let table = Arc::new(BridgeTable::new(store.clone()));
        let links = Arc::new(Links::new(endpoint, config.bridge.connect_timeout));
        // Peers' parked calls, ended when their bridge is revoked or turned off.
        let parked = Arc::new(ParkedCalls::default());
        let decisions = Decisions::default();
        let (stop, tasks) = (shutdown.child_token(), TaskTracker::new());
        let pairing = Arc::new(Pairing {
            table: table.clone(),
            links: links.clone(),
            store: store.clone(),
            decisions: decisions.clone(),
            parked: parked.clone(),
            request_expiry: config.bridge.request_expiry,
            runner: threads.runner().clone(),
        });
        let outbox = Outbox::new(
            outbox::OutboxParts {
                table: table.clone(),
                links: links.clone(),
                store: store.clone(),
                config: config.clone(),
                outbox_work,
                duty: outbox_duty,
                send_keys,
                clock: threads.clock().clone(),
                observer: threads.observer().clone(),
            },
            tasks.clone(),
        );
        let inbound = Arc::new(Inbound {
            table: table.clone(),
            links: links.clone(),
            store: store.clone(),
            config,
            threads,
            mailbox,
            waits,
            rooms,
            parked,
            pairing: pairing.clone(),
        });
        tasks.spawn(inbound.clone().run(stop.clone(), tasks.clone()));
        tasks.spawn({
            let (inbound, stop, worker) =
                (inbound, stop.clone(), observer.worker("bridged messages' expiry"));
            async move { inbound.run_expiry(stop, worker).await }
        });
        tasks.spawn({
            let (outbox, stop) = (outbox.clone(), stop.clone());
            async move { outbox.run_worker(stop).await }
        });
        tasks.spawn({
            let (outbox, stop) = (outbox.clone(), stop.clone());
            async move { outbox.run_recorder(stop).await }
        });
        tasks.spawn({
            let (links, stop, worker) = (links.clone(), stop.clone(), observer.worker("idle connections"));
            async move { links.run_idle(stop, worker).await }
        });
        tasks.spawn({
            let (pairing, stop, worker) = (pairing.clone(), stop.clone(), observer.worker("grants learnt"));
            async move { pairing.run_learning(stop, worker).await }
        });
        let remote = Remote { table: table.clone(), links: links.clone(), pairing: pairing.clone() };
        Self { inner: Arc::new(Parts { table, links, store, pairing, remote, outbox, stop, tasks }) }
    }

    /// Stops the bridges (shutdown): the background loops end, the outcomes of answered sends
    /// not yet written are written, every connection and the endpoint close (calls under way
    /// fail at once), and every task started is joined.
    pub async fn close(&self) {
        let parts = &self.inner;
        parts.stop.cancel();
        // What the recorder had no time to write; a send answered after this writes its own.
        parts.outbox.record_answered(true).await;
        parts.links.close().await;
        parts.tasks.close();
        // Real time: a bound on a stop, not a timing of the home's.
        if tokio::time::timeout(CLOSE_WITHIN, parts.tasks.wait()).await.is_err() {
            warn!(tasks = parts.tasks.len(), within = ?CLOSE_WITHIN, "bridge tasks still running; the home stops without them");
        }
    }

    /// The address the QUIC endpoint is bound to.
    pub fn listen_addr(&self) -> String {
        self.inner.links.endpoint().local_addr()
    }

    // ----- the owner's actions (pairing) -------------------------------------------------

    /// `kiki bridge request ADDRESS --want … [--expect ID] [--name ALIAS]`: the outbound
    /// bridge and the id of the request filed at the target.
    pub async fn request(
        &self,
        caller: &Caller,
        address: &str,
        want: &[String],
        expect: &str,
        name: &str,
    ) -> Result<(BridgeRecord, String)> {
        caller.owner_only("managing bridges")?;
        self.inner.pairing.request(address, want, expect, name).await
    }

    /// `kiki bridge pending`: the requests waiting for the owner's decision.
    pub async fn pending(&self, caller: &Caller) -> Result<Vec<BridgeRequestRecord>> {
        caller.owner_only("managing bridges")?;
        self.inner.pairing.pending().await
    }

    /// `kiki bridge approve REQUEST --allow … [--workspace W]… [--name ALIAS]`.
    pub async fn approve(
        &self,
        caller: &Caller,
        request_id: &str,
        allow: &[String],
        workspaces: &[String],
        name: &str,
    ) -> Result<BridgeRecord> {
        caller.owner_only("managing bridges")?;
        self.inner.pairing.approve(request_id, allow, workspaces, name).await
    }

    /// `kiki bridge rename BRIDGE NAME`: another local name for a bridge.
    pub async fn rename(&self, caller: &Caller, bridge: &str, name: &str) -> Result<BridgeRecord> {
        caller.owner_only("managing bridges")?;
        self.inner.pairing.rename(bridge, name).await
    }

    /// `kiki bridge reject REQUEST`.
    pub async fn reject(&self, caller: &Caller, request_id: &str) -> Result<BridgeRequestRecord> {
        caller.owner_only("managing bridges")?;
        self.inner.pairing.reject(request_id).await
    }

    /// `kiki bridge revoke BRIDGE` (id, alias or peer home id): takes effect at once.
    pub async fn revoke(&self, caller: &Caller, name: &str) -> Result<BridgeRecord> {
        caller.owner_only("managing bridges")?;
        self.inner.pairing.revoke(name).await
    }

    /// `kiki bridge disable|enable BRIDGE`: an inbound bridge's access off or back on.
    pub async fn set_inbound(&self, caller: &Caller, name: &str, enabled: bool) -> Result<BridgeRecord> {
        caller.owner_only("managing bridges")?;
        self.inner.pairing.set_inbound(name, enabled).await
    }

    /// `kiki bridge list`: every bridge, outbound ones refreshed by a real round trip.
    /// `kiki doctor`'s look at the links: every bridge, each outbound one that is not
    /// revoked with what a ping over it found (all pinged at once: a dead peer costs its
    /// ping's bound, not one for each).
    pub async fn check_links(&self) -> Result<Vec<(BridgeRecord, Option<Result<LinkProbe>>)>> {
        let bridges = self.inner.table.all().await?;
        let mut pings = tokio::task::JoinSet::new();
        for (i, bridge) in bridges.iter().enumerate() {
            if bridge.direction == Direction::Outbound && bridge.state != BridgeState::Revoked {
                let (bridges, bridge) = (self.clone(), bridge.clone());
                pings.spawn(async move { (i, bridges.inner.pairing.probe(&bridge).await) });
            }
        }
        let mut probes: Vec<Option<Result<LinkProbe>>> = bridges.iter().map(|_| None).collect();
        while let Some(done) = pings.join_next().await {
            if let Ok((i, probe)) = done {
                probes[i] = Some(probe);
            }
        }
        Ok(bridges.iter().cloned().zip(probes).collect())
    }

    pub async fn list(&self, caller: &Caller) -> Result<Vec<BridgeRecord>> {
        caller.owner_only("managing bridges")?;
        self.inner.pairing.list().await
    }

    /// Messages waiting on this bridge: unacknowledged sends (outbound), or messages from
    /// the peer queued at this home's threads (inbound).
    pub async fn pending_count(&self, bridge: &BridgeRecord) -> Result<u64> {
        self.receipts_view().pending_count(bridge).await
    }

    /// `kiki bridge receipts BRIDGE`: a page of what went over it.
    pub async fn receipts(
        &self,
        caller: &Caller,
        name: &str,
        limit: Option<u32>,
        cursor: &str,
    ) -> Result<ReceiptPage> {
        caller.owner_only("managing bridges")?;
        self.receipts_view().page(name, limit, cursor).await
    }

    fn receipts_view(&self) -> Receipts<'_> {
        Receipts { store: self.inner.store.as_ref(), table: &self.inner.table, outbox: &self.inner.outbox }
    }

    // ----- calls on threads behind an outbound bridge -------------------------------------

    /// The outbound bridge HOST names (alias, peer home id or bridge id).
    pub async fn outbound(&self, host: &str) -> Result<BridgeRecord> {
        self.inner.table.outbound(host).await
    }

    /// ThreadList of the home behind `host`.
    pub async fn list_remote(&self, host: &str, query: ListQuery<'_>) -> Result<PeerThreads> {
        self.inner.remote.list(host, query).await.map(FromPeer)
    }

    /// ThreadRead of a thread behind its `target.host_id`.
    pub async fn read_remote(&self, target: &pb::ThreadRef, query: ReadQuery<'_>) -> Result<PeerRead> {
        self.inner.remote.read(target, query).await.map(FromPeer)
    }

    /// ThreadWait on threads behind `host`, all on that one home; results are named as the
    /// caller named their targets.
    pub async fn wait_remote(
        &self,
        host: &str,
        targets: &[pb::ThreadRef],
        timeout_ms: Option<u32>,
        cursors: &HashMap<String, String>,
    ) -> Result<(Vec<WaitResult>, bool)> {
        self.inner.remote.wait(host, targets, timeout_ms, cursors).await
    }

    /// ThreadSend to `target_session` behind `host`, from a thread of this home (`None`: an
    /// external client): durable in the outbox before it answers, shipped at once if the
    /// link allows.
    pub async fn send_remote(
        &self,
        source: Option<SourceRef>,
        host: &str,
        target_session: &str,
        content: &str,
        key: &str,
    ) -> Result<Sent> {
        self.inner.outbox.send(source, host, target_session, content, key).await
    }

    /// Tells the home behind `host` that its thread `session` joined room `room_id` here;
    /// that home's id.
    pub async fn join_remote_room(&self, host: &str, room_id: &str, session: &str) -> Result<String> {
        let bridge = self.outbound(host).await?;
        self.inner.remote.room_join(&bridge.peer_home_id, room_id, session).await?;
        Ok(bridge.peer_home_id)
    }

    /// A post by `source` (a thread of this home) to room `room_id` of home `home_id`.
    pub async fn post_remote_room(
        &self,
        home_id: &str,
        source: SourceRef,
        room_id: &str,
        content: &str,
        mentions: &[String],
        key: &str,
    ) -> Result<FromPeer<pb::ThreadSendResponse>> {
        let call = wire::RoomPostCall {
            room_id: room_id.to_string(),
            source_thread: source.thread_id,
            source_workspace: source.workspace_id,
            content: content.to_string(),
            mentions: mentions.to_vec(),
            idempotency_key: key.to_string(),
        };
        self.inner.remote.room_post(home_id, call).await.map(FromPeer)
    }

    /// RoomRead by `thread` (of this home) of room `room_id` of home `home_id`.
    pub async fn read_remote_room(
        &self,
        home_id: &str,
        thread: &str,
        room_id: &str,
        limit: Option<u32>,
        after: &str,
    ) -> Result<FromPeer<pb::RoomReadResponse>> {
        let call = wire::RoomReadCall {
            room_id: room_id.to_string(),
            source_thread: thread.to_string(),
            limit,
            after_id: after.to_string(),
        };
        self.inner.remote.room_read(home_id, call).await.map(FromPeer)
    }

    /// The answer for a cross-home send's key already in the outbox (`None` if new).
    pub async fn replay_remote(
        &self,
        source_thread: &str,
        host: &str,
        target_session: &str,
        content: &str,
        key: &str,
    ) -> Result<Option<Sent>> {
        self.inner.outbox.replay(source_thread, host, target_session, content, key).await
    }
}
