//! Threads in one home, in process: every limit and default of ThreadCreate, ThreadList and
//! ThreadRead, paging, content refs, archive, user input, and the executors.

use std::time::Duration;

use kiki_proto as pb;
use kiki_proto::Word;
use kiki_tests::binaries::{Down, kiki_json, new_home, wait_for_turns};
use kiki_tests::{TestHome, assert_invalid, eventually, local};
use tonic::Code;

fn create_in(cwd: &std::path::Path) -> pb::ThreadCreateRequest {
    pb::ThreadCreateRequest { cwd: Some(cwd.display().to_string()), ..Default::default() }
}

async fn count_threads(home: &TestHome) -> u64 {
    home.client().home().status(pb::StatusRequest::default()).await.expect("status").into_inner().threads
}

#[tokio::test]
async fn create_with_prompt_runs_echo_and_derives_the_title() {
    let home = TestHome::builder().start().await;
    let cwd = home.workdir("a");
    let mut request = create_in(&cwd);
    request.prompt = Some(format!("{}\nsecond line", "x".repeat(120)));
    let created = home.create(request).await.expect("created");
    assert!(created.prompt_started);
    assert_eq!(created.profile, "echo", "the default profile");
    assert_eq!(created.title, "x".repeat(80), "first line cut to 80 characters");
    assert_eq!(created.cwd, cwd.display().to_string());
    let turns = home.wait_turns(&created.id, 1).await;
    assert_eq!(turns[0].status(), pb::TurnStatus::Completed);
    assert_eq!(turns[0].output, format!("echo: {}\nsecond line", "x".repeat(120)));
    assert_eq!(turns[0].inputs.len(), 1);
    // A title is printable: a line of control characters only is blank.
    let mut request = create_in(&cwd);
    request.prompt = Some("\u{7}\u{1b}\n  real \u{7}first line".into());
    assert_eq!(home.create(request).await.expect("created").title, "real first line");
    assert_eq!(turns[0].inputs[0].kind(), pb::InputKind::User);
    assert!(turns[0].inputs[0].source.is_none(), "user input has no peer attribution");
}

#[tokio::test]
async fn create_without_prompt_stays_empty() {
    let home = TestHome::builder().start().await;
    let created = home.create(create_in(&home.workdir("a"))).await.expect("created");
    assert!(!created.prompt_started);
    assert_eq!(created.title, "New thread");
    let mut titled = create_in(&home.workdir("a"));
    titled.title = Some("My title".into());
    titled.prompt = Some("a prompt".into());
    assert_eq!(home.create(titled).await.expect("created").title, "My title", "title overrides the prompt");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(home.all_turns(&created.id).await.is_empty(), "no turn without a prompt");
}

#[tokio::test]
async fn create_limits_are_checked_and_leave_no_trace() {
    let home = TestHome::builder()
        .config(|c| {
            c.profiles.insert(
                "off".into(),
                kiki_daemon::config::ProfileConfig {
                    executor: kiki_daemon::config::ExecutorKind::Echo,
                    command: vec![],
                    default: false,
                    enabled: false,
                    thread_communication: None,
                    allowed_tools: Vec::new(),
                    max_cost_usd: None,
                },
            );
        })
        .start()
        .await;
    let cwd = home.workdir("a");

    let mut r = create_in(&cwd);
    r.prompt = Some("p".repeat(100_001));
    assert_invalid(home.create(r).await, "prompt", "100000 characters");
    let mut r = create_in(&cwd);
    r.prompt = Some("é".repeat(100_000));
    home.create(r).await.expect("exactly 100,000 characters (not bytes) is fine");

    let mut r = create_in(&cwd);
    r.prompt = Some(String::new());
    assert_invalid(home.create(r).await, "prompt", "empty");
    let r = pb::ThreadCreateRequest { cwd: Some("relative/dir".into()), ..Default::default() };
    assert_invalid(home.create(r).await, "cwd", "absolute");
    let r = pb::ThreadCreateRequest { cwd: Some("/no/such/dir/kiki".into()), ..Default::default() };
    assert_invalid(home.create(r).await, "cwd", "does not exist");
    let file = home.dir().join("a-file");
    std::fs::write(&file, "x").expect("file");
    let r = pb::ThreadCreateRequest { cwd: Some(file.display().to_string()), ..Default::default() };
    assert_invalid(home.create(r).await, "cwd", "not a directory");
    let r = pb::ThreadCreateRequest::default();
    assert_invalid(home.create(r).await, "cwd", "required");
    let mut r = create_in(&cwd);
    r.profile = Some("nope".into());
    assert_invalid(home.create(r).await, "profile", "no profile");
    let mut r = create_in(&cwd);
    r.profile = Some("off".into());
    assert_invalid(home.create(r).await, "profile", "disabled");
    let mut r = create_in(&cwd);
    r.title = Some("t".repeat(201));
    assert_invalid(home.create(r).await, "title", "200 characters");
    for bad in ["two\nlines", "a\u{0}b", "   "] {
        let mut r = create_in(&cwd);
        r.title = Some(bad.into());
        assert_invalid(home.create(r).await, "title", "one line");
    }

    assert_eq!(count_threads(&home).await, 1, "only the valid create wrote anything");
}

