//! Pairing: requests and their answers (approve, reject), the names peers give, the limits on
//! strangers' requests, and requests that expire undecided.

use kiki_proto as pb;
use kiki_proto::Word;
use kiki_proto::bridge::v1 as wire;
use kiki_tests::bridges::{
    approve, approve_refused, link_from, list_via, open_home, outbound_listed, pending_requests,
    permission_words, raw_call, remote, remote_send, request,
};
use kiki_tests::{TestHome, eventually};
use tonic::Code;

#[tokio::test]
async fn pairing_then_reading_across_homes_with_read() {
    let (a, b) = (TestHome::builder().start().await, TestHome::builder().start().await);
    let t = b.thread("echo", Some("hello from b")).await;
    b.wait_turns(&t.id, 1).await;

    let request_id = request(&a, &b, "read,send", "bee").await;
    let pending = pending_requests(&b).await;
    assert_eq!(pending.len(), 1);
    let filed = &pending[0];
    assert_eq!(
        (filed.id.as_str(), filed.peer_home_id.clone()),
        (request_id.as_str(), a.handle().home_id().to_string())
    );
    assert_eq!(permission_words(&filed.want), ["read", "send"]);
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("host name");
    assert_eq!(filed.name, host.trim(), "the source introduces itself by its machine's name");

    // Before approval the target refuses everything but the request.
    let early = a.client().threads().thread_list(list_via("bee")).await.expect_err("not approved yet");
    assert_eq!(early.code(), Code::PermissionDenied, "{early:?}");

    let granted = approve(&b, &request_id, "read", vec![]).await;
    assert_eq!((granted.direction().word().as_str(), granted.state().word().as_str()), ("inbound", "active"));
    assert_eq!(permission_words(&granted.permissions), ["read"], "possibly fewer than wanted");

    let listed = a.client().bridges().bridge_list(pb::BridgeListRequest {}).await.expect("list").into_inner();
    let outbound = listed.bridges.iter().find(|b| b.direction().word() == "outbound").expect("outbound");
    assert_eq!(
        (outbound.state().word().as_str(), permission_words(&outbound.permissions)),
        ("active", vec!["read".to_string()])
    );
    assert!(!outbound.last_success.is_empty(), "health from a real round trip");

    let page = a.client().threads().thread_list(list_via("bee")).await.expect("remote list").into_inner();
    assert_eq!(page.threads.iter().map(|t| t.id.clone()).collect::<Vec<_>>(), vec![t.id.clone()]);
    assert_eq!(page.threads[0].host_id, b.handle().home_id());
    // By home id as well as by alias, and ThreadRead through HOST/SESSION.
    a.client().threads().thread_list(list_via(b.handle().home_id())).await.expect("by home id");
    let lower = b.handle().home_id().to_lowercase();
    a.client().threads().thread_list(list_via(&lower)).await.expect("a home id in either case");
    let remote = remote("bee", &t.id);
    let read = pb::ThreadReadRequest { target: Some(remote), ..Default::default() };
    let page = a.client().threads().thread_read(read).await.expect("remote read").into_inner();
    assert_eq!(page.turns[0].output, "echo: hello from b");
    let coverage = page.coverage.expect("the same page shape, with coverage");
    assert_eq!(
        (coverage.turns_total, coverage.first_seq, coverage.last_seq, coverage.complete),
        (1, 1, 1, true)
    );
    let listed = b.client().bridges().bridge_list(pb::BridgeListRequest {}).await.expect("list").into_inner();
    let inbound = listed.bridges.iter().find(|b| b.direction().word() == "inbound").expect("inbound");
    assert!(!inbound.last_success.is_empty(), "the target's health comes from the peer's calls");

    // One-way: b has no bridge to a.
    let back = b.client().threads().thread_list(list_via(a.handle().home_id())).await.expect_err("one-way");
    assert_eq!(back.code(), Code::NotFound);
}

