//! `kiki mcp` driven by a real MCP client (rmcp's), as an agent CLI drives it: the tools'
//! schemas and annotations, every tool's success path, limits as tool errors, attribution
//! from inside an exec turn, long waits (budget, progress, cancellation), messages pushed
//! into a running turn, and a cross-home send and wait through a bridge.

use std::time::{Duration, Instant};

use kiki_proto as pb;
use kiki_tests::binaries::binary;
use kiki_tests::mcp::{self, Pushed, Session};
use kiki_tests::{TestHome, eventually};
use rmcp::model::CallToolResult;
use serde_json::{Value, json};

async fn start(home: &TestHome) -> Session {
    mcp::start(&binary("kiki"), Some(home.dir()), &[], &[], false).await.expect("kiki mcp starts").0
}

async fn ok(session: &Session, tool: &str, arguments: Value) -> Value {
    let result = mcp::call(session, tool, arguments).await.expect("the call is answered");
    assert_ne!(result.is_error, Some(true), "{tool} failed: {}", mcp::text(&result));
    result.structured_content.clone().expect("structured content")
}

/// A tool error's text.
async fn refused(session: &Session, tool: &str, arguments: Value) -> String {
    let result: CallToolResult = mcp::call(session, tool, arguments).await.expect("the call is answered");
    assert_eq!(result.is_error, Some(true), "{tool} should fail: {}", mcp::text(&result));
    mcp::text(&result)
}

#[tokio::test]
async fn the_seven_tools_are_listed_with_schemas_annotations_and_descriptions() {
    let home = TestHome::builder().start().await;
    let session = start(&home).await;
    let info = session.peer_info().expect("server info");
    assert_eq!(
        info.server_info.as_ref().map(|s| s.name.as_str()),
        Some("kiki"),
        "tools show as mcp__kiki__…"
    );
    let tools = session.list_all_tools().await.expect("tools/list");
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(
        names,
        ["ThreadCreate", "ThreadList", "ThreadRead", "ThreadSend", "ThreadWait", "RoomRead", "RoomAdd"]
    );
    for tool in &tools {
        assert_eq!(tool.input_schema.get("type"), Some(&json!("object")), "{}", tool.name);
        let output = tool.output_schema.as_ref().expect("an output schema");
        assert_eq!(output.get("type"), Some(&json!("object")), "{}", tool.name);
        assert!(tool.title.is_some(), "{} has a title", tool.name);
        assert!(tool.description.as_ref().is_some_and(|d| d.len() > 100), "{} is described", tool.name);
        let hints = tool.annotations.as_ref().expect("annotations");
        assert_eq!(hints.destructive_hint, Some(false), "{}", tool.name);
        let reads = ["ThreadList", "ThreadRead", "ThreadWait", "RoomRead"].contains(&tool.name.as_ref());
        assert_eq!(hints.read_only_hint, Some(reads), "{}", tool.name);
    }
    let send = tools.iter().find(|t| t.name == "ThreadSend").expect("ThreadSend");
    assert_eq!(send.annotations.as_ref().and_then(|a| a.idempotent_hint), Some(true));
    let description = send.description.as_deref().unwrap_or_default();
    for word in ["100,000", "256", "delivered", "pending", "20,000", "reuse a key only"] {
        assert!(description.contains(word), "ThreadSend's description says {word:?}");
    }
    let properties = send.input_schema.get("properties").expect("properties");
    for name in [
        "session_id",
        "host_id",
        "workspace_id",
        "bridge_id",
        "room",
        "content",
        "idempotency_key",
        "mentions",
    ] {
        assert!(properties.get(name).is_some(), "ThreadSend takes {name}");
    }
    let wait = tools.iter().find(|t| t.name == "ThreadWait").expect("ThreadWait");
    let timeout = &wait.input_schema["properties"]["timeout_ms"];
    assert_eq!((timeout["minimum"].clone(), timeout["maximum"].clone()), (json!(0), json!(60000)));
}