#[tokio::test]
async fn list_pages_newest_first_over_many_threads() {
    let home = TestHome::builder().start().await;
    let cwd = home.workdir("a");
    let mut ids = Vec::new();
    for _ in 0..230 {
        ids.push(home.create(create_in(&cwd)).await.expect("create").id);
    }
    ids.reverse(); // newest first

    let list = |limit: Option<u32>, cursor: String| {
        let client = home.client().clone();
        async move {
            client
                .threads()
                .thread_list(pb::ThreadListRequest { limit, cursor, ..Default::default() })
                .await
                .map(|r| r.into_inner())
        }
    };
    let first = list(None, String::new()).await.expect("list");
    assert_eq!(first.threads.len(), 50, "default limit");
    let mut seen: Vec<String> = Vec::new();
    let mut cursor = String::new();
    loop {
        let page = list(Some(100), cursor.clone()).await.expect("list");
        seen.extend(page.threads.iter().map(|t| t.id.clone()));
        match page.next_cursor {
            Some(next) => cursor = next,
            None => break,
        }
    }
    assert_eq!(seen, ids, "every thread exactly once, newest first");

    assert_invalid(list(Some(0), String::new()).await, "limit", "between 1 and 100");
    assert_invalid(list(Some(101), String::new()).await, "limit", "between 1 and 100");
    assert_invalid(list(None, "not-a-cursor".into()).await, "cursor", "restart from the first page");
}

