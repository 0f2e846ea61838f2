//! Receipts: paging through both directions of a bridge, refusals recorded with their reasons,
//! and what becomes of a message after the target took it.

use kiki_proto as pb;
use kiki_proto::Word;
use kiki_tests::TestHome;
use kiki_tests::bridges::{approve, open_home, receipt_no_longer, receipts, remote_send, request};
use tonic::Code;

/// A peer home id names both bridges between two homes: its receipts merge both
/// directions, and paging through them three at a time gives what one page gives, each
/// receipt once. Bad paging input is refused naming the field.
#[tokio::test]
async fn receipts_of_both_directions_page_back_from_the_newest() {
    let (a, b) = (open_home().await, open_home().await);
    let (at_a, at_b) = (a.thread("echo", None).await, b.thread("echo", None).await);
    a.bridge_to(&b, "send,wake").await;
    b.bridge_named(&a, "ay", "send,wake").await;
    for i in 0..4 {
        let sent = a.send(remote_send("bee", &at_b.id, "to b", &format!("ab{i}"))).await;
        sent.expect("send to b");
        let sent = b.send(remote_send("ay", &at_a.id, "to a", &format!("ba{i}"))).await;
        sent.expect("send to a");
    }
    let b_id = b.handle().home_id();
    let request = |limit: u32, cursor: &str| pb::BridgeReceiptsRequest {
        bridge: b_id.into(),
        limit: Some(limit),
        cursor: cursor.into(),
    };
    let whole = a.client().bridges().bridge_receipts(request(100, "")).await.expect("one page").into_inner();
    assert!(whole.next_cursor.is_none());
    let story = |receipts: &[pb::Receipt]| {
        receipts
            .iter()
            .map(|r| format!("{} {} {}", r.direction().word(), r.idempotency_key, r.status().word()))
            .collect::<Vec<_>>()
    };
    let walked = receipts(&a, b_id).await;
    assert_eq!(
        story(&walked),
        story(&whole.receipts),
        "three at a time, the same receipts in the same order"
    );
    let keys: std::collections::BTreeSet<&str> = walked.iter().map(|r| r.idempotency_key.as_str()).collect();
    assert_eq!(keys.len(), 8, "all four sent and all four received: {keys:?}");
    let directions: std::collections::BTreeSet<String> =
        walked.iter().map(|r| r.direction().word()).collect();
    assert_eq!(directions.into_iter().collect::<Vec<_>>(), ["inbound", "outbound"]);
    let newest = a.client().bridges().bridge_receipts(request(2, "")).await.expect("page").into_inner();
    assert_eq!(
        story(&newest.receipts),
        story(&whole.receipts[whole.receipts.len() - 2..]),
        "the newest first"
    );
    assert!(newest.next_cursor.is_some());

    // What arrives after a first page is on none of the older ones, whichever bridge brings
    // it — also the bridge that had nothing on the first page.
    let first = a.client().bridges().bridge_receipts(request(1, "")).await.expect("page").into_inner();
    let mut cursor = first.next_cursor.expect("more");
    a.send(remote_send("bee", &at_b.id, "late", "ab-late")).await.expect("late send");
    b.send(remote_send("ay", &at_a.id, "late", "ba-late")).await.expect("late send");
    let mut older = Vec::new();
    loop {
        let page =
            a.client().bridges().bridge_receipts(request(3, &cursor)).await.expect("page").into_inner();
        older.splice(0..0, page.receipts);
        match page.next_cursor {
            Some(next) => cursor = next,
            None => break,
        }
    }
    assert_eq!(story(&older), story(&whole.receipts[..whole.receipts.len() - 1]), "the rest, nothing newer");

    for (bad, field) in
        [(request(0, ""), "limit"), (request(101, ""), "limit"), (request(5, "nope"), "cursor")]
    {
        let refused = a.client().bridges().bridge_receipts(bad).await.expect_err("refused");
        assert_eq!(refused.code(), Code::InvalidArgument);
        assert!(refused.message().contains(field), "{}", refused.message());
    }
}

