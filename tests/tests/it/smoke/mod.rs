//! The smoke tier: the real `kikid` and `kiki` binaries, real processes, real signals.

use std::process::{Command, Stdio};

use kiki_tests::binaries::{
    Down, binary, kiki, kiki_json, kiki_with_env, mode, new_home, paired_homes, wait_for_turns,
};
use tokio_stream_shim::next_message;

mod crashes;
mod traces;

#[test]
fn up_status_down_and_an_owner_only_home() {
    let (_dir, home) = new_home();
    let _down = Down(&home);
    let up = kiki_json(&home, &["up"]);
    assert_eq!(up["home_id"].as_str().map(str::len), Some(52));
    // `kiki up` returned, so the daemon answers now.
    let status = kiki_json(&home, &["status"]);
    assert_eq!(status["home_id"], up["home_id"]);
    assert_eq!(status["default_profile"], "echo");
    // One replica serves a SQLite home: this process, its heartbeat fresh.
    assert_eq!(status["lease_ms"], 10_000, "the default lease: {status}");
    let replicas = status["replicas"].as_array().expect("replicas");
    assert_eq!(replicas.len(), 1, "{status}");
    assert_eq!((replicas[0]["this"].as_bool(), replicas[0]["live"].as_bool()), (Some(true), Some(true)));
    assert_eq!(replicas[0]["pid"], status["pid"]);
    assert_eq!(replicas[0]["works_outbox"], true, "the only replica works the outbox");
    assert_eq!(replicas[0]["bridge_listen"], status["bridge_listen"]);
    assert_eq!(mode(&home), 0o700, "home directory is owner-only");
    assert_eq!(mode(&home.join("kikid.sock")), 0o600, "socket is owner-only");
    assert_eq!(mode(&home.join("identity.key")), 0o600);
    let again = kiki_json(&home, &["up"]);
    assert_eq!(again["pid"], status["pid"], "a second `up` finds the running daemon");

    // `kiki down` run by an agent (its turn's token in the environment) is not the owner's:
    // the daemon checks the token, and this one is no turn's.
    let agent_down = kiki_with_env(&home, &["--json", "down"], &[("KIKI_TOKEN", "not-a-turns-token")]);
    assert_eq!(agent_down.status.code(), Some(7), "{}", String::from_utf8_lossy(&agent_down.stdout));
    let error: serde_json::Value = serde_json::from_slice(&agent_down.stdout).expect("json error");
    assert_eq!(error["error"]["code"], "unauthenticated");
    assert_eq!(kiki_json(&home, &["status"])["pid"], status["pid"], "still running");

    assert_eq!(kiki_json(&home, &["down"])["stopped"], true);
    assert_eq!(kiki_json(&home, &["down"])["stopped"], false, "none was running");
    let out = kiki(&home, &["--json", "status"]);
    assert_eq!(out.status.code(), Some(4), "unreachable home");
    let error: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json error");
    assert_eq!(error["error"]["code"], "unavailable");
    assert!(error["error"]["message"].as_str().unwrap_or_default().contains("kiki up"));

    // The identity survives a restart.
    let up2 = kiki_json(&home, &["up"]);
    assert_eq!(up2["home_id"], up["home_id"]);
    // The stopped kikid took itself off the record: the new one is the only replica.
    let replicas = kiki_json(&home, &["status"])["replicas"].clone();
    assert_eq!(replicas.as_array().map(Vec::len), Some(1), "{replicas}");
    assert_eq!(replicas[0]["pid"], up2["pid"]);
}

/// `kiki up` run several times at once: one kikid serves the home, and every `kiki up`
/// returns once it answers (the others' kikid lost the race for the home's lock).
#[test]
fn concurrent_ups_all_return_the_one_daemon() {
    let (_dir, home) = new_home();
    let _down = Down(&home);
    let ups: Vec<_> = (0..4)
        .map(|_| {
            let home = home.clone();
            std::thread::spawn(move || kiki(&home, &["--json", "up"]))
        })
        .collect();
    let mut pids = Vec::new();
    for up in ups {
        let out = up.join().expect("kiki up");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let status: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        pids.push(status["pid"].clone());
    }
    pids.dedup();
    assert_eq!(pids.len(), 1, "one daemon: {pids:?}");
}

