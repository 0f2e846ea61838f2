//! What a bridge lets its peer do, checked at the target: read, send, wake and wait, the
//! workspace scope, no transitive trust, and inbound access turned off and on.

use kiki_proto as pb;
use kiki_proto::Word;
use kiki_tests::TestHome;
use kiki_tests::bridges::{
    approve, approve_refused, list_via, open_home, receipts, remote, remote_send, request, set_inbound,
};
use tonic::Code;

#[tokio::test]
async fn a_missing_permission_is_refused_at_the_target() {
    let (a, b) = (TestHome::builder().start().await, TestHome::builder().start().await);
    let request_id = request(&a, &b, "read,send", "bee").await;
    approve(&b, &request_id, "send", vec![]).await;
    let err = a.client().threads().thread_list(list_via("bee")).await.expect_err("no read");
    assert_eq!(err.code(), Code::PermissionDenied);
    assert!(err.message().contains("read"), "{}", err.message());
    let t = b.thread("echo", None).await;
    let remote = remote("bee", &t.id);
    let read = pb::ThreadReadRequest { target: Some(remote), ..Default::default() };
    let err = a.client().threads().thread_read(read).await.expect_err("no read");
    assert_eq!(err.code(), Code::PermissionDenied);
    assert!(err.message().contains("read"), "{}", err.message());
}

/// Owner actions (say, archive, set) act on this home's threads only: naming a thread
/// behind a bridge says so, not that the bridge does not exist.
#[tokio::test]
async fn owner_actions_on_a_thread_behind_a_bridge_say_they_are_local_only() {
    let (a, b) = (TestHome::builder().start().await, TestHome::builder().start().await);
    a.bridge_to(&b, "read,send,wake").await;
    let t = b.thread("echo", None).await;
    let remote = remote("bee", &t.id);
    let said = a
        .client()
        .home()
        .thread_say(pb::ThreadSayRequest { target: Some(remote), content: "hi".into() })
        .await
        .expect_err("local only");
    assert_eq!(said.code(), Code::NotFound);
    assert!(
        said.message().contains("is not this home") && said.message().contains("over a bridge"),
        "{said:?}"
    );
    assert!(b.all_turns(&t.id).await.is_empty(), "nothing reached the target");
}

/// A→B and B→C do not let A reach C: no transitive trust, B forwards nothing.
#[tokio::test]
async fn trust_is_not_transitive() {
    let (a, b, c) = (open_home().await, open_home().await, open_home().await);
    let on_c = c.thread("echo", None).await;
    let on_b = b.thread("echo", None).await;
    a.bridge_to(&b, "read,send,wake").await;
    b.bridge_named(&c, "cee", "read,send,wake").await;

    let listed = a.client().threads().thread_list(list_via("bee")).await.expect("list").into_inner();
    assert_eq!(listed.threads.iter().map(|t| t.id.clone()).collect::<Vec<_>>(), vec![on_b.id.clone()]);
    let through = remote("bee", &on_c.id);
    let read = pb::ThreadReadRequest { target: Some(through), ..Default::default() };
    let read = a.client().threads().thread_read(read).await;
    assert_eq!(read.expect_err("b does not forward").code(), Code::NotFound);
    let direct = a.client().threads().thread_list(list_via("cee")).await.expect_err("a has no bridge to c");
    assert_eq!(direct.code(), Code::NotFound);
    let sent = a.send(remote_send("bee", &on_c.id, "to c?", "k")).await;
    assert_eq!(sent.expect_err("b does not forward").code(), Code::NotFound);
}

