//! What a handshake flood at a home's bridge port costs its local callers, measured and
//! printed (never asserted). Run with a release build of the binaries:
//!
//! ```sh
//! cargo build --release --workspace --bins && cargo bench -p kiki-tests --bench flood
//! ```
//!
//! Local calls (a ThreadList and a ThreadSend each round) on the home's socket, first with
//! no flood, then while valid QUIC Initials arrive from 256 source ports at
//! `KIKI_FLOOD_RATE` per second (default 5,000). Target: local p99 under the flood < 10 ms,
//! and kikid's memory bounded. The flood's sender runs on the same two cores: its CPU is
//! part of what the home competes with.

use std::time::{Duration, Instant};

use kiki_client::Client;
use kiki_proto as pb;
use kiki_tests::binaries::{free_udp_port, kiki_ok as kiki};
use kiki_tests::flood::Flood;
use kiki_tests::measure::{cpu_time, ms, percentile, rss_kb, setting};

const ROUNDS: usize = 2_000;

/// `ROUNDS` rounds of ThreadList + ThreadSend on `client`: each call's latency, sorted.
async fn local_calls(client: &Client, thread: &str, tag: &str) -> Vec<Duration> {
    let mut times = Vec::with_capacity(ROUNDS * 2);
    for n in 0..ROUNDS {
        let t = Instant::now();
        client.threads().thread_list(pb::ThreadListRequest::default()).await.expect("list");
        times.push(t.elapsed());
        let send = pb::ThreadSendRequest {
            target: Some(pb::ThreadRef { session_id: thread.to_string(), ..Default::default() }),
            content: format!("{tag} {n}"),
            idempotency_key: format!("{tag}-{n}"),
            ..Default::default()
        };
        let t = Instant::now();
        client.threads().thread_send(send).await.expect("send");
        times.push(t.elapsed());
    }
    times.sort();
    times
}

#[tokio::main]
async fn main() {
    let rate = setting("KIKI_FLOOD_RATE", 5_000) as u32;
    let dir = tempfile::tempdir().expect("temp dir");
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).expect("home");
    let port = free_udp_port();
    std::fs::write(home.join("config.toml"), format!("[bridge]\nlisten = \"127.0.0.1:{port}\"\n"))
        .expect("config");
    kiki(&home, &["up"]);
    let client = Client::connect(&home.join("kikid.sock")).await.expect("connect");
    let status = client.home().status(pb::StatusRequest::default()).await.expect("status").into_inner();
    let created = client
        .threads()
        .thread_create(pb::ThreadCreateRequest {
            cwd: Some(dir.path().display().to_string()),
            title: Some("inbox".into()),
            ..Default::default()
        })
        .await
        .expect("thread")
        .into_inner();
    let rss_before = rss_kb(status.pid);

    let quiet = local_calls(&client, &created.id, "quiet").await;
    let flood = Flood::start(status.bridge_listen.parse().expect("address"), rate, 256);
    let (started, bench_cpu) = (Instant::now(), cpu_time());
    let flooded = local_calls(&client, &created.id, "flooded").await;
    let (elapsed, flood_cpu) = (started.elapsed(), cpu_time() - bench_cpu);
    let sent = flood.stop();
    let rss_after = rss_kb(status.pid);
    kiki(&home, &["down"]);

    let (quiet_p99, flooded_p99) = (percentile(&quiet, 0.99), percentile(&flooded, 0.99));
    println!("kiki handshake flood benchmark ({ROUNDS} rounds of ThreadList + ThreadSend per phase)");
    println!(
        "  flood: {sent} Initials in {:.1} s ({:.0}/s asked {rate}/s) from 256 ports; this process's CPU {:.1} s",
        elapsed.as_secs_f64(),
        sent as f64 / elapsed.as_secs_f64(),
        flood_cpu.as_secs_f64()
    );
    println!(
        "  local calls, no flood     p50 {:>10}   p99 {:>10}",
        ms(percentile(&quiet, 0.5)),
        ms(quiet_p99)
    );
    println!(
        "  local calls, under flood  p50 {:>10}   p99 {:>10}   (target p99 < 10 ms)",
        ms(percentile(&flooded, 0.5)),
        ms(flooded_p99)
    );
    println!("  p99 under flood / no flood   {:>8.2}x", flooded_p99.as_secs_f64() / quiet_p99.as_secs_f64());
    println!("  kikid RSS before / after     {rss_before} kB / {rss_after} kB");
}
