//! The smoke tier's crashes and stops: `kill -9` of a daemon at each point a call or a
//! turn can be, SIGTERM, and `kiki thread stop` — nothing answered is lost or doubled.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kiki_tests::binaries::{
    Down, binary, kiki, kiki_json, kill_9, new_home, paired_homes, pid_of, wait_for_turns,
};

/// The pid an `exec` agent wrote to `HOME/agent.pid`, once it has.
fn agent_pid(home: &Path) -> String {
    let started = Instant::now();
    loop {
        let pid = std::fs::read_to_string(home.join("agent.pid")).unwrap_or_default();
        if pid.ends_with('\n') {
            return pid.trim().to_string();
        }
        assert!(started.elapsed() < Duration::from_secs(20), "the agent never wrote its pid");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether any process of the group runs (zombies do not count).
fn alive(pgid: &str) -> bool {
    let members = std::fs::read_dir("/proc").expect("/proc").filter_map(|entry| {
        let stat = std::fs::read_to_string(entry.ok()?.path().join("stat")).ok()?;
        let fields: Vec<String> = stat.rsplit_once(')')?.1.split_whitespace().map(String::from).collect();
        (fields.get(2).map(String::as_str) == Some(pgid)).then(|| fields[0].clone())
    });
    members.collect::<Vec<_>>().iter().any(|state| state != "Z")
}

/// kill -9 right after answers: what was answered is there after the restart; the turn the
/// crash interrupted is failed (never re-run), its agent (still running, orphaned) is
/// stopped, and the input queued behind it runs.
#[test]
fn kill_9_keeps_answered_writes_and_fails_the_interrupted_turn() {
    let (_dir, home) = new_home();
    let _down = Down(&home);
    std::fs::create_dir_all(&home).expect("home");
    // The slow turn's agent writes its pid (its process group's id) and waits on a child in
    // its group.
    std::fs::write(
        home.join("config.toml"),
        "[profiles.slow]\nexecutor = \"exec\"\ncommand = [\"sh\", \"-c\", \"read line; [ \\\"$line\\\" = quick ] && echo fast && exit; echo $$ > \\\"$KIKI_HOME/agent.pid\\\"; sleep 30\"]\n",
    )
    .expect("config");
    kiki_json(&home, &["up"]);
    let quick = kiki_json(&home, &["thread", "create", "--title", "kept"]);
    let slow = kiki_json(&home, &["thread", "create", "--profile", "slow", "--prompt", "slow"]);
    let slow_id = slow["id"].as_str().expect("id").to_string();
    let started = Instant::now();
    while kiki_json(&home, &["thread", "list"])["threads"]
        .as_array()
        .and_then(|ts| ts.iter().find(|t| t["id"] == slow_id.as_str()))
        .map(|t| t["state"] != "running")
        .unwrap_or(true)
    {
        assert!(started.elapsed() < Duration::from_secs(20), "the slow turn never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let queued = kiki_json(&home, &["thread", "say", &slow_id, "quick"]);
    assert_eq!(queued["turn_started"], false);
    let agent = agent_pid(&home);
    assert!(alive(&agent), "the slow turn's agent runs");
    kill_9(&pid_of(&home));
    std::thread::sleep(Duration::from_millis(200));
    assert!(alive(&agent), "kill -9 of kikid leaves its agent running");

    kiki_json(&home, &["up"]);
    let list = kiki_json(&home, &["thread", "list"]);
    let ids: Vec<&str> =
        list["threads"].as_array().expect("threads").iter().filter_map(|t| t["id"].as_str()).collect();
    assert!(ids.contains(&quick["id"].as_str().expect("id")), "an answered create survives kill -9");
    let started = Instant::now();
    while alive(&agent) {
        assert!(started.elapsed() < Duration::from_secs(10), "the restart left the interrupted turn's agent");
        std::thread::sleep(Duration::from_millis(20));
    }
    let page = wait_for_turns(&home, &slow_id, 2);
    assert_eq!(page["turns"][0]["status"], "failed");
    assert!(page["turns"][0]["error"].as_str().unwrap_or_default().contains("kikid stopped"));
    assert_eq!(page["turns"][1]["status"], "completed");
    assert_eq!(page["turns"][1]["output"], "fast\n");
}

/// `kiki thread stop`: the running turn's agent (and what it started in its group) is
/// stopped, the turn ends `cancelled`; `--json` prints the answer, and a thread with no
/// running turn is an error (exit 6, `failed_precondition`).
#[test]
fn thread_stop_ends_the_running_turn() {
    let (_dir, home) = new_home();
    let _down = Down(&home);
    std::fs::create_dir_all(&home).expect("home");
    std::fs::write(
        home.join("config.toml"),
        "[profiles.slow]\nexecutor = \"exec\"\ncommand = [\"sh\", \"-c\", \"echo $$ > \\\"$KIKI_HOME/agent.pid\\\"; sleep 300\"]\n",
    )
    .expect("config");
    kiki_json(&home, &["up"]);
    let slow = kiki_json(&home, &["thread", "create", "--profile", "slow", "--prompt", "slow"]);
    let slow_id = slow["id"].as_str().expect("id").to_string();
    let agent = agent_pid(&home);
    let stopped = kiki_json(&home, &["thread", "stop", &slow_id]);
    assert_eq!(stopped["turn_status"], "cancelled", "{stopped}");
    assert!(!alive(&agent), "the agent's process group is gone");
    let page = wait_for_turns(&home, &slow_id, 1);
    assert_eq!(page["turns"][0]["id"], stopped["turn_id"]);
    assert_eq!(page["turns"][0]["status"], "cancelled");

    let idle = kiki(&home, &["--json", "thread", "stop", &slow_id]);
    assert_eq!(idle.status.code(), Some(6), "{idle:?}");
    let error: serde_json::Value = serde_json::from_slice(&idle.stdout).expect("one JSON document");
    assert_eq!(error["error"]["code"], "failed_precondition", "{error}");
    let text = kiki(&home, &["thread", "stop", &slow_id]);
    assert!(String::from_utf8_lossy(&text.stderr).contains("no running turn"), "{text:?}");
}

#[test]
fn sigterm_stops_cleanly() {
    let (_dir, home) = new_home();
    let mut child =
        Command::new(binary("kikid")).arg("--home").arg(&home).stderr(Stdio::null()).spawn().expect("kikid");
    let started = Instant::now();
    while kiki(&home, &["status"]).status.code() != Some(0) {
        assert!(started.elapsed() < Duration::from_secs(20), "kikid never answered");
        std::thread::sleep(Duration::from_millis(10));
    }
    let ok = Command::new("kill").args(["-TERM", &child.id().to_string()]).status().expect("kill").success();
    assert!(ok);
    let status = child.wait().expect("wait");
    assert!(status.success(), "clean exit on SIGTERM: {status}");
    assert!(!home.join("kikid.sock").exists(), "socket removed");
}

/// ThreadSend answered `pending` (the target is busy), then kill -9: after the restart the
/// message is delivered exactly once, and a retry with the same key replays it.
#[test]
fn kill_9_after_a_send_answers_loses_nothing_and_delivers_once() {
    let (_dir, home) = new_home();
    let _down = Down(&home);
    std::fs::create_dir_all(&home).expect("home");
    std::fs::write(
        home.join("config.toml"),
        "[mailbox]\ndelivery_wait = \"50ms\"\n[profiles.slow]\nexecutor = \"exec\"\ncommand = [\"sh\", \"-c\", \"read line; [ \\\"$line\\\" = busy ] && sleep 30; echo done\"]\n",
    )
    .expect("config");
    kiki_json(&home, &["up"]);
    let target = kiki_json(&home, &["thread", "create", "--profile", "slow", "--prompt", "busy"]);
    let id = target["id"].as_str().expect("id").to_string();
    let started = Instant::now();
    while kiki_json(&home, &["thread", "list"])["threads"][0]["state"] != "running" {
        assert!(started.elapsed() < Duration::from_secs(20), "the busy turn never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let sent = kiki_json(&home, &["thread", "send", &id, "--key", "survive", "--content", "after the crash"]);
    assert_eq!(sent["status"], "pending");
    kill_9(&pid_of(&home));

    kiki_json(&home, &["up"]);
    let page = wait_for_turns(&home, &id, 2);
    assert_eq!(page["turns"][0]["status"], "failed", "the interrupted turn");
    let second = &page["turns"][1];
    assert_eq!(second["inputs"][0]["message_id"], sent["message_id"]);
    assert_eq!(second["inputs"].as_array().map(Vec::len), Some(1));
    let replay =
        kiki_json(&home, &["thread", "send", &id, "--key", "survive", "--content", "after the crash"]);
    assert_eq!(replay["message_id"], sent["message_id"]);
    assert_eq!(replay["replayed"], true);
    std::thread::sleep(Duration::from_millis(300));
    let page = kiki_json(&home, &["thread", "read", &id]);
    assert_eq!(page["turns"].as_array().map(Vec::len), Some(2), "delivered exactly once");
}

/// Source killed with -9 while its send waits in the outbox (the target is down): after
/// both come back, the message is delivered exactly once.
#[test]
fn kill_9_of_the_source_keeps_its_outbox() {
    let pair = paired_homes();
    let (a, b, target) = (pair.a.clone(), pair.b.clone(), pair.target.clone());
    kiki_json(&b, &["down"]);
    let sent =
        kiki_json(&a, &["thread", "send", &format!("bee/{target}"), "--key", "k9", "--content", "survives"]);
    assert_eq!(sent["status"], "pending");
    kill_9(&pid_of(&a));
    kiki_json(&b, &["up"]);
    kiki_json(&a, &["up"]);
    let page = wait_for_turns(&b, &target, 1);
    assert_eq!(page["turns"][0]["output"], "echo: survives");
    std::thread::sleep(Duration::from_millis(800));
    let page = kiki_json(&b, &["thread", "read", &target]);
    assert_eq!(page["turns"].as_array().map(Vec::len), Some(1), "exactly once");
    let receipts = kiki_json(&a, &["bridge", "receipts", "bee"]);
    assert_eq!(receipts["receipts"][0]["status"], "delivered");
}

/// A target restarted after kill -9 answers the packets of its connections from before the
/// crash with a stateless reset: the source redials at once instead of calling into a
/// connection nobody serves until QUIC's idle timeout ends it (30 s by default, 10 s here).
#[test]
fn a_source_reaches_a_target_restarted_after_kill_9_at_once() {
    let pair = paired_homes();
    let (a, b, target) = (pair.a.clone(), pair.b.clone(), pair.target.clone());
    let send = |key: &str| {
        kiki_json(&a, &["thread", "send", &format!("bee/{target}"), "--key", key, "--content", key]);
    };
    send("before");
    wait_for_turns(&b, &target, 1);
    kill_9(&pid_of(&b));
    kiki_json(&b, &["up"]);
    let restarted = Instant::now();
    send("after");
    let page = wait_for_turns(&b, &target, 2);
    let took = restarted.elapsed();
    assert_eq!(page["turns"][1]["output"], "echo: after");
    assert!(took < Duration::from_secs(5), "delivered {took:?} after the target's restart");
}

/// The target killed with -9 while sends are arriving: whatever it had acknowledged is kept,
/// what it had not is retried, and each message is delivered exactly once.
#[test]
fn kill_9_of_the_target_mid_send_delivers_each_message_once() {
    let pair = paired_homes();
    let (a, b, target) = (pair.a.clone(), pair.b.clone(), pair.target.clone());
    let answered = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let sender = {
        let (a, target, answered) = (a.clone(), target.clone(), answered.clone());
        std::thread::spawn(move || {
            for i in 0..20 {
                let key = format!("k{i}");
                let content = format!("m{i}");
                kiki_json(
                    &a,
                    &["thread", "send", &format!("bee/{target}"), "--key", &key, "--content", &content],
                );
                answered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        })
    };
    // Killed once a few sends got through, while the rest are still coming.
    let started = Instant::now();
    while answered.load(std::sync::atomic::Ordering::SeqCst) < 3 {
        assert!(!sender.is_finished(), "the sender stopped before three sends were answered");
        assert!(started.elapsed() < Duration::from_secs(60), "three sends not answered in 60 s");
        std::thread::sleep(Duration::from_millis(5));
    }
    kill_9(&pid_of(&b));
    let at_kill = answered.load(std::sync::atomic::Ordering::SeqCst);
    assert!(at_kill < 20, "the target was killed mid-send ({at_kill} of 20 answered)");
    sender.join().expect("all 20 sends answered (durable at the source)");
    kiki_json(&b, &["up"]);
    let started = Instant::now();
    loop {
        let page = kiki_json(&b, &["thread", "read", &target, "--limit", "100"]);
        let mut ids: Vec<String> = page["turns"]
            .as_array()
            .expect("turns")
            .iter()
            .flat_map(|t| {
                t["input"].as_str().unwrap_or_default().lines().map(str::to_string).collect::<Vec<_>>()
            })
            .filter(|line| line.starts_with('m'))
            .collect();
        ids.sort();
        let before = ids.len();
        ids.dedup();
        assert_eq!(before, ids.len(), "no message twice: {ids:?}");
        if ids.len() == 20 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "only {} of 20 arrived: {ids:?}", ids.len());
        std::thread::sleep(Duration::from_millis(200));
    }
}