#[tokio::test]
async fn every_tool_answers_with_structured_content_and_text() {
    let home = TestHome::builder().start().await;
    let session = start(&home).await;
    let cwd = home.workdir("mcp").display().to_string();
    let created = ok(&session, "ThreadCreate", json!({"cwd": cwd, "prompt": "hello"})).await;
    let thread = created["id"].as_str().expect("id").to_string();
    assert_eq!((created["title"].clone(), created["prompt_started"].clone()), (json!("hello"), json!(true)));

    let listed = ok(&session, "ThreadList", json!({"limit": 10})).await;
    assert!(listed["threads"].as_array().expect("threads").iter().any(|t| t["id"] == json!(thread)));

    let waited =
        ok(&session, "ThreadWait", json!({"targets": [{"session_id": thread}], "timeout_ms": 10000})).await;
    let events = &waited["results"][0]["events"];
    assert_eq!(events[0]["kind"], json!("terminal"), "{waited}");
    let cursor = waited["results"][0]["cursor"].as_str().expect("cursor").to_string();
    // With the cursor carried forward, the same event does not come back.
    let again = ok(
        &session,
        "ThreadWait",
        json!({"targets": [{"session_id": thread, "cursor": cursor}], "timeout_ms": 0}),
    )
    .await;
    assert_eq!(again["results"][0]["events"], json!([]), "{again}");

    let read = ok(&session, "ThreadRead", json!({"session_id": thread})).await;
    assert_eq!(read["turns"][0]["output"], json!("echo: hello"));
    let text =
        mcp::text(&mcp::call(&session, "ThreadRead", json!({"session_id": thread})).await.expect("read"));
    assert!(text.starts_with("1 turn(s)") && text.contains("echo: hello"), "{text}");

    let send = json!({"session_id": thread, "content": "ping", "idempotency_key": "k1"});
    let sent = ok(&session, "ThreadSend", send.clone()).await;
    assert_eq!(sent["status"], json!("delivered"));
    let replay = ok(&session, "ThreadSend", send).await;
    assert_eq!(
        (replay["message_id"].clone(), replay["replayed"].clone()),
        (sent["message_id"].clone(), json!(true))
    );

    // Rooms: the owner makes one; the tools read it, add to it and post to it.
    let other = home.thread("echo", None).await.id;
    let room = home.create_room(thread.clone(), "mcp").await.id;
    let added = ok(&session, "RoomAdd", json!({"room": room, "session_id": other})).await;
    assert_eq!(added["added"], json!(true));
    let unchanged = ok(&session, "RoomAdd", json!({"room": room, "session_id": other})).await;
    assert_eq!(unchanged["added"], json!(false));
    let posted =
        ok(&session, "ThreadSend", json!({"room": room, "content": "hi all", "mentions": [other]})).await;
    assert_eq!(posted["status"], json!("delivered"));
    let log = ok(&session, "RoomRead", json!({"room": room, "limit": 10})).await;
    assert_eq!(log["host"], json!(thread));
    let entries = log["entries"].as_array().expect("entries");
    assert!(entries.iter().any(|e| e["content"] == json!("hi all")), "{log}");
    assert_eq!(log["members"].as_array().expect("members").len(), 2);
}

