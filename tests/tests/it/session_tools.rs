//! The home's session tools (files, shell and tasks, todo, cron), on real files and real
//! processes: through `kiki mcp` with a real MCP client (rmcp's), as the owner through the
//! API, and from inside a turn, where the rules ask the owner (approved or denied through
//! permission requests). Every call lands in the thread's history.

use std::time::Duration;

use kiki_proto as pb;
use kiki_tests::binaries::binary;
use kiki_tests::mcp;
use kiki_tests::{TestHome, eventually, local};
use serde_json::{Value, json};

/// The owner's call of `tool` for `thread`: its answer.
async fn call(
    home: &TestHome,
    thread: &str,
    tool: &str,
    arguments: Value,
) -> Result<pb::ToolCallResponse, tonic::Status> {
    let request =
        pb::ToolCallRequest { name: tool.into(), arguments: arguments.to_string(), thread_id: thread.into() };
    home.client().tools().tool_call(request).await.map(|r| r.into_inner())
}

/// A call that ran: its structured result.
async fn ran(home: &TestHome, thread: &str, tool: &str, arguments: Value) -> Value {
    let answer = call(home, thread, tool, arguments).await.expect("answered");
    assert_eq!(answer.outcome, pb::ToolOutcome::Ok as i32, "{tool}: {}", answer.text);
    serde_json::from_str(&answer.structured).expect("structured")
}

/// The thread's tool calls, oldest first.
async fn history(home: &TestHome, thread: &str) -> Vec<pb::ToolCallRecord> {
    let request = pb::ThreadReadRequest {
        target: Some(local(thread)),
        limit: Some(100),
        tool_calls: true,
        ..Default::default()
    };
    home.read(request).await.expect("tool calls").tool_calls
}

async fn thread_in(home: &TestHome, profile: &str, dir: &std::path::Path) -> String {
    let request = pb::ThreadCreateRequest {
        cwd: Some(dir.display().to_string()),
        profile: Some(profile.into()),
        ..Default::default()
    };
    home.create(request).await.expect("thread").id
}

#[tokio::test]
async fn file_tools_through_kiki_mcp_work_in_the_threads_workspace_and_are_kept() {
    let home = TestHome::builder().start().await;
    let workspace = home.workdir("ws");
    let thread = thread_in(&home, "echo", &workspace).await;
    std::fs::write(workspace.join("crlf.txt"), "one\r\ntwo\r\nthree\r\n").expect("file");
    std::fs::write(workspace.join(".gitignore"), "ignored/\n").expect("ignore file");
    std::fs::create_dir_all(workspace.join("ignored")).expect("dir");
    std::fs::write(workspace.join("ignored/hidden.rs"), "fn needle() {}\n").expect("file");
    let (session, _) = mcp::start(&binary("kiki"), Some(home.dir()), &["--thread", &thread], &[], false)
        .await
        .expect("kiki mcp");
    every_session_tool_is_listed(&session).await;
    let tools = Tools(&session);
    tools.read_and_edit(&workspace).await;
    tools.write_and_search(&workspace).await;
    // Bad arguments name the field and leave no record.
    let before = history(&home, &thread).await.len();
    let said = tools.refused("Read", json!({"path": "crlf.txt", "n_lines": 1001})).await;
    assert!(said.contains("invalid_argument") && said.contains("n_lines") && said.contains("1000"), "{said}");
    let said = tools.refused("Read", json!({"path": "crlf.txt", "lines": 5})).await;
    assert!(said.contains("lines") && said.contains("unknown field"), "{said}");
    assert_eq!(history(&home, &thread).await.len(), before, "refused calls are not kept");
    // A missing file is the tool's error, and kept as one.
    assert!(tools.refused("Read", json!({"path": "nope.txt"})).await.contains("nope.txt"));

    // Kept: every call that ran (the refused edits above were bad arguments: not kept).
    let kept = history(&home, &thread).await;
    let names: Vec<&str> = kept.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["Read", "Edit", "Write", "Edit", "Write", "Write", "Glob", "Glob", "Grep", "Read"]);
    assert_eq!(kept[0].seq, 1);
    assert!(kept[0].arguments.contains("crlf.txt") && kept[0].turn_id.is_empty());
    assert!(kept[..9].iter().all(|c| c.outcome == pb::ToolOutcome::Ok as i32));
    assert_eq!(kept[9].outcome, pb::ToolOutcome::Error as i32, "the missing file");
    session.cancel().await.expect("closed");

    // Outside a turn and without --thread, the session tools are not offered.
    let (plain, _) = mcp::start(&binary("kiki"), Some(home.dir()), &[], &[], false).await.expect("kiki mcp");
    let names: Vec<String> =
        plain.list_all_tools().await.expect("tools/list").iter().map(|t| t.name.to_string()).collect();
    assert!(!names.contains(&"Read".to_string()), "{names:?}");
    plain.cancel().await.expect("closed");
}

