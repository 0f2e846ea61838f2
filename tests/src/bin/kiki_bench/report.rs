//! What a scenario measured, and how it is shown: a row per system (kiki, NATS, a floor) with
//! its latency percentiles (HdrHistogram), throughput, server CPU per 1,000 operations and
//! peak RSS, the median of the per-round ratios against the peer, and the target beside it;
//! as a markdown table, a JSON file and SVG plots of the latency distributions.

use std::path::Path;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// Latencies in nanoseconds, 3 significant digits, up to a minute.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("histogram bounds")
}

pub fn record(histogram: &mut Histogram<u64>, took: Duration) {
    histogram.saturating_record(took.as_nanos().max(1) as u64);
}

/// One system's numbers in a scenario, over all its rounds.
pub struct Measured {
    pub system: String,
    pub variant: String,
    pub latencies: Histogram<u64>,
    pub ops: u64,
    pub seconds: f64,
    /// The server's CPU over the measured time (kikid, nats-server); zero for a floor.
    pub server_cpu: Duration,
    pub server_peak_rss_kb: u64,
}

impl Measured {
    pub fn new(system: &str, variant: &str) -> Self {
        Self {
            system: system.into(),
            variant: variant.into(),
            latencies: histogram(),
            ops: 0,
            seconds: 0.0,
            server_cpu: Duration::ZERO,
            server_peak_rss_kb: 0,
        }
    }

    pub fn add(&mut self, round: &Round) {
        self.latencies.add(&round.latencies).expect("same bounds");
        self.ops += round.ops;
        self.seconds += round.seconds;
        self.server_cpu += round.server_cpu;
    }

    pub fn throughput(&self) -> f64 {
        if self.seconds > 0.0 { self.ops as f64 / self.seconds } else { 0.0 }
    }
}

/// One round of one system.
pub struct Round {
    pub latencies: Histogram<u64>,
    pub ops: u64,
    pub seconds: f64,
    pub server_cpu: Duration,
}

impl Round {
    pub fn throughput(&self) -> f64 {
        self.ops as f64 / self.seconds
    }

    pub fn p50(&self) -> f64 {
        self.latencies.value_at_quantile(0.5) as f64
    }
}

/// A line of the table.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub scenario: String,
    pub system: String,
    pub variant: String,
    /// Whether its latencies were measured (a memory figure, pgbench's rate, have none).
    pub timed: bool,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub ops_per_s: f64,
    pub cpu_s_per_1000: Option<f64>,
    pub peak_rss_kb: Option<u64>,
    /// kiki ÷ the peer: the median of the per-round ratios (throughput, or p50 where a
    /// scenario compares latency).
    pub ratio: Option<f64>,
    pub target: String,
    pub met: Option<bool>,
}

impl Row {
    pub fn of(scenario: &str, m: &Measured) -> Self {
        let q = |p| m.latencies.value_at_quantile(p) as f64 / 1000.0;
        let server = m.server_peak_rss_kb > 0;
        Self {
            scenario: scenario.into(),
            system: m.system.clone(),
            variant: m.variant.clone(),
            timed: !m.latencies.is_empty(),
            p50_us: q(0.5),
            p99_us: q(0.99),
            p999_us: q(0.999),
            ops_per_s: m.throughput(),
            cpu_s_per_1000: (server && m.ops > 0).then(|| m.server_cpu.as_secs_f64() * 1000.0 / m.ops as f64),
            peak_rss_kb: server.then_some(m.server_peak_rss_kb),
            ratio: None,
            target: String::new(),
            met: None,
        }
    }

    pub fn with_target(mut self, target: &str, met: Option<bool>) -> Self {
        self.target = target.into();
        self.met = met;
        self
    }
}

/// The median of per-round ratios.
pub fn median(mut ratios: Vec<f64>) -> f64 {
    ratios.sort_by(f64::total_cmp);
    if ratios.is_empty() { f64::NAN } else { ratios[ratios.len() / 2] }
}

fn latency(us: f64) -> String {
    if us >= 1000.0 { format!("{:.2} ms", us / 1000.0) } else { format!("{us:.0} µs") }
}

