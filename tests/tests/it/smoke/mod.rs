//! The smoke tier: the real `kikid` and `kiki` binaries, real processes, real signals.
//!
//! By subject: a home's life and the CLI's own behaviour here; `observe` (the log, metrics,
//! events, workers), `thread_cli` (the thread commands as a person reads them), `crashes`,
//! `traces`.

mod crashes;
mod observe;
mod thread_cli;
mod traces;

use std::process::{Command, Stdio};

use kiki_tests::binaries::{Down, binary, kiki, kiki_json, kiki_with_env, mode, new_home};
use tokio_stream_shim::next_message;

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
