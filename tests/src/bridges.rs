//! Helpers for tests of bridges between [`TestHome`]s: pairing through the real request →
//! approve flow ([`TestHome::bridge_to`]), homes that take messages from peers
//! ([`open_home`]), requests for threads behind a bridge, calls made raw as a peer makes them
//! ([`link_as`], [`raw_call`]), and the receipts a home keeps.

use std::collections::HashMap;
use std::time::Duration;

use kiki_bridge::{BridgeEndpoint, BridgeIdentity, PeerConnection};
use kiki_proto as pb;
use kiki_proto::Word;
use kiki_proto::bridge::v1 as wire;

use crate::{TestHome, TestHomeBuilder, UdpRelay};

impl TestHome {
    /// Bridges this home to `target` under the alias `bee`: it requests `permissions` and
    /// the target's owner grants exactly those, in all its workspaces. Returns the target's
    /// side of the bridge (its `id` names it there).
    pub async fn bridge_to(&self, target: &TestHome, permissions: &str) -> pb::Bridge {
        self.bridge_named(target, "bee", permissions).await
    }

    /// [`TestHome::bridge_to`] under the alias `alias`.
    pub async fn bridge_named(&self, target: &TestHome, alias: &str, permissions: &str) -> pb::Bridge {
        let request_id = request(self, target, permissions, alias).await;
        approve(target, &request_id, permissions, vec![]).await
    }

    /// [`TestHome::bridge_named`] to a team home: its `replicas`' addresses listed, the
    /// request approved through the last of them.
    pub async fn bridge_to_replicas(
        &self,
        replicas: &[&TestHome],
        alias: &str,
        permissions: &str,
    ) -> pb::Bridge {
        let mut addresses = Vec::new();
        for replica in replicas {
            addresses.push(replica.bridge_listen().await);
        }
        let (first, last) = (replicas[0], replicas[replicas.len() - 1]);
        let request_id = request_at(self, first, addresses.join(","), permissions, alias).await;
        approve(last, &request_id, permissions, vec![]).await
    }

    /// [`TestHome::bridge_named`], dialing `target` through a relay whose datagrams can be
    /// held back or dropped (a stalled or broken network).
    pub async fn bridge_through_relay(&self, target: &TestHome, alias: &str, permissions: &str) -> UdpRelay {
        let relay = UdpRelay::start(target.bridge_listen().await.parse().expect("target address")).await;
        let request_id = request_at(self, target, relay.addr.to_string(), permissions, alias).await;
        approve(target, &request_id, permissions, vec![]).await;
        relay
    }
}

impl TestHomeBuilder {
    /// A home whose threads accept peer messages, listening on a fixed free port (so a
    /// restart keeps its address), retrying its own cross-home sends for `retry_window`.
    pub fn open_to_peers(self, retry_window: Duration) -> Self {
        let port = crate::binaries::free_udp_port();
        self.config(move |c| {
            c.thread_communication.enabled = Some(true);
            c.bridge.listen = std::net::SocketAddr::from(([127, 0, 0, 1], port));
            c.bridge.retry_window = retry_window;
        })
    }
}

/// A home [open to peers](TestHomeBuilder::open_to_peers) with a retry window of a minute.
pub async fn open_home() -> TestHome {
    open_home_with(Duration::from_secs(60)).await
}

/// A home [open to peers](TestHomeBuilder::open_to_peers) with the given retry window.
pub async fn open_home_with(retry_window: Duration) -> TestHome {
    TestHome::builder().open_to_peers(retry_window).start().await
}

/// `source` asks `target` for `want` under the alias `alias`, and lists the bridge as
/// requested of that home; returns the request id the target recorded.
pub async fn request(source: &TestHome, target: &TestHome, want: &str, alias: &str) -> String {
    request_at(source, target, target.bridge_listen().await, want, alias).await
}