#[tokio::test]
async fn list_filters_by_workspace_and_hides_archived() {
    let home = TestHome::builder().start().await;
    let repo = home.workdir("repo");
    std::fs::create_dir_all(repo.join(".git")).expect(".git");
    std::fs::create_dir_all(repo.join("src")).expect("src");
    let a = home.create(create_in(&repo)).await.expect("create");
    let b = home.create(create_in(&repo.join("src"))).await.expect("create");
    let other = home.create(create_in(&home.workdir("other"))).await.expect("create");
    assert_eq!(a.workspace_id, b.workspace_id, "same repository, same workspace");
    assert_ne!(a.workspace_id, other.workspace_id);

    let page = home
        .client()
        .threads()
        .thread_list(pb::ThreadListRequest { workspace_id: a.workspace_id.clone(), ..Default::default() })
        .await
        .expect("list")
        .into_inner();
    assert_eq!(
        page.threads.iter().map(|t| t.id.clone()).collect::<Vec<_>>(),
        vec![b.id.clone(), a.id.clone()]
    );
    // A directory in the workspace names it too; a name that is neither is refused, not
    // answered with an empty page.
    let by_dir =
        pb::ThreadListRequest { workspace_id: repo.join("src").display().to_string(), ..Default::default() };
    let page = home.client().threads().thread_list(by_dir).await.expect("list").into_inner();
    assert_eq!(page.threads.len(), 2);
    // A cursor is bound to its query: a page of one workspace does not continue as another
    // workspace's list, nor as the whole home's, and the error names the cursor.
    let first =
        pb::ThreadListRequest { workspace_id: a.workspace_id.clone(), limit: Some(1), ..Default::default() };
    let cursor = home.client().threads().thread_list(first).await.expect("list").into_inner().next_cursor;
    let cursor = cursor.expect("a second page");
    for workspace_id in [other.workspace_id.clone(), String::new()] {
        let elsewhere = pb::ThreadListRequest { workspace_id, cursor: cursor.clone(), ..Default::default() };
        let err = home.client().threads().thread_list(elsewhere).await.expect_err("another query");
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{}", err.message());
        assert!(
            err.message().starts_with("cursor") && err.message().contains("not this one"),
            "{}",
            err.message()
        );
    }
    let same =
        pb::ThreadListRequest { workspace_id: repo.display().to_string(), cursor, ..Default::default() };
    let rest =
        home.client().threads().thread_list(same).await.expect("the same workspace, named by a directory");
    let rest: Vec<String> = rest.into_inner().threads.into_iter().map(|t| t.id).collect();
    assert_eq!(rest, [a.id.as_str()]);
    for bogus in ["ws_nope", "repo", "/no/such/dir"] {
        let request = pb::ThreadListRequest { workspace_id: bogus.into(), ..Default::default() };
        let err = home.client().threads().thread_list(request).await.expect_err(bogus);
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{bogus}: {}", err.message());
        assert!(err.message().contains("workspace_id"), "{}", err.message());
    }

    let archive = |id: &str, archived| pb::ThreadArchiveRequest { target: Some(local(id)), archived };
    let done = home.client().home().thread_archive(archive(&b.id, true)).await.expect("archive").into_inner();
    assert!(done.changed && done.thread.expect("thread").archived);
    let again =
        home.client().home().thread_archive(archive(&b.id, true)).await.expect("archive").into_inner();
    assert!(!again.changed, "archiving twice changes nothing");
    let ids = |page: pb::ThreadListResponse| page.threads.into_iter().map(|t| t.id).collect::<Vec<_>>();
    let all = home.client().threads().thread_list(pb::ThreadListRequest::default()).await.expect("list");
    assert_eq!(ids(all.into_inner()), vec![other.id.clone(), a.id.clone()]);
    // An archived thread keeps its history and can still be read.
    home.read(pb::ThreadReadRequest { target: Some(local(&b.id)), ..Default::default() })
        .await
        .expect("read");
    let say = home.say(&b.id, "hello").await.expect_err("archived threads take no input");
    assert_eq!(say.code(), Code::FailedPrecondition);
    home.client().home().thread_archive(archive(&b.id, false)).await.expect("unarchive");
    let all = home.client().threads().thread_list(pb::ThreadListRequest::default()).await.expect("list");
    assert_eq!(ids(all.into_inner()).len(), 3);
}

#[tokio::test]
async fn read_pages_turns_in_chronological_order() {
    let home = TestHome::builder().start().await;
    let t = home.thread("echo", Some("m0")).await;
    home.wait_turns(&t.id, 1).await;
    for i in 1..25 {
        home.say(&t.id, &format!("m{i}")).await.expect("say");
        home.wait_turns(&t.id, i + 1).await;
    }
    let read = |limit: Option<u32>, cursor: String| {
        home.read(pb::ThreadReadRequest {
            target: Some(local(&t.id)),
            limit,
            cursor,
            content_ref: String::new(),
            last: None,
            tool_calls: false,
        })
    };
    let first = read(None, String::new()).await.expect("read");
    assert_eq!(first.turns.len(), 20, "default limit");
    assert_eq!(first.turns[0].output, "echo: m0", "oldest first");
    let second = read(None, first.next_cursor.clone().expect("more")).await.expect("read");
    assert_eq!(second.turns.iter().map(|t| t.seq).collect::<Vec<_>>(), (21..=25).collect::<Vec<_>>());
    assert!(second.next_cursor.is_none());
    // Each page says what it covers of the thread's completed turns.
    let covered = |page: &pb::ThreadReadResponse| {
        let c = page.coverage.as_ref().expect("coverage");
        (c.turns_total, c.first_seq, c.last_seq, c.complete)
    };
    assert_eq!(covered(&first), (25, 1, 20, false));
    assert_eq!(covered(&second), (25, 21, 25, true));

    assert_invalid(read(Some(0), String::new()).await, "limit", "between 1 and 100");
    assert_invalid(read(Some(101), String::new()).await, "limit", "between 1 and 100");
    assert_invalid(read(None, "garbage".into()).await, "cursor", "restart from the first page");
    let other = home.thread("echo", None).await;
    let foreign = home
        .read(pb::ThreadReadRequest {
            target: Some(local(&other.id)),
            cursor: first.next_cursor.expect("cursor"),
            ..Default::default()
        })
        .await;
    assert_invalid(foreign, "cursor", "another thread");

    let missing =
        home.read(pb::ThreadReadRequest { target: Some(local("th_nope")), ..Default::default() }).await;
    assert_eq!(missing.expect_err("missing").code(), Code::NotFound);
    let mut elsewhere = local(&t.id);
    elsewhere.host_id = "some-other-home".into();
    let remote = home.read(pb::ThreadReadRequest { target: Some(elsewhere), ..Default::default() }).await;
    assert_eq!(remote.expect_err("no bridge").code(), Code::NotFound);
    let mut wrong_ws = local(&t.id);
    wrong_ws.workspace_id = "ws_0000000000000000".into();
    let wrong = home.read(pb::ThreadReadRequest { target: Some(wrong_ws), ..Default::default() }).await;
    assert_eq!(wrong.expect_err("wrong workspace").code(), Code::NotFound);
}

