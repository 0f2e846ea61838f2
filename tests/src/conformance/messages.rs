//! Conformance cases: messages, their keys and events.

use super::*;
use kiki_daemon::executors::render;
use kiki_daemon::store::{
    CommunicationSetting, EventKind, EventRecord, InputKind, MessageStatus, NewMessage, SendOutcome,
    SourceRef, Store, TurnClaim, TurnStatus,
};

pub(super) fn message(id: &str, target: &str, scope: &str, key: &str, hash: &str) -> NewMessage {
    NewMessage {
        room: None,
        id: id.into(),
        target_thread: target.into(),
        source: (!scope.is_empty()).then(|| SourceRef {
            host_id: String::new(),
            thread_id: scope.into(),
            workspace_id: String::new(),
        }),
        content: format!("content of {id}"),
        key_scope: scope.into(),
        key: key.into(),
        request_hash: hash.into(),
        wake: true,
        claim: None,
        receipt: None,
        deadline: None,
        max_agent_wakes: None,
        now: 10,
    }
}

/// [`message`] as it arrives over `peer`'s bridge from its thread `th_far`: its source,
/// key scope and receipt are the peer's.
pub(super) fn bridged_message(id: &str, target: &str, peer: &str, key: &str) -> NewMessage {
    let mut m = message(id, target, "th_far", key, key);
    m.source =
        Some(SourceRef { host_id: peer.into(), thread_id: "th_far".into(), workspace_id: String::new() });
    m.key_scope = format!("{peer}/th_far");
    m.receipt = Some(kiki_daemon::store::ReceiptRecord {
        peer_home_id: peer.into(),
        key: key.into(),
        message_id: String::new(),
        target: target.into(),
        status: kiki_daemon::store::OutboxStatus::Accepted,
        reason: String::new(),
        at: 10,
    });
    m
}

/// How a test starts a turn: `take_messages` as the thread's communication switch says.
pub(super) fn turn(turn_id: &str, take_messages: bool) -> TurnClaim {
    TurnClaim {
        turn_id: turn_id.into(),
        take_messages,
        render,
        exec: false,
        budget: None,
        replica: String::new(),
        token_hash: String::new(),
    }
}

pub(super) fn claim(turn_id: &str) -> Option<TurnClaim> {
    Some(turn(turn_id, true))
}

/// A send asking for a claim starts an idle thread's turn in its own transaction, taking
/// everything queued; a busy thread only queues it, and a send without `wake` never claims.
pub async fn a_send_can_start_an_idle_threads_turn_at_once(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), Some(&user("in_u", "first"))).await.expect("create");
    let mut m1 = message("msg_1", "th_a", "", "k1", "h1");
    m1.claim = claim("tu_1");
    let SendOutcome::Accepted { message_id, delivered: true, turn: Some(claimed), held: false } =
        store.accept_message(&m1).await.expect("send")
    else {
        panic!("an idle thread's turn starts with the message");
    };
    assert_eq!(message_id, "msg_1");
    assert_eq!((claimed.turn.id.as_str(), claimed.turn.seq), ("tu_1", 1));
    let taken: Vec<_> = claimed.inputs.iter().map(|i| i.id.as_str()).collect();
    assert_eq!(taken, ["in_u", "in_msg_1"], "queued input first, in order");
    let stored = store.message("msg_1").await.expect("msg").expect("stored");
    assert_eq!((stored.status, stored.turn_id.as_deref()), (MessageStatus::Delivered, Some("tu_1")));
    assert!(store.thread("th_a").await.expect("read").expect("exists").running);

    let mut m2 = message("msg_2", "th_a", "", "k2", "h2");
    m2.claim = claim("tu_2");
    let busy = store.accept_message(&m2).await.expect("send");
    assert_eq!(
        busy,
        SendOutcome::Accepted { message_id: "msg_2".into(), delivered: false, turn: None, held: false },
        "busy: queued"
    );
    finish(store, "tu_1", "done").await;

    let mut m3 = message("msg_3", "th_a", "", "k3", "h3");
    (m3.wake, m3.claim) = (false, claim("tu_3"));
    let quiet = store.accept_message(&m3).await.expect("send");
    assert_eq!(
        quiet,
        SendOutcome::Accepted { message_id: "msg_3".into(), delivered: false, turn: None, held: false },
        "no wake: no claim"
    );
    assert_eq!(store.message("msg_2").await.expect("msg").expect("stored").status, MessageStatus::Pending);
}

