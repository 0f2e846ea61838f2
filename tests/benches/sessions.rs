//! The agent sessions issue's two numbers, each printed next to its floor measured in the
//! same run (never asserted). Run with a release build of the binaries:
//!
//! ```sh
//! cargo build --release --workspace --bins && cargo bench -p kiki-tests --bench sessions
//! ```
//!
//! - kiki's own cost per turn (spawn or reuse, handshake, recording) is under 20 ms beyond the
//!   agent's: turns of one `claude` thread running the scripted Claude Code
//!   (tests/agents/claude, Python), each resuming the thread's session, timed from the
//!   ThreadSay to the ThreadWait that returns the turn's `terminal` event; alternately (the
//!   order flipped every round) the bench runs the same script itself, with the argv kikid
//!   gives it (`-p --output-format stream-json --verbose --resume SESSION --mcp-config JSON
//!   --permission-prompt-tool … --allowedTools …`), the same input on stdin, the same state
//!   directory and session, so it does the same work. The difference is kiki's.
//! - a message into a running turn reaches the agent under 50 ms p50 after the send is
//!   answered: an `exec` turn running `mcp-agent KIKI` with the input `listen-timed N` starts
//!   `kiki mcp` as an MCP client declaring `claude/channel` and prints, for each pushed
//!   message, its id and the time it received it (ns since the UNIX epoch); the bench sends
//!   the N messages one at a time over gRPC (ThreadSend by the owner, answered `delivered`
//!   once the agent took the message) and notes when each send started and was answered, on
//!   the same clock. A send is answered after its message was pushed (it is counted
//!   `delivered` when `kiki mcp` hands it back as taken), so received − answered is negative:
//!   both it and received − send started are printed.
//!
//! Settings: `TURNS` (100 of each kind, after 3 unmeasured), `MESSAGES` (200, after 5
//! unmeasured).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kiki_client::Client;
use kiki_proto as pb;
use kiki_tests::binaries::{Down, binary, kiki_json};
use kiki_tests::local;
use kiki_tests::measure::{fsync_floor, ms, percentile, process_cpu_time, setting};
use tokio::io::AsyncWriteExt;

/// Rounds of turns (of each kind) before the measured ones.
const WARMUP_TURNS: usize = 3;
/// Messages pushed before the measured ones (the agent's MCP session is up and polling).
const WARMUP_MESSAGES: usize = 5;
/// `kiki mcp`'s permission prompt tool, as `daemon/src/executors/claude.rs` names it.
const PERMISSION_TOOL: &str = "mcp__kiki__PermissionPrompt";
const ALLOWED_TOOLS: &str = "mcp__kiki__ThreadSend";

/// The scripted Claude Code.
fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("agents/claude")
}

/// The home's profiles: `claude` (the scripted Claude Code, its sessions in `state`) and
/// `agent` (`mcp-agent KIKI`, an `exec` agent speaking MCP to `kiki mcp`).
fn config(state: &Path) -> String {
    let command = |argv: &[String]| argv.iter().map(|a| format!("{a:?}")).collect::<Vec<_>>().join(", ");
    let claude =
        ["env".to_string(), format!("FAKE_CLAUDE_STATE={}", state.display()), script().display().to_string()];
    let agent = [binary("mcp-agent").display().to_string(), binary("kiki").display().to_string()];
    format!(
        "[profiles.claude]\nexecutor = \"claude\"\ncommand = [{}]\nallowed_tools = [\"{ALLOWED_TOOLS}\"]\n\
         [profiles.agent]\nexecutor = \"exec\"\ncommand = [{}]\n",
        command(&claude),
        command(&agent)
    )
}

/// A started home on the release binaries.
struct Home {
    home: PathBuf,
    client: Client,
    /// kikid's pid.
    pid: u32,
}

impl Home {
    async fn up(home: &Path, config: &str) -> Self {
        std::fs::create_dir_all(home).expect("home");
        std::fs::write(home.join("config.toml"), config).expect("config");
        kiki_json(home, &["up"]);
        let client = Client::connect(&home.join("kikid.sock")).await.expect("connect");
        let status = client.home().status(pb::StatusRequest {}).await.expect("status").into_inner();
        Self { home: home.to_path_buf(), client, pid: status.pid }
    }

    fn down(self) {
        drop(self.client);
        kiki_json(&self.home, &["down"]);
    }

