//! Faults a bridge must survive: a target that is down or restarted, partitions and stalled
//! links (through a UDP relay), silent peers with a backlog, and calls given up mid-way.

use kiki_proto as pb;
use kiki_proto::Word;
use kiki_tests::TestHome;
use kiki_tests::bridges::{
    check_events, list_via, open_home, outbound_listed, outbound_pending, receipts, remote, remote_send,
    set_inbound,
};
use tonic::Code;

/// Dialing a peer that is gone holds up calls to that peer only: another bridge answers
/// meanwhile.
#[tokio::test]
async fn a_peer_that_does_not_answer_holds_up_no_other() {
    let (a, b, c) = (open_home().await, open_home().await, open_home().await);
    a.bridge_to(&b, "read").await;
    a.bridge_named(&c, "cee", "read").await;
    b.handle().shutdown();
    b.handle().stopped().await;
    let client = a.client().clone();
    let stuck = tokio::spawn(async move { client.threads().thread_list(list_via("bee")).await });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let started = std::time::Instant::now();
    a.client().threads().thread_list(list_via("cee")).await.expect("c answers");
    assert!(started.elapsed() < std::time::Duration::from_secs(2), "waited for the dial to b");
    let gone = stuck.await.expect("task").expect_err("b is gone");
    assert_eq!(gone.code(), Code::Unavailable, "worth retrying later: {gone:?}");
    // A wait's own limits are checked here, not only by a target that may not answer.
    let far = remote("bee", "th_x");
    let request =
        pb::ThreadWaitRequest { targets: vec![far], timeout_ms: Some(60_001), ..Default::default() };
    let err = a.client().threads().thread_wait(request).await.expect_err("over the limit");
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().starts_with("timeout_ms: must be between 0 and 60000"), "{}", err.message());
}

/// The target is down for less than the retry window: the message is delivered, once,
/// after it comes back.
#[tokio::test]
async fn a_send_survives_a_short_outage_of_the_target() {
    let (a, mut b) = (open_home().await, open_home().await);
    let t = b.thread("echo", None).await;
    a.bridge_to(&b, "send,wake").await;
    b.handle().shutdown();
    b.handle().stopped().await;
    let sent = a.send(remote_send("bee", &t.id, "while you were out", "k")).await;
    assert_eq!(sent.expect("durable at the source").status(), pb::SendStatus::Pending);
    b.restart().await;
    let turns = b.wait_turns(&t.id, 1).await;
    assert_eq!(turns[0].output, "echo: while you were out");
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(b.all_turns(&t.id).await.len(), 1, "once");
}

/// Answered sends' outcomes are written in bursts, after their answers: a clean stop
/// writes those it has not written yet, so after a restart the source lists none of them
/// pending (it would send each again).
#[tokio::test]
async fn a_clean_stop_writes_the_outcomes_of_answered_sends() {
    let (mut a, b) = (open_home().await, open_home().await);
    let t = b.thread("echo", None).await;
    a.bridge_to(&b, "send,wake").await;
    for i in 0..5 {
        let send = remote_send("bee", &t.id, &format!("m{i}"), &format!("k{i}"));
        let sent = a.send(send).await.expect("send");
        assert_ne!(sent.status(), pb::SendStatus::Undeliverable, "{sent:?}");
    }
    assert_eq!(outbound_pending(&a).await, 0, "answered, so not pending");
    a.restart().await;
    assert_eq!(outbound_pending(&a).await, 0, "still answered after the restart");
    let statuses: Vec<String> = receipts(&a, "bee").await.into_iter().map(|r| r.status().word()).collect();
    assert_eq!(statuses.len(), 5);
    assert!(statuses.iter().all(|s| s == "delivered" || s == "accepted"), "{statuses:?}");
}

