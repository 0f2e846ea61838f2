//! The `codex` and `acp` executors against the real agent CLIs, installed from npm (pinned)
//! by tests/run-all.sh into `KIKI_AGENT_CLIS` (default `target/agent-clis`), and an old Codex
//! without the app-server into `KIKI_AGENT_CLIS_OLD` (default `target/agent-clis-old`). This machine has
//! no model account and no network, so no turn gets an answer; everything before the answer
//! runs for real: the handshake, the session opened with kiki's MCP server, the prompt, and
//! (Codex) messages steered into the running turn and the session resumed after a restart.

use std::path::PathBuf;
use std::time::Duration;

use kiki_daemon::config::{ExecutorKind, ProfileConfig};
use kiki_proto as pb;
use kiki_tests::TestHome;

/// The installed CLI `name`; missing is a failure (run-all.sh installs it), never a skip.
fn real_cli(name: &str) -> PathBuf {
    installed("KIKI_AGENT_CLIS", "agent-clis", name)
}

/// The CLI `name` installed into `$VAR`, by default `target/DEFAULT`.
fn installed(var: &str, default: &str, name: &str) -> PathBuf {
    let dir = std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target").join(default));
    let cli = dir.join("node_modules/.bin").join(name);
    assert!(
        cli.exists(),
        "{} is missing: tests/run-all.sh installs the agent CLIs (npm install --prefix {} …)",
        cli.display(),
        dir.display()
    );
    cli
}

fn profile(executor: ExecutorKind, command: Vec<String>) -> ProfileConfig {
    ProfileConfig { executor, command, ..ProfileConfig::default() }
}

/// Once the thread's turn runs with an agent session: the session. `ended` turns ended
/// before; another that ends fails the test.
async fn running_session(home: &TestHome, thread: &str, ended: usize) -> String {
    kiki_tests::eventually_within("the turn running in an agent session", Duration::from_secs(60), || async {
        let record = home.thread_record(thread).await;
        let turns = home.all_turns(thread).await;
        assert!(turns.len() <= ended, "the turn ended: {:?}", turns.last());
        (record.state == pb::ThreadState::Running as i32 && !record.agent_session.is_empty())
            .then_some(record.agent_session)
    })
    .await
}

/// A message to the thread, answered `delivered` only if the agent took it into its turn.
async fn steer(home: &TestHome, thread: &str, key: &str) -> pb::ThreadSendResponse {
    let send = pb::ThreadSendRequest {
        target: Some(kiki_tests::local(thread)),
        content: "also look at the logs".into(),
        idempotency_key: key.into(),
        ..Default::default()
    };
    home.send(send).await.expect("send")
}

fn uuid_like(id: &str) -> bool {
    let groups: Vec<usize> = id.split('-').map(str::len).collect();
    groups == [8, 4, 4, 4, 12] && id.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
}

/// `codex app-server`: the handshake, `thread/start` with kiki's MCP server in its config,
/// `turn/start`, a message steered into the running turn (`turn/steer`, so the send is
/// `delivered`), and after a kikid restart `thread/resume` of the same Codex thread.
#[tokio::test]
async fn the_real_codex_app_server_opens_resumes_and_takes_steering() {
    let codex = real_cli("codex");
    let codex_home = tempfile::tempdir().expect("codex home");
    let command = vec![
        "env".into(),
        format!("CODEX_HOME={}", codex_home.path().display()),
        codex.display().to_string(),
    ];
    let mut home = TestHome::builder()
        .config(move |c| {
            c.profiles.insert("agent".into(), profile(ExecutorKind::Codex, command));
            c.thread_communication.enabled = Some(true);
            c.mailbox.delivery_wait = Duration::from_secs(30);
        })
        .start()
        .await;
    let thread = home.session_thread("agent", "say hello", None).await.expect("create");
    let session = running_session(&home, &thread, 0).await;
    assert!(uuid_like(&session), "a Codex thread id: {session}");
    let sent = steer(&home, &thread, "steer-1").await;
    assert_eq!(sent.status, pb::SendStatus::Delivered as i32, "Codex took it into the running turn");

    // Stopped mid-turn; the next turn resumes the same Codex thread and takes steering again.
    home.restart().await;
    home.say(&thread, "go on").await.expect("say");
    assert_eq!(running_session(&home, &thread, 1).await, session, "the same Codex thread");
    let sent = steer(&home, &thread, "steer-2").await;
    assert_eq!(sent.status, pb::SendStatus::Delivered as i32, "steered into the resumed thread's turn");
    let turns = home.all_turns(&thread).await;
    assert_eq!(turns.len(), 1, "only the turn the restart interrupted ended: {turns:?}");
}

