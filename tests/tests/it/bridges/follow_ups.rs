//! Follow-ups and the retry window: the source asks where its messages stand (never sending
//! them again), and a message whose window ends unanswered expires at both ends.

use kiki_proto as pb;
use kiki_proto::Word;
use kiki_proto::bridge::v1 as wire;
use kiki_tests::TestHome;
use kiki_tests::bridges::{
    link_as, open_home, open_home_with, raw_call, raw_send, receipt_no_longer, receipts, remote_send,
};

/// A follow-up asks where a message stands and never sends it again: a target that lost the
/// key (say, its database was restored from before it) answers `unknown_key`, which the
/// source's receipt reports, and no second message appears there.
#[tokio::test]
async fn a_follow_up_never_makes_a_second_message() {
    let (a, b) = (open_home().await, open_home().await);
    let t = b.thread("echo", None).await;
    a.bridge_to(&b, "send").await;
    let sent = a.send(remote_send("bee", &t.id, "held", "k")).await.expect("send");
    assert_eq!(sent.status(), pb::SendStatus::Pending);
    let target_db = b.store();
    target_db.execute("DELETE FROM idempotency_keys WHERE key = 'k'").await;

    let settled = receipt_no_longer(&a, "bee", "k", "accepted").await;
    assert_eq!((settled.status().word().as_str(), settled.reason.as_str()), ("rejected", "unknown_key"));
    let messages = target_db.count("SELECT count(*) FROM messages WHERE source_host IS NOT NULL").await;
    assert_eq!(messages, 1, "the follow-up created nothing");
}

/// One follow-up call asks where many messages stand: the target answers each key, in order,
/// as a replay would (keys are scoped by the sending thread), refuses more than 256 keys,
/// a peer without an approved bridge and a revoked bridge. The source's worker follows its
/// messages up this way, each message to its own end.
#[tokio::test]
async fn a_follow_up_asks_where_many_messages_stand_in_one_call() {
    use wire::bridge_reply::Reply;
    let (a, b, c) = (open_home().await, open_home().await, open_home().await);
    let t = b.thread("echo", None).await;
    let bridge = a.bridge_to(&b, "send").await;
    let keys = ["k1", "k2", "k3", "k4", "k5", "k6"];
    for key in keys {
        let sent = a.send(remote_send("bee", &t.id, key, key)).await.expect("send");
        assert_eq!(sent.status(), pb::SendStatus::Pending, "no wake: it waits at the target");
    }
    let (_endpoint, as_a) = link_as(&a, &b).await;
    let Reply::FollowUp(reply) =
        follow_up(&as_a, &[("", "k1"), ("", "nope"), ("th_other", "k1"), ("", "k2")]).await
    else {
        panic!("not a follow-up reply")
    };
    let answers: Vec<(wire::SendStatus, &str, bool)> =
        reply.answers.iter().map(|r| (r.status(), r.reason.as_str(), r.message_id.is_empty())).collect();
    assert_eq!(
        answers,
        [
            (wire::SendStatus::Pending, "", false),
            (wire::SendStatus::Undeliverable, "unknown_key", true),
            (wire::SendStatus::Undeliverable, "unknown_key", true),
            (wire::SendStatus::Pending, "", false),
        ],
        "each key answered in order; another thread's key is another key"
    );
    let many: Vec<(&str, &str)> = (0..257).map(|_| ("", "k1")).collect();
    match follow_up(&as_a, &many).await {
        Reply::Error(e) => {
            assert_eq!(e.code(), wire::Refusal::InvalidArgument);
            assert!(e.message.contains("keys") && e.message.contains("256"), "{}", e.message);
        }
        other => panic!("257 keys answered: {other:?}"),
    }
    let (_stranger_endpoint, stranger) = link_as(&c, &b).await;
    match follow_up(&stranger, &[("", "k1")]).await {
        Reply::Error(e) => assert_eq!(e.code(), wire::Refusal::PermissionDenied, "{}", e.message),
        other => panic!("a stranger was answered: {other:?}"),
    }

    // The target forgets two of the keys (a restored database, say); a turn takes all six.
    // The source's follow-ups, several keys a call when they come due together, end each
    // message as the target answers for its own key.
    let target_db = b.store();
    target_db.execute("DELETE FROM idempotency_keys WHERE key IN ('k2', 'k5')").await;
    b.say(&t.id, "the user speaks").await.expect("say");
    let expected: Vec<(String, String, String)> = keys
        .iter()
        .map(|k| {
            let (status, reason) =
                if matches!(*k, "k2" | "k5") { ("rejected", "unknown_key") } else { ("delivered", "") };
            (k.to_string(), status.to_string(), reason.to_string())
        })
        .collect();
    // Follow-ups back off (from 1 s, doubling up to a minute) while nothing changes: on a
    // loaded machine the next one may be most of a minute away.
    let patience = std::time::Duration::from_secs(75);
    kiki_tests::eventually_within(
        "each source receipt to end as the target answers for its key",
        patience,
        || async {
            let mut ends: Vec<(String, String, String)> = receipts(&a, "bee")
                .await
                .into_iter()
                .map(|r| (r.idempotency_key.clone(), r.status().word(), r.reason.clone()))
                .collect();
            ends.sort();
            (ends == expected).then_some(())
        },
    )
    .await;

    // Revoked, the bridge still answers for what it brought (delivered before the
    // revocation), and a key it never took is `bridge_revoked`.
    b.client().bridges().bridge_revoke(pb::BridgeRevokeRequest { bridge: bridge.id }).await.expect("revoke");
    let Reply::FollowUp(reply) = follow_up(&as_a, &[("", "k1"), ("", "never")]).await else {
        panic!("a revoked bridge answered no follow-up")
    };
    let answers: Vec<(wire::SendStatus, &str)> =
        reply.answers.iter().map(|r| (r.status(), r.reason.as_str())).collect();
    assert_eq!(
        answers,
        [(wire::SendStatus::Delivered, ""), (wire::SendStatus::Undeliverable, "bridge_revoked")]
    );
}