/// `kiki up` writes its log only into a home of its user's, and never through a symlink.
#[test]
fn kiki_up_writes_no_log_through_a_symlink() {
    let (dir, home) = new_home();
    let _down = Down(&home);
    std::fs::create_dir_all(&home).expect("home");
    let victim = dir.path().join("victim.txt");
    std::fs::write(&victim, "untouched").expect("victim");
    std::os::unix::fs::symlink(&victim, home.join("kikid.log")).expect("symlink");
    let out = kiki(&home, &["up"]);
    assert!(!out.status.success(), "started through a symlinked log");
    assert_eq!(std::fs::read_to_string(&victim).expect("victim"), "untouched");
}

#[test]
fn a_second_daemon_on_the_same_home_is_refused() {
    let (_dir, home) = new_home();
    let _down = Down(&home);
    kiki_json(&home, &["up"]);
    let out = Command::new(binary("kikid"))
        .arg("--home")
        .arg(&home)
        .stderr(Stdio::piped())
        .output()
        .expect("kikid");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("already served by another kikid"), "{stderr}");
    kiki_json(&home, &["status"]); // the first one is unharmed
}

#[test]
fn cli_errors_are_json_with_codes_and_leave_no_trace() {
    let (_dir, home) = new_home();
    let _down = Down(&home);
    kiki_json(&home, &["up"]);
    let out = kiki(&home, &["--json", "thread", "list", "--limit", "0"]);
    assert_eq!(out.status.code(), Some(2));
    let error: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(error["error"]["code"], "invalid_argument");
    assert_eq!(error["error"]["message"], "limit: must be between 1 and 100, got 0");
    assert!(String::from_utf8_lossy(&out.stderr).contains("limit"), "also on stderr");

    let long = "x".repeat(100_001);
    let out = kiki(&home, &["--json", "thread", "create", "--prompt", &long]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(kiki_json(&home, &["status"])["threads"], 0, "nothing written");

    // An argument's file that cannot be read as text is bad input too.
    let missing = home.join("no-such-file");
    let out = kiki(&home, &["--json", "thread", "create", "--prompt-file", missing.to_str().expect("utf8")]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stdout));
    let error: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(error["error"]["code"], "invalid_argument");
    let out = kiki(&home, &["--json", "thread", "wait", "th_a", "--cursor", "th_a=1", "--cursor", "th_a=2"]);
    assert_eq!(out.status.code(), Some(2), "two cursors for one thread");
    assert_eq!(kiki_json(&home, &["status"])["threads"], 0, "nothing written");

    let out = kiki(&home, &["--json", "thread", "read", "th_nope"]);
    assert_eq!(out.status.code(), Some(3));
    let out = kiki(&home, &["--json", "thread", "read", "a/b/c"]);
    assert_eq!(out.status.code(), Some(2), "malformed reference");
    let out = kiki(&home, &["--json", "thread", "frobnicate"]);
    assert_eq!(out.status.code(), Some(2), "usage error");
    let error: serde_json::Value = serde_json::from_slice(&out.stdout).expect("usage errors are JSON too");
    assert_eq!(error["error"]["code"], "invalid_argument");
    assert!(String::from_utf8_lossy(&out.stderr).contains("frobnicate"), "and on stderr");
}

/// A config with several mistakes: `kiki up` fails with every one of them, one line each.
#[test]
fn kiki_up_lists_every_mistake_in_the_config() {
    let (_dir, home) = new_home();
    let _down = Down(&home);
    std::fs::create_dir_all(&home).expect("home");
    let config = "[bridge]\nretry_window = 5\n[turns]\nmax_output_bytes = \"big\"\n[mailbox]\ndelivery_wait = \"2m\"\n";
    std::fs::write(home.join("config.toml"), config).expect("config");
    let out = kiki(&home, &["up"]);
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    for line in [
        "  - bridge.retry_window: line 2, column 16 (`retry_window = 5`): invalid type: integer `5`, expected a string",
        "  - turns.max_output_bytes: line 4, column 20 (`max_output_bytes = \"big\"`): invalid type: string \"big\", expected usize",
        "  - mailbox.delivery_wait: must be at most 60s",
    ] {
        assert!(said.lines().any(|l| l == line), "{line:?} in {said}");
    }
    assert!(!home.join("kikid.sock").exists(), "no home runs");
    // A bad config is bad input: its own code and exit status, not `unknown`.
    let out = kiki(&home, &["--json", "up"]);
    assert_eq!(out.status.code(), Some(2));
    let error: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json error");
    assert_eq!(error["error"]["code"], "invalid_argument");
}

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

