//! Revocation, from either end: what it stops at once (calls, parked waits, retries, a silent
//! peer's backlog), what it settles (messages the target holds), and what it leaves standing
//! (a delivered send).

use kiki_proto as pb;
use kiki_proto::Word;
use kiki_tests::TestHome;
use kiki_tests::bridges::{
    approve_refused, check_events, list_via, open_home, outbound_listed, pending_requests, receipt_no_longer,
    receipts, remote, remote_send, request,
};
use tonic::Code;

#[tokio::test]
async fn revocation_takes_effect_at_once() {
    let (a, b) = (TestHome::builder().start().await, TestHome::builder().start().await);
    let bridge = a.bridge_to(&b, "read").await;
    a.client().threads().thread_list(list_via("bee")).await.expect("works");
    let revoked =
        b.client().bridges().bridge_revoke(pb::BridgeRevokeRequest { bridge: bridge.id.clone() }).await;
    assert_eq!(revoked.expect("revoke").into_inner().bridge.expect("bridge").state().word(), "revoked");
    let err = a.client().threads().thread_list(list_via("bee")).await.expect_err("revoked");
    assert_eq!(err.code(), Code::PermissionDenied);
    assert!(err.message().contains("bridge_revoked"), "{}", err.message());
    let listed = a.client().bridges().bridge_list(pb::BridgeListRequest {}).await.expect("list").into_inner();
    assert_eq!(listed.bridges[0].state().word(), "revoked", "the source sees it");
}

/// The source revoking its side tells the target: both homes list the bridge revoked, and
/// a new request waits for a new approval instead of finding the old grant in force.
#[tokio::test]
async fn a_source_revoking_its_side_revokes_the_target_side_too() {
    let (a, b) = (TestHome::builder().start().await, TestHome::builder().start().await);
    let inbound = a.bridge_to(&b, "read").await;
    a.client().threads().thread_list(list_via("bee")).await.expect("works");
    let revoke = pb::BridgeRevokeRequest { bridge: "bee".into() };
    a.client().bridges().bridge_revoke(revoke).await.expect("revoke");
    let at_target = b.client().bridges().bridge_list(pb::BridgeListRequest {}).await.expect("list");
    let at_target = at_target.into_inner().bridges;
    assert_eq!(
        at_target.iter().map(|b| (b.id.as_str(), b.state())).collect::<Vec<_>>(),
        [(inbound.id.as_str(), pb::BridgeState::Revoked)]
    );
    let again = request(&a, &b, "read", "bee").await;
    assert_eq!(outbound_listed(&a).await.state().word(), "requested", "the old grant is not in force");
    let refused = a.client().threads().thread_list(list_via("bee")).await.expect_err("not approved");
    assert_eq!(refused.code(), Code::PermissionDenied);
    // Revoking a bridge still waiting for approval withdraws its request there.
    let revoke = pb::BridgeRevokeRequest { bridge: "bee".into() };
    a.client().bridges().bridge_revoke(revoke).await.expect("revoke");
    assert!(pending_requests(&b).await.is_empty(), "withdrawn");
    let late = approve_refused(&b, &again, "read", vec![]).await;
    assert_eq!(late.code(), Code::FailedPrecondition, "{late:?}");
    a.bridge_to(&b, "read").await;
    assert_eq!(outbound_listed(&a).await.state().word(), "active");
    a.client().threads().thread_list(list_via("bee")).await.expect("approved again");
}

