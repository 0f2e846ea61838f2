//! What a running home tells its operator, through the binaries: its log where and as the
//! config says, each send's log line in its call's span, metrics, the event feed, the
//! background workers.

use std::process::{Command, Stdio};

use kiki_tests::binaries::{Down, binary, kiki, kiki_json, mode, new_home, wait_for_turns};

/// `[log]` decides kikid's log from its first line: JSON objects in a dated file under the
/// home, at the level asked (a debug line appears only with `debug`).
#[test]
fn the_log_goes_where_the_config_says_in_the_form_it_says() {
    let (_dir, home) = new_home();
    let _down = Down(&home);
    std::fs::create_dir_all(&home).expect("home");
    let config = "[log]\nformat = \"json\"\nfile = \"logs/kikid.log\"\nlevel = \"info\"\n";
    std::fs::write(home.join("config.toml"), config).expect("config");
    kiki_json(&home, &["up"]);
    let logs: Vec<std::path::PathBuf> = std::fs::read_dir(home.join("logs"))
        .expect("the log directory")
        .map(|e| e.expect("entry").path())
        .collect();
    assert_eq!(logs.len(), 1, "{logs:?}");
    let name = logs[0].file_name().expect("name").to_string_lossy().to_string();
    assert!(name.starts_with("kikid.log.20"), "rotated daily, dated: {name}");
    assert_eq!(mode(&logs[0]) & 0o077, 0, "the owner's only");
    let text = std::fs::read_to_string(&logs[0]).expect("log");
    let lines: Vec<serde_json::Value> =
        text.lines().map(|l| serde_json::from_str(l).expect("one JSON object a line")).collect();
    let serving = lines.iter().find(|l| l["fields"]["message"] == "kikid is serving").expect("serving");
    assert_eq!(serving["level"], "INFO", "{serving}");
    assert!(lines.iter().all(|l| l["level"] != "DEBUG"), "info and above only");
}

/// Each call runs in a span named by its method, and what it does carries the ids it is
/// about: a send's answer is logged inside the ThreadSend call's span and the thread's, with
/// its message id.
#[test]
fn a_sends_log_line_carries_its_call_thread_and_message() {
    let (_dir, home) = new_home();
    let _down = Down(&home);
    std::fs::create_dir_all(&home).expect("home");
    let config = "[log]\nformat = \"json\"\nfile = \"logs/kikid.log\"\nlevel = \"info,kiki_daemon=debug\"\n";
    std::fs::write(home.join("config.toml"), config).expect("config");
    kiki_json(&home, &["up"]);
    let thread =
        kiki_json(&home, &["thread", "create", "--title", "traced"])["id"].as_str().expect("id").to_string();
    let sent = kiki_json(&home, &["thread", "send", &thread, "--key", "t1", "--content", "trace me"]);
    let log =
        std::fs::read_dir(home.join("logs")).expect("logs").next().expect("a file").expect("entry").path();
    let line = std::fs::read_to_string(&log)
        .expect("log")
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("json"))
        .find(|l| {
            l["fields"]["message"] == "send answered" && l["fields"]["message_id"] == sent["message_id"]
        })
        .expect("the send's answer, logged");
    let spans = line["spans"].as_array().expect("spans");
    assert!(
        spans.iter().any(|s| s["name"] == "rpc" && s["method"] == "/kiki.v1.ThreadService/ThreadSend"),
        "{line}"
    );
    assert!(spans.iter().any(|s| s["thread_id"] == thread.as_str()), "{line}");
}

/// `[metrics] listen` serves the home's metrics in the Prometheus text format; they move
/// with what the home does: a send that starts a turn, one refused, the turn that ran.
#[test]
fn metrics_are_served_and_count_sends_refusals_and_turns() {
    let (_dir, home) = new_home();
    let _down = Down(&home);
    std::fs::create_dir_all(&home).expect("home");
    let port = kiki_tests::binaries::free_tcp_port();
    std::fs::write(home.join("config.toml"), format!("[metrics]\nlisten = \"127.0.0.1:{port}\"\n"))
        .expect("config");
    kiki_json(&home, &["up"]);
    let scrape = || kiki_tests::scrape(port);
    let value = kiki_tests::metric;
    let before = scrape();
    assert!(before.contains("# TYPE kiki_deliveries counter"), "{before}");
    let thread =
        kiki_json(&home, &["thread", "create", "--title", "metered"])["id"].as_str().expect("id").to_string();
    let sent = kiki_json(&home, &["thread", "send", &thread, "--key", "m1", "--content", "hello"]);
    assert_eq!(sent["status"], "delivered");
    wait_for_turns(&home, &thread, 1);
    let out =
        kiki(&home, &["thread", "send", "th_00000000000000000000000000", "--key", "m2", "--content", "x"]);
    assert!(!out.status.success(), "no such thread");
    let after = scrape();
    assert_eq!(value(&after, "kiki_sends_total{outcome=\"delivered\"}"), 1.0, "{after}");
    assert_eq!(value(&after, "kiki_deliveries_total"), 1.0, "{after}");
    assert_eq!(value(&after, "kiki_sends_total{outcome=\"refused\"}"), 1.0, "{after}");
    assert_eq!(value(&after, "kiki_rejections_total{reason=\"not_found\"}"), 1.0, "{after}");
    assert_eq!(value(&after, "kiki_turns_total{executor=\"echo\",outcome=\"completed\"}"), 1.0, "{after}");
    assert_eq!(value(&after, "kiki_turn_duration_seconds_count{executor=\"echo\"}"), 1.0, "{after}");
    // Read at the scrape: nothing waits now.
    assert_eq!(value(&after, "kiki_waiters_parked"), 0.0, "{after}");
    assert!(after.contains("\nkiki_permission_requests_waiting 0\n"), "{after}");
    assert!(after.contains("\nkiki_expirations_total 0\n"), "{after}");
    // Every write committed is timed, with the writes it carried.
    assert!(value(&after, "kiki_store_commit_seconds_count") >= 3.0, "{after}");
    assert!(
        value(&after, "kiki_store_commit_writes_sum") >= value(&after, "kiki_store_commit_writes_count"),
        "{after}"
    );
}

