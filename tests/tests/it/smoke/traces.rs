//! `[otel] endpoint`: kikid's spans exported over OTLP/gRPC to a real receiver, and one
//! cross-home send one trace from the `kiki` that sent it to the agent's turn at the
//! target, retries included.

use std::time::{Duration, Instant};

use kiki_tests::binaries::{
    Down, Paired, kiki_json, kiki_with_env, new_home, paired_homes_with, wait_for_turns,
};
use kiki_tests::otlp::{ReceivedSpan, Receiver};

/// What the agent at the target prints: the `TRACEPARENT` its turn gave it.
const TRACED_AGENT: &str = "[profiles.traced]\nexecutor = \"exec\"\n\
     command = [\"sh\", \"-c\", \"read -r line; echo \\\"$TRACEPARENT\\\"\"]\ndefault = true\n";

/// The traces the test's sends are made in, and the caller's span the first continues.
const FIRST_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";
const SECOND_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const ROOM_TRACE: &str = "e2a1b8c9d0f1e2a3b4c5d6e7f8091a2b";

#[test]
fn a_cross_home_send_or_room_post_is_one_trace_from_the_cli_to_the_agent_retries_included() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let receiver = runtime.block_on(Receiver::start());
    let pair = paired_homes_with(&format!(
        "[mailbox]\ndelivery_wait = \"200ms\"\n[otel]\nendpoint = \"{}\"\n{TRACED_AGENT}",
        receiver.endpoint()
    ));
    let (a, b) = (pair.a.as_path(), pair.b.as_path());
    let id = |home| kiki_json(home, &["status"])["home_id"].as_str().expect("id").to_string();
    let (a_id, b_id) = (id(a), id(b));
    let turn_span = send_in_the_callers_trace(&pair);
    send_while_the_target_is_down(&pair);
    room_post_in_its_trace(&pair);

    // Stopping flushes what is still queued.
    kiki_json(a, &["down"]);
    kiki_json(b, &["down"]);
    let spans = eventually_spans(&receiver, |spans| {
        spans.iter().any(|s| s.service_instance == a_id && s.trace_id == SECOND_TRACE)
            && spans.iter().any(|s| s.service_instance == b_id && s.trace_id == SECOND_TRACE)
    });
    assert!(spans.iter().all(|s| s.service_name == "kikid"), "{spans:#?}");
    let homes = Homes { spans: &spans, a_id: &a_id, b_id: &b_id };
    homes.the_first_send_is_one_trace(&turn_span);
    homes.every_attempt_is_in_the_sends_trace();
}

/// The CLI passes its TRACEPARENT on: the whole send continues the caller's trace. The
/// span the agent's turn was given.
fn send_in_the_callers_trace(pair: &Paired) -> String {
    let target = format!("bee/{}", pair.target);
    let sent = kiki_with_env(
        &pair.a,
        &["--json", "thread", "send", &target, "--key", "t1", "--content", "traced"],
        &[("TRACEPARENT", &format!("00-{FIRST_TRACE}-{CALLER_SPAN}-01"))],
    );
    assert!(sent.status.success(), "{}", String::from_utf8_lossy(&sent.stdout));
    let turns = wait_for_turns(&pair.b, &pair.target, 1);
    let given = turns["turns"][0]["output"].as_str().expect("output").trim().to_string();
    given
        .strip_prefix(&format!("00-{FIRST_TRACE}-"))
        .and_then(|rest| rest.strip_suffix("-01"))
        .unwrap_or_else(|| panic!("the agent's TRACEPARENT continues the sender's trace: {given:?}"))
        .to_string()
}

/// A send made while the target is down is retried until it is up: every attempt is a
/// span of the send's trace, linked to the send.
fn send_while_the_target_is_down(pair: &Paired) {
    let target = format!("bee/{}", pair.target);
    kiki_json(&pair.b, &["down"]);
    let sent = kiki_with_env(
        &pair.a,
        &["--json", "thread", "send", &target, "--key", "t2", "--content", "later"],
        &[("TRACEPARENT", &format!("00-{SECOND_TRACE}-b7ad6b7169203331-01"))],
    );
    let sent: serde_json::Value = serde_json::from_slice(&sent.stdout).expect("json");
    assert_eq!(sent["status"], "pending", "{sent}");
    kiki_json(&pair.b, &["up"]);
    let turns = wait_for_turns(&pair.b, &pair.target, 2);
    let given = turns["turns"][1]["output"].as_str().expect("output").trim().to_string();
    assert!(given.starts_with(&format!("00-{SECOND_TRACE}-")), "{given:?}");
}

