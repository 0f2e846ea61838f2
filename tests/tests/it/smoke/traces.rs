//! `[otel] endpoint`: kikid's spans exported over OTLP/gRPC to a real receiver, and one
//! cross-home send one trace from the `kiki` that sent it to the agent's turn at the
//! target, retries included.

use std::time::{Duration, Instant};

use kiki_tests::binaries::{kiki_json, kiki_with_env, paired_homes_with, wait_for_turns};
use kiki_tests::otlp::{ReceivedSpan, Receiver};

/// What the agent at the target prints: the `TRACEPARENT` its turn gave it.
const TRACED_AGENT: &str = "[profiles.traced]\nexecutor = \"exec\"\n\
     command = [\"sh\", \"-c\", \"read -r line; echo \\\"$TRACEPARENT\\\"\"]\ndefault = true\n";

#[test]
fn a_cross_home_send_is_one_trace_from_the_cli_to_the_agent_retries_included() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let receiver = runtime.block_on(Receiver::start());
    let pair = paired_homes_with(&format!("[otel]\nendpoint = \"{}\"\n{TRACED_AGENT}", receiver.endpoint()));
    let (a, b) = (pair.a.as_path(), pair.b.as_path());
    let target = format!("bee/{}", pair.target);
    let id = |home| kiki_json(home, &["status"])["home_id"].as_str().expect("id").to_string();
    let (a_id, b_id) = (id(a), id(b));

    // The CLI passes its TRACEPARENT on: the whole send continues the caller's trace.
    let (first_trace, caller_span) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let sent = kiki_with_env(
        a,
        &["--json", "thread", "send", &target, "--key", "t1", "--content", "traced"],
        &[("TRACEPARENT", &format!("00-{first_trace}-{caller_span}-01"))],
    );
    assert!(sent.status.success(), "{}", String::from_utf8_lossy(&sent.stdout));
    let turns = wait_for_turns(b, &pair.target, 1);
    let given = turns["turns"][0]["output"].as_str().expect("output").trim().to_string();
    let turn_span = given
        .strip_prefix(&format!("00-{first_trace}-"))
        .and_then(|rest| rest.strip_suffix("-01"))
        .unwrap_or_else(|| panic!("the agent's TRACEPARENT continues the sender's trace: {given:?}"))
        .to_string();

    // A send made while the target is down is retried until it is up: every attempt is a
    // span of the send's trace, linked to the send.
    kiki_json(b, &["down"]);
    let second_trace = "0af7651916cd43dd8448eb211c80319c";
    let sent = kiki_with_env(
        a,
        &["--json", "thread", "send", &target, "--key", "t2", "--content", "later"],
        &[("TRACEPARENT", &format!("00-{second_trace}-b7ad6b7169203331-01"))],
    );
    let sent: serde_json::Value = serde_json::from_slice(&sent.stdout).expect("json");
    assert_eq!(sent["status"], "pending", "{sent}");
    kiki_json(b, &["up"]);
    let turns = wait_for_turns(b, &pair.target, 2);
    let given = turns["turns"][1]["output"].as_str().expect("output").trim().to_string();
    assert!(given.starts_with(&format!("00-{second_trace}-")), "{given:?}");

    // Stopping flushes what is still queued.
    kiki_json(a, &["down"]);
    kiki_json(b, &["down"]);
    let spans = eventually_spans(&receiver, |spans| {
        spans.iter().any(|s| s.service_instance == a_id && s.trace_id == second_trace)
            && spans.iter().any(|s| s.service_instance == b_id && s.trace_id == second_trace)
    });
    assert!(spans.iter().all(|s| s.service_name == "kikid"), "{spans:#?}");
    let find = |home: &str, trace: &str, name: &str| -> Vec<&ReceivedSpan> {
        spans.iter().filter(|s| s.service_instance == home && s.trace_id == trace && s.name == name).collect()
    };

    // Sender: the call's span is the caller's child; the bridge call is in the same trace.
    let calls = find(&a_id, first_trace, "rpc");
    let send = calls
        .iter()
        .find(|s| s.attribute("method") == Some("/kiki.v1.ThreadService/ThreadSend"))
        .unwrap_or_else(|| panic!("the send's call span: {spans:#?}"));
    assert_eq!(send.parent_span_id, caller_span);
    assert!(!find(&a_id, first_trace, "bridge call").is_empty(), "{spans:#?}");
    // Target: the served call and the turn are in it, the turn being what the agent got.
    assert!(!find(&b_id, first_trace, "bridge serve").is_empty(), "{spans:#?}");
    let turn = find(&b_id, first_trace, "turn");
    assert_eq!(turn.len(), 1, "{spans:#?}");
    assert_eq!(turn[0].span_id, turn_span, "TRACEPARENT names the turn's span");

    let attempts = find(&a_id, second_trace, "outbox attempt");
    assert!(attempts.len() >= 2, "a failed attempt and the one that delivered: {attempts:#?}");
    let send = find(&a_id, second_trace, "rpc");
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
        attempts.iter().all(|s| s.links.contains(&(second_trace.to_string(), made_in.clone()))),
        "every attempt, retries included, is linked to the send: {attempts:#?}"
    );
    assert_eq!(find(&b_id, second_trace, "turn").len(), 1, "{spans:#?}");
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