    /// A new thread on `profile` in `cwd`, its first turn started with `prompt`.
    async fn thread(&self, profile: &str, cwd: &Path, prompt: &str) -> String {
        let request = pb::ThreadCreateRequest {
            cwd: Some(cwd.display().to_string()),
            profile: Some(profile.into()),
            prompt: Some(prompt.into()),
            title: Some(format!("bench {profile}")),
            resume_agent_session: None,
        };
        self.client.threads().thread_create(request).await.expect("thread create").into_inner().id
    }

    /// The thread's wait cursor now (its events so far).
    async fn cursor(&self, thread: &str) -> String {
        let request =
            pb::ThreadWaitRequest { targets: vec![local(thread)], timeout_ms: Some(0), ..Default::default() };
        let waited = self.client.threads().thread_wait(request).await.expect("cursor").into_inner();
        waited.results[0].cursor.clone()
    }

    /// Waits (ThreadWait, from `cursor`, or from its first event) until a turn of `thread`
    /// ends; how it ended.
    async fn terminal(&self, thread: &str, mut cursor: Option<String>) -> pb::TurnStatus {
        loop {
            let request = pb::ThreadWaitRequest {
                targets: vec![local(thread)],
                timeout_ms: Some(20_000),
                cursors: cursor.iter().map(|c| (thread.to_string(), c.clone())).collect(),
            };
            let waited = self.client.threads().thread_wait(request).await.expect("wait").into_inner();
            assert!(!waited.timed_out, "no turn of {thread} ended within 20 s");
            let result = &waited.results[0];
            if let Some(end) = result.events.iter().find(|e| e.kind() == pb::EventKind::Terminal) {
                return end.turn_status();
            }
            cursor = Some(result.cursor.clone());
        }
    }

    /// One turn through kiki: ThreadSay to the ThreadWait that returns its `terminal` event.
    async fn turn(&self, thread: &str, prompt: &str) -> Duration {
        let cursor = self.cursor(thread).await;
        let t = Instant::now();
        let request = pb::ThreadSayRequest { target: Some(local(thread)), content: prompt.into() };
        let said = self.client.home().thread_say(request).await.expect("say").into_inner();
        let status = self.terminal(thread, Some(cursor)).await;
        let took = t.elapsed();
        assert!(said.turn_started, "the idle thread starts a turn");
        assert_eq!(status, pb::TurnStatus::Completed, "the scripted turn completes");
        took
    }

    /// The output of the thread's first turn, whole (read in segments when it is long).
    async fn first_output(&self, thread: &str) -> String {
        let turns = kiki_tests::wait_turns(&self.client, thread, 1).await;
        let turn = &turns[0];
        let Some(field) = turn.content_refs.iter().find(|r| r.field == "output") else {
            return turn.output.clone();
        };
        let (mut output, mut cursor) = (String::new(), String::new());
        loop {
            let request = pb::ThreadReadRequest {
                target: Some(local(thread)),
                content_ref: field.content_ref.clone(),
                cursor,
                ..Default::default()
            };
            let read = self.client.threads().thread_read(request).await.expect("read").into_inner();
            let segment = read.segment.expect("a segment");
            output.push_str(&segment.text);
            match segment.next {
                Some(next) => cursor = next,
                None => return output,
            }
        }
    }

    async fn state(&self, thread: &str) -> pb::ThreadState {
        let request =
            pb::ThreadReadRequest { target: Some(local(thread)), limit: Some(1), ..Default::default() };
        let read = self.client.threads().thread_read(request).await.expect("read").into_inner();
        read.thread.expect("thread").state()
    }
}

/// The scripted agent run by the bench itself, as kikid's `claude` executor runs it for a
/// turn resuming `session` (argv of `executors::claude::arguments`, the turn's environment
/// and MCP configuration, the input on stdin): how long until it exited.
struct Direct {
    argv: Vec<String>,
    cwd: PathBuf,
    env: Vec<(&'static str, String)>,
}

impl Direct {
    fn new(state: &Path, cwd: &Path, home: &Path, thread: &str, session: &str) -> Self {
        let env = vec![
            ("KIKI_HOME", home.display().to_string()),
            ("KIKI_THREAD_ID", thread.to_string()),
            ("KIKI_TOKEN", "tok_bench".to_string()),
        ];
        // `kiki` is found beside this bench's `deps/` directory, as kikid finds it beside itself.
        let mcp_config = kiki_daemon::executors::McpServer::kiki(&env).claude_config();
        let mut argv = vec![
            "env".to_string(),
            format!("FAKE_CLAUDE_STATE={}", state.display()),
            script().display().to_string(),
        ];
        argv.extend(
            ["-p", "--output-format", "stream-json", "--verbose", "--resume", session].map(String::from),
        );
        argv.extend(["--mcp-config".to_string(), mcp_config]);
        argv.extend(
            ["--permission-prompt-tool", PERMISSION_TOOL, "--allowedTools", ALLOWED_TOOLS].map(String::from),
        );
        Self { argv, cwd: cwd.to_path_buf(), env }
    }