/// `last` reads the end of a long thread in one call: the newest turns, still oldest first,
/// with the usual coverage and no cursor (the page reaches the newest turn). It is a page of
/// its own: with limit, cursor or content_ref it is refused, naming them.
#[tokio::test]
async fn read_last_gives_the_newest_turns_oldest_first() {
    let home = TestHome::builder().start().await;
    let empty = home.thread("echo", None).await;
    let t = home.thread("echo", Some("m1")).await;
    home.wait_turns(&t.id, 1).await;
    for i in 2..=30 {
        home.say(&t.id, &format!("m{i}")).await.expect("say");
        home.wait_turns(&t.id, i).await;
    }
    let read = |thread: &str, last: Option<u32>| {
        home.read(pb::ThreadReadRequest { target: Some(local(thread)), last, ..Default::default() })
    };
    let seqs = |page: &pb::ThreadReadResponse| page.turns.iter().map(|t| t.seq).collect::<Vec<_>>();
    let covered = |page: &pb::ThreadReadResponse| {
        let c = page.coverage.as_ref().expect("coverage");
        (c.turns_total, c.first_seq, c.last_seq, c.complete)
    };

    let page = read(&t.id, Some(5)).await.expect("read");
    assert_eq!(seqs(&page), (26..=30).collect::<Vec<_>>(), "the newest five, oldest first");
    assert_eq!(page.turns[0].output, "echo: m26");
    assert_eq!(page.turns[4].output, "echo: m30");
    assert!(page.next_cursor.is_none(), "the page reaches the newest turn");
    assert_eq!(covered(&page), (30, 26, 30, true));
    assert_eq!(page.thread.as_ref().map(|t| t.id.as_str()), Some(t.id.as_str()));
    let all = read(&t.id, Some(100)).await.expect("read");
    assert_eq!(seqs(&all), (1..=30).collect::<Vec<_>>(), "more than there are: all of them");
    let empty_page = read(&empty.id, Some(5)).await.expect("read");
    assert!(empty_page.turns.is_empty());
    assert_eq!(covered(&empty_page), (0, 0, 0, true));
    // Without `last` the API's default order stands: the oldest first.
    let default = read(&t.id, None).await.expect("read");
    assert_eq!(seqs(&default), (1..=20).collect::<Vec<_>>());

    assert_invalid(read(&t.id, Some(0)).await, "last", "between 1 and 100");
    assert_invalid(read(&t.id, Some(101)).await, "last", "between 1 and 100");
    let with = |limit: Option<u32>, cursor: String, content_ref: &str| {
        home.read(pb::ThreadReadRequest {
            target: Some(local(&t.id)),
            limit,
            cursor,
            content_ref: content_ref.into(),
            last: Some(5),
            tool_calls: false,
        })
    };
    let cursor = default.next_cursor.expect("a cursor");
    assert_invalid(with(Some(5), String::new(), "").await, "last", "does not go with limit");
    assert_invalid(with(None, cursor.clone(), "").await, "last", "does not go with cursor");
    let content_ref = format!("{}.output", page.turns[0].id);
    assert_invalid(with(None, String::new(), &content_ref).await, "last", "does not go with content_ref");
    assert_invalid(with(Some(5), cursor, "").await, "last", "limit or cursor");
    let missing = home.read(pb::ThreadReadRequest {
        target: Some(local("th_nope")),
        last: Some(5),
        ..Default::default()
    });
    assert_eq!(missing.await.expect_err("missing").code(), Code::NotFound);
}

