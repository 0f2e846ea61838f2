//! Bridges between homes in one process, over real QUIC on loopback: pairing, permissions
//! checked at the target, workspace scope, revocation, pinned identities.

use kiki_proto as pb;
use kiki_tests::TestHome;
use tonic::Code;

async fn listen_addr(home: &TestHome) -> String {
    home.client().bridges().bridge_list(pb::BridgeListRequest {}).await.expect("list").into_inner().listen
}

async fn home_id(home: &TestHome) -> String {
    home.handle().home_id().to_string()
}

fn list_via(bridge: &str) -> pb::ThreadListRequest {
    pb::ThreadListRequest { bridge: bridge.into(), ..Default::default() }
}

/// `source` asks `target` for `want`; returns the request id the target recorded.
async fn request(source: &TestHome, target: &TestHome, want: &str, name: &str) -> String {
    let request = pb::BridgeRequestRequest {
        address: listen_addr(target).await,
        want: vec![want.into()],
        expect: home_id(target).await,
        name: name.into(),
    };
    let done = source.client().bridges().bridge_request(request).await.expect("request").into_inner();
    let bridge = done.bridge.expect("bridge");
    assert_eq!((bridge.direction.as_str(), bridge.state.as_str()), ("outbound", "requested"));
    assert_eq!(bridge.peer_home_id, home_id(target).await);
    done.request_id
}

async fn approve(target: &TestHome, request_id: &str, allow: &str, workspaces: Vec<String>) -> pb::Bridge {
    let approve =
        pb::BridgeApproveRequest { request_id: request_id.into(), allow: vec![allow.into()], workspaces };
    target
        .client()
        .bridges()
        .bridge_approve(approve)
        .await
        .expect("approve")
        .into_inner()
        .bridge
        .expect("bridge")
}

#[tokio::test]
async fn pairing_then_reading_across_homes_with_read() {
    let (a, b) = (TestHome::builder().start().await, TestHome::builder().start().await);
    let t = b.thread("echo", Some("hello from b")).await;
    b.wait_turns(&t.id, 1).await;

    let request_id = request(&a, &b, "read,send", "bee").await;
    let pending =
        b.client().bridges().bridge_pending(pb::BridgePendingRequest {}).await.expect("pending").into_inner();
    assert_eq!(pending.requests.len(), 1);
    let filed = &pending.requests[0];
    assert_eq!((filed.id.as_str(), filed.peer_home_id.clone()), (request_id.as_str(), home_id(&a).await));
    assert_eq!(filed.want, ["read", "send"]);

    // Before approval the target refuses everything but the request.
    let early = a.client().threads().thread_list(list_via("bee")).await.expect_err("not approved yet");
    assert_eq!(early.code(), Code::PermissionDenied, "{early:?}");

    let granted = approve(&b, &request_id, "read", vec![]).await;
    assert_eq!((granted.direction.as_str(), granted.state.as_str()), ("inbound", "active"));
    assert_eq!(granted.permissions, ["read"], "possibly fewer than wanted");

    let listed = a.client().bridges().bridge_list(pb::BridgeListRequest {}).await.expect("list").into_inner();
    let outbound = listed.bridges.iter().find(|b| b.direction == "outbound").expect("outbound");
    assert_eq!((outbound.state.as_str(), outbound.permissions.clone()), ("active", vec!["read".to_string()]));
    assert!(!outbound.last_success.is_empty(), "health from a real round trip");

    let page = a.client().threads().thread_list(list_via("bee")).await.expect("remote list").into_inner();
    assert_eq!(page.threads.iter().map(|t| t.id.clone()).collect::<Vec<_>>(), vec![t.id.clone()]);
    assert_eq!(page.threads[0].host_id, home_id(&b).await);
    // By home id as well as by alias, and ThreadRead through HOST/SESSION.
    a.client().threads().thread_list(list_via(&home_id(&b).await)).await.expect("by home id");
    let remote =
        pb::ThreadRef { host_id: "bee".into(), workspace_id: String::new(), session_id: t.id.clone() };
    let read = pb::ThreadReadRequest { target: Some(remote), ..Default::default() };
    let turns = a.client().threads().thread_read(read).await.expect("remote read").into_inner().turns;
    assert_eq!(turns[0].output, "echo: hello from b");

    // One-way: b has no bridge to a.
    let back = b.client().threads().thread_list(list_via(&home_id(&a).await)).await.expect_err("one-way");
    assert_eq!(back.code(), Code::NotFound);
}

