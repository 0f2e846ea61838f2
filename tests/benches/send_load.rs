//! The mailbox bench's 64-sender phase alone, long enough to profile or to compare two builds
//! run after run (the VM's noise is larger than most changes; interleave A and B):
//!
//! ```sh
//! cargo build --release --workspace --bins && cp target/release/{kiki,kikid} /tmp/A/
//! # …change, rebuild, copy to /tmp/B…
//! for i in 1 2 3 4; do for v in A B; do BIN=/tmp/$v cargo bench -q -p kiki-tests --bench send_load; done; done
//! ```
//!
//! `BIN` (default: this target's binaries) holds `kiki` and `kikid`; `SENDERS` (64) and `PER`
//! (300) shape the load; `DELAY` (ms, 0) waits before it starts, after writing kikid's pid to
//! `$TMPDIR/send_load.pid` for `perf record -p`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kiki_client::Client;
use kiki_proto as pb;
use kiki_tests::binaries::binary;
use kiki_tests::local;
use kiki_tests::measure::{cpu_time, process_cpu_time};

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn kiki(home: &Path, args: &[&str]) -> String {
    let program = std::env::var("BIN").map_or_else(|_| binary("kiki"), |dir| PathBuf::from(dir).join("kiki"));
    let out = Command::new(program)
        .arg("--home")
        .arg(home)
        .arg("--json")
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .expect("kiki");
    assert!(out.status.success(), "kiki {args:?} failed");
    String::from_utf8(out.stdout).expect("utf8")
}

#[tokio::main]
async fn main() {
    let (senders, per) = (setting("SENDERS", 64) as usize, setting("PER", 300) as usize);
    let dir = tempfile::tempdir().expect("temp dir");
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).expect("home");
    // As in the mailbox bench: a busy thread, so sends queue and acceptance is measured.
    std::fs::write(
        home.join("config.toml"),
        "[mailbox]\ndelivery_wait = \"0s\"\n[profiles.hold]\nexecutor = \"exec\"\ncommand = [\"sleep\", \"600\"]\n",
    )
    .expect("config");
    kiki(&home, &["up"]);
    let client = Client::connect(&home.join("kikid.sock")).await.expect("connect");
    let pid = client.home().status(pb::StatusRequest {}).await.expect("status").into_inner().pid;
    let created = kiki(&home, &["thread", "create", "--profile", "hold", "--prompt", "hold"]);
    let created: serde_json::Value = serde_json::from_str(&created).expect("json");
    let held = created["id"].as_str().expect("id").to_string();
    std::fs::write(std::env::temp_dir().join("send_load.pid"), pid.to_string()).expect("pid file");
    tokio::time::sleep(Duration::from_millis(200 + setting("DELAY", 0))).await;

    let (t, daemon_cpu, client_cpu) = (Instant::now(), process_cpu_time(pid), cpu_time());
    let mut tasks = Vec::new();
    for s in 0..senders {
        let (socket, held) = (home.join("kikid.sock"), held.clone());
        tasks.push(tokio::spawn(async move {
            let mut threads = Client::connect(&socket).await.expect("connect").threads();
            for i in 0..per {
                let request = pb::ThreadSendRequest {
                    target: Some(local(&held)),
                    content: format!("c {s} {i}"),
                    idempotency_key: format!("c-{s}-{i}"),
                    ..Default::default()
                };
                threads.thread_send(request).await.expect("send");
            }
        }));
    }
    for task in tasks {
        task.await.expect("sender");
    }
    let sends = (senders * per) as f64;
    println!(
        "{:.0} sends/s  CPU per send: kikid {:.0} µs, client {:.0} µs",
        sends / t.elapsed().as_secs_f64(),
        (process_cpu_time(pid) - daemon_cpu).as_secs_f64() / sends * 1e6,
        (cpu_time() - client_cpu).as_secs_f64() / sends * 1e6
    );
    kiki(&home, &["down"]);
}
