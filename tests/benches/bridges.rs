//! The bridges' numbers, printed next to the fsync and UDP round-trip floors measured in the
//! same run (never asserted). Homes run in this process, talking real QUIC on loopback:
//!
//! ```sh
//! cargo bench -p kiki-tests --bench bridges
//! ```
//!
//! - cross-home `delivered` latency, p50 (target ≤ 2 fsyncs + 1 QUIC round trip + 0.5 ms),
//!   each send made once the previous one's turn ended; and the same with the homes and the
//!   disk idle for 10 ms before each send, against the same sum of fsyncs after 10 ms idle
//! - cross-home durable sends: 64 concurrent senders vs one (target ≥ 10×)
//! - first delivery after a partition heals (target ≤ backoff cap 30 s + 1 s)
//!
//! `SENDERS` (64) and `PER` (40 sends each) shape the throughput phase. `PHASES=throughput`
//! runs the floors and the throughput phases only (a few seconds) and prints the latter on
//! one line: for comparing two builds in many interleaved runs, as this VM's speed drifts by
//! ±25% within minutes.

use std::time::{Duration, Instant};

use kiki_client::ThreadClient;
use kiki_proto as pb;
use kiki_tests::TestHome;
use kiki_tests::measure::{
    cpu_time, disk_bytes_written, fsync_after_idle, fsync_floor, percentile, setting, udp_round_trip_floor,
    us,
};

/// The homes run in this process: give them kikid's allocator.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

const LATENCY_SENDS: usize = 200;
const SINGLE_SENDS: usize = 400;
/// The pause before each send of the second latency loop.
const IDLE: Duration = Duration::from_millis(10);

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

/// Whether the next events of `thread` (a ThreadWait of up to 5 s from `cursor`, which moves
/// on) include a turn's end.
async fn terminal(watcher: &mut ThreadClient, thread: &str, cursor: &mut String) -> bool {
    let wait = pb::ThreadWaitRequest {
        targets: vec![kiki_tests::local(thread)],
        timeout_ms: Some(5_000),
        cursors: [(thread.to_string(), cursor.clone())].into_iter().filter(|(_, c)| !c.is_empty()).collect(),
    };
    let waited = watcher.thread_wait(wait).await.expect("wait").into_inner();
    let mut ended = false;
    for result in waited.results {
        ended |= result.events.iter().any(|e| e.kind() == pb::EventKind::Terminal);
        *cursor = result.cursor;
    }
    ended
}

async fn home() -> TestHome {
    TestHome::builder().config(|c| c.thread_communication.enabled = Some(true)).start().await
}

/// The homes (and the bench's clients) run on kikid's runtime.
fn main() {
    kiki_daemon::runtime::build().expect("runtime").block_on(run());
}

async fn run() {
    let dir = tempfile::tempdir().expect("dir");
    let fsync = fsync_floor(dir.path());
    let idle_fsync = fsync_after_idle(dir.path(), IDLE);
    let udp = udp_round_trip_floor().await;
    let only_throughput = match std::env::var("PHASES").as_deref() {
        Err(_) | Ok("all") => false,
        Ok("throughput") => true,
        Ok(other) => panic!("PHASES={other}: `all` (the default) or `throughput`"),
    };
    let (a, b) = (home().await, home().await);
    let rounds = if only_throughput { 0 } else { LATENCY_SENDS };
    let (latencies, idle_latencies) = latency(&a, &b, rounds).await;
    let (c, d) = (home().await, home().await);
    let throughput = throughput(&c, &d, only_throughput).await;
    // Done with them: their outbox would go on following up the accepted sends meanwhile.
    for home in [&a, &b, &c, &d] {
        home.handle().shutdown();
        home.handle().stopped().await;
    }
    if only_throughput {
        throughput.print_one_line();
        return;
    }
    let heal = partition_heal().await;

    let budget = fsync * 2 + udp + Duration::from_micros(500);
    println!("kiki bridges benchmark");
    println!("  fsync floor, p50                            {:>10}", us(fsync));
    println!("  the same after {IDLE:?} of disk idle, p50      {:>10}", us(idle_fsync));
    println!("  UDP round trip on loopback, p50             {:>10}", us(udp));
    println!(
        "  cross-home delivered, p50                   {:>10}   (target <= {} = 2 fsync + 1 RTT + 0.5 ms)",
        us(percentile(&latencies, 0.5)),
        us(budget)
    );
    println!("  cross-home delivered, p99                   {:>10}", us(percentile(&latencies, 0.99)));
    println!(
        "  the same after {IDLE:?} idle, p50              {:>10}   ({} = 2 idle fsync + 1 RTT + 0.5 ms)",
        us(percentile(&idle_latencies, 0.5)),
        us(idle_fsync * 2 + udp + Duration::from_micros(500))
    );
    throughput.print();
    println!("  first delivery after a 5 s partition heals  {:>10}   (target <= 31 s)", us(heal));
}