/// A room post on `a` mentioning the member at `b` wakes it in the post's trace.
fn room_post_in_its_trace(pair: &Paired) {
    let (a, target) = (pair.a.as_path(), format!("bee/{}", pair.target));
    let host = kiki_json(a, &["thread", "create", "--profile", "echo", "--title", "host"])["id"]
        .as_str()
        .expect("id")
        .to_string();
    let room = kiki_json(a, &["room", "create", "--host", &host, "--name", "traced"])["room"]["id"]
        .as_str()
        .expect("room")
        .to_string();
    assert_eq!(kiki_json(a, &["room", "add", &room, &target])["added"], true);
    let posted = kiki_with_env(
        a,
        &["--json", "room", "send", &room, "--content", "over to you", "--mention", &target, "--key", "r1"],
        &[("TRACEPARENT", &format!("00-{ROOM_TRACE}-1a2b3c4d5e6f7081-01"))],
    );
    assert!(posted.status.success(), "{}", String::from_utf8_lossy(&posted.stdout));
    let turns = wait_for_turns(&pair.b, &pair.target, 3);
    let given = turns["turns"][2]["output"].as_str().expect("output").trim().to_string();
    assert!(
        given.starts_with(&format!("00-{ROOM_TRACE}-")),
        "the woken member's turn is the post's: {given:?}"
    );
}

/// The spans both homes exported: `a` the sender's, `b` the target's.
struct Homes<'a> {
    spans: &'a [ReceivedSpan],
    a_id: &'a str,
    b_id: &'a str,
}

impl Homes<'_> {
    fn find(&self, home: &str, trace: &str, name: &str) -> Vec<&ReceivedSpan> {
        self.spans
            .iter()
            .filter(|s| s.service_instance == home && s.trace_id == trace && s.name == name)
            .collect()
    }

    /// Sender: the call's span is the caller's child; the attempt that carried the message
    /// over the bridge (its bridge call) is in the same trace. Target: the served call and
    /// the turn are in it, the turn being what the agent got (`turn_span`).
    fn the_first_send_is_one_trace(&self, turn_span: &str) {
        let spans = self.spans;
        let calls = self.find(self.a_id, FIRST_TRACE, "rpc");
        let send = calls
            .iter()
            .find(|s| s.attribute("method") == Some("/kiki.v1.ThreadService/ThreadSend"))
            .unwrap_or_else(|| panic!("the send's call span: {spans:#?}"));
        assert_eq!(send.parent_span_id, CALLER_SPAN);
        let attempt = self.find(self.a_id, FIRST_TRACE, "outbox attempt");
        assert!(
            attempt.iter().any(|s| s.attribute("bridge_id").is_some_and(|b| b.starts_with("br_"))),
            "{spans:#?}"
        );
        assert!(!self.find(self.b_id, FIRST_TRACE, "bridge serve").is_empty(), "{spans:#?}");
        let turn = self.find(self.b_id, FIRST_TRACE, "turn");
        assert_eq!(turn.len(), 1, "{spans:#?}");
        assert_eq!(turn[0].span_id, turn_span, "TRACEPARENT names the turn's span");
    }

    /// The send made while the target was down: a failed attempt and the one that
    /// delivered, each a child of the span the send was made in (the call's, or below it)
    /// and linked to it.
    fn every_attempt_is_in_the_sends_trace(&self) {
        let spans = self.spans;
        let attempts = self.find(self.a_id, SECOND_TRACE, "outbox attempt");
        assert!(attempts.len() >= 2, "a failed attempt and the one that delivered: {attempts:#?}");
        let send = self.find(self.a_id, SECOND_TRACE, "rpc");
        assert_eq!(send.len(), 1, "{spans:#?}");
        // Each attempt is a child of the span the send was made in, which is the call's.
        let made_in = &attempts[0].parent_span_id;
        assert!(attempts.iter().all(|s| &s.parent_span_id == made_in), "{attempts:#?}");
        let mut ancestor = spans.iter().find(|s| &s.span_id == made_in);
        while let Some(span) = ancestor.filter(|s| s.span_id != send[0].span_id) {
            ancestor = spans.iter().find(|s| s.span_id == span.parent_span_id);
        }
        assert!(ancestor.is_some(), "the attempts descend from the send's call: {spans:#?}");
        assert!(
            attempts.iter().all(|s| s.links.contains(&(SECOND_TRACE.to_string(), made_in.clone()))),
            "every attempt, retries included, is linked to the send: {attempts:#?}"
        );
        assert_eq!(self.find(self.b_id, SECOND_TRACE, "turn").len(), 1, "{spans:#?}");
    }
}