#[tokio::test]
async fn a_workspace_scope_limits_list_read_send_and_wait() {
    let (a, b) = (open_home().await, open_home().await);
    let thread_in = async |workdir: &str| {
        let cwd = Some(b.workdir(workdir).display().to_string());
        b.create(pb::ThreadCreateRequest { cwd, ..Default::default() }).await.expect("create")
    };
    let (shared, private) = (thread_in("shared").await, thread_in("private").await);
    let request_id = request(&a, &b, "read,send,wait", "bee").await;
    // A scope names workspaces by id or by a directory in them; anything else is refused.
    for bogus in ["/no/such/dir", "shared", "ws_nothex"] {
        let err = approve_refused(&b, &request_id, "read", vec![bogus.into()]).await;
        assert_eq!(err.code(), Code::InvalidArgument, "{bogus}: {}", err.message());
        assert!(err.message().contains("workspaces"), "{}", err.message());
    }
    let granted = approve(&b, &request_id, "read,send,wait", vec![shared.cwd.clone()]).await;
    assert_eq!(granted.workspaces, std::slice::from_ref(&shared.workspace_id), "the directory's workspace");
    let page = a.client().threads().thread_list(list_via("bee")).await.expect("list").into_inner();
    assert_eq!(page.threads.iter().map(|t| t.id.clone()).collect::<Vec<_>>(), vec![shared.id.clone()]);
    let via_bee = |id: &str| remote("bee", id);
    let err = a
        .client()
        .threads()
        .thread_read(pb::ThreadReadRequest { target: Some(via_bee(&private.id)), ..Default::default() })
        .await;
    assert_eq!(err.expect_err("outside the scope").code(), Code::NotFound);
    // Naming the granted workspace does not tell the peer a thread outside it exists: the
    // answer is the one a thread that does not exist gets.
    let absent = |err: Result<tonic::Response<pb::ThreadReadResponse>, tonic::Status>| {
        let err = err.expect_err("absent");
        assert_eq!(err.code(), Code::NotFound);
        err.message().replace(&private.id, "ID").replace("th_doesnotexist", "ID")
    };
    let in_shared = |id: &str| pb::ThreadRef { workspace_id: shared.workspace_id.clone(), ..via_bee(id) };
    let outside = a
        .client()
        .threads()
        .thread_read(pb::ThreadReadRequest { target: Some(in_shared(&private.id)), ..Default::default() })
        .await;
    let missing = a
        .client()
        .threads()
        .thread_read(pb::ThreadReadRequest {
            target: Some(in_shared("th_doesnotexist")),
            ..Default::default()
        })
        .await;
    assert_eq!(absent(outside), absent(missing));
    // Sends and waits: the same scope, the same answer as for a thread that does not exist.
    let err = a.send(remote_send("bee", &private.id, "psst", "k1")).await;
    let err = err.expect_err("outside the scope");
    assert_eq!(err.code(), Code::NotFound);
    assert!(err.message().contains("thread_not_found"), "{}", err.message());
    let wait = |id: &str| pb::ThreadWaitRequest {
        targets: vec![via_bee(id)],
        timeout_ms: Some(10),
        cursors: Default::default(),
    };
    let err = a.client().threads().thread_wait(wait(&private.id)).await.expect_err("outside the scope");
    assert_eq!(err.code(), Code::NotFound);
    let sent = a.send(remote_send("bee", &shared.id, "hello", "k2")).await;
    assert_eq!(sent.expect("inside the scope").status(), pb::SendStatus::Pending);
    a.client().threads().thread_wait(wait(&shared.id)).await.expect("inside the scope");
    // The target's receipts: the message for the private thread refused, the other queued.
    let peer = a.handle().home_id();
    kiki_tests::eventually("the target's receipts", || async {
        let mut story: Vec<String> = receipts(&b, peer)
            .await
            .into_iter()
            .map(|r| format!("{}:{}:{}", r.idempotency_key, r.status().word(), r.reason))
            .collect();
        story.sort();
        (story == ["k1:rejected:thread_not_found", "k2:accepted:"]).then_some(())
    })
    .await;
}