/// A `kiki mcp --thread` session lists the session tools beside its own, with their schemas
/// and annotations.
async fn every_session_tool_is_listed(session: &mcp::Session) {
    let tools = session.list_all_tools().await.expect("tools/list");
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    for name in [
        "ThreadSend",
        "Read",
        "Write",
        "Edit",
        "Glob",
        "Grep",
        "Bash",
        "TaskList",
        "TaskOutput",
        "TaskStop",
        "TaskWait",
        "TodoList",
        "Cron",
    ] {
        assert!(names.contains(&name), "{name} is listed: {names:?}");
    }
    let read = tools.iter().find(|t| t.name == "Read").expect("Read");
    assert_eq!(read.input_schema["properties"]["n_lines"]["type"], json!(["integer", "null"]));
    assert_eq!(read.annotations.as_ref().and_then(|a| a.read_only_hint), Some(true));
}

/// The session tools through a `kiki mcp` session.
struct Tools<'a>(&'a mcp::Session);

impl Tools<'_> {
    /// A call that ran: its text and structured result.
    async fn ok(&self, tool: &str, arguments: Value) -> (String, Value) {
        let result = mcp::call(self.0, tool, arguments).await.expect("answered");
        assert_ne!(result.is_error, Some(true), "{tool}: {}", mcp::text(&result));
        (mcp::text(&result), result.structured_content.unwrap_or_default())
    }

    /// A call answered as an error: its text.
    async fn refused(&self, tool: &str, arguments: Value) -> String {
        let result = mcp::call(self.0, tool, arguments).await.expect("answered");
        assert_eq!(result.is_error, Some(true), "{tool} should fail: {}", mcp::text(&result));
        mcp::text(&result)
    }

    /// Read: numbered lines, CRLF reported (and shown as LF), negative offsets from the end.
    /// Edit keeps the CRLF; a match that is not unique is refused; identical strings too.
    async fn read_and_edit(&self, workspace: &std::path::Path) {
        let (text, read) = self.ok("Read", json!({"path": "crlf.txt", "line_offset": -2})).await;
        assert_eq!(text, "     2\ttwo\n     3\tthree\n");
        assert_eq!((read["line_endings"].clone(), read["total_lines"].clone()), (json!("crlf"), json!(3)));
        self.ok("Edit", json!({"path": "crlf.txt", "old_string": "two", "new_string": "2"})).await;
        assert_eq!(
            std::fs::read_to_string(workspace.join("crlf.txt")).expect("file"),
            "one\r\n2\r\nthree\r\n"
        );
        self.ok("Write", json!({"path": "dup.txt", "content": "x x"})).await;
        let twice =
            self.refused("Edit", json!({"path": "dup.txt", "old_string": "x", "new_string": "y"})).await;
        assert!(twice.starts_with("invalid_argument") && twice.contains("replace_all"), "{twice}");
        let all = json!({"path": "dup.txt", "old_string": "x", "new_string": "y", "replace_all": true});
        self.ok("Edit", all).await;
        assert_eq!(std::fs::read_to_string(workspace.join("dup.txt")).expect("file"), "y y");
        assert!(
            self.refused("Edit", json!({"path": "dup.txt", "old_string": "y", "new_string": "y"}))
                .await
                .contains("identical")
        );
    }

    /// Write creates parents; append appends. Glob and Grep respect .gitignore unless asked.
    async fn write_and_search(&self, workspace: &std::path::Path) {
        self.ok("Write", json!({"path": "deep/er/new.txt", "content": "a\n"})).await;
        self.ok("Write", json!({"path": "deep/er/new.txt", "content": "b\n", "mode": "append"})).await;
        assert_eq!(std::fs::read_to_string(workspace.join("deep/er/new.txt")).expect("file"), "a\nb\n");
        let (_, globbed) = self.ok("Glob", json!({"pattern": "**/*.rs"})).await;
        assert_eq!(globbed["total"], 0, "{globbed}");
        let (_, globbed) = self.ok("Glob", json!({"pattern": "**/*.rs", "include_ignored": true})).await;
        assert_eq!(globbed["total"], 1, "{globbed}");
        let (_, found) = self
            .ok("Grep", json!({"pattern": "needle", "include_ignored": true, "output_mode": "content"}))
            .await;
        assert_eq!(
            found["entries"][0].as_str().map(|e| e.ends_with("hidden.rs:1:fn needle() {}")),
            Some(true),
            "{found}"
        );
    }
}