#[tokio::test]
async fn refusals_are_final_with_reasons_in_receipts() {
    let (a, b) = (open_home().await, open_home().await);
    let t = b.thread("echo", None).await;
    let request_id = request(&a, &b, "read,send", "bee").await;
    let bridge = approve(&b, &request_id, "read", vec![]).await;
    // A refusal is an error naming the reason; a retry with the key reports the message
    // undeliverable, with the reason.
    let refused = |status: tonic::Status, code: Code, reason: &str| {
        assert_eq!(status.code(), code, "{}", status.message());
        assert!(status.message().contains(reason), "names {reason}: {}", status.message());
    };
    let denied = a.send(remote_send("bee", &t.id, "x", "k1")).await;
    let denied = denied.expect_err("refused");
    assert!(denied.message().contains("not grant \"send\""), "names what is missing: {denied:?}");
    refused(denied, Code::PermissionDenied, "permission_denied");
    let replay = a.send(remote_send("bee", &t.id, "x", "k1")).await.expect("a replay");
    assert_eq!(
        (replay.status(), replay.reason.as_str(), replay.replayed),
        (pb::SendStatus::Undeliverable, "permission_denied", true)
    );

    a.bridge_to(&b, "read,send").await;
    let missing = a.send(remote_send("bee", "th_nope", "x", "k2")).await;
    refused(missing.expect_err("refused"), Code::NotFound, "thread_not_found");
    let shelved = b.thread("echo", None).await;
    let archive = pb::ThreadArchiveRequest { target: Some(kiki_tests::local(&shelved.id)), archived: true };
    b.client().home().thread_archive(archive).await.expect("archive");
    let archived = a.send(remote_send("bee", &shelved.id, "x", "k4")).await;
    let archived = archived.expect_err("refused");
    assert!(archived.message().contains("archived there"), "{archived:?}");
    refused(archived, Code::FailedPrecondition, "thread_archived");
    b.client().bridges().bridge_revoke(pb::BridgeRevokeRequest { bridge: bridge.id }).await.expect("revoke");
    let revoked = a.send(remote_send("bee", &t.id, "x", "k3")).await;
    refused(revoked.expect_err("refused"), Code::PermissionDenied, "bridge_revoked");

    let reasons: Vec<String> = receipts(&a, "bee")
        .await
        .into_iter()
        .map(|r| format!("{}:{}", r.status().word(), r.reason))
        .collect();
    assert_eq!(
        reasons,
        [
            "rejected:permission_denied",
            "rejected:thread_not_found",
            "rejected:thread_archived",
            "rejected:bridge_revoked"
        ]
    );
    let inbound = receipts(&b, a.handle().home_id()).await;
    assert!(inbound.iter().all(|r| r.status().word() == "rejected"), "{inbound:?}");
    // The target has no message for a refusal; its receipt shows the id the source named.
    let at_source = receipts(&a, "bee").await;
    let named = |key: &str| at_source.iter().find(|r| r.idempotency_key == key).map(|r| r.message_id.clone());
    let ids: Vec<(String, Option<String>)> =
        inbound.iter().map(|r| (r.message_id.clone(), named(&r.idempotency_key))).collect();
    assert_eq!(ids.len(), 3, "k1, k2 and k4 (a revoked peer's refusals are not written): {inbound:?}");
    assert!(ids.iter().all(|(id, source)| id.starts_with("msg_") && Some(id) == source.as_ref()), "{ids:?}");
    assert!(b.all_turns(&t.id).await.is_empty(), "nothing reached the thread");
}

/// What becomes of a bridged message after the target took it shows on the target's
/// receipts too: archiving its thread, or an agent that cannot be started, makes it
/// undeliverable there, and its receipt says so (`rejected`, with the reason). No event is
/// written for the source thread: it lives at the source home (which follows up a message
/// it saw accepted, and so hears of the archiving).
#[tokio::test]
async fn a_bridged_message_undeliverable_after_it_was_taken_gets_a_receipt_at_the_target() {
    use kiki_daemon::config::{ExecutorKind, ProfileConfig};
    let (a, c) = (open_home().await, open_home().await);
    let b = TestHome::builder()
        .config(|config| {
            config.thread_communication.enabled = Some(true);
            let broken = ProfileConfig {
                executor: ExecutorKind::Exec,
                command: vec!["/nonexistent/agent".into()],
                default: false,
                enabled: true,
                thread_communication: None,
                allowed_tools: Vec::new(),
                max_cost_usd: None,
            };
            config.profiles.insert("broken".into(), broken);
        })
        .start()
        .await;
    let (held, broken) = (b.thread("echo", None).await, b.thread("broken", None).await);
    a.bridge_to(&b, "send").await;
    c.bridge_to(&b, "send,wake").await;
    let sent = a.send(remote_send("bee", &held.id, "held", "k1")).await.expect("send");
    assert_eq!(sent.status(), pb::SendStatus::Pending, "no wake: it waits at the target");
    let archive = pb::ThreadArchiveRequest { target: Some(kiki_tests::local(&held.id)), archived: true };
    b.client().home().thread_archive(archive).await.expect("archive");
    let sent = c.send(remote_send("bee", &broken.id, "hi", "k2")).await.expect("send");
    assert_eq!(sent.status(), pb::SendStatus::Delivered, "a turn started with it");

    for (source, key, reason) in [(&a, "k1", "thread_archived"), (&c, "k2", "executor_failed")] {
        let peer = source.handle().home_id();
        let last = kiki_tests::eventually("the target's receipt to follow the message", || async {
            receipts(&b, peer)
                .await
                .pop()
                .filter(|r| r.status().word() != "accepted" && r.status().word() != "delivered")
        })
        .await;
        assert_eq!(
            (last.idempotency_key.as_str(), last.status().word().as_str(), last.reason.as_str()),
            (key, "rejected", reason)
        );
    }
    let at_source = receipt_no_longer(&a, "bee", "k1", "accepted").await;
    assert_eq!(
        (at_source.status().word().as_str(), at_source.reason.as_str()),
        ("rejected", "thread_archived")
    );
    let strays =
        b.store().count("SELECT COUNT(*) FROM events WHERE thread_id NOT IN (SELECT id FROM threads)").await;
    assert_eq!(strays, 0, "no event for a thread this home does not have");
}
