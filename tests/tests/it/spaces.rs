//! Spaces: a machine reached over SSH brought in as a home. The tests talk to a real `sshd`
//! on a loopback port (`kiki_tests::sshd`), through the system's `ssh`, host keys checked.

use std::process::Command;

use kiki_tests::binaries::{binary, free_udp_port, kiki, kiki_json, kiki_with_env, new_home, wait_for_turns};
use kiki_tests::sshd::Sshd;

/// `ssh` with the test server's client config, running `command` there.
fn ssh(sshd: &Sshd, command: &str) -> std::process::Output {
    Command::new("ssh")
        .arg("-F")
        .arg(sshd.config())
        .args(["-o", "BatchMode=yes"])
        .arg(sshd.url())
        .arg(command)
        .output()
        .expect("ssh")
}

/// The test server is a real SSH server: reached with its host key trusted, refused when the
/// key is unknown or another.
#[test]
fn the_test_sshd_is_reached_only_with_its_host_key_trusted() {
    let sshd = Sshd::start();
    let out = ssh(&sshd, "echo hello");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello\n");
    sshd.forget();
    let unknown = ssh(&sshd, "echo hello");
    assert!(!unknown.status.success(), "an unknown host key is refused");
    sshd.distrust();
    let changed = ssh(&sshd, "echo hello");
    assert!(!changed.status.success(), "a changed host key is refused");
    let said = String::from_utf8_lossy(&changed.stderr);
    assert!(
        said.contains("HOST IDENTIFICATION HAS CHANGED") || said.contains("verification failed"),
        "{said}"
    );
}

