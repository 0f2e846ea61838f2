//! What a home shows of its bridged messages: `kiki bridge receipts` (pages of receipts, the
//! newest first, each page oldest first) and the pending counts of `kiki bridge list`. Both
//! read only what they show: a busy bridge's history grows without bound.
//!
//! A name may match several bridges (a peer home id names the outbound and the inbound
//! bridge with that peer), so a page merges their receipts by time — when an outbound
//! message was sent, when an inbound receipt was written — and the cursor keeps, for each
//! bridge, the next receipt its walk back shows: what arrives after the first page is on no
//! page of that walk.

use std::collections::HashMap;

use kiki_proto as pb;

use super::outbox::Outbox;
use super::table::BridgeTable;
use crate::convert::{inbound_receipt_to_pb, outbound_receipt_to_pb};
use crate::error::{Error, Result};
use crate::store::{BridgeRecord, Millis, OutboxRecord, Store};
use crate::store::{Direction, OutboxStatus};
use crate::threads::cursor;
use kiki_proto::limits;

/// A page of receipts and the cursor for the older ones.
pub struct ReceiptPage {
    pub receipts: Vec<pb::Receipt>,
    pub next_cursor: Option<String>,
}

/// Where one bridge's walk back through its receipts stands: the next receipt to show.
#[derive(Debug, Clone, PartialEq)]
enum Position {
    /// The outbound entry (created_at, id), and the ones created before it.
    Outbound(Millis, String),
    /// The inbound receipt with this seq, and those before it.
    Inbound(i64),
    /// All shown.
    Done,
}

/// One receipt on its way into a page: what orders it (time, then a tie-break) and its
/// place in its bridge's walk.
struct Candidate {
    order: (Millis, String),
    at: Position,
    receipt: pb::Receipt,
}

impl Position {
    /// A bridge's first page starts at its newest receipt.
    fn newest(bridge: &BridgeRecord) -> Self {
        if bridge.direction == Direction::Outbound {
            Position::Outbound(Millis::MAX, String::new())
        } else {
            Position::Inbound(i64::MAX)
        }
    }
}

/// What this home shows of its bridged messages (see the module docs).
pub(super) struct Receipts<'a> {
    pub(super) store: &'a dyn Store,
    pub(super) table: &'a BridgeTable,
    pub(super) outbox: &'a Outbox,
}

impl Receipts<'_> {
    /// Messages waiting on this bridge: unacknowledged sends (outbound), or messages from
    /// the peer queued at this home's threads (inbound).
    pub(super) async fn pending_count(&self, bridge: &BridgeRecord) -> Result<u64> {
        if bridge.direction != Direction::Outbound {
            return Ok(self.store.pending_messages_from(&bridge.peer_home_id).await?);
        }
        // Outcomes still being recorded are taken before the store is read: one recorded in
        // between is no longer pending there, and one still here is not counted.
        let settled: Vec<String> = self
            .outbox
            .recording()
            .into_iter()
            .filter(|e| e.bridge_id == bridge.id && e.status != OutboxStatus::Pending)
            .map(|e| e.id.clone())
            .collect();
        Ok(self.store.outbox_pending(&bridge.peer_home_id, &bridge.id, &settled).await?)
    }

    /// `kiki bridge receipts BRIDGE`: what this home sent over it, or received through it;
    /// `limit` of the newest receipts before `cursor`'s page, oldest first.
    pub(super) async fn page(&self, name: &str, limit: Option<u32>, cursor: &str) -> Result<ReceiptPage> {
        let limit = limits::page_limit("limit", limit, limits::LIST_LIMIT_DEFAULT)?;
        let bridges: Vec<BridgeRecord> =
            self.table.all().await?.iter().filter(|b| b.answers_to(name)).cloned().collect();
        if bridges.is_empty() {
            return Err(Error::NotFound(format!("no bridge {name:?}")));
        }
        let mut positions = if cursor.is_empty() { HashMap::new() } else { decode(cursor)? };
        // Up to limit + 1 of each bridge's receipts from where it stands, newest first: the
        // page takes at most `limit` of them, so one left over says that more remain.
        let mut walks = Vec::with_capacity(bridges.len());
        for bridge in &bridges {
            let at = match positions.remove(&bridge.id) {
                Some(at) => at,
                None if cursor.is_empty() => Position::newest(bridge),
                // A bridge made after the first page: all its receipts are newer than this one.
                None => Position::Done,
            };
            walks.push(self.candidates(bridge, &at, limit + 1).await?.into_iter().peekable());
        }
        // Merged newest first, each walk in its own order: the next receipt is always the
        // newest of the walks' next ones.
        let mut page = Vec::with_capacity(limit as usize);
        while page.len() < limit as usize {
            let newest = walks
                .iter_mut()
                .filter_map(|walk| walk.peek().map(|c| c.order.clone()).map(|order| (order, walk)))
                .max_by(|(a, _), (b, _)| a.cmp(b));
            let Some(candidate) = newest.and_then(|(_, walk)| walk.next()) else { break };
            page.push(candidate.receipt);
        }
        // Each walk goes on at its first receipt left over; one with none left is over (it
        // fetched fewer than limit + 1, since a page shows at most `limit`).
        let next: Vec<(&str, Position)> = bridges
            .iter()
            .zip(&mut walks)
            .map(|(bridge, walk)| (bridge.id.as_str(), walk.peek().map_or(Position::Done, |c| c.at.clone())))
            .collect();
        let next_cursor = next.iter().any(|(_, at)| *at != Position::Done).then(|| encode(&next));
        page.reverse();
        Ok(ReceiptPage { receipts: page, next_cursor })
    }

    /// Up to `n` of `bridge`'s receipts from `at` back, newest first.
    async fn candidates(&self, bridge: &BridgeRecord, at: &Position, n: u32) -> Result<Vec<Candidate>> {
        let store = &self.store;
        if bridge.direction == Direction::Outbound {
            let Position::Outbound(created_at, id) = at else { return Ok(Vec::new()) };
            // Outcomes still being recorded are taken before the store is read: one recorded
            // in between is then in both, whereas taken after the read it could have left the
            // map but not be in the rows read.
            let recording: HashMap<String, OutboxRecord> = self
                .outbox
                .recording()
                .into_iter()
                .filter(|e| e.bridge_id == bridge.id)
                .map(|e| (e.id.clone(), e))
                .collect();
            let entries = store.outbox_page(&bridge.id, Some((*created_at, id.clone())), n).await?;
            return Ok(entries
                .into_iter()
                .map(|stored| {
                    let e = recording.get(&stored.id).cloned().unwrap_or(stored);
                    Candidate {
                        order: (e.created_at, e.id.clone()),
                        at: Position::Outbound(e.created_at, e.id.clone()),
                        receipt: outbound_receipt_to_pb(&bridge.alias, e),
                    }
                })
                .collect());
        }
        let Position::Inbound(seq) = at else { return Ok(Vec::new()) };
        let receipts = store.receipts_from(&bridge.peer_home_id, Some(*seq), n).await?;
        Ok(receipts
            .into_iter()
            .map(|(seq, r)| Candidate {
                order: (r.at, format!("{seq:020}")),
                at: Position::Inbound(seq),
                receipt: inbound_receipt_to_pb(r),
            })
            .collect())
    }
}