#[tokio::test]
async fn bad_input_is_a_tool_error_naming_the_field_and_limit_and_leaves_no_trace() {
    let home = TestHome::builder().start().await;
    let session = start(&home).await;
    let thread = home.thread("echo", None).await.id;
    let long = "x".repeat(100_001);
    let text = refused(
        &session,
        "ThreadSend",
        json!({"session_id": thread, "content": long, "idempotency_key": "k"}),
    )
    .await;
    assert!(text.contains("content") && text.contains("100000"), "{text}");
    let key = "k".repeat(257);
    let text = refused(
        &session,
        "ThreadSend",
        json!({"session_id": thread, "content": "c", "idempotency_key": key}),
    )
    .await;
    assert!(text.contains("idempotency_key") && text.contains("256"), "{text}");
    let text = refused(&session, "ThreadList", json!({"limit": 101})).await;
    assert!(text.contains("limit") && text.contains("100"), "{text}");
    let text = refused(&session, "ThreadList", json!({"limit": -1})).await;
    assert!(text.contains("limit") && text.contains("non-negative"), "{text}");
    let targets: Vec<Value> = (0..9).map(|i| json!({"session_id": format!("th_{i}")})).collect();
    let text = refused(&session, "ThreadWait", json!({"targets": targets})).await;
    assert!(text.contains("targets") && text.contains('8'), "{text}");
    let text =
        refused(&session, "ThreadWait", json!({"targets": [{"session_id": thread}], "timeout_ms": 60001}))
            .await;
    assert!(text.contains("timeout_ms") && text.contains("60000"), "{text}");
    let text = refused(&session, "ThreadRead", json!({"sesion_id": thread})).await;
    assert!(text.contains("sesion_id") && text.contains("not a parameter"), "{text}");
    let text = refused(&session, "ThreadRead", json!({})).await;
    assert!(text.contains("session_id") && text.contains("required"), "{text}");
    let text = refused(&session, "ThreadCreate", json!({"prompt": "p".repeat(100_001)})).await;
    assert!(text.contains("prompt") && text.contains("100000"), "{text}");
    let text = refused(&session, "RoomRead", json!({"room": "room_nope"})).await;
    assert!(text.starts_with("not_found"), "{text}");
    // A key reused for another message: refused, with what to do.
    ok(&session, "ThreadSend", json!({"session_id": thread, "content": "one", "idempotency_key": "same"}))
        .await;
    let text = refused(
        &session,
        "ThreadSend",
        json!({"session_id": thread, "content": "two", "idempotency_key": "same"}),
    )
    .await;
    // kikid's words and kiki mcp's advice, each a sentence.
    assert!(text.contains("same target and content. Use a new idempotency_key"), "{text}");
    // A send to a thread needs a key: said to be missing, not "empty".
    let text = refused(&session, "ThreadSend", json!({"session_id": thread, "content": "no key"})).await;
    assert!(text.starts_with("invalid_argument: idempotency_key: required"), "{text}");
    // Nothing refused was written: the thread got the one message, in one turn.
    let turns = home.wait_turns(&thread, 1).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(home.all_turns(&thread).await.len(), 1, "{turns:?}");
    let listed = ok(&session, "ThreadList", json!({})).await;
    assert_eq!(listed["threads"].as_array().expect("threads").len(), 1, "no thread was created");

    // A bad cursor is named as the tool's parameter, not kikid's gRPC field.
    let other = home.thread("echo", None).await.id;
    let checked =
        ok(&session, "ThreadWait", json!({"targets": [{"session_id": thread}], "timeout_ms": 0})).await;
    let good = checked["results"][0]["cursor"].clone();
    let targets = json!([{"session_id": thread, "cursor": good}, {"session_id": other, "cursor": "junk"}]);
    let text = refused(&session, "ThreadWait", json!({"targets": targets, "timeout_ms": 0})).await;
    assert!(text.starts_with("invalid_argument: targets[1].cursor: "), "{text}");
    assert!(!text.contains("cursors") && text.contains(&format!("the cursor for {other} ")), "{text}");
}

