//! Threads in one home, in process: every limit and default of ThreadCreate, ThreadList and
//! ThreadRead, paging, content refs, archive, user input, and the executors.
//!
//! By subject: creating and listing threads here; `reads` (paging turns, content refs),
//! `turns` (user input and the exec executor's turns), `tokens` (what a turn's token may do),
//! `recovery` (restarts, and turns a stop interrupted).

mod reads;
mod recovery;
mod tokens;
mod turns;

use std::time::Duration;

use kiki_proto as pb;
use kiki_tests::{TestHome, assert_invalid, local};
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
