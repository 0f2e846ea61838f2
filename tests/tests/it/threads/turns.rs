//! Turns: user input and its limits, the exec executor (its directory, input and
//! environment, a missing command, background processes, stderr), one turn at a time per
//! thread and threads side by side.

use std::time::Duration;

use kiki_proto as pb;
use kiki_tests::binaries::{Down, kiki_json, new_home, wait_for_turns};
use kiki_tests::{TestHome, assert_invalid, eventually, local};
use tonic::Code;

#[tokio::test]
async fn say_limits_and_queueing() {
    let home = TestHome::builder().start().await;
    let t = home.thread("echo", None).await;
    assert_invalid(home.say(&t.id, "").await, "content", "empty");
    assert_invalid(home.say(&t.id, &"c".repeat(100_001)).await, "content", "100000 characters");
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(home.all_turns(&t.id).await.is_empty(), "refused input leaves no trace");
    let said = home.say(&t.id, "hello").await.expect("say");
    assert!(said.turn_started);
    let turns = home.wait_turns(&t.id, 1).await;
    assert_eq!(turns[0].output, "echo: hello");
    assert_eq!(home.say("th_missing", "x").await.expect_err("missing").code(), Code::NotFound);
}

/// The exec executor: cwd, stdin, stdout, environment, exit status.
#[tokio::test]
async fn exec_runs_in_cwd_with_input_on_stdin_and_the_turn_environment() {
    let script = r#"input=$(cat); printf 'pwd=%s\nin=%s\nhome=%s\nthread=%s\ntoken=%s' "$(pwd)" "$input" "$KIKI_HOME" "$KIKI_THREAD_ID" "${#KIKI_TOKEN}""#;
    let home = TestHome::builder()
        .shell_profile("env", script)
        .shell_profile("fail", "cat >/dev/null; echo partial; echo broken >&2; exit 3")
        .start()
        .await;
    let t = home.thread("env", Some("hi there")).await;
    let turn = home.wait_turns(&t.id, 1).await.remove(0);
    assert_eq!(turn.status(), pb::TurnStatus::Completed, "{}", turn.error);
    let expected = format!(
        "pwd={}\nin=hi there\nhome={}\nthread={}\ntoken=64",
        home.workdir("default").display(),
        home.dir().display(),
        t.id
    );
    assert_eq!(turn.output, expected);

    let f = home.thread("fail", Some("x")).await;
    let turn = home.wait_turns(&f.id, 1).await.remove(0);
    assert_eq!(turn.status(), pb::TurnStatus::Failed);
    assert_eq!(turn.output, "partial\n");
    assert!(turn.error.contains("status 3") && turn.error.contains("broken"), "{}", turn.error);
    let record = home.thread_record(&f.id).await;
    assert_eq!(record.state(), pb::ThreadState::Idle, "a failed turn leaves the thread idle");
}

#[tokio::test]
async fn a_missing_command_fails_the_turn_with_a_reason() {
    let home = TestHome::builder()
        .config(|c| {
            c.profiles.insert(
                "ghost".into(),
                kiki_daemon::config::ProfileConfig {
                    executor: kiki_daemon::config::ExecutorKind::Exec,
                    command: vec!["/no/such/agent-cli".into()],
                    default: false,
                    enabled: true,
                    thread_communication: None,
                    allowed_tools: Vec::new(),
                    max_cost_usd: None,
                },
            );
        })
        .start()
        .await;
    let t = home.thread("ghost", Some("x")).await;
    let turn = home.wait_turns(&t.id, 1).await.remove(0);
    assert_eq!(turn.status(), pb::TurnStatus::Failed);
    assert!(turn.error.contains("cannot start"), "{}", turn.error);

    // A message taken by a turn whose agent never started was not delivered after all.
    let send = pb::ThreadSendRequest {
        target: Some(local(&t.id)),
        content: "hello?".into(),
        idempotency_key: "k".into(),
        ..Default::default()
    };
    home.client().threads().thread_send(send.clone()).await.expect("send");
    home.wait_turns(&t.id, 2).await;
    let replay = home.client().threads().thread_send(send).await.expect("replay").into_inner();
    assert_eq!(replay.status(), pb::SendStatus::Undeliverable);
}

