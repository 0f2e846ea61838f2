//! Threads as long-lived agent sessions: the `claude` executor against a scripted Claude
//! Code (tests/agents/claude) that speaks the real CLI's headless stream-json, with its
//! sessions kept on disk as the real one keeps them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use kiki_daemon::config::{ExecutorKind, ProfileConfig};
use kiki_proto as pb;
use kiki_proto::Word;
use kiki_tests::sessions::turn_of;
use kiki_tests::{TestHome, TestHomeBuilder};

/// A `claude` profile running the scripted Claude Code, its sessions in `state`.
fn claude_profile(state: &Path, budget: Option<f64>) -> ProfileConfig {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("agents/claude");
    ProfileConfig {
        executor: ExecutorKind::Claude,
        command: vec![
            "env".into(),
            format!("FAKE_CLAUDE_STATE={}", state.display()),
            script.display().to_string(),
        ],
        default: false,
        enabled: true,
        thread_communication: None,
        allowed_tools: vec!["mcp__kiki__ThreadSend".into()],
        max_cost_usd: budget,
    }
}

fn with_claude(state: &Path, budget: Option<f64>) -> TestHomeBuilder {
    let profile = claude_profile(state, budget);
    TestHome::builder().config(move |c| {
        c.profiles.insert("claude".into(), profile);
    })
}

#[tokio::test]
async fn a_thread_is_one_agent_session_across_turns_and_restarts() {
    let state = tempfile::tempdir().expect("state");
    let mut home = with_claude(state.path(), None).start().await;
    let thread = home.session_thread("claude", "one", None).await.expect("create");
    let first = home.wait_turns(&thread, 1).await;
    assert_eq!(first[0].status, pb::TurnStatus::Completed as i32, "{:?}", first[0]);
    let (n, session) = turn_of(&first[0].output);
    assert_eq!(n, 1);
    let usage = first[0].usage.expect("usage recorded");
    assert!(usage.input_tokens > 0 && usage.output_tokens > 0, "{usage:?}");
    assert!((usage.cost_usd - 0.01).abs() < 1e-9, "{usage:?}");

    home.say(&thread, "two").await.expect("say");
    let turns = home.wait_turns(&thread, 2).await;
    assert_eq!(turn_of(&turns[1].output), (2, session.clone()), "the same session, resumed");

    home.restart().await;
    home.say(&thread, "three").await.expect("say");
    let turns = home.wait_turns(&thread, 3).await;
    assert_eq!(turn_of(&turns[2].output), (3, session.clone()), "resumed after kikid restarted");

    // Another thread continues that session where it stands.
    let other = home.session_thread("claude", "four", Some(&session)).await.expect("create");
    let turns = home.wait_turns(&other, 1).await;
    assert_eq!(turn_of(&turns[0].output), (4, session));
}

#[tokio::test]
async fn a_lost_session_fails_the_turn_with_attention_never_a_fresh_start() {
    let state = tempfile::tempdir().expect("state");
    let home = with_claude(state.path(), None).start().await;
    let thread = home.session_thread("claude", "hello", Some("no-such-session")).await.expect("create");
    let turns = home.wait_turns(&thread, 1).await;
    assert_eq!(turns[0].status, pb::TurnStatus::Failed as i32);
    assert!(
        turns[0].error.contains("no-such-session is gone")
            && turns[0].error.contains("No conversation found"),
        "{}",
        turns[0].error
    );
    let reasons = kiki_tests::eventually("the lost session's attention event", || async {
        Some(home.attention(&thread).await).filter(|r| !r.is_empty())
    })
    .await;
    assert!(reasons.iter().any(|r| r.contains("is gone")), "{reasons:?}");
    // The next turn does not quietly start afresh either, and the message it took is
    // undeliverable (no agent saw it), not counted delivered.
    let send = pb::ThreadSendRequest {
        target: Some(kiki_tests::local(&thread)),
        content: "again".into(),
        idempotency_key: "lost-1".into(),
        ..Default::default()
    };
    home.client().threads().thread_send(send.clone()).await.expect("send");
    let turns = home.wait_turns(&thread, 2).await;
    assert_eq!(turns[1].status, pb::TurnStatus::Failed as i32, "{:?}", turns[1]);
    let stands = kiki_tests::eventually("the message to be undeliverable", || async {
        let replay = home.client().threads().thread_send(send.clone()).await.expect("replay").into_inner();
        (replay.status == pb::SendStatus::Undeliverable as i32).then_some(replay)
    })
    .await;
    assert_eq!(stands.reason, "agent_session_lost");
    assert_eq!(std::fs::read_dir(state.path()).expect("state").count(), 0, "no session was made");

    // A session id goes on the agent's command line: never one that reads as an option.
    let option = home
        .session_thread("claude", "x", Some("--dangerously-skip-permissions"))
        .await
        .expect_err("an option");
    assert!(option.message().contains("resume_agent_session"), "{}", option.message());
    // Only a profile that keeps sessions takes one.
    let refused = home
        .create(pb::ThreadCreateRequest {
            cwd: Some(home.workdir("echo").display().to_string()),
            profile: Some("echo".into()),
            prompt: None,
            title: None,
            resume_agent_session: Some("s".into()),
        })
        .await
        .expect_err("echo keeps no session");
    assert!(refused.message().contains("resume_agent_session"), "{}", refused.message());
}

