//! Pairing's decisions, apart from their reads, writes and calls: whether a peer may file
//! a request now, what filing it writes, what a peer's ping is told of its grant, which
//! names may name a bridge, whether an inbound bridge may be turned off or on, and what a
//! target's answer to a ping means for the source's bridge. Pure: each is given the facts
//! and says what to do, and is unit-tested without a home.

use std::net::IpAddr;
use std::time::Duration;

use kiki_proto::bridge::v1 as wire;

use crate::error::{Error, Result};
use crate::store::{BridgeRecord, BridgeRequestRecord, BridgeState, Permissions, Refusal, RequestStatus};

/// Pairing requests one peer may file per [`REQUEST_WINDOW`].
pub(super) const REQUESTS_PER_WINDOW: usize = 5;

pub(super) const REQUEST_WINDOW: Duration = Duration::from_secs(60);

/// Requests waiting for the owner's decision, from all peers together: a new key is a new
/// peer, so the per-peer limit alone would let anyone fill this home's list (and store).
pub(super) const MAX_WAITING_REQUESTS: usize = 32;

/// Of those, the most from one network (see [`network_of`]): a new key costs nothing, an
/// address does, so one machine cannot take the owner's whole list.
pub(super) const MAX_WAITING_PER_NETWORK: usize = 8;

/// The longest bridge alias (and pairing name kept).
pub(super) const ALIAS_MAX_CHARS: usize = 64;

/// Parses and checks a permission list (`read,send` or repeated values).
pub fn parse_permissions(field: &'static str, values: &[String]) -> Result<Permissions> {
    let words = values.iter().flat_map(|v| v.split(',')).map(str::trim).filter(|v| !v.is_empty());
    let permissions = Permissions::parse(words).map_err(|unknown| {
        Error::invalid(field, format!("unknown permission {unknown:?} (read, send, wake, wait)"))
    })?;
    if permissions.is_empty() {
        return Err(Error::invalid(field, "name at least one of read, send, wake, wait"));
    }
    Ok(permissions)
}

/// The network whose pairing requests share one allowance: an IPv4 address, or an IPv6
/// /64 (what one machine or site is usually given).
pub(super) fn network_of(ip: IpAddr) -> String {
    match ip.to_canonical() {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => {
            let [a, b, c, d, ..] = v6.segments();
            format!("{a:x}:{b:x}:{c:x}:{d:x}::/64")
        }
    }
}

/// Why `alias` cannot name a bridge, if it cannot: a user types it to address the bridge
/// (`ALIAS/SESSION`, `kiki bridge revoke ALIAS`) and reads it in listings, so it is one
/// printable word, and never taken for a home id, a bridge id or this home.
pub(super) fn alias_problem(alias: &str) -> Option<&'static str> {
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

/// Why `peer`, calling from `from`, may not file a pairing request at `now`, given the
/// requests this home keeps: too many from it in the last [`REQUEST_WINDOW`], too many
/// waiting from its network, or too many waiting in all. A peer's own waiting request does
/// not count: its new one replaces it.
pub(super) fn filing_refused(
    requests: &[BridgeRequestRecord],
    peer: &str,
    from: IpAddr,
    now: i64,
) -> Option<(Refusal, String)> {
    let recent = requests
        .iter()
        .filter(|r| r.peer_home_id == peer && r.created_at > now - REQUEST_WINDOW.as_millis() as i64)
        .count();
    if recent >= REQUESTS_PER_WINDOW {
        return Some((
            Refusal::RateLimited,
            format!("at most {REQUESTS_PER_WINDOW} pairing requests per minute"),
        ));
    }
    let others_waiting =
        || requests.iter().filter(|r| r.status == RequestStatus::Pending && r.peer_home_id != peer);
    let network = network_of(from);
    let same_network = |r: &&BridgeRequestRecord| r.address.parse().is_ok_and(|ip| network_of(ip) == network);
    if others_waiting().filter(same_network).count() >= MAX_WAITING_PER_NETWORK {
        return Some((
            Refusal::RateLimited,
            format!(
                "{MAX_WAITING_PER_NETWORK} pairing requests from {network} already wait for this home's owner; try again once they are decided"
            ),
        ));
    }
    if others_waiting().count() >= MAX_WAITING_REQUESTS {
        return Some((
            Refusal::RateLimited,
            format!(
                "{MAX_WAITING_REQUESTS} pairing requests already wait for this home's owner; try again once they are decided"
            ),
        ));
    }
    None
}