#[tokio::test]
async fn approval_cannot_grant_more_than_requested_and_is_decided_once() {
    let (a, b) = (TestHome::builder().start().await, TestHome::builder().start().await);
    let request_id = request(&a, &b, "read", "bee").await;
    let more = approve_refused(&b, &request_id, "read,wake", vec![]).await;
    assert_eq!(more.code(), Code::InvalidArgument);
    let bogus = approve_refused(&b, &request_id, "fly", vec![]).await;
    assert_eq!(bogus.code(), Code::InvalidArgument);
    let rejected =
        b.client().bridges().bridge_reject(pb::BridgeRejectRequest { request_id: request_id.clone() }).await;
    assert_eq!(rejected.expect("reject").into_inner().request.expect("request").status().word(), "rejected");
    let late = approve_refused(&b, &request_id, "read", vec![]).await;
    assert_eq!(late.code(), Code::FailedPrecondition);
    let listed = a.client().bridges().bridge_list(pb::BridgeListRequest {}).await.expect("list").into_inner();
    assert_eq!(listed.bridges[0].state().word(), "rejected");
}

#[tokio::test]
async fn a_wrong_expected_identity_is_refused_before_anything_is_filed() {
    let (a, b, c) = (
        TestHome::builder().start().await,
        TestHome::builder().start().await,
        TestHome::builder().start().await,
    );
    let request = pb::BridgeRequestRequest {
        address: b.bridge_listen().await,
        want: vec!["read".into()],
        expect: c.handle().home_id().to_string(),
        name: "bee".into(),
    };
    let err = a.client().bridges().bridge_request(request).await.expect_err("b is not c");
    assert_eq!(err.code(), Code::FailedPrecondition);
    let said = format!("is home {}, not the expected {}", b.handle().home_id(), c.handle().home_id());
    assert!(err.message().contains(&said), "{}", err.message());
    assert!(pending_requests(&b).await.is_empty());

    // A malformed home id or alias is refused before anything is dialed; a home id in lower
    // case is the same id.
    let too_long = "x".repeat(65);
    for (expect, name, field) in [
        ("garbage".to_string(), "bee", "expect"),
        (String::new(), "two words", "name"),
        (String::new(), "esc\u{1b}[2J", "name"),
        (String::new(), &too_long, "name"),
        (String::new(), &c.handle().home_id().to_ascii_lowercase(), "name"),
        (String::new(), "br_01abc", "name"),
    ] {
        let request = pb::BridgeRequestRequest {
            address: b.bridge_listen().await,
            want: vec!["read".into()],
            expect,
            name: name.into(),
        };
        let err = a.client().bridges().bridge_request(request).await.expect_err("malformed");
        assert_eq!(err.code(), Code::InvalidArgument, "{name}: {}", err.message());
        assert!(err.message().starts_with(field), "{name}: {}", err.message());
    }
    assert!(pending_requests(&b).await.is_empty());
    let request = pb::BridgeRequestRequest {
        address: b.bridge_listen().await,
        want: vec!["read".into()],
        expect: b.handle().home_id().to_ascii_lowercase(),
        name: "bee".into(),
    };
    a.client().bridges().bridge_request(request).await.expect("a lower-case home id");
    assert_eq!(pending_requests(&b).await.len(), 1);
}

/// A pairing request's name is the peer's to choose, and the owner reads it beside the
/// peer's home id before approving: control characters are dropped when it is filed (an
/// escape sequence could otherwise paint another home's id over the real one), and a name
/// shaped like a home id does not become the bridge's alias.
#[tokio::test]
async fn a_peer_chosen_pairing_name_cannot_pass_for_another_home() {
    let (a, b) = (TestHome::builder().start().await, TestHome::builder().start().await);
    let a_id = a.handle().home_id();
    assert_eq!(request_as_stranger_named(&b, &format!("\u{1b}[54D{a_id} (vm")).await, None, "filed");
    assert_eq!(request_as_stranger_named(&b, a_id).await, None, "filed");
    let waiting = pending_requests(&b).await;
    assert_eq!(waiting[0].name, format!("[54D{a_id} (vm"), "no control character kept");
    for request in &waiting {
        let bridge = approve(&b, &request.id, "read", vec![]).await;
        assert!(!bridge.alias.chars().any(|c| c.is_control() || c.is_whitespace()), "{:?}", bridge.alias);
        assert!(!bridge.alias.eq_ignore_ascii_case(a_id), "{:?}", bridge.alias);
        assert!(bridge.alias.len() <= 64, "{:?}", bridge.alias);
    }
}