#[test]
fn the_version_is_text_or_one_json_document() {
    let (_dir, home) = new_home();
    let out = kiki(&home, &["--version"]);
    assert!(out.status.success());
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), format!("kiki {version}"));
    let out = kiki(&home, &["--json", "--version"]);
    assert!(out.status.success());
    let printed: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(printed, serde_json::json!({ "version": version }));
}

#[test]
fn a_reader_that_goes_away_ends_kiki_quietly() {
    let (_dir, home) = new_home();
    let _down = Down(&home);
    kiki_json(&home, &["up"]);
    for args in [&["--json", "status"][..], &["status"], &["--json", "thread", "read", "th_nope"]] {
        let mut child = Command::new(binary("kiki"))
            .arg("--home")
            .arg(&home)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kiki");
        // The reader closes its end before kiki has anything to write (`kiki … | head -0`).
        drop(child.stdout.take());
        let out = child.wait_with_output().expect("kiki ends");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "kiki {args:?}: {stderr}");
        if args != ["--json", "thread", "read", "th_nope"] {
            assert!(out.status.success(), "kiki {args:?}: {:?} {stderr}", out.status);
        }
    }
}

/// `--json --version` writes like every result: a reader gone before it (`| head -0`) ends
/// kiki quietly, a full disk is an error message and exit 1, never a panic.
#[test]
fn the_json_version_to_a_closed_or_full_stdout_does_not_panic() {
    let (reader, writer) = std::io::pipe().expect("pipe");
    drop(reader);
    let out = Command::new(binary("kiki"))
        .args(["--json", "--version"])
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .expect("kiki");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?} {stderr}", out.status);
    assert_eq!(stderr, "", "nothing on stderr");

    let full = std::fs::OpenOptions::new().write(true).open("/dev/full").expect("/dev/full");
    let out = Command::new(binary("kiki"))
        .args(["--json", "--version"])
        .stdout(full)
        .stderr(Stdio::piped())
        .output()
        .expect("kiki");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("cannot write the result"), "{stderr}");
}

#[test]
fn thread_commands_end_to_end() {
    let (dir, home) = new_home();
    let _down = Down(&home);
    kiki_json(&home, &["up"]);
    let prompt_file = dir.path().join("prompt.txt");
    std::fs::write(&prompt_file, "from a file\nline two").expect("prompt");
    let created =
        kiki_json(&home, &["thread", "create", "--prompt-file", prompt_file.to_str().expect("utf8")]);
    let id = created["id"].as_str().expect("id").to_string();
    assert_eq!(created["title"], "from a file");
    assert_eq!(created["prompt_started"], true);
    assert_eq!(created["cwd"], std::env::current_dir().expect("cwd").display().to_string());
    let page = wait_for_turns(&home, &id, 1);
    assert_eq!(page["turns"][0]["output"], "echo: from a file\nline two");
    assert_eq!(page["turns"][0]["status"], "completed");

    let said = kiki_json(&home, &["thread", "say", &id, "second"]);
    assert_eq!(said["turn_started"], true);
    wait_for_turns(&home, &id, 2);
    let text = kiki(&home, &["thread", "read", &id]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("echo: second"), "{text}");

    let list = kiki_json(&home, &["thread", "list"]);
    assert_eq!(list["threads"][0]["id"], id.as_str());
    assert_eq!(list["threads"][0]["state"], "idle");
    // A directory names its workspace, a relative one too (the thread's cwd is this one).
    let here = kiki_json(&home, &["thread", "list", "--workspace", "."]);
    assert_eq!(here["threads"][0]["id"], id.as_str());
    let archived = kiki_json(&home, &["thread", "archive", &id]);
    assert_eq!(archived["changed"], true);
    assert_eq!(kiki_json(&home, &["thread", "list"])["threads"].as_array().map(Vec::len), Some(0));
    kiki_json(&home, &["thread", "unarchive", &id]);
    assert_eq!(kiki_json(&home, &["thread", "list"])["threads"].as_array().map(Vec::len), Some(1));
}

/// The `seq` of each turn a text `kiki thread read` printed, from its `── turn N · …` lines.
fn shown_turns(stdout: &[u8]) -> Vec<u64> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("── turn ")?.split(' ').next()?.parse().ok())
        .collect()
}

