//! What a home tells its operator as it runs: each part that makes something happen tells
//! the home's [`Observer`] once, which counts it in the [metrics](metrics::Metrics) and
//! puts it on the [feed](feed::Feed) (`kiki events`); its background loops are
//! [workers](workers::Workers) (`kiki status --workers`). Its spans are exported as
//! [traces] that cross homes.

pub mod feed;
pub mod metrics;
pub mod traces;
pub mod workers;

use std::time::Duration;

use feed::{Feed, FeedEvent, FeedKind};
use metrics::Metrics;

use crate::error::Error;
use crate::mailbox::Sent;
use crate::store::{BridgeRecord, MessageStatus, TurnStatus, TurnUsage};
use crate::time::Clock;

/// The home's metrics and feed, told of what happens.
pub struct Observer {
    metrics: Metrics,
    feed: Feed,
    workers: workers::Workers,
    clock: Clock,
}

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observer").finish_non_exhaustive()
    }
}

impl Observer {
    pub fn new(clock: Clock) -> Self {
        Self { metrics: Metrics::default(), feed: Feed::default(), workers: Default::default(), clock }
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    pub fn feed(&self) -> &Feed {
        &self.feed
    }

    /// Registers a background worker named `name` (see [`workers`]).
    pub fn worker(&self, name: &'static str) -> workers::Worker {
        self.workers.start(name, &self.clock)
    }

    pub fn workers(&self) -> Vec<workers::WorkerView> {
        self.workers.list()
    }

    fn publish(&self, mut event: FeedEvent) {
        event.at = self.clock.now_ms();
        self.feed.publish(event);
    }

    /// A send to `thread_id` answered (or refused), from this home or from `peer`.
    pub fn sent(&self, thread_id: &str, peer: &str, answer: &Result<Sent, Error>) {
        self.metrics.sent(answer);
        match answer {
            Ok(sent) => {
                tracing::debug!(message_id = %sent.message_id, status = sent.status.as_str(), replayed = sent.replayed, "send answered")
            }
            Err(e) => tracing::debug!(error = %e, "send refused"),
        }
        let from = if peer.is_empty() { String::new() } else { format!(" from {}", short(peer)) };
        let mut event = match answer {
            Ok(sent) => {
                let how = match (sent.replayed, sent.status) {
                    (true, _) => "replayed".to_string(),
                    (false, MessageStatus::Undeliverable) => format!("undeliverable ({})", sent.reason),
                    (false, status) => status.as_str().to_string(),
                };
                let mut event = FeedEvent::new(FeedKind::Send, format!("send{from} to {thread_id}: {how}"));
                event.message_id = sent.message_id.clone();
                event
            }
            Err(e) => FeedEvent::new(FeedKind::Refusal, format!("send{from} to {thread_id} refused: {e}")),
        };
        event.thread_id = thread_id.to_string();
        event.peer_home_id = peer.to_string();
        self.publish(event);
    }

    /// A send from `peer` refused before it named a thread of this home that exists.
    pub fn refused(&self, thread_id: &str, peer: &str, reason: &str) {
        self.metrics.refused(reason);
        let summary = format!("send from {} to {thread_id} refused: {reason}", short(peer));
        let mut event = FeedEvent::new(FeedKind::Refusal, summary);
        (event.thread_id, event.peer_home_id) = (thread_id.to_string(), peer.to_string());
        self.publish(event);
    }

    pub fn turn_started(&self, thread_id: &str, turn_id: &str, profile: &str) {
        let mut event = FeedEvent::new(
            FeedKind::TurnStarted,
            format!("turn {turn_id} of {thread_id} started ({profile})"),
        );
        (event.thread_id, event.turn_id) = (thread_id.to_string(), turn_id.to_string());
        self.publish(event);
    }

    /// A turn that ended: `executor` and `profile` are those of the thread's profile (none
    /// for a turn whose agent could not be started).
    #[allow(clippy::too_many_arguments)]
    pub fn turn_ended(
        &self,
        thread_id: &str,
        turn_id: &str,
        executor: &str,
        profile: &str,
        status: TurnStatus,
        ran: Duration,
        usage: Option<TurnUsage>,
    ) {
        self.metrics.turn_ended(executor, profile, status, ran, usage);
        let summary =
            format!("turn {turn_id} of {thread_id} {} after {:.1} s", status.as_str(), ran.as_secs_f64());
        let mut event = FeedEvent::new(FeedKind::TurnEnded, summary);
        (event.thread_id, event.turn_id) = (thread_id.to_string(), turn_id.to_string());
        self.publish(event);
    }

    pub fn permission_requested(&self, thread_id: &str, turn_id: &str, request_id: &str, tool: &str) {
        let summary = format!(
            "{thread_id} asks to use {tool}: `kiki approve {request_id}` or `kiki deny {request_id}`"
        );
        let mut event = FeedEvent::new(FeedKind::PermissionRequest, summary);
        (event.thread_id, event.turn_id) = (thread_id.to_string(), turn_id.to_string());
        self.publish(event);
    }

    /// A post to a room of this home, the members it woke, and whether the loop guard paused
    /// the room.
    pub fn room_post(&self, room_id: &str, entry_id: &str, woke: &[String], paused: bool) {
        self.metrics.room_post(woke.len(), paused);
        let mut summary = format!("post {entry_id} to {room_id}, woke {}", woke.len());
        if paused {
            summary.push_str("; the loop guard paused the room");
        }
        let mut event = FeedEvent::new(FeedKind::RoomPost, summary);
        (event.room_id, event.message_id) = (room_id.to_string(), entry_id.to_string());
        self.publish(event);
    }

    /// An attempt to carry `message_id` to `peer`: what became of it (`delivered`,
    /// `accepted`, a refusal, or why it will be retried).
    pub fn outbox_attempt(&self, peer: &str, message_id: &str, answered: bool, outcome: &str) {
        self.metrics.outbox_attempt(answered);
        let summary = format!("message {message_id} to {}: {outcome}", short(peer));
        let mut event = FeedEvent::new(FeedKind::Outbox, summary);
        (event.peer_home_id, event.message_id) = (peer.to_string(), message_id.to_string());
        self.publish(event);
    }

    pub fn link_rtt(&self, peer: &str, rtt: Duration) {
        self.metrics.link_rtt(peer, rtt);
    }

    /// A bridge the owner decided on, or whose state changed.
    pub fn bridge_changed(&self, bridge: &BridgeRecord, what: &str) {
        let summary = format!(
            "bridge {} ({}, {}): {what}",
            bridge.alias,
            bridge.direction.as_str(),
            short(&bridge.peer_home_id)
        );
        let mut event = FeedEvent::new(FeedKind::Bridge, summary);
        event.peer_home_id = bridge.peer_home_id.clone();
        self.publish(event);
    }
}

/// A home id's first characters, enough to tell homes apart in a line.
fn short(home_id: &str) -> &str {
    home_id.get(..8).unwrap_or(home_id)
}
