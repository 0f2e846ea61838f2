//! The real `kikid` and `kiki` binaries, for the smoke tier. They are built by
//! `cargo test --workspace` (or `cargo build --workspace`) into the same target directory
//! as this test binary.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// `target/<profile>/NAME`, found from the running executable (a test's or bench's
/// `…/deps/test-hash`, or a binary beside them such as `kiki-bench`), or
/// `$KIKI_BINARIES/NAME` if that is set (a bench comparing two builds).
pub fn binary(name: &str) -> PathBuf {
    if let Some(dir) = std::env::var_os("KIKI_BINARIES") {
        return PathBuf::from(dir).join(name);
    }
    let exe = std::env::current_exe().expect("current exe");
    let beside = exe.parent().expect("the executable's directory");
    let dir = if beside.ends_with("deps") { beside.parent().expect("target dir") } else { beside };
    let path = dir.join(name);
    assert!(path.is_file(), "{} is missing: run `cargo build --workspace --bins` first", path.display());
    path
}

/// Runs `kiki --home HOME ARGS…` and returns its output.
pub fn kiki(home: &Path, args: &[&str]) -> Output {
    kiki_with_env(home, args, &[])
}

pub fn kiki_with_env(home: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(binary("kiki"))
        .arg("--home")
        .arg(home)
        .args(args)
        .env_remove("KIKI_TOKEN")
        .envs(env.iter().copied())
        .output()
        .expect("run kiki")
}

/// Runs `kiki --home HOME ARGS…` for its effect (its output dropped) and asserts success.
pub fn kiki_ok(home: &Path, args: &[&str]) {
    let ok = Command::new(binary("kiki"))
        .arg("--home")
        .arg(home)
        .args(args)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("kiki")
        .success();
    assert!(ok, "kiki {args:?} failed");
}

/// Runs `kiki --json …`, asserts success and parses its one JSON document.
pub fn kiki_json(home: &Path, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = kiki(home, &all);
    assert!(
        out.status.success(),
        "kiki {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "kiki {args:?} printed no single JSON document ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// Runs `kiki --json ARGS…`, which must fail: its exit code and its one JSON document (the
/// error).
pub fn kiki_fails(home: &Path, args: &[&str]) -> (Option<i32>, serde_json::Value) {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = kiki(home, &all);
    assert!(!out.status.success(), "kiki {args:?} succeeded: {}", String::from_utf8_lossy(&out.stdout));
    let error = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "kiki {args:?} printed no single JSON document ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code(), error)
}

/// `kiki thread read THREAD` (its first 100 turns) once the thread has at least `n` ended
/// turns.
pub fn wait_for_turns(home: &Path, thread: &str, n: usize) -> serde_json::Value {
    let started = Instant::now();
    loop {
        let page = kiki_json(home, &["thread", "read", thread, "--limit", "100"]);
        if page["turns"].as_array().map(Vec::len).unwrap_or(0) >= n {
            return page;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "thread {thread} never reached {n} turns: {page}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A fresh home directory path (not created: `kiki up` creates it).
pub fn new_home() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::Builder::new().prefix("kiki-smoke-").tempdir().expect("temp dir");
    let home = dir.path().join("home");
    (dir, home)
}

/// Stops the home's daemon when the test ends, whatever happened.
pub struct Down<'a>(pub &'a Path);
impl Drop for Down<'_> {
    fn drop(&mut self) {
        let _ = kiki(self.0, &["down"]);
    }
}

pub fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).expect("metadata").permissions().mode() & 0o777
}

pub fn pid_of(home: &Path) -> String {
    kiki_json(home, &["status"])["pid"].to_string()
}

pub fn kill_9(pid: &str) {
    let ok = Command::new("kill").args(["-9", pid]).status().expect("kill").success();
    assert!(ok, "kill -9 {pid}");
    // Wait until the process is gone (it is `kiki up`'s orphan, reaped by init).
    let started = Instant::now();
    while Path::new(&format!("/proc/{pid}")).exists() {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // A zombie holds no locks or sockets — once all its threads are gone: the leader
        // shows `Z` while the others may still hold the files (a listening socket accepts
        // and then resets connections until then).
        let threads = std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |tasks| tasks.count());
        if stat.contains(") Z ") && threads <= 1 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "pid {pid} did not die");
        std::thread::sleep(Duration::from_millis(10));
    }
}

pub fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0").expect("probe").local_addr().expect("addr").port()
}

/// A loopback TCP port free a moment ago (for a server a test starts: metrics, sshd…).
pub fn free_tcp_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("probe").local_addr().expect("addr").port()
}

/// Two real homes on fixed ports, `a` bridged to `b` (alias `bee`) with send+wake, and a
/// thread at `b`; both are stopped when this is dropped, before their directories go.
pub struct Paired {
    pub a: std::path::PathBuf,
    pub b: std::path::PathBuf,
    pub target: String,
    _dirs: Vec<tempfile::TempDir>,
}

impl Drop for Paired {
    fn drop(&mut self) {
        for home in [&self.a, &self.b] {
            let _ = kiki(home, &["down"]);
        }
    }
}

pub fn paired_homes() -> Paired {
    paired_homes_with("[mailbox]\ndelivery_wait = \"200ms\"\n")
}

/// Two homes, `a` with a bridge to `b` allowed `send,wake` (named `bee`) and a thread at `b`
/// (`target`), each with its own bridge port, threads open to peers, and `config`.
pub fn paired_homes_with(config: &str) -> Paired {
    let (dir_a, a) = new_home();
    paired_homes_from(a, vec![dir_a], config)
}

/// [`paired_homes_with`] with the source home at `a` (e.g. on a small disk of a test's);
/// `dirs` are kept until the homes are stopped.
pub fn paired_homes_from(a: PathBuf, mut dirs: Vec<tempfile::TempDir>, extra: &str) -> Paired {
    let (dir_b, b) = new_home();
    dirs.push(dir_b);
    let mut pair = Paired { a, b, target: String::new(), _dirs: dirs };
    let (a, b) = (pair.a.as_path(), pair.b.as_path());
    for home in [a, b] {
        std::fs::create_dir_all(home).expect("home");
        let config = format!(
            "[bridge]\nlisten = \"127.0.0.1:{}\"\n[thread_communication]\nenabled = true\n{extra}",
            free_udp_port()
        );
        std::fs::write(home.join("config.toml"), config).expect("config");
    }
    kiki_json(a, &["up"]);
    let b_status = kiki_json(b, &["up"]);
    let b_addr = b_status["bridge_listen"].as_str().expect("listen").to_string();
    let b_id = b_status["home_id"].as_str().expect("id").to_string();
    let target = kiki_json(b, &["thread", "create", "--title", "inbox"]);
    let requested = kiki_json(
        a,
        &["bridge", "request", &b_addr, "--want", "send,wake", "--expect", &b_id, "--name", "bee"],
    );
    let request_id = requested["request_id"].as_str().expect("request id").to_string();
    kiki_json(b, &["bridge", "approve", &request_id, "--allow", "send,wake"]);
    pair.target = target["id"].as_str().expect("id").to_string();
    pair
}
