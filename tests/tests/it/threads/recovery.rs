//! Restarts: threads and turns survive them; a turn in flight at a stop fails and its queue
//! survives; a claimed turn is recovered by what its claim recorded.

use kiki_proto as pb;
use kiki_tests::{TestHome, eventually};

#[tokio::test]
async fn threads_and_turns_survive_a_restart() {
    let mut home = TestHome::builder().start().await;
    let t = home.thread("echo", Some("before")).await;
    home.wait_turns(&t.id, 1).await;
    let id = home.handle().home_id().to_string();
    home.restart().await;
    assert_eq!(home.handle().home_id(), id, "the home id is stable across restarts");
    let turns = home.all_turns(&t.id).await;
    assert_eq!(turns.len(), 1);
    assert_eq!(turns[0].output, "echo: before");
    home.say(&t.id, "after").await.expect("say");
    assert_eq!(home.wait_turns(&t.id, 2).await[1].output, "echo: after");
}

/// A clean stop with a turn in flight records it as failed; input queued behind it runs
/// after the restart. (The kill -9 variant is in the smoke tier.)
#[tokio::test]
async fn a_turn_in_flight_at_shutdown_is_failed_and_the_queue_survives() {
    let mut home = TestHome::builder()
        .shell_profile("slow", "read line; [ \"$line\" = quick ] && echo fast || sleep 30")
        .start()
        .await;
    let t = home.thread("slow", Some("slow")).await;
    eventually("the turn to run", || async {
        (home.thread_record(&t.id).await.state() == pb::ThreadState::Running).then_some(())
    })
    .await;
    home.say(&t.id, "quick").await.expect("queued");
    home.restart().await;
    let turns = home.wait_turns(&t.id, 2).await;
    assert_eq!(turns[0].status(), pb::TurnStatus::Failed);
    assert!(turns[0].error.contains("kikid stopped"), "{}", turns[0].error);
    assert_eq!(turns[1].status(), pb::TurnStatus::Completed, "{}", turns[1].error);
    assert_eq!(turns[1].output, "fast\n");
}

/// Claims a turn of `thread_id` with message `msg_claimed` while `home` is down, as a kikid
/// that stopped right after the claim would have left it (no agent described), and restarts
/// it; returns the message's status and reason after the restart's recovery.
async fn claim_then_restart(home: &mut TestHome, thread_id: &str, exec: bool) -> (String, String) {
    use kiki_daemon::store::{MessageStore, NewMessage, SqliteStore, Store, TurnClaim};
    let db = home.handle().home_dir().join("kiki.db");
    let thread = thread_id.to_string();
    home.restart_with(async |_| {
        let store = SqliteStore::open_path(&db).await.expect("open");
        let message = NewMessage {
            room: None,
            id: format!("msg_{thread}"),
            target_thread: thread.clone(),
            source: None,
            content: "claimed".into(),
            key_scope: String::new(),
            key: format!("k_{thread}"),
            request_hash: "h".into(),
            wake: true,
            claim: Some(TurnClaim {
                turn_id: format!("tu_{thread}"),
                take_messages: true,
                render: kiki_daemon::executors::render,
                exec,
                budget: None,
                replica: String::new(),
                token_hash: String::new(),
            }),
            receipt: None,
            deadline: None,
            max_agent_wakes: None,
            now: 1,
        };
        store.accept_message(&message).await.expect("claimed");
        store.close().await;
    })
    .await;
    let turns = home.wait_turns(thread_id, 1).await;
    assert_eq!(turns[0].status(), pb::TurnStatus::Failed);
    let db = rusqlite::Connection::open(&db).expect("open");
    db.query_row("SELECT status, reason FROM messages WHERE id = ?", [format!("msg_{thread_id}")], |r| {
        Ok((r.get(0)?, r.get(1)?))
    })
    .expect("message")
}

/// A turn claimed with a message whose agent never got its input (the daemon stopped in
/// between: no agent was described) did not deliver the message after all: the restart fails
/// the turn and makes the message undeliverable.
#[tokio::test]
async fn a_claimed_turn_whose_agent_never_started_does_not_deliver() {
    let mut home = TestHome::builder().shell_profile("agent", "cat").start().await;
    let t = home.thread("agent", None).await;
    let (status, reason) = claim_then_restart(&mut home, &t.id, true).await;
    assert_eq!((status.as_str(), reason.as_str()), ("undeliverable", "kikid_stopped"));
}

/// Recovery goes by what the claim recorded, not by the config of the next run: a profile
/// edited in between can neither undeliver what a turn without an agent delivered nor keep
/// what an exec agent never got.
#[tokio::test]
async fn recovery_goes_by_the_claim_not_by_the_config() {
    let mut home = TestHome::builder().shell_profile("agent", "cat").start().await;
    let exec_profile = home.thread("agent", None).await;
    let (status, _) = claim_then_restart(&mut home, &exec_profile.id, false).await;
    assert_eq!(status, "delivered", "claimed as a turn without an exec agent");
    let echo_profile = home.thread("echo", None).await;
    let (status, reason) = claim_then_restart(&mut home, &echo_profile.id, true).await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("undeliverable", "kikid_stopped"),
        "claimed for an exec agent"
    );
}
