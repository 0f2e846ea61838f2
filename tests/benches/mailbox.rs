//! The mailbox's numbers, printed next to this machine's fsync floor measured in the same run
//! (never asserted). Run with a release build of the binaries:
//!
//! ```sh
//! cargo build --release --workspace --bins && cargo bench -p kiki-tests --bench mailbox
//! ```
//!
//! - durable sends: 64 concurrent senders vs one (target ≥ 10×, by group commit)
//! - a replayed key answers without an fsync (no WAL growth, latency below the fsync floor)
//! - wake latency, send answered → ThreadWait returns (target p50 < 1 ms)
//! - 10,000 parked ThreadWait calls (target < 50 MB extra RSS)

use std::path::Path;
use std::time::{Duration, Instant};

use kiki_client::Client;
use kiki_proto as pb;
use kiki_tests::binaries::kiki_json;
use kiki_tests::local;
use kiki_tests::measure::{
    HeldHome, cpu_time, fsync_after_idle, fsync_floor, percentile, process_cpu_time, rss_kb, us,
};

const SINGLE_SENDS: usize = 300;
const SENDERS: usize = 64;
const SENDS_PER_SENDER: usize = 100;
const REPLAYS: usize = 1_000;
const WAKES: usize = 200;
const PARKED: usize = 10_000;
const PARKED_PER_CONNECTION: usize = 50;

fn send(target: &str, content: String, key: String) -> pb::ThreadSendRequest {
    pb::ThreadSendRequest { target: Some(local(target)), content, idempotency_key: key, ..Default::default() }
}

/// What the steps measured, printed together at the end.
struct Numbers {
    floor: Duration,
    idle_fsync: Duration,
    single_rate: f64,
    concurrent: Concurrent,
    replays: Vec<Duration>,
    wal_growth: u64,
    wakes: Vec<Duration>,
    rss_before: u64,
    rss_parked: u64,
}

/// Sends from [`SENDERS`] senders at once: their rate, and the CPU seconds each send took.
struct Concurrent {
    rate: f64,
    daemon_cpu: f64,
    client_cpu: f64,
}

#[tokio::main]
async fn main() {
    let dir = tempfile::tempdir().expect("temp dir");
    let floor = fsync_floor(dir.path());
    let idle_fsync = fsync_after_idle(dir.path(), Duration::from_millis(1));
    let HeldHome { home, client, pid, held } = HeldHome::start(dir.path()).await;
    let single_rate = single_sends(&client, &held).await;
    let concurrent = concurrent_sends(&home, &held, pid).await;
    let (replays, wal_growth) = replays(&client, &home, &held).await;
    let wakes = wakes(&client, &home).await;
    let (rss_before, rss_parked) = parked_waiters(&home, &held, pid).await;
    kiki_json(&home, &["down"]);
    report(Numbers {
        floor,
        idle_fsync,
        single_rate,
        concurrent,
        replays,
        wal_growth,
        wakes,
        rss_before,
        rss_parked,
    });
}

/// One sender, one durable send at a time: sends per second.
async fn single_sends(client: &Client, held: &str) -> f64 {
    let mut threads = client.threads();
    let t = Instant::now();
    for i in 0..SINGLE_SENDS {
        threads.thread_send(send(held, format!("single {i}"), format!("single-{i}"))).await.expect("send");
    }
    SINGLE_SENDS as f64 / t.elapsed().as_secs_f64()
}

/// 64 senders at once, each on its own connection.
async fn concurrent_sends(home: &Path, held: &str, pid: u32) -> Concurrent {
    let mut tasks = Vec::new();
    let (t, daemon_cpu, client_cpu) = (Instant::now(), process_cpu_time(pid), cpu_time());
    for s in 0..SENDERS {
        let socket = home.join("kikid.sock");
        let held = held.to_string();
        tasks.push(tokio::spawn(async move {
            let mut threads = Client::connect(&socket).await.expect("connect").threads();
            for i in 0..SENDS_PER_SENDER {
                threads
                    .thread_send(send(&held, format!("c {s} {i}"), format!("c-{s}-{i}")))
                    .await
                    .expect("send");
            }
        }));
    }
    for task in tasks {
        task.await.expect("sender");
    }
    let rate = (SENDERS * SENDS_PER_SENDER) as f64 / t.elapsed().as_secs_f64();
    let sends = (SENDERS * SENDS_PER_SENDER) as f64;
    Concurrent {
        rate,
        daemon_cpu: (process_cpu_time(pid) - daemon_cpu).as_secs_f64() / sends,
        client_cpu: (cpu_time() - client_cpu).as_secs_f64() / sends,
    }
}

/// Replays: the single sender's keys and contents again. Their latencies, sorted, and how
/// much the WAL grew meanwhile.
async fn replays(client: &Client, home: &Path, held: &str) -> (Vec<Duration>, u64) {
    let mut threads = client.threads();
    let wal = home.join("kiki.db-wal");
    let wal_before = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    let mut replays = Vec::with_capacity(REPLAYS);
    for i in 0..REPLAYS {
        let n = i % SINGLE_SENDS;
        let t = Instant::now();
        let r = threads
            .thread_send(send(held, format!("single {n}"), format!("single-{n}")))
            .await
            .expect("replay");
        replays.push(t.elapsed());
        assert!(r.into_inner().replayed);
    }
    replays.sort();
    let wal_after = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    (replays, wal_after.saturating_sub(wal_before))
}

