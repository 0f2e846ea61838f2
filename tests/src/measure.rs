//! Floors and statistics shared by the benchmarks: each number is printed next to the
//! floor measured in the same run on the same machine.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

/// A bench knob from the environment (`name`), or its default.
pub fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The value at quantile `p` (0..=1) of sorted samples.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

pub fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

pub fn us(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

/// p50 of write-4-KiB + fsync in `dir`, back to back: the floor any durable commit pays.
pub fn fsync_floor(dir: &Path) -> Duration {
    fsync_p50(dir, Duration::ZERO, 200)
}

/// p50 of write-4-KiB + fsync in `dir`, each after the disk idled for `idle`. On a VM the
/// host's disk backend may poll only briefly after an I/O: a lone commit (one sender, one
/// request) can then cost many times the back-to-back floor, and this shows how many.
pub fn fsync_after_idle(dir: &Path, idle: Duration) -> Duration {
    fsync_p50(dir, idle, 100)
}

fn fsync_p50(dir: &Path, idle: Duration, samples: usize) -> Duration {
    let mut file = std::fs::File::create(dir.join("fsync-probe")).expect("probe");
    let block = [7u8; 4096];
    let mut times = Vec::with_capacity(samples);
    for _ in 0..samples {
        std::thread::sleep(idle);
        let t = Instant::now();
        file.write_all(&block).expect("write");
        file.sync_all().expect("fsync");
        times.push(t.elapsed());
    }
    times.sort();
    percentile(&times, 0.5)
}

/// p50 of a UDP ping-pong on loopback: the floor of one QUIC round trip.
pub async fn udp_round_trip_floor() -> Duration {
    let a = tokio::net::UdpSocket::bind("127.0.0.1:0").await.expect("a");
    let b = tokio::net::UdpSocket::bind("127.0.0.1:0").await.expect("b");
    a.connect(b.local_addr().expect("b addr")).await.expect("connect");
    b.connect(a.local_addr().expect("a addr")).await.expect("connect");
    let mut times = Vec::new();
    let mut buf = [0u8; 1200];
    for _ in 0..1000 {
        let t = Instant::now();
        a.send(&[1u8; 1200]).await.expect("send");
        b.recv(&mut buf).await.expect("recv");
        b.send(&[2u8; 1200]).await.expect("send");
        a.recv(&mut buf).await.expect("recv");
        times.push(t.elapsed());
    }
    times.sort();
    percentile(&times, 0.5)
}

/// The number after `name:` in a `/proc` file of "name: value" lines (`status`, `io`).
fn proc_field(path: &str, name: &str) -> u64 {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{path}: no {name}"))
}

/// Resident memory of process `pid`, in kB.
pub fn rss_kb(pid: u32) -> u64 {
    proc_field(&format!("/proc/{pid}/status"), "VmRSS")
}

/// The most resident memory this process has had so far (`VmHWM`), in kB.
pub fn peak_rss_kb() -> u64 {
    proc_field("/proc/self/status", "VmHWM")
}

/// The most resident memory process `pid` has had so far (`VmHWM`), in kB.
pub fn peak_rss_kb_of(pid: u32) -> u64 {
    proc_field(&format!("/proc/{pid}/status"), "VmHWM")
}

/// CPU time (user + system) this process has used so far, all threads.
pub fn cpu_time() -> Duration {
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF).expect("getrusage");
    let (user, system) = (usage.user_time(), usage.system_time());
    let micros = |t: nix::sys::time::TimeVal| t.tv_sec() as u64 * 1_000_000 + t.tv_usec() as u64;
    Duration::from_micros(micros(user) + micros(system))
}

/// Bytes this process has caused to be written to storage so far (`write_bytes` of
/// `/proc/self/io`: WAL frames, checkpoints, whatever its fsyncs flushed).
pub fn disk_bytes_written() -> u64 {
    proc_field("/proc/self/io", "write_bytes")
}

/// CPU time (user + system) process `pid` has used so far, from `/proc/PID/stat` (in clock
/// ticks of 10 ms: meaningful over runs of seconds).
pub fn process_cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("proc stat");
    // Fields after the command name (which may hold spaces) start at the state, field 3.
    let fields: Vec<&str> = stat.rsplit_once(')').expect("stat format").1.split_whitespace().collect();
    let ticks = |i: usize| fields[i].parse::<u64>().expect("clock ticks");
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

/// A started home whose one thread is kept busy by its `hold` profile (an agent that
/// sleeps), so sends to it queue and what a bench measures is their acceptance, not turns;
/// `delivery_wait = 0` answers a queued send as soon as it is durable.
pub struct HeldHome {
    pub home: std::path::PathBuf,
    pub client: kiki_client::Client,
    /// kikid's pid.
    pub pid: u32,
    /// The busy thread's id.
    pub held: String,
}

impl HeldHome {
    /// Starts it in `dir/home` with the binaries of [`crate::binaries::binary`].
    pub async fn start(dir: &Path) -> Self {
        Self::start_with(dir, "").await
    }

    /// [`HeldHome::start`] with more config (sections of its own, e.g. `[store]`).
    pub async fn start_with(dir: &Path, config: &str) -> Self {
        let home = dir.join("home");
        std::fs::create_dir_all(&home).expect("home");
        std::fs::write(
            home.join("config.toml"),
            format!(
                "[mailbox]\ndelivery_wait = \"0s\"\n[profiles.hold]\nexecutor = \"exec\"\ncommand = [\"sleep\", \"600\"]\n{config}"
            ),
        )
        .expect("config");
        crate::binaries::kiki_json(&home, &["up"]);
        let client = kiki_client::Client::connect(&home.join("kikid.sock")).await.expect("connect");
        let status = client.home().status(kiki_proto::StatusRequest::default()).await.expect("status");
        let created =
            crate::binaries::kiki_json(&home, &["thread", "create", "--profile", "hold", "--prompt", "x"]);
        let held = created["id"].as_str().expect("id").to_string();
        // Its agent started: later sends queue behind its turn.
        tokio::time::sleep(Duration::from_millis(200)).await;
        Self { home, client, pid: status.into_inner().pid, held }
    }
}

/// Durable ThreadSends of 200-byte messages a second from `clients` connections for `period`,
/// client `c` sending through the home at `homes[c % len]` to `targets[c % len]` (a thread of
/// that home, or of a peer through a bridge); keys are `ROUND-c-n`, so rounds never replay
/// each other.
pub async fn durable_sends(
    homes: &[&Path],
    targets: &[kiki_proto::ThreadRef],
    clients: usize,
    period: Duration,
    round: &str,
) -> f64 {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let socket = homes[c % homes.len()].join("kikid.sock");
        let (target, round) = (targets[c % targets.len()].clone(), round.to_string());
        tasks.push(tokio::spawn(async move {
            let mut threads = kiki_client::Client::connect(&socket).await.expect("connect").threads();
            let mut sent = 0usize;
            while started.elapsed() < period {
                let request = kiki_proto::ThreadSendRequest {
                    target: Some(target.clone()),
                    content: "x".repeat(200),
                    idempotency_key: format!("{round}-{c}-{sent}"),
                    ..Default::default()
                };
                threads.thread_send(request).await.expect("send");
                sent += 1;
            }
            sent
        }));
    }
    let mut sent = 0;
    for task in tasks {
        sent += task.await.expect("client");
    }
    sent as f64 / started.elapsed().as_secs_f64()
}