/// `kiki thread read REF` shows a person the end of a thread: its newest 20 turns, oldest
/// first, and on stderr how to read the older ones (`--last N` for another number). With
/// `--json` and no flags the API's default stands (from the oldest turn), so scripts see
/// no change; `--limit` and `--cursor` page from the oldest as before.
#[test]
fn thread_read_shows_a_person_the_newest_turns() {
    let (_dir, home) = new_home();
    let _down = Down(&home);
    kiki_json(&home, &["up"]);
    let created = kiki_json(&home, &["thread", "create", "--prompt", "t1", "--wait"]);
    let id = created["thread"]["id"].as_str().expect("id").to_string();
    for i in 2..=22 {
        kiki_json(&home, &["thread", "say", &id, &format!("t{i}")]);
        wait_for_turns(&home, &id, i);
    }

    let out = kiki(&home, &["thread", "read", &id]);
    assert!(out.status.success());
    assert_eq!(shown_turns(&out.stdout), (3..=22).collect::<Vec<_>>(), "the newest 20, oldest first");
    assert!(String::from_utf8_lossy(&out.stdout).ends_with("echo: t22\n"), "ends with the newest turn");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "older: --limit 2\n", "the older ones, on stderr");
    let out = kiki(&home, &["thread", "read", &id, "--last", "5"]);
    assert_eq!(shown_turns(&out.stdout), (18..=22).collect::<Vec<_>>());
    assert_eq!(String::from_utf8_lossy(&out.stderr), "older: --limit 17\n");
    let out = kiki(&home, &["thread", "read", &id, "--last", "50"]);
    assert_eq!(shown_turns(&out.stdout), (1..=22).collect::<Vec<_>>());
    assert_eq!(String::from_utf8_lossy(&out.stderr), "", "nothing older");

    let page = kiki_json(&home, &["thread", "read", &id]);
    let seqs = |page: &serde_json::Value| -> Vec<u64> {
        page["turns"].as_array().expect("turns").iter().filter_map(|t| t["seq"].as_u64()).collect()
    };
    assert_eq!(seqs(&page), (1..=20).collect::<Vec<_>>(), "--json keeps the API's default order");
    assert!(page["next_cursor"].is_string());
    let last = kiki_json(&home, &["thread", "read", &id, "--last", "5"]);
    assert_eq!(seqs(&last), (18..=22).collect::<Vec<_>>());
    assert!(last["next_cursor"].is_null(), "the page reaches the newest turn: {last}");
    assert_eq!(last["coverage"]["first_seq"], 18);

    // --limit pages from the oldest, its hint on stderr.
    let out = kiki(&home, &["thread", "read", &id, "--limit", "5"]);
    assert_eq!(shown_turns(&out.stdout), (1..=5).collect::<Vec<_>>());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let cursor = stderr.strip_prefix("more: --cursor ").expect("the hint on stderr").trim().to_string();
    assert!(!String::from_utf8_lossy(&out.stdout).contains("more:"), "stdout is the turns alone");
    let out = kiki(&home, &["thread", "read", &id, "--limit", "5", "--cursor", &cursor]);
    assert_eq!(shown_turns(&out.stdout), (6..=10).collect::<Vec<_>>());

    let out = kiki(&home, &["--json", "thread", "read", &id, "--last", "5", "--limit", "5"]);
    assert_eq!(out.status.code(), Some(2), "--last is a page of its own");
    let out = kiki(&home, &["--json", "thread", "read", &id, "--last", "0"]);
    assert_eq!(out.status.code(), Some(2));
    let error: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json error");
    assert_eq!(error["error"]["message"], "last: must be between 1 and 100, got 0");
}