/// A partition shorter than the retry window (datagrams dropped by a relay): the message
/// is delivered once after the network heals.
#[tokio::test]
async fn a_partition_shorter_than_the_window_delays_but_delivers_once() {
    let (a, b) = (open_home().await, open_home().await);
    let t = b.thread("echo", None).await;
    let relay = a.bridge_through_relay(&b, "bee", "send,wake").await;

    relay.partition(true);
    let sent_at = std::time::Instant::now();
    let sent = a.send(remote_send("bee", &t.id, "across the gap", "k")).await;
    assert_eq!(sent.expect("durable").status(), pb::SendStatus::Pending);
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert!(b.all_turns(&t.id).await.is_empty(), "nothing crosses the partition");
    // The list's health comes from a real round trip: the ping finds the link cut.
    let listed = outbound_listed(&a).await;
    assert_eq!(listed.pending, 1, "the source lists it pending");
    assert!(listed.last_error.contains("no answer"), "{listed:?}");
    assert!(listed.last_error_at > listed.last_success, "{listed:?}");
    let (healed, silent) = (std::time::Instant::now(), sent_at.elapsed());
    relay.partition(false);
    let turns = b.wait_turns(&t.id, 1).await;
    assert_eq!(turns[0].output, "echo: across the gap");
    // The next attempt comes at most one backoff step after the heal — a pause as long as
    // the silence so far, +20% jitter — well inside what a heal may take: the backoff's 30 s
    // cap plus 1 s.
    let took = healed.elapsed();
    assert!(took < silent.mul_f64(1.2) + std::time::Duration::from_secs(1), "{took:?} after the heal");
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(b.all_turns(&t.id).await.len(), 1, "once");
    // The source may hear of the delivery only at its next attempt (an answer that came
    // after an attempt's timeout is not waited for).
    kiki_tests::eventually("the source to learn of the delivery", || async {
        (outbound_pending(&a).await == 0).then_some(())
    })
    .await;
    // (Whether a failed attempt was counted depends on timing: an attempt still under way
    // at the heal, or the first one's request resent by QUIC, may be the one answered.)
    let receipts = receipts(&a, "bee").await;
    assert_eq!(receipts[0].status().word(), "delivered", "{receipts:?}");
}

/// The network holds the datagrams (a stalled link) instead of losing them, then lets them
/// all through at once: the first attempt, its retransmissions and the source's retries with
/// the key reach the target together — and the message is delivered once.
#[tokio::test]
async fn datagrams_held_then_released_together_deliver_once() {
    let (a, b) = (open_home().await, open_home().await);
    let t = b.thread("echo", None).await;
    let relay = a.bridge_through_relay(&b, "bee", "send,wake").await;
    relay.hold();
    let sent = a.send(remote_send("bee", &t.id, "held back", "k")).await;
    assert_eq!(sent.expect("durable").status(), pb::SendStatus::Pending);
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert!(b.all_turns(&t.id).await.is_empty(), "nothing crosses a stalled link");
    let held = relay.release().await;
    assert!(held > 1, "the attempt and what followed it were held: {held}");
    let turns = b.wait_turns(&t.id, 1).await;
    assert_eq!(turns[0].output, "echo: held back");
    kiki_tests::eventually("the source to learn of the delivery", || async {
        (outbound_pending(&a).await == 0).then_some(())
    })
    .await;
    assert_eq!(b.all_turns(&t.id).await.len(), 1, "once");
    let inbound: Vec<String> =
        receipts(&b, a.handle().home_id()).await.into_iter().map(|r| r.status().word()).collect();
    assert_eq!(inbound, ["delivered"], "the target's receipts list the message once");
}

/// A silent peer with a backlog larger than the worker ships at once holds up no other peer:
/// it gets one attempt at a time (a probe) and the rest of its backlog waits for the answer,
/// instead of every entry taking a slot until its attempt times out.
#[tokio::test]
async fn a_silent_peers_backlog_holds_up_no_other_peer() {
    a_silent_backlog_and_another_peer(false).await;
}

/// The same when the peer went silent right after it answered: until an attempt finds it
/// silent, its backlog is shipped at once, and it may hold only its share of the slots.
#[tokio::test]
async fn a_peer_silent_right_after_answering_holds_up_no_other_peer() {
    a_silent_backlog_and_another_peer(true).await;
}

