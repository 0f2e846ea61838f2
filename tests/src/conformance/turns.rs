//! Conformance cases: a running turn's progress, input taken into it mid-turn, agent
//! sessions and cost; a source's follow-up of its bridged sends; open attention.

use super::*;
use kiki_daemon::executors::render;
use kiki_daemon::store::{
    EventRecord, MessageStatus, PartKind, PermissionRecord, PermissionStatus, SendOutcome, TurnUsage,
};

use super::bridges::inbound_bridge;
use super::messages::{bridged_message, message};

/// A turn's parts come back in the order they were added, numbered from 1, paged by `after`
/// and `limit`, and each turn has its own numbering.
pub async fn turn_parts_are_numbered_per_turn_and_paged(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), Some(&user("in_1", "go"))).await.expect("create");
    store.claim_turn("th_a", turn("tu_1", true), 2).await.expect("claim").expect("input");
    let parts = [(PartKind::Text, "thinking"), (PartKind::Tool, "Bash ls"), (PartKind::ToolResult, "a b")];
    for (i, (kind, text)) in parts.iter().enumerate() {
        store.add_turn_part("tu_1", *kind, text, 10 + i as i64).await.expect("part");
    }
    let all = store.turn_parts("tu_1", 0, 10).await.expect("parts");
    let seen: Vec<_> = all.iter().map(|p| (p.seq, p.kind, p.text.as_str(), p.at)).collect();
    assert_eq!(
        seen,
        [
            (1, PartKind::Text, "thinking", 10),
            (2, PartKind::Tool, "Bash ls", 11),
            (3, PartKind::ToolResult, "a b", 12)
        ]
    );
    let page = store.turn_parts("tu_1", 1, 1).await.expect("parts");
    assert_eq!(page.iter().map(|p| p.seq).collect::<Vec<_>>(), [2]);
    assert!(store.turn_parts("tu_1", 3, 10).await.expect("parts").is_empty());
    assert!(store.turn_parts("tu_other", 0, 10).await.expect("parts").is_empty());
}

/// The newest turn of a thread, running or ended; none before its first.
pub async fn the_latest_turn_is_the_newest_whatever_its_state(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), Some(&user("in_1", "a"))).await.expect("create");
    assert!(store.latest_turn("th_b").await.expect("latest").is_none(), "no such thread");
    store.claim_turn("th_a", turn("tu_1", true), 2).await.expect("claim").expect("input");
    assert_eq!(store.latest_turn("th_a").await.expect("latest"), Some(("tu_1".into(), TurnStatus::Running)));
    finish(store, "tu_1", "done").await;
    assert_eq!(
        store.latest_turn("th_a").await.expect("latest"),
        Some(("tu_1".into(), TurnStatus::Completed))
    );
    store.enqueue_input("th_a", &user("in_2", "b")).await.expect("enqueue");
    store.claim_turn("th_a", turn("tu_2", true), 6).await.expect("claim").expect("input");
    assert_eq!(store.latest_turn("th_a").await.expect("latest"), Some(("tu_2".into(), TurnStatus::Running)));
}

/// The agent session a thread resumes: set directly, or replaced by the one a finished turn
/// reports; a turn reporting none keeps it.
pub async fn agent_sessions_are_kept_and_replaced_by_finished_turns(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), Some(&user("in_1", "a"))).await.expect("create");
    assert!(store.agent_session("th_a").await.expect("session").is_none());
    store.set_agent_session("th_a", "sess-1", 2).await.expect("set");
    assert_eq!(store.agent_session("th_a").await.expect("session").as_deref(), Some("sess-1"));
    store.claim_turn("th_a", turn("tu_1", true), 3).await.expect("claim").expect("input");
    let mut outcome = TurnOutcome {
        turn_id: "tu_1".into(),
        status: TurnStatus::Completed,
        output: "ok".into(),
        error: String::new(),
        now: 4,
        usage: None,
        agent_session: Some("sess-2".into()),
    };
    store.finish_turn(&outcome).await.expect("finish");
    assert_eq!(store.agent_session("th_a").await.expect("session").as_deref(), Some("sess-2"));
    store.enqueue_input("th_a", &user("in_2", "b")).await.expect("enqueue");
    store.claim_turn("th_a", turn("tu_2", true), 5).await.expect("claim").expect("input");
    outcome.turn_id = "tu_2".into();
    outcome.agent_session = None;
    store.finish_turn(&outcome).await.expect("finish");
    assert_eq!(store.agent_session("th_a").await.expect("session").as_deref(), Some("sess-2"), "kept");
    assert!(store.agent_session("th_b").await.expect("session").is_none());
}

