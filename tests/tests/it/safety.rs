//! What a user can rely on when things go wrong, with the real binaries: homes another user
//! could have set up are refused, the CLI reads bounded input, a damaged store or a lost key
//! stops the home with what to do, a full disk says so and loses nothing, a clean stop and a
//! backup each leave a whole copy of the data, and a call cut off by a crash says its
//! outcome is unknown.
//!
//! Some tests change file owners and mount small file systems: the suite runs as root (the
//! README's test command does; it installs packages too).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kiki_tests::binaries::{
    Down, binary, kiki, kiki_fails, kiki_json, kiki_with_env, kill_9, new_home, paired_homes_from, pid_of,
};

/// The uid of `nobody`: another user than the one running the tests.
const ANOTHER_USER: u32 = 65534;

fn assert_root(why: &str) {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test needs root ({why}); the README's test command runs as root"
    );
}

/// `kikid --home HOME`, run until it exits (it should fail at start): exit code, stderr.
fn kikid_start(home: &Path) -> (Option<i32>, String) {
    let out =
        Command::new(binary("kikid")).arg("--home").arg(home).stderr(Stdio::piped()).output().expect("kikid");
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn chown(path: &Path, uid: u32) {
    nix::unistd::chown(path, Some(nix::unistd::Uid::from_raw(uid)), None).expect("chown");
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

fn lock_held(home: &Path) -> bool {
    std::fs::File::open(home.join("kikid.lock"))
        .is_ok_and(|f| matches!(f.try_lock(), Err(std::fs::TryLockError::WouldBlock)))
}

/// A home whose daemon ran and stopped cleanly, with a thread and two turns in it.
fn stopped_home_with_data() -> (tempfile::TempDir, PathBuf, String) {
    let (dir, home) = new_home();
    kiki_json(&home, &["up"]);
    let thread =
        kiki_json(&home, &["thread", "create", "--prompt", "first"])["id"].as_str().expect("id").to_string();
    kiki_json(&home, &["thread", "send", &thread, "--key", "k1", "--content", "second"]);
    wait_for_outputs(&home, &thread, &["echo: first", "echo: second"]);
    kiki_json(&home, &["down"]);
    (dir, home, thread)
}

/// A new empty thread of the running `home`: its id.
fn new_thread(home: &Path, title: &str) -> String {
    kiki_json(home, &["thread", "create", "--title", title])["id"].as_str().expect("id").to_string()
}

/// Waits until the thread's ended turns have printed each of `outputs` (in any turns).
fn wait_for_outputs(home: &Path, thread: &str, outputs: &[&str]) -> String {
    let started = Instant::now();
    loop {
        let all = outputs_of(home, thread);
        if outputs.iter().all(|o| all.contains(o)) {
            return all;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "{thread} never printed {outputs:?}: {all}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every ended turn's output of a thread, one per line.
fn outputs_of(home: &Path, thread: &str) -> String {
    let page = kiki_json(home, &["thread", "read", thread, "--limit", "100"]);
    let turns = page["turns"].as_array().cloned().unwrap_or_default();
    turns.iter().map(|t| t["output"].as_str().unwrap_or_default().to_string()).collect::<Vec<_>>().join("\n")
}

/// A home directory, its config, its key and its store are refused unless they are the
/// running user's and nobody else may write them: another user could otherwise plant a
/// config whose `exec` profile runs as this user, or a key that becomes this home's.
#[test]
fn files_another_user_could_have_written_are_refused_by_kikid_and_kiki() {
    assert_root("it gives files to another user");
    let (_dir, home, _) = stopped_home_with_data();

    // A home directory of another user's (made under a shared /tmp, say).
    chown(&home, ANOTHER_USER);
    let (code, said) = kikid_start(&home);
    assert_eq!(code, Some(7), "{said}");
    assert!(
        said.contains(&format!("home directory {} belongs to uid {ANOTHER_USER}", home.display())),
        "{said}"
    );
    let (code, error) = kiki_fails(&home, &["status"]);
    assert_eq!((code, error["error"]["code"].as_str()), (Some(7), Some("permission_denied")), "{error}");
    let (code, error) = kiki_fails(&home, &["up"]);
    assert_eq!(code, Some(7), "{error}");
    chown(&home, 0);

    // One that others may write.
    chmod(&home, 0o777);
    let (code, said) = kikid_start(&home);
    assert_eq!(code, Some(7), "{said}");
    assert!(said.contains("is writable by group or others (mode 777)"), "{said}");
    chmod(&home, 0o700);

    // A planted config, identity key or store.
    let config = home.join("config.toml");
    std::fs::write(
        &config,
        "[profiles.planted]\nexecutor = \"exec\"\ncommand = [\"touch\", \"/tmp/pwned\"]\n",
    )
    .expect("config");
    chown(&config, ANOTHER_USER);
    let (code, said) = kikid_start(&home);
    assert_eq!(code, Some(7), "{said}");
    assert!(
        said.contains(&format!("config file {} belongs to uid {ANOTHER_USER}", config.display())),
        "{said}"
    );
    std::fs::remove_file(&config).expect("rm config");
    for (file, what) in [("identity.key", "identity key"), ("kiki.db", "store file")] {
        let path = home.join(file);
        chown(&path, ANOTHER_USER);
        let (code, said) = kikid_start(&home);
        assert_eq!(code, Some(7), "{file}: {said}");
        assert!(said.contains(&format!("{what} {} belongs to uid", path.display())), "{said}");
        chown(&path, 0);
    }
    chmod(&home.join("kiki.db"), 0o666);
    let (code, said) = kikid_start(&home);
    assert_eq!(code, Some(7), "{said}");
    assert!(said.contains("chmod go-w"), "{said}");
    chmod(&home.join("kiki.db"), 0o600);

    // Put right, the home starts as before.
    let _down = Down(&home);
    kiki_json(&home, &["up"]);
}

/// The CLI reads at most the field's limit (plus one character) from a file or stdin: an
/// endless source is refused at once instead of read into memory until the OOM killer comes.
#[test]
fn the_cli_reads_files_and_stdin_only_up_to_the_limit() {
    let (_dir, home) = new_home();
    let _down = Down(&home);
    kiki_json(&home, &["up"]);
    let thread = new_thread(&home, "inbox");
    for args in [
        vec!["thread", "send", &thread, "--key", "z", "--content-file", "/dev/zero"],
        vec!["thread", "create", "--prompt-file", "/dev/zero"],
    ] {
        let (code, error) = kiki_fails(&home, &args);
        assert_eq!(code, Some(2), "{args:?}: {error}");
        let message = error["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("holds more than 100000 characters"), "{message}");
    }
    // Stdin that never ends (`yes`), likewise.
    let mut yes = Command::new("yes").stdout(Stdio::piped()).spawn().expect("yes");
    let out = Command::new(binary("kiki"))
        .args([
            "--home",
            home.to_str().expect("utf8"),
            "--json",
            "thread",
            "send",
            &thread,
            "--key",
            "y",
            "--content-file",
            "-",
        ])
        .stdin(yes.stdout.take().expect("pipe"))
        .output()
        .expect("kiki");
    // `yes` ends on the broken pipe kiki left when it stopped reading.
    yes.wait().expect("yes ends");
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stdout));
    // Exactly the limit is a message; one character more is refused, naming the flag.
    let file = home.join("content.txt");
    std::fs::write(&file, "é".repeat(100_000)).expect("content");
    let sent = kiki_json(
        &home,
        &["thread", "send", &thread, "--key", "full", "--content-file", file.to_str().expect("utf8")],
    );
    assert!(sent["message_id"].as_str().is_some_and(|id| id.starts_with("msg_")), "{sent}");
    std::fs::write(&file, "é".repeat(100_001)).expect("content");
    let (code, error) = kiki_fails(
        &home,
        &["thread", "send", &thread, "--key", "over", "--content-file", file.to_str().expect("utf8")],
    );
    assert_eq!(code, Some(2));
    assert!(
        error["error"]["message"].as_str().unwrap_or_default().starts_with("--content-file: "),
        "{error}"
    );
}

/// A store with a damaged page: kikid refuses to serve it (the check at start), `kiki up`
/// says so at once with the data_loss code and leaves no daemon behind, and `kiki doctor`
/// — with no daemon to ask — names the damage and what to do.
#[test]
fn a_damaged_store_is_refused_at_start_and_the_doctor_says_what_to_do() {
    let (_dir, home, _) = stopped_home_with_data();
    let db = home.join("kiki.db");
    let pages = std::fs::metadata(&db).expect("db").len() / 4096;
    assert!(pages > 4, "a store of {pages} pages");
    let mut bytes = std::fs::read(&db).expect("read");
    let page = (pages / 2) as usize * 4096;
    bytes[page..page + 4096].fill(0xab);
    std::fs::write(&db, bytes).expect("damage one page");

    let started = Instant::now();
    let (code, error) = kiki_fails(&home, &["up"]);
    assert_eq!((code, error["error"]["code"].as_str()), (Some(9), Some("data_loss")), "{error}");
    let message = error["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(&format!("the store {} is damaged", db.display())), "{message}");
    assert!(message.contains("kiki doctor"), "{message}");
    assert!(
        !message.contains("INFO") && !message.contains("WARN"),
        "the error alone, not the log: {message}"
    );
    assert!(started.elapsed() < Duration::from_secs(10), "refused at once, not after waiting for answers");
    assert!(!lock_held(&home), "no daemon was left behind");

    let out = kiki(&home, &["--json", "doctor"]);
    assert_eq!(out.status.code(), Some(1), "problems found");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("findings");
    let findings = report["findings"].as_array().expect("findings");
    let store = findings.iter().find(|f| f["check"] == "store").expect("a store finding");
    assert_eq!(store["ok"], false, "{store}");
    assert!(store["fix"].as_str().unwrap_or_default().contains("restore the store from a backup"), "{store}");
    assert!(findings.iter().filter(|f| f["check"] != "store").all(|f| f["ok"] == true), "{report}");
}

/// `kiki doctor` with the daemon running asks it: every check passes on a sound home.
#[test]
fn the_doctor_of_a_running_sound_home_finds_nothing_wrong() {
    let (_dir, home) = new_home();
    let _down = Down(&home);
    kiki_json(&home, &["up"]);
    let report = kiki_json(&home, &["doctor"]);
    let findings = report["findings"].as_array().expect("findings");
    let checks: Vec<&str> = findings.iter().filter_map(|f| f["check"].as_str()).collect();
    assert_eq!(checks, ["home", "config", "identity", "store", "disk", "daemon"]);
    assert!(findings.iter().all(|f| f["ok"] == true), "{report}");
}

/// A `KIKI_TOKEN` that cannot be a token is refused as such, as by every other command: the
/// doctor does not take the running daemon for one that holds the home without answering
/// (and tell to kill it).
#[test]
fn the_doctor_refuses_a_malformed_token_instead_of_blaming_the_daemon() {
    let (_dir, home) = new_home();
    let _down = Down(&home);
    kiki_json(&home, &["up"]);
    let out = kiki_with_env(&home, &["--json", "doctor"], &[("KIKI_TOKEN", "not\u{1}a token")]);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(stderr.contains("KIKI_TOKEN is not a valid token"), "{stderr}");
    let error: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(
        error["error"]["message"], "KIKI_TOKEN is not a valid token",
        "not findings blaming the daemon"
    );
    assert!(lock_held(&home), "and it still runs");
}

/// A home whose store exists but whose identity.key is gone refuses to start (a new key
/// would be another home to every peer) and says how to restore or reset; `kiki up
/// --new-identity` resets it, keeping the data.
#[test]
fn a_home_that_lost_its_key_refuses_to_start_until_restored_or_reset() {
    let (_dir, home, thread) = stopped_home_with_data();
    let _down = Down(&home);
    let key = std::fs::read(home.join("identity.key")).expect("key");
    let home_id = {
        kiki_json(&home, &["up"]);
        let id = kiki_json(&home, &["status"])["home_id"].clone();
        kiki_json(&home, &["down"]);
        id
    };
    std::fs::remove_file(home.join("identity.key")).expect("lose the key");
    let (code, error) = kiki_fails(&home, &["up"]);
    assert_eq!((code, error["error"]["code"].as_str()), (Some(6), Some("failed_precondition")), "{error}");
    let message = error["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("is missing, but this home already has a store"), "{message}");
    assert!(message.contains("--new-identity"), "{message}");
    assert!(!home.join("identity.key").exists(), "no key was made");

    // Restored from a backup: the same home.
    std::fs::write(home.join("identity.key"), &key).expect("restore");
    chmod(&home.join("identity.key"), 0o600);
    assert_eq!(kiki_json(&home, &["up"])["home_id"], home_id);
    kiki_json(&home, &["down"]);

    // Or reset on purpose: a new identity, the same threads.
    std::fs::remove_file(home.join("identity.key")).expect("lose it again");
    let reset = kiki_json(&home, &["up", "--new-identity"]);
    assert_ne!(reset["home_id"], home_id);
    assert!(outputs_of(&home, &thread).contains("echo: second"));
}

/// After `kiki down` every committed write is in `kiki.db` itself (the WAL is checkpointed
/// and emptied), so a copy of that one file with the key is a whole home.
#[test]
fn a_clean_stop_leaves_all_data_in_the_database_file() {
    let (_dir, home, thread) = stopped_home_with_data();
    let wal = home.join("kiki.db-wal");
    assert!(!wal.exists() || std::fs::metadata(&wal).expect("wal").len() == 0, "the WAL holds nothing");
    let (_copy_dir, copy) = new_home();
    let _down = Down(&copy);
    std::fs::create_dir_all(&copy).expect("copy");
    chmod(&copy, 0o700);
    for file in ["identity.key", "kiki.db"] {
        std::fs::copy(home.join(file), copy.join(file)).expect("copy");
    }
    kiki_json(&copy, &["up"]);
    let outputs = outputs_of(&copy, &thread);
    assert!(outputs.contains("echo: first") && outputs.contains("echo: second"), "{outputs}");
}

/// `kiki backup DIR` while the home runs: DIR is a home with the same identity and the data
/// up to the backup; restoring it after the original is lost (`kill -9` and gone) brings
/// that back, and what came after the backup is not in it.
#[test]
fn a_backup_restores_the_home_as_it_was() {
    let (dir, home) = new_home();
    let _down = Down(&home);
    let up = kiki_json(&home, &["up"]);
    let thread =
        kiki_json(&home, &["thread", "create", "--prompt", "before"])["id"].as_str().expect("id").to_string();
    wait_for_outputs(&home, &thread, &["echo: before"]);
    let backup = dir.path().join("backup");
    let backed = kiki_json(&home, &["backup", backup.to_str().expect("utf8")]);
    assert_eq!(backed["files"], serde_json::json!(["identity.key", "kiki.db"]));
    assert_eq!(kiki_tests::binaries::mode(&backup), 0o700, "it holds the private key");
    kiki_json(&home, &["thread", "send", &thread, "--key", "k", "--content", "after"]);
    wait_for_outputs(&home, &thread, &["echo: after"]);
    // A backup goes only into a new or empty directory.
    let (code, error) = kiki_fails(&home, &["backup", backup.to_str().expect("utf8")]);
    assert_eq!(code, Some(2), "{error}");

    kill_9(&pid_of(&home));
    std::fs::remove_dir_all(&home).expect("the home is lost");
    let _restored = Down(&backup);
    let restored = kiki_json(&backup, &["up"]);
    assert_eq!(restored["home_id"], up["home_id"], "the same identity");
    let outputs = outputs_of(&backup, &thread);
    assert!(outputs.contains("echo: before") && !outputs.contains("after"), "{outputs}");
}

/// A small file system (tmpfs) mounted for a test; unmounted when dropped.
struct SmallDisk {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl SmallDisk {
    fn mount(megabytes: u32) -> Self {
        assert_root("it mounts a small tmpfs to fill");
        let dir = tempfile::Builder::new().prefix("kiki-disk-").tempdir().expect("dir");
        let path = dir.path().join("disk");
        std::fs::create_dir(&path).expect("mount point");
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={megabytes}m,mode=700"), "tmpfs"])
            .arg(&path)
            .status()
            .expect("mount");
        assert!(mounted.success(), "mount a tmpfs at {}", path.display());
        Self { _dir: dir, path }
    }

    /// Fills the disk to the last byte with `filler`.
    fn fill(&self) -> PathBuf {
        use std::io::Write;
        let filler = self.path.join("filler");
        let mut file = std::fs::File::create(&filler).expect("filler");
        let chunk = vec![0u8; 64 * 1024];
        loop {
            match file.write(&chunk) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(nix::libc::ENOSPC) => break,
                Err(e) => panic!("filling the disk: {e}"),
            }
        }
        // Down to the byte: what is left of a block goes too.
        for _ in 0..64 * 1024 {
            if file.write(&[0]).is_err() {
                break;
            }
        }
        filler
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

/// Sends `content` with `key` to `target` until the disk refuses one: the first refusal's
/// code and message, and the contents that were answered before it.
fn send_until_refused(
    home: &Path,
    target: &str,
    prefix: &str,
) -> (Option<i32>, serde_json::Value, String, Vec<String>) {
    let mut answered = Vec::new();
    for n in 0..400 {
        let content = format!("{prefix}{n}");
        let key = format!("{prefix}-key-{n}");
        let out = kiki(home, &["--json", "thread", "send", target, "--key", &key, "--content", &content]);
        if out.status.success() {
            answered.push(content);
            continue;
        }
        let error = serde_json::from_slice(&out.stdout).expect("a JSON error");
        return (out.status.code(), error, key, answered);
    }
    panic!("400 sends on a full disk all succeeded")
}

/// A full disk answers RESOURCE_EXHAUSTED naming the store (exit 8, not "unreachable"):
/// nothing of the refused call is written, the daemon keeps serving, and once space returns
/// the same send with the same key goes through, once; every answered send was kept.
#[test]
fn a_full_disk_is_resource_exhausted_naming_it_and_loses_nothing() {
    let disk = SmallDisk::mount(16);
    let home = disk.path.join("home");
    let _down = Down(&home);
    kiki_json(&home, &["up"]);
    let thread = new_thread(&home, "inbox");
    kiki_json(&home, &["thread", "send", &thread, "--key", "first", "--content", "m-first"]);
    let filler = disk.fill();
    let (code, error, key, answered) = send_until_refused(&home, &thread, "m");
    assert_eq!((code, error["error"]["code"].as_str()), (Some(8), Some("resource_exhausted")), "{error}");
    let message = error["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!("the disk holding {} is full", home.join("kiki.db").display())),
        "{message}"
    );
    assert_eq!(kiki_json(&home, &["status"])["threads"], 1, "still serving");

    std::fs::remove_file(&filler).expect("free the disk");
    let refused = key.replace("-key-", "");
    let retried = kiki_json(&home, &["thread", "send", &thread, "--key", &key, "--content", &refused]);
    assert_eq!(retried["replayed"], false, "the refused send had written nothing");
    let mut expected: Vec<&str> = answered.iter().map(String::as_str).collect();
    expected.extend(["m-first", refused.as_str()]);
    let echoed: Vec<String> = expected.iter().map(|c| format!("echo: {c}")).collect();
    let outputs = wait_for_outputs(&home, &thread, &echoed.iter().map(String::as_str).collect::<Vec<_>>());
    for line in &echoed {
        assert_eq!(outputs.lines().filter(|l| l == line).count(), 1, "{line} delivered once");
    }
}

/// A full disk under the home's log as well as its store (what `kiki up` sets up), with
/// kikid logging every call: a failing log write never takes a call or a turn down with it.
/// Room posts are answered or refused RESOURCE_EXHAUSTED (exit 8), never "connection lost";
/// once space returns every member takes every answered post and goes idle.
#[test]
fn a_full_disk_under_the_log_never_takes_a_call_or_a_turn_down() {
    let disk = SmallDisk::mount(16);
    let home = disk.path.join("home");
    let _down = Down(&home);
    let out = kiki_with_env(&home, &["up"], &[("KIKI_LOG", "debug")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let host = new_thread(&home, "host");
    let members = [new_thread(&home, "m1"), new_thread(&home, "m2")];
    let room = kiki_json(&home, &["room", "create", "--host", &host])["room"]["id"]
        .as_str()
        .expect("room id")
        .to_string();
    for member in &members {
        assert_eq!(kiki_json(&home, &["room", "add", &room, member])["added"], true);
    }
    let filler = disk.fill();
    let mut answered = Vec::new();
    let mut refused = false;
    for n in 0..200 {
        let content = format!("post{n}");
        let mut args =
            vec!["--json", "room", "send", room.as_str(), "--content", &content, "--key", &content];
        for member in &members {
            args.extend(["--mention", member.as_str()]);
        }
        let out = kiki(&home, &args);
        match out.status.code() {
            Some(0) => answered.push(content),
            Some(8) => {
                refused = true;
                break;
            }
            code => panic!(
                "a room post on a full disk: exit {code:?}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        }
    }
    assert!(refused, "200 posts on a full disk were all answered");
    std::thread::sleep(Duration::from_secs(1));
    std::fs::remove_file(&filler).expect("free the disk");
    // Another post once space is back: the members wake for it and take what waited.
    let after = kiki_json(
        &home,
        &["room", "send", &room, "--content", "after", "--mention", &members[0], "--mention", &members[1]],
    );
    assert_eq!(after["status"], "delivered", "{after}");
    answered.push("after".into());
    let echoed: Vec<String> = answered.iter().map(|c| format!("echo: {c}")).collect();
    for member in &members {
        let outputs = wait_for_outputs(&home, member, &echoed.iter().map(String::as_str).collect::<Vec<_>>());
        for line in &echoed {
            assert_eq!(outputs.lines().filter(|l| l == line).count(), 1, "{line} taken once by {member}");
        }
    }
    let started = Instant::now();
    while members.iter().any(|m| kiki_json(&home, &["thread", "read", m])["thread"]["state"] == "running") {
        assert!(started.elapsed() < Duration::from_secs(30), "a member stays running");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A full disk at a source home whose outbox holds messages for a target that is down:
/// nothing is lost or doubled — once space returns and the target is back, each message the
/// source answered is delivered exactly once.
#[test]
fn a_full_disk_at_the_source_loses_no_outbox_entry() {
    let disk = SmallDisk::mount(16);
    let pair =
        paired_homes_from(disk.path.join("home"), Vec::new(), "[mailbox]\ndelivery_wait = \"200ms\"\n");
    let (a, b) = (pair.a.clone(), pair.b.clone());
    let target = format!("bee/{}", pair.target);
    kiki_json(&b, &["down"]);
    let mut answered = Vec::new();
    for n in 0..5 {
        let content = format!("queued{n}");
        let sent = kiki_json(&a, &["thread", "send", &target, "--key", &content, "--content", &content]);
        assert_eq!(sent["status"], "pending", "{sent}");
        answered.push(content);
    }
    let filler = disk.fill();
    let (code, error, _, more) = send_until_refused(&a, &target, "late");
    assert_eq!(code, Some(8), "{error}");
    answered.extend(more);
    // The worker keeps trying to reach the target (down) and to record its attempts (no
    // space) for a while.
    std::thread::sleep(Duration::from_secs(2));
    std::fs::remove_file(&filler).expect("free the disk");
    kiki_json(&b, &["up"]);
    let echoed: Vec<String> = answered.iter().map(|c| format!("echo: {c}")).collect();
    let outputs = wait_for_outputs(&b, &pair.target, &echoed.iter().map(String::as_str).collect::<Vec<_>>());
    for line in &echoed {
        assert_eq!(outputs.lines().filter(|l| l == line).count(), 1, "{line} delivered once: {outputs}");
    }
}

/// A call cut off by the daemon's crash: the CLI cannot know whether it took effect, says
/// so, and exits with the retryable code (4), so a script retries — with the same key,
/// which is safe.
#[test]
fn a_call_cut_off_by_a_crash_says_its_outcome_is_unknown() {
    let (_dir, home) = new_home();
    let _down = Down(&home);
    kiki_json(&home, &["up"]);
    let thread = new_thread(&home, "t");
    let waiting = Command::new(binary("kiki"))
        .args([
            "--home",
            home.to_str().expect("utf8"),
            "--json",
            "thread",
            "wait",
            &thread,
            "--timeout-ms",
            "30000",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kiki wait");
    // Parked at the daemon (the first call found no events).
    std::thread::sleep(Duration::from_millis(500));
    kill_9(&pid_of(&home));
    let out = waiting.wait_with_output().expect("wait ends");
    assert_eq!(out.status.code(), Some(4), "{}", String::from_utf8_lossy(&out.stderr));
    let error: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(error["error"]["code"], "unavailable");
    let message = error["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("the call's outcome is unknown"), "{message}");
}

/// A kikid that never answers is stopped by the `kiki up` that started it when it gives up,
/// never left behind. This one is made to hang for real: the test holds the store locked
/// (SQLite's exclusive locking mode), so kikid waits at its start, and is then stopped
/// with SIGSTOP while it waits.
#[test]
fn kiki_up_leaves_no_daemon_behind_that_never_answered() {
    let (_dir, home, _) = stopped_home_with_data();
    let holder = rusqlite::Connection::open(home.join("kiki.db")).expect("open the store");
    holder.pragma_update(None, "locking_mode", "EXCLUSIVE").expect("exclusive");
    holder.execute_batch("BEGIN EXCLUSIVE; SELECT COUNT(*) FROM threads; COMMIT;").expect("take the lock");
    let up = Command::new(binary("kiki"))
        .args(["--home", home.to_str().expect("utf8"), "--json", "up"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kiki up");
    // kikid writes its pid into the lock file as it takes the home's lock, before the store.
    let started = Instant::now();
    let pid = loop {
        let pid = std::fs::read_to_string(home.join("kikid.lock")).unwrap_or_default();
        if lock_held(&home) && !pid.is_empty() {
            break pid;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "kikid never took the home");
        std::thread::sleep(Duration::from_millis(10));
    };
    let pid = nix::unistd::Pid::from_raw(pid.trim().parse().expect("a pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).expect("stop kikid");
    drop(holder);
    let out = up.wait_with_output().expect("kiki up ends");
    assert_ne!(out.status.code(), Some(0));
    let error: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let message = error["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("did not answer") && message.contains("was stopped"), "{message}");
    let started = Instant::now();
    while lock_held(&home) {
        assert!(started.elapsed() < Duration::from_secs(10), "the kikid kiki up started still runs");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A flood of valid QUIC Initials from many source ports at a home's bridge port: local
/// calls go on answering, kikid's memory stays bounded, and a real peer still gets its
/// pairing request through meanwhile (a peer proves its address with a Retry while many
/// handshakes are under way, so the flood takes no handshake slot). The latency it costs
/// local calls is a number: the `flood` bench prints it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handshake_flood_leaves_local_calls_and_real_peers_served() {
    let ((_dir_a, a), (_dir_b, b)) = (new_home(), new_home());
    let (_down_a, _down_b) = (Down(&a), Down(&b));
    std::fs::create_dir_all(&b).expect("home");
    let port = kiki_tests::binaries::free_udp_port();
    std::fs::write(b.join("config.toml"), format!("[bridge]\nlisten = \"127.0.0.1:{port}\"\n"))
        .expect("config");
    kiki_json(&a, &["up"]);
    let status = kiki_json(&b, &["up"]);
    let pid: u32 = status["pid"].as_u64().expect("pid") as u32;
    let address = status["bridge_listen"].as_str().expect("listen").to_string();
    let client = kiki_client::Client::connect(&b.join("kikid.sock")).await.expect("connect");
    let thread = new_thread(&b, "inbox");
    let rss_before = kiki_tests::measure::rss_kb(pid);

    let flood = kiki_tests::flood::Flood::start(address.parse().expect("address"), 5_000, 256);
    tokio::time::sleep(Duration::from_millis(500)).await;
    // A real peer files a pairing request in the middle of it.
    let request = {
        let (a, address) = (a.clone(), address.clone());
        tokio::task::spawn_blocking(move || {
            kiki(&a, &["--json", "bridge", "request", &address, "--want", "read"])
        })
    };
    for n in 0..300 {
        let list = pb_list(&client).await;
        assert!(list.is_ok(), "a local ThreadList during the flood: {list:?}");
        let send = kiki_proto::ThreadSendRequest {
            target: Some(kiki_proto::ThreadRef { session_id: thread.clone(), ..Default::default() }),
            content: format!("m{n}"),
            idempotency_key: format!("k{n}"),
            ..Default::default()
        };
        client.threads().thread_send(send).await.expect("a local ThreadSend during the flood");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let request = request.await.expect("request");
    let sent = flood.stop();
    assert!(sent >= 5_000, "a flood of {sent} Initials only");
    assert!(
        request.status.success(),
        "a real peer's pairing request during the flood: {}",
        String::from_utf8_lossy(&request.stderr)
    );
    assert_eq!(kiki_json(&b, &["bridge", "pending"])["requests"].as_array().map(Vec::len), Some(1));
    let grown_mb = kiki_tests::measure::rss_kb(pid).saturating_sub(rss_before) / 1024;
    assert!(grown_mb < 64, "kikid grew {grown_mb} MB under a flood of {sent} Initials");
}

async fn pb_list(client: &kiki_client::Client) -> Result<kiki_proto::ThreadListResponse, tonic::Status> {
    client.threads().thread_list(kiki_proto::ThreadListRequest::default()).await.map(|r| r.into_inner())
}
