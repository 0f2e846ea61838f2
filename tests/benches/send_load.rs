//! The mailbox bench's 64-sender phase alone, long enough to profile or to compare two builds
//! run after run (the VM's noise is larger than most changes; interleave A and B):
//!
//! ```sh
//! cargo build --release --workspace --bins && cp target/release/{kiki,kikid} /tmp/A/
//! # …change, rebuild, copy to /tmp/B…
//! for i in 1 2 3 4; do for v in A B; do KIKI_BINARIES=/tmp/$v cargo bench -q -p kiki-tests --bench send_load; done; done
//! ```
//!
//! `KIKI_BINARIES` (default: this target's) holds `kiki` and `kikid`; `SENDERS` (64) and `PER`
//! (300) shape the load; `DELAY` (ms, 0) waits before it starts, after writing kikid's pid to
//! `$TMPDIR/send_load.pid` for `perf record -p`.

use std::time::{Duration, Instant};

use kiki_client::Client;
use kiki_proto as pb;
use kiki_tests::binaries::kiki_json;
use kiki_tests::local;
use kiki_tests::measure::{HeldHome, cpu_time, process_cpu_time, setting};

#[tokio::main]
async fn main() {
    let (senders, per) = (setting("SENDERS", 64) as usize, setting("PER", 300) as usize);
    let dir = tempfile::tempdir().expect("temp dir");
    let HeldHome { home, client: _, pid, held } = HeldHome::start(dir.path()).await;
    std::fs::write(std::env::temp_dir().join("send_load.pid"), pid.to_string()).expect("pid file");
    tokio::time::sleep(Duration::from_millis(setting("DELAY", 0))).await;

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
    kiki_json(&home, &["down"]);
}