/// Two sources on machines of the same name get distinct aliases at the target, so naming
/// one (to revoke it) never acts on the other.
#[tokio::test]
async fn inbound_aliases_are_unique_though_peers_share_a_host_name() {
    let (a, c, b) = (
        TestHome::builder().start().await,
        TestHome::builder().start().await,
        TestHome::builder().start().await,
    );
    let from_a = a.bridge_to(&b, "read").await;
    let from_c = c.bridge_to(&b, "read").await;
    assert_ne!(from_a.alias, from_c.alias, "same host name, distinct aliases");
    let revoke = pb::BridgeRevokeRequest { bridge: from_c.alias.clone() };
    let revoked = b.client().bridges().bridge_revoke(revoke).await.expect("revoke").into_inner();
    assert_eq!(revoked.bridge.expect("bridge").id, from_c.id);
    a.client().threads().thread_list(list_via("bee")).await.expect("a's bridge is untouched");
}

#[tokio::test]
async fn unknown_peers_can_only_file_rate_limited_requests() {
    let (a, b) = (TestHome::builder().start().await, TestHome::builder().start().await);
    let mut filed = Vec::new();
    for _ in 0..5 {
        filed.push(request(&a, &b, "read", "bee").await);
    }
    // The newest request replaces those still waiting: the owner cannot approve a stale one.
    let waiting = pending_requests(&b).await;
    assert_eq!(waiting.iter().map(|r| r.id.clone()).collect::<Vec<_>>(), [filed[4].clone()]);
    let err = approve_refused(&b, &filed[0], "read", vec![]).await;
    assert!(err.message().contains("replaced"), "{}", err.message());
    // Its sends are refused, and leave no trace at the target (not even a receipt).
    let t = b.thread("echo", None).await;
    let refused = a.send(remote_send("bee", &t.id, "x", "k")).await;
    let refused = refused.expect_err("refused");
    assert!(refused.message().contains("permission_denied"), "{}", refused.message());
    let written = b.store().count("SELECT COUNT(*) FROM bridge_receipts").await;
    assert_eq!(written, 0, "an unknown peer's refused send writes nothing");
    assert!(b.all_turns(&t.id).await.is_empty());
    let sixth = pb::BridgeRequestRequest {
        address: b.bridge_listen().await,
        want: vec!["read".into()],
        expect: String::new(),
        name: "bee".into(),
    };
    let err = a.client().bridges().bridge_request(sixth).await.expect_err("rate limited");
    assert!(err.message().contains("rate_limited"), "{}", err.message());
    let bad = pb::BridgeRequestRequest {
        address: b.bridge_listen().await,
        want: vec!["fly".into()],
        ..Default::default()
    };
    assert_eq!(
        a.client().bridges().bridge_request(bad).await.expect_err("bad want").code(),
        Code::InvalidArgument
    );
}