    async fn run(&self, prompt: &str) -> Duration {
        let t = Instant::now();
        let mut child = tokio::process::Command::new(&self.argv[0])
            .args(&self.argv[1..])
            .current_dir(&self.cwd)
            .envs(self.env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("the scripted agent starts");
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(prompt.as_bytes()).await.expect("input");
        drop(stdin);
        let out = child.wait_with_output().await.expect("the scripted agent exits");
        let took = t.elapsed();
        assert!(out.status.success(), "the scripted agent failed: {}", String::from_utf8_lossy(&out.stderr));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains(r#""subtype": "success""#), "no result: {stdout}");
        took
    }
}

/// `turn N of SESSION: PROMPT` → SESSION.
fn session_of(output: &str) -> String {
    let rest = output.split_once(" of ").expect("the scripted answer").1;
    rest.split_once(": ").expect("the scripted answer").0.to_string()
}

fn now_ns() -> i128 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_nanos() as i128
}

/// p50 / p99 of signed samples in ns, in ms.
fn signed_p50_p99(samples: &mut [i128]) -> (f64, String) {
    samples.sort();
    let at = |p: f64| samples[((samples.len() as f64 - 1.0) * p).round() as usize] as f64 / 1e6;
    (at(0.5), format!("{:.3} ms / {:.3} ms", at(0.5), at(0.99)))
}

fn p50_p90(samples: &mut [Duration]) -> String {
    samples.sort();
    format!("{} / {}", ms(percentile(samples, 0.5)), ms(percentile(samples, 0.9)))
}

#[tokio::main]
async fn main() {
    let turns = setting("TURNS", 100) as usize;
    let messages = setting("MESSAGES", 200) as usize;
    let dir = tempfile::tempdir().expect("temp dir");
    let floor = fsync_floor(dir.path());
    let state = dir.path().join("claude-state");
    let cwd = dir.path().join("work");
    std::fs::create_dir_all(&cwd).expect("work dir");
    let cwd = cwd.canonicalize().expect("canonical work dir");
    let home_dir = dir.path().join("home");
    // Stops kikid if the bench panics (after `home.down()`: a no-op).
    let _down = Down(&home_dir);
    let home = Home::up(&home_dir, &config(&state)).await;

    // 1. Turns of one claude thread through kiki, and the same agent run by the bench itself.
    let thread = home.thread("claude", &cwd, "first").await;
    assert_eq!(home.terminal(&thread, None).await, pb::TurnStatus::Completed, "the first turn");
    let first = kiki_tests::read_all_turns(&home.client, &thread).await;
    let session = session_of(&first[0].output);
    let direct = Direct::new(&state, &cwd, &home.home, &thread, &session);
    let (mut through_kiki, mut by_bench, mut paired) = (Vec::new(), Vec::new(), Vec::new());
    let mut kikid_cpu = Duration::ZERO;
    for i in 0..WARMUP_TURNS + turns {
        let prompt = format!("turn {i:03} of the bench");
        let through = async {
            let cpu = process_cpu_time(home.pid);
            let took = home.turn(&thread, &prompt).await;
            (took, process_cpu_time(home.pid) - cpu)
        };
        let ((k, cpu), d) = if i % 2 == 0 {
            let k = through.await;
            (k, direct.run(&prompt).await)
        } else {
            let d = direct.run(&prompt).await;
            (through.await, d)
        };
        if i < WARMUP_TURNS {
            continue;
        }
        kikid_cpu += cpu;
        through_kiki.push(k);
        by_bench.push(d);
        paired.push(k.as_secs_f64() - d.as_secs_f64());
    }
    let recorded = kiki_tests::read_all_turns(&home.client, &thread).await;
    assert_eq!(recorded.len(), 1 + WARMUP_TURNS + turns, "every turn recorded");
    let last = recorded.last().expect("a turn");
    assert_eq!(session_of(&last.output), session, "every turn resumed the thread's session");

    // 2. Messages pushed into a running turn of `mcp-agent`.
    let total = WARMUP_MESSAGES + messages;
    let listener = home.thread("agent", &cwd, &format!("listen-timed {total}")).await;
    let t = Instant::now();
    while home.state(&listener).await != pb::ThreadState::Running {
        assert!(t.elapsed() < Duration::from_secs(20), "the listening turn runs");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut sent = Vec::with_capacity(messages);
    let mut threads = home.client.threads();
    for i in 0..total {
        let request = pb::ThreadSendRequest {
            target: Some(local(&listener)),
            content: format!("message {i:04} of the bench"),
            idempotency_key: format!("push-{i:04}"),
            ..Default::default()
        };
        let started = now_ns();
        let answer = threads.thread_send(request).await.expect("send").into_inner();
        let answered = now_ns();
        assert_eq!(answer.status(), pb::SendStatus::Delivered, "delivered into the running turn");
        if i >= WARMUP_MESSAGES {
            sent.push((answer.message_id, started, answered));
        }
    }
    let output = home.first_output(&listener).await;
    let received: HashMap<&str, i128> = output
        .lines()
        .filter_map(|line| {
            let (id, ns) = line.split_once(' ')?;
            Some((id, ns.parse().ok()?))
        })
        .collect();
    let (mut after_answer, mut after_start, mut round_trip) = (Vec::new(), Vec::new(), Vec::new());
    for (id, started, answered) in &sent {
        let at = *received.get(id.as_str()).unwrap_or_else(|| panic!("{id} was not pushed: {output}"));
        after_answer.push(at - answered);
        after_start.push(at - started);
        round_trip.push(answered - started);
    }
    home.down();

    through_kiki.sort();
    by_bench.sort();
    paired.sort_by(f64::total_cmp);
    let own = percentile(&through_kiki, 0.5).as_secs_f64() - percentile(&by_bench, 0.5).as_secs_f64();
    let paired_p50 = paired[(paired.len() - 1) / 2];
    let verdict = |met: bool| if met { "met" } else { "NOT met" };
    let line = |what: &str, value: String, note: &str| {
        println!("{}", format!("    {what:<56} {value:>21}   {note}").trim_end());
    };
    println!("kiki sessions benchmark");
    println!("  fsync floor (4 KiB write + fsync), p50 {}", ms(floor));
    println!(
        "  {turns} turns of one claude thread (scripted Claude Code, resuming its session), alternating \
         with the bench running the same agent itself, p50 / p90:"
    );
    line("through kiki: ThreadSay -> terminal event (ThreadWait)", p50_p90(&mut through_kiki), "");
    line("floor: the bench runs the agent, spawn -> exited", p50_p90(&mut by_bench), "");
    line(
        "kiki's own cost per turn, difference of the p50s",
        format!("{:.3} ms", own * 1e3),
        &format!("(target < 20 ms: {})", verdict(own < 20e-3)),
    );
    line(
        "kiki's own cost per turn, p50 of each round's difference",
        format!("{:.3} ms", paired_p50 * 1e3),
        &format!("(target < 20 ms: {})", verdict(paired_p50 < 20e-3)),
    );
    line(
        "kikid CPU per turn (10 ms ticks)",
        format!("{:.1} ms", kikid_cpu.as_secs_f64() * 1e3 / turns as f64),
        "",
    );
    println!(
        "  {messages} messages sent one at a time (ThreadSend by the owner, answered `delivered`) to a \
         running turn whose agent takes claude/channel pushes, p50 / p99:"
    );
    let (p50, answered) = signed_p50_p99(&mut after_answer);
    let (p50_start, started) = signed_p50_p99(&mut after_start);
    line(
        "send answered -> agent received (negative: before)",
        answered,
        &format!("(target p50 < 50 ms: {})", verdict(p50 < 50.0)),
    );
    line(
        "send started -> agent received",
        started,
        &format!("(< 50 ms from the start too: {})", verdict(p50_start < 50.0)),
    );
    line("send started -> answered `delivered`", signed_p50_p99(&mut round_trip).1, "");
}
