//! Switches: communication off refuses a thread's agent every peer tool and says which switch
//! decided; turned off, a target holds accepted messages back until it is on again; a closed
//! agent creates closed threads.

use std::time::Duration;

use kiki_proto as pb;
use kiki_tests::{TestHome, binaries::binary, eventually, local};
use tonic::Code;

use super::{send, talking_home};

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