#[tokio::test]
async fn a_missing_permission_is_refused_at_the_target() {
    let (a, b) = (TestHome::builder().start().await, TestHome::builder().start().await);
    let request_id = request(&a, &b, "read,send", "bee").await;
    approve(&b, &request_id, "send", vec![]).await;
    let err = a.client().threads().thread_list(list_via("bee")).await.expect_err("no read");
    assert_eq!(err.code(), Code::PermissionDenied);
    assert!(err.message().contains("read"), "{}", err.message());
}

#[tokio::test]
async fn approval_cannot_grant_more_than_requested_and_is_decided_once() {
    let (a, b) = (TestHome::builder().start().await, TestHome::builder().start().await);
    let request_id = request(&a, &b, "read", "bee").await;
    let more = pb::BridgeApproveRequest {
        request_id: request_id.clone(),
        allow: vec!["read,wake".into()],
        workspaces: vec![],
    };
    let err = b.client().bridges().bridge_approve(more).await.expect_err("not requested");
    assert_eq!(err.code(), Code::InvalidArgument);
    let bogus = pb::BridgeApproveRequest {
        request_id: request_id.clone(),
        allow: vec!["fly".into()],
        workspaces: vec![],
    };
    assert_eq!(
        b.client().bridges().bridge_approve(bogus).await.expect_err("unknown").code(),
        Code::InvalidArgument
    );
    let rejected =
        b.client().bridges().bridge_reject(pb::BridgeRejectRequest { request_id: request_id.clone() }).await;
    assert_eq!(rejected.expect("reject").into_inner().request.expect("request").status, "rejected");
    let late = pb::BridgeApproveRequest { request_id, allow: vec!["read".into()], workspaces: vec![] };
    assert_eq!(
        b.client().bridges().bridge_approve(late).await.expect_err("decided").code(),
        Code::FailedPrecondition
    );
    let listed = a.client().bridges().bridge_list(pb::BridgeListRequest {}).await.expect("list").into_inner();
    assert_eq!(listed.bridges[0].state, "rejected");
}

#[tokio::test]
async fn a_wrong_expected_identity_is_refused_before_anything_is_filed() {
    let (a, b, c) = (
        TestHome::builder().start().await,
        TestHome::builder().start().await,
        TestHome::builder().start().await,
    );
    let request = pb::BridgeRequestRequest {
        address: listen_addr(&b).await,
        want: vec!["read".into()],
        expect: home_id(&c).await,
        name: "bee".into(),
    };
    let err = a.client().bridges().bridge_request(request).await.expect_err("b is not c");
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(err.message().contains(&home_id(&c).await), "{}", err.message());
    let pending = b.client().bridges().bridge_pending(pb::BridgePendingRequest {}).await.expect("pending");
    assert!(pending.into_inner().requests.is_empty());
}

#[tokio::test]
async fn revocation_takes_effect_at_once() {
    let (a, b) = (TestHome::builder().start().await, TestHome::builder().start().await);
    let request_id = request(&a, &b, "read", "bee").await;
    let bridge = approve(&b, &request_id, "read", vec![]).await;
    a.client().threads().thread_list(list_via("bee")).await.expect("works");
    let revoked =
        b.client().bridges().bridge_revoke(pb::BridgeRevokeRequest { bridge: bridge.id.clone() }).await;
    assert_eq!(revoked.expect("revoke").into_inner().bridge.expect("bridge").state, "revoked");
    let err = a.client().threads().thread_list(list_via("bee")).await.expect_err("revoked");
    assert_eq!(err.code(), Code::PermissionDenied);
    assert!(err.message().contains("bridge_revoked"), "{}", err.message());
    let listed = a.client().bridges().bridge_list(pb::BridgeListRequest {}).await.expect("list").into_inner();
    assert_eq!(listed.bridges[0].state, "revoked", "the source sees it");
}