/// Sends issued together (so a backend may commit them together) are still decided one by
/// one by their keys, in some order: of three sends with one key, one is accepted and the
/// others answered by it (a replay of the same request, a conflict for another).
pub async fn concurrent_sends_are_decided_by_key(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), None).await.expect("create");
    let batch = [
        message("msg_1", "th_a", "", "k1", "h1"),
        message("msg_2", "th_a", "th_peer", "k1", "h2"), // same key, other scope: independent
        message("msg_3", "th_a", "", "k1", "h1"),        // same key and request as msg_1
        message("msg_4", "th_a", "", "k1", "hX"),        // same key, another request
        message("msg_5", "th_missing", "", "k5", "h5"),
    ];
    let (a, b, c, d, e) = tokio::join!(
        store.accept_message(&batch[0]),
        store.accept_message(&batch[1]),
        store.accept_message(&batch[2]),
        store.accept_message(&batch[3]),
        store.accept_message(&batch[4]),
    );
    let outcomes: Vec<SendOutcome> = [a, b, c, d, e].into_iter().map(|o| o.expect("commit")).collect();
    let accepted =
        |id: &str| SendOutcome::Accepted { message_id: id.into(), delivered: false, turn: None, held: false };
    assert_eq!(outcomes[1], accepted("msg_2"), "another scope's key is its own");
    assert_eq!(outcomes[4], SendOutcome::TargetGone);
    let keyed = [(0, &batch[0]), (2, &batch[2]), (3, &batch[3])];
    let winners: Vec<_> = keyed.iter().filter(|(i, m)| outcomes[*i] == accepted(&m.id)).collect();
    assert_eq!(winners.len(), 1, "one send takes the key: {outcomes:?}");
    let winner = winners[0].1;
    for (i, m) in keyed.iter().filter(|(_, m)| m.id != winner.id) {
        let expected = if m.request_hash == winner.request_hash {
            SendOutcome::Replayed { message_id: winner.id.clone() }
        } else {
            SendOutcome::KeyConflict { message_id: winner.id.clone() }
        };
        assert_eq!(outcomes[*i], expected, "{} after {}", m.id, winner.id);
    }
    let again = store
        .accept_message(&message("msg_6", "th_a", "", "k1", &winner.request_hash))
        .await
        .expect("commit");
    assert_eq!(
        again,
        SendOutcome::Replayed { message_id: winner.id.clone() },
        "the key stays with its first send"
    );
    store.create_thread(&new_thread("th_b", "ws", 1), None).await.expect("create");
    let refused_key = store.accept_message(&message("msg_7", "th_b", "", "k5", "h5")).await.expect("commit");
    assert!(matches!(refused_key, SendOutcome::Accepted { .. }), "nothing kept for a refused send");
    for m in keyed.iter().map(|(_, m)| m).filter(|m| m.id != winner.id) {
        assert!(
            store.message(&m.id).await.expect("msg").is_none(),
            "a send answered by another stores nothing"
        );
    }
    let m = store.message("msg_2").await.expect("msg").expect("stored");
    assert_eq!(m.status, MessageStatus::Pending);
    assert_eq!(m.source.map(|s| s.thread_id), Some("th_peer".to_string()));
    // Both accepted messages are queued for the target's next turn, which delivers them.
    let claimed = store.claim_turn("th_a", turn("tu_1", true), 20).await.expect("claim").expect("queued");
    let mut ids: Vec<_> = claimed.inputs.iter().filter_map(|i| i.message_id.clone()).collect();
    ids.sort();
    let mut both = vec![winner.id.clone(), "msg_2".to_string()];
    both.sort();
    assert_eq!(ids, both);
    let m = store.message(&winner.id).await.expect("msg").expect("stored");
    assert_eq!(
        (m.status, m.turn_id.as_deref(), m.delivered_at),
        (MessageStatus::Delivered, Some("tu_1"), Some(20))
    );
}

pub async fn held_back_messages_wait_for_communication(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), None).await.expect("create");
    store.accept_message(&message("msg_1", "th_a", "th_peer", "k", "h")).await.expect("commit");
    store.enqueue_input("th_a", &user("in_u", "user text")).await.expect("enqueue");
    let claimed = store.claim_turn("th_a", turn("tu_1", false), 2).await.expect("claim").expect("user input");
    assert_eq!(claimed.inputs.len(), 1, "only the user's input");
    assert_eq!(claimed.inputs[0].kind, InputKind::User);
    finish(store, "tu_1", "x").await;
    assert_eq!(store.message("msg_1").await.expect("msg").expect("stored").status, MessageStatus::Pending);
    assert!(store.claim_turn("th_a", turn("tu_2", false), 3).await.expect("claim").is_none());
    let claimed = store.claim_turn("th_a", turn("tu_2", true), 4).await.expect("claim").expect("the message");
    assert_eq!(claimed.inputs[0].message_id.as_deref(), Some("msg_1"));
}