/// A source's question at the end of a retry window (`window_over`) about a key the target
/// never saw gives the key up there: a call of it arriving later (QUIC delivering an attempt
/// the source had given up on) is answered `expired` and delivers nothing.
#[tokio::test]
async fn a_call_arriving_after_its_source_gave_up_is_refused() {
    use wire::bridge_reply::Reply;
    let (a, b) = (open_home().await, open_home().await);
    let t = b.thread("echo", None).await;
    a.bridge_to(&b, "send,wake").await;
    let (_endpoint, as_a) = link_as(&a, &b).await;
    let Reply::FollowUp(reply) = follow_up_as(&as_a, &[("", "late")], true).await else {
        panic!("not a follow-up")
    };
    assert_eq!(reply.answers[0].reason, "unknown_key");
    let late = wire::bridge_call::Call::ThreadSend(raw_send(&t.id, "given up on".into(), "late"));
    let Reply::ThreadSend(answer) = raw_call(&as_a, late).await else { panic!("not a send") };
    assert_eq!((answer.status(), answer.reason.as_str()), (wire::SendStatus::Undeliverable, "expired"));
    b.say(&t.id, "the user speaks").await.expect("say");
    let turn = b.wait_turns(&t.id, 1).await.remove(0);
    assert_eq!(turn.output, "echo: the user speaks", "the late call delivered nothing");
}

/// The target stays away longer than the retry window: the message expires when the window
/// ends (or the attempt under way then does), not a backoff step later.
#[tokio::test]
async fn a_send_expires_after_the_retry_window() {
    let window = std::time::Duration::from_secs(6);
    let (a, _b, t) = bridged_to_a_stopped_target(window).await;
    let clock = a.clock().clone();
    let started = clock.now_ms();
    let sent = a.send(remote_send("bee", &t.id, "too late", "k")).await.expect("send");
    assert_eq!(sent.status(), pb::SendStatus::Pending);
    let (expired, _) =
        kiki_tests::eventually_advancing(&clock, STEP, LIMIT, "the send to expire", || async {
            receipts(&a, "bee").await.into_iter().find(|r| r.status().word() == "expired")
        })
        .await;
    // Its attempts find nobody (an attempt waits up to 5 s) and its backoff grows, but no
    // pause runs past the window: it expires then, or when the attempt under way then ends.
    let took = std::time::Duration::from_millis((clock.now_ms() - started) as u64);
    let attempt = std::time::Duration::from_secs(5);
    assert!(took >= window && took < window + attempt + std::time::Duration::from_secs(1), "{took:?}");
    assert!(expired.attempts >= 1);
    let replay = a.send(remote_send("bee", &t.id, "too late", "k")).await.expect("replay");
    assert_eq!((replay.status(), replay.reason.as_str()), (pb::SendStatus::Undeliverable, "expired"));
}