/// A local home (bridges listening on loopback) with the test server's ssh config in the
/// environment `kiki` reads it from.
struct Setup {
    sshd: Sshd,
    local: std::path::PathBuf,
    remote_home: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Setup {
    fn start() -> Self {
        Self::with(Sshd::start())
    }

    fn with(sshd: Sshd) -> Self {
        let (dir, local) = new_home();
        std::fs::create_dir_all(&local).expect("home");
        // A profile whose turn sends its input's first line's thread (in the space) a
        // message, as an agent would, with the turn's own token.
        let sender = format!(
            "read target; exec {} --json thread send \"dev/$target\" --key k1 --content hello",
            binary("kiki").display()
        );
        std::fs::write(
            local.join("config.toml"),
            format!(
                "[bridge]\nlisten = \"127.0.0.1:{}\"\n[profiles.sender]\nexecutor = \"exec\"\n\
                 command = [\"sh\", \"-c\", {sender:?}]\nthread_communication = true\n",
                free_udp_port()
            ),
        )
        .expect("config");
        kiki_json(&local, &["up"]);
        let remote_home = sshd.remote_dir("home");
        Self { sshd, local, remote_home, _dir: dir }
    }

    /// `kiki --home LOCAL ARGS…` with the test server's ssh config.
    fn kiki(&self, args: &[&str]) -> std::process::Output {
        let config = self.sshd.config();
        kiki_with_env(&self.local, args, &[("KIKI_SSH_CONFIG", config.to_str().expect("path"))])
    }

    fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let out = self.kiki(&all);
        assert!(
            out.status.success(),
            "kiki {args:?} failed: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        serde_json::from_slice(&out.stdout).expect("one JSON document")
    }

    /// `kiki --space dev --json ARGS…`.
    fn there(&self, args: &[&str]) -> serde_json::Value {
        let mut all = vec!["--space", "dev"];
        all.extend_from_slice(args);
        self.json(&all)
    }

    /// The space's thread once it has `n` ended turns, read through `--space`.
    fn turns_there(&self, thread: &str, n: usize) -> serde_json::Value {
        let started = std::time::Instant::now();
        loop {
            let page = self.there(&["thread", "read", thread]);
            if page["turns"].as_array().map_or(0, Vec::len) >= n {
                return page;
            }
            assert!(started.elapsed() < std::time::Duration::from_secs(20), "{thread}: {page}");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// Kills the space's kept SSH master (as a dropped connection would end it).
    fn kill_master(&self) {
        let kept = std::fs::read_to_string(self.local.join("spaces/dev.master")).expect("the kept master");
        let control = kept.lines().next().expect("its control socket");
        let check =
            Command::new("ssh").args(["-S", control, "-O", "check", "dev"]).output().expect("ssh -O check");
        let said = String::from_utf8_lossy(&check.stderr);
        let pid: i32 = said
            .split("pid=")
            .nth(1)
            .and_then(|rest| rest.split(')').next())
            .and_then(|pid| pid.parse().ok())
            .unwrap_or_else(|| panic!("the master's pid: {said}"));
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL)
            .expect("kill");
    }

    /// The space's carrier's state as `space list` shows it.
    fn carrier(&self) -> serde_json::Value {
        self.json(&["space", "list"])["spaces"][0]["via_ssh"].clone()
    }

    fn add(&self, extra: &[&str]) -> serde_json::Value {
        let url = self.sshd.url();
        let remote_home = self.remote_home.to_str().expect("path").to_string();
        let mut args = vec!["space", "add", &url, "--name", "dev", "--remote-home", &remote_home];
        args.extend_from_slice(extra);
        self.json(&args)
    }
}

impl Drop for Setup {
    /// Both homes down, then what `kiki space` left running here for the space: its carrier
    /// (it would also stop by itself within seconds of the home) and its SSH master (it
    /// would close itself after ten idle minutes), the master before sshd goes, so the
    /// session ends cleanly there too.
    fn drop(&mut self) {
        let _ = kiki(&self.remote_home, &["down"]);
        let _ = kiki(&self.local, &["down"]);
        let spaces = self.local.join("spaces");
        let carrier = std::fs::read_to_string(spaces.join("dev.carrier")).unwrap_or_default();
        if let Some(pid) = carrier.lines().next().and_then(|p| p.parse().ok()) {
            let _ =
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGTERM);
        }
        if let Some(control) =
            std::fs::read_to_string(spaces.join("dev.master")).ok().as_deref().and_then(|k| k.lines().next())
        {
            let _ = Command::new("ssh").args(["-S", control, "-O", "exit", "dev"]).output();
        }
    }
}

#[test]
fn a_space_is_added_in_one_command_and_again_changes_nothing() {
    let s = Setup::start();
    let first = s.add(&["--grant", "send,wake"]);
    assert_eq!(first["uploaded"], true, "{first}");
    assert!(s.remote_home.join("bin/kikid").is_file());
    let home_id = first["space"]["home_id"].as_str().expect("id").to_string();
    assert_eq!(kiki_json(&s.remote_home, &["status"])["home_id"], home_id.as_str());

    let again = s.add(&["--grant", "send,wake"]);
    assert_eq!(again["uploaded"], false, "{again}");
    assert_eq!(again["space"]["home_id"], home_id.as_str());
    let bridges = kiki_json(&s.local, &["bridge", "list"]);
    let ours: Vec<_> = bridges["bridges"]
        .as_array()
        .expect("bridges")
        .iter()
        .filter(|b| b["peer_home_id"] == home_id.as_str())
        .collect();
    assert_eq!(ours.len(), 2, "one bridge each way: {bridges}");
    let pending = kiki_json(&s.remote_home, &["bridge", "pending"]);
    assert_eq!(pending["requests"].as_array().map(Vec::len), Some(0), "{pending}");
    let spaces = s.json(&["space", "list"]);
    assert_eq!(spaces["spaces"].as_array().map(Vec::len), Some(1), "{spaces}");
    assert_eq!(spaces["spaces"][0]["outbound"]["state"], "active", "{spaces}");
    assert_eq!(spaces["spaces"][0]["inbound"]["state"], "active", "{spaces}");
}

/// `--space` runs commands against the space's home through its forwarded socket; a thread
/// created there from here is sent to by a thread here over the space's bridge, and its
/// turn runs there.
#[test]
fn threads_in_a_space_are_steered_from_here_and_reached_over_the_bridge() {
    let s = Setup::start();
    let added = s.add(&[]);
    let status = s.there(&["status"]);
    assert_eq!(status["home_id"], added["space"]["home_id"], "{status}");
    assert_ne!(status["home_id"], s.json(&["status"])["home_id"]);

    let there = s.there(&["thread", "create", "--profile", "echo", "--title", "in the space"]);
    let id = there["id"].as_str().expect("id").to_string();
    s.there(&["thread", "set", &id, "--communication", "on"]);
    let listed = s.json(&["thread", "list", "--bridge", "dev"]);
    assert!(
        listed["threads"].as_array().expect("threads").iter().any(|t| t["id"] == id.as_str()),
        "{listed}"
    );

    let sender = kiki_json(&s.local, &["thread", "create", "--profile", "sender", "--prompt", &id]);
    let sent = wait_for_turns(&s.local, sender["id"].as_str().expect("id"), 1);
    assert!(sent["turns"][0]["output"].as_str().expect("output").contains("delivered"), "{sent}");
    let read = s.turns_there(&id, 1);
    assert_eq!(read["turns"][0]["output"], "echo: hello", "{read}");
    let input = &read["turns"][0]["inputs"][0];
    assert_eq!(input["source"]["session_id"], sender["id"], "{read}");
}

/// A room here with a member in the space needs no extra step: the space's bridge wakes the
/// member there, and its turn sees the room's entry.
#[test]
fn a_room_here_wakes_a_member_in_the_space() {
    let s = Setup::start();
    s.add(&["--grant", "send,read"]);
    let member = s.there(&["thread", "create", "--profile", "echo", "--title", "member"]);
    let member = member["id"].as_str().expect("id").to_string();
    s.there(&["thread", "set", &member, "--communication", "on"]);
    let host = kiki_json(&s.local, &["thread", "create", "--profile", "echo", "--title", "host"]);
    let room =
        kiki_json(&s.local, &["room", "create", "--host", host["id"].as_str().expect("id"), "--name", "r"]);
    let room = room["room"]["id"].as_str().expect("room").to_string();
    let remote_member = format!("dev/{member}");
    assert_eq!(kiki_json(&s.local, &["room", "add", &room, &remote_member])["added"], true);
    kiki_json(
        &s.local,
        &["room", "send", &room, "--content", "over to the space", "--mention", &remote_member],
    );
    let read = s.turns_there(&member, 1);
    let turn = &read["turns"][0];
    assert!(turn["input"].as_str().expect("input").starts_with(&format!("[kiki room {room} ")), "{read}");
    assert_eq!(turn["output"], "echo: over to the space", "{read}");
    assert_eq!(turn["inputs"][0]["room"], room.as_str(), "{read}");
}

/// An unknown host key and a changed one are refused (permission denied, exit 7) with words
/// that say how to trust the machine, and leave no space behind; trusted, the same command
/// works.
#[test]
fn an_unknown_or_changed_host_key_is_refused_saying_how_to_trust_it() {
    let s = Setup::start();
    let url = s.sshd.url();
    let remote_home = s.remote_home.to_str().expect("path").to_string();
    let add = ["space", "add", url.as_str(), "--name", "dev", "--remote-home", remote_home.as_str()];
    for (case, make) in [("unknown", Sshd::forget as fn(&Sshd)), ("changed", Sshd::distrust)] {
        make(&s.sshd);
        let out = s.kiki(&add);
        assert_eq!(out.status.code(), Some(7), "{case}: {}", String::from_utf8_lossy(&out.stderr));
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(
            said.contains("host key") && said.contains("known_hosts") && said.contains("trust it"),
            "{case}: {said}"
        );
        assert_eq!(s.json(&["space", "list"])["spaces"], serde_json::json!([]), "{case}");
        assert!(!s.remote_home.join("config.toml").exists(), "{case}: nothing ran there");
    }
    s.sshd.trust();
    s.add(&[]);
    assert_eq!(s.json(&["space", "list"])["spaces"][0]["name"], "dev");
}

/// `space remove` revokes the space's bridges here and there; with --stop the space's home
/// stops too. Added again, the space gets new bridges.
#[test]
fn removing_a_space_revokes_its_bridges_at_both_ends() {
    let s = Setup::start();
    let home_id = s.add(&["--grant", "send"])["space"]["home_id"].as_str().expect("id").to_string();
    let removed = s.json(&["space", "remove", "dev"]);
    // Both of this home's ends; the space's ends learn of it from this home, or are revoked
    // over SSH.
    assert!(removed["revoked"].as_array().expect("revoked").len() >= 2, "{removed}");
    let here = kiki_json(&s.local, &["bridge", "list"]);
    let there = kiki_json(&s.remote_home, &["bridge", "list"]);
    for (end, listed) in [("here", &here), ("there", &there)] {
        let bridges = listed["bridges"].as_array().expect("bridges");
        assert_eq!(bridges.len(), 2, "{end}: {listed}");
        assert!(bridges.iter().all(|b| b["state"] == "revoked"), "{end}: {listed}");
    }
    assert_eq!(s.json(&["space", "list"])["spaces"], serde_json::json!([]));
    assert!(!s.kiki(&["--space", "dev", "status"]).status.success(), "no space dev any more");
    let left: Vec<_> = std::fs::read_dir(s.local.join("spaces"))
        .expect("spaces dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("dev") || n.starts_with(".ssh-connection"))
        .collect();
    assert!(left.is_empty(), "the SSH master and its files are gone: {left:?}");

    let again = s.add(&[]);
    assert_eq!(again["space"]["home_id"], home_id.as_str(), "the same home");
    let active = kiki_json(&s.local, &["bridge", "list"])["bridges"]
        .as_array()
        .expect("bridges")
        .iter()
        .filter(|b| b["state"] == "active")
        .count();
    assert_eq!(active, 1, "a new bridge from here");
    s.json(&["space", "remove", "dev", "--stop"]);
    assert!(!kiki(&s.remote_home, &["status"]).status.success(), "the space's home stopped");

    // Added again to be carried over SSH, the space's home listens on its loopback only.
    let listening = || std::fs::read_to_string(s.remote_home.join("config.toml")).expect("config");
    assert!(listening().contains("listen = \"0.0.0.0:"), "{}", listening());
    let carried = s.add(&["--via-ssh"]);
    assert_eq!(carried["space"]["via_ssh"], true, "{carried}");
    assert!(listening().contains("listen = \"127.0.0.1:"), "{}", listening());
    let status = kiki_json(&s.remote_home, &["status"]);
    assert!(status["bridge_listen"].as_str().expect("listen").starts_with("127.0.0.1:"), "{status}");
}

/// The kept SSH master killed: the next `--space` command starts a new one, and the bridge,
/// which never went through SSH, carried on meanwhile.
#[test]
fn a_killed_ssh_master_is_started_again_by_the_next_command() {
    let s = Setup::start();
    s.add(&[]);
    let thread = s.there(&["thread", "create", "--profile", "echo", "--title", "steady"]);
    let thread = thread["id"].as_str().expect("id").to_string();
    s.there(&["thread", "set", &thread, "--communication", "on"]);
    s.kill_master();

    let sent = kiki_json(
        &s.local,
        &["thread", "send", &format!("dev/{thread}"), "--key", "k1", "--content", "still here"],
    );
    assert_eq!(sent["status"], "delivered", "{sent}");
    assert_eq!(s.there(&["status"])["home_id"], kiki_json(&s.remote_home, &["status"])["home_id"]);
    let read = s.turns_there(&thread, 1);
    assert_eq!(read["turns"][0]["output"], "echo: still here", "{read}");
}

/// Behind a firewall that lets only SSH through, a space added plainly cannot be bridged
/// (its bridge port is UDP); added `--via-ssh`, its bridges are carried inside the SSH
/// connection, both ways, and a thread here reaches a thread there and back.
#[test]
fn the_bridges_are_carried_over_ssh_when_udp_is_blocked() {
    let s = Setup::with(Sshd::start_behind_firewall());
    let plain = s.kiki(&[
        "space",
        "add",
        &s.sshd.url(),
        "--name",
        "dev",
        "--remote-home",
        s.remote_home.to_str().expect("path"),
    ]);
    assert!(!plain.status.success(), "QUIC cannot get through the firewall");
    let said = String::from_utf8_lossy(&plain.stderr);
    assert!(said.contains(&s.sshd.host), "{said}");

    let added = s.add(&["--via-ssh", "--grant", "send,wake"]);
    assert_eq!(added["space"]["via_ssh"], true, "{added}");
    let listed = s.json(&["space", "list"]);
    assert_eq!(listed["spaces"][0]["via_ssh"], "carrying", "{listed}");
    assert_eq!(listed["spaces"][0]["outbound"]["state"], "active", "{listed}");
    assert_eq!(listed["spaces"][0]["inbound"]["state"], "active", "{listed}");

    // Here → there: a turn here sends to a thread there.
    let there = s.there(&["thread", "create", "--profile", "echo", "--title", "beyond the firewall"]);
    let there = there["id"].as_str().expect("id").to_string();
    s.there(&["thread", "set", &there, "--communication", "on"]);
    let sender = kiki_json(&s.local, &["thread", "create", "--profile", "sender", "--prompt", &there]);
    let sent = wait_for_turns(&s.local, sender["id"].as_str().expect("id"), 1);
    assert!(sent["turns"][0]["output"].as_str().expect("output").contains("delivered"), "{sent}");
    assert_eq!(s.turns_there(&there, 1)["turns"][0]["output"], "echo: hello");

    // There → here, over the bridge back.
    let here = kiki_json(&s.local, &["thread", "create", "--profile", "echo", "--title", "at home"]);
    let here = here["id"].as_str().expect("id").to_string();
    kiki_json(&s.local, &["thread", "set", &here, "--communication", "on"]);
    let back = kiki_json(
        &s.remote_home,
        &["thread", "send", &format!("origin/{here}"), "--key", "b1", "--content", "back"],
    );
    assert_eq!(back["status"], "delivered", "{back}");
    assert_eq!(wait_for_turns(&s.local, &here, 1)["turns"][0]["output"], "echo: back");
}

/// `kiki mcp --space NAME`: an agent CLI here gets the space's home's tools, through the
/// forwarded socket — it lists and sends to threads there as if it ran there, and with
/// `--thread` edits and builds in that thread's workspace there (the session tools run in
/// the space's home, and its thread keeps the calls).
#[tokio::test(flavor = "multi_thread")]
async fn an_agent_here_uses_the_spaces_tools_through_kiki_mcp_space() {
    let s = Setup::start();
    s.add(&[]);
    let workspace = s.sshd.remote_dir("workspace");
    let cwd = workspace.to_str().expect("path");
    let thread = s.there(&["thread", "create", "--profile", "echo", "--title", "over mcp", "--cwd", cwd]);
    let thread = thread["id"].as_str().expect("id").to_string();
    let config = s.sshd.config();
    let env = [("KIKI_SSH_CONFIG", config.to_str().expect("path"))];
    let (session, _) = kiki_tests::mcp::start(
        &binary("kiki"),
        Some(&s.local),
        &["--space", "dev", "--thread", &thread],
        &env,
        false,
    )
    .await
    .expect("kiki mcp --space starts");
    let tools = session.list_all_tools().await.expect("tools/list");
    assert!(tools.iter().any(|t| t.name == "Bash") && tools.iter().any(|t| t.name == "ThreadSend"));
    let call = async |tool: &str, arguments: serde_json::Value| {
        let result = kiki_tests::mcp::call(&session, tool, arguments).await.expect("answered");
        assert_ne!(result.is_error, Some(true), "{tool}: {}", kiki_tests::mcp::text(&result));
        kiki_tests::mcp::text(&result)
    };
    call("Write", serde_json::json!({"path": "src/lib.txt", "content": "fn main() {}\n"})).await;
    assert_eq!(
        std::fs::read_to_string(workspace.join("src/lib.txt")).expect("written there"),
        "fn main() {}\n"
    );
    call("Edit", serde_json::json!({"path": "src/lib.txt", "old_string": "main", "new_string": "start"}))
        .await;
    assert!(call("Read", serde_json::json!({"path": "src/lib.txt"})).await.contains("fn start() {}"));
    let built = call("Bash", serde_json::json!({"command": "pwd && wc -c < src/lib.txt"})).await;
    assert_eq!(built, format!("{}\n14\n", workspace.canonicalize().expect("path").display()));
    let kept = s.there(&["thread", "read", &thread, "--tools"]);
    let names: Vec<&str> =
        kept["tool_calls"].as_array().expect("calls").iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(names, ["Write", "Edit", "Read", "Bash"], "{kept}");
    let listed =
        kiki_tests::mcp::call(&session, "ThreadList", serde_json::json!({})).await.expect("ThreadList");
    let listed = listed.structured_content.expect("structured");
    assert!(
        listed["threads"].as_array().expect("threads").iter().any(|t| t["id"] == thread.as_str()),
        "{listed}"
    );
    let sent = kiki_tests::mcp::call(
        &session,
        "ThreadSend",
        serde_json::json!({"session_id": thread, "idempotency_key": "m1", "content": "from an agent here"}),
    )
    .await
    .expect("ThreadSend");
    assert_ne!(sent.is_error, Some(true), "{}", kiki_tests::mcp::text(&sent));
    assert_eq!(s.turns_there(&thread, 1)["turns"][0]["output"], "echo: from an agent here");
    session.cancel().await.expect("closed");
}

/// A carried bridge rides out its SSH connection dropping (the carrier opens it again), the
/// space's home restarting (`space up`), and this home restarting (the carrier stops with it;
/// `space up` starts it again).
#[test]
fn a_carried_bridge_outlives_its_ssh_connection_and_both_homes_restarting() {
    let s = Setup::start();
    s.add(&["--via-ssh"]);
    let thread = s.there(&["thread", "create", "--profile", "echo", "--title", "carried"]);
    let thread = thread["id"].as_str().expect("id").to_string();
    s.there(&["thread", "set", &thread, "--communication", "on"]);
    let target = format!("dev/{thread}");
    let eventually = |what: &str, done: &dyn Fn() -> bool| {
        let started = std::time::Instant::now();
        while !done() {
            assert!(started.elapsed() < std::time::Duration::from_secs(20), "{what}");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    };

    s.kill_master();
    kiki_json(&s.local, &["thread", "send", &target, "--key", "k1", "--content", "after ssh dropped"]);
    assert_eq!(s.turns_there(&thread, 1)["turns"][0]["output"], "echo: after ssh dropped");

    kiki_json(&s.remote_home, &["down"]);
    s.json(&["space", "up", "dev"]);
    assert_eq!(s.carrier(), "carrying");
    kiki_json(&s.local, &["thread", "send", &target, "--key", "k2", "--content", "after it restarted"]);
    assert_eq!(s.turns_there(&thread, 2)["turns"][1]["output"], "echo: after it restarted");

    kiki_json(&s.local, &["down"]);
    eventually("the carrier stops with this home", &|| s.carrier() == "stopped");
    kiki_json(&s.local, &["up"]);
    s.json(&["space", "up", "dev"]);
    assert_eq!(s.carrier(), "carrying");
    kiki_json(
        &s.local,
        &["thread", "send", &target, "--key", "k3", "--content", "after this home restarted"],
    );
    assert_eq!(s.turns_there(&thread, 3)["turns"][2]["output"], "echo: after this home restarted");
}
