//! The agent sessions' two numbers, each printed next to its floor measured in the
//! same run (never asserted). Run with a release build of the binaries:
//!
//! ```sh
//! cargo build --release --workspace --bins && cargo bench -p kiki-tests --bench sessions
//! ```
//!
//! - kiki's own cost per turn (spawn or reuse, handshake, recording) is under 20 ms beyond the
//!   agent's, for each session executor: turns of one `claude`, `codex` and `acp` thread
//!   running the scripted agents (tests/agents/, Python), each resuming the thread's session,
//!   timed from the ThreadSay to the ThreadWait that returns the turn's `terminal` event;
//!   alternately (the order flipped every round) the bench runs the same script itself the
//!   way kikid does — for Claude Code the argv kikid gives it (`-p --output-format
//!   stream-json --verbose --resume SESSION --mcp-config JSON --permission-prompt-tool …
//!   --allowedTools …`) and the input on stdin; for Codex and ACP the same JSON-RPC
//!   conversation (`initialize`, `thread/resume` or `session/load`, `turn/start` or
//!   `session/prompt`, to the turn's end, then stdin closed and the exit awaited) — with the
//!   same state directory and session, so it does the same work. The difference is kiki's.
//! - a message into a running turn reaches the agent under 50 ms p50 after the send is
//!   answered: an `exec` turn running `mcp-agent KIKI` with the input `listen-timed N` starts
//!   `kiki mcp` as an MCP client declaring `claude/channel` and prints, for each pushed
//!   message, its id and the time it received it (ns since the UNIX epoch); the bench sends
//!   the N messages one at a time over gRPC (ThreadSend by the owner, answered `delivered`
//!   once the agent took the message) and notes when each send started and was answered, on
//!   the same clock. A send is answered after its message was pushed (it is counted
//!   `delivered` when `kiki mcp` hands it back as taken), so received − answered is negative:
//!   both it and received − send started are printed.
//! - the same for messages steered into a running Codex turn: a `codex` thread's turn
//!   `hold N` stays open until N steers arrived and answers the time (ns since the UNIX epoch)
//!   it received each; a send is answered `delivered` once Codex accepted the steer.
//!
//! Settings: `TURNS` (100 of each kind, after 3 unmeasured), `MESSAGES` (200, after 5
//! unmeasured).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kiki_client::Client;
use kiki_daemon::executors::McpServer;
use kiki_proto::{self as pb, Word, agents};
use kiki_tests::binaries::{Down, binary, kiki_json};
use kiki_tests::local;
use kiki_tests::measure::{fsync_floor, ms, percentile, process_cpu_time, setting};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

/// Rounds of turns (of each kind) before the measured ones.
const WARMUP_TURNS: usize = 3;
/// Messages pushed before the measured ones (the agent's MCP session is up and polling).
const WARMUP_MESSAGES: usize = 5;
/// `kiki mcp`'s permission prompt tool, as `daemon/src/executors/claude.rs` names it.
const PERMISSION_TOOL: &str = "mcp__kiki__PermissionPrompt";
const ALLOWED_TOOLS: &str = "mcp__kiki__ThreadSend";

/// A session executor's profile, named as its executor, and its scripted agent.
#[derive(Clone, Copy, PartialEq)]
enum Agent {
    Claude,
    Codex,
    Acp,
}

impl Agent {
    fn name(self) -> &'static str {
        match self {
            Agent::Claude => "claude",
            Agent::Codex => "codex",
            Agent::Acp => "acp",
        }
    }

    /// `env STATE_VAR=STATE SCRIPT`, as the profile's command.
    fn command(self, state: &Path) -> Vec<String> {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("agents").join(self.name());
        let var = format!("FAKE_{}_STATE", self.name().to_uppercase());
        vec!["env".into(), format!("{var}={}", state.display()), script.display().to_string()]
    }
}

const AGENTS: [Agent; 3] = [Agent::Claude, Agent::Codex, Agent::Acp];

