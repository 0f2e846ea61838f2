//! The mailbox in one home, in process: ThreadSend (limits, idempotency, attribution,
//! delivery and queueing), ThreadWait (limits, events, cursors), switches and attention.
//!
//! By subject: ThreadSend here; `switches` (who may send and read, and holding messages
//! back), `waits` (ThreadWait and attention), `connections` (what one connection's calls do
//! to each other, and bodies that are not messages).

mod connections;
mod switches;
mod waits;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use kiki_proto as pb;
use kiki_tests::{TestHome, assert_invalid, binaries::binary, eventually, local};
use tonic::Code;

fn send(target: &str, content: &str, key: &str) -> pb::ThreadSendRequest {
    pb::ThreadSendRequest {
        target: Some(local(target)),
        content: content.into(),
        idempotency_key: key.into(),
        ..Default::default()
    }
}

async fn wait_req(
    home: &TestHome,
    targets: &[&str],
    timeout_ms: Option<u32>,
    cursors: HashMap<String, String>,
) -> Result<pb::ThreadWaitResponse, tonic::Status> {
    let request =
        pb::ThreadWaitRequest { targets: targets.iter().map(|t| local(t)).collect(), timeout_ms, cursors };
    home.client().threads().thread_wait(request).await.map(|r| r.into_inner())
}

/// A home whose threads may talk (the home switch on) plus an exec profile `agent` that
/// runs `kiki` from inside its turn with the given shell script.
async fn talking_home(agent_script: &str) -> TestHome {
    TestHome::builder()
        .config(|c| c.thread_communication.enabled = Some(true))
        .shell_profile("agent", agent_script)
        // Long enough that a slow machine still sees the target busy.
        .shell_profile("slow", "cat; sleep 3")
        .start()
        .await
}

#[tokio::test]
async fn send_limits_name_the_field_and_leave_no_trace() {
    let home = TestHome::builder().start().await;
    let t = home.thread("echo", None).await;
    let threads = home.client().threads();
    assert_invalid(threads.clone().thread_send(send(&t.id, "", "k")).await, "content", "empty");
    assert_invalid(
        threads.clone().thread_send(send(&t.id, &"c".repeat(100_001), "k")).await,
        "content",
        "100000",
    );
    assert_invalid(threads.clone().thread_send(send(&t.id, "hi", "")).await, "idempotency_key", "empty");
    assert_invalid(
        threads.clone().thread_send(send(&t.id, "hi", &"k".repeat(257))).await,
        "idempotency_key",
        "256",
    );
    threads
        .clone()
        .thread_send(send(&t.id, &"é".repeat(100_000), &"k".repeat(256)))
        .await
        .expect("at the limits");
    let turns = home.wait_turns(&t.id, 1).await;
    assert_eq!(turns.len(), 1, "only the valid send made a message");
    let missing = threads.clone().thread_send(send("th_nope", "hi", "k2")).await;
    assert_eq!(missing.expect_err("missing").code(), Code::NotFound);
}

#[tokio::test]
async fn an_external_send_is_delivered_unattributed_and_echo_drops_the_header() {
    let home = TestHome::builder().start().await;
    let t = home.thread("echo", None).await;
    let sent =
        home.client().threads().thread_send(send(&t.id, "ping", "k1")).await.expect("send").into_inner();
    assert_eq!(sent.status(), pb::SendStatus::Delivered, "an idle thread takes it at once");
    assert!(!sent.replayed);
    let turn = home.wait_turns(&t.id, 1).await.remove(0);
    assert_eq!(turn.output, "echo: ping", "echo prints the content without the header");
    assert!(
        turn.input.contains(&sent.message_id) && turn.input.contains("external client"),
        "{}",
        turn.input
    );
    assert_eq!(turn.inputs[0].kind(), pb::InputKind::Message);
    assert_eq!(turn.inputs[0].message_id, sent.message_id);
    assert!(turn.inputs[0].source.is_none(), "no token, no peer attribution");
}

#[tokio::test]
async fn the_same_key_replays_and_other_content_conflicts() {
    let home = TestHome::builder().start().await;
    let t = home.thread("echo", None).await;
    let other = home.thread("echo", None).await;
    let threads = home.client().threads();
    let first = threads.clone().thread_send(send(&t.id, "once", "key-1")).await.expect("send").into_inner();
    let again = threads.clone().thread_send(send(&t.id, "once", "key-1")).await.expect("replay").into_inner();
    assert_eq!(again.message_id, first.message_id);
    assert!(again.replayed);
    assert_eq!(again.status(), pb::SendStatus::Delivered);
    let conflict =
        threads.clone().thread_send(send(&t.id, "different", "key-1")).await.expect_err("conflict");
    assert_eq!(conflict.code(), Code::AlreadyExists);
    assert!(conflict.message().contains("idempotency_key"), "{}", conflict.message());
    let elsewhere =
        threads.clone().thread_send(send(&other.id, "once", "key-1")).await.expect_err("other target");
    assert_eq!(elsewhere.code(), Code::AlreadyExists);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(home.all_turns(&t.id).await.len(), 1, "one message, one turn");
}