/// A turn ends when its agent exits, even if something it started in the background
/// still holds its stdout.
#[tokio::test]
async fn a_background_process_does_not_keep_the_turn_open() {
    let home = TestHome::builder()
        .shell_profile("daemonize", "cat >/dev/null; sleep 30 & echo started")
        .start()
        .await;
    let t = home.thread("daemonize", Some("go")).await;
    let started = std::time::Instant::now();
    let turn = home.wait_turns(&t.id, 1).await.remove(0);
    assert_eq!(turn.status(), pb::TurnStatus::Completed, "{}", turn.error);
    assert_eq!(turn.output, "started\n");
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
}

/// Turns of one thread never overlap; queued inputs are taken together by the next turn.
#[tokio::test]
async fn turns_of_one_thread_run_one_at_a_time() {
    let log = tempfile::NamedTempFile::new().expect("log");
    let script = format!("echo start >> {0}; sleep 1; cat; echo end >> {0}", log.path().display());
    let home = TestHome::builder().shell_profile("slow", &script).start().await;
    let t = home.thread("slow", Some("one")).await;
    eventually("the first turn to run", || async {
        (home.thread_record(&t.id).await.state() == pb::ThreadState::Running).then_some(())
    })
    .await;
    let second = home.say(&t.id, "two").await.expect("say");
    assert!(!second.turn_started, "a busy thread queues input");
    home.say(&t.id, "three").await.expect("say");
    let turns = home.wait_turns(&t.id, 2).await;
    assert_eq!(turns[0].output, "one");
    assert_eq!(turns[1].input, "two\n\nthree", "the next turn takes every queued input, in order");
    let log = std::fs::read_to_string(log.path()).expect("log");
    assert_eq!(log, "start\nend\nstart\nend\n", "never two turns of one thread at once");
}

/// Two threads' turns run at the same time: each waits for the other's marker file, which
/// only works if both run concurrently (run serially, the first one gives up and fails).
#[tokio::test]
async fn different_threads_run_concurrently() {
    let dir = tempfile::tempdir().expect("dir");
    let script = format!(
        r#"me=$(cat); touch {0}/$me; other=$([ "$me" = a ] && echo b || echo a); i=0; while [ ! -e {0}/$other ]; do i=$((i+1)); [ $i -gt 200 ] && exit 1; sleep 0.05; done; echo ok"#,
        dir.path().display()
    );
    let home = TestHome::builder().shell_profile("meet", &script).start().await;
    let a = home.thread("meet", Some("a")).await;
    let b = home.thread("meet", Some("b")).await;
    let ta = home.wait_turns(&a.id, 1).await.remove(0);
    let tb = home.wait_turns(&b.id, 1).await.remove(0);
    assert_eq!((ta.status(), tb.status()), (pb::TurnStatus::Completed, pb::TurnStatus::Completed));
}

/// An agent's stderr is kept only as a tail, for the turn's error: a flood of it (here
/// 300 MB) does not grow kikid's memory. The home is the real `kikid`, whose own peak is
/// measured: the peak of this process would count every other test it runs meanwhile.
#[test]
fn a_flood_of_stderr_keeps_only_its_tail() {
    let loud = "cat >/dev/null; head -c 300000000 /dev/zero | tr '\\0' x >&2; echo last words >&2; exit 2";
    let (_dir, home) = new_home();
    let _down = Down(&home);
    std::fs::create_dir_all(&home).expect("home");
    let config = format!("[profiles.loud]\nexecutor = \"exec\"\ncommand = [\"sh\", \"-c\", '''{loud}''']\n");
    std::fs::write(home.join("config.toml"), config).expect("config");
    let pid = kiki_json(&home, &["up"])["pid"].as_u64().expect("pid") as u32;
    let before = kiki_tests::measure::peak_rss_kb_of(pid);
    let created = kiki_json(&home, &["thread", "create", "--profile", "loud", "--prompt", "go"]);
    let page = wait_for_turns(&home, created["id"].as_str().expect("id"), 1);
    let turn = &page["turns"][0];
    assert_eq!(turn["status"], "failed", "{turn}");
    let error = turn["error"].as_str().unwrap_or_default();
    assert!(error.starts_with("the agent exited with status 2") && error.ends_with("last words"));
    assert!(error.len() < 4200, "{} bytes of error", error.len());
    let grown = kiki_tests::measure::peak_rss_kb_of(pid).saturating_sub(before);
    assert!(grown < 100_000, "peak memory grew by {grown} kB");
}