/// New keys are new peers, each allowed its own 5 requests a minute: the home caps the
/// requests waiting for its owner from one address at 8, and from everyone at 32.
#[tokio::test]
async fn strangers_cannot_fill_the_owners_list_of_requests() {
    let b = TestHome::builder().start().await;
    let code = |refused: Option<wire::WireError>| refused.map(|e| e.code());
    for _ in 0..8 {
        assert_eq!(code(request_as_stranger_from(&b, "127.0.0.2").await), None, "filed");
    }
    let refused = request_as_stranger_from(&b, "127.0.0.2").await.expect("a 9th from one address waits");
    assert_eq!(refused.code(), wire::Refusal::RateLimited);
    assert!(refused.message.contains("8 pairing requests from 127.0.0.2"), "{}", refused.message);
    let waiting = pending_requests(&b).await;
    assert!(waiting.iter().all(|r| r.address == "127.0.0.2"), "each shows where it came from: {waiting:?}");
    for from in ["127.0.0.3", "127.0.0.4", "127.0.0.5"] {
        for _ in 0..8 {
            assert_eq!(code(request_as_stranger_from(&b, from).await), None, "filed from {from}");
        }
    }
    let refused = request_as_stranger_from(&b, "127.0.0.6").await.expect("the 33rd waits");
    assert_eq!(refused.code(), wire::Refusal::RateLimited);
    assert!(refused.message.contains("32 pairing requests already wait"), "{}", refused.message);
    let waiting = pending_requests(&b).await;
    assert_eq!(waiting.len(), 32);
    let reject = pb::BridgeRejectRequest { request_id: waiting[0].id.clone() };
    b.client().bridges().bridge_reject(reject).await.expect("reject");
    assert_eq!(code(request_as_stranger_from(&b, "127.0.0.2").await), None, "a decision makes room");
}

/// A request the owner leaves undecided expires: it leaves the owner's list, stops counting
/// against the requests that may wait, cannot be approved any more, and the source sees it.
#[tokio::test]
async fn an_undecided_pairing_request_expires() {
    // On a manual clock the homes share: the expiry passes when the test moves it on.
    let clock = kiki_tests::manual_clock();
    let expiry = std::time::Duration::from_secs(4);
    let a = TestHome::builder().clock(&clock).start().await;
    let b = TestHome::builder().clock(&clock).config(move |c| c.bridge.request_expiry = expiry).start().await;
    let first = request(&a, &b, "read", "bee").await;
    for i in 0..31 {
        let from = format!("127.0.1.{}", i / 8);
        assert!(request_as_stranger_from(&b, &from).await.is_none(), "filed");
    }
    let refused = request_as_stranger_from(&b, "127.0.2.1").await.map(|e| e.code());
    assert_eq!(refused, Some(wire::Refusal::RateLimited), "32 wait");
    clock.advance(expiry - std::time::Duration::from_millis(1)).await;
    assert_eq!(pending_requests(&b).await.len(), 32, "none expired before the expiry");
    clock.advance(std::time::Duration::from_millis(1)).await;
    assert_eq!(pending_requests(&b).await.len(), 0, "all 32 expired");
    let late = approve_refused(&b, &first, "read", vec![]).await;
    assert_eq!(late.code(), Code::FailedPrecondition);
    assert!(late.message().contains("expired"), "{}", late.message());
    assert_eq!(outbound_listed(&a).await.state().word(), "expired", "the source sees it");
    // Expired requests make room, and the source may ask again.
    assert!(request_as_stranger_from(&b, "127.0.2.1").await.is_none(), "room again");
    let again = request(&a, &b, "read", "bee").await;
    assert_eq!(pending_requests(&b).await.len(), 2);
    approve(&b, &again, "read", vec![]).await;
    assert_eq!(outbound_listed(&a).await.state().word(), "active");
    let statuses =
        b.store().rows("SELECT status, COUNT(*) FROM bridge_requests GROUP BY status ORDER BY status").await;
    assert_eq!(statuses, [("approved".into(), 1), ("expired".into(), 32), ("pending".into(), 1)]);
    // A request decided longer ago than the expiry is forgotten; its source still shows the
    // outcome it learnt.
    let (c, d) =
        (TestHome::builder().clock(&clock).start().await, TestHome::builder().clock(&clock).start().await);
    let refused = request(&c, &b, "read", "bee").await;
    let reject = pb::BridgeRejectRequest { request_id: refused.clone() };
    b.client().bridges().bridge_reject(reject).await.expect("reject");
    assert_eq!(outbound_listed(&c).await.state().word(), "rejected");
    // d's request is rejected too, but d does not look before the target forgets it.
    let unseen = request(&d, &b, "read", "bee").await;
    b.client().bridges().bridge_reject(pb::BridgeRejectRequest { request_id: unseen }).await.expect("reject");
    // Past the expiry (with a margin): what was decided before is forgotten; the stranger's
    // request, still waiting, expires now and is kept for the expiry again.
    clock.advance(expiry + std::time::Duration::from_secs(1)).await;
    assert_eq!(pending_requests(&b).await.len(), 0);
    let left: Vec<String> = b
        .store()
        .rows("SELECT status FROM bridge_requests")
        .await
        .into_iter()
        .map(|(status, _)| status)
        .collect();
    assert_eq!(left, ["expired"], "decided and expired requests forgotten");
    assert_eq!(outbound_listed(&c).await.state().word(), "rejected", "the source keeps the outcome");
    assert_eq!(outbound_listed(&d).await.state().word(), "expired", "a request the target no longer knows");
    let late = approve_refused(&b, &refused, "read", vec![]).await;
    assert_eq!(late.code(), Code::NotFound, "{}", late.message());
    assert_eq!(outbound_listed(&a).await.state().word(), "active");
}