#[tokio::test]
async fn errors_and_crashes_fail_the_turn_and_keep_the_session() {
    let state = tempfile::tempdir().expect("state");
    let home = with_claude(state.path(), None).start().await;
    let thread = home.session_thread("claude", "start", None).await.expect("create");
    let (_, session) = turn_of(&home.wait_turns(&thread, 1).await[0].output);
    home.say(&thread, "fail").await.expect("say");
    let turns = home.wait_turns(&thread, 2).await;
    assert_eq!(turns[1].status, pb::TurnStatus::Failed as i32);
    assert!(turns[1].error.contains("error_during_execution"), "{}", turns[1].error);
    home.say(&thread, "crash").await.expect("say");
    let turns = home.wait_turns(&thread, 3).await;
    assert_eq!(turns[2].status, pb::TurnStatus::Failed as i32);
    assert!(turns[2].error.contains("status 3"), "{}", turns[2].error);
    assert!(
        turns[2].output.starts_with("turn 3 of"),
        "what it said before it crashed: {:?}",
        turns[2].output
    );
    home.say(&thread, "on").await.expect("say");
    let turns = home.wait_turns(&thread, 4).await;
    assert_eq!(turn_of(&turns[3].output), (4, session), "still the same session");
}

#[tokio::test]
async fn a_spent_budget_pauses_the_thread_with_attention() {
    let state = tempfile::tempdir().expect("state");
    let home = with_claude(state.path(), Some(0.015)).start().await;
    let thread = home.session_thread("claude", "one", None).await.expect("create");
    home.wait_turns(&thread, 1).await;
    assert!(home.attention(&thread).await.is_empty(), "$0.01 of $0.015");
    home.say(&thread, "two").await.expect("say");
    home.wait_turns(&thread, 2).await;
    let reasons = kiki_tests::eventually("the budget's attention event", || async {
        Some(home.attention(&thread).await).filter(|r| !r.is_empty())
    })
    .await;
    assert!(reasons[0].contains("spent $0.0200 of its $0.015 budget"), "{reasons:?}");
    // The owner's input is queued, and the answer says that no turn started, and why.
    let said = home.say(&thread, "three").await.expect("say");
    assert!(!said.turn_started, "no turn starts on a spent budget: {said:?}");
    assert!(
        said.reason.contains("no turn started") && said.reason.contains("spent $0.0200 of its $0.015 budget"),
        "{said:?}"
    );
    // Neither does a message (whose send would start a turn of an idle thread at once).
    let send = pb::ThreadSendRequest {
        target: Some(kiki_tests::local(&thread)),
        content: "four".into(),
        idempotency_key: "budget-1".into(),
        ..Default::default()
    };
    let sent = home.client().threads().thread_send(send).await.expect("send").into_inner();
    assert_eq!(sent.status, pb::SendStatus::Pending as i32);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(home.all_turns(&thread).await.len(), 2, "no turn starts on a spent budget");
    let record = home.thread_record(&thread).await;
    assert_eq!(record.state, pb::ThreadState::Idle as i32, "its input waits");
}