/// The cursor for the page after this one: each bridge and where its walk stands.
fn encode(walks: &[(&str, Position)]) -> String {
    let parts: Vec<String> = walks
        .iter()
        .map(|(bridge_id, at)| match at {
            Position::Outbound(created_at, id) => format!("{bridge_id}=o{created_at}.{id}"),
            Position::Inbound(seq) => format!("{bridge_id}=i{seq}"),
            Position::Done => format!("{bridge_id}=done"),
        })
        .collect();
    cursor::encode(KIND, &parts.iter().map(String::as_str).collect::<Vec<_>>())
}

fn decode(text: &str) -> Result<HashMap<String, Position>> {
    let invalid = || cursor::invalid("cursor", KIND);
    let mut positions = HashMap::new();
    for part in cursor::decode_parts("cursor", KIND, text)? {
        let (bridge_id, at) = part.split_once('=').ok_or_else(invalid)?;
        let at = if at == "done" {
            Position::Done
        } else if let Some(outbound) = at.strip_prefix('o') {
            let (created_at, id) = outbound.split_once('.').ok_or_else(invalid)?;
            Position::Outbound(cursor::decode_number("cursor", KIND, created_at)?, id.to_string())
        } else if let Some(seq) = at.strip_prefix('i') {
            Position::Inbound(cursor::decode_number("cursor", KIND, seq)?)
        } else {
            return Err(invalid());
        };
        positions.insert(bridge_id.to_string(), at);
    }
    Ok(positions)
}

const KIND: &str = "receipts";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_keeps_every_walk_and_refuses_what_it_did_not_make() {
        let positions = [
            ("br_a", Position::Outbound(17, "msg_01x".into())),
            ("br_b", Position::Inbound(42)),
            ("br_c", Position::Done),
        ];
        let decoded = decode(&encode(&positions)).expect("decode");
        let expected = positions.into_iter().map(|(id, at)| (id.to_string(), at)).collect::<HashMap<_, _>>();
        assert_eq!(decoded, expected);
        let bad = ["br_a=x1", "br_a=", "br_a=é1", "br_a=o12", "br_a=i-3", "br_a", "br_a=newest"];
        let bad = bad.map(|part| cursor::encode(KIND, &[part]));
        for bad in bad.into_iter().chain([cursor::encode("list", &["1"]), "%%".into()]) {
            let e = decode(&bad).expect_err("refused");
            assert!(e.to_string().contains("cursor"), "{e}");
        }
    }
}