/// A pairing request from a new key, the cheapest identity there is: a raw call over a fresh
/// QUIC endpoint on the loopback address `from` (all of 127/8 is this machine's). The
/// answer's wire error, if refused.
async fn request_as_stranger_from(target: &TestHome, from: &str) -> Option<wire::WireError> {
    stranger_request(target, "stranger", from).await
}

/// [`request_as_stranger_from`] 127.0.0.1, the request naming its machine `name`: the
/// answer's wire error code, if refused.
async fn request_as_stranger_named(target: &TestHome, name: &str) -> Option<wire::Refusal> {
    stranger_request(target, name, "127.0.0.1").await.map(|e| e.code())
}

async fn stranger_request(target: &TestHome, name: &str, from: &str) -> Option<wire::WireError> {
    let key = rcgen::KeyPair::generate().expect("key").serialize_pem();
    let identity = kiki_bridge::BridgeIdentity::from_key_pem(&key).expect("identity");
    let (_endpoint, link) = link_from(identity, target, from).await;
    let pair = wire::PairCall { want: vec![wire::Permission::Read as i32], name: name.into() };
    match raw_call(&link, wire::bridge_call::Call::Pair(pair)).await {
        wire::bridge_reply::Reply::Pair(_) => None,
        wire::bridge_reply::Reply::Error(e) => Some(e),
        other => panic!("unexpected answer {other:?}"),
    }
}

