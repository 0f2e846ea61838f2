//! Threads as Codex and ACP sessions: the `codex` executor against a scripted Codex
//! app-server (tests/agents/codex) and the `acp` executor against a scripted Agent Client
//! Protocol agent (tests/agents/acp), each speaking its protocol's JSON-RPC on stdio with
//! its sessions kept on disk, as the real agents keep them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use kiki_daemon::config::{ExecutorKind, ProfileConfig};
use kiki_proto as pb;
use kiki_proto::Word;
use kiki_tests::sessions::turn_of;
use kiki_tests::{TestHome, TestHomeBuilder};

#[derive(Clone, Copy, Debug, PartialEq)]
enum Agent {
    Codex,
    Acp,
}

const BOTH: [Agent; 2] = [Agent::Codex, Agent::Acp];

impl Agent {
    fn name(self) -> &'static str {
        match self {
            Self::Codex => "codex",
            Self::Acp => "acp",
        }
    }

    /// Its profile, its sessions kept in `state`; `env` adds to the script's environment.
    fn profile(self, state: &Path, env: &[&str], allowed_tools: &[&str]) -> ProfileConfig {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("agents").join(self.name());
        let state_var = match self {
            Self::Codex => "FAKE_CODEX_STATE",
            Self::Acp => "FAKE_ACP_STATE",
        };
        let mut command = vec!["env".to_string(), format!("{state_var}={}", state.display())];
        command.extend(env.iter().map(|e| e.to_string()));
        command.push(script.display().to_string());
        ProfileConfig {
            executor: match self {
                Self::Codex => ExecutorKind::Codex,
                Self::Acp => ExecutorKind::Acp,
            },
            command,
            allowed_tools: allowed_tools.iter().map(|t| t.to_string()).collect(),
            ..ProfileConfig::default()
        }
    }

    fn home(self, state: &Path) -> TestHomeBuilder {
        self.home_with(state, &[], &[])
    }

    fn home_with(self, state: &Path, env: &[&str], allowed_tools: &[&str]) -> TestHomeBuilder {
        let profile = self.profile(state, env, allowed_tools);
        TestHome::builder().config(move |c| {
            c.profiles.insert("agent".into(), profile);
        })
    }
}

#[tokio::test]
async fn a_thread_is_one_codex_or_acp_session_across_turns_and_restarts() {
    for agent in BOTH {
        let state = tempfile::tempdir().expect("state");
        let mut home = agent.home(state.path()).start().await;
        let thread = home.session_thread("agent", "one", None).await.expect("create");
        let first = home.wait_turns(&thread, 1).await;
        assert_eq!(first[0].status, pb::TurnStatus::Completed as i32, "{agent:?}: {:?}", first[0]);
        let (n, session) = turn_of(&first[0].output);
        assert_eq!(n, 1, "{agent:?}");
        assert_eq!(home.thread_record(&thread).await.agent_session, session, "ThreadRead shows it");
        if agent == Agent::Codex {
            let usage = first[0].usage.expect("Codex reports tokens");
            assert_eq!((usage.input_tokens, usage.output_tokens), (10, 5), "{usage:?}");
        }

        home.say(&thread, "two").await.expect("say");
        let turns = home.wait_turns(&thread, 2).await;
        assert_eq!(turn_of(&turns[1].output), (2, session.clone()), "{agent:?}: the same session, resumed");

        home.restart().await;
        home.say(&thread, "three").await.expect("say");
        let turns = home.wait_turns(&thread, 3).await;
        assert_eq!(turn_of(&turns[2].output), (3, session.clone()), "{agent:?}: resumed after a restart");

        let other = home.session_thread("agent", "four", Some(&session)).await.expect("create");
        let turns = home.wait_turns(&other, 1).await;
        assert_eq!(turn_of(&turns[0].output), (4, session), "{agent:?}: another thread continues it");
    }
}

#[tokio::test]
async fn a_session_the_agent_cannot_resume_fails_the_turn_with_attention() {
    let cases = [
        (Agent::Codex, &[][..], "no rollout found"),
        (Agent::Acp, &[][..], "Resource not found"),
        (Agent::Acp, &["FAKE_ACP_NO_LOAD=1"][..], "no loadSession capability"),
    ];
    for (agent, env, detail) in cases {
        let state = tempfile::tempdir().expect("state");
        let home = agent.home_with(state.path(), env, &[]).start().await;
        let thread = home.session_thread("agent", "hello", Some("gone-session")).await.expect("create");
        let turns = home.wait_turns(&thread, 1).await;
        assert_eq!(turns[0].status, pb::TurnStatus::Failed as i32, "{agent:?}");
        let error = &turns[0].error;
        assert!(error.contains("gone-session is gone") && error.contains(detail), "{agent:?}: {error}");
        assert!(turns[0].output.is_empty(), "no fresh session answered: {:?}", turns[0].output);
        // The attention event is recorded just after the turn is seen to end.
        let reasons = kiki_tests::eventually("the lost session's attention event", || async {
            Some(home.attention(&thread).await).filter(|r| !r.is_empty())
        })
        .await;
        assert!(reasons.iter().any(|r| r.contains("gone-session is gone")), "{agent:?}: {reasons:?}");
    }
}

