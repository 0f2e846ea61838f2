//! Conformance cases: the outbox, receipts and bridges.

use super::*;
use kiki_daemon::store::{
    BridgeRecord, BridgeRequestRecord, BridgeState, Direction, EventKind, EventRecord, MessageStatus,
    NewMessage, OutboxRecord, OutboxStatus, Permission, Permissions, ReceiptRecord, RequestStatus,
    SendOutcome, Store, StoreError,
};

/// A pending outbox entry to the peer `PEER` under `key`, due at `due`, traced.
pub fn outbox_entry(id: &str, key: &str, due: i64) -> OutboxRecord {
    OutboxRecord {
        room: None,
        id: id.into(),
        bridge_id: "br_1".into(),
        peer_home_id: "PEER".into(),
        target_session: "th_far".into(),
        source_thread: Some("th_me".into()),
        source_workspace: "ws_0123456789abcdef".into(),
        content: "hello".into(),
        key_scope: "th_me".into(),
        key: key.into(),
        request_hash: "h".into(),
        status: OutboxStatus::Pending,
        reason: String::new(),
        remote_message_id: String::new(),
        attempts: 1,
        next_attempt_at: due,
        created_at: 1,
        updated_at: 1,
        trace: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
    }
}

pub async fn outbox_entries_are_unique_per_key_and_come_due(store: &dyn Store) {
    entries_are_unique_and_scheduled(store).await;
    entries_page_and_settle(store).await;
}

/// Three entries, two of them under one key: the first stays, and the entries come due,
/// are put off behind a silent peer's probe and made due again with the link.
async fn entries_are_unique_and_scheduled(store: &dyn Store) {
    let entries =
        [outbox_entry("msg_1", "k1", 10), outbox_entry("msg_2", "k1", 10), outbox_entry("msg_3", "k3", 50)];
    let (first, second, third) = tokio::join!(
        store.outbox_insert(&entries[0]),
        store.outbox_insert(&entries[1]),
        store.outbox_insert(&entries[2]),
    );
    assert_eq!(first.expect("insert"), None);
    let second = second.expect("insert");
    assert_eq!(second.as_ref().map(|e| e.id.as_str()), Some("msg_1"), "same key at once: the first");
    assert_eq!(third.expect("insert"), None);
    let again = store.outbox_insert(&outbox_entry("msg_4", "k3", 1)).await.expect("insert");
    assert_eq!(again.as_ref().map(|e| e.id.as_str()), Some("msg_3"), "same key later: the stored one");
    let due = store.outbox_due("PEER", 20, 10).await.expect("due");
    assert_eq!(due, [entries[0].clone()], "kept whole, its trace context too");
    // What the worker sleeps until: the first entry due after now, not one due already.
    assert_eq!(store.outbox_next_due("PEER", 5).await.expect("next"), Some(10));
    assert_eq!(store.outbox_next_due("PEER", 20).await.expect("next"), Some(50));
    assert_eq!(store.outbox_next_due("PEER", 50).await.expect("next"), None);
    assert_eq!(store.outbox_next_due("OTHER", 0).await.expect("next"), None);
    store.outbox_defer("PEER", "msg_1", 60, 1_000).await.expect("defer");
    let due: Vec<String> =
        store.outbox_due("PEER", 55, 10).await.expect("due").into_iter().map(|e| e.id).collect();
    assert_eq!(due, ["msg_1"], "a silent peer's entries wait for the probe; the probe stays due");
    store.outbox_defer("PEER", "", 40, 1_000).await.expect("defer");
    assert_eq!(
        store.outbox_due("PEER", 59, 10).await.expect("due").len(),
        1,
        "deferring never brings one forward"
    );
    store.outbox_retry_now("PEER", 20).await.expect("retry now");
    assert_eq!(
        store.outbox_due("PEER", 20, 10).await.expect("due").len(),
        2,
        "a live link makes everything due"
    );
    assert_eq!(store.outbox_due("PEER", 20, 1).await.expect("due").len(), 1, "at most the limit");
    // Put off only to the end of their retry window (sent at 1, a window of 30), where they
    // expire.
    store.outbox_defer("PEER", "", 90, 30).await.expect("defer");
    assert!(store.outbox_due("PEER", 30, 10).await.expect("due").is_empty(), "put off");
    assert_eq!(store.outbox_due("PEER", 31, 10).await.expect("due").len(), 2, "due as the window ends");
    let other = store.outbox_due("OTHER", 20, 10).await.expect("due");
    assert!(other.is_empty(), "another peer's due entries only: {other:?}");
}