/// Cost adds up the usage turns reported, per thread and for the whole home; a thread that
/// reached its budget starts no turn, its input waiting.
pub async fn cost_adds_up_per_thread_and_a_budget_stops_new_turns(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), Some(&user("in_1", "a"))).await.expect("create");
    store.create_thread(&new_thread("th_b", "ws", 1), Some(&user("in_2", "b"))).await.expect("create");
    for (thread, turn_id, cost) in [("th_a", "tu_a", 0.25), ("th_b", "tu_b", 1.5)] {
        store.claim_turn(thread, turn(turn_id, true), 2).await.expect("claim").expect("input");
        store
            .finish_turn(&TurnOutcome {
                turn_id: turn_id.into(),
                status: TurnStatus::Completed,
                output: String::new(),
                error: String::new(),
                now: 3,
                usage: Some(TurnUsage { input_tokens: 10, output_tokens: 5, cost_usd: cost }),
                agent_session: None,
            })
            .await
            .expect("finish");
    }
    assert_eq!(store.cost(Some("th_a")).await.expect("cost"), 0.25);
    assert_eq!(store.cost(Some("th_missing")).await.expect("cost"), 0.0);
    assert_eq!(store.cost(None).await.expect("cost"), 1.75);
    let usage = store.turn("th_b", "tu_b").await.expect("turn").expect("exists").usage.expect("usage");
    assert_eq!((usage.input_tokens, usage.output_tokens), (10, 5));

    store.enqueue_input("th_b", &user("in_3", "more")).await.expect("enqueue");
    let over = TurnClaim { budget: Some(1.5), ..turn("tu_b2", true) };
    assert!(store.claim_turn("th_b", over, 4).await.expect("claim").is_none(), "its budget is spent");
    assert_eq!(store.threads_with_queued_input().await.expect("queued"), ["th_b".to_string()], "input waits");
    let raised = TurnClaim { budget: Some(2.0), ..turn("tu_b2", true) };
    assert!(store.claim_turn("th_b", raised, 5).await.expect("claim").is_some(), "under a higher budget");
}

/// The inbox of a running thread: queued messages that would wake it, oldest first — not
/// user input (it starts a turn of its own), not a message sent without waking, and a
/// peer's message only when the thread's communication lets it in.
pub async fn the_inbox_gives_waking_messages_only(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), Some(&user("in_1", "go"))).await.expect("create");
    store.claim_turn("th_a", turn("tu_1", true), 2).await.expect("claim").expect("input");
    store.enqueue_input("th_a", &user("in_2", "a user's")).await.expect("enqueue");
    store.accept_message(&message("msg_ext", "th_a", "", "k1", "h1")).await.expect("external");
    store.accept_message(&message("msg_peer", "th_a", "th_peer", "k2", "h2")).await.expect("peer");
    let mut quiet = message("msg_quiet", "th_a", "", "k3", "h3");
    quiet.wake = false;
    store.accept_message(&quiet).await.expect("quiet");
    let ids = |inputs: Vec<kiki_daemon::store::InputRecord>| {
        inputs.into_iter().filter_map(|i| i.message_id).collect::<Vec<_>>()
    };
    assert_eq!(ids(store.inbox("th_a", true).await.expect("inbox")), ["msg_ext", "msg_peer"]);
    assert_eq!(ids(store.inbox("th_a", false).await.expect("inbox")), ["msg_ext"], "peers held back");
    assert!(store.inbox("th_missing", true).await.expect("inbox").is_empty());
}

/// Messages taken into a running turn are delivered to it at once, appended to its input,
/// and no later turn takes them; ids not in the inbox, or a turn that ended, take nothing.
pub async fn messages_taken_into_a_running_turn_are_delivered_to_it(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), Some(&user("in_1", "go"))).await.expect("create");
    store.claim_turn("th_a", turn("tu_1", true), 2).await.expect("claim").expect("input");
    store.accept_message(&message("msg_1", "th_a", "", "k1", "h1")).await.expect("send");
    store.accept_message(&message("msg_2", "th_a", "", "k2", "h2")).await.expect("send");
    store.enqueue_input("th_a", &user("in_u", "a user's")).await.expect("enqueue");
    let asked = vec!["msg_1".to_string(), "in_u".to_string(), "msg_unknown".to_string()];
    let taken = store.take_into_turn("th_a", "tu_1", true, asked, render, 3).await.expect("take");
    assert_eq!(taken, ["msg_1"], "only what the inbox gives");
    let delivered = store.message("msg_1").await.expect("message").expect("exists");
    assert_eq!((delivered.status, delivered.turn_id.as_deref()), (MessageStatus::Delivered, Some("tu_1")));
    let running = store.turn("th_a", "tu_1").await.expect("turn").expect("exists");
    assert!(
        running.input.starts_with("go") && running.input.contains("content of msg_1"),
        "{}",
        running.input
    );
    let again =
        store.take_into_turn("th_a", "tu_1", true, vec!["msg_1".into()], render, 4).await.expect("take");
    assert!(again.is_empty(), "taken once");

    finish(store, "tu_1", "done").await;
    let late =
        store.take_into_turn("th_a", "tu_1", true, vec!["msg_2".into()], render, 6).await.expect("take");
    assert!(late.is_empty(), "the turn ended");
    let next = store.claim_turn("th_a", turn("tu_2", true), 7).await.expect("claim").expect("queued");
    let ids: Vec<_> = next.inputs.iter().map(|i| i.id.as_str()).collect();
    assert_eq!(ids, ["in_msg_2", "in_u"], "the rest in the order they came, without msg_1");
}

