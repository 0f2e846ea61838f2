//! The mailbox in one home, in process: ThreadSend (limits, idempotency, attribution,
//! delivery and queueing), ThreadWait (limits, events, cursors), switches and attention.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use kiki_proto as pb;
use kiki_proto::Word;
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
async fn switches_refuse_and_say_which() {
    let kiki = binary("kiki");
    let script = format!("read target; {} thread send \"$target\" --key k --content hi", kiki.display());
    // Unset home switch: off by default.
    let home = TestHome::builder().shell_profile("agent", &script).start().await;
    let target = home.thread("echo", None).await;
    let agent = home.thread("agent", Some(&target.id)).await;
    let turn = home.wait_turns(&agent.id, 1).await.remove(0);
    assert_eq!(turn.status(), pb::TurnStatus::Failed);
    assert!(turn.error.contains("off by default"), "{}", turn.error);
    // The agent opts in; the target has not: the target's switch refuses.
    let on = |id: &str, c: pb::Communication| pb::ThreadSetRequest {
        target: Some(local(id)),
        communication: c as i32,
    };
    home.client().home().thread_set(on(&agent.id, pb::Communication::On)).await.expect("set");
    home.say(&agent.id, &target.id).await.expect("say");
    let turn = home.wait_turns(&agent.id, 2).await.remove(1);
    assert!(turn.error.contains("communication_disabled"), "{}", turn.error);
    home.client().home().thread_set(on(&target.id, pb::Communication::On)).await.expect("set");
    home.say(&agent.id, &target.id).await.expect("say");
    let turn = home.wait_turns(&agent.id, 3).await.remove(2);
    assert_eq!(turn.status(), pb::TurnStatus::Completed, "{}", turn.error);
    assert_eq!(home.wait_turns(&target.id, 1).await[0].output, "echo: hi");
    // External sends are user input, not peer communication: no switch applies.
    home.client().home().thread_set(on(&target.id, pb::Communication::Off)).await.expect("set");
    home.client()
        .threads()
        .thread_send(send(&target.id, "from the user", "ext"))
        .await
        .expect("external send");
    // A retry of the accepted send (same key and content) gets its original answer although
    // a switch refuses new sends now: the target's, then also the agent's own.
    for (n, closed) in [(4, &target.id), (5, &agent.id)] {
        home.client().home().thread_set(on(closed, pb::Communication::Off)).await.expect("set");
        home.say(&agent.id, &target.id).await.expect("say");
        let turn = home.wait_turns(&agent.id, n).await.remove(n - 1);
        assert_eq!(turn.status(), pb::TurnStatus::Completed, "a replay, not a refusal: {}", turn.error);
    }
    let outputs: Vec<String> = home.wait_turns(&target.id, 2).await.into_iter().map(|t| t.output).collect();
    assert_eq!(outputs, ["echo: hi", "echo: from the user"], "no second message from the retries");

    let off = TestHome::builder()
        .config(|c| c.thread_communication.enabled = Some(false))
        .shell_profile("agent", &script)
        .start()
        .await;
    let target = off.thread("echo", None).await;
    let agent = off.thread("agent", None).await;
    off.client().home().thread_set(on(&agent.id, pb::Communication::On)).await.expect("set");
    off.say(&agent.id, &target.id).await.expect("say");
    let turn = off.wait_turns(&agent.id, 1).await.remove(0);
    assert!(turn.error.contains("enabled = false"), "the home switch wins: {}", turn.error);
}

