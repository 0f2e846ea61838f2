//! The home's event feed (`kiki events`): what happened — sends, refusals, turns started and
//! ended, permission requests, room posts, outbox outcomes, bridge decisions — in one
//! order, the last [`KEPT`] kept in memory for a reader that comes later, each new one
//! passed on to the readers following it. Nothing here is durable: the store keeps what
//! matters; the feed is for people who would rather watch than poll.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::broadcast;

use crate::store::Millis;
use crate::sync::lock;

/// Events kept for readers that come later.
pub const KEPT: usize = 1000;

/// What kind of thing happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeedKind {
    Send,
    Refusal,
    TurnStarted,
    TurnEnded,
    PermissionRequest,
    RoomPost,
    Outbox,
    Bridge,
}

/// One thing that happened at the home.
#[derive(Debug, Clone)]
pub struct FeedEvent {
    /// Its place in this kikid's feed: 1, 2, …
    pub seq: u64,
    pub at: Millis,
    pub kind: FeedKind,
    pub thread_id: String,
    pub room_id: String,
    /// The other home, for what came over or went out on a bridge.
    pub peer_home_id: String,
    pub message_id: String,
    pub turn_id: String,
    /// What happened, in words.
    pub summary: String,
}

impl FeedEvent {
    pub fn new(kind: FeedKind, summary: String) -> Self {
        Self {
            seq: 0,
            at: 0,
            kind,
            thread_id: String::new(),
            room_id: String::new(),
            peer_home_id: String::new(),
            message_id: String::new(),
            turn_id: String::new(),
            summary,
        }
    }
}

pub struct Feed {
    next: AtomicU64,
    /// The last [`KEPT`] events; held while an event is passed on, so that a reader joining
    /// gets every event once: those kept, then the ones after them.
    kept: std::sync::Mutex<VecDeque<Arc<FeedEvent>>>,
    live: broadcast::Sender<Arc<FeedEvent>>,
}

impl Default for Feed {
    fn default() -> Self {
        Self { next: AtomicU64::new(1), kept: Default::default(), live: broadcast::channel(KEPT).0 }
    }
}

impl Feed {
    /// Adds `event` (numbered here) to the feed.
    pub fn publish(&self, mut event: FeedEvent) {
        let mut kept = lock(&self.kept);
        event.seq = self.next.fetch_add(1, Ordering::Relaxed);
        let event = Arc::new(event);
        if kept.len() == KEPT {
            kept.pop_front();
        }
        kept.push_back(event.clone());
        // Nobody following is no failure.
        let _ = self.live.send(event);
    }

    /// The events kept, and the ones after them as they come.
    pub fn follow(&self) -> (Vec<Arc<FeedEvent>>, broadcast::Receiver<Arc<FeedEvent>>) {
        let kept = lock(&self.kept);
        (kept.iter().cloned().collect(), self.live.subscribe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reader_gets_the_kept_events_then_the_new_ones_each_once_in_order() {
        let feed = Feed::default();
        for i in 0..KEPT + 5 {
            feed.publish(FeedEvent::new(FeedKind::Send, format!("send {i}")));
        }
        let (kept, mut live) = feed.follow();
        assert_eq!(kept.len(), KEPT, "only the last {KEPT} are kept");
        assert_eq!((kept[0].seq, kept[KEPT - 1].seq), (6, (KEPT + 5) as u64));
        feed.publish(FeedEvent::new(FeedKind::Refusal, "later".into()));
        let next = live.try_recv().expect("the next one");
        assert_eq!((next.seq, next.summary.as_str()), ((KEPT + 6) as u64, "later"));
        assert!(live.try_recv().is_err(), "nothing twice");
    }
}