/// A peer's home id names both bridges with it when they run both ways: revoking by it is
/// refused (naming both) rather than cutting one direction the owner may not have meant.
#[tokio::test]
async fn revoking_by_a_home_id_that_names_both_directions_is_refused() {
    let (a, b) = (TestHome::builder().start().await, TestHome::builder().start().await);
    a.bridge_to(&b, "read").await;
    let inbound = b.bridge_named(&a, "ay", "read").await;
    let by_home = pb::BridgeRevokeRequest { bridge: b.handle().home_id().to_string() };
    let refused = a.client().bridges().bridge_revoke(by_home).await.expect_err("ambiguous");
    assert_eq!(refused.code(), Code::InvalidArgument);
    assert!(refused.message().contains(&inbound.id) && refused.message().contains("outbound"), "{refused:?}");
    a.client().threads().thread_list(list_via("bee")).await.expect("nothing was revoked");
    let by_id = pb::BridgeRevokeRequest { bridge: inbound.id.clone() };
    let revoked = a.client().bridges().bridge_revoke(by_id).await.expect("revoke").into_inner();
    assert_eq!(revoked.bridge.expect("bridge").direction().word(), "inbound");
    a.client().threads().thread_list(list_via("bee")).await.expect("the other direction still works");
}

/// A remote ThreadWait parked when its bridge is revoked ends at once, refused, instead of
/// holding on until its timeout.
#[tokio::test]
async fn revocation_ends_parked_remote_waits() {
    let (a, b) = (TestHome::builder().start().await, TestHome::builder().start().await);
    let t = b.thread("echo", None).await;
    let bridge = a.bridge_to(&b, "wait").await;
    let remote = remote("bee", &t.id);
    let wait =
        pb::ThreadWaitRequest { targets: vec![remote], timeout_ms: Some(30_000), ..Default::default() };
    let client = a.client().clone();
    let parked = tokio::spawn(async move { client.threads().thread_wait(wait).await });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let revoked_at = std::time::Instant::now();
    b.client().bridges().bridge_revoke(pb::BridgeRevokeRequest { bridge: bridge.id }).await.expect("revoke");
    let ended = parked.await.expect("task").expect_err("refused once revoked");
    assert!(revoked_at.elapsed() < std::time::Duration::from_secs(5), "ended by the revocation");
    assert_eq!(ended.code(), Code::PermissionDenied, "{}", ended.message());
    assert!(ended.message().contains("bridge_revoked"), "{}", ended.message());
}

/// Revocation also refuses what the peer brought that no turn has taken yet: the message
/// becomes undeliverable (`bridge_revoked`) at the target, with an event and a receipt, and
/// the thread's next turn does not take it.
#[tokio::test]
async fn revocation_refuses_messages_still_waiting_at_the_target() {
    let (a, b) = (open_home().await, open_home().await);
    let t = b.thread("echo", None).await;
    let check = |cursors| check_events(&t.id, cursors);
    let before = b.client().threads().thread_wait(check(Default::default())).await.expect("wait");
    let cursor = before.into_inner().results.remove(0).cursor;
    let bridge = a.bridge_to(&b, "send").await;
    let sent = a.send(remote_send("bee", &t.id, "held", "k1")).await.expect("send");
    assert_eq!(sent.status(), pb::SendStatus::Pending, "no wake: it waits at the target");
    b.client().bridges().bridge_revoke(pb::BridgeRevokeRequest { bridge: bridge.id }).await.expect("revoke");

    b.say(&t.id, "the user speaks").await.expect("say");
    let turns = b.wait_turns(&t.id, 1).await;
    assert_eq!(turns[0].output, "echo: the user speaks", "the revoked peer's message is not taken");
    let last = receipts(&b, a.handle().home_id()).await.pop().expect("receipts");
    assert_eq!(
        (last.status().word().as_str(), last.reason.as_str()),
        ("rejected", "bridge_revoked"),
        "{last:?}"
    );
    let since = std::collections::HashMap::from([(t.id.clone(), cursor)]);
    let events = b.client().threads().thread_wait(check(since)).await.expect("wait").into_inner().results;
    let events = &events[0].events;
    assert!(
        events.iter().any(|e| e.kind() == pb::EventKind::Undeliverable && e.reason == "bridge_revoked"),
        "{events:?}"
    );
    // The source follows up the message it saw accepted, and its receipt says what became of it.
    let at_source = receipt_no_longer(&a, "bee", "k1", "accepted").await;
    assert_eq!(
        (at_source.status().word().as_str(), at_source.reason.as_str()),
        ("rejected", "bridge_revoked")
    );
}