/// Two agents that answer every message with a message of their own wake each other up to
/// `[threads] max_agent_wakes` times; then their messages wait without waking, the woken
/// thread gets an `attention` event, and input from the owner lets them go on.
#[tokio::test]
async fn two_agents_thanking_each_other_stop_at_the_cap_until_the_owner_speaks() {
    let kiki = kiki_tests::binaries::binary("kiki");
    // Answers the last message's sender, or else the first thread named in its input.
    let polite = format!(
        r#"input=$(cat)
target=$(printf '%s\n' "$input" | sed -n 's/^\[kiki message [^ ]* from \(th_[0-9a-z]*\)\]$/\1/p' | tail -1)
[ -n "$target" ] || target=$(printf '%s\n' "$input" | grep -o 'th_[0-9a-z]*' | head -1)
{kiki} thread send "$target" --key "k$(date +%s%N)" --content thanks > /dev/null && echo "thanked $target""#,
        kiki = kiki.display()
    );
    let port = kiki_tests::binaries::free_tcp_port();
    let home = TestHome::builder()
        .shell_profile("polite", &polite)
        .config(|c| {
            c.thread_communication.enabled = Some(true);
            c.threads.max_agent_wakes = 3;
            c.metrics.listen = Some(std::net::SocketAddr::from(([127, 0, 0, 1], port)));
        })
        .start()
        .await;
    let b = home.thread("polite", None).await.id;
    let a = home.thread("polite", Some(&format!("say thanks to {b}"))).await.id;
    // a→b (1), b→a (2), a→b (3), b→a: the fourth is held; a is told.
    let reasons = kiki_tests::eventually("the loop guard's attention event", || async {
        Some(home.attention(&a).await).filter(|r| !r.is_empty())
    })
    .await;
    assert!(reasons[0].contains("woken each other 3 times") && reasons[0].contains(&b), "{reasons:?}");
    // b's second turn ends once its send answers `pending` (held, it wakes nobody).
    home.wait_turns(&b, 2).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(home.all_turns(&a).await.len(), 2, "a's owner started one, b woke it once");
    assert_eq!(home.all_turns(&b).await.len(), 2, "and no more");
    let metrics = tokio::task::spawn_blocking(move || kiki_tests::scrape(port)).await.expect("scrape");
    assert_eq!(kiki_tests::metric(&metrics, "kiki_loop_guard_holds_total"), 1.0, "{metrics}");
    // The owner speaks to a: the held message goes in with it, and b is woken again.
    home.say(&a, "go on").await.expect("say");
    let turns = home.wait_turns(&a, 3).await;
    assert!(turns[2].input.contains("go on") && turns[2].input.contains("thanks"), "{:?}", turns[2].input);
    home.wait_turns(&b, 3).await;
}

/// Claude Code's permission prompts reach the owner as attention events naming a request;
/// the owner's answer (or none in time) is what the agent is told.
#[tokio::test]
async fn an_agents_permission_request_is_answered_by_the_owner_or_denied_in_time() {
    let state = tempfile::tempdir().expect("state");
    // The home's clock moves when the test says: the unanswered request's timeout passes
    // without waiting for it.
    let clock = kiki_tests::manual_clock();
    let home = with_claude(state.path(), None)
        .config(|c| c.threads.permission_timeout = Duration::from_secs(2))
        .clock(&clock)
        .start()
        .await;
    let thread = home.session_thread("claude", "use Bash", None).await.expect("create");
    let bash = home.permission_request(&thread, &[]).await;
    let waiting = home.client().home().attention_list(pb::AttentionListRequest {}).await.expect("list");
    let waiting = waiting.into_inner().open;
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    assert_eq!(waiting[0].event.as_ref().expect("event").request_id, bash);
    assert!(waiting[0].next.contains(&format!("kiki approve {bash}")), "{waiting:?}");
    let answered = home.decide(&bash, true, "").await.expect("approve");
    let waiting = home.client().home().attention_list(pb::AttentionListRequest {}).await.expect("list");
    assert!(waiting.into_inner().open.is_empty(), "answered");
    assert_eq!((answered.status().word().as_str(), answered.tool.as_str()), ("allowed", "Bash"));
    let turns = home.wait_turns(&thread, 1).await;
    assert!(turns[0].output.ends_with("Bash: allow"), "{:?}", turns[0].output);

    home.say(&thread, "use Write").await.expect("say");
    let write = home.permission_request(&thread, &[&bash]).await;
    home.decide(&write, false, "not on this branch").await.expect("deny");
    // The same answer again stands; another is refused, saying how it was answered.
    let again = home.decide(&write, false, "").await.expect("the same answer again");
    assert_eq!(again.status().word(), "denied");
    let turned = home.decide(&write, true, "").await.expect_err("an approval after a denial");
    assert_eq!(turned.code(), tonic::Code::FailedPrecondition, "{turned:?}");
    assert!(
        turned.message().contains("already answered: denied (not on this branch)"),
        "{}",
        turned.message()
    );
    let turns = home.wait_turns(&thread, 2).await;
    assert!(
        turns[1].output.ends_with(&format!("Write: deny not on this branch ({write})")),
        "{:?}",
        turns[1].output
    );

    home.say(&thread, "use Edit").await.expect("say");
    let edit = home.permission_request(&thread, &[&bash, &write]).await;
    clock.advance(Duration::from_millis(1_999)).await;
    let open = home.client().home().attention_list(pb::AttentionListRequest {}).await.expect("list");
    assert_eq!(open.into_inner().open.len(), 1, "still waiting just before its timeout");
    clock.advance(Duration::from_millis(1)).await;
    let turns = home.wait_turns(&thread, 3).await;
    assert!(turns[2].output.contains("Edit: deny nobody answered within 2s"), "{:?}", turns[2].output);
    // A late answer changes nothing, and says so; an unknown request is not found.
    let late = home.decide(&edit, true, "").await.expect_err("late");
    assert_eq!(late.code(), tonic::Code::FailedPrecondition, "{late:?}");
    assert!(late.message().contains("already answered: expired (nobody answered within 2s"), "{late:?}");
    let unknown = home.decide("perm_nope", true, "").await.expect_err("unknown");
    assert_eq!(unknown.code(), tonic::Code::NotFound);
}