/// The home's profiles: `claude`, `codex` and `acp` (the scripted agents, their sessions in
/// `state`) and `agent` (`mcp-agent KIKI`, an `exec` agent speaking MCP to `kiki mcp`).
fn config(state: &Path) -> String {
    let command = |argv: &[String]| argv.iter().map(|a| format!("{a:?}")).collect::<Vec<_>>().join(", ");
    let mut config = String::new();
    for agent in AGENTS {
        let name = agent.name();
        config += &format!(
            "[profiles.{name}]\nexecutor = \"{name}\"\ncommand = [{}]\n",
            command(&agent.command(state))
        );
        if agent == Agent::Claude {
            config += &format!("allowed_tools = [\"{ALLOWED_TOOLS}\"]\n");
        }
    }
    let agent = [binary("mcp-agent").display().to_string(), binary("kiki").display().to_string()];
    config + &format!("[profiles.agent]\nexecutor = \"exec\"\ncommand = [{}]\n", command(&agent))
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
        let status = client.home().status(pb::StatusRequest::default()).await.expect("status").into_inner();
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
        let Some(field) = turn.content_refs.iter().find(|r| r.field().word() == "output") else {
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

/// A scripted agent run by the bench itself for one turn resuming `session`, as kikid's
/// executor runs it: the same command, cwd, environment and kiki MCP server.
struct Direct {
    agent: Agent,
    command: Vec<String>,
    cwd: PathBuf,
    env: Vec<(&'static str, String)>,
    session: String,
    mcp: McpServer,
}

impl Direct {
    fn new(agent: Agent, state: &Path, cwd: &Path, home: &Path, thread: &str, session: &str) -> Self {
        let env = vec![
            ("KIKI_HOME", home.display().to_string()),
            ("KIKI_THREAD_ID", thread.to_string()),
            ("KIKI_TOKEN", "tok_bench".to_string()),
        ];
        // `kiki` is found beside this bench's `deps/` directory, as kikid finds it beside itself.
        let mcp = McpServer::kiki(&env);
        let command = agent.command(state);
        Self { agent, command, cwd: cwd.to_path_buf(), env, session: session.to_string(), mcp }
    }

    fn spawn(&self, args: &[String]) -> tokio::process::Child {
        tokio::process::Command::new(&self.command[0])
            .args(&self.command[1..])
            .args(args)
            .current_dir(&self.cwd)
            .envs(self.env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("the scripted agent starts")
    }

    /// One turn: spawn to exit.
    async fn run(&self, prompt: &str) -> Duration {
        let t = Instant::now();
        match self.agent {
            Agent::Claude => self.claude(prompt).await,
            Agent::Codex | Agent::Acp => self.conversation(prompt).await,
        }
        t.elapsed()
    }

    /// Claude Code's headless mode: the argv of `executors::claude::arguments`, the input on
    /// stdin.
    async fn claude(&self, prompt: &str) {
        let mut args: Vec<String> =
            ["-p", "--output-format", "stream-json", "--verbose", "--resume", &self.session]
                .map(String::from)
                .into();
        args.extend(["--mcp-config".to_string(), self.mcp.claude_config()]);
        args.extend(
            ["--permission-prompt-tool", PERMISSION_TOOL, "--allowedTools", ALLOWED_TOOLS].map(String::from),
        );
        let mut child = self.spawn(&args);
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(prompt.as_bytes()).await.expect("input");
        drop(stdin);
        let out = child.wait_with_output().await.expect("the scripted agent exits");
        assert!(out.status.success(), "the scripted agent failed: {}", String::from_utf8_lossy(&out.stderr));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains(r#""subtype": "success""#), "no result: {stdout}");
    }

    /// The Codex app-server's or the ACP agent's JSON-RPC conversation for one turn, as the
    /// `codex` and `acp` executors hold it.
    async fn conversation(&self, prompt: &str) {
        let codex = self.agent == Agent::Codex;
        let args = if codex { vec!["app-server".to_string()] } else { Vec::new() };
        let mut child = self.spawn(&args);
        let mut stdin = child.stdin.take().expect("stdin");
        let mut lines = tokio::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
        let cwd = self.cwd.display().to_string();
        let mut next = 0;
        let mut call = async |method: &str, params: Value| {
            let mut message = json!({"id": next, "method": method, "params": params});
            if !codex {
                message["jsonrpc"] = json!("2.0");
            }
            stdin.write_all(format!("{message}\n").as_bytes()).await.expect("write");
            loop {
                let line = lines.next_line().await.expect("read").expect("an answer");
                let answer: Value = serde_json::from_str(&line).expect("JSON-RPC");
                if answer["id"] == json!(next) && answer.get("method").is_none() {
                    assert!(answer["error"].is_null(), "{method}: {answer}");
                    next += 1;
                    return answer["result"].clone();
                }
            }
        };
        let input = json!([{"type": "text", "text": prompt}]);
        if codex {
            call("initialize", json!({"clientInfo": {"name": "kiki", "title": "kiki", "version": "bench"}}))
                .await;
            let config = json!({"mcp_servers.kiki": self.mcp.entry(agents::Agent::Codex)});
            call("thread/resume", json!({"threadId": self.session, "cwd": cwd, "config": config})).await;
            call("turn/start", json!({"threadId": self.session, "input": input})).await;
            loop {
                let line = lines.next_line().await.expect("read").expect("the turn's end");
                if serde_json::from_str::<Value>(&line).expect("JSON")["method"] == "turn/completed" {
                    break;
                }
            }
        } else {
            let hello = json!({"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": false, "writeTextFile": false}, "terminal": false}});
            call("initialize", hello).await;
            let servers = json!([agents::acp_server(&self.mcp.command, &agents::MCP_ARGS, &self.mcp.env)]);
            call("session/load", json!({"sessionId": self.session, "cwd": cwd, "mcpServers": servers})).await;
            let answer = call("session/prompt", json!({"sessionId": self.session, "prompt": input})).await;
            assert_eq!(answer["stopReason"], "end_turn");
        }
        drop(stdin);
        let status = child.wait().await.expect("the scripted agent exits");
        assert!(status.success(), "the scripted agent failed");
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

/// Turns through kiki and run by the bench, interleaved.
struct Turns {
    through_kiki: Vec<Duration>,
    by_bench: Vec<Duration>,
    /// Each round's difference, in seconds.
    paired: Vec<f64>,
    kikid_cpu: Duration,
}

/// `turns` rounds (after the warm-up) of a turn of a new `agent` thread through kiki and the
/// same turn run by the bench, the order flipped every round.
async fn compare_turns(home: &Home, agent: Agent, state: &Path, cwd: &Path, turns: usize) -> Turns {
    let thread = home.thread(agent.name(), cwd, "first").await;
    assert_eq!(home.terminal(&thread, None).await, pb::TurnStatus::Completed, "the first turn");
    let first = kiki_tests::read_all_turns(&home.client, &thread).await;
    let session = session_of(&first[0].output);
    let direct = Direct::new(agent, state, cwd, &home.home, &thread, &session);
    let mut measured = Turns {
        through_kiki: Vec::new(),
        by_bench: Vec::new(),
        paired: Vec::new(),
        kikid_cpu: Duration::ZERO,
    };
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
        measured.kikid_cpu += cpu;
        measured.through_kiki.push(k);
        measured.by_bench.push(d);
        measured.paired.push(k.as_secs_f64() - d.as_secs_f64());
    }
    let recorded = kiki_tests::read_all_turns(&home.client, &thread).await;
    assert_eq!(recorded.len(), 1 + WARMUP_TURNS + turns, "every turn recorded");
    let last = recorded.last().expect("a turn");
    assert_eq!(session_of(&last.output), session, "every turn resumed the thread's session");
    measured
}

/// Messages sent one at a time to `thread`'s running turn: (message id, send started, send
/// answered), after the warm-up ones.
async fn send_into(home: &Home, thread: &str, total: usize) -> Vec<(String, i128, i128)> {
    let t = Instant::now();
    while home.state(thread).await != pb::ThreadState::Running {
        assert!(t.elapsed() < Duration::from_secs(20), "the turn runs");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut sent = Vec::with_capacity(total);
    let mut threads = home.client.threads();
    for i in 0..total {
        let request = pb::ThreadSendRequest {
            target: Some(local(thread)),
            content: format!("message {i:04} of the bench"),
            idempotency_key: format!("{thread}-{i:04}"),
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
    sent
}

/// For each message sent: (received − answered, received − started, answered − started),
/// from `received` (message id → when the agent got it).
fn delays(sent: &[(String, i128, i128)], received: &HashMap<String, i128>) -> [Vec<i128>; 3] {
    let mut out = [Vec::new(), Vec::new(), Vec::new()];
    for (id, started, answered) in sent {
        let at = *received.get(id).unwrap_or_else(|| panic!("{id} was not received: {received:?}"));
        out[0].push(at - answered);
        out[1].push(at - started);
        out[2].push(answered - started);
    }
    out
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "NOT met" }
}

fn line(what: &str, value: String, note: &str) {
    println!("{}", format!("    {what:<56} {value:>21}   {note}").trim_end());
}

fn print_delays(messages: usize, how: &str, delays: [Vec<i128>; 3]) {
    let [mut after_answer, mut after_start, mut round_trip] = delays;
    println!(
        "  {messages} messages sent one at a time (ThreadSend by the owner, answered `delivered`) {how}, p50 / p99:"
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

#[tokio::main]
async fn main() {
    let turns = setting("TURNS", 100) as usize;
    let messages = setting("MESSAGES", 200) as usize;
    let dir = tempfile::tempdir().expect("temp dir");
    let floor = fsync_floor(dir.path());
    let state = dir.path().join("agent-state");
    std::fs::create_dir_all(&state).expect("state dir");
    let cwd = dir.path().join("work");
    std::fs::create_dir_all(&cwd).expect("work dir");
    let cwd = cwd.canonicalize().expect("canonical work dir");
    let home_dir = dir.path().join("home");
    // Stops kikid if the bench panics (after `home.down()`: a no-op).
    let _down = Down(&home_dir);
    let home = Home::up(&home_dir, &config(&state)).await;

    // 1. Turns of one thread of each session executor through kiki, and the same agent run
    //    by the bench itself.
    let mut compared = Vec::new();
    for agent in AGENTS {
        compared.push((agent, compare_turns(&home, agent, &state, &cwd, turns).await));
    }

    // 2. Messages pushed into a running turn of `mcp-agent` (claude/channel).
    let total = WARMUP_MESSAGES + messages;
    let listener = home.thread("agent", &cwd, &format!("listen-timed {total}")).await;
    let pushed = send_into(&home, &listener, total).await;
    let output = home.first_output(&listener).await;
    let received: HashMap<String, i128> = output
        .lines()
        .filter_map(|line| {
            let (id, ns) = line.split_once(' ')?;
            Some((id.to_string(), ns.parse().ok()?))
        })
        .collect();
    let pushes = delays(&pushed, &received);

    // 3. Messages steered into a running Codex turn.
    let steered_thread = home.thread("codex", &cwd, &format!("hold {total}")).await;
    let steered = send_into(&home, &steered_thread, total).await;
    let output = home.first_output(&steered_thread).await;
    // `steered at NS: [kiki message ID from …`
    let received: HashMap<String, i128> = output
        .lines()
        .filter_map(|line| {
            let (ns, text) = line.strip_prefix("steered at ")?.split_once(": ")?;
            let id = text.strip_prefix("[kiki message ")?.split(' ').next()?;
            Some((id.to_string(), ns.parse().ok()?))
        })
        .collect();
    let steers = delays(&steered, &received);
    home.down();

    println!("kiki sessions benchmark");
    println!("  fsync floor (4 KiB write + fsync), p50 {}", ms(floor));
    for (agent, mut measured) in compared {
        let name = agent.name();
        println!(
            "  {turns} turns of one {name} thread (the scripted agent, resuming its session), alternating \
             with the bench running the same agent itself, p50 / p90:"
        );
        measured.through_kiki.sort();
        measured.by_bench.sort();
        measured.paired.sort_by(f64::total_cmp);
        let own = percentile(&measured.through_kiki, 0.5).as_secs_f64()
            - percentile(&measured.by_bench, 0.5).as_secs_f64();
        let paired_p50 = measured.paired[(measured.paired.len() - 1) / 2];
        line(
            "through kiki: ThreadSay -> terminal event (ThreadWait)",
            p50_p90(&mut measured.through_kiki),
            "",
        );
        line("floor: the bench runs the agent, spawn -> exited", p50_p90(&mut measured.by_bench), "");
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
            format!("{:.1} ms", measured.kikid_cpu.as_secs_f64() * 1e3 / turns as f64),
            "",
        );
    }
    print_delays(messages, "to a running turn whose agent takes claude/channel pushes", pushes);
    print_delays(messages, "to a running Codex turn (turn/steer)", steers);
}