/// A source's follow-up confirms a pending bridged message (its deadline dropped), expires
/// one whose deadline passed, and with `window_over` keeps an unknown key as given up on, so
/// a send with it that arrives later is refused and stores nothing.
pub async fn a_follow_up_confirms_expires_or_gives_up_keys(store: &dyn Store) {
    let now = kiki_daemon::time::now_ms();
    store.create_thread(&new_thread("th_a", "ws", 1), None).await.expect("create");
    inbound_bridge(store, "PEER", kiki_daemon::store::BridgeState::Active).await;
    // The thread is busy, so bridged messages stay pending.
    store.enqueue_input("th_a", &user("in_1", "go")).await.expect("enqueue");
    store.claim_turn("th_a", turn("tu_1", true), 2).await.expect("claim").expect("input");
    let mut live = bridged_message("msg_live", "th_a", "PEER", "k_live");
    live.deadline = Some(now + 3_600_000);
    let mut late = bridged_message("msg_late", "th_a", "PEER", "k_late");
    late.deadline = Some(now - 1);
    for m in [&live, &late] {
        assert!(matches!(store.accept_message(m).await.expect("send"), SendOutcome::Accepted { .. }));
    }
    let scope = live.key_scope.clone();
    let keys = [(scope.clone(), "k_live".to_string()), (scope.clone(), "k_late".to_string())];
    let followed = store.follow_up(&keys, false, now).await.expect("follow up");
    let live = followed[0].as_ref().expect("known");
    assert_eq!((live.status, live.deadline), (MessageStatus::Pending, None), "confirmed: waits however long");
    let late = followed[1].as_ref().expect("known");
    assert_eq!(late.status, MessageStatus::Undeliverable, "its deadline passed");

    let unknown = [(scope.clone(), "k_never".to_string())];
    assert_eq!(store.follow_up(&unknown, false, now).await.expect("follow up"), [None]);
    assert_eq!(store.follow_up(&unknown, true, now).await.expect("follow up"), [None]);
    // A call sent within the window carries its deadline.
    let mut arriving = bridged_message("msg_never", "th_a", "PEER", "k_never");
    arriving.deadline = Some(now + 3_600_000);
    let refused = store.accept_message(&arriving).await.expect("send");
    assert!(matches!(refused, SendOutcome::GivenUp), "{refused:?}");
    assert!(store.message("msg_never").await.expect("message").is_none(), "nothing stored");
}

/// The message a local sender's key made is found by its scope and key, and only so.
pub async fn a_local_key_names_its_message(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), None).await.expect("create");
    store.accept_message(&message("msg_1", "th_a", "th_src", "k1", "h1")).await.expect("send");
    assert_eq!(store.local_key_message("th_src", "k1").await.expect("key").as_deref(), Some("msg_1"));
    assert!(store.local_key_message("th_src", "k2").await.expect("key").is_none());
    assert!(store.local_key_message("", "k1").await.expect("key").is_none(), "another sender's");
}