pub async fn archiving_makes_pending_messages_undeliverable(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), None).await.expect("create");
    store.create_thread(&new_thread("th_peer", "ws", 1), None).await.expect("create");
    store.accept_message(&message("msg_1", "th_a", "th_peer", "k", "h")).await.expect("commit");
    let done = store.set_archived("th_a", true, 5).await.expect("archive").expect("exists");
    assert!(done.notified.contains(&"th_a".to_string()) && done.notified.contains(&"th_peer".to_string()));
    let m = store.message("msg_1").await.expect("msg").expect("stored");
    assert_eq!((m.status, m.reason.as_str()), (MessageStatus::Undeliverable, "thread_archived"));
    for thread in ["th_a", "th_peer"] {
        let events = store.events_after(thread, 0, 10).await.expect("events");
        let undeliverable = events.iter().find(|e| e.kind == EventKind::Undeliverable).expect("event");
        assert_eq!(undeliverable.message_id.as_deref(), Some("msg_1"));
    }
    store.set_archived("th_a", false, 6).await.expect("unarchive");
    assert!(
        store.claim_turn("th_a", turn("tu_1", true), 7).await.expect("claim").is_none(),
        "not delivered later"
    );
}

pub async fn events_are_logged_per_thread_in_order(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), Some(&user("in_1", "x"))).await.expect("create");
    store.create_thread(&new_thread("th_b", "ws", 1), None).await.expect("create");
    let attention = EventRecord {
        seq: 0,
        thread_id: "th_a".into(),
        kind: EventKind::Attention,
        turn_id: Some("tu_1".into()),
        turn_status: None,
        reason: "need a decision".into(),
        lifecycle: None,
        message_id: None,
        request_id: None,
        at: 2,
    };
    store.claim_turn("th_a", turn("tu_1", true), 2).await.expect("claim").expect("input");
    let seq = store.add_event(&attention).await.expect("event");
    finish(store, "tu_1", "done").await;
    let events = store.events_after("th_a", 0, 10).await.expect("events");
    let kinds: Vec<EventKind> = events.iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [EventKind::Lifecycle, EventKind::Attention, EventKind::Terminal]);
    assert!(events.windows(2).all(|w| w[0].seq < w[1].seq));
    assert_eq!(events[1].seq, seq);
    assert_eq!(events[2].turn_status, Some(TurnStatus::Completed));
    let positions = store.event_positions("th_a").await.expect("positions");
    assert_eq!(positions.last, events[2].seq);
    assert_eq!(positions.latest_turn, events[0].seq, "the turn started after the creation");
    let after = store.events_after("th_a", events[1].seq, 10).await.expect("events");
    assert_eq!(after.len(), 1, "strictly after the cursor");
    assert_eq!(store.events_after("th_b", 0, 10).await.expect("events").len(), 1, "only th_b's own");
    let none = store.event_positions("th_none").await.expect("positions");
    assert_eq!((none.last, none.latest_turn), (0, 0));
    let no_turns = store.event_positions("th_b").await.expect("positions");
    assert_eq!(no_turns.latest_turn, no_turns.last, "no turn: from now");
    // A second turn: after the first one's terminal event.
    store.enqueue_input("th_a", &user("in_2", "y")).await.expect("input");
    store.claim_turn("th_a", turn("tu_2", true), 3).await.expect("claim").expect("input");
    let during = store.add_event(&EventRecord { turn_id: Some("tu_2".into()), at: 4, ..attention }).await;
    let positions = store.event_positions("th_a").await.expect("positions");
    assert_eq!((positions.last, positions.latest_turn), (during.expect("event"), events[2].seq));
}

pub async fn communication_switch_round_trip(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), None).await.expect("create");
    assert_eq!(
        store.thread("th_a").await.expect("t").expect("t").communication,
        CommunicationSetting::Default
    );
    let t =
        store.set_communication("th_a", CommunicationSetting::Off, 3).await.expect("set").expect("exists");
    assert_eq!(t.communication, CommunicationSetting::Off);
    assert!(store.set_communication("th_x", CommunicationSetting::On, 3).await.expect("set").is_none());
}