/// Wake latency: a waiter parked on an echo thread returns when the turn the message
/// started has ended. The latencies, sorted.
async fn wakes(client: &Client, home: &Path) -> Vec<Duration> {
    let mut threads = client.threads();
    let echo =
        kiki_json(home, &["thread", "create", "--title", "echo"])["id"].as_str().expect("id").to_string();
    let mut wakes = Vec::with_capacity(WAKES);
    for i in 0..WAKES {
        let cursor = threads
            .thread_wait(pb::ThreadWaitRequest {
                targets: vec![local(&echo)],
                timeout_ms: Some(0),
                ..Default::default()
            })
            .await
            .expect("cursor")
            .into_inner()
            .results[0]
            .cursor
            .clone();
        let mut waiter = client.threads();
        let echo_ref = echo.clone();
        let (answered_tx, answered_rx) = tokio::sync::oneshot::channel::<Instant>();
        let wait = tokio::spawn(async move {
            let request = pb::ThreadWaitRequest {
                targets: vec![local(&echo_ref)],
                timeout_ms: Some(10_000),
                cursors: [(echo_ref.clone(), cursor)].into_iter().collect(),
            };
            waiter.thread_wait(request).await.expect("wait");
            let returned = Instant::now();
            let answered = answered_rx.await.expect("send time");
            returned.saturating_duration_since(answered)
        });
        tokio::time::sleep(Duration::from_millis(2)).await;
        threads.thread_send(send(&echo, format!("wake {i}"), format!("wake-{i}"))).await.expect("send");
        let _ = answered_tx.send(Instant::now());
        wakes.push(wait.await.expect("waiter"));
    }
    wakes.sort();
    wakes
}

/// Parked waiters: 10,000 ThreadWait calls held open at once. kikid's RSS before and with them.
async fn parked_waiters(home: &Path, held: &str, pid: u32) -> (u64, u64) {
    let rss_before = rss_kb(pid);
    let mut parked = Vec::new();
    let mut connections = Vec::new();
    for _ in 0..PARKED / PARKED_PER_CONNECTION {
        connections.push(Client::connect(&home.join("kikid.sock")).await.expect("connect"));
    }
    for i in 0..PARKED {
        let mut threads = connections[i % connections.len()].threads();
        let target = held.to_string();
        parked.push(tokio::spawn(async move {
            let request = pb::ThreadWaitRequest {
                targets: vec![local(&target)],
                timeout_ms: Some(30_000),
                ..Default::default()
            };
            let _ = threads.thread_wait(request).await;
        }));
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss_parked = rss_kb(pid);
    for task in &parked {
        task.abort();
    }
    (rss_before, rss_parked)
}

fn report(n: Numbers) {
    let Concurrent { rate: concurrent_rate, daemon_cpu, client_cpu } = n.concurrent;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    println!("kiki mailbox benchmark");
    println!("  fsync floor (4 KiB write + fsync), p50     {:>10}", us(n.floor));
    println!("  the same after 1 ms of disk idle, p50      {:>10}", us(n.idle_fsync));
    println!("  durable sends, 1 sender                    {:>10.0} /s", n.single_rate);
    println!("  durable sends, {SENDERS} senders                  {:>10.0} /s", concurrent_rate);
    println!(
        "  ratio 64 senders / 1 sender                {:>10.1} x   (target >= 10x)",
        concurrent_rate / n.single_rate
    );
    println!(
        "  CPU per send at 64 senders, kikid / client {:>6.0} µs / {:.0} µs",
        daemon_cpu * 1e6,
        client_cpu * 1e6
    );
    println!(
        "  ratio if all {cores} cores were busy           {:>10.1} x   (cores / CPU per send / single rate)",
        cores / (daemon_cpu + client_cpu) / n.single_rate
    );
    println!(
        "  replayed key, p50                          {:>10}   (fsync floor {})",
        us(percentile(&n.replays, 0.5)),
        us(n.floor)
    );
    println!(
        "  WAL bytes written by {REPLAYS} replays          {:>10}   (target 0: no write, no fsync)",
        n.wal_growth
    );
    println!(
        "  wake latency send answered -> wait returns, p50 {:>6}   (target < 1 ms)",
        us(percentile(&n.wakes, 0.5))
    );
    println!("  wake latency, p99                          {:>10}", us(percentile(&n.wakes, 0.99)));
    println!("  kikid RSS idle / with {PARKED} parked waits   {:>7} kB / {} kB", n.rss_before, n.rss_parked);
    println!(
        "  extra RSS for {PARKED} parked waiters          {:>7} kB   (target < 51,200 kB)",
        n.rss_parked.saturating_sub(n.rss_before)
    );
}