#[tokio::test]
async fn a_workspace_scope_limits_list_and_read() {
    let (a, b) = (TestHome::builder().start().await, TestHome::builder().start().await);
    let shared = b
        .create(pb::ThreadCreateRequest {
            cwd: Some(b.workdir("shared").display().to_string()),
            ..Default::default()
        })
        .await
        .expect("create");
    let private = b
        .create(pb::ThreadCreateRequest {
            cwd: Some(b.workdir("private").display().to_string()),
            ..Default::default()
        })
        .await
        .expect("create");
    let request_id = request(&a, &b, "read", "bee").await;
    approve(&b, &request_id, "read", vec![shared.workspace_id.clone()]).await;
    let page = a.client().threads().thread_list(list_via("bee")).await.expect("list").into_inner();
    assert_eq!(page.threads.iter().map(|t| t.id.clone()).collect::<Vec<_>>(), vec![shared.id.clone()]);
    let hidden =
        pb::ThreadRef { host_id: "bee".into(), workspace_id: String::new(), session_id: private.id.clone() };
    let err = a
        .client()
        .threads()
        .thread_read(pb::ThreadReadRequest { target: Some(hidden), ..Default::default() })
        .await;
    assert_eq!(err.expect_err("outside the scope").code(), Code::NotFound);
}

#[tokio::test]
async fn unknown_peers_can_only_file_rate_limited_requests() {
    let (a, b) = (TestHome::builder().start().await, TestHome::builder().start().await);
    for _ in 0..5 {
        request(&a, &b, "read", "bee").await;
    }
    let sixth = pb::BridgeRequestRequest {
        address: listen_addr(&b).await,
        want: vec!["read".into()],
        expect: String::new(),
        name: "bee".into(),
    };
    let err = a.client().bridges().bridge_request(sixth).await.expect_err("rate limited");
    assert!(err.message().contains("rate_limited"), "{}", err.message());
    let bad = pb::BridgeRequestRequest {
        address: listen_addr(&b).await,
        want: vec!["fly".into()],
        ..Default::default()
    };
    assert_eq!(
        a.client().bridges().bridge_request(bad).await.expect_err("bad want").code(),
        Code::InvalidArgument
    );
}

#[tokio::test]
async fn waiting_across_a_bridge_needs_wait_and_wakes_nothing() {
    let (a, b) = (TestHome::builder().start().await, TestHome::builder().start().await);
    let t = b.thread("echo", None).await;
    let request_id = request(&a, &b, "read,wait", "bee").await;
    let remote =
        pb::ThreadRef { host_id: "bee".into(), workspace_id: String::new(), session_id: t.id.clone() };
    let wait = |timeout_ms: u32, cursors: std::collections::HashMap<String, String>| pb::ThreadWaitRequest {
        targets: vec![remote.clone()],
        timeout_ms: Some(timeout_ms),
        cursors,
    };
    approve(&b, &request_id, "read", vec![]).await;
    let err =
        a.client().threads().thread_wait(wait(0, Default::default())).await.expect_err("no wait permission");
    assert_eq!(err.code(), Code::PermissionDenied, "{}", err.message());

    let request_id = request(&a, &b, "read,wait", "bee").await;
    approve(&b, &request_id, "read,wait", vec![]).await;
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

    let mixed = pb::ThreadWaitRequest {
        targets: vec![remote.clone(), kiki_tests::local("th_x")],
        timeout_ms: Some(0),
        cursors: Default::default(),
    };
    let err = a.client().threads().thread_wait(mixed).await.expect_err("mixed homes");
    assert_eq!(err.code(), Code::InvalidArgument);
}
