//! What observing a home costs: durable sends with trace export (`[otel] endpoint`, to an
//! OTLP receiver in this process) and metrics (`[metrics] listen`, scraped after each
//! round) on, against the same homes' twins with both off, in the same run, rounds
//! alternating which goes first. Real `kikid`s (the subscriber is per process):
//!
//! ```sh
//! cargo build --release --workspace --bins && cargo bench -p kiki-tests --bench observe
//! ```
//!
//! - local durable sends, on ÷ off (target ≥ 0.95)
//! - cross-home durable sends (through a bridge over QUIC on loopback), on ÷ off (target ≥ 0.9)
//!
//! `ROUNDS` (4), `SECONDS` (3 per phase) and `SENDERS` (64) shape it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kiki_proto::ThreadRef;
use kiki_tests::binaries::{Paired, free_tcp_port, kiki_json, paired_homes_with};
use kiki_tests::measure::{durable_sends, process_cpu_time, setting};
use kiki_tests::otlp::Receiver;

/// Busy threads for local sends: sends to them queue, and their acceptance is what is
/// measured.
const HOLD: &str = "[mailbox]\ndelivery_wait = \"0s\"\n[profiles.hold]\nexecutor = \"exec\"\ncommand = [\"sleep\", \"600\"]\n";

/// Two homes bridged, and a busy thread at the target for each sender's home to send to.
struct Setup {
    pair: Paired,
    metrics: Option<u16>,
}

impl Setup {
    /// Observed: both homes export their traces to `receiver`, and the sending one serves
    /// its metrics.
    fn new(observed: Option<&Receiver>) -> Self {
        let Some(receiver) = observed else {
            return Self { pair: paired_homes_with(HOLD), metrics: None };
        };
        let pair = paired_homes_with(&format!("{HOLD}[otel]\nendpoint = \"{}\"\n", receiver.endpoint()));
        // Each home's metrics need a port of their own: the sender's, added once it is paired.
        let port = free_tcp_port();
        kiki_json(&pair.a, &["down"]);
        let config = pair.a.join("config.toml");
        let mut text = std::fs::read_to_string(&config).expect("config");
        text.push_str(&format!("[metrics]\nlisten = \"127.0.0.1:{port}\"\n"));
        std::fs::write(&config, text).expect("config");
        kiki_json(&pair.a, &["up"]);
        Self { pair, metrics: Some(port) }
    }

    /// A busy thread of `home`, as a sender at `a` names it (`via`: the bridge's name).
    fn held(&self, home: &Path, via: &str) -> ThreadRef {
        new_thread(home, via, &["--profile", "hold", "--prompt", "x"])
    }

    fn homes(&self) -> (PathBuf, PathBuf) {
        (self.pair.a.clone(), self.pair.b.clone())
    }

    /// A thread of `home` that takes what it is sent (an echo), as a sender at `a` names it:
    /// messages to another home that are taken end their outbox entries' follow-ups, which
    /// would otherwise go on behind the next phases.
    fn echo(&self, home: &Path, via: &str) -> ThreadRef {
        new_thread(home, via, &["--title", "echo"])
    }

    /// The kikid of `home`.
    fn pid(&self, home: &Path) -> u32 {
        kiki_json(home, &["status"])["pid"].as_u64().expect("pid") as u32
    }

    fn scrape(&self) {
        if let Some(port) = self.metrics {
            assert!(kiki_tests::scrape(port).contains("kiki_sends_total"), "metrics served");
        }
    }
}

/// A thread made in `home` by `kiki thread create ARGS…`, as a sender reaching it `via` a
/// bridge of that name names it (`""`: the sender's own home).
fn new_thread(home: &Path, via: &str, args: &[&str]) -> ThreadRef {
    let created = kiki_json(home, &[&["thread", "create"], args].concat());
    ThreadRef {
        host_id: via.into(),
        workspace_id: String::new(),
        session_id: created["id"].as_str().expect("id").into(),
    }
}