#[tokio::test]
async fn concurrent_duplicate_sends_make_exactly_one_message() {
    let home = TestHome::builder().start().await;
    let t = home.thread("echo", None).await;
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let mut threads = home.client().threads();
        let request = send(&t.id, "exactly once", "dup-key");
        tasks.push(tokio::spawn(async move { threads.thread_send(request).await.map(|r| r.into_inner()) }));
    }
    let mut ids = std::collections::HashSet::new();
    for task in tasks {
        ids.insert(task.await.expect("task").expect("send").message_id);
    }
    assert_eq!(ids.len(), 1, "every caller got the same message");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let turns = home.all_turns(&t.id).await;
    let messages: usize = turns.iter().map(|t| t.inputs.len()).sum();
    assert_eq!(messages, 1, "and only one message reached the thread");
}

#[tokio::test]
async fn a_send_from_a_turn_is_attributed_to_its_thread() {
    let kiki = binary("kiki");
    let script = format!(
        "read target; {} thread send \"$target\" --key from-agent --content 'hello peer' --json",
        kiki.display()
    );
    let home = talking_home(&script).await;
    let target = home.thread("echo", None).await;
    let agent = home.thread("agent", Some(&target.id)).await;
    let turn = home.wait_turns(&agent.id, 1).await.remove(0);
    assert_eq!(turn.status(), pb::TurnStatus::Completed, "{} {}", turn.error, turn.output);
    let sent: serde_json::Value = serde_json::from_str(&turn.output).expect("json");
    let got = home.wait_turns(&target.id, 1).await.remove(0);
    assert_eq!(got.inputs[0].message_id, sent["message_id"].as_str().expect("id"));
    let source = got.inputs[0].source.clone().expect("verified source");
    assert_eq!(
        (&source.session_id, &source.workspace_id),
        (&agent.id, &agent.workspace_id),
        "a whole reference"
    );
    assert!(source.workspace_id.starts_with("ws_"), "{source:?}");
    assert!(got.input.contains(&format!("from {}", agent.id)), "the header names the source: {}", got.input);
    assert_eq!(got.output, "echo: hello peer");
}

#[tokio::test]
async fn a_busy_target_queues_and_a_slow_delivery_answers_pending() {
    let home = TestHome::builder()
        .config(|c| c.mailbox.delivery_wait = Duration::from_millis(100))
        .shell_profile("slow", "cat; sleep 2")
        .start()
        .await;
    let t = home.thread("slow", Some("first")).await;
    eventually("the first turn", || async {
        (home.thread_record(&t.id).await.state() == pb::ThreadState::Running).then_some(())
    })
    .await;
    let threads = home.client().threads();
    let started = Instant::now();
    let a = threads.clone().thread_send(send(&t.id, "m1", "a")).await.expect("send").into_inner();
    assert!(started.elapsed() < Duration::from_millis(1500), "answered after the bounded wait, not the turn");
    let b = threads.clone().thread_send(send(&t.id, "m2", "b")).await.expect("send").into_inner();
    assert_eq!((a.status(), b.status()), (pb::SendStatus::Pending, pb::SendStatus::Pending));
    let turns = home.wait_turns(&t.id, 2).await;
    let ids: Vec<&str> = turns[1].inputs.iter().map(|i| i.message_id.as_str()).collect();
    assert_eq!(ids, [a.message_id.as_str(), b.message_id.as_str()], "the next turn takes all, in order");
    let replay = threads.clone().thread_send(send(&t.id, "m1", "a")).await.expect("replay").into_inner();
    assert_eq!(replay.status(), pb::SendStatus::Delivered, "a replay reports where the message is now");
}

#[tokio::test]
async fn a_turn_token_is_refused_for_send_after_its_turn() {
    let home = TestHome::builder()
        .config(|c| c.thread_communication.enabled = Some(true))
        .shell_profile("leak", "cat >/dev/null; echo \"$KIKI_TOKEN\"")
        .start()
        .await;
    let t = home.thread("leak", Some("x")).await;
    let token = home.wait_turns(&t.id, 1).await[0].output.trim().to_string();
    let stale = home.client().clone().with_token(&token).expect("token");
    let err = stale.threads().thread_send(send(&t.id, "hi", "k")).await.expect_err("expired token");
    assert_eq!(err.code(), Code::Unauthenticated);
}

/// A caller that goes away mid-send (its gRPC deadline passes while the store commits) takes
/// nothing with it: what the commit accepted is still delivered, and a turn the commit
/// claimed still runs, so the thread is never left `running` with no turn.
#[tokio::test]
async fn sends_whose_callers_gave_up_are_still_delivered() {
    const SENDS: usize = 60;
    let home = TestHome::builder().start().await;
    let t = home.thread("echo", None).await;
    let threads = home.client().threads();
    for i in 0..SENDS {
        let mut request = tonic::Request::new(send(&t.id, &format!("m{i}"), &format!("k{i}")));
        // 20 µs to 1.2 ms: some calls give up before the commit, some during, some after.
        request.set_timeout(Duration::from_micros(20 * (i as u64 + 1)));
        let _ = threads.clone().thread_send(request).await;
    }
    // The same keys again, patiently: replays for what was committed, new sends for the rest.
    for i in 0..SENDS {
        threads.clone().thread_send(send(&t.id, &format!("m{i}"), &format!("k{i}"))).await.expect("send");
    }
    eventually("every message in an ended turn and the thread idle", || async {
        let taken: usize = home.all_turns(&t.id).await.iter().map(|turn| turn.inputs.len()).sum();
        let idle = home.thread_record(&t.id).await.state() == pb::ThreadState::Idle;
        (taken == SENDS && idle).then_some(())
    })
    .await;
}