/// A 40,000-character output (with characters outside the BMP, two UTF-16 units each) comes
/// back as a preview plus a content ref whose segments reassemble it exactly.
#[tokio::test]
async fn oversized_output_is_read_back_exactly_through_content_refs() {
    let home = TestHome::builder().shell_profile("cat", "cat").start().await;
    let unit = "kiki 😀 ünïcode ";
    let mut text = String::new();
    while text.chars().count() < 40_000 {
        text.push_str(unit);
    }
    let text: String = text.chars().take(40_000).collect();
    let t = home.thread("cat", Some(&text)).await;
    let turns = home.wait_turns(&t.id, 1).await;
    let turn = &turns[0];
    assert_eq!(turn.status(), pb::TurnStatus::Completed, "{}", turn.error);
    assert!(turn.output_truncated && turn.input_truncated);
    assert!(turn.output.chars().count() < 16_384, "a preview only");
    assert!(text.starts_with(&turn.output));
    let output_ref = turn.content_refs.iter().find(|r| r.field().word() == "output").expect("output ref");
    let total_units = text.encode_utf16().count() as u64;
    assert_eq!(output_ref.utf16_length, total_units);

    let mut assembled = String::new();
    let mut cursor = String::new();
    let mut segments = 0;
    loop {
        let page = home
            .read(pb::ThreadReadRequest {
                target: Some(local(&t.id)),
                content_ref: output_ref.content_ref.clone(),
                cursor: cursor.clone(),
                limit: None,
                last: None,
                tool_calls: false,
            })
            .await
            .expect("segment");
        let segment = page.segment.expect("segment");
        assert!(segment.text.encode_utf16().count() <= 16_384, "segments are at most 16,384 UTF-16 units");
        assert_eq!(segment.offset, assembled.encode_utf16().count() as u64);
        assembled.push_str(&segment.text);
        segments += 1;
        match segment.next {
            Some(next) => cursor = next,
            None => break,
        }
    }
    assert_eq!(assembled, text, "reassembled exactly");
    assert!(segments >= 3);
    // The ref is stable: reading again gives the same first segment.
    let again = home
        .read(pb::ThreadReadRequest {
            target: Some(local(&t.id)),
            content_ref: output_ref.content_ref.clone(),
            ..Default::default()
        })
        .await
        .expect("segment");
    assert!(text.starts_with(&again.segment.expect("segment").text));

    let bad = home
        .read(pb::ThreadReadRequest {
            target: Some(local(&t.id)),
            content_ref: "tu_nope.output".into(),
            ..Default::default()
        })
        .await;
    assert_eq!(bad.expect_err("unknown ref").code(), Code::NotFound);
    let bad = home
        .read(pb::ThreadReadRequest {
            target: Some(local(&t.id)),
            content_ref: "nonsense".into(),
            ..Default::default()
        })
        .await;
    assert_invalid(bad, "content_ref", "not a content ref");
}

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

#[tokio::test]
async fn threads_and_turns_survive_a_restart() {
    let mut home = TestHome::builder().start().await;
    let t = home.thread("echo", Some("before")).await;
    home.wait_turns(&t.id, 1).await;
    let id = home.handle().home_id().to_string();
    home.restart().await;
    assert_eq!(home.handle().home_id(), id, "the home id is stable across restarts");
    let turns = home.all_turns(&t.id).await;
    assert_eq!(turns.len(), 1);
    assert_eq!(turns[0].output, "echo: before");
    home.say(&t.id, "after").await.expect("say");
    assert_eq!(home.wait_turns(&t.id, 2).await[1].output, "echo: after");
}

/// A clean stop with a turn in flight records it as failed; input queued behind it runs
/// after the restart. (The kill -9 variant is in the smoke tier.)
#[tokio::test]
async fn a_turn_in_flight_at_shutdown_is_failed_and_the_queue_survives() {
    let mut home = TestHome::builder()
        .shell_profile("slow", "read line; [ \"$line\" = quick ] && echo fast || sleep 30")
        .start()
        .await;
    let t = home.thread("slow", Some("slow")).await;
    eventually("the turn to run", || async {
        (home.thread_record(&t.id).await.state() == pb::ThreadState::Running).then_some(())
    })
    .await;
    home.say(&t.id, "quick").await.expect("queued");
    home.restart().await;
    let turns = home.wait_turns(&t.id, 2).await;
    assert_eq!(turns[0].status(), pb::TurnStatus::Failed);
    assert!(turns[0].error.contains("kikid stopped"), "{}", turns[0].error);
    assert_eq!(turns[1].status(), pb::TurnStatus::Completed, "{}", turns[1].error);
    assert_eq!(turns[1].output, "fast\n");
}