/// Waits (at most 30 s) until the kikids at `pids` are idle: under 5% of a core for 500 ms,
/// so that no phase pays for the work the one before left (follow-ups, turns).
async fn settle(pids: &[u32]) {
    let cpu = || pids.iter().map(|pid| process_cpu_time(*pid)).sum::<Duration>();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(30) {
        let before = cpu();
        tokio::time::sleep(Duration::from_millis(500)).await;
        if cpu() - before < Duration::from_millis(25) {
            return;
        }
    }
    println!("  (the homes did not go idle within 30 s)");
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// One phase's numbers.
struct Phase {
    sends_per_s: f64,
    /// The sending and the receiving kikid's CPU per send (the same process for a local send).
    cpu_per_send: Duration,
}

#[tokio::main]
async fn main() {
    let (rounds, seconds, senders) =
        (setting("ROUNDS", 4) as usize, setting("SECONDS", 3), setting("SENDERS", 64) as usize);
    let period = Duration::from_secs(seconds);
    let receiver = Receiver::counting().await;
    let (off, on) = (Setup::new(None), Setup::new(Some(&receiver)));
    println!("observe: {senders} senders, {rounds} rounds of {seconds} s per phase, off and on alternating");
    // Each phase sends to threads of its own: a thread's queue grows with what it is sent.
    let phase = async |setup: &Setup, remote: bool, name: &str| {
        let (a, b) = setup.homes();
        let target = if remote { setup.echo(&b, "bee") } else { setup.held(&a, "") };
        let pids: Vec<u32> = if remote { vec![setup.pid(&a), setup.pid(&b)] } else { vec![setup.pid(&a)] };
        let cpu = || pids.iter().map(|pid| process_cpu_time(*pid)).sum::<Duration>();
        settle(&[
            off.pid(&off.homes().0),
            off.pid(&off.homes().1),
            on.pid(&on.homes().0),
            on.pid(&on.homes().1),
        ])
        .await;
        let (started, before) = (Instant::now(), cpu());
        let rate = durable_sends(&[&a], std::slice::from_ref(&target), senders, period, name).await;
        let sent = rate * started.elapsed().as_secs_f64();
        let cpu_per_send = (cpu() - before).div_f64(sent.max(1.0));
        setup.scrape();
        Phase { sends_per_s: rate, cpu_per_send }
    };
    let (mut local, mut remote) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        for (remote_sends, ratios) in [(false, &mut local), (true, &mut remote)] {
            let kind = if remote_sends { "cross-home" } else { "local" };
            // Whichever runs second pays for the stores' growth: the order flips every round.
            let (off_phase, on_phase) = if round % 2 == 0 {
                let off_phase = phase(&off, remote_sends, &format!("{kind}-off-{round}")).await;
                (off_phase, phase(&on, remote_sends, &format!("{kind}-on-{round}")).await)
            } else {
                let on_phase = phase(&on, remote_sends, &format!("{kind}-on-{round}")).await;
                (phase(&off, remote_sends, &format!("{kind}-off-{round}")).await, on_phase)
            };
            let ratio = on_phase.sends_per_s / off_phase.sends_per_s;
            ratios.push(ratio);
            println!(
                "  round {} {kind:>10}: off {:>6.0} sends/s, kikid CPU {:>4.0} µs/send   on {:>6.0} sends/s, {:>4.0} µs/send   on ÷ off {ratio:.2}",
                round + 1,
                off_phase.sends_per_s,
                off_phase.cpu_per_send.as_secs_f64() * 1e6,
                on_phase.sends_per_s,
                on_phase.cpu_per_send.as_secs_f64() * 1e6,
            );
        }
    }
    let dropped = on
        .metrics
        .map(|port| kiki_tests::metric(&kiki_tests::scrape(port), "kiki_trace_spans_dropped_total"));
    println!(
        "  spans received by the collector (in this process, on the same cores): {}; dropped by the sending home: {}",
        receiver.count(),
        dropped.unwrap_or_default()
    );
    println!("local sends, observed ÷ not, median: {:.2} (target >= 0.95)", median(local));
    println!("cross-home sends, observed ÷ not, median: {:.2} (target >= 0.9)", median(remote));
}