#[tokio::test]
async fn a_timed_out_command_moves_to_the_background_and_its_end_is_reported_to_the_thread() {
    let home = TestHome::builder().start().await;
    let thread = thread_in(&home, "echo", &home.workdir("ws")).await;
    // stdin is closed: a command reading it sees its end at once.
    let answer = call(&home, &thread, "Bash", json!({"command": "cat; echo read-all"})).await.expect("ran");
    assert_eq!((answer.outcome, answer.text.as_str()), (pb::ToolOutcome::Ok as i32, "read-all\n"));
    let failed = call(&home, &thread, "Bash", json!({"command": "echo out; exit 3"})).await.expect("ran");
    assert_eq!(failed.outcome, pb::ToolOutcome::Error as i32);
    assert!(failed.text.contains("out") && failed.text.contains("exit code 3"), "{}", failed.text);
    let refused = call(&home, &thread, "Bash", json!({"command": "true", "timeout": 300_001})).await;
    kiki_tests::assert_invalid(refused, "arguments", "300000");

    let wait = |cursor: String| pb::ThreadWaitRequest {
        targets: vec![local(&thread)],
        timeout_ms: Some(0),
        cursors: [(thread.clone(), cursor)].into_iter().filter(|(_, c)| !c.is_empty()).collect(),
    };
    let before = home.client().threads().thread_wait(wait(String::new())).await.expect("wait").into_inner();
    let cursor = before.results[0].cursor.clone();
    let moved =
        ran(&home, &thread, "Bash", json!({"command": "sleep 1; echo finished", "timeout": 200})).await;
    let task = moved["task_id"].as_str().expect("a task id").to_string();
    let listed = ran(&home, &thread, "TaskList", json!({})).await;
    assert_eq!(listed["tasks"][0]["task_id"], task.as_str(), "{listed}");
    // Its end: a `task` event, and the thread's next turn takes the report.
    let turns = home.wait_turns(&thread, 1).await;
    assert!(
        turns[0].input.contains("<task-notification>") && turns[0].input.contains(&task),
        "{}",
        turns[0].input
    );
    assert!(turns[0].input.contains("finished") && turns[0].input.contains("<status>completed</status>"));
    let after = home.client().threads().thread_wait(wait(cursor)).await.expect("wait").into_inner();
    let task_event = after.results[0].events.iter().find(|e| e.kind == pb::EventKind::Task as i32);
    let reason = task_event.map(|e| e.reason.clone()).unwrap_or_default();
    assert!(reason.contains(&task) && reason.contains("completed"), "{after:?}");
    let done = ran(&home, &thread, "TaskList", json!({"active_only": false})).await;
    assert_eq!(done["tasks"][0]["status"], "completed", "{done}");
    let output = ran(&home, &thread, "TaskOutput", json!({"task_id": task})).await;
    assert_eq!(output["output"], "finished\n");
}