/// The entries of [`entries_are_unique_and_scheduled`] paged, counted and settled: an
/// outcome is final, an accepted entry comes due for its follow-up.
async fn entries_page_and_settle(store: &dyn Store) {
    let mut done = outbox_entry("msg_1", "k1", 10);
    done.status = OutboxStatus::Delivered;
    store.outbox_update(&[(done, None)]).await.expect("update");
    let listed: Vec<(String, String)> = store
        .outbox_page("br_1", None, 10)
        .await
        .expect("list")
        .into_iter()
        .map(|e| (e.id, e.status.to_string()))
        .collect();
    let expected = [("msg_3", "pending"), ("msg_1", "delivered")];
    assert_eq!(listed, expected.map(|(id, status)| (id.to_string(), status.to_string())), "newest first");
    let from: Vec<String> = store
        .outbox_page("br_1", Some((1, "msg_1".into())), 10)
        .await
        .expect("page")
        .into_iter()
        .map(|e| e.id)
        .collect();
    assert_eq!(from, ["msg_1"], "from an entry back, the entry included");
    assert_eq!(store.outbox_page("br_1", None, 1).await.expect("page").len(), 1, "at most the limit");
    assert_eq!(store.outbox_pending("PEER", "br_1", &[]).await.expect("pending"), 1, "msg_3");
    assert_eq!(
        store.outbox_pending("PEER", "br_1", &["msg_3".into()]).await.expect("pending"),
        0,
        "left out"
    );
    // Outcomes are saved several at a time. An outcome is final: a late attempt's outcome
    // changes nothing and adds no event, and the others saved with it still move on.
    let mut late = outbox_entry("msg_1", "k1", 10);
    late.status = OutboxStatus::Rejected;
    let event = EventRecord {
        seq: 0,
        thread_id: "th_src".into(),
        kind: EventKind::Undeliverable,
        turn_id: None,
        turn_status: None,
        reason: "thread_not_found".into(),
        lifecycle: None,
        message_id: Some("msg_1".into()),
        request_id: None,
        at: 30,
    };
    let mut accepted = outbox_entry("msg_3", "k3", 40);
    accepted.status = OutboxStatus::Accepted;
    store.outbox_update(&[(late, Some(event)), (accepted.clone(), None)]).await.expect("update");
    let [third, first]: [OutboxRecord; 2] =
        store.outbox_page("br_1", None, 10).await.expect("list").try_into().expect("two entries");
    assert_eq!((first.status.as_str(), third.status.as_str()), ("delivered", "accepted"));
    assert!(
        store.events_after("th_src", 0, 10).await.expect("events").is_empty(),
        "no second outcome's event"
    );
    // An accepted entry is not final: it comes due for its follow-up and moves on. Put off
    // behind a silent peer's probe, it comes back with the link, like a pending one.
    let due: Vec<String> =
        store.outbox_due("PEER", 45, 10).await.expect("due").into_iter().map(|e| e.id).collect();
    assert_eq!(due, ["msg_3"], "followed up when due");
    store.outbox_defer("PEER", "", 90, 1_000).await.expect("defer");
    assert!(store.outbox_due("PEER", 45, 10).await.expect("due").is_empty(), "put off");
    store.outbox_retry_now("PEER", 46).await.expect("retry now");
    let due: Vec<String> =
        store.outbox_due("PEER", 46, 10).await.expect("due").into_iter().map(|e| e.id).collect();
    assert_eq!(due, ["msg_3"], "due again with the link");
    accepted.status = OutboxStatus::Delivered;
    store.outbox_update(&[(accepted.clone(), None)]).await.expect("update");
    let third = store.outbox_page("br_1", None, 10).await.expect("list").remove(0);
    assert_eq!((third.id.as_str(), third.status.as_str()), ("msg_3", "delivered"));
    assert!(store.outbox_due("PEER", i64::MAX, 10).await.expect("due").is_empty(), "nothing left to do");
    assert_eq!(store.outbox_next_due("PEER", 0).await.expect("next"), None, "nothing ever due");
    assert_eq!(store.outbox_pending("PEER", "br_1", &[]).await.expect("pending"), 0, "none unacknowledged");
}