/// a sends a backlog to b behind a partition, and one message to c (which says "not now"
/// until it is opened): c's delivery must not wait for b's attempts to time out.
async fn a_silent_backlog_and_another_peer(b_answered_first: bool) {
    const BACKLOG: usize = 300;
    let a = TestHome::builder()
        .config(|c| c.mailbox.delivery_wait = std::time::Duration::from_millis(100))
        .start()
        .await;
    let (b, c) = (open_home().await, open_home().await);
    let (on_b, on_c) = (b.thread("echo", None).await, c.thread("echo", None).await);
    let relay = a.bridge_through_relay(&b, "bee", "send,wake").await;
    let to_c = a.bridge_named(&c, "cee", "send,wake").await;
    if b_answered_first {
        let sent = a.send(remote_send("bee", &on_b.id, "hi", "first")).await;
        assert_eq!(sent.expect("send").status(), pb::SendStatus::Delivered);
    }
    // c answers "not now", so its message stays with the worker; b hears nothing at all.
    set_inbound(&c, &to_c.id, false).await;
    relay.partition(true);
    let sends: Vec<_> = (0..BACKLOG)
        .map(|n| {
            let (client, request) =
                (a.client().clone(), remote_send("bee", &on_b.id, &format!("b{n}"), &format!("b{n}")));
            tokio::spawn(async move { client.threads().thread_send(request).await })
        })
        .collect();
    for send in sends {
        assert_eq!(send.await.expect("task").expect("send").into_inner().status(), pb::SendStatus::Pending);
    }
    let sent = a.send(remote_send("cee", &on_c.id, "for c", "c")).await;
    assert_eq!(sent.expect("send").status(), pb::SendStatus::Pending);
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;

    let reopened = std::time::Instant::now();
    set_inbound(&c, &to_c.id, true).await;
    let turns = c.wait_turns(&on_c.id, 1).await;
    assert_eq!(turns[0].output, "echo: for c");
    // c's retries come at ~0.5 s pauses by now; behind b's backlog they would wait ~4 s more.
    assert!(reopened.elapsed() < std::time::Duration::from_secs(3), "c waited {:?}", reopened.elapsed());

    // Once b answers again, its whole backlog follows, each message once.
    relay.partition(false);
    let first = usize::from(b_answered_first);
    let inputs = kiki_tests::eventually("b's backlog in turns", || async {
        let inputs: Vec<String> = b
            .all_turns(&on_b.id)
            .await
            .iter()
            .flat_map(|t| t.inputs.iter().map(|i| i.message_id.clone()))
            .collect();
        (inputs.len() >= BACKLOG + first).then_some(inputs)
    })
    .await;
    let unique: std::collections::HashSet<&String> = inputs.iter().collect();
    assert_eq!((inputs.len(), unique.len()), (BACKLOG + first, BACKLOG + first), "each exactly once");
}

/// A partition longer than the (shortened) retry window: the message a thread sent expires,
/// the sending thread's ThreadWait gets an `undeliverable` event saying `expired`, the receipt
/// says so, and the healed link delivers nothing afterwards.
#[tokio::test]
async fn a_partition_longer_than_the_window_expires_the_message_with_an_event() {
    let hold = "read _; echo \"$KIKI_TOKEN\" > \"$KIKI_HOME/token\"; sleep 30";
    let a = TestHome::builder()
        .open_to_peers(std::time::Duration::from_secs(2))
        .shell_profile("hold", hold)
        .start()
        .await;
    let b = open_home().await;
    let t = b.thread("echo", None).await;
    let relay = a.bridge_through_relay(&b, "bee", "send,wake").await;
    let sender = a.thread("hold", Some("go")).await;
    let token = kiki_tests::eventually("the sending turn's token", || async {
        std::fs::read_to_string(a.dir().join("token")).ok().filter(|t| t.ends_with('\n'))
    })
    .await;
    let agent = a.client().clone().with_token(token.trim()).expect("token");
    let check = |cursors| check_events(&sender.id, cursors);
    let before = a.client().threads().thread_wait(check(Default::default())).await.expect("wait");
    let cursor = before.into_inner().results.remove(0).cursor;

    relay.partition(true);
    let sent = agent.threads().thread_send(remote_send("bee", &t.id, "into the gap", "k")).await;
    let sent = sent.expect("durable at the source").into_inner();
    assert_eq!(sent.status(), pb::SendStatus::Pending);
    let since = std::collections::HashMap::from([(sender.id.clone(), cursor)]);
    let event = kiki_tests::eventually("the sending thread's undeliverable event", || async {
        let results = a.client().threads().thread_wait(check(since.clone())).await.expect("wait");
        results.into_inner().results[0]
            .events
            .iter()
            .find(|e| e.kind() == pb::EventKind::Undeliverable)
            .cloned()
    })
    .await;
    assert_eq!((event.message_id.as_str(), event.reason.as_str()), (sent.message_id.as_str(), "expired"));
    let receipt = receipts(&a, "bee").await.pop().expect("receipt");
    assert_eq!((receipt.status().word().as_str(), receipt.reason.as_str()), ("expired", "expired"));

    relay.partition(false);
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    assert!(b.all_turns(&t.id).await.is_empty(), "an expired message is not delivered after the heal");
}