#[tokio::test]
async fn a_stopped_task_ends_its_whole_process_group_and_output_pages_by_bytes() {
    let home = TestHome::builder().start().await;
    let workspace = home.workdir("ws");
    let thread = thread_in(&home, "echo", &workspace).await;
    // A child that ignores SIGTERM, and a grandchild: both end (SIGKILL after the grace).
    let started = ran(
        &home,
        &thread,
        "Bash",
        json!({"command": "sleep 300 & echo $! > grandchild; trap '' TERM; while true; do sleep 1; done",
               "run_in_background": true, "description": "stubborn"}),
    )
    .await;
    let task = started["task_id"].as_str().expect("task").to_string();
    let grandchild: i32 = eventually("the grandchild's pid", || async {
        std::fs::read_to_string(workspace.join("grandchild")).ok().and_then(|p| p.trim().parse().ok())
    })
    .await;
    let stopped = std::time::Instant::now();
    let answer = ran(&home, &thread, "TaskStop", json!({"task_id": task, "reason": "enough"})).await;
    assert_eq!(answer["status"], "stopped", "{answer}");
    assert!(stopped.elapsed() >= Duration::from_secs(4), "SIGKILL came after the grace period");
    let gone = nix::sys::signal::kill(nix::unistd::Pid::from_raw(grandchild), None).is_err();
    assert!(gone, "the grandchild was ended with its group");
    // Stopping an ended task is safe.
    ran(&home, &thread, "TaskStop", json!({"task_id": task})).await;

    // Output pages by bytes, never splitting a character.
    let printed = ran(
        &home,
        &thread,
        "Bash",
        // It starts after a pause, so the TaskWait below is waiting when it ends (a task that
        // ended before anyone waited is the thread's to hear of).
        json!({"command": "sleep 1; for i in $(seq 1 2000); do echo \"line $i é\"; done", "run_in_background": true, "description": "print"}),
    )
    .await;
    let task = printed["task_id"].as_str().expect("task").to_string();
    ran(&home, &thread, "TaskWait", json!({"timeout": 30, "task_id": task})).await;
    let first =
        ran(&home, &thread, "TaskOutput", json!({"task_id": task, "offset": 0, "max_bytes": 100})).await;
    assert_eq!((first["offset"].clone(), first["has_more"].clone()), (json!(0), json!(true)));
    let next = first["next_offset"].as_u64().expect("next offset");
    assert!((97..=100).contains(&next), "{first}");
    let text = first["output"].as_str().expect("text");
    assert!(text.starts_with("line 1 é\nline 2 é\n"), "{text}");
    let refused =
        call(&home, &thread, "TaskOutput", json!({"task_id": task, "offset": 0, "max_bytes": 3})).await;
    kiki_tests::assert_invalid(refused, "arguments", "4-32768");
    // The stopped task's end was reported to the thread; the waited one's was TaskWait's to
    // report, not the thread's as well.
    let turns = home.wait_turns(&thread, 1).await;
    assert!(turns[0].input.contains("<status>stopped</status>"), "{}", turns[0].input);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let turns = home.all_turns(&thread).await;
    assert!(turns.iter().all(|t| !t.input.contains(&task)), "the waited task was not reported again");
}