pub async fn receipts_page_back_from_the_newest(store: &dyn Store) {
    let refusal = |peer: &str, key: &str, reason: &str| ReceiptRecord {
        peer_home_id: peer.into(),
        key: key.into(),
        message_id: String::new(),
        target: "th_a".into(),
        status: OutboxStatus::Rejected,
        reason: reason.into(),
        at: 5,
    };
    for (peer, key) in
        [("HOME_P", "k1"), ("HOME_Q", "k2"), ("HOME_P", "k3"), ("HOME_P", "k3"), ("HOME_P", "k4")]
    {
        store.add_refusal(&refusal(peer, key, "thread_not_found")).await.expect("receipt");
    }
    let keys = |page: &[(i64, ReceiptRecord)]| page.iter().map(|(_, r)| r.key.clone()).collect::<Vec<_>>();
    let newest = store.receipts_from("HOME_P", None, 2).await.expect("page");
    assert_eq!(keys(&newest), ["k4", "k3"]);
    let from = newest.last().map(|(seq, _)| *seq);
    let again = store.receipts_from("HOME_P", from, 2).await.expect("page");
    assert_eq!(
        keys(&again),
        ["k3", "k1"],
        "from a receipt back, the receipt included, only this peer's, once"
    );
    // Another reason for the key is another refusal (a grant changed between the asks).
    store.add_refusal(&refusal("HOME_P", "k1", "permission_denied")).await.expect("receipt");
    let all = store.receipts_from("HOME_P", None, 10).await.expect("page");
    assert_eq!(keys(&all), ["k1", "k4", "k3", "k1"]);
}

/// A write that fails half-way leaves nothing behind, and writes committed with it (a
/// backend may group them) are unaffected.
pub async fn a_failed_write_leaves_no_trace_beside_others(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), Some(&user("in_taken", "x"))).await.expect("create");
    // th_b's row and event are written before its first input collides with an existing id.
    let (b, c) = (new_thread("th_b", "ws", 2), new_thread("th_c", "ws", 3));
    let (b_input, c_input) = (user("in_taken", "y"), user("in_c", "z"));
    let (failed, fine) =
        tokio::join!(store.create_thread(&b, Some(&b_input)), store.create_thread(&c, Some(&c_input)));
    assert!(matches!(failed, Err(StoreError::Conflict(_))), "{failed:?}");
    fine.expect("the other write commits");
    assert!(store.thread("th_b").await.expect("read").is_none(), "no half-created thread");
    assert!(store.events_after("th_b", 0, 10).await.expect("events").is_empty(), "no stray event");
    assert!(store.thread("th_c").await.expect("read").is_some());
}

/// An active inbound bridge from `peer`: bridged messages are stored only while there is one.
pub(super) async fn inbound_bridge(store: &dyn Store, peer: &str, state: BridgeState) {
    let bridge = BridgeRecord {
        id: format!("br_{peer}"),
        direction: Direction::Inbound,
        peer_home_id: peer.into(),
        alias: peer.to_lowercase(),
        address: String::new(),
        state,
        permissions: [Permission::Send].into_iter().collect(),
        workspaces: Vec::new(),
        request_id: String::new(),
        created_at: 1,
        updated_at: 1,
        last_success: None,
        last_error: String::new(),
        last_error_at: None,
        revoked_by_peer: false,
        requested: Permissions::default(),
    };
    store.save_bridge(Some(&bridge), &[]).await.expect("bridge");
}