#[tokio::test]
async fn a_turn_token_acts_as_its_thread_and_expires_with_the_turn() {
    let kiki = kiki_tests::binaries::binary("kiki");
    // Inside the turn: create a thread without --cwd (the parent's workspace root), and
    // keep the token to try it after the turn.
    let script = format!(
        "cd /; echo \"$KIKI_TOKEN\" > \"$KIKI_HOME/token\"; {} thread create --json --title child | grep '\"cwd\"'",
        kiki.display()
    );
    let home = TestHome::builder().shell_profile("agent", &script).start().await;
    let (_, t) = thread_in_repo_subdir(&home, "agent").await;
    let turn = home.wait_turns(&t.id, 1).await.remove(0);
    assert_eq!(turn.status(), pb::TurnStatus::Completed, "{}", turn.error);
    // The CLI sends its working directory (here /), so the child lands there; a raw API
    // call without cwd from the turn lands in the parent's workspace root.
    assert!(turn.output.contains("\"cwd\": \"/\""), "{}", turn.output);

    let token = std::fs::read_to_string(home.dir().join("token")).expect("token").trim().to_string();
    let stale = home.client().clone().with_token(&token).expect("token");
    let err = stale
        .threads()
        .thread_create(pb::ThreadCreateRequest::default())
        .await
        .expect_err("the token ended with its turn");
    assert_eq!(err.code(), Code::Unauthenticated);
    assert!(err.message().contains("turn ends"), "{}", err.message());
}

#[tokio::test]
async fn an_api_create_without_cwd_from_a_turn_uses_the_parent_workspace_root() {
    // The agent calls the API directly (as an MCP server would) with its token.
    let home_dir_probe = "read _; echo \"$KIKI_TOKEN\" > \"$KIKI_HOME/token\"; sleep 5";
    let home = TestHome::builder().shell_profile("hold", home_dir_probe).start().await;
    let (repo, t) = thread_in_repo_subdir(&home, "hold").await;
    let token = eventually("the turn's token", || async {
        std::fs::read_to_string(home.dir().join("token")).ok().filter(|t| t.ends_with('\n'))
    })
    .await;
    let agent = home.client().clone().with_token(token.trim()).expect("token");
    let child =
        agent.threads().thread_create(pb::ThreadCreateRequest::default()).await.expect("create").into_inner();
    assert_eq!(child.cwd, repo.display().to_string(), "the caller's workspace root");
    assert_eq!(child.workspace_id, t.workspace_id);
    // Owner actions are not agent tools.
    let say = agent
        .home()
        .thread_say(pb::ThreadSayRequest { target: Some(local(&child.id)), content: "x".into() })
        .await;
    assert_eq!(say.expect_err("owner only").code(), Code::PermissionDenied);
}

/// A repository (`repo/.git`) with a thread on `profile` started in `repo/sub`.
async fn thread_in_repo_subdir(
    home: &TestHome,
    profile: &str,
) -> (std::path::PathBuf, pb::ThreadCreateResponse) {
    let repo = home.workdir("repo");
    std::fs::create_dir_all(repo.join(".git")).expect("git");
    std::fs::create_dir_all(repo.join("sub")).expect("sub");
    let t = home
        .create(pb::ThreadCreateRequest {
            cwd: Some(repo.join("sub").display().to_string()),
            profile: Some(profile.into()),
            prompt: Some("go".into()),
            title: None,
            resume_agent_session: None,
        })
        .await
        .expect("create");
    (repo, t)
}