/// What filing `request` writes: the request, and the same peer's requests still waiting,
/// replaced by it — the owner decides on what the peer wants now, and cannot approve a
/// stale request (changing the grant) by mistake.
pub(super) fn filed(
    requests: &[BridgeRequestRecord],
    request: BridgeRequestRecord,
) -> Vec<BridgeRequestRecord> {
    let now = request.created_at;
    let replaced: Vec<BridgeRequestRecord> = requests
        .iter()
        .filter(|r| r.peer_home_id == request.peer_home_id && r.status == RequestStatus::Pending)
        .map(|stale| BridgeRequestRecord {
            status: RequestStatus::Replaced,
            decided_at: Some(now),
            ..stale.clone()
        })
        .collect();
    std::iter::once(request).chain(replaced).collect()
}

/// A pairing name as the owner is shown it beside the peer's home id: nothing in it may
/// move the cursor or recolour the terminal, so a name cannot pass itself off as another
/// home's id.
pub(super) fn shown_name(name: &str) -> String {
    name.chars().filter(|c| !c.is_control()).take(ALIAS_MAX_CHARS).collect()
}

/// Whether `request` still waits but has waited past `expiry`.
pub(super) fn expired(request: &BridgeRequestRecord, now: i64, expiry: Duration) -> bool {
    request.status == RequestStatus::Pending && now - request.created_at >= expiry.as_millis() as i64
}

/// What a peer's ping is told of its grant: its inbound bridge here (a revoked one gives way
/// to a request the peer filed since, or as it was revoked), else the fate of its newest
/// request, else that this home knows of none.
pub(super) fn grant_for_ping(
    inbound: Option<&BridgeRecord>,
    requests: &[BridgeRequestRecord],
    peer: &str,
    now: i64,
    expiry: Duration,
) -> (wire::GrantState, Option<BridgeRecord>) {
    let since = inbound.filter(|b| b.state == BridgeState::Revoked).map_or(i64::MIN, |b| b.updated_at);
    let newer = requests.iter().rev().find(|r| r.peer_home_id == peer && r.created_at >= since);
    if let Some(b) = inbound.filter(|b| b.state != BridgeState::Revoked || newer.is_none()) {
        return (crate::bridges::codec::grant_state(b.state), Some(b.clone()));
    }
    let state = match newer {
        Some(r) if expired(r, now, expiry) => wire::GrantState::Expired,
        Some(r) if r.status == RequestStatus::Rejected => wire::GrantState::Rejected,
        Some(r) if r.status == RequestStatus::Expired => wire::GrantState::Expired,
        Some(r) if r.status == RequestStatus::Withdrawn => wire::GrantState::Revoked,
        Some(_) => wire::GrantState::Pending,
        None => wire::GrantState::Unknown,
    };
    (state, None)
}

/// An inbound bridge's state once its owner turns its access on or off; only an approved
/// bridge can be.
pub(super) fn inbound_switched(bridge: &BridgeRecord, enabled: bool) -> Result<BridgeState> {
    match (bridge.state, enabled) {
        (BridgeState::Active | BridgeState::Disabled, true) => Ok(BridgeState::Active),
        (BridgeState::Active | BridgeState::Disabled, false) => Ok(BridgeState::Disabled),
        (state, _) => Err(Error::FailedPrecondition(format!(
            "bridge {} is {state}; only an approved bridge can be turned off or on",
            bridge.id
        ))),
    }
}