#[tokio::test]
async fn waiting_across_a_bridge_needs_wait_wakes_nothing_and_mixes_with_local_threads() {
    let (a, b) = (TestHome::builder().start().await, TestHome::builder().start().await);
    let t = b.thread("echo", None).await;
    let request_id = request(&a, &b, "read,wait", "bee").await;
    let remote = remote("bee", &t.id);
    let wait = |timeout_ms: u32, cursors: std::collections::HashMap<String, String>| pb::ThreadWaitRequest {
        targets: vec![remote.clone()],
        timeout_ms: Some(timeout_ms),
        cursors,
    };
    approve(&b, &request_id, "read", vec![]).await;
    let err =
        a.client().threads().thread_wait(wait(0, Default::default())).await.expect_err("no wait permission");
    assert_eq!(err.code(), Code::PermissionDenied, "{}", err.message());

    a.bridge_to(&b, "read,wait").await;
    let first =
        a.client().threads().thread_wait(wait(0, Default::default())).await.expect("check").into_inner();
    assert!(first.timed_out);
    let result = &first.results[0];
    assert_eq!(result.target.as_ref().map(pb::format_ref), Some(format!("bee/{}", t.id)));
    assert!(b.all_turns(&t.id).await.is_empty(), "waiting woke nothing");

    let cursors = std::collections::HashMap::from([(format!("bee/{}", t.id), result.cursor.clone())]);
    let waiter = {
        let client = a.client().clone();
        let request = wait(10_000, cursors);
        tokio::spawn(async move { client.threads().thread_wait(request).await.map(|r| r.into_inner()) })
    };
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    b.say(&t.id, "go").await.expect("say");
    let got = waiter.await.expect("task").expect("wait");
    assert!(!got.timed_out);
    assert_eq!(got.results[0].events[0].kind(), pb::EventKind::Terminal);
    one_wait_on_near_and_far_threads(&a, &b, &t.id, &remote).await;
    a_peer_named_by_alias_or_home_id(&a, &b, &t.id, &remote).await;
}

/// One call may wait on this home's threads and a bridge's together (`far`, thread `t` at
/// `b`): whichever side has events ends it, and every target still gets its cursor.
async fn one_wait_on_near_and_far_threads(a: &TestHome, b: &TestHome, t: &str, far: &pb::ThreadRef) {
    let here = a.thread("echo", None).await;
    let both = |timeout_ms: u32, cursors: std::collections::HashMap<String, String>| pb::ThreadWaitRequest {
        targets: vec![far.clone(), kiki_tests::local(&here.id)],
        timeout_ms: Some(timeout_ms),
        cursors,
    };
    let cursors_of = |answer: &pb::ThreadWaitResponse| -> std::collections::HashMap<String, String> {
        answer
            .results
            .iter()
            .map(|r| (pb::format_ref(r.target.as_ref().expect("target")), r.cursor.clone()))
            .collect()
    };
    let checked =
        a.client().threads().thread_wait(both(0, Default::default())).await.expect("check").into_inner();
    // Without cursors each target starts at its latest turn: the far one's ended, the near
    // one has none.
    assert!(!checked.timed_out);
    assert_eq!(
        checked.results[0].events.iter().map(|e| e.kind()).collect::<Vec<_>>(),
        [pb::EventKind::Terminal]
    );
    assert!(checked.results[1].events.is_empty());
    let order: Vec<String> =
        checked.results.iter().map(|r| pb::format_ref(r.target.as_ref().expect("target"))).collect();
    assert_eq!(order, [format!("bee/{t}"), here.id.clone()], "results in the targets' order");
    let homes: Vec<&str> = checked.results.iter().map(|r| r.home_id.as_str()).collect();
    assert_eq!(homes, [b.handle().home_id(), a.handle().home_id()], "named as asked, beside each home id");
    let parked = |request: pb::ThreadWaitRequest| {
        let client = a.client().clone();
        tokio::spawn(async move { client.threads().thread_wait(request).await.map(|r| r.into_inner()) })
    };
    let waiter = parked(both(10_000, cursors_of(&checked)));
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    a.say(&here.id, "here").await.expect("say");
    let woke = waiter.await.expect("task").expect("wait");
    assert!(!woke.timed_out);
    assert!(woke.results[0].events.is_empty(), "nothing on the far thread: {:?}", woke.results[0]);
    assert_eq!(woke.results[1].events[0].kind(), pb::EventKind::Terminal);
    let waiter = parked(both(10_000, cursors_of(&woke)));
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    b.say(t, "there").await.expect("say");
    let woke = waiter.await.expect("task").expect("wait");
    assert_eq!(woke.results[0].events[0].kind(), pb::EventKind::Terminal, "the far thread's turn ended");
    assert!(woke.results[1].events.is_empty(), "the near thread's event was not repeated");
    let stray = both(0, std::collections::HashMap::from([("th_elsewhere".to_string(), "c".to_string())]));
    let err = a.client().threads().thread_wait(stray).await.expect_err("a cursor for no target");
    assert_eq!(err.code(), Code::InvalidArgument, "{}", err.message());
}