/// `kiki events --follow` shows a send and its delivery as they happen, the turn it started
/// and its end; `kiki events` lists what happened since kikid started, filtered by thread.
#[test]
fn events_follow_a_send_and_its_turn_as_they_happen() {
    use std::io::BufRead;
    let (_dir, home) = new_home();
    let _down = Down(&home);
    kiki_json(&home, &["up"]);
    let other =
        kiki_json(&home, &["thread", "create", "--title", "other"])["id"].as_str().expect("id").to_string();
    kiki_json(&home, &["thread", "send", &other, "--key", "o1", "--content", "elsewhere"]);
    let thread =
        kiki_json(&home, &["thread", "create", "--title", "watched"])["id"].as_str().expect("id").to_string();
    let mut follower = Command::new(binary("kiki"))
        .arg("--home")
        .arg(&home)
        .args(["--json", "events", "--follow", "--thread", &thread])
        .stdout(Stdio::piped())
        .spawn()
        .expect("kiki events --follow");
    let mut lines = std::io::BufReader::new(follower.stdout.take().expect("stdout")).lines();
    let sent = kiki_json(&home, &["thread", "send", &thread, "--key", "w1", "--content", "watch this"]);
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let line = lines.next().expect("an event").expect("a line");
        let event: serde_json::Value = serde_json::from_str(&line).expect("one JSON object a line");
        assert_eq!(event["thread_id"], thread.as_str(), "only the thread's: {event}");
        seen.push(event);
    }
    let _ = follower.kill();
    let _ = follower.wait();
    // The send's answer and its turn come of one commit: the answer may be told before the
    // turn starts, or (an echo turn is quick) after it ended; the turn starts before it ends.
    let kind = |e: &serde_json::Value| e["kind"].as_str().unwrap_or_default().to_string();
    let mut kinds: Vec<String> = seen.iter().map(kind).collect();
    let (started, ended) = (
        kinds.iter().position(|k| k == "turn_started").expect("started"),
        kinds.iter().position(|k| k == "turn_ended").expect("ended"),
    );
    assert!(started < ended, "{seen:?}");
    kinds.sort();
    assert_eq!(kinds, ["send", "turn_ended", "turn_started"], "{seen:?}");
    let send = seen.iter().find(|e| e["kind"] == "send").expect("the send");
    assert_eq!(send["message_id"], sent["message_id"]);
    assert!(send["summary"].as_str().unwrap_or_default().ends_with("delivered"), "{seen:?}");
    assert!(seen[ended]["summary"].as_str().unwrap_or_default().contains("completed"), "{seen:?}");

    let all = kiki_json(&home, &["events"]);
    let sends = all["events"].as_array().expect("events").iter().filter(|e| e["kind"] == "send").count();
    assert_eq!(sends, 2, "both threads' sends: {all}");
    let filtered = kiki_json(&home, &["events", "--thread", &other]);
    assert!(filtered["events"].as_array().expect("events").iter().all(|e| e["thread_id"] == other.as_str()));
    let out = kiki(&home, &["events", "--bridge", "nosuch"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no bridge by the name or id \"nosuch\""));
}

/// `kiki status --workers` lists the home's background workers, each running; plain
/// `kiki status` leaves them out.
#[test]
fn status_lists_the_background_workers_when_asked() {
    let (_dir, home) = new_home();
    let _down = Down(&home);
    kiki_json(&home, &["up"]);
    assert_eq!(kiki_json(&home, &["status"])["workers"].as_array().map(Vec::len), Some(0));
    let status = kiki_json(&home, &["status", "--workers"]);
    let workers = status["workers"].as_array().expect("workers");
    let names: Vec<&str> = workers.iter().map(|w| w["name"].as_str().unwrap_or_default()).collect();
    for name in ["heartbeat", "outbox", "outbox recorder", "bridge endpoint", "key pruning"] {
        assert!(names.contains(&name), "{name} in {names:?}");
    }
    for worker in workers {
        assert!(["idle", "busy"].contains(&worker["state"].as_str().unwrap_or_default()), "{worker}");
        assert_eq!(worker["last_error"], "", "{worker}");
    }
    let beat = workers.iter().find(|w| w["name"] == "heartbeat").expect("heartbeat");
    assert!(beat["rounds"].as_u64().is_some(), "{beat}");
    let text = String::from_utf8(kiki(&home, &["status", "--workers"]).stdout).expect("utf-8");
    assert!(text.lines().any(|l| l.trim_start().starts_with("outbox ")), "{text}");
}