pub fn markdown(rows: &[Row]) -> String {
    let mut out = String::from(
        "| scenario | system | p50 | p99 | p99.9 | ops/s | server CPU s / 1k ops | server peak RSS | kiki ÷ peer | target |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for r in rows {
        let system =
            if r.variant.is_empty() { r.system.clone() } else { format!("{} ({})", r.system, r.variant) };
        let met = match r.met {
            Some(true) => " ✓",
            Some(false) => " ✗",
            None => "",
        };
        // A row that timed nothing (a memory figure, pgbench's rate) leaves them empty.
        let shown = |us: f64| if r.timed { latency(us) } else { String::new() };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {}{} |\n",
            r.scenario,
            system,
            shown(r.p50_us),
            shown(r.p99_us),
            shown(r.p999_us),
            if r.ops_per_s > 0.0 { format!("{:.0}", r.ops_per_s) } else { String::new() },
            r.cpu_s_per_1000.map_or(String::new(), |c| format!("{c:.3}")),
            r.peak_rss_kb.map_or(String::new(), |kb| format!("{:.1} MB", kb as f64 / 1024.0)),
            r.ratio.map_or(String::new(), |x| format!("{x:.2}×")),
            r.target,
            met,
        ));
    }
    out
}

/// The machine a run was made on.
#[derive(Debug, Serialize)]
pub struct Machine {
    pub cpus: usize,
    pub cpu_model: String,
    pub memory_gib: f64,
    pub kernel: String,
}

impl Machine {
    pub fn this() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name").and_then(|v| v.split(':').nth(1)))
            .unwrap_or("unknown")
            .trim()
            .to_string();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let kb: f64 = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0.0);
        let kernel =
            std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string();
        Self {
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu_model,
            memory_gib: kb / 1024.0 / 1024.0,
            kernel,
        }
    }

    pub fn describe(&self) -> String {
        format!("{} cores ({}), {:.0} GiB, Linux {}", self.cpus, self.cpu_model, self.memory_gib, self.kernel)
    }
}

/// An SVG of each system's latency distribution in a scenario: latency against percentile
/// (50, 90, 99, 99.9, 99.99 evenly spaced, as "nines").
pub fn plot(path: &Path, title: &str, series: &[(&str, &Histogram<u64>)]) -> anyhow::Result<()> {
    use plotters::prelude::*;
    // x is in "nines": 1 is p90, 2 p99, 3 p99.9; the curves start at p50 (0.3).
    let nines = |q: f64| -(1.0 - q).log10();
    let points = |h: &Histogram<u64>| -> Vec<(f64, f64)> {
        (0..=80)
            .map(|i| {
                let x = nines(0.5) + i as f64 * (4.0 - nines(0.5)) / 80.0;
                let q = 1.0 - 10f64.powf(-x);
                (x, h.value_at_quantile(q) as f64 / 1e6)
            })
            .collect()
    };
    let top = series.iter().map(|(_, h)| h.value_at_quantile(0.9999) as f64 / 1e6).fold(0.0, f64::max) * 1.1;
    let root = SVGBackend::new(path, (800, 480)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..4.0, 0.0..top.max(0.001))?;
    chart
        .configure_mesh()
        .x_desc("percentile (from p50)")
        .x_labels(5)
        .y_desc("latency (ms)")
        .x_label_formatter(&|x| {
            format!("{:.4}", (1.0 - 10f64.powf(-x)) * 100.0)
                .trim_end_matches('0')
                .trim_end_matches('.')
                .to_string()
        })
        .draw()?;
    let colors = [RED, BLUE, GREEN, MAGENTA, CYAN];
    for (i, (label, h)) in series.iter().enumerate() {
        let color = colors[i % colors.len()];
        chart
            .draw_series(LineSeries::new(points(h), color.stroke_width(2)))?
            .label(*label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
    }
    chart.configure_series_labels().border_style(BLACK).background_style(WHITE.mix(0.8)).draw()?;
    root.present()?;
    Ok(())
}