/// [`request`], dialing `target` at `address`.
async fn request_at(
    source: &TestHome,
    target: &TestHome,
    address: String,
    want: &str,
    alias: &str,
) -> String {
    let request = pb::BridgeRequestRequest {
        address,
        want: vec![want.into()],
        expect: target.handle().home_id().to_string(),
        name: alias.into(),
    };
    let done = source.client().bridges().bridge_request(request).await.expect("request").into_inner();
    let bridge = done.bridge.expect("bridge");
    assert_eq!((bridge.direction(), bridge.state()), (pb::Direction::Outbound, pb::BridgeState::Requested));
    assert_eq!(bridge.peer_home_id, target.handle().home_id());
    done.request_id
}

/// `target`'s owner approves the request `request_id`, granting `allow` in `workspaces`
/// (all when empty); the target's side of the bridge.
pub async fn approve(
    target: &TestHome,
    request_id: &str,
    allow: &str,
    workspaces: Vec<String>,
) -> pb::Bridge {
    let approved = approval(target, request_id, allow, workspaces).await;
    approved.expect("approve").bridge.expect("bridge")
}

/// [`approve`] where the target must refuse the approval: the refusal.
pub async fn approve_refused(
    target: &TestHome,
    request_id: &str,
    allow: &str,
    workspaces: Vec<String>,
) -> tonic::Status {
    let approved = approval(target, request_id, allow, workspaces).await;
    approved.expect_err(&format!("approving {allow} for {request_id} is refused"))
}

/// The target's answer to its owner's approval of `request_id`.
async fn approval(
    target: &TestHome,
    request_id: &str,
    allow: &str,
    workspaces: Vec<String>,
) -> Result<pb::BridgeApproveResponse, tonic::Status> {
    let approve = pb::BridgeApproveRequest {
        request_id: request_id.into(),
        allow: vec![allow.into()],
        workspaces,
        name: String::new(),
    };
    target.client().bridges().bridge_approve(approve).await.map(|r| r.into_inner())
}

/// The pairing requests waiting for `target`'s owner (`kiki bridge pending`).
pub async fn pending_requests(target: &TestHome) -> Vec<pb::BridgeRequestRecord> {
    let listed = target.client().bridges().bridge_pending(pb::BridgePendingRequest {}).await;
    listed.expect("pending").into_inner().requests
}

/// `target`'s owner turns the inbound access of `bridge` on or off; the bridge as it is then.
pub async fn set_inbound(target: &TestHome, bridge: &str, enabled: bool) -> pb::Bridge {
    let request = pb::BridgeSetInboundRequest { bridge: bridge.into(), enabled };
    let set = target.client().bridges().bridge_set_inbound(request).await.expect("set inbound");
    set.into_inner().bridge.expect("bridge")
}

/// `home`'s one outbound bridge as `kiki bridge list` shows it (pinging its peer).
pub async fn outbound_listed(home: &TestHome) -> pb::Bridge {
    let listed =
        home.client().bridges().bridge_list(pb::BridgeListRequest {}).await.expect("list").into_inner();
    let mut outbound: Vec<pb::Bridge> =
        listed.bridges.into_iter().filter(|b| b.direction() == pb::Direction::Outbound).collect();
    assert_eq!(outbound.len(), 1, "{outbound:?}");
    outbound.remove(0)
}

/// The pending count `kiki bridge list` shows for `home`'s one outbound bridge.
pub async fn outbound_pending(home: &TestHome) -> u64 {
    outbound_listed(home).await.pending
}

/// A ThreadList of the threads behind `bridge` (an alias or a peer's home id).
pub fn list_via(bridge: &str) -> pb::ThreadListRequest {
    pb::ThreadListRequest { bridge: bridge.into(), ..Default::default() }
}

/// A reference to the thread `thread_id` behind the bridge `host` (an alias or a peer's home
/// id).
pub fn remote(host: &str, thread_id: &str) -> pb::ThreadRef {
    pb::ThreadRef { host_id: host.into(), workspace_id: String::new(), session_id: thread_id.into() }
}

/// A send of `content` with the idempotency key `key` to the thread `session` behind `host`.
pub fn remote_send(host: &str, session: &str, content: &str, key: &str) -> pb::ThreadSendRequest {
    pb::ThreadSendRequest {
        target: Some(remote(host, session)),
        content: content.into(),
        idempotency_key: key.into(),
        ..Default::default()
    }
}