/// A silent peer gets one attempt at a time (its probe), and its other messages are put off
/// until that attempt ends — but not past their window: they expire when it ends, without
/// waiting for the probe's next attempt. (The probe's first attempt, a dial of up to 5 s,
/// has ended unanswered by then: so the peer is not asked about them first.)
#[tokio::test]
async fn a_silent_peers_other_messages_expire_when_their_window_ends() {
    let window = std::time::Duration::from_secs(12);
    let (a, _b, t) = bridged_to_a_stopped_target(window).await;
    let clock = a.clock().clone();
    let started = clock.now_ms();
    let (mut one, mut two) = (a.client().threads(), a.client().threads());
    let (first, second) = tokio::join!(
        one.thread_send(remote_send("bee", &t.id, "one", "k1")),
        two.thread_send(remote_send("bee", &t.id, "two", "k2")),
    );
    for sent in [first, second] {
        assert_eq!(sent.expect("durable").into_inner().status(), pb::SendStatus::Pending);
    }
    kiki_tests::eventually_advancing(&clock, STEP, LIMIT, "a send to expire", || async {
        receipts(&a, "bee").await.into_iter().find(|r| r.status().word() == "expired")
    })
    .await;
    // (Waiting for the probe, it would take 16 s or more: the first attempt, an attempt of
    // up to 5 s, a backoff of about as long as the silence, another attempt.)
    let took = std::time::Duration::from_millis((clock.now_ms() - started) as u64);
    let slack = std::time::Duration::from_millis(1_500);
    assert!(took >= window && took < window + slack, "first expiry after {took:?}");
    kiki_tests::eventually_on(&clock, "both to expire", || async {
        receipts(&a, "bee").await.iter().all(|r| r.status().word() == "expired").then_some(())
    })
    .await;
}

/// A send the target delivered does not expire at the source because the source lost its
/// record of the answer (a kill -9 between answering and recording it: the test rewinds the
/// entry to `pending` while the home is stopped) and came back after the retry window:
/// before expiring it, the source asks the target once, and the entry ends `delivered`.
#[tokio::test]
async fn a_delivered_send_found_pending_after_its_window_is_asked_about_not_expired() {
    let (mut a, b) = (open_home_with(std::time::Duration::from_secs(2)).await, open_home().await);
    let t = b.thread("echo", None).await;
    a.bridge_to(&b, "send,wake").await;
    let sent = a.send(remote_send("bee", &t.id, "hello", "k1")).await.expect("send");
    assert_eq!(sent.status(), pb::SendStatus::Delivered);
    let store = a.store();
    a.restart_with(async |_| {
        let sql =
            "UPDATE outbox SET status = 'pending', next_attempt_at = 0, created_at = created_at - 60000";
        assert_eq!(store.execute(sql).await, 1, "rewound");
    })
    .await;
    let at_source = receipt_no_longer(&a, "bee", "k1", "pending").await;
    assert_eq!((at_source.status().word().as_str(), at_source.reason.as_str()), ("delivered", ""));
    assert_eq!(b.all_turns(&t.id).await.len(), 1, "delivered once");
}

/// How far a test moves a manual clock between looks, and at most in all.
const STEP: std::time::Duration = std::time::Duration::from_millis(50);
const LIMIT: std::time::Duration = std::time::Duration::from_secs(120);

/// A follow-up call asking about `keys` (source thread, key), and the target's reply.
async fn follow_up(link: &kiki_bridge::PeerConnection, keys: &[(&str, &str)]) -> wire::bridge_reply::Reply {
    follow_up_as(link, keys, false).await
}

/// [`follow_up`], `window_over` saying whether the source's retry window is over.
async fn follow_up_as(
    link: &kiki_bridge::PeerConnection,
    keys: &[(&str, &str)],
    window_over: bool,
) -> wire::bridge_reply::Reply {
    let keys = keys
        .iter()
        .map(|(thread, key)| wire::FollowUpKey {
            source_thread: thread.to_string(),
            idempotency_key: key.to_string(),
        })
        .collect();
    raw_call(link, wire::bridge_call::Call::FollowUp(wire::FollowUpCall { keys, window_over })).await
}

/// A source retrying its sends for `window`, bridged (send, wake) to an echo thread on a
/// target that has stopped since: the source's attempts find nobody.
async fn bridged_to_a_stopped_target(
    window: std::time::Duration,
) -> (TestHome, TestHome, pb::ThreadCreateResponse) {
    // On a manual clock, `a` dialing its stopped peer for 200 ms of real time at most: the
    // window and the attempts' bounds pass as the test moves the clock on.
    let clock = kiki_tests::manual_clock();
    let a = TestHome::builder()
        .clock(&clock)
        .open_to_peers(window)
        .config(|c| c.bridge.connect_timeout = std::time::Duration::from_millis(200))
        .start()
        .await;
    let b = TestHome::builder().clock(&clock).open_to_peers(std::time::Duration::from_secs(60)).start().await;
    let t = b.thread("echo", None).await;
    a.bridge_to(&b, "send,wake").await;
    b.handle().shutdown();
    b.handle().stopped().await;
    (a, b, t)
}