/// Latency: `delivered` answers from an idle echo thread behind a send+wake bridge from `a`
/// to `b`. Each send goes out once the previous one's turn has ended (a ThreadWait on the
/// echo thread returns its terminal event), as an agent waiting on the thread sends its next
/// message; then again with the homes and the disk idle for `IDLE` before each send.
/// `rounds` of each, sorted.
async fn latency(a: &TestHome, b: &TestHome, rounds: usize) -> (Vec<Duration>, Vec<Duration>) {
    a.bridge_named(b, "wake", "send,wake").await;
    let echo = b.thread("echo", None).await;
    let (mut sender, mut watcher) = (a.client().threads(), b.client().threads());
    let mut cursor = String::new();
    let (mut latencies, mut idle_latencies) = (Vec::new(), Vec::new());
    for i in 0..2 * rounds {
        let after_idle = i >= rounds;
        if after_idle {
            tokio::time::sleep(IDLE).await;
        }
        let t = Instant::now();
        let sent =
            sender.thread_send(send("wake", &echo.id, format!("l{i}"), format!("l{i}"))).await.expect("send");
        let took = t.elapsed();
        assert_eq!(sent.into_inner().status(), pb::SendStatus::Delivered);
        if after_idle { &mut idle_latencies } else { &mut latencies }.push(took);
        // The turn it started ends.
        while !terminal(&mut watcher, &echo.id, &mut cursor).await {}
    }
    latencies.sort();
    idle_latencies.sort();
    (latencies, idle_latencies)
}

/// Durable acceptance at the target over a send-only bridge, and what following them up
/// costs the source.
struct Throughput {
    single_rate: f64,
    single_cpu_per_send: f64,
    senders: usize,
    concurrent_rate: f64,
    cores_busy: f64,
    cpu_per_send: f64,
    disk_per_send: f64,
    accepted: usize,
    follow_up_cores: f64,
}

/// Throughput: durable acceptance at `d` over a send-only bridge from `c` (nothing runs),
/// from one sender, then `SENDERS` at once; then (unless `only`) the CPU the source spends
/// following up what was accepted.
async fn throughput(c: &TestHome, d: &TestHome, only: bool) -> Throughput {
    c.bridge_named(d, "nowake", "send").await;
    let inbox = d.thread("echo", None).await;
    let mut single = c.client().threads();
    let (t, single_cpu) = (Instant::now(), cpu_time());
    for i in 0..SINGLE_SENDS {
        single.thread_send(send("nowake", &inbox.id, format!("s{i}"), format!("s{i}"))).await.expect("send");
    }
    let single_rate = SINGLE_SENDS as f64 / t.elapsed().as_secs_f64();
    let single_cpu_per_send = (cpu_time() - single_cpu).as_secs_f64() / SINGLE_SENDS as f64;
    let (senders, per) = (setting("SENDERS", 64) as usize, setting("PER", 40) as usize);
    let (t, cpu, disk) = (Instant::now(), cpu_time(), disk_bytes_written());
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
    let (sends, took, used) =
        ((senders * per) as f64, t.elapsed().as_secs_f64(), (cpu_time() - cpu).as_secs_f64());
    let disk_per_send = (disk_bytes_written() - disk) as f64 / sends;
    // The source now follows up each message the target accepted without delivering it (no
    // `wake`), about a second after it was sent, then two seconds later, and so on.
    if !only {
        tokio::time::sleep(Duration::from_millis(800)).await;
    }
    let (t, cpu) = (Instant::now(), cpu_time());
    if !only {
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    Throughput {
        single_rate,
        single_cpu_per_send,
        senders,
        concurrent_rate: sends / took,
        cores_busy: used / took,
        cpu_per_send: used / sends,
        disk_per_send,
        accepted: SINGLE_SENDS + senders * per,
        follow_up_cores: (cpu_time() - cpu).as_secs_f64() / t.elapsed().as_secs_f64(),
    }
}

impl Throughput {
    /// `PHASES=throughput`'s one line.
    fn print_one_line(&self) {
        println!(
            "throughput: 1 sender {:.0} /s, {} senders {:.0} /s, ratio {:.2}, CPU per send {:.0} µs",
            self.single_rate,
            self.senders,
            self.concurrent_rate,
            self.concurrent_rate / self.single_rate,
            self.cpu_per_send * 1e6
        );
    }

    fn print(&self) {
        let (senders, cores) = (self.senders, std::thread::available_parallelism().map_or(0, |n| n.get()));
        println!("  cross-home durable sends, 1 sender          {:>10.0} /s", self.single_rate);
        println!(
            "  CPU per send at 1 sender (both homes, client) {:>8.0} µs",
            self.single_cpu_per_send * 1e6
        );
        println!("  cross-home durable sends, {senders} senders        {:>10.0} /s", self.concurrent_rate);
        println!(
            "  ratio                                       {:>10.1} x   (target >= 10x)",
            self.concurrent_rate / self.single_rate
        );
        println!(
            "  CPU while they send (both homes, clients)     {:>10.2} of {} cores",
            self.cores_busy, cores
        );
        println!(
            "  CPU per send at {senders} senders (both homes, clients) {:>6.0} µs, disk writes {:.0} KiB",
            self.cpu_per_send * 1e6,
            self.disk_per_send / 1024.0
        );
        println!(
            "  ratio if all {cores} cores were busy           {:>10.1} x   (cores / CPU per send / single rate)",
            cores as f64 / self.cpu_per_send / self.single_rate
        );
        println!(
            "  CPU while following up {} accepted sends    {:>10.2} of {} cores   (the 3 s after them)",
            self.accepted, self.follow_up_cores, cores
        );
    }
}

/// Partition heal: datagrams dropped for 5 s, then the time to the first delivery.
async fn partition_heal() -> Duration {
    let (e, f) = (home().await, home().await);
    let relay = e.bridge_through_relay(&f, "gap", "send,wake").await;
    let far = f.thread("echo", None).await;
    relay.partition(true);
    e.client().threads().thread_send(send("gap", &far.id, "gap".into(), "gap".into())).await.expect("send");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let healed = Instant::now();
    relay.partition(false);
    f.wait_turns(&far.id, 1).await;
    healed.elapsed()
}
