//! Issue #4's numbers, printed next to the fsync and UDP round-trip floors measured in the
//! same run (never asserted). Homes run in this process, talking real QUIC on loopback:
//!
//! ```sh
//! cargo bench -p kiki-tests --bench bridges
//! ```
//!
//! - cross-home `delivered` latency, p50 (target ≤ 2 fsyncs + 1 QUIC round trip + 0.5 ms)
//! - cross-home durable sends: 64 concurrent senders vs one (target ≥ 10×)
//! - first delivery after a partition heals (target ≤ backoff cap 30 s + 1 s)
//!
//! `SENDERS` (64) and `PER` (40 sends each) shape the throughput phase.

use std::time::{Duration, Instant};

use kiki_proto as pb;
use kiki_tests::measure::{
    cpu_time, fsync_after_idle, fsync_floor, percentile, setting, udp_round_trip_floor, us,
};
use kiki_tests::{TestHome, UdpRelay};

/// The homes run in this process: give them kikid's allocator.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

const LATENCY_SENDS: usize = 200;
const SINGLE_SENDS: usize = 400;

fn send(host: &str, session: &str, content: String, key: String) -> pb::ThreadSendRequest {
    pb::ThreadSendRequest {
        target: Some(pb::ThreadRef {
            host_id: host.into(),
            workspace_id: String::new(),
            session_id: session.into(),
        }),
        content,
        idempotency_key: key,
        ..Default::default()
    }
}

async fn home() -> TestHome {
    TestHome::builder().config(|c| c.thread_communication.enabled = Some(true)).start().await
}

#[tokio::main]
async fn main() {
    let dir = tempfile::tempdir().expect("dir");
    let fsync = fsync_floor(dir.path());
    let idle_fsync = fsync_after_idle(dir.path(), Duration::from_millis(1));
    let udp = udp_round_trip_floor().await;
    let (a, b) = (home().await, home().await);

    // Latency: `delivered` answers from an idle echo thread behind a send+wake bridge.
    a.pair_with(&b, b.bridge_listen().await, "send,wake", "wake").await;
    let echo = b.thread("echo", None).await;
    let mut threads = a.client().threads();
    let mut latencies = Vec::with_capacity(LATENCY_SENDS);
    for i in 0..LATENCY_SENDS {
        while b.wait_turns(&echo.id, i).await.last().is_some_and(|t| t.status() == pb::TurnStatus::Running) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let t = Instant::now();
        let sent = threads
            .thread_send(send("wake", &echo.id, format!("l{i}"), format!("l{i}")))
            .await
            .expect("send");
        latencies.push(t.elapsed());
        assert_eq!(sent.into_inner().status(), pb::SendStatus::Delivered);
    }
    latencies.sort();

    // Throughput: durable acceptance at the target over a send-only bridge (nothing runs).
    let (c, d) = (home().await, home().await);
    c.pair_with(&d, d.bridge_listen().await, "send", "nowake").await;
    let inbox = d.thread("echo", None).await;
    let mut single = c.client().threads();
    let t = Instant::now();
    for i in 0..SINGLE_SENDS {
        single.thread_send(send("nowake", &inbox.id, format!("s{i}"), format!("s{i}"))).await.expect("send");
    }
    let single_rate = SINGLE_SENDS as f64 / t.elapsed().as_secs_f64();
    let (senders, per) = (setting("SENDERS", 64) as usize, setting("PER", 40) as usize);
    let (t, cpu) = (Instant::now(), cpu_time());
    let mut tasks = Vec::new();
    for s in 0..senders {
        let mut threads = c.client().threads();
        let inbox = inbox.id.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..per {
                threads
                    .thread_send(send("nowake", &inbox, format!("c{s}-{i}"), format!("c{s}-{i}")))
                    .await
                    .expect("send");
            }
        }));
    }
    for task in tasks {
        task.await.expect("sender");
    }
    let concurrent_rate = (senders * per) as f64 / t.elapsed().as_secs_f64();
    let cores_busy = (cpu_time() - cpu).as_secs_f64() / t.elapsed().as_secs_f64();
    // The source now follows up each message the target accepted without delivering it (no
    // `wake`), about a second after it was sent, then two seconds later, and so on.
    let accepted = SINGLE_SENDS + senders * per;
    tokio::time::sleep(Duration::from_millis(800)).await;
    let (t, cpu) = (Instant::now(), cpu_time());
    tokio::time::sleep(Duration::from_secs(3)).await;
    let follow_up_cores = (cpu_time() - cpu).as_secs_f64() / t.elapsed().as_secs_f64();
    // Done with them: their outbox would go on following up the accepted sends meanwhile.
    for home in [&a, &b, &c, &d] {
        home.handle().shutdown();
        home.handle().stopped().await;
    }

    // Partition heal: datagrams dropped for 5 s, then the first delivery.
    let (e, f) = (home().await, home().await);
    let relay = UdpRelay::start(f.bridge_listen().await.parse().expect("addr")).await;
    e.pair_with(&f, relay.addr.to_string(), "send,wake", "gap").await;
    let far = f.thread("echo", None).await;
    relay.partition(true);
    e.client().threads().thread_send(send("gap", &far.id, "gap".into(), "gap".into())).await.expect("send");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let healed = Instant::now();
    relay.partition(false);
    f.wait_turns(&far.id, 1).await;
    let heal = healed.elapsed();

    let budget = fsync * 2 + udp + Duration::from_micros(500);
    println!("kiki bridges benchmark");
    println!("  fsync floor, p50                            {:>10}", us(fsync));
    println!("  the same after 1 ms of disk idle, p50       {:>10}", us(idle_fsync));
    println!("  UDP round trip on loopback, p50             {:>10}", us(udp));
    println!(
        "  cross-home delivered, p50                   {:>10}   (target <= {} = 2 fsync + 1 RTT + 0.5 ms)",
        us(percentile(&latencies, 0.5)),
        us(budget)
    );
    println!(
        "  the same budget with idle fsyncs            {:>10}   (2 idle fsync + 1 RTT + 0.5 ms)",
        us(idle_fsync * 2 + udp + Duration::from_micros(500))
    );
    println!("  cross-home delivered, p99                   {:>10}", us(percentile(&latencies, 0.99)));
    println!("  cross-home durable sends, 1 sender          {:>10.0} /s", single_rate);
    println!("  cross-home durable sends, {senders} senders        {:>10.0} /s", concurrent_rate);
    println!(
        "  ratio                                       {:>10.1} x   (target >= 10x)",
        concurrent_rate / single_rate
    );
    println!(
        "  CPU while they send (both homes, clients)     {:>10.2} of {} cores",
        cores_busy,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "  CPU while following up {accepted} accepted sends    {:>10.2} of {} cores   (the 3 s after them)",
        follow_up_cores,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!("  first delivery after a 5 s partition heals  {:>10}   (target <= 31 s)", us(heal));
}
