//! The session tools' three numbers, each printed next to what it is measured against in the
//! same run (never asserted), on the release binaries:
//!
//! ```sh
//! cargo build --release --workspace --bins && cargo bench -p kiki-tests --bench session_tools
//! ```
//!
//! - `Grep` over a 100,000-file tree within 1.5× of `rg` on the same tree: the tool called
//!   through the home's API (files_with_matches, every match) alternately with `rg -l` (the
//!   system's ripgrep; the bench installs it with apt-get when it is missing), the order
//!   flipped every round; the median of the per-round ratios.
//! - `Read` of a 100 KB file through `kiki mcp` under 2 ms p50: a warm `kiki mcp --thread`
//!   session driven by rmcp's client, next to the same call over the bench's gRPC connection.
//! - a remote `Read` through a space within one SSH round trip + 2 ms of the local one:
//!   `kiki --space dev mcp --thread` (a real `sshd` on loopback) alternately with the local
//!   session, next to `true` run over the space's kept SSH master (more than one round trip).
//!
//! Settings: `FILES` (100,000), `ROUNDS` (5 Grep rounds), `READS` (300 of each, after 30).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use kiki_client::Client;
use kiki_proto as pb;
use kiki_tests::binaries::{binary, free_udp_port, kiki_json};
use kiki_tests::mcp::{self, Session};
use kiki_tests::measure::{ms, percentile, setting};
use kiki_tests::sshd::Sshd;
use serde_json::json;

fn p50(samples: &mut [Duration]) -> Duration {
    samples.sort();
    percentile(samples, 0.5)
}

/// A tree of `files` small source files in directories of 100, one in 50 holding the needle.
fn make_tree(root: &Path, files: usize) {
    for i in 0..files {
        let dir = root.join(format!("d{:04}", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&dir).expect("dir");
        }
        let mut text = String::new();
        for line in 0..20 {
            text.push_str(&format!("fn f{i}_{line}(x: u64) -> u64 {{ x + {line} }}\n"));
        }
        if i % 50 == 0 {
            text.push_str("// the needle is here\n");
        }
        std::fs::write(dir.join(format!("f{i}.rs")), text).expect("file");
    }
}

fn ensure_rg() {
    if Command::new("rg").arg("--version").output().is_ok_and(|o| o.status.success()) {
        return;
    }
    eprintln!("installing ripgrep (apt-get install -y ripgrep) for the comparison");
    let _ = Command::new("apt-get").args(["install", "-y", "-q", "ripgrep"]).status();
}

async fn tool(
    client: &Client,
    thread: &str,
    name: &str,
    arguments: serde_json::Value,
) -> pb::ToolCallResponse {
    let request =
        pb::ToolCallRequest { name: name.into(), arguments: arguments.to_string(), thread_id: thread.into() };
    let answer = client.tools().tool_call(request).await.expect("answered").into_inner();
    assert_eq!(answer.outcome, pb::ToolOutcome::Ok as i32, "{name}: {}", answer.text);
    answer
}

async fn mcp_read(session: &Session) -> Duration {
    let t = Instant::now();
    let result = mcp::call(session, "Read", json!({"path": "big.txt"})).await.expect("answered");
    let took = t.elapsed();
    assert_ne!(result.is_error, Some(true), "{}", mcp::text(&result));
    took
}

#[tokio::main]
async fn main() {
    let files = setting("FILES", 100_000) as usize;
    let rounds = setting("ROUNDS", 5) as usize;
    let reads = setting("READS", 300) as usize;
    ensure_rg();

    let (dir, local) = kiki_tests::binaries::new_home();
    std::fs::create_dir_all(&local).expect("home");
    std::fs::write(
        local.join("config.toml"),
        format!("[bridge]\nlisten = \"127.0.0.1:{}\"\n", free_udp_port()),
    )
    .expect("config");
    kiki_json(&local, &["up"]);
    let client = Client::connect(&local.join("kikid.sock")).await.expect("the home");
    let workspace = dir.path().join("workspace");
    std::fs::create_dir_all(&workspace).expect("workspace");
    let created = kiki_json(&local, &["thread", "create", "--cwd", workspace.to_str().expect("path")]);
    let thread = created["id"].as_str().expect("id").to_string();

    grep_against_rg(&client, &thread, &workspace, files, rounds).await;
    std::fs::write(workspace.join("big.txt"), big_text()).expect("100 KB file");
    let session = read_through_mcp(&client, &local, &thread, reads).await;
    read_through_a_space(&local, &session, reads).await;

    let _ = session.cancel().await;
    kiki_tests::binaries::kiki(&local, &["down"]);
}

/// 100 KB in 1,000 lines.
fn big_text() -> String {
    format!("{}\n", "x".repeat(99)).repeat(1000)
}