/// Turning a target's communication off holds accepted messages back without deleting
/// them; turning it on again delivers them.
#[tokio::test]
async fn disabling_communication_holds_messages_until_it_is_on_again() {
    let kiki = binary("kiki");
    let script =
        format!("read target; {} thread send \"$target\" --key held --content later", kiki.display());
    let home = talking_home(&script).await;
    let target = home.thread("slow", Some("busy")).await;
    eventually("the target to be busy", || async {
        (home.thread_record(&target.id).await.state() == pb::ThreadState::Running).then_some(())
    })
    .await;
    let agent = home.thread("agent", Some(&target.id)).await;
    assert_eq!(home.wait_turns(&agent.id, 1).await[0].status(), pb::TurnStatus::Completed);
    let set = |c: pb::Communication| pb::ThreadSetRequest {
        target: Some(local(&target.id)),
        communication: c as i32,
    };
    home.client().home().thread_set(set(pb::Communication::Off)).await.expect("off");
    home.wait_turns(&target.id, 1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(home.all_turns(&target.id).await.len(), 1, "held back while off");
    home.client().home().thread_set(set(pb::Communication::On)).await.expect("on");
    let turns = home.wait_turns(&target.id, 2).await;
    assert_eq!(turns[1].inputs[0].source.as_ref().map(|s| s.session_id.clone()), Some(agent.id.clone()));
}

#[tokio::test]
async fn wait_limits() {
    let home = TestHome::builder().start().await;
    let t = home.thread("echo", None).await;
    assert_invalid(wait_req(&home, &[], None, HashMap::new()).await, "targets", "between 1 and 8");
    let mut nine = Vec::new();
    for _ in 0..9 {
        nine.push(home.thread("echo", None).await.id);
    }
    let nine: Vec<&str> = nine.iter().map(String::as_str).collect();
    assert_invalid(wait_req(&home, &nine, Some(0), HashMap::new()).await, "targets", "between 1 and 8");
    wait_req(&home, &nine[..8], Some(0), HashMap::new()).await.expect("eight is fine");
    assert_invalid(wait_req(&home, &[&t.id, &t.id], Some(0), HashMap::new()).await, "targets", "distinct");
    assert_invalid(
        wait_req(&home, &[&t.id], Some(60_001), HashMap::new()).await,
        "timeout_ms",
        "between 0 and 60000",
    );
    let bad = HashMap::from([(t.id.clone(), "junk".to_string())]);
    assert_invalid(wait_req(&home, &[&t.id], Some(0), bad).await, "cursors", "restart");
    let first =
        wait_req(&home, &[&t.id], Some(0), HashMap::new()).await.expect("cursor").results[0].cursor.clone();
    let parts = String::from_utf8(data_encoding::BASE64URL_NOPAD.decode(first.as_bytes()).expect("b64"))
        .expect("utf8");
    let ahead = parts.rsplit_once(':').map(|(head, _)| format!("{head}:999999")).expect("cursor parts");
    let ahead = HashMap::from([(t.id.clone(), data_encoding::BASE64URL_NOPAD.encode(ahead.as_bytes()))]);
    assert_invalid(
        wait_req(&home, &[&t.id], Some(0), ahead).await,
        "cursors",
        "ahead of the thread's events",
    );
    let stray = HashMap::from([("th_other".to_string(), "x".to_string())]);
    assert_invalid(wait_req(&home, &[&t.id], Some(0), stray).await, "cursors", "not one of the targets");

    let started = Instant::now();
    let checked = wait_req(&home, &[&t.id], Some(0), HashMap::new()).await.expect("check once");
    assert!(checked.timed_out && started.elapsed() < Duration::from_millis(500));
    let started = Instant::now();
    let waited = wait_req(&home, &[&t.id], Some(300), HashMap::new()).await.expect("wait");
    assert!(waited.timed_out);
    assert!(started.elapsed() >= Duration::from_millis(300), "the server holds the call for the timeout");
}

#[tokio::test]
async fn wait_reports_each_event_once_across_calls() {
    let home = TestHome::builder().start().await;
    let t = home.thread("echo", None).await;
    let first = wait_req(&home, &[&t.id], Some(0), HashMap::new()).await.expect("cursor");
    let cursor = first.results[0].cursor.clone();
    home.say(&t.id, "go").await.expect("say");
    let cursors = HashMap::from([(t.id.clone(), cursor)]);
    let got = wait_req(&home, &[&t.id], Some(10_000), cursors).await.expect("wait");
    assert!(!got.timed_out);
    let events = &got.results[0].events;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].kind(), pb::EventKind::Terminal);
    assert_eq!(events[0].turn_status(), pb::TurnStatus::Completed);
    let cursors = HashMap::from([(t.id.clone(), got.results[0].cursor.clone())]);
    let again = wait_req(&home, &[&t.id], Some(0), cursors.clone()).await.expect("wait");
    assert!(again.results[0].events.is_empty(), "nothing repeated");
    // The cursor may also be keyed `local/ID`, as a reference to this home's thread is written.
    let as_local = HashMap::from([(format!("local/{}", t.id), got.results[0].cursor.clone())]);
    let again = wait_req(&home, &[&t.id], Some(0), as_local).await.expect("wait");
    assert!(again.results[0].events.is_empty(), "the same cursor, nothing repeated");
    home.client()
        .home()
        .thread_archive(pb::ThreadArchiveRequest { target: Some(local(&t.id)), archived: true })
        .await
        .expect("archive");
    let lifecycle = wait_req(&home, &[&t.id], Some(5_000), cursors).await.expect("wait");
    assert_eq!(lifecycle.results[0].events[0].lifecycle().word(), "archived");
}