/// A client that sends calls without reading the answers: `kiki mcp` stops reading calls
/// while answers wait (the client's writes block, as over a pipe), so it holds a few
/// answers, not all of them; once the client reads, every answer arrives.
#[tokio::test]
async fn a_client_that_stops_reading_holds_its_calls_back_and_kiki_mcp_stays_small() {
    let home = TestHome::builder().start().await;
    // ThreadList answers of ~100 KB: 50 threads with long titles.
    let cwd = home.workdir("many").display().to_string();
    for i in 0..50 {
        let title = format!("thread {i} {}", "t".repeat(190));
        let request =
            pb::ThreadCreateRequest { cwd: Some(cwd.clone()), title: Some(title), ..Default::default() };
        home.client().threads().thread_create(request).await.expect("thread");
    }
    let mut raw = mcp::Raw::start(&binary("kiki"), home.dir()).await.expect("kiki mcp");
    let pid = raw.pid().expect("pid");
    const CALLS: u64 = 1500;
    let mut stdin = raw.take_stdin().expect("stdin");
    let writer = tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        for id in 1..=CALLS {
            let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                "params": {"name": "ThreadList", "arguments": {}}});
            stdin.write_all(format!("{call}\n").as_bytes()).await.expect("write a call");
        }
        stdin
    });
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!writer.is_finished(), "kiki mcp read every call although nobody read an answer");

    let mut answered = std::collections::HashSet::new();
    while answered.len() < CALLS as usize {
        let answer = raw.answer().await.expect("an answer");
        assert_eq!(answer["result"]["isError"], json!(false), "{answer}");
        answered.insert(answer["id"].as_u64().expect("id"));
    }
    let _stdin = writer.await.expect("every call written once answers were read");
    let peak_kb = kiki_tests::measure::peak_rss_kb_of(pid);
    // Unbounded, 1,500 such answers took ~300 MB; bounded, ~20 MB.
    assert!(peak_kb < 100 * 1024, "kiki mcp peaked at {peak_kb} kB");
}