/// The peer may be named by alias (`far`, thread `t` at `b`) or by home id: one far thread
/// named both ways is one thread named twice, and two far threads named either way are
/// answered as named.
async fn a_peer_named_by_alias_or_home_id(a: &TestHome, b: &TestHome, t: &str, far: &pb::ThreadRef) {
    let remote = far;
    let by_id = pb::ThreadRef { host_id: b.handle().home_id().to_string(), ..remote.clone() };
    let twice = pb::ThreadWaitRequest {
        targets: vec![remote.clone(), by_id.clone()],
        timeout_ms: Some(0),
        cursors: Default::default(),
    };
    let err = a.client().threads().thread_wait(twice).await.expect_err("one thread named twice");
    assert_eq!(err.code(), Code::InvalidArgument, "{}", err.message());
    assert!(err.message().contains("appears twice"), "{}", err.message());
    let other = b.thread("echo", None).await;
    let two = pb::ThreadWaitRequest {
        targets: vec![remote.clone(), pb::ThreadRef { session_id: other.id.clone(), ..by_id.clone() }],
        timeout_ms: Some(0),
        cursors: Default::default(),
    };
    let answer = a.client().threads().thread_wait(two).await.expect("two far threads").into_inner();
    let named: Vec<String> =
        answer.results.iter().map(|r| pb::format_ref(r.target.as_ref().expect("target"))).collect();
    assert_eq!(named, [format!("bee/{t}"), format!("{}/{}", by_id.host_id, other.id)]);
}