/// A team home's replicas hear each other's changes: a claude turn started through one
/// replica asks a permission, and a ThreadWait parked on the other returns with the
/// request; answered through the other, the agent is told, and a wait there returns when
/// the turn ends. The next turn's progress is followed through the other as it happens.
#[tokio::test]
async fn a_replica_hears_the_others_turn_its_permission_requests_and_progress() {
    let state = tempfile::tempdir().expect("state");
    let database = kiki_tests::postgres::TestDatabase::create().await;
    let url = database.url_with_password();
    let r1 = with_claude(state.path(), None).config(|c| c.store.url = Some(url)).start().await;
    let r2 = with_claude(state.path(), None).replica_of(&r1).start().await;
    let wait_on_r2 = |cursor: String, thread: String| {
        let mut parked = r2.client().threads();
        tokio::spawn(async move {
            let request = pb::ThreadWaitRequest {
                targets: vec![kiki_tests::local(&thread)],
                timeout_ms: Some(30_000),
                cursors: [(thread.clone(), cursor)].into_iter().collect(),
            };
            parked.thread_wait(request).await.expect("wait").into_inner().results.remove(0)
        })
    };
    let thread = r1.session_thread("claude", "use Bash", None).await.expect("create");
    let now = pb::ThreadWaitRequest {
        targets: vec![kiki_tests::local(&thread)],
        timeout_ms: Some(0),
        cursors: Default::default(),
    };
    let cursor =
        r2.client().threads().thread_wait(now).await.expect("cursor").into_inner().results[0].cursor.clone();
    let asked = wait_on_r2(cursor, thread.clone()).await.expect("waiter");
    let request = asked.events.iter().map(|e| e.request_id.clone()).find(|id| !id.is_empty());
    let request = request.expect("the wait on r2 returned with the permission request");

    let ended = wait_on_r2(asked.cursor, thread.clone());
    let answered = r2.decide(&request, true, "").await.expect("approved through r2");
    assert_eq!(answered.status().word(), "allowed");
    let turns = r1.wait_turns(&thread, 1).await;
    assert!(turns[0].output.ends_with("Bash: allow"), "the agent was told: {:?}", turns[0].output);
    let mut ended = ended.await.expect("waiter");
    let terminal =
        |result: &pb::WaitResult| result.events.iter().any(|e| e.kind == pb::EventKind::Terminal as i32);
    for _ in 0..5 {
        if terminal(&ended) || ended.events.is_empty() {
            break;
        }
        ended = wait_on_r2(ended.cursor, thread.clone()).await.expect("waiter");
    }
    assert!(terminal(&ended), "a wait on r2 returned when the turn ended: {ended:?}");

    // The next turn, started through r1, followed through r2 as it happens.
    r1.say(&thread, "slow").await.expect("say");
    let follow = pb::ThreadFollowRequest {
        target: Some(kiki_tests::local(&thread)),
        turn_id: String::new(),
        wait_ms: Some(10_000),
    };
    let mut progress = r2.client().threads().thread_follow(follow).await.expect("follow").into_inner();
    let mut kinds = Vec::new();
    while let Some(part) = progress.message().await.expect("part") {
        kinds.push(part.kind().word());
    }
    assert_eq!(kinds, ["text", "tool", "tool_result", "text", "end"]);
}

