//! The two numbers for `kiki mcp`, each printed next to its floor measured in the
//! same run (never asserted). Run with a release build of the binaries:
//!
//! ```sh
//! cargo build --release --workspace --bins && cargo bench -p kiki-tests --bench mcp
//! ```
//!
//! - a ThreadSend through `kiki mcp` adds under 0.3 ms p50 to the same send over gRPC: one
//!   home, one warm `kiki mcp` session (rmcp's client, as an agent CLI drives it) and one gRPC
//!   connection of the bench's, sending alternately (the order flipped every round) to the
//!   same busy thread, so that every send of either path does the same work in kikid: queue
//!   one input durably and answer `pending` (`delivery_wait = 0`). The same sends without
//!   interleaving, one path at a time, give the CPU per send of the bench's client and of
//!   `kiki mcp`.
//! - `kiki mcp` starts and answers `tools/list` in under 50 ms: spawned (the release binary)
//!   through MCP's `initialize` and one `tools/list`, next to spawning `kiki --version` (a
//!   process start alone).
//!
//! Settings: `SENDS` (2,000 of each path, after 200 unmeasured), `CPU_SENDS` (500 of each
//! path), `STARTS` (30).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use kiki_client::Client;
use kiki_proto as pb;
use kiki_tests::binaries::{binary, kiki_json};
use kiki_tests::local;
use kiki_tests::mcp::{self, Session};
use kiki_tests::measure::{HeldHome, cpu_time, fsync_floor, ms, percentile, process_cpu_time, setting};
use serde_json::json;

/// Sends of each path before the measured ones (connections, caches and the VM warm).
const WARMUP: usize = 200;
/// The tools `kiki mcp` lists.
const TOOLS: usize = 7;
/// Between two measured starts: the previous `kiki mcp` has exited, not competing for a core.
const BETWEEN_STARTS: Duration = Duration::from_millis(20);

/// One send's request, the same for both paths (contents of the same length).
fn request(held: &str, path: &str, i: usize) -> pb::ThreadSendRequest {
    pb::ThreadSendRequest {
        target: Some(local(held)),
        content: format!("message {i:06} sent {path}"),
        idempotency_key: format!("{path}-{i:06}"),
        ..Default::default()
    }
}

/// A ThreadSend over gRPC: how long until it was answered.
async fn grpc_send(client: &Client, held: &str, i: usize) -> Duration {
    let mut threads = client.threads();
    let request = request(held, "grpc", i);
    let t = Instant::now();
    let sent = threads.thread_send(request).await.expect("send").into_inner();
    let took = t.elapsed();
    assert_eq!(sent.status(), pb::SendStatus::Pending, "a send to the busy thread queues");
    took
}

/// The same send through `kiki mcp`'s ThreadSend tool.
async fn mcp_send(session: &Session, held: &str, i: usize) -> Duration {
    let r = request(held, "mcp", i);
    let arguments = json!({"session_id": held, "content": r.content, "idempotency_key": r.idempotency_key});
    let t = Instant::now();
    let result = mcp::call(session, "ThreadSend", arguments).await.expect("the call is answered");
    let took = t.elapsed();
    assert_ne!(result.is_error, Some(true), "ThreadSend failed: {}", mcp::text(&result));
    let status = result.structured_content.as_ref().map(|s| s["status"].clone());
    assert_eq!(status, Some(json!("pending")), "a send to the busy thread queues");
    took
}

/// The `kiki mcp` child of this process.
fn mcp_pid() -> u32 {
    let tasks = std::fs::read_dir("/proc/self/task").expect("tasks");
    let children = tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("children")).ok())
        .flat_map(|list| list.split_whitespace().filter_map(|p| p.parse::<u32>().ok()).collect::<Vec<_>>());
    children
        .into_iter()
        .find(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            cmdline.split(|b| *b == 0).any(|arg| arg == b"mcp")
        })
        .expect("kiki mcp runs as a child of the bench")
}

/// CPU time process `pid` has used so far, all its threads, in ns (`schedstat`: precise,
/// unlike `/proc/PID/stat`'s 10 ms ticks).
fn schedstat_cpu(pid: u32) -> Duration {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("tasks");
    let ns = tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    Duration::from_nanos(ns)
}

