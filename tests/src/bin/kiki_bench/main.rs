//! `kiki-bench`: kiki's numbers beside NATS JetStream's and the machine's floors, measured in
//! one run on one machine, on the release binaries.
//!
//! ```sh
//! cargo build --release --workspace --bins && target/release/kiki-bench all
//! target/release/kiki-bench send-durable-64        # one scenario
//! target/release/kiki-bench list                   # the scenarios
//! ```
//!
//! Prints a markdown table on stdout (a progress line on stderr while it runs) and writes
//! `kiki-bench.json` and an SVG of each peer scenario's latency distributions into `OUT`
//! (default `target/kiki-bench`). Settings: `ROUNDS` (5, at least 5 for a peer comparison),
//! `SECONDS` (2 per system and round), `OUT`. The peer's server comes from
//! `tests/bench-setup.sh` (or `NATS_SERVER`). It reports; it never fails on a number.

mod load;
mod nats;
mod report;
mod scenarios;

use std::path::PathBuf;
use std::time::Duration;

use kiki_tests::measure::setting;
use report::{Machine, Row};
use scenarios::{Bench, SCENARIOS};
use serde::Serialize;

#[derive(Serialize)]
struct Run<'a> {
    machine: Machine,
    rounds: usize,
    seconds_per_round: u64,
    scenarios: Vec<&'a str>,
    rows: &'a [Row],
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let asked: Vec<String> = std::env::args().skip(1).collect();
    if asked.is_empty() || asked.iter().any(|a| a == "list" || a == "--help" || a == "-h") {
        eprintln!("kiki-bench SCENARIO… | all | list\n\nScenarios:");
        for (name, what) in SCENARIOS {
            eprintln!("  {name:<16} {what}");
        }
        return Ok(());
    }
    let names: Vec<&str> = if asked.iter().any(|a| a == "all") {
        SCENARIOS.iter().map(|(name, _)| *name).collect()
    } else {
        let known: Vec<&str> = SCENARIOS.iter().map(|(name, _)| *name).collect();
        if let Some(unknown) = asked.iter().find(|a| !known.contains(&a.as_str())) {
            anyhow::bail!("no scenario {unknown:?}: `kiki-bench list` names them");
        }
        asked.iter().map(String::as_str).collect()
    };
    let rounds = setting("ROUNDS", 5) as usize;
    let seconds = setting("SECONDS", 2);
    let out = std::env::var("OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/kiki-bench"));
    std::fs::create_dir_all(&out)?;
    let work = tempfile::Builder::new().prefix("kiki-bench-").tempdir()?;
    let mut bench = Bench::new(work.path().to_path_buf(), rounds, Duration::from_secs(seconds));
    for name in &names {
        bench.run(name).await;
    }
    scenarios::progress("done", "");
    eprintln!();

    let machine = Machine::this();
    println!("kiki-bench on {}, {rounds} rounds of {seconds} s\n", machine.describe());
    print!("{}", report::markdown(&bench.rows));
    let json = out.join("kiki-bench.json");
    let run =
        Run { machine, rounds, seconds_per_round: seconds, scenarios: names.clone(), rows: &bench.rows };
    std::fs::write(&json, serde_json::to_string_pretty(&run)?)?;
    println!("\nJSON: {}", json.display());
    for (title, measured) in &bench.plots {
        let name = title.split(':').next().unwrap_or("plot");
        let path = out.join(format!("{name}.svg"));
        let labels: Vec<String> = measured.iter().map(|m| format!("{} ({})", m.system, m.variant)).collect();
        let series: Vec<(&str, &hdrhistogram::Histogram<u64>)> =
            labels.iter().map(String::as_str).zip(measured.iter().map(|m| &m.latencies)).collect();
        report::plot(&path, title, &series)?;
        println!("plot: {}", path.display());
    }
    Ok(())
}