/// Inside a turn the rules ask the owner: Bash (unless the profile allows it) and a write
/// outside the workspace; a write inside it is allowed. A call with bad arguments is refused
/// before anyone is asked.
#[tokio::test]
async fn inside_a_turn_bash_and_writes_outside_the_workspace_ask_the_owner() {
    let outside = tempfile::tempdir().expect("dir");
    let kiki = binary("kiki");
    let script = format!(
        "{kiki} tool call Bash '{{\"command\": \"\"}}' --thread \"$KIKI_THREAD_ID\" >/dev/null 2>&1; \
         {kiki} tool call Bash '{{\"command\": \"echo approved > bash.txt\"}}' --thread \"$KIKI_THREAD_ID\" >/dev/null 2>&1; \
         {kiki} tool call Write '{{\"path\": \"{out}/x.txt\", \"content\": \"x\"}}' --thread \"$KIKI_THREAD_ID\" >/dev/null 2>&1; \
         {kiki} tool call Write '{{\"path\": \"inside.txt\", \"content\": \"in\"}}' --thread \"$KIKI_THREAD_ID\" >/dev/null 2>&1; \
         echo done",
        kiki = kiki.display(),
        out = outside.path().display()
    );
    let home = TestHome::builder()
        .shell_profile("agent", &script)
        .shell_profile("trusted", &script)
        .config(|c| {
            c.profiles.get_mut("trusted").expect("trusted").allowed_tools = vec!["mcp__kiki__Bash".into()]
        })
        .start()
        .await;
    let workspace = home.workdir("agent");
    let thread = thread_in(&home, "agent", &workspace).await;
    // The turn's progress, followed as it runs: its tool calls are parts of it.
    let follow = pb::ThreadFollowRequest {
        target: Some(local(&thread)),
        turn_id: String::new(),
        wait_ms: Some(10_000),
    };
    let mut progress = home.client().threads().thread_follow(follow).await.expect("follow").into_inner();
    home.say(&thread, "go").await.expect("turn");
    let answer = async |allow: bool| {
        let request_id = eventually("a permission request", || async {
            let open =
                home.client().home().attention_list(pb::AttentionListRequest {}).await.ok()?.into_inner();
            open.open.into_iter().filter_map(|o| o.event).map(|e| e.request_id).find(|id| !id.is_empty())
        })
        .await;
        let decide = pb::PermissionDecideRequest {
            request_id,
            allow,
            reason: if allow { String::new() } else { "not there".into() },
        };
        home.client().threads().permission_decide(decide).await.expect("answered");
    };
    answer(true).await;
    answer(false).await;
    home.wait_turns(&thread, 1).await;
    let mut parts = Vec::new();
    while let Some(part) = progress.message().await.expect("part") {
        parts.push((kiki_proto::Word::word(&part.kind()), part.text));
    }
    let kinds: Vec<&str> = parts.iter().map(|(kind, _)| kind.as_str()).collect();
    assert_eq!(
        kinds,
        ["tool", "tool_result", "tool", "tool_result", "tool", "tool_result", "end"],
        "{parts:?}"
    );
    assert!(parts[0].1.starts_with("Bash {") && parts[1].1.starts_with("Bash: ok in"), "{parts:?}");
    assert!(parts[3].1.starts_with("Write: denied"), "{parts:?}");
    assert_eq!(std::fs::read_to_string(workspace.join("bash.txt")).expect("approved bash ran"), "approved\n");
    assert!(!outside.path().join("x.txt").exists(), "the denied write was not made");
    assert_eq!(std::fs::read_to_string(workspace.join("inside.txt")).expect("written"), "in");
    let kept = history(&home, &thread).await;
    let summary: Vec<(&str, i32)> = kept.iter().map(|c| (c.name.as_str(), c.outcome)).collect();
    assert_eq!(
        summary,
        [
            ("Bash", pb::ToolOutcome::Ok as i32),
            ("Write", pb::ToolOutcome::Denied as i32),
            ("Write", pb::ToolOutcome::Ok as i32)
        ]
    );
    assert!(kept.iter().all(|c| !c.turn_id.is_empty()), "kept with their turn");
    assert!(kept[1].result.contains("not there"), "{}", kept[1].result);

    // A profile that allows Bash: it runs unasked (only the outside write asks).
    let trusted_dir = home.workdir("trusted");
    let trusted = thread_in(&home, "trusted", &trusted_dir).await;
    home.say(&trusted, "go").await.expect("turn");
    answer(false).await;
    home.wait_turns(&trusted, 1).await;
    assert!(trusted_dir.join("bash.txt").exists());
    let outcomes: Vec<i32> = history(&home, &trusted).await.iter().map(|c| c.outcome).collect();
    assert_eq!(
        outcomes,
        [pb::ToolOutcome::Ok as i32, pb::ToolOutcome::Denied as i32, pb::ToolOutcome::Ok as i32]
    );
}