/// Grep over a tree of `files` files against `rg -l`, alternately, `rounds` times.
async fn grep_against_rg(client: &Client, thread: &str, workspace: &Path, files: usize, rounds: usize) {
    let tree = workspace.join("tree");
    let t = Instant::now();
    make_tree(&tree, files);
    eprintln!("made {files} files in {}", ms(t.elapsed()));
    let expected = files.div_ceil(50);
    let (mut ours, mut theirs, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    let grep = json!({"pattern": "needle", "path": "tree", "head_limit": 0});
    // Warm both (the page cache, kikid's first walk).
    tool(client, thread, "Grep", grep.clone()).await;
    let rg = || {
        let t = Instant::now();
        let out = Command::new("rg").arg("-l").arg("needle").arg(&tree).output().expect("rg");
        let took = t.elapsed();
        assert_eq!(out.stdout.iter().filter(|b| **b == b'\n').count(), expected, "rg's matches");
        took
    };
    rg();
    let kiki_grep = async || {
        let t = Instant::now();
        let answer = tool(client, thread, "Grep", grep.clone()).await;
        let took = t.elapsed();
        let found: serde_json::Value = serde_json::from_str(&answer.structured).expect("structured");
        assert_eq!(found["total"], expected, "Grep's matches");
        took
    };
    for round in 0..rounds {
        let (kiki, ripgrep) = if round % 2 == 0 {
            let kiki = kiki_grep().await;
            (kiki, rg())
        } else {
            let ripgrep = rg();
            (kiki_grep().await, ripgrep)
        };
        ours.push(kiki);
        theirs.push(ripgrep);
        ratios.push(kiki.as_secs_f64() / ripgrep.as_secs_f64());
    }
    ratios.sort_by(f64::total_cmp);
    println!(
        "Grep over {files} files (files_with_matches, {expected} matches): kiki p50 {}   rg -l p50 {}   ratio median {:.2}×   target ≤ 1.5×",
        ms(p50(&mut ours)),
        ms(p50(&mut theirs)),
        ratios[ratios.len() / 2]
    );
}

/// A Read of the workspace's `big.txt` through a warm `kiki mcp --thread` session, next
/// to the same call over gRPC; the session, kept for the space's comparison.
async fn read_through_mcp(client: &Client, local: &Path, thread: &str, reads: usize) -> Session {
    let (session, _) =
        mcp::start(&binary("kiki"), Some(local), &["--thread", thread], &[], false).await.expect("kiki mcp");
    let (mut over_mcp, mut over_grpc) = (Vec::new(), Vec::new());
    for i in 0..reads + 30 {
        let through_mcp = mcp_read(&session).await;
        let t = Instant::now();
        tool(client, thread, "Read", json!({"path": "big.txt"})).await;
        let direct = t.elapsed();
        if i >= 30 {
            over_mcp.push(through_mcp);
            over_grpc.push(direct);
        }
    }
    println!(
        "Read of 100 KB (1,000 lines) p50: through kiki mcp {}   over gRPC {}   target < 2 ms through kiki mcp",
        ms(p50(&mut over_mcp)),
        ms(p50(&mut over_grpc))
    );
    session
}

/// The same Read in a thread of a space (a real `sshd` on loopback), alternately with the
/// `local` session, next to `true` over the space's kept SSH master.
async fn read_through_a_space(local: &Path, session: &Session, reads: usize) {
    let sshd = Sshd::start();
    let ssh_env = [("KIKI_SSH_CONFIG", sshd.config().to_str().expect("path").to_string())];
    let kiki = |args: &[&str]| {
        let out = Command::new(binary("kiki"))
            .arg("--home")
            .arg(local)
            .args(args)
            .envs(ssh_env.iter().map(|(k, v)| (*k, v.as_str())))
            .output()
            .expect("kiki");
        assert!(out.status.success(), "kiki {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        out.stdout
    };
    let remote_thread = space_thread(&sshd, &kiki);
    let env: Vec<(&str, &str)> = ssh_env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (remote, _) = mcp::start(
        &binary("kiki"),
        Some(local),
        &["--space", "dev", "--thread", &remote_thread],
        &env,
        false,
    )
    .await
    .expect("kiki mcp --space");
    let master = std::fs::read_to_string(local.join("spaces/dev.master")).expect("the kept master");
    let control = master.lines().next().expect("control socket").to_string();
    let ssh_true = || {
        let t = Instant::now();
        let ok = Command::new("ssh")
            .arg("-F")
            .arg(sshd.config())
            .args(["-S", &control])
            .arg(sshd.url())
            .arg("true")
            .status()
            .expect("ssh")
            .success();
        assert!(ok);
        t.elapsed()
    };
    let (mut there, mut here, mut rtt) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..reads + 30 {
        let (first, second) = if i % 2 == 0 { (&remote, session) } else { (session, &remote) };
        let a = mcp_read(first).await;
        let b = mcp_read(second).await;
        let (remote_took, local_took) = if i % 2 == 0 { (a, b) } else { (b, a) };
        if i >= 30 {
            there.push(remote_took);
            here.push(local_took);
            if i % 10 == 0 {
                rtt.push(ssh_true());
            }
        }
    }
    let (there, here, rtt) = (p50(&mut there), p50(&mut here), p50(&mut rtt));
    println!(
        "Read of 100 KB through kiki mcp p50: in the space {}   here {}   difference {}   `true` over the kept SSH master {}   target: difference ≤ one round trip + 2 ms",
        ms(there),
        ms(here),
        ms(there.saturating_sub(here)),
        ms(rtt)
    );
    let _ = remote.cancel().await;
    kiki(&["space", "remove", "dev", "--stop"]);
}

/// The space `dev` at `sshd`, and a thread there whose workspace holds `big.txt`.
fn space_thread(sshd: &Sshd, kiki: &impl Fn(&[&str]) -> Vec<u8>) -> String {
    let remote_home = sshd.remote_dir("home");
    kiki(&[
        "space",
        "add",
        &sshd.url(),
        "--name",
        "dev",
        "--remote-home",
        remote_home.to_str().expect("path"),
    ]);
    let remote_workspace = sshd.remote_dir("workspace");
    std::fs::write(remote_workspace.join("big.txt"), big_text()).expect("100 KB file there");
    let created: serde_json::Value = serde_json::from_slice(&kiki(&[
        "--json",
        "--space",
        "dev",
        "thread",
        "create",
        "--cwd",
        remote_workspace.to_str().expect("path"),
    ]))
    .expect("JSON");
    created["id"].as_str().expect("id").to_string()
}
