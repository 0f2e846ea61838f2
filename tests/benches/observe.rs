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
use std::time::Duration;

use kiki_proto::ThreadRef;
use kiki_tests::binaries::{Paired, kiki_json, paired_homes_with};
use kiki_tests::measure::{durable_sends, setting};
use kiki_tests::otlp::Receiver;

/// Busy threads: sends to them queue, and their acceptance is what is measured.
const HOLD: &str = "[mailbox]\ndelivery_wait = \"0s\"\n[profiles.hold]\nexecutor = \"exec\"\ncommand = [\"sleep\", \"600\"]\n";

/// Two homes bridged, and a busy thread at the target for each sender's home to send to.
struct Setup {
    pair: Paired,
    metrics: Option<u16>,
}

impl Setup {
    fn new(observed: Option<&Receiver>) -> Self {
        let metrics = observed.map(|_| free_tcp_port());
        let config = match observed {
            Some(receiver) => format!(
                "{HOLD}[otel]\nendpoint = \"{}\"\n[metrics]\nlisten = \"127.0.0.1:{}\"\n",
                receiver.endpoint(),
                metrics.expect("port")
            ),
            None => HOLD.to_string(),
        };
        Self { pair: paired_homes_with(&config), metrics }
    }

    /// A busy thread of `home`, as a sender at `a` names it.
    fn held(&self, home: &Path, via: &str) -> ThreadRef {
        let created = kiki_json(home, &["thread", "create", "--profile", "hold", "--prompt", "x"]);
        ThreadRef {
            host_id: via.into(),
            workspace_id: String::new(),
            session_id: created["id"].as_str().expect("id").into(),
        }
    }

    fn homes(&self) -> (PathBuf, PathBuf) {
        (self.pair.a.clone(), self.pair.b.clone())
    }

    fn scrape(&self) {
        if let Some(port) = self.metrics {
            assert!(kiki_tests::scrape(port).contains("kiki_sends_total"), "metrics served");
        }
    }
}

fn free_tcp_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("probe").local_addr().expect("addr").port()
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[tokio::main]
async fn main() {
    let (rounds, seconds, senders) =
        (setting("ROUNDS", 4) as usize, setting("SECONDS", 3), setting("SENDERS", 64) as usize);
    let period = Duration::from_secs(seconds);
    let receiver = Receiver::counting().await;
    let (off, on) = (Setup::new(None), Setup::new(Some(&receiver)));
    let targets = |setup: &Setup| {
        let (a, b) = setup.homes();
        (a.clone(), setup.held(&a, ""), setup.held(&b, "bee"))
    };
    let (off_a, off_local, off_remote) = targets(&off);
    let (on_a, on_local, on_remote) = targets(&on);
    tokio::time::sleep(Duration::from_millis(500)).await;

    println!("observe: {senders} senders, {rounds} rounds of {seconds} s per phase, off and on alternating");
    let (mut local, mut remote) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        let phase = async |a: &Path, target: &ThreadRef, name: &str, setup: &Setup| {
            let rate = durable_sends(
                &[a],
                std::slice::from_ref(target),
                senders,
                period,
                &format!("{name}-{round}"),
            )
            .await;
            setup.scrape();
            rate
        };
        // Whichever runs second pays for the stores' growth: the order flips every round.
        let ((l_off, l_on), (r_off, r_on)) = if round % 2 == 0 {
            (
                (phase(&off_a, &off_local, "l-off", &off).await, phase(&on_a, &on_local, "l-on", &on).await),
                (
                    phase(&off_a, &off_remote, "r-off", &off).await,
                    phase(&on_a, &on_remote, "r-on", &on).await,
                ),
            )
        } else {
            let l_on = phase(&on_a, &on_local, "l-on", &on).await;
            let l_off = phase(&off_a, &off_local, "l-off", &off).await;
            let r_on = phase(&on_a, &on_remote, "r-on", &on).await;
            ((l_off, l_on), (phase(&off_a, &off_remote, "r-off", &off).await, r_on))
        };
        local.push(l_on / l_off);
        remote.push(r_on / r_off);
        println!(
            "  round {}: local off {l_off:>7.0} on {l_on:>7.0} sends/s ({:.2})   cross-home off {r_off:>7.0} on {r_on:>7.0} sends/s ({:.2})",
            round + 1,
            l_on / l_off,
            r_on / r_off
        );
    }
    println!("  spans received by the collector: {}", receiver.count());
    println!("local sends, observed ÷ not, median: {:.2} (target >= 0.95)", median(local));
    println!("cross-home sends, observed ÷ not, median: {:.2} (target >= 0.9)", median(remote));
}