/// Claims a turn of `thread_id` with message `msg_claimed` while `home` is down, as a kikid
/// that stopped right after the claim would have left it (no agent described), and restarts
/// it; returns the message's status and reason after the restart's recovery.
async fn claim_then_restart(home: &mut TestHome, thread_id: &str, exec: bool) -> (String, String) {
    use kiki_daemon::store::{MessageStore, NewMessage, SqliteStore, Store, TurnClaim};
    let db = home.handle().home_dir().join("kiki.db");
    let thread = thread_id.to_string();
    home.restart_with(async |_| {
        let store = SqliteStore::open_path(&db).await.expect("open");
        let message = NewMessage {
            room: None,
            id: format!("msg_{thread}"),
            target_thread: thread.clone(),
            source: None,
            content: "claimed".into(),
            key_scope: String::new(),
            key: format!("k_{thread}"),
            request_hash: "h".into(),
            wake: true,
            claim: Some(TurnClaim {
                turn_id: format!("tu_{thread}"),
                take_messages: true,
                render: kiki_daemon::executors::render,
                exec,
                budget: None,
                replica: String::new(),
                token_hash: String::new(),
            }),
            receipt: None,
            deadline: None,
            max_agent_wakes: None,
            now: 1,
        };
        store.accept_message(&message).await.expect("claimed");
        store.close().await;
    })
    .await;
    let turns = home.wait_turns(thread_id, 1).await;
    assert_eq!(turns[0].status(), pb::TurnStatus::Failed);
    let db = rusqlite::Connection::open(&db).expect("open");
    db.query_row("SELECT status, reason FROM messages WHERE id = ?", [format!("msg_{thread_id}")], |r| {
        Ok((r.get(0)?, r.get(1)?))
    })
    .expect("message")
}

/// A turn claimed with a message whose agent never got its input (the daemon stopped in
/// between: no agent was described) did not deliver the message after all: the restart fails
/// the turn and makes the message undeliverable.
#[tokio::test]
async fn a_claimed_turn_whose_agent_never_started_does_not_deliver() {
    let mut home = TestHome::builder().shell_profile("agent", "cat").start().await;
    let t = home.thread("agent", None).await;
    let (status, reason) = claim_then_restart(&mut home, &t.id, true).await;
    assert_eq!((status.as_str(), reason.as_str()), ("undeliverable", "kikid_stopped"));
}

/// Recovery goes by what the claim recorded, not by the config of the next run: a profile
/// edited in between can neither undeliver what a turn without an agent delivered nor keep
/// what an exec agent never got.
#[tokio::test]
async fn recovery_goes_by_the_claim_not_by_the_config() {
    let mut home = TestHome::builder().shell_profile("agent", "cat").start().await;
    let exec_profile = home.thread("agent", None).await;
    let (status, _) = claim_then_restart(&mut home, &exec_profile.id, false).await;
    assert_eq!(status, "delivered", "claimed as a turn without an exec agent");
    let echo_profile = home.thread("echo", None).await;
    let (status, reason) = claim_then_restart(&mut home, &echo_profile.id, true).await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("undeliverable", "kikid_stopped"),
        "claimed for an exec agent"
    );
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

/// User input queued while its thread was busy, then archived, is taken when the thread is
/// unarchived (an archived thread starts no turn).
#[tokio::test]
async fn input_queued_before_archiving_is_taken_on_unarchive() {
    let home = TestHome::builder().shell_profile("slow", "cat; sleep 1").start().await;
    let t = home.thread("slow", Some("one")).await;
    let said = home.say(&t.id, "two").await.expect("say");
    assert!(!said.turn_started, "queued behind the running turn");
    let archive = |archived| pb::ThreadArchiveRequest { target: Some(local(&t.id)), archived };
    home.client().home().thread_archive(archive(true)).await.expect("archive");
    home.wait_turns(&t.id, 1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(home.all_turns(&t.id).await.len(), 1, "archived: no turn for the queued input");
    home.client().home().thread_archive(archive(false)).await.expect("unarchive");
    let turns = home.wait_turns(&t.id, 2).await;
    assert_eq!(turns[1].output, "two");
}

/// With the default profile disabled (here the built-in `echo`), a ThreadCreate naming no
/// profile is refused, not given the disabled one.
#[tokio::test]
async fn a_disabled_default_profile_is_not_used() {
    let home = TestHome::builder()
        .config(|c| {
            let echo = kiki_daemon::config::ProfileConfig {
                executor: kiki_daemon::config::ExecutorKind::Echo,
                command: Vec::new(),
                default: false,
                enabled: false,
                thread_communication: None,
                allowed_tools: Vec::new(),
                max_cost_usd: None,
            };
            c.profiles.insert("echo".into(), echo);
        })
        .start()
        .await;
    let err = home.create(create_in(&home.workdir("a"))).await.expect_err("disabled");
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().starts_with("profile") && err.message().contains("disabled"), "{}", err.message());
}