/// Spawning `kiki mcp` through the handshake (`initialize` answered) and one `tools/list`.
async fn start_and_list(kiki: &Path, home: &Path) -> (Duration, Duration) {
    let t = Instant::now();
    let (session, _pushed) = mcp::start(kiki, Some(home), &[], &[], false).await.expect("kiki mcp starts");
    let initialized = t.elapsed();
    let tools = session.list_tools(None).await.expect("tools/list");
    let listed = t.elapsed();
    assert_eq!(tools.tools.len(), TOOLS, "kiki mcp lists its tools");
    session.cancel().await.expect("closed");
    (initialized, listed)
}

/// Spawning `kiki --version` until it exited: a process start alone.
fn version(kiki: &Path) -> Duration {
    let t = Instant::now();
    let out = Command::new(kiki).arg("--version").output().expect("kiki --version");
    let took = t.elapsed();
    assert!(out.status.success(), "kiki --version");
    took
}

fn p50_p99(samples: &mut [Duration]) -> String {
    samples.sort();
    format!("{} / {}", ms(percentile(samples, 0.5)), ms(percentile(samples, 0.99)))
}

fn p50_max(samples: &mut [Duration]) -> String {
    samples.sort();
    format!("{} / {}", ms(percentile(samples, 0.5)), ms(percentile(samples, 1.0)))
}

fn per_call(cpu: Duration, calls: usize) -> String {
    format!("{:.0} µs", cpu.as_secs_f64() * 1e6 / calls as f64)
}

#[tokio::main]
async fn main() {
    let sends = setting("SENDS", 2_000) as usize;
    let cpu_sends = setting("CPU_SENDS", 500) as usize;
    let starts = setting("STARTS", 30) as usize;
    let kiki = binary("kiki");
    let dir = tempfile::tempdir().expect("temp dir");
    let floor = fsync_floor(dir.path());
    let HeldHome { home, client, pid, held } = HeldHome::start(dir.path()).await;
    let mut starts = Starts::measure(&kiki, &home, starts).await;
    let (session, _pushed) = mcp::start(&kiki, Some(&home), &[], &[], false).await.expect("kiki mcp starts");
    let server = mcp_pid();
    let paths = Paths { client: &client, session: &session, held: &held, server, kikid: pid };
    let Interleaved { mut grpc, mut through_mcp, mut paired, mcp_cpu } = paths.interleaved(sends).await;
    let cpu = paths.one_at_a_time(WARMUP + sends, cpu_sends).await;
    session.cancel().await.expect("closed");
    drop(client);
    kiki_json(&home, &["down"]);

    let verdict = |met: bool| if met { "met" } else { "NOT met" };
    let line = |what: &str, value: String, note: &str| {
        println!("{}", format!("    {what:<52} {value:>21}   {note}").trim_end());
    };
    println!("kiki mcp benchmark");
    println!("  fsync floor (4 KiB write + fsync), p50 {}", ms(floor));
    println!(
        "  {sends} ThreadSends of each path to one busy thread (each queues one input and answers \
         `pending`), alternating, p50 / p99:"
    );
    grpc.sort();
    through_mcp.sort();
    paired.sort_by(f64::total_cmp);
    let added = percentile(&through_mcp, 0.5).as_secs_f64() - percentile(&grpc, 0.5).as_secs_f64();
    line("over gRPC (the bench's connection)", p50_p99(&mut grpc), "");
    line("through kiki mcp (ThreadSend tool, rmcp client)", p50_p99(&mut through_mcp), "");
    line(
        "added by kiki mcp, p50 difference",
        format!("{:.3} ms", added * 1e3),
        &format!("(target < 0.3 ms: {})", verdict(added < 0.3e-3)),
    );
    line(
        "added, p50 of each round's difference",
        format!("{:.3} ms", paired[(paired.len() - 1) / 2] * 1e3),
        "",
    );
    line("kiki mcp CPU per send, interleaved", per_call(mcp_cpu, sends + WARMUP), "");
    println!("  CPU per send, {cpu_sends} sends of one path at a time, gRPC / through kiki mcp:");
    line(
        "the bench's client",
        format!("{} / {}", per_call(cpu.grpc_bench, cpu_sends), per_call(cpu.mcp_bench, cpu_sends)),
        "",
    );
    line("kiki mcp", format!("- / {}", per_call(cpu.mcp_server, cpu_sends)), "");
    line(
        "kikid (10 ms ticks)",
        format!("{} / {}", per_call(cpu.grpc_daemon, cpu_sends), per_call(cpu.mcp_daemon, cpu_sends)),
        "",
    );
    println!("  {} starts, p50 / max:", starts.versions.len());
    starts.listed.sort();
    let (p50, max) = (percentile(&starts.listed, 0.5), percentile(&starts.listed, 1.0));
    line("floor: kiki --version, spawn -> exited", p50_max(&mut starts.versions), "");
    line("kiki mcp, spawn -> initialize answered", p50_max(&mut starts.initialized), "");
    line(
        "kiki mcp, spawn -> tools/list answered",
        p50_max(&mut starts.listed),
        &format!(
            "(target < 50 ms: {} at p50, {} at max)",
            verdict(p50 < Duration::from_millis(50)),
            verdict(max < Duration::from_millis(50))
        ),
    );
}