/// Every paging hint (`more: --cursor C`, `older: --cursor C`, `more: --content-ref …`) is
/// on stderr, whatever the command: stdout holds the result alone.
#[test]
fn paging_hints_go_to_stderr() {
    let pair = paired_homes();
    let (a, target) = (pair.a.as_path(), format!("bee/{}", pair.target));
    kiki_json(a, &["thread", "create", "--title", "one"]);
    kiki_json(a, &["thread", "create", "--title", "two"]);
    let out = kiki(a, &["thread", "list", "--limit", "1"]);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(stdout.lines().count(), 1, "one thread and nothing else: {stdout}");
    assert!(stdout.contains("two"), "{stdout}");
    assert!(stderr.starts_with("more: --limit 1 --cursor "), "{stderr}");

    for key in ["k1", "k2"] {
        kiki_json(a, &["thread", "send", &target, "--key", key, "--content", "hi"]);
    }
    let out = kiki(a, &["bridge", "receipts", "bee", "--limit", "1"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!stdout.contains("older:"), "{stdout}");
    assert!(stderr.starts_with("older: --cursor "), "{stderr}");
}

/// `--content-ref R --all` reads every segment of an oversized field and prints it whole,
/// once; with `--json`, one document in a segment's shape with the whole text and no
/// `next`. (The echo profile answers `echo: ` + the prompt: a prompt over 16,384 UTF-16
/// units makes an oversized output.)
#[test]
fn a_whole_oversized_field_is_read_with_all() {
    let (dir, home) = new_home();
    let _down = Down(&home);
    kiki_json(&home, &["up"]);
    let mut prompt = String::new();
    while prompt.chars().count() < 40_000 {
        prompt.push_str("kiki 😀 ünïcode ");
    }
    let prompt_file = dir.path().join("prompt.txt");
    std::fs::write(&prompt_file, &prompt).expect("prompt");
    let created = kiki_json(
        &home,
        &["thread", "create", "--prompt-file", prompt_file.to_str().expect("utf8"), "--wait"],
    );
    let id = created["thread"]["id"].as_str().expect("id").to_string();
    assert_eq!(created["turn"]["output_truncated"], true);
    let output = format!("echo: {prompt}");
    let content_ref = format!("{}.output", created["turn"]["id"].as_str().expect("turn id"));

    let out = kiki(&home, &["thread", "read", &id, "--content-ref", &content_ref, "--all"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout) == output, "the whole field, once");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "", "no hint: nothing more to read");
    // Without --all, one segment and the hint for the next.
    let out = kiki(&home, &["thread", "read", &id, "--content-ref", &content_ref]);
    assert!(out.stdout.len() < output.len() && output.as_bytes().starts_with(&out.stdout));
    let hint = format!("\nmore: --content-ref {content_ref} --cursor ");
    assert!(String::from_utf8_lossy(&out.stderr).starts_with(&hint));

    let whole = kiki_json(&home, &["thread", "read", &id, "--content-ref", &content_ref, "--all"]);
    let segment = &whole["segment"];
    assert!(segment["text"] == output.as_str(), "the whole text in one document");
    assert_eq!(segment["offset"], 0);
    assert_eq!(segment["utf16_length"], output.encode_utf16().count());
    assert_eq!(segment["content_ref"], content_ref.as_str());
    assert!(segment["next"].is_null(), "no next");
    assert_eq!(whole["thread"]["id"], id.as_str());

    let out = kiki(&home, &["--json", "thread", "read", &id, "--all"]);
    assert_eq!(out.status.code(), Some(2), "--all needs --content-ref");
    let out = kiki(
        &home,
        &["--json", "thread", "read", &id, "--content-ref", &content_ref, "--all", "--cursor", "c"],
    );
    assert_eq!(out.status.code(), Some(2), "--all reads from the start");
}