pub async fn a_bridged_message_needs_an_active_bridge_when_it_commits(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), None).await.expect("create");
    let m = bridged_message("msg_1", "th_a", "HOME_P", "k1");
    for state in [None, Some(BridgeState::Revoked), Some(BridgeState::Disabled)] {
        if let Some(state) = state {
            inbound_bridge(store, "HOME_P", state).await;
        }
        let outcome = store.accept_message(&m).await.expect("decided");
        assert!(matches!(outcome, SendOutcome::BridgeClosed), "{state:?}: {outcome:?}");
        assert!(store.message("msg_1").await.expect("read").is_none(), "{state:?}: nothing stored");
    }
    inbound_bridge(store, "HOME_P", BridgeState::Active).await;
    let outcome = store.accept_message(&m).await.expect("accepted");
    assert!(matches!(outcome, SendOutcome::Accepted { .. }), "{outcome:?}");
    // Its id is its source's: another bridged message cannot take one already given.
    let taken = NewMessage { key: "k2".into(), ..m.clone() };
    let outcome = store.accept_message(&taken).await.expect("decided");
    assert!(matches!(outcome, SendOutcome::IdTaken), "{outcome:?}");
    assert_eq!(store.keyed_message("HOME_P/th_far", "k2").await.expect("read"), None, "nothing stored");
    // Nor the id of a message this home sent away (its peer knows that one).
    store.outbox_insert(&outbox_entry("msg_sent", "k-out", 1)).await.expect("outbox");
    let sent_away = NewMessage { id: "msg_sent".into(), key: "k3".into(), ..m.clone() };
    let outcome = store.accept_message(&sent_away).await.expect("decided");
    assert!(matches!(outcome, SendOutcome::IdTaken), "{outcome:?}");
}

pub async fn a_bridge_record_round_trips(store: &dyn Store) {
    inbound_bridge(store, "HOME_P", BridgeState::Active).await;
    let mut bridge = store.bridges().await.expect("list").remove(0);
    (bridge.state, bridge.revoked_by_peer, bridge.last_error_at) = (BridgeState::Revoked, true, Some(7));
    bridge.last_error = "refused".into();
    bridge.requested = [Permission::Read, Permission::Wait].into_iter().collect();
    store.save_bridge(Some(&bridge), &[]).await.expect("save");
    assert_eq!(store.bridges().await.expect("list"), vec![bridge], "every field as saved");
}

pub async fn pending_messages_are_counted_per_peer_home(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), None).await.expect("create");
    inbound_bridge(store, "HOME_P", BridgeState::Active).await;
    inbound_bridge(store, "HOME_Q", BridgeState::Active).await;
    let from = |id: &str, host: &str, key: &str| bridged_message(id, "th_a", host, key);
    for m in [from("msg_1", "HOME_P", "k1"), from("msg_2", "HOME_P", "k2"), from("msg_3", "HOME_Q", "k3")] {
        store.accept_message(&m).await.expect("commit");
    }
    assert_eq!(store.pending_messages_from("HOME_P").await.expect("count"), 2);
    assert_eq!(store.pending_messages_from("HOME_Q").await.expect("count"), 1);
    store.claim_turn("th_a", turn("tu_1", true), 2).await.expect("claim").expect("the messages");
    assert_eq!(store.pending_messages_from("HOME_P").await.expect("count"), 0, "delivered");
}