/// A Codex without the app-server (0.39.0, from before 0.44) runs as `codex exec`: kiki
/// goes by its help, which lists no `app-server` (given the word, it would take it for a
/// prompt of its interactive mode and fail without a terminal: `os error 6`), and runs
/// `codex exec --json --skip-git-repo-check …` outside a git repository (without the flag
/// it refuses to run). Without a network the turn then fails with what `codex exec` said.
#[tokio::test]
async fn a_real_codex_without_the_app_server_runs_codex_exec() {
    let codex = installed("KIKI_AGENT_CLIS_OLD", "agent-clis-old", "codex");
    let codex_home = tempfile::tempdir().expect("codex home");
    // OpenAI's API asked once: Codex's own retries of an unreachable model take half a
    // minute and show nothing more.
    std::fs::write(codex_home.path().join("config.toml"), ASK_OPENAI_ONCE).expect("codex config");
    let command = vec![
        "env".into(),
        format!("CODEX_HOME={}", codex_home.path().display()),
        codex.display().to_string(),
    ];
    let home = TestHome::builder()
        .config(move |c| {
            c.profiles.insert("agent".into(), profile(ExecutorKind::Codex, command));
        })
        .start()
        .await;
    let thread = home.session_thread("agent", "say hello", None).await.expect("create");
    let turns = kiki_tests::eventually_within("the turn's end", Duration::from_secs(120), || async {
        Some(home.all_turns(&thread).await).filter(|turns| !turns.is_empty())
    })
    .await;
    let error = &turns[0].error;
    assert_eq!(turns[0].status, pb::TurnStatus::Failed as i32, "{:?}", turns[0]);
    assert!(error.starts_with("Codex ended without finishing the turn: "), "{error}");
    assert!(
        !error.contains("os error 6") && !error.contains("app-server") && !error.contains("git-repo-check"),
        "the error is codex exec's, past its git check: {error}"
    );
    assert!(
        error.contains("api.openai.com") || error.contains("401") || error.contains("auth"),
        "it tried the model: {error}"
    );
    // `codex exec` ran the prompt: its session's rollout is in CODEX_HOME.
    let rollouts = std::fs::read_dir(codex_home.path().join("sessions")).expect("Codex's sessions").count();
    assert!(rollouts > 0, "no session recorded");
}

/// A Codex config whose model provider is OpenAI's API without retries.
const ASK_OPENAI_ONCE: &str = r#"model_provider = "openai-once"

[model_providers.openai-once]
name = "OpenAI, asked once"
base_url = "https://api.openai.com/v1"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
"#;

/// Gemini CLI over ACP (`gemini --acp`): the handshake (`initialize`), `session/new` with
/// kiki's MCP server among its `mcpServers`, and the prompt under way. (Without a real key
/// the prompt never ends: the session is what this shows.)
#[tokio::test]
async fn the_real_gemini_cli_opens_an_acp_session() {
    let gemini = real_cli("gemini");
    let user = tempfile::tempdir().expect("gemini's HOME");
    let command = vec![
        "env".into(),
        format!("HOME={}", user.path().display()),
        "GEMINI_API_KEY=not-a-real-key".into(),
        gemini.display().to_string(),
        "--acp".into(),
    ];
    let home = TestHome::builder()
        .config(move |c| {
            c.profiles.insert("agent".into(), profile(ExecutorKind::Acp, command));
        })
        .start()
        .await;
    let thread = home.session_thread("agent", "say hello", None).await.expect("create");
    let session = running_session(&home, &thread, 0).await;
    assert!(!session.is_empty() && session.len() <= 200, "an ACP session id: {session}");
}

/// Claude Code's headless mode (`claude -p --output-format stream-json`): the real CLI takes
/// the `claude` executor's arguments (kiki's MCP server in `--mcp-config`, the permission
/// prompt tool), names its session, and is resumed with it; without a login each turn ends
/// with its error. A session it does not have is a lost session.
#[tokio::test]
async fn the_real_claude_code_names_resumes_and_loses_sessions() {
    let claude = real_cli("claude");
    let user = tempfile::tempdir().expect("Claude Code's HOME");
    let command = vec!["env".into(), format!("HOME={}", user.path().display()), claude.display().to_string()];
    let home = TestHome::builder()
        .config(move |c| {
            c.profiles.insert("agent".into(), profile(ExecutorKind::Claude, command));
        })
        .start()
        .await;
    let thread = home.session_thread("agent", "say hello", None).await.expect("create");
    let first = home.wait_turns(&thread, 1).await;
    assert!(first[0].error.contains("Not logged in"), "{:?}", first[0]);
    let session = home.thread_record(&thread).await.agent_session;
    assert!(uuid_like(&session), "Claude Code's session id: {session:?}");
    home.say(&thread, "again").await.expect("say");
    let turns = home.wait_turns(&thread, 2).await;
    assert!(turns[1].error.contains("Not logged in"), "resumed, not lost: {:?}", turns[1]);
    assert_eq!(home.thread_record(&thread).await.agent_session, session);

    let request = pb::ThreadCreateRequest {
        cwd: Some(home.workdir("agent").display().to_string()),
        profile: Some("agent".into()),
        prompt: Some("hello".into()),
        resume_agent_session: Some("00000000-0000-4000-8000-000000000000".into()),
        ..Default::default()
    };
    let lost = home.create(request).await.expect("create").id;
    let turns = home.wait_turns(&lost, 1).await;
    assert!(
        turns[0].error.contains("is gone") && turns[0].error.contains("No conversation found"),
        "{:?}",
        turns[0].error
    );
}