/// A bridge requested again keeps its name (references to it go on working) and shows what
/// was asked next to what is granted; another name is refused, and `kiki bridge rename`
/// gives one. The target's owner names the calling home at approval (`--name`) and can
/// rename it too.
#[tokio::test]
async fn bridges_keep_their_names_unless_renamed_and_show_what_was_asked() {
    let (a, b) = (TestHome::builder().start().await, TestHome::builder().start().await);
    let t = b.thread("echo", None).await;
    let first = request(&a, &b, "read", "tob").await;
    let approve_named = pb::BridgeApproveRequest {
        request_id: first,
        allow: vec!["read".into()],
        workspaces: vec![],
        name: "laptop".into(),
    };
    let inbound = b.client().bridges().bridge_approve(approve_named).await.expect("approve").into_inner();
    assert_eq!(inbound.bridge.expect("bridge").alias, "laptop", "the owner names who calls");

    // Asked again for more, under another name: refused, nothing filed, the name kept.
    let address = b.bridge_listen().await;
    let again = |name: &str| pb::BridgeRequestRequest {
        address: address.clone(),
        want: vec!["read,send,wake".into()],
        expect: b.handle().home_id().to_string(),
        name: name.into(),
    };
    let renamed = a.client().bridges().bridge_request(again("tob2")).await.expect_err("a silent rename");
    assert_eq!(renamed.code(), Code::InvalidArgument, "{}", renamed.message());
    assert!(renamed.message().contains("kiki bridge rename tob tob2"), "{}", renamed.message());
    assert!(pending_requests(&b).await.is_empty(), "nothing filed");
    let asked = a.client().bridges().bridge_request(again("")).await.expect("asked again").into_inner();
    assert_eq!(asked.bridge.as_ref().map(|b| b.alias.as_str()), Some("tob"));
    a.client().threads().thread_list(list_via("tob")).await.expect("tob/… still names it");
    let listed = outbound_listed(&a).await;
    assert_eq!(permission_words(&listed.permissions), ["read"], "granted, until the owner decides again");
    assert_eq!(permission_words(&listed.requested), ["read", "send", "wake"], "asked, shown beside it");

    // Renamed on purpose: the new name works, the old one names nothing.
    let rename = pb::BridgeRenameRequest { bridge: "tob".into(), name: "bee".into() };
    a.client().bridges().bridge_rename(rename).await.expect("rename");
    let read = pb::ThreadReadRequest { target: Some(remote("bee", &t.id)), ..Default::default() };
    a.client().threads().thread_read(read).await.expect("bee/… names it");
    let old = a.client().threads().thread_list(list_via("tob")).await.expect_err("tob names nothing");
    assert_eq!(old.code(), Code::NotFound);
    // At the target too; a name that is not one word is refused.
    let rename = pb::BridgeRenameRequest { bridge: "laptop".into(), name: "a-laptop".into() };
    let inbound = b.client().bridges().bridge_rename(rename).await.expect("rename").into_inner();
    assert_eq!(inbound.bridge.expect("bridge").alias, "a-laptop");
    let rename = pb::BridgeRenameRequest { bridge: "a-laptop".into(), name: "two words".into() };
    let bad = b.client().bridges().bridge_rename(rename).await.expect_err("not a name");
    assert_eq!(bad.code(), Code::InvalidArgument);
    assert!(bad.message().starts_with("name: "), "{}", bad.message());
}

/// The source learns that its bridge was approved from the first call the target serves
/// over it, without anyone listing its bridges: right after the approval the source still
/// holds the bridge `requested`; a send over it is served, and the source's own record turns
/// `active` with the grant. Its listing shows that once the target has stopped — the
/// listing's ping then finds nobody, so it can show only what the source already knew.
#[tokio::test]
async fn a_call_served_over_a_new_bridge_tells_the_source_it_was_approved() {
    let (a, b) = (open_home().await, open_home().await);
    let t = b.thread("echo", None).await;
    a.bridge_to(&b, "send,wake").await;
    let store = a.store();
    let state = async || store.rows("SELECT state, 0 FROM bridges WHERE direction = 'outbound'").await;
    assert_eq!(state().await, [("requested".to_string(), 0)], "nothing has told the source yet");

    let sent = a.send(remote_send("bee", &t.id, "hello", "k")).await.expect("send");
    assert_ne!(sent.status(), pb::SendStatus::Undeliverable, "served: {sent:?}");
    eventually("the source to record the bridge active", || async {
        (state().await == [("active".to_string(), 0)]).then_some(())
    })
    .await;

    b.handle().shutdown();
    b.handle().stopped().await;
    let listed = outbound_listed(&a).await;
    assert!(!listed.last_error.is_empty(), "the listing's ping found nobody: {listed:?}");
    assert_eq!(
        (listed.state().word().as_str(), permission_words(&listed.permissions)),
        ("active", vec!["send".to_string(), "wake".to_string()]),
        "learnt from the send, not from the listing"
    );
}