/// A sweep expires bridged messages whose deadline passed while they waited (earliest first,
/// a bounded number at a time), with their receipts; a message with a later deadline, or
/// none, waits on.
pub async fn overdue_bridged_messages_expire_in_a_sweep(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), None).await.expect("create");
    inbound_bridge(store, "HOME_P", BridgeState::Active).await;
    let now = kiki_daemon::time::now_ms();
    let from = |id: &str, deadline: Option<i64>| {
        let mut m = bridged_message(id, "th_a", "HOME_P", id);
        (m.wake, m.deadline) = (false, deadline);
        m.receipt.as_mut().expect("receipt").at = now;
        m
    };
    for m in [
        from("msg_2", Some(now - 1_000)),
        from("msg_1", Some(now - 2_000)),
        from("msg_3", Some(now + 3_600_000)),
        from("msg_4", None),
    ] {
        store.accept_message(&m).await.expect("commit");
    }
    assert_eq!(store.expire_overdue_messages(now, 1).await.expect("sweep"), 1, "at most the limit");
    let status = |id: &'static str| async move {
        let m = store.message(id).await.expect("read").expect("kept");
        (m.status, m.reason)
    };
    assert_eq!(status("msg_1").await, (MessageStatus::Undeliverable, "expired".into()), "earliest first");
    assert_eq!(status("msg_2").await.0, MessageStatus::Pending);
    assert_eq!(store.expire_overdue_messages(now, 10).await.expect("sweep"), 1);
    assert_eq!(store.expire_overdue_messages(now, 10).await.expect("sweep"), 0, "nothing left");
    assert_eq!(status("msg_2").await, (MessageStatus::Undeliverable, "expired".into()));
    let mut receipts: Vec<String> = store
        .receipts_from("HOME_P", None, 10)
        .await
        .expect("receipts")
        .into_iter()
        .map(|(_, r)| format!("{}:{}:{}", r.message_id, r.status, r.reason))
        .collect();
    receipts.sort();
    assert_eq!(
        receipts,
        [
            "msg_1:accepted:",
            "msg_1:expired:expired",
            "msg_2:accepted:",
            "msg_2:expired:expired",
            "msg_3:accepted:",
            "msg_4:accepted:"
        ]
    );
    // A turn started by something else takes what still waits.
    store.enqueue_input("th_a", &user("in_u", "go")).await.expect("enqueue");
    let turn = store.claim_turn("th_a", turn("tu_1", true), 2).await.expect("claim").expect("a turn");
    let taken: Vec<_> = turn.inputs.iter().map(|i| i.id.as_str()).collect();
    assert_eq!(taken, ["in_msg_3", "in_msg_4", "in_u"], "the expired messages' input is gone");
}

/// A room of another home is bound to the first home that says a thread here joined it;
/// another home's word never moves it.
pub async fn a_room_is_bound_to_the_first_home_for_good(store: &dyn Store) {
    assert_eq!(store.room_home("room_r").await.expect("read"), None);
    assert_eq!(store.bind_room("room_r", "HOME_A", 1).await.expect("bind"), "HOME_A");
    assert_eq!(store.bind_room("room_r", "HOME_A", 2).await.expect("again"), "HOME_A");
    assert_eq!(store.bind_room("room_r", "HOME_P", 3).await.expect("another"), "HOME_A", "kept");
    assert_eq!(store.room_home("room_r").await.expect("read"), Some("HOME_A".into()));
}

/// A room entry written by a thread of home B and carried by home A's bridge: A's bridge
/// decides it (its revocation ends it, its switch holds it), not B's.
pub async fn the_bridge_that_carried_a_message_decides_it(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), None).await.expect("create");
    inbound_bridge(store, "HOME_A", BridgeState::Active).await;
    let mut entry = bridged_message("msg_1", "th_a", "HOME_A", "k1");
    entry.source.as_mut().expect("source").host_id = "HOME_B".into();
    entry.wake = false;
    let outcome = store.accept_message(&entry).await.expect("accepted");
    assert!(matches!(outcome, SendOutcome::Accepted { .. }), "no bridge from B is needed: {outcome:?}");
    assert_eq!(store.pending_messages_from("HOME_A").await.expect("count"), 1);
    assert_eq!(store.pending_messages_from("HOME_B").await.expect("count"), 0);
    inbound_bridge(store, "HOME_B", BridgeState::Active).await;
    let mut b =
        store.bridges().await.expect("list").into_iter().find(|b| b.peer_home_id == "HOME_B").expect("B");
    b.state = BridgeState::Revoked;
    store.revoke_inbound(&b, 5).await.expect("revoke B");
    assert_eq!(store.message("msg_1").await.expect("read").expect("kept").status, MessageStatus::Pending);
    let mut a =
        store.bridges().await.expect("list").into_iter().find(|b| b.peer_home_id == "HOME_A").expect("A");
    a.state = BridgeState::Revoked;
    store.revoke_inbound(&a, 6).await.expect("revoke A");
    assert_eq!(
        store.message("msg_1").await.expect("read").expect("kept").status,
        MessageStatus::Undeliverable
    );
}