#[tokio::test]
async fn a_waiter_wakes_only_for_its_threads() {
    let home = TestHome::builder().start().await;
    let a = home.thread("echo", None).await;
    let b = home.thread("echo", None).await;
    let client = home.client().clone();
    let b_id = b.id.clone();
    let waiter_b = tokio::spawn(async move {
        let request = pb::ThreadWaitRequest {
            targets: vec![local(&b_id)],
            timeout_ms: Some(700),
            ..Default::default()
        };
        client.threads().thread_wait(request).await.map(|r| r.into_inner())
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    home.say(&a.id, "only a").await.expect("say");
    let started = Instant::now();
    let waited_a = wait_req(&home, &[&a.id, &b.id], Some(5_000), HashMap::new()).await.expect("wait a");
    let b_result = waiter_b.await.expect("task").expect("wait b");
    assert!(b_result.timed_out && b_result.results[0].events.is_empty(), "b saw nothing of a");
    // The combined waiter got a's terminal event (even if it came before the call: without a
    // cursor a wait starts at the thread's latest turn).
    assert!(!waited_a.timed_out);
    assert_eq!(waited_a.results[0].events[0].kind(), pb::EventKind::Terminal);
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// `kiki attention list` shows an attention until the owner gives its thread input, also
/// one raised before any wait started and on a thread whose turn has ended; an archived
/// thread's is not listed.
#[tokio::test]
async fn open_attention_is_listed_until_the_owner_answers_its_thread() {
    let kiki = binary("kiki");
    let script = format!(
        "input=$(cat); case \"$input\" in *ask*) {} attention --reason \"need a decision\";; esac",
        kiki.display()
    );
    let home = TestHome::builder().shell_profile("asker", &script).start().await;
    let open = || async {
        home.client()
            .home()
            .attention_list(pb::AttentionListRequest {})
            .await
            .expect("list")
            .into_inner()
            .open
    };
    let t = home.thread("asker", Some("ask")).await;
    home.wait_turns(&t.id, 1).await;
    let listed = open().await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!((listed[0].thread_id.as_str(), listed[0].thread_title.as_str()), (t.id.as_str(), "ask"));
    assert_eq!(listed[0].event.as_ref().expect("event").reason, "need a decision");
    assert!(listed[0].next.contains(&format!("kiki thread say {}", t.id)), "{listed:?}");

    home.say(&t.id, "go ahead").await.expect("say");
    home.wait_turns(&t.id, 2).await;
    assert!(open().await.is_empty(), "answered by the owner's input");

    let other = home.thread("asker", Some("ask again")).await;
    home.wait_turns(&other.id, 1).await;
    assert_eq!(open().await.len(), 1);
    home.client()
        .home()
        .thread_archive(pb::ThreadArchiveRequest { target: Some(local(&other.id)), archived: true })
        .await
        .expect("archive");
    assert!(open().await.is_empty(), "an archived thread's attention is not listed");
}

#[tokio::test]
async fn attention_and_undeliverable_events() {
    let kiki = binary("kiki");
    let script = format!("cat >/dev/null; {} attention --reason 'need a decision'; sleep 2", kiki.display());
    let home = TestHome::builder()
        .config(|c| {
            c.thread_communication.enabled = Some(true);
            c.mailbox.delivery_wait = Duration::from_millis(50);
        })
        .shell_profile("asker", &script)
        .start()
        .await;
    let t = home.thread("asker", None).await;
    let cursor =
        wait_req(&home, &[&t.id], Some(0), HashMap::new()).await.expect("cursor").results[0].cursor.clone();
    home.say(&t.id, "go").await.expect("say");
    let got =
        wait_req(&home, &[&t.id], Some(10_000), HashMap::from([(t.id.clone(), cursor)])).await.expect("wait");
    let attention = &got.results[0].events[0];
    assert_eq!(attention.kind(), pb::EventKind::Attention);
    assert_eq!(attention.reason, "need a decision");
    let outside = home.client().threads().attention(pb::AttentionRequest { reason: "x".into() }).await;
    assert_eq!(outside.expect_err("needs a turn").code(), Code::FailedPrecondition);

    // A message pending for a thread that gets archived is undeliverable, and says so.
    let busy = home.thread("asker", Some("busy")).await;
    eventually("busy", || async {
        (home.thread_record(&busy.id).await.state() == pb::ThreadState::Running).then_some(())
    })
    .await;
    let sent = home.client().threads().thread_send(send(&busy.id, "too late", "late")).await.expect("send");
    assert_eq!(sent.get_ref().status(), pb::SendStatus::Pending);
    let cursor =
        wait_req(&home, &[&busy.id], Some(0), HashMap::new()).await.expect("c").results[0].cursor.clone();
    home.client()
        .home()
        .thread_archive(pb::ThreadArchiveRequest { target: Some(local(&busy.id)), archived: true })
        .await
        .expect("archive");
    let got = wait_req(&home, &[&busy.id], Some(5_000), HashMap::from([(busy.id.clone(), cursor)]))
        .await
        .expect("w");
    let undeliverable = got.results[0]
        .events
        .iter()
        .find(|e| e.kind() == pb::EventKind::Undeliverable)
        .expect("undeliverable event");
    assert_eq!(undeliverable.message_id, sent.get_ref().message_id);
    assert_eq!(undeliverable.reason, "thread_archived");
}

#[tokio::test]
async fn wait_cursors_survive_a_restart() {
    let mut home = TestHome::builder().start().await;
    let t = home.thread("echo", Some("one")).await;
    home.wait_turns(&t.id, 1).await;
    let cursor =
        wait_req(&home, &[&t.id], Some(0), HashMap::new()).await.expect("cursor").results[0].cursor.clone();
    home.restart().await;
    home.say(&t.id, "two").await.expect("say");
    home.wait_turns(&t.id, 2).await;
    home.restart().await;
    let got =
        wait_req(&home, &[&t.id], Some(0), HashMap::from([(t.id.clone(), cursor)])).await.expect("wait");
    let events = &got.results[0].events;
    assert_eq!(events.len(), 1, "exactly the event after the cursor: {events:?}");
    assert_eq!(events[0].kind(), pb::EventKind::Terminal);
}

/// Send, then wait without a cursor: the wait starts where the thread's latest turn started,
/// so the outcome of the turn a send started is not missed however fast that turn ended, and
/// nothing older comes back; the returned cursor goes on from there without repeating it.
#[tokio::test]
async fn a_wait_without_a_cursor_starts_at_the_latest_turn() {
    let home = TestHome::builder().start().await;
    let t = home.thread("echo", None).await;
    let fresh = wait_req(&home, &[&t.id], Some(0), HashMap::new()).await.expect("wait");
    assert!(fresh.timed_out && fresh.results[0].events.is_empty(), "no turn yet: from now");
    let terminal_of_latest_turn = || async {
        let got = wait_req(&home, &[&t.id], Some(0), HashMap::new()).await.expect("wait");
        let result = got.results.into_iter().next().expect("result");
        let turns: Vec<String> = result.events.iter().map(|e| e.turn_id.clone()).collect();
        (turns, result.cursor)
    };
    for (n, content) in ["one", "two"].into_iter().enumerate() {
        if n > 0 {
            // Events between two turns belong to neither: archived and back.
            for archived in [true, false] {
                let request = pb::ThreadArchiveRequest { target: Some(local(&t.id)), archived };
                home.client().home().thread_archive(request).await.expect("archive");
            }
        }
        let sent = home.client().threads().thread_send(send(&t.id, content, content)).await.expect("send");
        assert_eq!(sent.into_inner().status(), pb::SendStatus::Delivered);
        let turns = home.wait_turns(&t.id, n + 1).await;
        let (seen, cursor) = terminal_of_latest_turn().await;
        assert_eq!(seen, [turns[n].id.clone()], "only the latest turn's terminal event");
        let next = wait_req(&home, &[&t.id], Some(0), HashMap::from([(t.id.clone(), cursor)])).await;
        assert!(next.expect("wait").results[0].events.is_empty(), "not repeated with the cursor");
    }
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

/// A parked ThreadWait answers when the daemon stops instead of holding the shutdown.
#[tokio::test]
async fn a_parked_wait_does_not_hold_up_shutdown() {
    let home = TestHome::builder().start().await;
    let t = home.thread("echo", None).await;
    let client = home.client().clone();
    let id = t.id.clone();
    let parked = tokio::spawn(async move {
        let request = pb::ThreadWaitRequest {
            targets: vec![local(&id)],
            timeout_ms: Some(60_000),
            ..Default::default()
        };
        client.threads().thread_wait(request).await.map(|r| r.into_inner())
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    home.handle().shutdown();
    tokio::time::timeout(Duration::from_secs(10), home.handle().stopped()).await.expect("stopped promptly");
    assert!(started.elapsed() < Duration::from_secs(3), "took {:?}", started.elapsed());
    let answer = parked.await.expect("task").expect("the wait answered");
    assert!(answer.timed_out && answer.results[0].events.is_empty());
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

/// Communication off keeps every peer tool closed for an agent — ThreadList, ThreadRead and
/// ThreadWait as well as ThreadSend — while the owner (no token) uses them freely; and a
/// turn's token is refused by each of them once the turn has ended.
#[tokio::test]
async fn peer_tools_follow_the_callers_switch_and_its_token() {
    let kiki = binary("kiki");
    let kiki = kiki.display();
    let script = format!(
        "read target; echo \"token $KIKI_TOKEN\"; \
         {kiki} thread list >/dev/null 2>&1 && echo 'list: ok' || echo 'list: refused'; \
         {kiki} thread read \"$target\" >/dev/null 2>&1 && echo 'read: ok' || echo 'read: refused'; \
         {kiki} thread wait \"$target\" --timeout-ms 0 >/dev/null 2>&1 && echo 'wait: ok' || echo 'wait: refused'"
    );
    // Unset home switch: off by default.
    let home = TestHome::builder().shell_profile("agent", &script).start().await;
    let target = home.thread("echo", None).await;
    let agent = home.thread("agent", Some(&target.id)).await;
    let closed = home.wait_turns(&agent.id, 1).await.remove(0).output;
    for tool in ["list", "read", "wait"] {
        assert!(closed.contains(&format!("{tool}: refused")), "{closed}");
    }
    home.client()
        .home()
        .thread_set(pb::ThreadSetRequest {
            target: Some(local(&agent.id)),
            communication: pb::Communication::On as i32,
        })
        .await
        .expect("set");
    home.say(&agent.id, &target.id).await.expect("say");
    let open = home.wait_turns(&agent.id, 2).await.remove(1).output;
    for tool in ["list", "read", "wait"] {
        assert!(open.contains(&format!("{tool}: ok")), "{open}");
    }

    // The turn has ended: its token opens nothing any more.
    let token = open.lines().find_map(|l| l.strip_prefix("token ")).expect("the agent printed its token");
    let with_token = |mut request: tonic::Request<()>| {
        request.metadata_mut().insert(pb::TOKEN_METADATA_KEY, token.parse().expect("ascii"));
        request.metadata().clone()
    };
    let metadata = with_token(tonic::Request::new(()));
    let threads = home.client().threads();
    let list =
        tonic::Request::from_parts(metadata.clone(), Default::default(), pb::ThreadListRequest::default());
    let read = pb::ThreadReadRequest { target: Some(local(&target.id)), ..Default::default() };
    let read = tonic::Request::from_parts(metadata.clone(), Default::default(), read);
    let wait =
        pb::ThreadWaitRequest { targets: vec![local(&target.id)], timeout_ms: Some(0), ..Default::default() };
    let wait = tonic::Request::from_parts(metadata, Default::default(), wait);
    let refusals = [
        threads.clone().thread_list(list).await.map(drop),
        threads.clone().thread_read(read).await.map(drop),
        threads.clone().thread_wait(wait).await.map(drop),
    ];
    for refused in refusals {
        assert_eq!(refused.expect_err("an ended turn's token").code(), Code::Unauthenticated);
    }
}

/// A thread created by an agent whose own switch is off starts with its switch off: the
/// owner's choice is not undone through a new thread.
#[tokio::test]
async fn a_closed_agent_creates_closed_threads() {
    let kiki = binary("kiki");
    let script = format!("read title; {} --json thread create --title \"$title\"", kiki.display());
    let home = talking_home(&script).await;
    let agent = home.thread("agent", None).await;
    let created_by = |n: usize| {
        let home = &home;
        let agent = agent.id.clone();
        async move {
            let output = home.wait_turns(&agent, n).await.remove(n - 1).output;
            let created: serde_json::Value = serde_json::from_str(&output).expect("json");
            home.thread_record(created["id"].as_str().expect("id")).await.communication()
        }
    };
    home.say(&agent.id, "open").await.expect("say");
    assert_eq!(created_by(1).await, pb::Communication::Default);
    let off =
        pb::ThreadSetRequest { target: Some(local(&agent.id)), communication: pb::Communication::Off as i32 };
    home.client().home().thread_set(off).await.expect("set");
    home.say(&agent.id, "closed").await.expect("say");
    assert_eq!(created_by(2).await, pb::Communication::Off, "inherits the closed switch");
}

/// A ThreadWait on `thread` that parks for 30 s, on `client`'s connection.
fn park_wait(
    client: &kiki_client::Client,
    thread: &str,
) -> tokio::task::JoinHandle<Result<pb::ThreadWaitResponse, tonic::Status>> {
    let mut threads = client.threads();
    let request = pb::ThreadWaitRequest {
        targets: vec![local(thread)],
        timeout_ms: Some(30_000),
        ..Default::default()
    };
    tokio::spawn(async move { threads.thread_wait(request).await.map(|r| r.into_inner()) })
}

fn all_parked<T>(waits: &[tokio::task::JoinHandle<T>]) -> bool {
    waits.iter().all(|wait| !wait.is_finished())
}

/// Waits parked on a connection leave its other calls free: a send and a list on the same
/// channel answer while every wait is still parked.
#[tokio::test]
async fn parked_waits_do_not_hold_up_other_calls_on_their_connection() {
    let home = TestHome::builder().start().await;
    let idle = home.thread("echo", None).await;
    let target = home.thread("echo", None).await;
    let waits: Vec<_> = (0..100).map(|_| park_wait(home.client(), &idle.id)).collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(all_parked(&waits), "the waits park (the thread is idle)");

    let sent = home.client().threads().thread_send(send(&target.id, "past the waits", "k")).await;
    assert!(all_parked(&waits), "the send answered while every wait was parked");
    assert_eq!(sent.expect("send").into_inner().status(), pb::SendStatus::Delivered);
    let listed = home.client().threads().thread_list(pb::ThreadListRequest::default()).await;
    assert!(all_parked(&waits), "the list answered while every wait was parked");
    assert_eq!(listed.expect("list").into_inner().threads.len(), 2);
    for wait in waits {
        wait.abort();
    }
}

/// One connection parks at most `WAITS_PER_CONNECTION` waits: one more is refused with
/// RESOURCE_EXHAUSTED naming the limit, a wait given up frees its place, and another
/// connection has its own.
#[tokio::test]
async fn a_connection_parks_a_bounded_number_of_waits() {
    use kiki_daemon::grpc::WAITS_PER_CONNECTION;
    let home = TestHome::builder().start().await;
    let idle = home.thread("echo", None).await;
    let mut waits: Vec<_> = (0..WAITS_PER_CONNECTION).map(|_| park_wait(home.client(), &idle.id)).collect();
    // A probe that returns at once passes until every wait has taken its place. A probe
    // holds a place while it runs, so a wait arriving then is refused: it is parked again.
    let refused = eventually("every wait parked", || {
        for wait in waits.iter_mut().filter(|wait| wait.is_finished()) {
            *wait = park_wait(home.client(), &idle.id);
        }
        async { wait_req(&home, &[&idle.id], Some(0), HashMap::new()).await.err() }
    })
    .await;
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(refused.message().contains(&WAITS_PER_CONNECTION.to_string()), "names the limit: {refused:?}");
    assert!(refused.message().contains("another connection"), "says what to do: {refused:?}");
    assert!(all_parked(&waits), "the refused wait was one too many, no parked wait ended");

    home.client().threads().thread_list(pb::ThreadListRequest::default()).await.expect("other calls pass");
    let other = kiki_client::Client::connect(&home.handle().socket_path()).await.expect("connect");
    let elsewhere =
        pb::ThreadWaitRequest { targets: vec![local(&idle.id)], timeout_ms: Some(0), ..Default::default() };
    other.threads().thread_wait(elsewhere).await.expect("another connection has its own waits");

    // A wait its caller gives up frees its place.
    waits.pop().expect("a wait").abort();
    eventually("the given-up wait's place", || async {
        wait_req(&home, &[&idle.id], Some(0), HashMap::new()).await.ok()
    })
    .await;
    assert!(all_parked(&waits));
    for wait in waits {
        wait.abort();
    }
}

/// Sends raw bytes as a call's one message and hands back the raw reply.
#[derive(Clone, Copy, Default)]
struct RawCodec;

impl tonic::codec::Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> RawCodec {
        RawCodec
    }

    fn decoder(&mut self) -> RawCodec {
        RawCodec
    }
}

impl tonic::codec::Encoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn encode(&mut self, item: Vec<u8>, buf: &mut tonic::codec::EncodeBuf<'_>) -> Result<(), tonic::Status> {
        prost::bytes::BufMut::put_slice(buf, &item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn decode(&mut self, buf: &mut tonic::codec::DecodeBuf<'_>) -> Result<Option<Vec<u8>>, tonic::Status> {
        let remaining = prost::bytes::Buf::remaining(buf);
        Ok(Some(prost::bytes::Buf::copy_to_bytes(buf, remaining).to_vec()))
    }
}

/// A body that is not a protobuf message is the caller's error, INVALID_ARGUMENT — through
/// the generated services and through ThreadWait's own route alike — and changes nothing.
#[tokio::test]
async fn a_garbage_request_body_is_an_invalid_argument() {
    let home = TestHome::builder().start().await;
    // A field key whose varint never ends.
    let garbage = vec![0xff; 11];
    for (method, message) in [
        ("ThreadCreate", "kiki.v1.ThreadCreateRequest"),
        ("ThreadWait", "kiki.v1.ThreadWaitRequest"),
        ("ThreadList", "kiki.v1.ThreadListRequest"),
    ] {
        let mut grpc = tonic::client::Grpc::new(home.client().channel());
        grpc.ready().await.expect("ready");
        let path = format!("/kiki.v1.ThreadService/{method}");
        let path = tonic::codegen::http::uri::PathAndQuery::try_from(path).expect("path");
        let status = grpc
            .unary(tonic::Request::new(garbage.clone()), path, RawCodec)
            .await
            .expect_err("garbage is refused");
        assert_eq!(status.code(), Code::InvalidArgument, "{method}: {status:?}");
        assert!(status.message().contains(message), "{method}: names the message: {status:?}");
    }
    let listed = home.client().threads().thread_list(pb::ThreadListRequest::default()).await.expect("list");
    assert!(listed.into_inner().threads.is_empty(), "nothing was created");
}