pub async fn old_keys_are_pruned(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), None).await.expect("create");
    store.accept_message(&message("msg_1", "th_a", "", "old", "h")).await.expect("commit");
    let mut later = message("msg_3", "th_a", "", "later", "h");
    later.now = 20;
    store.accept_message(&later).await.expect("commit");
    assert_eq!(store.prune_keys(5, 10).await.expect("prune"), 0, "younger than the cutoff");
    assert_eq!(store.prune_keys(30, 1).await.expect("prune"), 1, "at most the limit");
    assert_eq!(store.keyed_message("", "old").await.expect("key"), None, "the oldest first");
    assert!(store.keyed_message("", "later").await.expect("key").is_some());
    assert_eq!(store.prune_keys(30, 10).await.expect("prune"), 1, "then the rest");
    assert!(store.message("msg_1").await.expect("msg").is_some(), "the message itself stays");
    let reused = store.accept_message(&message("msg_2", "th_a", "", "old", "h")).await.expect("commit");
    assert!(matches!(reused, SendOutcome::Accepted { .. }), "a pruned key is free again: {reused:?}");
}

/// Keys are forgotten in the order they were written, a bounded window of the oldest at a
/// time; a window that reaches young keys forgets only the old ones in it.
pub async fn keys_are_pruned_oldest_first_in_bounded_windows(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), None).await.expect("create");
    // Five keys from long ago, then one young one.
    for (i, now) in [1, 2, 3, 4, 5, 1_000].into_iter().enumerate() {
        let mut sent = message(&format!("msg_{i}"), "th_a", "", &format!("k{i}"), "h");
        sent.now = now;
        store.accept_message(&sent).await.expect("accept");
    }
    assert_eq!(store.prune_keys(100, 2).await.expect("prune"), 2);
    assert_eq!(store.prune_keys(100, 2).await.expect("prune"), 2);
    // The last old key and the young one make the next window: one is forgotten, then none.
    assert_eq!(store.prune_keys(100, 2).await.expect("prune"), 1);
    assert_eq!(store.prune_keys(100, 2).await.expect("prune"), 0);
    for i in 0..5 {
        assert_eq!(store.keyed_message("", &format!("k{i}")).await.expect("key"), None, "k{i}");
    }
    assert_eq!(store.keyed_message("", "k5").await.expect("key"), Some(("h".into(), "msg_5".into())));
}

/// A thread read once a change to it was answered shows the change, whatever a backend
/// keeps of the thread between reads.
pub async fn a_thread_read_after_a_change_shows_it(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 0), Some(&user("in_1", "go"))).await.expect("create");
    let read = async || store.thread("th_a").await.expect("read").expect("exists");
    assert!(!read().await.running);
    assert!(!read().await.running, "read again, from the cache");
    store.set_communication("th_a", CommunicationSetting::On, 1).await.expect("switch");
    assert_eq!(read().await.communication, CommunicationSetting::On);
    store.claim_turn("th_a", turn("tu_1", true), 2).await.expect("claim").expect("a turn");
    assert!(read().await.running, "claimed");
    finish(store, "tu_1", "done").await;
    assert!(!read().await.running, "finished");
    store.set_archived("th_a", true, 4).await.expect("archive");
    assert!(read().await.archived);
    store.set_archived("th_a", false, 5).await.expect("unarchive");
    store.enqueue_input("th_a", &user("in_2", "again")).await.expect("enqueue");
    store.claim_turn("th_a", turn("tu_2", true), 6).await.expect("claim").expect("a turn");
    assert!(read().await.running);
    store.fail_interrupted_turns("restart", 7, 0).await.expect("fail");
    assert!(!read().await.running, "every thread's record dropped");
}

pub async fn archived_threads_start_no_turns(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), Some(&user("in_1", "queued"))).await.expect("create");
    store.set_archived("th_a", true, 2).await.expect("archive");
    assert!(store.claim_turn("th_a", turn("tu_1", true), 3).await.expect("claim").is_none());
    store.set_archived("th_a", false, 4).await.expect("unarchive");
    assert!(
        store.claim_turn("th_a", turn("tu_1", true), 5).await.expect("claim").is_some(),
        "kept for later"
    );
}

pub async fn messages_of_a_turn_whose_agent_never_started_are_undeliverable(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), None).await.expect("create");
    store.accept_message(&message("msg_1", "th_a", "th_peer", "k", "h")).await.expect("commit");
    store.claim_turn("th_a", turn("tu_1", true), 2).await.expect("claim").expect("the message");
    let mut notified = store.undeliver_turn_messages("tu_1", "executor_failed", 3).await.expect("undeliver");
    notified.sort();
    assert_eq!(notified, ["th_a", "th_peer"]);
    let m = store.message("msg_1").await.expect("msg").expect("stored");
    assert_eq!((m.status, m.reason.as_str()), (MessageStatus::Undeliverable, "executor_failed"));
    let events = store.events_after("th_peer", 0, 10).await.expect("events");
    assert_eq!(events.iter().filter(|e| e.kind == EventKind::Undeliverable).count(), 1);
    assert!(store.undeliver_turn_messages("tu_1", "again", 4).await.expect("idempotent").is_empty());
}
