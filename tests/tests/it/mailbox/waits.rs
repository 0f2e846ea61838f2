//! ThreadWait: its limits, each event once, waiters woken only for their threads, cursors
//! across restarts and without a cursor, a parked wait at shutdown; attention and
//! undeliverable events.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use kiki_proto as pb;
use kiki_proto::Word;
use kiki_tests::{TestHome, assert_invalid, binaries::binary, eventually, local};
use tonic::Code;

use super::{send, wait_req};

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