/// A running turn's progress is followed as it happens — the agent's text, its tool call
/// and the result — then its end; the parts stay with the turn and can be followed again.
#[tokio::test]
async fn a_running_turn_is_followed_as_it_happens_and_kept_with_the_turn() {
    let state = tempfile::tempdir().expect("state");
    let home = with_claude(state.path(), None).start().await;
    let thread = home.session_thread("claude", "slow", None).await.expect("create");
    let follow = |turn_id: &str| pb::ThreadFollowRequest {
        target: Some(kiki_tests::local(&thread)),
        turn_id: turn_id.into(),
        wait_ms: Some(10_000),
    };
    let mut progress = home.client().threads().thread_follow(follow("")).await.expect("follow").into_inner();
    let mut parts = Vec::new();
    let mut running_at_first_part = None;
    while let Some(part) = progress.message().await.expect("part") {
        if running_at_first_part.is_none() {
            running_at_first_part =
                Some(home.thread_record(&thread).await.state == pb::ThreadState::Running as i32);
        }
        parts.push(part);
    }
    assert_eq!(running_at_first_part, Some(true), "seen while the turn ran");
    let kinds: Vec<String> = parts.iter().map(|p| p.kind().word()).collect();
    assert_eq!(kinds, ["text", "tool", "tool_result", "text", "end"], "{parts:?}");
    assert!(parts[1].text.starts_with("Bash") && parts[1].text.contains("make"), "{:?}", parts[1]);
    assert_eq!((parts[2].text.as_str(), parts[3].text.as_str()), ("built", "done building"));
    assert_eq!(parts[4].text, "completed");
    // Kept with the turn: followed again after it ended, the same parts.
    let turn_id = parts[0].turn_id.clone();
    let mut again =
        home.client().threads().thread_follow(follow(&turn_id)).await.expect("follow").into_inner();
    let mut replayed = Vec::new();
    while let Some(part) = again.message().await.expect("part") {
        replayed.push((part.kind().word(), part.text));
    }
    let first: Vec<(String, String)> = parts.iter().map(|p| (p.kind().word(), p.text.clone())).collect();
    assert_eq!(replayed, first);
}

/// Once the agent has made `marker` (it works on its turn).
async fn started(marker: &Path) {
    kiki_tests::eventually("the agent at work", || async { marker.exists().then_some(()) }).await;
}

/// `kiki thread stop`: an `exec` turn's process group gets SIGTERM and the turn ends
/// `cancelled` (ThreadWait's `terminal` event says so); input queued behind it waits until
/// new input starts the next turn, which takes all of it. An idle thread (an `echo` one
/// whose turn is over) has nothing to stop.
#[tokio::test]
async fn the_owner_stops_a_running_exec_turn_and_the_queue_waits() {
    let script = r#"input=$(cat); printf '%s\n' "$input"; case "$input" in *sleep*) : > sleeping; exec sleep 300;; esac"#;
    let home = TestHome::builder().shell_profile("sleepy", script).start().await;
    let thread = home.thread("sleepy", Some("sleep")).await.id;
    started(&home.workdir("default").join("sleeping")).await;
    let said = home.say(&thread, "two").await.expect("say");
    assert!(!said.turn_started, "queued behind the running turn");

    let started = std::time::Instant::now();
    let stopped = home.stop(&thread).await.expect("stop");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "SIGTERM ends sleep at once: {:?}",
        started.elapsed()
    );
    assert_eq!(stopped.turn_status, pb::TurnStatus::Cancelled as i32, "{stopped:?}");
    let turns = home.all_turns(&thread).await;
    assert_eq!(turns.len(), 1);
    assert_eq!(
        (turns[0].id.as_str(), turns[0].status),
        (stopped.turn_id.as_str(), pb::TurnStatus::Cancelled as i32)
    );
    assert!(turns[0].error.starts_with("stopped by its owner (kiki thread stop): "), "{}", turns[0].error);
    assert_eq!(turns[0].output, "sleep\n", "what it said before it was stopped");
    let terminal: Vec<pb::Event> =
        home.events(&thread).await.into_iter().filter(|e| e.kind == pb::EventKind::Terminal as i32).collect();
    assert_eq!(terminal.len(), 1, "{terminal:?}");
    assert_eq!(terminal[0].turn_status, pb::TurnStatus::Cancelled as i32, "{terminal:?}");

    // The queued input waits: no turn starts by itself.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(home.all_turns(&thread).await.len(), 1, "the queue waits after a stop");
    assert_eq!(home.thread_record(&thread).await.state, pb::ThreadState::Idle as i32);
    let idle = home.stop(&thread).await.expect_err("nothing to stop");
    assert_eq!(idle.code(), tonic::Code::FailedPrecondition, "{idle:?}");
    assert!(idle.message().contains("no running turn"), "{idle:?}");

    // New input starts the next turn, which takes what waited too.
    assert!(home.say(&thread, "three").await.expect("say").turn_started);
    let turns = home.wait_turns(&thread, 2).await;
    assert_eq!(turns[1].status, pb::TurnStatus::Completed as i32, "{:?}", turns[1]);
    assert_eq!(turns[1].output, "two\n\nthree\n");

    let echo = home.thread("echo", Some("hi")).await.id;
    home.wait_turns(&echo, 1).await;
    let idle = home.stop(&echo).await.expect_err("an ended echo turn");
    assert_eq!(idle.code(), tonic::Code::FailedPrecondition, "{idle:?}");
}