/// The source may learn of a revocation from a ping (`kiki bridge list`) before any
/// follow-up asks about its accepted message: the message still ends `rejected`
/// (`bridge_revoked`), as the target made it undeliverable, instead of staying `accepted`.
#[tokio::test]
async fn a_revocation_learnt_from_a_ping_still_settles_accepted_messages() {
    let (a, b) = (open_home().await, open_home().await);
    let t = b.thread("echo", None).await;
    let bridge = a.bridge_to(&b, "send").await;
    let sent = a.send(remote_send("bee", &t.id, "held", "k1")).await.expect("send");
    assert_eq!(sent.status(), pb::SendStatus::Pending, "no wake: it waits at the target");
    b.client().bridges().bridge_revoke(pb::BridgeRevokeRequest { bridge: bridge.id }).await.expect("revoke");
    let listed = a.client().bridges().bridge_list(pb::BridgeListRequest {}).await.expect("list").into_inner();
    assert_eq!(listed.bridges[0].state().word(), "revoked", "the ping learnt it");
    let at_source = receipt_no_longer(&a, "bee", "k1", "accepted").await;
    assert_eq!(
        (at_source.status().word().as_str(), at_source.reason.as_str()),
        ("rejected", "bridge_revoked")
    );
}

/// A revocation made at the source while a ping of the same bridge is under way stands: the
/// ping records what it learnt onto the bridge as it is now, not onto the copy it started
/// from (which would bring the bridge back as active).
#[tokio::test]
async fn a_revocation_during_a_ping_stands() {
    let (a, b) = (open_home().await, open_home().await);
    let relay = a.bridge_through_relay(&b, "bee", "read").await;
    relay.hold();
    let listing = {
        let bridges = a.client().bridges();
        tokio::spawn(async move { bridges.clone().bridge_list(pb::BridgeListRequest {}).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let revoke = pb::BridgeRevokeRequest { bridge: "bee".into() };
    let revoked = a.client().bridges().bridge_revoke(revoke).await.expect("revoke").into_inner();
    assert_eq!(revoked.bridge.expect("bridge").state().word(), "revoked");
    listing.await.expect("task").expect("the ping ends, unanswered");
    let listed = a.client().bridges().bridge_list(pb::BridgeListRequest {}).await.expect("list").into_inner();
    assert_eq!(listed.bridges[0].state().word(), "revoked", "{:?}", listed.bridges[0]);
}

/// The target's owner revokes the bridge while a send waits at the source behind a cut
/// link: once the link is back, the source's retry is refused `bridge_revoked`, the source
/// stops retrying, and the message never arrives.
#[tokio::test]
async fn a_revocation_at_the_target_ends_a_send_still_waiting_at_the_source() {
    let (a, b) = (open_home().await, open_home().await);
    let t = b.thread("echo", None).await;
    let relay = a.bridge_through_relay(&b, "bee", "send,wake").await;
    let inbound = b.client().bridges().bridge_list(pb::BridgeListRequest {}).await.expect("list");
    let inbound = inbound.into_inner().bridges.remove(0);
    relay.partition(true);
    let sent = a.send(remote_send("bee", &t.id, "too late", "k")).await;
    assert_eq!(sent.expect("durable").status(), pb::SendStatus::Pending);
    b.client().bridges().bridge_revoke(pb::BridgeRevokeRequest { bridge: inbound.id }).await.expect("revoke");
    relay.partition(false);
    let refused = kiki_tests::eventually("the source to hear of the revocation", || async {
        receipts(&a, "bee").await.into_iter().find(|r| r.status().word() == "rejected")
    })
    .await;
    assert_eq!(refused.reason, "bridge_revoked");
    let attempts = refused.attempts;
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert_eq!(receipts(&a, "bee").await[0].attempts, attempts, "no more retries");
    assert!(b.all_turns(&t.id).await.is_empty(), "nothing arrived");
    let replay = a.send(remote_send("bee", &t.id, "too late", "k")).await.expect("replay");
    assert_eq!((replay.status(), replay.reason.as_str()), (pb::SendStatus::Undeliverable, "bridge_revoked"));
}

/// Revoking the bridge to a silent peer ends its whole backlog at once (`rejected`,
/// `bridge_revoked`): entries whose fate needs no call do not wait for a probe, one by one,
/// nor for the time they were put off to.
#[tokio::test]
async fn revoking_the_bridge_to_a_silent_peer_rejects_its_whole_backlog() {
    let a = TestHome::builder()
        .config(|c| c.mailbox.delivery_wait = std::time::Duration::from_millis(100))
        .start()
        .await;
    let b = open_home().await;
    let t = b.thread("echo", None).await;
    a.bridge_to(&b, "send,wake").await;
    b.handle().shutdown();
    b.handle().stopped().await;
    for n in 0..20 {
        let sent = a.send(remote_send("bee", &t.id, "gone", &format!("k{n}"))).await;
        assert_eq!(sent.expect("send").status(), pb::SendStatus::Pending);
    }
    // The worker has taken one of them as the silent peer's probe, and put off the others
    // until that attempt times out (~5 s).
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    a.client()
        .bridges()
        .bridge_revoke(pb::BridgeRevokeRequest { bridge: "bee".into() })
        .await
        .expect("revoke");
    let revoked = std::time::Instant::now();
    let refused =
        |r: &pb::Receipt| (r.status().word().as_str(), r.reason.as_str()) == ("rejected", "bridge_revoked");
    kiki_tests::eventually("all but the probe rejected", || async {
        (receipts(&a, "bee").await.iter().filter(|r| refused(r)).count() >= 19).then_some(())
    })
    .await;
    assert!(revoked.elapsed() < std::time::Duration::from_secs(2), "took {:?}", revoked.elapsed());
    kiki_tests::eventually("every entry to end rejected", || async {
        let receipts = receipts(&a, "bee").await;
        receipts
            .iter()
            .all(|r| (r.status().word().as_str(), r.reason.as_str()) == ("rejected", "bridge_revoked"))
            .then_some(())
    })
    .await;
}

/// A send the target delivered ends `delivered` at the source whatever comes next. Here the
/// source lost its record of the answer — as a kill -9 between answering and recording it
/// would (the test rewinds the entry to `pending` while the home is stopped) — and the
/// target's owner revoked the bridge meanwhile: the retry is answered from the target's
/// dedup, not refused, and the message was delivered once. A new key is refused.
#[tokio::test]
async fn a_delivered_send_stays_delivered_after_the_target_revoked_the_bridge() {
    let (mut a, b) = (open_home().await, open_home().await);
    let t = b.thread("echo", None).await;
    let bridge = a.bridge_to(&b, "send,wake").await;
    // Larger than a stranger may send: the revoked peer still gets a known peer's allowance.
    let hello = "hello ".repeat(5_000);
    let sent = a.send(remote_send("bee", &t.id, &hello, "k1")).await.expect("send");
    assert_eq!(sent.status(), pb::SendStatus::Delivered);
    b.client().bridges().bridge_revoke(pb::BridgeRevokeRequest { bridge: bridge.id }).await.expect("revoke");
    let store = a.store();
    a.restart_with(async |_| {
        let rewound =
            store.execute("UPDATE outbox SET status = 'pending', next_attempt_at = 0 WHERE key = 'k1'").await;
        assert_eq!(rewound, 1);
    })
    .await;
    let at_source = receipt_no_longer(&a, "bee", "k1", "pending").await;
    assert_eq!((at_source.status().word().as_str(), at_source.reason.as_str()), ("delivered", ""));
    let again = a.send(remote_send("bee", &t.id, &hello, "k1")).await.expect("replay");
    assert_eq!((again.status(), again.message_id), (pb::SendStatus::Delivered, sent.message_id));
    let err = a.send(remote_send("bee", &t.id, "new", "k2")).await.expect_err("revoked");
    assert!(err.message().contains("bridge_revoked"), "{}", err.message());
    assert_eq!(b.all_turns(&t.id).await.len(), 1, "delivered once");
}