/// Every request line gets an answer, keeping its id where it has one: a line that is not
/// JSON (-32700), a tools/call without params or with arguments that are not an object
/// (-32602), and an over-long call of any size, which gets the same limit error as content
/// just over its limit — never silence, never kikid's message limit.
#[tokio::test]
async fn every_request_line_is_answered_whatever_it_holds_and_however_long() {
    let home = TestHome::builder().start().await;
    let thread = home.thread("echo", None).await.id;
    let mut raw = mcp::Raw::start(&binary("kiki"), home.dir()).await.expect("kiki mcp");
    let mut ask = async |line: &[u8]| {
        raw.send(line).await.expect("write");
        raw.answer().await.expect("answered")
    };
    let error = |answer: &Value| (answer["id"].clone(), answer["error"]["code"].clone());

    let answer = ask(b"this is not JSON").await;
    assert_eq!(error(&answer), (Value::Null, json!(-32700)), "{answer}");
    let answer = ask(br#"{"jsonrpc":"2.0","id":2,"method":"tools/call"}"#).await;
    assert_eq!(error(&answer), (json!(2), json!(-32602)), "{answer}");
    let answer = ask(
        br#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"ThreadList","arguments":[1]}}"#,
    )
    .await;
    assert_eq!(error(&answer), (json!(3), json!(-32602)), "{answer}");
    let answer =
        ask(br#"{"jsonrpc":"2.0","id":"four","method":"tools/call","params":{"name":"ThreadList","arguments":"x"}}"#)
            .await;
    assert_eq!(error(&answer), (json!("four"), json!(-32602)), "{answer}");
    assert!(answer["error"]["message"].as_str().is_some_and(|m| m.contains("arguments")), "{answer}");
    let answer = ask(br#"{"id":5,"method":"ping"}"#).await;
    assert_eq!(error(&answer), (json!(5), json!(-32600)), "no jsonrpc: {answer}");

    // Content of every size past the limit: the same error, under the call's id (given
    // last here, as some clients write it).
    for chars in [100_001, 3 << 20, 5 << 20, 20 << 20] {
        let line = format!(
            r#"{{"jsonrpc":"2.0","method":"tools/call","params":{{"name":"ThreadSend","arguments":{{"session_id":"{thread}","content":"{}","idempotency_key":"k"}}}},"id":"big-{chars}"}}"#,
            "x".repeat(chars)
        );
        let answer = ask(line.as_bytes()).await;
        assert_eq!(answer["id"], json!(format!("big-{chars}")), "{chars}");
        assert_eq!(answer["result"]["isError"], json!(true), "{chars}: {answer}");
        assert_eq!(
            answer["result"]["content"][0]["text"],
            json!(format!("invalid_argument: content: must be at most 100000 characters, got {chars}")),
            "{chars}"
        );
    }
    // An over-long line that is no call: refused under its id, or id null without one.
    let padding = "p".repeat(5 << 20);
    let line =
        format!(r#"{{"jsonrpc":"2.0","id":8,"method":"tools/list","params":{{"cursor":"{padding}"}}}}"#);
    let answer = ask(line.as_bytes()).await;
    assert_eq!(error(&answer), (json!(8), json!(-32600)), "{}", answer["error"]);
    let answer = ask(format!(r#"{{"junk":"{padding}"}}"#).as_bytes()).await;
    assert_eq!(error(&answer), (Value::Null, json!(-32600)), "{}", answer["error"]);

    // The session goes on, and nothing refused was written.
    let answer = ask(
        br#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"ThreadList","arguments":{}}}"#,
    )
    .await;
    assert_eq!((answer["id"].clone(), answer["result"]["isError"].clone()), (json!(9), json!(false)));
    assert!(home.all_turns(&thread).await.is_empty(), "no message was sent");
}

#[tokio::test]
async fn a_home_that_is_not_running_is_one_clear_error_at_once() {
    let dir = tempfile::tempdir().expect("dir");
    let started = Instant::now();
    let (session, _) = mcp::start(&binary("kiki"), Some(dir.path()), &[], &[], false).await.expect("starts");
    assert_eq!(session.list_all_tools().await.expect("tools without a home").len(), 7);
    let text = refused(&session, "ThreadList", json!({})).await;
    assert!(text.contains("kikid is not running") && text.contains("kiki up"), "{text}");
    assert!(started.elapsed() < Duration::from_secs(5), "at once, not a hang");
}

/// A send made by an agent inside an exec turn, through `kiki mcp`, is attributed to its
/// thread; a server started with a turn's token after that turn ended is refused.
#[tokio::test]
async fn a_send_from_inside_a_turn_is_attributed_to_its_thread() {
    let token_file = tempfile::NamedTempFile::new().expect("file");
    let script = format!(
        "echo \"$KIKI_TOKEN\" > {}; exec {} {}",
        token_file.path().display(),
        binary("mcp-agent").display(),
        binary("kiki").display()
    );
    let home = TestHome::builder()
        .shell_profile("agent", &script)
        .config(|c| c.thread_communication.enabled = Some(true))
        .start()
        .await;
    let target = home.thread("echo", None).await.id;
    let source = home.thread("agent", Some(&format!("send {target}"))).await.id;
    let turns = home.wait_turns(&source, 1).await;
    assert!(turns[0].output.starts_with("send: ") && turns[0].output.contains("delivered"), "{:?}", turns[0]);
    let received = home.wait_turns(&target, 1).await;
    let input = &received[0].inputs[0];
    assert_eq!(input.source.as_ref().map(|s| s.session_id.as_str()), Some(source.as_str()), "{input:?}");
    assert_eq!(received[0].output, "echo: hello from the agent");

    let token = std::fs::read_to_string(token_file.path()).expect("token");
    let env = [("KIKI_TOKEN", token.trim())];
    let (late, _) = mcp::start(&binary("kiki"), Some(home.dir()), &[], &env, false).await.expect("starts");
    let text = refused(
        &late,
        "ThreadSend",
        json!({"session_id": target, "content": "late", "idempotency_key": "l"}),
    )
    .await;
    assert!(text.starts_with("unauthenticated") && text.contains("turn ends. This kiki mcp"), "{text}");
    assert!(text.contains("not made as anyone else"), "{text}");
}

#[tokio::test]
async fn a_wait_answers_before_the_clients_limit_sends_progress_and_ends_when_cancelled() {
    let home = TestHome::builder().start().await;
    let thread = home.thread("echo", None).await.id;
    // A client that gives a call 6 s: a 60 s wait answers at 4 s, timed out, with a cursor.
    let (session, mut pushed) =
        mcp::start(&binary("kiki"), Some(home.dir()), &["--tool-timeout-ms", "6000"], &[], false)
            .await
            .expect("starts");
    let started = Instant::now();
    let waited =
        ok(&session, "ThreadWait", json!({"targets": [{"session_id": thread}], "timeout_ms": 60000})).await;
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(3500) && took < Duration::from_millis(5900),
        "answered after {took:?}"
    );
    assert_eq!(waited["timed_out"], json!(true));
    assert!(waited["results"][0]["cursor"].as_str().is_some_and(|c| !c.is_empty()));

    // Asked with a progress token: notes while it waits. Cancelled: it ends, parking nothing.
    while pushed.try_recv().is_ok() {} // the first wait's notes
    let request = rmcp::model::ClientRequest::CallToolRequest(rmcp::model::Request::new(
        rmcp::model::CallToolRequestParams::new("ThreadWait").with_arguments(
            json!({"targets": [{"session_id": thread}], "timeout_ms": 30000})
                .as_object()
                .cloned()
                .unwrap_or_default(),
        ),
    ));
    let handle = session
        .send_cancellable_request(request, rmcp::service::PeerRequestOptions::no_options())
        .await
        .expect("sent");
    let note = tokio::time::timeout(Duration::from_secs(5), pushed.recv()).await.expect("progress in time");
    // Its total is the most this call waits: 4 s (the client's 6 s less 2), not the 30 s asked.
    let Some(Pushed::Progress(note)) = note else { panic!("not progress: {note:?}") };
    assert_eq!(note.total, Some(4000.0), "{note:?}");
    assert!(home.handle().parked_threads() > 0, "the wait is parked");
    handle.cancel(Some("enough".into())).await.expect("cancelled");
    eventually("the cancelled wait to leave nothing parked", || async {
        (home.handle().parked_threads() == 0).then_some(())
    })
    .await;
    // The server goes on serving.
    ok(&session, "ThreadList", json!({})).await;
}

/// Inside a turn whose client takes `claude/channel`, a message to the busy thread is
/// pushed into the running turn and counted delivered then; it never starts another turn.
/// A client without the capability gets nothing pushed and the message waits as ever.
#[tokio::test]
async fn messages_are_pushed_into_a_running_turn_only_to_a_client_that_takes_them() {
    let agent = format!("exec {} {}", binary("mcp-agent").display(), binary("kiki").display());
    let home = TestHome::builder().shell_profile("agent", &agent).start().await;
    let session = start(&home).await;
    let listening = home.thread("agent", Some("listen 2")).await.id;
    home.wait_running(&listening).await;
    let sent = ok(
        &session,
        "ThreadSend",
        json!({"session_id": listening, "content": "are you there?", "idempotency_key": "push-1"}),
    )
    .await;
    assert_eq!(sent["status"], json!("delivered"), "delivered into the running turn: {sent}");
    // A room post that wakes it (the owner's, to the room's host) is pushed too.
    let room = home.create_room(listening.clone(), "pushed").await.id;
    let posted = ok(&session, "ThreadSend", json!({"room": room, "content": "room news"})).await;
    let turns = home.wait_turns(&listening, 1).await;
    let id = sent["message_id"].as_str().expect("id");
    let entry = posted["message_id"].as_str().expect("entry id");
    assert_eq!(
        turns[0].output.trim_end(),
        format!(
            "pushed from owner ({id}): are you there?\npushed from owner ({room} entry {entry}): room news"
        )
    );
    assert!(turns[0].inputs.iter().any(|i| i.message_id == id), "recorded with the turn: {:?}", turns[0]);
    assert!(turns[0].inputs.iter().any(|i| i.room_entry == entry), "recorded with the turn: {:?}", turns[0]);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(home.all_turns(&listening).await.len(), 1, "no later turn took them again");

    // Longer than the send's wait for delivery (3 s): the send answers `pending`.
    let deaf = home.thread("agent", Some("deaf 4000")).await.id;
    home.wait_running(&deaf).await;
    let waiting = ok(
        &session,
        "ThreadSend",
        json!({"session_id": deaf, "content": "later", "idempotency_key": "push-2"}),
    )
    .await;
    assert_eq!(waiting["status"], json!("pending"), "{waiting}");
    let turns = home.wait_turns(&deaf, 2).await;
    assert_eq!(turns[0].output.trim_end(), "pushed to a client without the capability: 0");
    assert!(turns[1].output.contains("unknown command \"later\""), "the next turn took it: {:?}", turns[1]);
}

/// Through a bridge: ThreadList of the home behind it, a ThreadSend that wakes a thread
/// there, and a ThreadWait that sees its turn end — all by the bridge's name.
#[tokio::test]
async fn a_send_and_a_wait_cross_homes_through_a_bridge() {
    let (a, b) = (kiki_tests::bridges::open_home().await, kiki_tests::bridges::open_home().await);
    a.bridge_to(&b, "read,send,wake,wait").await;
    let thread = b.thread("echo", None).await.id;
    let session = start(&a).await;
    let listed = ok(&session, "ThreadList", json!({"bridge_id": "bee"})).await;
    assert!(
        listed["threads"].as_array().expect("threads").iter().any(|t| t["id"] == json!(thread)),
        "{listed}"
    );
    let sent = ok(
        &session,
        "ThreadSend",
        json!({"bridge_id": "bee", "session_id": thread, "content": "over the bridge", "idempotency_key": "x1"}),
    )
    .await;
    assert!(["delivered", "pending"].contains(&sent["status"].as_str().unwrap_or_default()), "{sent}");
    let waited = ok(
        &session,
        "ThreadWait",
        json!({"targets": [{"host_id": "bee", "session_id": thread}], "timeout_ms": 20000}),
    )
    .await;
    let events = waited["results"][0]["events"].as_array().expect("events");
    assert!(events.iter().any(|e| e["kind"] == json!("terminal")), "{waited}");
    let read = ok(&session, "ThreadRead", json!({"session_id": format!("bee/{thread}")})).await;
    assert_eq!(read["turns"][0]["output"], json!("echo: over the bridge"), "{read}");
    // Two selectors that name different homes: refused, naming both.
    let text = refused(
        &session,
        "ThreadRead",
        json!({"host_id": "bee", "bridge_id": "other", "session_id": thread}),
    )
    .await;
    assert!(text.contains("bridge_id") && text.contains("host_id"), "{text}");
}

/// A second, independent client: the Python MCP SDK (installed by tests/run-all.sh), which
/// checks each result's structuredContent against the output schema kiki lists.
#[tokio::test]
async fn the_python_sdk_negotiates_and_every_result_matches_its_output_schema() {
    let home = TestHome::builder().start().await;
    let host = home.thread("echo", None).await.id;
    let other = home.thread("echo", None).await.id;
    let room = home.create_room(host, "py").await.id;
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("python/mcp_client.py");
    let output = tokio::process::Command::new("python3")
        .arg(script)
        .arg(binary("kiki"))
        .arg(home.dir())
        .arg(home.workdir("py"))
        .args([&room, &other])
        .env_remove("KIKI_TOKEN")
        .output()
        .await
        .expect("python3 runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the Python MCP client failed (tests/run-all.sh installs it: pip install mcp): {stderr}"
    );
    let answer: Value = serde_json::from_slice(&output.stdout).expect("one JSON line");
    assert_eq!(answer["server"], json!("kiki"));
    assert!(answer["protocol"].as_str().is_some_and(|v| v.starts_with("20")), "{answer}");
    assert_eq!((answer["sent"].clone(), answer["added"].clone()), (json!("delivered"), json!(true)));
    assert!(answer["refused"].as_str().is_some_and(|t| t.contains("limit")), "{answer}");
}