/// A `claude` turn stopped mid-way (its process group gets SIGTERM) ends `cancelled` with
/// what Claude Code said so far, and its session goes on at the next turn.
#[tokio::test]
async fn a_stopped_claude_turn_keeps_its_session() {
    let state = tempfile::tempdir().expect("state");
    let home = with_claude(state.path(), None).start().await;
    let thread = home.session_thread("claude", "one", None).await.expect("create");
    let (_, session) = turn_of(&home.wait_turns(&thread, 1).await[0].output);
    home.say(&thread, "hold").await.expect("say");
    // Stopped once it works on the prompt (it keeps each prompt with its session).
    let history = state.path().join(&session);
    kiki_tests::eventually("Claude Code working on the prompt", || async {
        std::fs::read_to_string(&history).unwrap_or_default().contains("hold").then_some(())
    })
    .await;
    let stopped = home.stop(&thread).await.expect("stop");
    assert_eq!(stopped.turn_status, pb::TurnStatus::Cancelled as i32, "{stopped:?}");
    let turns = home.all_turns(&thread).await;
    assert!(turns[1].error.starts_with("stopped by its owner (kiki thread stop): "), "{}", turns[1].error);
    assert_eq!(home.thread_record(&thread).await.agent_session, session);
    home.say(&thread, "three").await.expect("say");
    let turns = home.wait_turns(&thread, 3).await;
    assert_eq!(turn_of(&turns[2].output), (3, session), "the same session, resumed");
}

/// An agent that ignores SIGTERM is killed (SIGKILL) 5 s later, and the turn still ends
/// `cancelled`.
#[tokio::test]
async fn an_agent_that_ignores_sigterm_is_killed() {
    let script = "trap '' TERM; : > stubborn; cat >/dev/null; sleep 300";
    let home = TestHome::builder().shell_profile("stubborn", script).start().await;
    let thread = home.thread("stubborn", Some("work")).await.id;
    started(&home.workdir("default").join("stubborn")).await;
    let asked = std::time::Instant::now();
    let stopped = home.stop(&thread).await.expect("stop");
    let took = asked.elapsed();
    assert!(took >= Duration::from_millis(4500) && took < Duration::from_secs(15), "{took:?}");
    assert_eq!(stopped.turn_status, pb::TurnStatus::Cancelled as i32, "{stopped:?}");
    let turns = home.all_turns(&thread).await;
    assert!(turns[0].error.contains("killed"), "{}", turns[0].error);
}

/// Stopping a turn is the owner's: a turn's token is refused (`kiki thread stop` run by the
/// agent itself), and the turn goes on.
#[tokio::test]
async fn an_agent_cannot_stop_a_turn() {
    let kiki = kiki_tests::binaries::binary("kiki");
    let script = format!(r#"cat >/dev/null; {} --json thread stop "$KIKI_THREAD_ID"; true"#, kiki.display());
    let home = TestHome::builder().shell_profile("self-stopper", &script).start().await;
    let thread = home.thread("self-stopper", Some("stop yourself")).await.id;
    let turns = home.wait_turns(&thread, 1).await;
    assert_eq!(turns[0].status, pb::TurnStatus::Completed as i32, "{:?}", turns[0]);
    let answer: serde_json::Value = serde_json::from_str(&turns[0].output).expect("kiki's JSON");
    assert_eq!(answer["error"]["code"], "permission_denied", "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("thread stop is an owner action"), "{answer}");
}