/// Pairing requests round-trip; decided ones older than the cut are forgotten, pending ones
/// never.
pub async fn decided_pairing_requests_are_pruned_and_pending_ones_kept(store: &dyn Store) {
    let request = |id: &str, status: RequestStatus, decided_at: Option<i64>| BridgeRequestRecord {
        id: id.into(),
        peer_home_id: format!("HOME_{id}"),
        name: id.to_lowercase(),
        want: [Permission::Read, Permission::Send].into_iter().collect(),
        status,
        created_at: 1,
        decided_at,
        address: "192.0.2.7".into(),
    };
    let requests = [
        request("breq_old", RequestStatus::Rejected, Some(10)),
        request("breq_new", RequestStatus::Approved, Some(100)),
        request("breq_waiting", RequestStatus::Pending, None),
    ];
    store.save_bridge(None, &requests).await.expect("save");
    let mut saved = store.bridge_requests().await.expect("requests");
    saved.sort_by(|a, b| a.id.cmp(&b.id));
    let mut expected = requests.to_vec();
    expected.sort_by(|a, b| a.id.cmp(&b.id));
    assert_eq!(saved, expected, "every field as saved");
    assert_eq!(store.prune_bridge_requests(50).await.expect("prune"), 1);
    let mut left: Vec<_> =
        store.bridge_requests().await.expect("requests").into_iter().map(|r| r.id).collect();
    left.sort();
    assert_eq!(left, ["breq_new", "breq_waiting"]);
}

/// Hearing from a peer sets only the bridge's last success.
pub async fn hearing_from_a_peer_sets_only_its_last_success(store: &dyn Store) {
    inbound_bridge(store, "HOME_P", BridgeState::Active).await;
    let before = store.bridges().await.expect("list").remove(0);
    store.bridge_heard_from(&before.id, 42).await.expect("heard");
    let after = store.bridges().await.expect("list").remove(0);
    assert_eq!(after, BridgeRecord { last_success: Some(42), ..before });
    store.bridge_heard_from("br_missing", 43).await.expect("an unknown bridge changes nothing");
}

/// The oldest entry a peer has not acknowledged is found; one acknowledged, or another
/// peer's, is not counted.
pub async fn the_oldest_pending_entry_is_found(store: &dyn Store) {
    assert_eq!(store.outbox_oldest_pending("PEER").await.expect("none"), None);
    let entry = |id: &str, key: &str, created_at: i64, status: OutboxStatus| OutboxRecord {
        created_at,
        status,
        next_attempt_at: if status == OutboxStatus::Pending { 100 } else { i64::MAX },
        ..outbox_entry(id, key, 100)
    };
    store.outbox_insert(&entry("msg_1", "k1", 30, OutboxStatus::Pending)).await.expect("insert");
    store.outbox_insert(&entry("msg_2", "k2", 20, OutboxStatus::Pending)).await.expect("insert");
    store.outbox_insert(&entry("msg_3", "k3", 10, OutboxStatus::Delivered)).await.expect("insert");
    let other =
        OutboxRecord { peer_home_id: "OTHER".into(), ..entry("msg_4", "k4", 5, OutboxStatus::Pending) };
    store.outbox_insert(&other).await.expect("insert");
    assert_eq!(store.outbox_oldest_pending("PEER").await.expect("oldest"), Some(20));
    assert_eq!(store.outbox_oldest_pending("OTHER").await.expect("oldest"), Some(5));
}

/// A sender's key finds its outbox entry: the one for the peer asked, else the one it made
/// for another peer; none for a key never used.
pub async fn an_outbox_entry_is_found_by_its_key(store: &dyn Store) {
    store.outbox_insert(&outbox_entry("msg_1", "k1", 10)).await.expect("insert");
    let found = store.outbox_by_key("PEER", "th_me", "k1").await.expect("by key").expect("found");
    assert_eq!(found.id, "msg_1");
    let elsewhere = store.outbox_by_key("OTHER", "th_me", "k1").await.expect("by key").expect("found");
    assert_eq!((elsewhere.id.as_str(), elsewhere.peer_home_id.as_str()), ("msg_1", "PEER"));
    assert!(store.outbox_by_key("PEER", "th_me", "k2").await.expect("by key").is_none());
    assert!(store.outbox_by_key("PEER", "th_other", "k1").await.expect("by key").is_none());
}