#[tokio::test]
async fn errors_and_crashes_fail_the_turn_and_keep_the_session() {
    for agent in BOTH {
        let state = tempfile::tempdir().expect("state");
        let home = agent.home(state.path()).start().await;
        let thread = home.session_thread("agent", "start", None).await.expect("create");
        let (_, session) = turn_of(&home.wait_turns(&thread, 1).await[0].output);
        home.say(&thread, "fail").await.expect("say");
        let turns = home.wait_turns(&thread, 2).await;
        assert_eq!(turns[1].status, pb::TurnStatus::Failed as i32, "{agent:?}");
        let said = match agent {
            Agent::Codex => "Codex ended the turn failed: the model refused (scripted)",
            Agent::Acp => "the ACP agent failed the prompt: Internal error: the model failed (scripted)",
        };
        assert!(turns[1].error.contains(said), "{agent:?}: {}", turns[1].error);

        home.say(&thread, "crash").await.expect("say");
        let turns = home.wait_turns(&thread, 3).await;
        assert_eq!(turns[2].status, pb::TurnStatus::Failed as i32, "{agent:?}");
        let error = &turns[2].error;
        assert!(
            error.contains("without finishing the turn") && error.contains("status 3"),
            "{agent:?}: {error}"
        );
        assert!(turns[2].output.starts_with("turn"), "{agent:?}: what it said first: {:?}", turns[2].output);

        home.say(&thread, "on").await.expect("say");
        let turns = home.wait_turns(&thread, 4).await;
        assert_eq!(turn_of(&turns[3].output), (4, session), "{agent:?}: still the same session");
    }
    // An ACP agent's refusal is a failed turn too.
    let state = tempfile::tempdir().expect("state");
    let home = Agent::Acp.home(state.path()).start().await;
    let thread = home.session_thread("agent", "refuse", None).await.expect("create");
    let turns = home.wait_turns(&thread, 1).await;
    assert_eq!(turns[0].error, "the ACP agent refused the prompt");
}