#[tokio::test]
async fn todo_list_keeps_revisions_and_refuses_a_call_over_its_limits_whole() {
    let home = TestHome::builder().start().await;
    let thread = thread_in(&home, "echo", &home.workdir("ws")).await;
    let empty = ran(&home, &thread, "TodoList", json!({})).await;
    assert_eq!((empty["revision"].clone(), empty["todos"].clone()), (json!(0), json!([])));
    let first = ran(
        &home,
        &thread,
        "TodoList",
        json!({"todos": [{"title": "write tests", "status": "in_progress"}], "notes": {"goal": "ship tools"}}),
    )
    .await;
    assert_eq!(first["revision"], 1);
    assert_eq!(first["changed"], json!(["todos", "notes.goal"]));
    assert_eq!(first["counts"]["in_progress"], 1);
    let over =
        call(&home, &thread, "TodoList", json!({"todos": [], "notes": {"next": "x".repeat(1501)}})).await;
    kiki_tests::assert_invalid(over, "arguments", "1500");
    let now = ran(&home, &thread, "TodoList", json!({})).await;
    assert_eq!(now["revision"], 1, "nothing changed");
    assert_eq!(now["todos"][0]["title"], "write tests");
    let cleared = ran(&home, &thread, "TodoList", json!({"notes": null})).await;
    assert_eq!((cleared["revision"].clone(), cleared["cleared"].clone()), (json!(2), json!(["notes.goal"])));
}