/// What a target's answer to a ping says of the source's bridge, whose state was `was`. A
/// target that keeps no record of the request forgot it some time after deciding it (the
/// outcome shown here stays), or never had it.
pub(super) fn learnt_state(answer: wire::GrantState, was: BridgeState) -> BridgeState {
    match answer {
        wire::GrantState::Active => BridgeState::Active,
        wire::GrantState::Disabled => BridgeState::Disabled,
        wire::GrantState::Revoked => BridgeState::Revoked,
        wire::GrantState::Rejected => BridgeState::Rejected,
        wire::GrantState::Expired => BridgeState::Expired,
        wire::GrantState::Pending => BridgeState::Requested,
        wire::GrantState::Unknown | wire::GrantState::Unspecified
            if matches!(was, BridgeState::Rejected | BridgeState::Expired) =>
        {
            was
        }
        wire::GrantState::Unknown | wire::GrantState::Unspecified => BridgeState::Expired,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Direction;

    fn request(
        id: &str,
        peer: &str,
        address: &str,
        status: RequestStatus,
        created_at: i64,
    ) -> BridgeRequestRecord {
        BridgeRequestRecord {
            id: id.into(),
            peer_home_id: peer.into(),
            name: String::new(),
            want: Permissions::parse(["send"]).expect("valid"),
            status,
            created_at,
            decided_at: None,
            address: address.into(),
        }
    }

    fn bridge(state: BridgeState, updated_at: i64) -> BridgeRecord {
        BridgeRecord {
            id: "br_1".into(),
            direction: Direction::Inbound,
            peer_home_id: "P".into(),
            alias: "p".into(),
            address: String::new(),
            state,
            permissions: Permissions::parse(["send"]).expect("valid"),
            workspaces: Vec::new(),
            request_id: "breq_1".into(),
            created_at: 0,
            updated_at,
            last_success: None,
            last_error: String::new(),
            last_error_at: None,
            revoked_by_peer: false,
            requested: Permissions::default(),
        }
    }

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
        assert_eq!(p.words(), ["read", "send"]);
        assert!(parse_permissions("want", &["fly".into()]).expect_err("unknown").to_string().contains("fly"));
        assert!(parse_permissions("want", &[]).is_err());
    }

    #[test]
    fn aliases_are_one_printable_word_never_an_id() {
        assert_eq!(alias_problem("laptop"), None);
        assert!(alias_problem("").is_some());
        assert!(alias_problem("two words").is_some());
        assert!(alias_problem("a/b").is_some());
        assert!(alias_problem("local").is_some());
        assert!(alias_problem("br_01abc").is_some());
        assert!(alias_problem(&"x".repeat(65)).is_some());
        assert_eq!(shown_name("evil\u{1b}[2Jname"), "evil[2Jname", "no control characters");
    }

    #[test]
    fn a_peer_files_within_its_rate_its_networks_share_and_the_homes_cap() {
        let ip: IpAddr = "192.0.2.7".parse().expect("ip");
        let mine: Vec<_> = (0..5)
            .map(|n| request(&format!("r{n}"), "P", "192.0.2.7", RequestStatus::Replaced, 100 + n))
            .collect();
        let (refusal, why) = filing_refused(&mine, "P", ip, 1_000).expect("five in the last minute");
        assert_eq!(refusal, Refusal::RateLimited);
        assert!(why.contains("per minute"), "{why}");
        assert!(filing_refused(&mine, "P", ip, 100_000).is_none(), "a minute later");
        let network: Vec<_> = (0..8)
            .map(|n| request(&format!("n{n}"), &format!("Q{n}"), "192.0.2.7", RequestStatus::Pending, 0))
            .collect();
        let (_, why) = filing_refused(&network, "P", ip, 100_000).expect("its network's share");
        assert!(why.contains("from 192.0.2.7"), "{why}");
        assert!(filing_refused(&network, "P", "198.51.100.1".parse().expect("ip"), 100_000).is_none());
        assert!(filing_refused(&network, "Q0", ip, 100_000).is_none(), "its own waiting one does not count");
        let all: Vec<_> = (0..32)
            .map(|n| {
                request(
                    &format!("a{n}"),
                    &format!("Q{n}"),
                    &format!("198.51.{n}.1"),
                    RequestStatus::Pending,
                    0,
                )
            })
            .collect();
        let (_, why) = filing_refused(&all, "P", ip, 100_000).expect("the home's cap");
        assert!(why.contains("32 pairing requests"), "{why}");
    }

    #[test]
    fn a_new_request_replaces_the_peers_waiting_ones() {
        let kept = [
            request("old", "P", "", RequestStatus::Pending, 1),
            request("decided", "P", "", RequestStatus::Rejected, 2),
            request("other", "Q", "", RequestStatus::Pending, 3),
        ];
        let written = filed(&kept, request("new", "P", "", RequestStatus::Pending, 10));
        let shown: Vec<(&str, RequestStatus, Option<i64>)> =
            written.iter().map(|r| (r.id.as_str(), r.status, r.decided_at)).collect();
        assert_eq!(
            shown,
            [("new", RequestStatus::Pending, None), ("old", RequestStatus::Replaced, Some(10))]
        );
    }

    #[test]
    fn a_ping_is_told_its_bridge_else_its_newest_requests_fate() {
        let day = Duration::from_secs(86_400);
        let active = bridge(BridgeState::Active, 5);
        assert_eq!(grant_for_ping(Some(&active), &[], "P", 10, day).0, wire::GrantState::Active);
        assert_eq!(grant_for_ping(None, &[], "P", 10, day), (wire::GrantState::Unknown, None));
        let waiting = [request("r", "P", "", RequestStatus::Pending, 20)];
        assert_eq!(grant_for_ping(None, &waiting, "P", 30, day).0, wire::GrantState::Pending);
        assert_eq!(grant_for_ping(None, &waiting, "P", 20 + 86_400_000, day).0, wire::GrantState::Expired);
        let revoked = bridge(BridgeState::Revoked, 15);
        assert_eq!(grant_for_ping(Some(&revoked), &[], "P", 30, day).0, wire::GrantState::Revoked);
        assert_eq!(
            grant_for_ping(Some(&revoked), &waiting, "P", 30, day).0,
            wire::GrantState::Pending,
            "a request filed after the revocation"
        );
        let withdrawn = [request("r", "P", "", RequestStatus::Withdrawn, 20)];
        assert_eq!(grant_for_ping(None, &withdrawn, "P", 30, day).0, wire::GrantState::Revoked);
    }

    #[test]
    fn only_an_approved_bridge_is_turned_off_or_on() {
        assert_eq!(
            inbound_switched(&bridge(BridgeState::Active, 0), false).expect("off"),
            BridgeState::Disabled
        );
        assert_eq!(
            inbound_switched(&bridge(BridgeState::Disabled, 0), true).expect("on"),
            BridgeState::Active
        );
        assert!(inbound_switched(&bridge(BridgeState::Revoked, 0), true).is_err());
    }

    #[test]
    fn a_targets_answer_becomes_the_sources_state_keeping_a_known_outcome() {
        assert_eq!(learnt_state(wire::GrantState::Active, BridgeState::Requested), BridgeState::Active);
        assert_eq!(learnt_state(wire::GrantState::Pending, BridgeState::Requested), BridgeState::Requested);
        assert_eq!(learnt_state(wire::GrantState::Unknown, BridgeState::Rejected), BridgeState::Rejected);
        assert_eq!(learnt_state(wire::GrantState::Unknown, BridgeState::Requested), BridgeState::Expired);
    }
}