/// Attention stays open until the thread's user speaks again; a permission request's while
/// it waits for an answer; an archived thread's is closed.
pub async fn attention_is_open_until_answered(store: &dyn Store) {
    for id in ["th_a", "th_b", "th_c"] {
        store
            .create_thread(&new_thread(id, "ws", 1), Some(&user(&format!("in_{id}"), "go")))
            .await
            .expect("create");
        store.claim_turn(id, turn(&format!("tu_{id}"), true), 2).await.expect("claim").expect("input");
    }
    store
        .add_event(&EventRecord::attention("th_a", "tu_th_a", "which branch?".into(), 10))
        .await
        .expect("event");
    store.add_event(&EventRecord::attention("th_c", "tu_th_c", "stuck".into(), 11)).await.expect("event");
    let request = PermissionRecord {
        id: "perm_1".into(),
        thread_id: "th_b".into(),
        turn_id: "tu_th_b".into(),
        tool: "Bash".into(),
        input: "{}".into(),
        status: PermissionStatus::Pending,
        reason: String::new(),
        created_at: 12,
        decided_at: None,
    };
    store.ask_permission(&request, "may it run Bash?").await.expect("ask");
    let open = |events: Vec<EventRecord>| events.into_iter().map(|e| e.thread_id).collect::<Vec<_>>();
    assert_eq!(open(store.open_attention(10).await.expect("open")), ["th_a", "th_c", "th_b"], "oldest first");
    assert_eq!(open(store.open_attention(1).await.expect("open")), ["th_a"], "at most limit");

    store.enqueue_input("th_a", &NewInput { now: 20, ..user("in_answer", "main") }).await.expect("answer");
    store.decide_permission("perm_1", PermissionStatus::Allowed, "", 21).await.expect("decide");
    store.set_archived("th_c", true, 22).await.expect("archive");
    assert!(store.open_attention(10).await.expect("open").is_empty());
}

/// Each write publishes what it changed once it is committed, before it answers: a turn
/// started, input for a running thread, a part, an event, an answer, an outbox entry.
pub async fn committed_changes_are_published_before_the_write_answers(store: &dyn Store) {
    use kiki_daemon::store::Change;
    let heard = std::sync::Arc::new(std::sync::Mutex::new(Vec::<Change>::new()));
    let listener = heard.clone();
    store.changes().listen(std::sync::Arc::new(move |changes: &[Change]| {
        listener.lock().expect("lock").extend_from_slice(changes);
    }));
    let take = || std::mem::take(&mut *heard.lock().expect("lock"));
    let thread = |id: &str| Change::Thread(id.into());

    store.create_thread(&new_thread("th_a", "ws", 1), Some(&user("in_1", "go"))).await.expect("create");
    take();
    store.claim_turn("th_a", turn("tu_1", true), 2).await.expect("claim").expect("input");
    assert!(take().contains(&thread("th_a")), "a turn started");
    store.accept_message(&message("msg_1", "th_a", "", "k1", "h1")).await.expect("send");
    assert!(take().contains(&Change::Inbox("th_a".into())), "input for the running thread");
    store.add_turn_part("tu_1", PartKind::Text, "working", 3).await.expect("part");
    assert_eq!(take(), [Change::Parts("th_a".into())]);
    store.add_event(&EventRecord::attention("th_a", "tu_1", "look".into(), 4)).await.expect("event");
    assert_eq!(take(), [thread("th_a")]);
    let request = PermissionRecord {
        id: "perm_1".into(),
        thread_id: "th_a".into(),
        turn_id: "tu_1".into(),
        tool: "Bash".into(),
        input: "{}".into(),
        status: PermissionStatus::Pending,
        reason: String::new(),
        created_at: 5,
        decided_at: None,
    };
    store.ask_permission(&request, "may it?").await.expect("ask");
    assert_eq!(take(), [thread("th_a")], "its attention event");
    store.decide_permission("perm_1", PermissionStatus::Denied, "no", 6).await.expect("decide");
    assert!(take().contains(&Change::Answered("perm_1".into())));
    finish(store, "tu_1", "done").await;
    assert!(take().contains(&thread("th_a")), "a turn ended");
    store.outbox_retry_now("PEER", 7).await.expect("due");
    assert_eq!(take(), [Change::Outbox]);

    // A peer's message held while its bridge's access is off may be taken once it is on.
    store.enqueue_input("th_a", &user("in_2", "again")).await.expect("enqueue");
    store.claim_turn("th_a", turn("tu_2", true), 8).await.expect("claim").expect("input");
    inbound_bridge(store, "PEER", kiki_daemon::store::BridgeState::Active).await;
    store.accept_message(&bridged_message("msg_far", "th_a", "PEER", "k_far")).await.expect("bridged");
    inbound_bridge(store, "PEER", kiki_daemon::store::BridgeState::Disabled).await;
    take();
    inbound_bridge(store, "PEER", kiki_daemon::store::BridgeState::Active).await;
    assert_eq!(
        take(),
        [Change::Inbox("th_a".into()), Change::Bridges],
        "its held message may be taken now, and the bridge table is stale"
    );
    let bridge = store.bridges().await.expect("bridges").remove(0);
    store.bridge_heard_from(&bridge.id, 9).await.expect("heard");
    assert_eq!(take(), [Change::Bridges]);
    store.revoke_inbound(&bridge, 10).await.expect("revoke");
    assert!(take().contains(&Change::Bridges));
}