/// A message sent to a thread whose Codex turn is running goes into that turn at once
/// (`turn/steer`) and its send answers `delivered`; no later turn takes it again. An ACP
/// agent cannot take input mid-prompt: the message waits for the next turn.
#[tokio::test]
async fn a_message_to_a_busy_thread_is_steered_into_codex_and_waits_for_acp() {
    for agent in BOTH {
        let state = tempfile::tempdir().expect("state");
        let home = agent
            .home(state.path())
            .config(|c| {
                c.thread_communication.enabled = Some(true);
                c.mailbox.delivery_wait = Duration::from_secs(20);
            })
            .start()
            .await;
        // Codex holds its turn open until something is steered in; the ACP agent works a
        // second.
        let prompt = if agent == Agent::Codex { "hold" } else { "slow" };
        let thread = home.session_thread("agent", prompt, None).await.expect("create");
        kiki_tests::eventually("the turn running", || async {
            (home.thread_record(&thread).await.state == pb::ThreadState::Running as i32).then_some(())
        })
        .await;
        let send = pb::ThreadSendRequest {
            target: Some(kiki_tests::local(&thread)),
            content: "look at the logs".into(),
            idempotency_key: "steer-1".into(),
            ..Default::default()
        };
        let sent = home.send(send).await.expect("send");
        let turns = home.wait_turns(&thread, 1).await;
        match agent {
            Agent::Codex => {
                assert_eq!(sent.status, pb::SendStatus::Delivered as i32, "delivered into the running turn");
                let output = &turns[0].output;
                assert!(
                    output.contains(&format!("steered: [kiki message {}", sent.message_id))
                        && output.ends_with("look at the logs"),
                    "{output:?}"
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
                assert_eq!(home.all_turns(&thread).await.len(), 1, "no later turn takes it again");
            }
            Agent::Acp => {
                let turns = home.wait_turns(&thread, 2).await;
                assert!(!turns[0].output.contains("look at the logs"), "{:?}", turns[0].output);
                assert!(turns[1].output.contains("look at the logs"), "the next turn: {:?}", turns[1].output);
            }
        }
    }
}

/// An ACP agent's `usage_update`s give each turn its cost (the session's cost so far, less
/// what it had cost before the prompt), and the profile's budget stops the thread once its
/// turns have cost that much.
#[tokio::test]
async fn an_acp_agents_usage_updates_count_against_its_budget() {
    let state = tempfile::tempdir().expect("state");
    let home = Agent::Acp
        .home(state.path())
        .config(|c| c.profiles.get_mut("agent").expect("the agent's profile").max_cost_usd = Some(0.015))
        .start()
        .await;
    let cost = |turn: &pb::Turn| turn.usage.expect("the turn's usage").cost_usd;
    let thread = home.session_thread("agent", "one\ncost 0.01", None).await.expect("create");
    let first = home.wait_turns(&thread, 1).await;
    assert!((cost(&first[0]) - 0.01).abs() < 1e-9, "{:?}", first[0].usage);
    assert!(home.attention(&thread).await.is_empty(), "$0.01 of $0.015");

    let said = home.say(&thread, "two\ncost 0.01").await.expect("say");
    assert!(said.turn_started, "{said:?}");
    let turns = home.wait_turns(&thread, 2).await;
    // The agent reports $0.01 when the session is loaded and $0.02 at the prompt's end.
    assert!((cost(&turns[1]) - 0.01).abs() < 1e-9, "only this turn's: {:?}", turns[1].usage);
    let reasons = kiki_tests::eventually("the budget's attention event", || async {
        Some(home.attention(&thread).await).filter(|r| !r.is_empty())
    })
    .await;
    assert!(reasons[0].contains("spent $0.0200 of its $0.015 budget"), "{reasons:?}");

    let said = home.say(&thread, "three").await.expect("say");
    assert!(!said.turn_started && said.reason.contains("budget"), "{said:?}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(home.all_turns(&thread).await.len(), 2, "no turn starts on a spent budget");
}

/// `kiki thread stop` interrupts a Codex turn (`turn/interrupt`: Codex ends it
/// `interrupted`) and cancels an ACP prompt (`session/cancel`: the agent answers
/// `cancelled`, also while it waits for a permission, which kiki answers `cancelled`). The
/// turn ends `cancelled`, and the next turn resumes the same session.
#[tokio::test]
async fn the_owner_stops_a_codex_or_acp_turn_and_its_session_goes_on() {
    let cases = [
        (Agent::Codex, "hold 5", "the Codex turn was interrupted"),
        (Agent::Acp, "hold", "the ACP agent cancelled the prompt"),
        (Agent::Acp, "use rm", "the ACP agent cancelled the prompt"),
    ];
    for (agent, prompt, said) in cases {
        let state = tempfile::tempdir().expect("state");
        let home = agent.home(state.path()).start().await;
        let thread = home.session_thread("agent", "one", None).await.expect("create");
        let (_, session) = turn_of(&home.wait_turns(&thread, 1).await[0].output);
        home.say(&thread, prompt).await.expect("say");
        home.wait_running(&thread).await;
        if prompt.starts_with("use") {
            home.permission_request(&thread, &[]).await;
        }
        let stopped = home.stop(&thread).await.expect("stop");
        assert_eq!(stopped.turn_status, pb::TurnStatus::Cancelled as i32, "{agent:?} {prompt}: {stopped:?}");
        let turns = home.all_turns(&thread).await;
        assert_eq!(turns[1].status, pb::TurnStatus::Cancelled as i32, "{agent:?} {prompt}");
        let error = &turns[1].error;
        assert!(
            error.starts_with("stopped by its owner (kiki thread stop): "),
            "{agent:?} {prompt}: {error}"
        );
        assert!(error.contains(said), "{agent:?} {prompt}: {error}");
        assert_eq!(home.thread_record(&thread).await.agent_session, session, "{agent:?}: kept");

        home.say(&thread, "on").await.expect("say");
        let turns = home.wait_turns(&thread, 3).await;
        assert_eq!(turn_of(&turns[2].output), (3, session), "{agent:?} {prompt}: the same session, resumed");
    }
}

/// Codex's approval requests and an ACP agent's `session/request_permission` reach the
/// owner as requests to approve or deny; a profile's `allowed_tools` answers up front.
#[tokio::test]
async fn an_agents_permission_requests_are_the_owners_to_answer() {
    for agent in BOTH {
        let (yes, no) = match agent {
            Agent::Codex => ("rm: accept", "rm: decline"),
            Agent::Acp => ("rm: allow-once", "rm: reject-once"),
        };
        let state = tempfile::tempdir().expect("state");
        let home = agent.home(state.path()).start().await;
        let thread = home.session_thread("agent", "use rm", None).await.expect("create");
        let first = home.permission_request(&thread, &[]).await;
        let answered = home.decide(&first, true, "").await.expect("decide");
        assert_eq!(answered.status().word(), "allowed");
        assert!(answered.tool == "command" || answered.tool == "rm", "{agent:?}: {answered:?}");
        assert_eq!(home.wait_turns(&thread, 1).await[0].output, yes, "{agent:?}");

        home.say(&thread, "use rm").await.expect("say");
        let second = home.permission_request(&thread, &[&first]).await;
        home.decide(&second, false, "").await.expect("decide");
        assert_eq!(home.wait_turns(&thread, 2).await[1].output, no, "{agent:?}");
    }
    // Allowed up front: nobody is asked.
    for (agent, tool, yes) in
        [(Agent::Codex, "command", "rm: accept"), (Agent::Acp, "execute", "rm: allow-once")]
    {
        let state = tempfile::tempdir().expect("state");
        let home = agent.home_with(state.path(), &[], &[tool]).start().await;
        let thread = home.session_thread("agent", "use rm", None).await.expect("create");
        assert_eq!(home.wait_turns(&thread, 1).await[0].output, yes, "{agent:?}");
        assert!(
            home.events(&thread).await.iter().all(|e| e.request_id.is_empty()),
            "{agent:?}: nobody asked"
        );
    }
}

/// A running turn's tool call, its result and the agent's answer are followed as they
/// happen and kept with the turn.
#[tokio::test]
async fn a_running_turn_is_followed_as_it_happens() {
    for agent in BOTH {
        let state = tempfile::tempdir().expect("state");
        let home = agent.home(state.path()).start().await;
        let thread = home.session_thread("agent", "slow", None).await.expect("create");
        let follow = pb::ThreadFollowRequest {
            target: Some(kiki_tests::local(&thread)),
            turn_id: String::new(),
            wait_ms: Some(10_000),
        };
        let mut progress = home.client().threads().thread_follow(follow).await.expect("follow").into_inner();
        let mut parts = Vec::new();
        while let Some(part) = progress.message().await.expect("part") {
            parts.push((part.kind().word(), part.text));
        }
        let kinds: Vec<&str> = parts.iter().map(|(kind, _)| kind.as_str()).collect();
        assert_eq!(kinds, ["tool", "tool_result", "text", "end"], "{agent:?}: {parts:?}");
        assert!(parts[0].1.contains("sleep 1"), "{agent:?}: {parts:?}");
        assert!(parts[1].1.contains("slept"), "{agent:?}: {parts:?}");
        assert!(parts[2].1.starts_with("turn 1 of"), "{agent:?}: {parts:?}");
    }
}

/// The agent gets kiki's MCP server, acting as the thread.
#[tokio::test]
async fn the_agent_has_kikis_tools() {
    kiki_tests::binaries::binary("kiki");
    for agent in BOTH {
        let state = tempfile::tempdir().expect("state");
        let home = agent.home(state.path()).start().await;
        let thread = home.session_thread("agent", "mcp", None).await.expect("create");
        let output = home.wait_turns(&thread, 1).await[0].output.clone();
        let tools: Vec<&str> = output.strip_prefix("tools: ").expect("tools").split(',').collect();
        for tool in ["ThreadList", "ThreadRead", "ThreadSend", "ThreadWait"] {
            assert!(tools.contains(&tool), "{agent:?}: {output}");
        }
    }
}

/// A Codex without the app-server (it refuses the subcommand) is run as `codex exec --json`,
/// its session resumed all the same.
#[tokio::test]
async fn a_codex_without_the_app_server_runs_codex_exec() {
    let state = tempfile::tempdir().expect("state");
    let home = Agent::Codex.home_with(state.path(), &["FAKE_CODEX_NO_APP_SERVER=1"], &[]).start().await;
    let thread = home.session_thread("agent", "one", None).await.expect("create");
    let first = home.wait_turns(&thread, 1).await;
    assert_eq!(first[0].status, pb::TurnStatus::Completed as i32, "{:?}", first[0]);
    let (_, session) = turn_of(&first[0].output);
    let usage = first[0].usage.expect("tokens");
    assert_eq!((usage.input_tokens, usage.output_tokens), (10, 5));
    home.say(&thread, "two").await.expect("say");
    assert_eq!(turn_of(&home.wait_turns(&thread, 2).await[1].output), (2, session));

    let lost = home.session_thread("agent", "three", Some("gone-session")).await.expect("create");
    let turns = home.wait_turns(&lost, 1).await;
    assert!(turns[0].error.contains("gone-session is gone"), "{}", turns[0].error);
}