/// A ThreadWait that checks a thread of the called home once, from `cursors`.
pub fn check_events(thread: &str, cursors: HashMap<String, String>) -> pb::ThreadWaitRequest {
    pb::ThreadWaitRequest { targets: vec![crate::local(thread)], timeout_ms: Some(0), cursors }
}

/// Every receipt of `bridge`, oldest first, read back three at a time: pages come newest
/// first, each oldest first, so every test that reads receipts walks the paging too.
pub async fn receipts(home: &TestHome, bridge: &str) -> Vec<pb::Receipt> {
    let mut pages = Vec::new();
    let mut cursor = String::new();
    loop {
        let request = pb::BridgeReceiptsRequest { bridge: bridge.into(), limit: Some(3), cursor };
        let page = home.client().bridges().bridge_receipts(request).await.expect("receipts").into_inner();
        assert!(page.receipts.len() <= 3, "a page holds at most its limit");
        pages.push(page.receipts);
        match page.next_cursor {
            Some(next) => cursor = next,
            None => break,
        }
    }
    pages.into_iter().rev().flatten().collect()
}

/// Permissions as their words, in their order (`["read", "send"]`).
pub fn permission_words(values: &[i32]) -> Vec<String> {
    values.iter().map(|v| pb::Permission::try_from(*v).map_or_else(|_| v.to_string(), |p| p.word())).collect()
}

/// `home`'s receipt of the send with `key` over `bridge`, once its status is other than
/// `status` (it moved on from `pending`, say).
///
/// On a [manual clock](crate::manual_clock), the clock is moved on until it does.
pub async fn receipt_no_longer(home: &TestHome, bridge: &str, key: &str, status: &str) -> pb::Receipt {
    crate::eventually_on(home.clock(), &format!("the receipt of {key} to move on from {status}"), || async {
        receipts(home, bridge)
            .await
            .into_iter()
            .find(|r| r.idempotency_key == key && r.status().word() != status)
    })
    .await
}

/// A QUIC link to `target` from an endpoint of its own holding `home`'s identity key: calls
/// made on it come from that home as far as the target can tell. The endpoint must outlive
/// the calls.
pub async fn link_as(home: &TestHome, target: &TestHome) -> (BridgeEndpoint, PeerConnection) {
    let pem = std::fs::read_to_string(home.handle().home_dir().join("identity.key")).expect("identity key");
    link_from(BridgeIdentity::from_key_pem(&pem).expect("identity"), target, "127.0.0.1").await
}

/// A QUIC link to `target` from an endpoint of its own with `identity`, bound to the IP
/// address `from`. The endpoint must outlive the calls.
pub async fn link_from(
    identity: BridgeIdentity,
    target: &TestHome,
    from: &str,
) -> (BridgeEndpoint, PeerConnection) {
    let bind = std::net::SocketAddr::new(from.parse().expect("an IP address"), 0);
    let endpoint = BridgeEndpoint::bind(bind, identity).expect("endpoint");
    let addr = target.bridge_listen().await.parse().expect("target address");
    let link = endpoint.connect(addr, Some(target.handle().home_id())).await.expect("connect");
    (endpoint, link)
}

/// One bridge call made raw over `link`, as a peer would make it: the target's reply.
pub async fn raw_call(link: &PeerConnection, call: wire::bridge_call::Call) -> wire::bridge_reply::Reply {
    use kiki_bridge::Link;
    use prost::Message;
    let call = wire::BridgeCall::new(call);
    let reply = link.call(call.encode_to_vec(), None).await.expect("call");
    wire::BridgeReply::decode(reply.as_slice()).expect("reply").reply.expect("a reply")
}

/// A send call as a source makes it, from an external client there (no source thread), with
/// a minute of its retry window left.
pub fn raw_send(target_session: &str, content: String, key: &str) -> wire::BridgeSendCall {
    wire::BridgeSendCall {
        target_session: target_session.into(),
        content,
        idempotency_key: key.into(),
        source_thread: String::new(),
        source_workspace: String::new(),
        window_left_ms: 60_000,
        message_id: String::new(),
        room: None,
    }
}