/// The ThreadWait route beside tonic and `kiki mcp`'s tool calls continue their caller's
/// trace too; a tool call's span names the tool.
#[test]
fn waits_and_mcp_tool_calls_continue_the_callers_trace() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let receiver = runtime.block_on(Receiver::start());
    let (_dir, home) = new_home();
    let _down = Down(&home);
    std::fs::create_dir_all(&home).expect("home");
    std::fs::write(home.join("config.toml"), format!("[otel]\nendpoint = \"{}\"\n", receiver.endpoint()))
        .expect("config");
    kiki_json(&home, &["up"]);
    let thread =
        kiki_json(&home, &["thread", "create", "--title", "t"])["id"].as_str().expect("id").to_string();
    let (wait_trace, mcp_trace) = ("5b8aa5a2d2c872e8321cf37308d69df2", "71699b6e7bc45c1c8e5b5d5b5e5a5b5c");
    let waited = kiki_with_env(
        &home,
        &["--json", "thread", "wait", &thread, "--timeout-ms", "0"],
        &[("TRACEPARENT", &format!("00-{wait_trace}-051581bf3cb55c13-01"))],
    );
    assert!(waited.status.success(), "{}", String::from_utf8_lossy(&waited.stdout));
    let kiki = kiki_tests::binaries::binary("kiki");
    runtime.block_on(async {
        let traceparent = format!("00-{mcp_trace}-0f0e0d0c0b0a0908-01");
        let (session, _pushed) =
            kiki_tests::mcp::start(&kiki, Some(&home), &[], &[("TRACEPARENT", &traceparent)], false)
                .await
                .expect("kiki mcp");
        kiki_tests::mcp::call(&session, "ThreadList", serde_json::json!({})).await.expect("ThreadList");
        session.cancel().await.expect("close");
    });
    kiki_json(&home, &["down"]);
    let spans = eventually_spans(&receiver, |spans| {
        spans.iter().any(|s| s.trace_id == wait_trace) && spans.iter().any(|s| s.trace_id == mcp_trace)
    });
    let call = |trace: &str| {
        spans
            .iter()
            .find(|s| s.trace_id == trace && s.name == "rpc")
            .unwrap_or_else(|| panic!("a call in trace {trace}: {spans:#?}"))
            .clone()
    };
    let wait = call(wait_trace);
    assert_eq!(wait.attribute("method"), Some("/kiki.v1.ThreadService/ThreadWait"));
    assert_eq!(wait.parent_span_id, "051581bf3cb55c13");
    let tool = call(mcp_trace);
    assert_eq!(tool.attribute("method"), Some("/kiki.v1.ThreadService/ThreadList"));
    assert_eq!(tool.attribute("mcp_tool"), Some("ThreadList"), "{tool:#?}");
    assert_eq!(tool.parent_span_id, "0f0e0d0c0b0a0908");
}

/// A collector that takes connections but never answers costs the home nothing it serves:
/// sends go on at full speed, the spans that cannot leave are dropped and counted, and
/// stopping waits for it a bounded time only.
#[test]
fn a_collector_that_never_answers_neither_breaks_nor_holds_up_the_home() {
    let (_dir, home) = new_home();
    let _down = Down(&home);
    std::fs::create_dir_all(&home).expect("home");
    // Connections land in its backlog and are never read.
    let black_hole = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let collector = black_hole.local_addr().expect("addr").port();
    let metrics = kiki_tests::binaries::free_tcp_port();
    std::fs::write(
        home.join("config.toml"),
        format!("[otel]\nendpoint = \"http://127.0.0.1:{collector}\"\n[metrics]\nlisten = \"127.0.0.1:{metrics}\"\n"),
    )
    .expect("config");
    kiki_json(&home, &["up"]);
    let thread =
        kiki_json(&home, &["thread", "create", "--title", "t"])["id"].as_str().expect("id").to_string();
    // Far more spans than the export queue holds (4096), faster than a stuck export drains.
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let client = kiki_client::Client::connect(&home.join("kikid.sock")).await.expect("connect");
        let mut senders = tokio::task::JoinSet::new();
        for sender in 0..64 {
            let (client, thread) = (client.clone(), thread.clone());
            senders.spawn(async move {
                for n in 0..100 {
                    let request = kiki_proto::ThreadSendRequest {
                        target: Some(kiki_tests::local(&thread)),
                        content: "hi".into(),
                        idempotency_key: format!("k{sender}-{n}"),
                        ..Default::default()
                    };
                    client.threads().thread_send(request).await.expect("every send answered");
                }
            });
        }
        while let Some(done) = senders.join_next().await {
            done.expect("sender");
        }
    });
    let scraped = kiki_tests::scrape(metrics);
    assert!(kiki_tests::metric(&scraped, "kiki_trace_spans_dropped_total") > 0.0, "{scraped}");
    assert_eq!(kiki_tests::metric(&scraped, "kiki_sends_total{outcome=\"refused\"}"), 0.0, "{scraped}");
    let stopping = Instant::now();
    assert_eq!(kiki_json(&home, &["down"])["stopped"], true);
    assert!(
        stopping.elapsed() < Duration::from_secs(20),
        "the last export is bounded, not retried on: {:?}",
        stopping.elapsed()
    );
    drop(black_hole);
}

/// The spans received once `done` says they are all there (export is in batches).
fn eventually_spans(receiver: &Receiver, done: impl Fn(&[ReceivedSpan]) -> bool) -> Vec<ReceivedSpan> {
    let started = Instant::now();
    loop {
        let spans = receiver.spans();
        if done(&spans) {
            return spans;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "spans never arrived: {spans:#?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