/// Starts, each: `kiki --version`, and `kiki mcp` through initialize and tools/list.
struct Starts {
    versions: Vec<Duration>,
    initialized: Vec<Duration>,
    listed: Vec<Duration>,
}

impl Starts {
    /// Starts, on a quiet machine: `kiki --version`, then `kiki mcp` through tools/list;
    /// `starts` of each after three unmeasured.
    async fn measure(kiki: &Path, home: &Path, starts: usize) -> Self {
        for _ in 0..3 {
            version(kiki);
            start_and_list(kiki, home).await;
        }
        let mut measured = Self { versions: Vec::new(), initialized: Vec::new(), listed: Vec::new() };
        for _ in 0..starts {
            tokio::time::sleep(BETWEEN_STARTS).await;
            measured.versions.push(version(kiki));
            tokio::time::sleep(BETWEEN_STARTS).await;
            let (init, list) = start_and_list(kiki, home).await;
            measured.initialized.push(init);
            measured.listed.push(list);
        }
        measured
    }
}

/// The two paths a send takes to the busy thread `held`: the bench's gRPC connection, and a
/// warm `kiki mcp` session (process `server`); kikid is process `kikid`.
struct Paths<'a> {
    client: &'a Client,
    session: &'a Session,
    held: &'a str,
    server: u32,
    kikid: u32,
}

/// Sends of both paths, alternating: each one's latency, each round's difference (mcp −
/// gRPC, seconds), and `kiki mcp`'s CPU meanwhile.
struct Interleaved {
    grpc: Vec<Duration>,
    through_mcp: Vec<Duration>,
    paired: Vec<f64>,
    mcp_cpu: Duration,
}

/// CPU spent by one path's sends at a time: the bench's, kikid's and (for mcp) `kiki mcp`'s.
struct PathCpu {
    grpc_bench: Duration,
    grpc_daemon: Duration,
    mcp_bench: Duration,
    mcp_daemon: Duration,
    mcp_server: Duration,
}

impl Paths<'_> {
    /// Interleaved sends: `sends` of each after [`WARMUP`], the order flipped every round.
    async fn interleaved(&self, sends: usize) -> Interleaved {
        let (client, session, held) = (self.client, self.session, self.held);
        let (mut grpc, mut through_mcp, mut paired) = (Vec::new(), Vec::new(), Vec::new());
        let mcp_cpu = schedstat_cpu(self.server);
        for i in 0..WARMUP + sends {
            let (g, m) = if i % 2 == 0 {
                let g = grpc_send(client, held, i).await;
                (g, mcp_send(session, held, i).await)
            } else {
                let m = mcp_send(session, held, i).await;
                (grpc_send(client, held, i).await, m)
            };
            if i >= WARMUP {
                grpc.push(g);
                through_mcp.push(m);
                paired.push(m.as_secs_f64() - g.as_secs_f64());
            }
        }
        Interleaved { grpc, through_mcp, paired, mcp_cpu: schedstat_cpu(self.server) - mcp_cpu }
    }

    /// CPU per send, one path at a time: `cpu_sends` of each, keys numbered from `base`.
    async fn one_at_a_time(&self, base: usize, cpu_sends: usize) -> PathCpu {
        let (client, session, held, pid) = (self.client, self.session, self.held, self.kikid);
        let (bench, daemon) = (cpu_time(), process_cpu_time(pid));
        for i in base..base + cpu_sends {
            grpc_send(client, held, i).await;
        }
        let (grpc_bench, grpc_daemon) = (cpu_time() - bench, process_cpu_time(pid) - daemon);
        let (bench, daemon, server_cpu) = (cpu_time(), process_cpu_time(pid), schedstat_cpu(self.server));
        for i in base..base + cpu_sends {
            mcp_send(session, held, i).await;
        }
        PathCpu {
            grpc_bench,
            grpc_daemon,
            mcp_bench: cpu_time() - bench,
            mcp_daemon: process_cpu_time(pid) - daemon,
            mcp_server: schedstat_cpu(self.server) - server_cpu,
        }
    }
}