/// A cron survives a restart, and the fires it missed while the home was down come as one.
#[tokio::test]
async fn a_cron_fires_after_a_restart_once_for_the_fires_it_missed() {
    let clock = kiki_tests::manual_clock();
    let mut home = TestHome::builder().clock(&clock).start().await;
    let thread = thread_in(&home, "echo", &home.workdir("ws")).await;
    let created = ran(
        &home,
        &thread,
        "Cron",
        json!({"action": "create", "cron": "*/5 * * * *", "prompt": "check the build"}),
    )
    .await;
    assert_eq!(created["humanSchedule"], "At every 5 minutes.");
    let refused =
        call(&home, &thread, "Cron", json!({"action": "create", "cron": "* * * *", "prompt": "x"})).await;
    kiki_tests::assert_invalid(refused, "arguments", "5 fields");
    let down = clock.clone();
    home.restart_with(async move |_| down.advance(Duration::from_secs(16 * 60)).await).await;
    let turns = home.wait_turns(&thread, 1).await;
    let input = &turns[0].input;
    assert!(input.contains("<cron-fire") && input.contains("check the build"), "{input}");
    let coalesced: u32 = input
        .split("coalescedCount=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .and_then(|n| n.parse().ok())
        .expect("a count");
    assert!((3..=4).contains(&coalesced), "16 minutes down: 3 or 4 fires missed, got {coalesced}");
    let listed = ran(&home, &thread, "Cron", json!({"action": "list"})).await;
    assert_eq!(listed["crons"].as_array().map(Vec::len), Some(1), "a recurring cron stays");
    let id = listed["crons"][0]["id"].as_str().expect("id").to_string();
    ran(&home, &thread, "Cron", json!({"action": "delete", "id": id})).await;
    let gone = call(&home, &thread, "Cron", json!({"action": "delete", "id": id})).await.expect("answered");
    assert!(gone.text.contains("No cron job with id"), "{}", gone.text);
    // At most 50 per thread.
    for i in 0..50 {
        ran(
            &home,
            &thread,
            "Cron",
            json!({"action": "create", "cron": "0 3 * * *", "prompt": format!("p{i}")}),
        )
        .await;
    }
    let full =
        call(&home, &thread, "Cron", json!({"action": "create", "cron": "0 3 * * *", "prompt": "one more"}))
            .await
            .expect("answered");
    assert!(full.text.contains("50"), "{}", full.text);
}

/// A cron made while the scheduler sleeps (nothing due for an hour) fires on time: the
/// store publishes its commit, and the scheduler looks at the next fire time again.
#[tokio::test]
async fn a_cron_made_while_the_scheduler_sleeps_fires_on_time() {
    let clock = kiki_tests::manual_clock();
    let home = TestHome::builder().clock(&clock).start().await;
    let thread = thread_in(&home, "echo", &home.workdir("ws")).await;
    let every_five = json!({"action": "create", "cron": "*/5 * * * *", "prompt": "look around"});
    ran(&home, &thread, "Cron", every_five).await;
    // Its first fire is at most 5 minutes and its jitter (30 s) away.
    clock.advance(Duration::from_secs(6 * 60)).await;
    let turns = home.wait_turns(&thread, 1).await;
    assert!(turns[0].input.contains("look around"), "{}", turns[0].input);
}

/// A team home's replicas hear of each other's crons: one made through the first replica,
/// which then stops, is fired by the second when it is due.
#[tokio::test]
async fn a_cron_made_through_one_replica_is_fired_by_another() {
    let database = kiki_tests::postgres::TestDatabase::create().await;
    let clock = kiki_tests::manual_clock();
    let url = database.url_with_password();
    let r1 = TestHome::builder().clock(&clock).config(|c| c.store.url = Some(url)).start().await;
    let r2 = TestHome::builder().clock(&clock).replica_of(&r1).start().await;
    let thread = thread_in(&r1, "echo", &r1.workdir("ws")).await;
    let every_five = json!({"action": "create", "cron": "*/5 * * * *", "prompt": "look around"});
    ran(&r1, &thread, "Cron", every_five).await;
    r1.handle().shutdown();
    r1.handle().stopped().await;
    // The second's scheduler slept until an hour from now, the most it sleeps: only the
    // change it heard makes it fire in 6 minutes.
    clock.advance(Duration::from_secs(6 * 60)).await;
    let turns = r2.wait_turns(&thread, 1).await;
    assert!(turns[0].input.contains("look around"), "{}", turns[0].input);
}

/// A task an agent starts in the background outlives its turn; its end starts the thread's
/// next turn, which gets the report as its input.
#[tokio::test]
async fn a_background_task_outlives_its_turn_and_its_end_is_the_next_turns_input() {
    let script = format!(
        "if grep -q start; then {kiki} tool call Bash '{{\"command\": \"sleep 1; echo late\", \"run_in_background\": true, \"description\": \"late\"}}' --thread \"$KIKI_THREAD_ID\" >/dev/null; fi; echo ok",
        kiki = binary("kiki").display()
    );
    let home = TestHome::builder()
        .shell_profile("agent", &script)
        .config(|c| c.profiles.get_mut("agent").expect("agent").allowed_tools = vec!["Bash".into()])
        .start()
        .await;
    let thread = thread_in(&home, "agent", &home.workdir("agent")).await;
    home.say(&thread, "start the slow job").await.expect("turn");
    let turns = home.wait_turns(&thread, 2).await;
    assert_eq!(turns[0].output, "ok\n");
    assert!(turns[1].started_at > turns[0].ended_at, "the report came after the first turn ended");
    let report = &turns[1].input;
    assert!(report.contains("<task-notification>") && report.contains("late"), "{report}");
    let kept = history(&home, &thread).await;
    assert_eq!((kept.len(), kept[0].turn_id.as_str()), (1, turns[0].id.as_str()));
}