/// `kiki thread create --prompt P --wait` waits for the first turn and prints it as `kiki
/// thread read` would (an `exec` agent's too); with `--json`, one document `{"thread", "turn"}`.
/// The README's first command is this, between `kiki up` and `kiki down`.
#[test]
fn create_with_wait_prints_the_first_turn() {
    let (_dir, home) = new_home();
    let _down = Down(&home);
    std::fs::create_dir_all(&home).expect("home");
    std::fs::write(home.join("config.toml"), "[profiles.cat]\nexecutor = \"exec\"\ncommand = [\"cat\"]\n")
        .expect("config");
    let out = kiki(&home, &["up"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = kiki(&home, &["thread", "create", "--prompt", "hello, kiki", "--wait"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[0].starts_with("th_") && lines[0].ends_with("  hello, kiki"), "{stdout}");
    assert!(lines.iter().any(|l| l.starts_with("── turn 1 · completed · ")), "{stdout}");
    assert_eq!(lines[lines.len() - 2..], ["> hello, kiki", "echo: hello, kiki"], "{stdout}");

    let out = kiki(&home, &["thread", "create", "--profile", "cat", "--prompt", "from an agent", "--wait"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.ends_with("> from an agent\nfrom an agent\n"), "the agent's output: {stdout}");

    let both = kiki_json(&home, &["thread", "create", "--profile", "cat", "--prompt", "json", "--wait"]);
    assert_eq!(both["thread"]["prompt_started"], true);
    assert_eq!(both["thread"]["profile"], "cat");
    assert_eq!(both["turn"]["seq"], 1);
    assert_eq!(both["turn"]["status"], "completed");
    assert_eq!(both["turn"]["output"], "json");
    let id = both["thread"]["id"].as_str().expect("id");
    let read = kiki_json(&home, &["thread", "read", id]);
    assert_eq!(read["turns"][0], both["turn"], "the turn as ThreadRead shows it");

    let out = kiki(&home, &["--json", "thread", "create", "--wait"]);
    assert_eq!(out.status.code(), Some(2), "--wait needs a prompt");
    assert_eq!(kiki_json(&home, &["status"])["threads"], 3, "nothing written");
    assert_eq!(kiki_json(&home, &["down"])["stopped"], true);
}

/// `kiki --help`, `kiki help`, each command group and each home command show examples;
/// `--json --help` is still text. A command-line error with `--json` is a JSON error whose
/// message is one line; the usage goes to stderr.
#[test]
fn help_has_examples_and_json_usage_errors_are_one_line() {
    let (_dir, home) = new_home();
    let top = kiki(&home, &["--help"]);
    assert!(top.status.success());
    let text = String::from_utf8_lossy(&top.stdout);
    assert!(text.contains("\nExamples:\n") && text.contains("kiki thread create --prompt"), "{text}");
    assert_eq!(kiki(&home, &["help"]).stdout, top.stdout, "kiki help is kiki --help");
    let as_json = kiki(&home, &["--json", "--help"]);
    assert!(as_json.status.success());
    assert_eq!(as_json.stdout, top.stdout, "--json --help stays text");
    assert!(serde_json::from_slice::<serde_json::Value>(&as_json.stdout).is_err());
    for command in ["thread", "bridge", "up", "down", "status", "doctor", "backup", "attention"] {
        let out = kiki(&home, &[command, "--help"]);
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        let examples = text.split_once("\nExamples").map(|(_, e)| e).unwrap_or_default();
        assert!(examples.contains("kiki "), "kiki {command} --help: {text}");
    }
    let read = String::from_utf8_lossy(&kiki(&home, &["thread", "read", "--help"]).stdout).to_string();
    assert!(read.contains("newest 20") && read.contains("--last") && read.contains("--all"), "{read}");

    let one_line = |args: &[&str]| {
        let out = kiki(&home, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let error: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
        assert_eq!(error["error"]["code"], "invalid_argument");
        let message = error["error"]["message"].as_str().expect("message").to_string();
        assert!(!message.contains('\n') && !message.starts_with("error:"), "{args:?}: {message:?}");
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(stderr.contains("Usage: kiki"), "the usage on stderr: {stderr}");
        (message, stderr)
    };
    let (message, stderr) = one_line(&["--json", "thread", "frobnicate"]);
    assert_eq!(message, "unrecognized subcommand 'frobnicate'");
    assert_eq!(stderr.lines().next(), Some("error: unrecognized subcommand 'frobnicate'"));
    let (message, _) = one_line(&["--json", "thread", "read"]);
    assert_eq!(message, "the following required arguments were not provided: <REFERENCE>");
    let (message, _) = one_line(&["--json", "thread", "create", "--wait"]);
    assert!(message.contains("--prompt"), "{message}");
    let (message, _) = one_line(&["--json", "thread", "read", "th_a", "--last", "5", "--limit", "5"]);
    assert!(message.contains("--last") && message.contains("--limit"), "{message}");
    one_line(&["--json", "thread"]);
}

/// gRPC reflection is served in both its v1 and v1alpha forms, so generic clients work.
#[tokio::test]
async fn reflection_lists_the_services_in_both_versions() {
    let home = kiki_tests::TestHome::builder().start().await;
    let channel = home.client().channel();

    use tonic_reflection::pb::v1::{
        ServerReflectionRequest, server_reflection_client::ServerReflectionClient,
        server_reflection_request::MessageRequest, server_reflection_response::MessageResponse,
    };
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut client = ServerReflectionClient::new(channel.clone());
    let mut stream =
        client.server_reflection_info(tokio_stream_shim::once(request)).await.expect("v1").into_inner();
    let response = next_message(&mut stream).await;
    let Some(MessageResponse::ListServicesResponse(list)) = response.message_response else {
        panic!("no list")
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    assert!(names.contains(&"kiki.v1.ThreadService".to_string()), "{names:?}");
    assert!(names.contains(&"kiki.v1.HomeService".to_string()), "{names:?}");

    use tonic_reflection::pb::v1alpha::{
        ServerReflectionRequest as AlphaRequest,
        server_reflection_client::ServerReflectionClient as AlphaClient,
        server_reflection_request::MessageRequest as AlphaMessage,
        server_reflection_response::MessageResponse as AlphaResponse,
    };
    let request = AlphaRequest {
        host: String::new(),
        message_request: Some(AlphaMessage::ListServices(String::new())),
    };
    let mut client = AlphaClient::new(channel);
    let mut stream =
        client.server_reflection_info(tokio_stream_shim::once(request)).await.expect("v1alpha").into_inner();
    let response = next_message(&mut stream).await;
    let Some(AlphaResponse::ListServicesResponse(list)) = response.message_response else {
        panic!("no list")
    };
    assert!(list.service.iter().any(|s| s.name == "kiki.v1.ThreadService"));
}

/// Minimal stream helpers so the test needs no extra stream crate.
mod tokio_stream_shim {
    pub fn once<T: Send + 'static>(
        item: T,
    ) -> impl tonic::codegen::tokio_stream::Stream<Item = T> + Send + 'static {
        tonic::codegen::tokio_stream::iter(vec![item])
    }

    pub async fn next_message<T>(stream: &mut tonic::Streaming<T>) -> T {
        stream.message().await.expect("reflection answer").expect("one message")
    }
}

/// Relative paths are made absolute: the home (it is handed to agents, which run elsewhere)
/// and `--cwd`.
#[test]
fn relative_home_and_cwd_are_made_absolute() {
    let dir = tempfile::tempdir().expect("dir");
    let run = |args: &[&str]| {
        let out = Command::new(binary("kiki"))
            .current_dir(dir.path())
            .args(["--home", "rel-home", "--json"])
            .args(args)
            .env_remove("KIKI_TOKEN")
            .env_remove("KIKI_HOME")
            .output()
            .expect("kiki");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("json")
    };
    let status = run(&["up"]);
    let home = dir.path().canonicalize().expect("canon").join("rel-home");
    let _down = Down(&home);
    assert_eq!(status["home"], home.display().to_string());
    std::fs::create_dir_all(dir.path().join("sub")).expect("sub");
    let created = run(&["thread", "create", "--cwd", "sub"]);
    assert_eq!(created["cwd"], dir.path().canonicalize().expect("canon").join("sub").display().to_string());
}

/// A thread's own switch is one of several: with the home's switch off, `thread set
/// --communication on` says the thread stays closed and why, and `thread list` and
/// `status` show what is in force.
#[test]
fn the_effective_communication_switch_is_shown_with_its_reason() {
    let (_dir, home) = new_home();
    let _down = Down(&home);
    std::fs::create_dir_all(&home).expect("home");
    std::fs::write(home.join("config.toml"), "[thread_communication]\nenabled = false\n").expect("config");
    kiki_json(&home, &["up"]);
    let status = kiki_json(&home, &["status"]);
    assert!(
        status["thread_communication"].as_str().unwrap_or_default().starts_with("off for every thread"),
        "{status}"
    );
    let thread =
        kiki_json(&home, &["thread", "create", "--title", "t"])["id"].as_str().expect("id").to_string();
    let set = kiki_json(&home, &["thread", "set", &thread, "--communication", "on"]);
    assert_eq!(set["thread"]["communication"], "on", "the thread's own switch");
    assert_eq!(set["thread"]["communication_open"], false, "yet closed: {set}");
    let why = set["thread"]["communication_why"].as_str().unwrap_or_default();
    assert!(why.contains("[thread_communication] enabled = false"), "{why}");
    let out = kiki(&home, &["thread", "set", &thread, "--communication", "on"]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("peer communication is closed: the home's [thread_communication] enabled = false"),
        "{said}"
    );
    let listed = kiki_json(&home, &["thread", "list"]);
    assert_eq!(listed["threads"][0]["communication_open"], false, "{listed}");
    let out = kiki(&home, &["thread", "list"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("peers off"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