/// A call given up from its `withdraw_after` on is withdrawn (its stream reset): if the
/// link was cut meanwhile, the peer does not get the request once the link heals, although
/// QUIC would retransmit it then — a send that expired at its source must not arrive late.
/// A call given up earlier still goes out (a large message on a slow link gets through).
#[tokio::test]
async fn a_call_given_up_during_a_partition_arrives_after_the_heal_unless_withdrawn() {
    use kiki_bridge::{BridgeEndpoint, BridgeIdentity, CallHandler, Link};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};
    let identity = || {
        let key = rcgen::KeyPair::generate().expect("key").serialize_pem();
        BridgeIdentity::from_key_pem(&key).expect("identity")
    };
    let bind = || BridgeEndpoint::bind("127.0.0.1:0".parse().expect("addr"), identity()).expect("bind");
    let (a, b) = (bind(), bind());
    let relay = kiki_tests::UdpRelay::start(b.local_addr().expect("addr")).await;
    let received = Arc::new(Mutex::new(Vec::<Vec<u8>>::new()));
    let server = b.clone();
    let seen = received.clone();
    tokio::spawn(async move {
        let peer = server.accept().await.expect("incoming");
        let handler: CallHandler = Arc::new(move |request: Vec<u8>| {
            seen.lock().expect("lock").push(request.clone());
            Box::pin(async move { request })
        });
        peer.serve(handler, Arc::new(|| Box::pin(async { true }))).await;
    });
    let link = a.connect(relay.addr, Some(b.home_id())).await.expect("connect");
    assert_eq!(link.call(b"before".to_vec(), None).await.expect("answered"), b"before");

    relay.partition(true);
    let pause = Duration::from_millis(300);
    let withdrawn = tokio::time::timeout(pause, link.call(b"withdrawn".to_vec(), Some(Instant::now()))).await;
    let kept = tokio::time::timeout(pause, link.call(b"kept".to_vec(), None)).await;
    assert!(withdrawn.is_err() && kept.is_err(), "no answer through the partition");
    relay.partition(false);
    // Lost packets of a live stream are sent again within this.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(link.call(b"after".to_vec(), None).await.expect("the link works again"), b"after");
    let received = received.lock().expect("lock").clone();
    assert_eq!(
        received,
        [b"before".to_vec(), b"kept".to_vec(), b"after".to_vec()],
        "the kept request arrived after the heal, the withdrawn one never"
    );
}

/// One bound on reaching a peer (`[bridge] connect_timeout`), and errors that say how long
/// this home really tried: a pairing request to a port nobody answers on, and a list over a
/// bridge whose target stopped, give up after the bound (not QUIC's 10 s idle timeout) and
/// say both the bound and the time taken.
#[tokio::test]
async fn an_unreachable_peer_is_given_up_after_the_connect_bound_saying_how_long() {
    let bound = std::time::Duration::from_secs(1);
    let a = TestHome::builder()
        .open_to_peers(std::time::Duration::from_secs(60))
        .config(move |c| c.bridge.connect_timeout = bound)
        .start()
        .await;
    // A socket that takes datagrams and never answers them.
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").expect("a silent port");
    let request = pb::BridgeRequestRequest {
        address: silent.local_addr().expect("addr").to_string(),
        want: vec!["read".into()],
        ..Default::default()
    };
    let started = std::time::Instant::now();
    let refused = a.client().bridges().bridge_request(request).await.expect_err("nobody answers");
    let took = started.elapsed();
    assert_eq!(refused.code(), Code::Unavailable, "{}", refused.message());
    assert!(
        refused.message().contains("no answer within 1s (`[bridge] connect_timeout`)"),
        "{}",
        refused.message()
    );
    assert!(refused.message().contains(" s in all)"), "the real time: {}", refused.message());
    assert!(took >= bound && took < 4 * bound, "gave up after {took:?}");

    let b = open_home().await;
    a.bridge_to(&b, "read").await;
    b.handle().shutdown();
    b.handle().stopped().await;
    let gone = a.client().threads().thread_list(list_via("bee")).await.expect_err("b is gone");
    assert_eq!(gone.code(), Code::Unavailable, "{}", gone.message());
    assert!(gone.message().contains(" s in all)"), "the real time: {}", gone.message());
}
