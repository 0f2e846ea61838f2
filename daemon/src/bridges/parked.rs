//! Peers' parked calls (ThreadWaits over their bridges), by peer: ended when the peer's
//! bridge is revoked or its access turned off, so they end at once instead of at their
//! timeout. Serving peers parks them; pairing's decisions end them.

use std::collections::HashMap;

use tokio_util::sync::CancellationToken;

use crate::store::{BridgeRecord, Direction};
use crate::sync::lock;

/// The parked calls of each peer with an inbound bridge: cancelled when the bridge is
/// revoked or its access turned off, so they end at once instead of at their timeout.
#[derive(Default)]
pub(super) struct ParkedCalls {
    by_peer: std::sync::Mutex<HashMap<String, CancellationToken>>,
}

impl ParkedCalls {
    /// What a call of `peer`'s parks on.
    pub(super) fn token(&self, peer: &str) -> CancellationToken {
        lock(&self.by_peer).entry(peer.to_string()).or_default().clone()
    }

    /// Ends the parked calls of an inbound bridge's peer (revoked or turned off).
    pub(super) fn cut_off(&self, bridge: &BridgeRecord) {
        if bridge.direction == Direction::Inbound
            && let Some(parked) = lock(&self.by_peer).remove(&bridge.peer_home_id)
        {
            parked.cancel();
        }
    }
}