/// Turning a bridge's inbound access off refuses its calls and holds back what it already
/// brought, deleting nothing; turned back on, the source's retries and the held message are
/// delivered, each once.
#[tokio::test]
async fn disabling_inbound_access_holds_delivery_without_deleting_anything() {
    let (a, b) = (open_home().await, open_home().await);
    let t = b.thread("echo", None).await;
    let bridge = a.bridge_to(&b, "read,send").await;
    // Queued before the switch: a send without `wake` waits for a turn started otherwise.
    let queued = a.send(remote_send("bee", &t.id, "held", "k1")).await;
    assert_eq!(queued.expect("send").status(), pb::SendStatus::Pending);

    let disabled = set_inbound(&b, &bridge.id, false).await;
    // The answer counts what the peer brought that waits here, as `kiki bridge list` does.
    assert_eq!((disabled.state().word().as_str(), disabled.pending), ("disabled", 1));
    let err = a.client().threads().thread_list(list_via("bee")).await.expect_err("refused");
    assert_eq!(err.code(), Code::Unavailable);
    assert!(err.message().contains("bridge_disabled"), "{}", err.message());
    let retried = a.send(remote_send("bee", &t.id, "later", "k2")).await.expect("answered");
    assert_eq!(retried.status(), pb::SendStatus::Pending, "not final: the source keeps it");
    b.say(&t.id, "the user speaks").await.expect("say");
    let turns = b.wait_turns(&t.id, 1).await;
    assert_eq!(turns[0].output, "echo: the user speaks", "the bridge's message is held back");
    let pending: Vec<String> = receipts(&a, "bee")
        .await
        .into_iter()
        .map(|r| format!("{}:{}", r.idempotency_key, r.status().word()))
        .collect();
    assert_eq!(pending, ["k1:accepted", "k2:pending"]);

    assert_eq!(set_inbound(&b, &bridge.id, true).await.state().word(), "active");
    a.client().threads().thread_list(list_via("bee")).await.expect("reads again");
    b.say(&t.id, "again").await.expect("say");
    let turns = b.wait_turns(&t.id, 2).await;
    assert!(
        turns[1].output.starts_with("echo: held\n"),
        "the held message comes first: {:?}",
        turns[1].output
    );
    // The source's retry of k2 gets through once the bridge is back on.
    let started = std::time::Instant::now();
    while receipts(&a, "bee").await.iter().any(|r| r.status().word() == "pending") {
        assert!(started.elapsed() < std::time::Duration::from_secs(10), "k2 never got through");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    b.say(&t.id, "third").await.expect("say");
    b.wait_turns(&t.id, 3).await;
    // Followed up at the source: both end delivered there too.
    kiki_tests::eventually("the source's receipts to say delivered", || async {
        receipts(&a, "bee").await.iter().all(|r| r.status().word() == "delivered").then_some(())
    })
    .await;
    let contents: Vec<String> = b
        .all_turns(&t.id)
        .await
        .iter()
        .flat_map(|t| t.output.lines().map(str::to_string).collect::<Vec<_>>())
        .collect();
    for message in ["echo: held", "echo: later"] {
        assert_eq!(contents.iter().filter(|c| *c == message).count(), 1, "{message} once: {contents:?}");
    }
    // The target's receipts tell each message's story once: the refusals of k2's retries
    // while the bridge was off were not its fate, and left no `rejected` receipt.
    let mut story: Vec<String> = receipts(&b, a.handle().home_id())
        .await
        .into_iter()
        .map(|r| format!("{}:{}", r.idempotency_key, r.status().word()))
        .collect();
    story.sort();
    assert_eq!(story, ["k1:accepted", "k1:delivered", "k2:accepted", "k2:delivered"]);
}

/// A target that answers "not now" (its inbound access is off) is retried with pauses that
/// grow with the message's age, not every 250 ms as if each answer reset the backoff.
#[tokio::test]
async fn a_refusal_for_now_backs_off_like_an_outage() {
    let (a, b) = (open_home().await, open_home().await);
    let t = b.thread("echo", None).await;
    let bridge = a.bridge_to(&b, "send").await;
    set_inbound(&b, &bridge.id, false).await;
    let sent = a.send(remote_send("bee", &t.id, "later", "k")).await;
    assert_eq!(sent.expect("answered").status(), pb::SendStatus::Pending);
    tokio::time::sleep(std::time::Duration::from_secs(4)).await;
    // Doubling from 250 ms: attempts near 0, 0.25, 0.5, 1, 2 and 4 s; every 250 ms would be ~16.
    let attempts = receipts(&a, "bee").await[0].attempts;
    assert!((3..=8).contains(&attempts), "{attempts} attempts in 4 s");
}

#[tokio::test]
async fn only_an_approved_inbound_bridge_can_be_turned_off() {
    let (a, b) = (open_home().await, open_home().await);
    let bridge = a.bridge_to(&b, "read").await;
    let on_source = pb::BridgeSetInboundRequest { bridge: "bee".into(), enabled: false };
    let err = a.client().bridges().bridge_set_inbound(on_source).await.expect_err("outbound");
    assert_eq!(err.code(), Code::FailedPrecondition);
    let unknown = pb::BridgeSetInboundRequest { bridge: "nope".into(), enabled: false };
    assert_eq!(
        b.client().bridges().bridge_set_inbound(unknown).await.expect_err("unknown").code(),
        Code::NotFound
    );
    b.client()
        .bridges()
        .bridge_revoke(pb::BridgeRevokeRequest { bridge: bridge.id.clone() })
        .await
        .expect("revoke");
    let revoked = pb::BridgeSetInboundRequest { bridge: bridge.id, enabled: true };
    let err = b.client().bridges().bridge_set_inbound(revoked).await.expect_err("revoked stays revoked");
    assert_eq!(err.code(), Code::FailedPrecondition);
}
