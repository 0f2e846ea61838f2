//! The scenarios, each runnable alone. Those with a peer run kiki and NATS JetStream in the
//! same rounds, interleaved (which goes first turns each round), and report the median of the
//! per-round ratios.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kiki_client::Client;
use kiki_proto as pb;
use kiki_tests::binaries::kiki_json;
use kiki_tests::measure::{peak_rss_kb_of, process_cpu_time};

mod bridged;
mod home;
mod stored;

use home::KikiHome;

use super::load::{closed_loop, nats_publishes, one_by_one, thread_sends};
use super::nats;
use super::report::{Measured, Round, Row, median};

/// What every scenario is given.
pub struct Bench {
    pub dir: PathBuf,
    pub rounds: usize,
    pub period: Duration,
    /// Rows of every scenario run, in order.
    pub rows: Vec<Row>,
    /// Latency distributions to plot: a scenario's title and its systems'.
    pub plots: Vec<(String, Vec<Measured>)>,
    nats_binary: Option<PathBuf>,
}

/// The names `kiki-bench` takes, in the order `all` runs them.
pub const SCENARIOS: &[(&str, &str)] = &[
    ("floor-fsync", "write + fdatasync of a 4 KiB page"),
    ("floor-rtt", "a UDP and a Unix-socket round trip on loopback"),
    ("grpc-noop", "a kikid call that touches no store (ToolList)"),
    (
        "send-durable-1",
        "ThreadSend of 200 bytes, one sender, to a busy thread and to an idle echo thread, beside a NATS JetStream publish",
    ),
    ("send-durable-64", "the same from 64 senders on their own connections"),
    ("send-dup", "every second send repeats a key: the repeats' latency and what they write"),
    ("wait-wake", "a ThreadWait parked on an echo thread returns: from the send's answer until the wait's"),
    ("wait-idle-10k", "10,000 ThreadWaits parked at once: the RSS they add to kikid"),
    (
        "room-post",
        "the owner's post mentioning six idle echo members: from its answer until their six turns ended",
    ),
    (
        "mcp-send",
        "ThreadSend through a warm `kiki mcp` session (rmcp's client) beside the same send over gRPC",
    ),
    (
        "bridge-heal",
        "a cross-home send made during a 5 s partition (a UDP relay dropping datagrams): from the heal until the target's turn ended",
    ),
    (
        "pg-send-1",
        "ThreadSend of 200 bytes to a busy thread on a Postgres store, one client, beside pgbench's single-row insert on the same server",
    ),
    ("pg-send-16", "the same from 16 clients"),
    (
        "restart-recover",
        "kill -9 of a home holding 1,000,000 messages and 10,000 pending bridged sends (seeded into its store): time until it serves again, and until its outbox drained",
    ),
    (
        "read-page",
        "ThreadRead pages of 100 turns from a thread of 1,000,000 (seeded into the store), walking forward and the newest",
    ),
    (
        "bridge-send-1",
        "a cross-home ThreadSend over a bridge (QUIC on loopback) to a busy thread, one sender, beside two NATS servers joined by a leaf node",
    ),
    ("bridge-send-64", "the same from 64 senders"),
];

impl Bench {
    pub fn new(dir: PathBuf, rounds: usize, period: Duration) -> Self {
        Self { dir, rounds, period, rows: Vec::new(), plots: Vec::new(), nats_binary: None }
    }

    pub async fn run(&mut self, scenario: &str) {
        match scenario {
            "floor-fsync" => self.floor_fsync().await,
            "floor-rtt" => self.floor_rtt().await,
            "grpc-noop" => self.grpc_noop().await,
            "send-durable-1" => self.send_durable(1).await,
            "send-durable-64" => self.send_durable(64).await,
            "send-dup" => self.send_dup().await,
            "wait-wake" => self.wait_wake().await,
            "wait-idle-10k" => self.wait_idle().await,
            "room-post" => self.room_post().await,
            "mcp-send" => self.mcp_send().await,
            "read-page" => self.read_page().await,
            "restart-recover" => self.restart_recover().await,
            "bridge-heal" => self.bridge_heal().await,
            "pg-send-1" => self.pg_send(1).await,
            "pg-send-16" => self.pg_send(16).await,
            "bridge-send-1" => self.bridge_send(1).await,
            "bridge-send-64" => self.bridge_send(64).await,
            other => panic!("no scenario {other:?}"),
        }
    }

    fn nats(&mut self) -> PathBuf {
        self.nats_binary.get_or_insert_with(nats::server_binary).clone()
    }

    async fn floor_fsync(&mut self) {
        progress("floor-fsync", "4 KiB write + fdatasync");
        let mut file = std::fs::File::create(self.dir.join("fsync-probe")).expect("probe");
        let block = [7u8; 4096];
        let round = one_by_one(1_000, |_| {
            file.write_all(&block).expect("write");
            file.sync_data().expect("fdatasync");
            std::future::ready(())
        })
        .await;
        self.floor("floor-fsync", "4 KiB page", &round);
    }

    async fn floor_rtt(&mut self) {
        progress("floor-rtt", "UDP and Unix-socket ping-pong");
        let a = tokio::net::UdpSocket::bind("127.0.0.1:0").await.expect("a");
        let b = tokio::net::UdpSocket::bind("127.0.0.1:0").await.expect("b");
        a.connect(b.local_addr().expect("b")).await.expect("connect");
        b.connect(a.local_addr().expect("a")).await.expect("connect");
        let mut buf = [0u8; 1200];
        let mut times = Vec::new();
        for _ in 0..2_000 {
            let t = Instant::now();
            a.send(&[1u8; 200]).await.expect("send");
            b.recv(&mut buf).await.expect("recv");
            b.send(&[2u8; 200]).await.expect("send");
            a.recv(&mut buf).await.expect("recv");
            times.push(t.elapsed());
        }
        self.floor("floor-rtt", "UDP", &round_of(&times));
        let (mut x, mut y) = tokio::net::UnixStream::pair().expect("pair");
        let mut times = Vec::new();
        for _ in 0..2_000 {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let t = Instant::now();
            x.write_all(&[1u8; 200]).await.expect("write");
            y.read_exact(&mut buf[..200]).await.expect("read");
            y.write_all(&[2u8; 200]).await.expect("write");
            x.read_exact(&mut buf[..200]).await.expect("read");
            times.push(t.elapsed());
        }
        self.floor("floor-rtt", "Unix socket", &round_of(&times));
    }

    fn floor(&mut self, scenario: &str, variant: &str, round: &Round) {
        let mut measured = Measured::new("floor", variant);
        measured.add(round);
        self.rows.push(Row::of(scenario, &measured));
    }

    /// A row of kiki's `times`, its target a bound on their p50 (in µs).
    fn p50_within(&mut self, scenario: &str, variant: &str, times: &[Duration], bound_us: f64, target: &str) {
        let mut measured = Measured::new("kiki", variant);
        measured.add(&round_of(times));
        let row = Row::of(scenario, &measured);
        let met = row.p50_us <= bound_us;
        self.rows.push(row.with_target(target, Some(met)));
    }

    async fn grpc_noop(&mut self) {
        let home = KikiHome::start(&self.dir.join("noop"), 0, 0).await;
        progress("grpc-noop", "ToolList, one client");
        let tools = home.client.tools();
        let mut measured = Measured::new("kiki", "ToolList");
        for _ in 0..self.rounds {
            let round = closed_loop(
                std::slice::from_ref(&tools),
                self.period,
                || home.cpu(),
                |mut tools, _, _| async move {
                    tools.tool_list(pb::ToolListRequest {}).await.expect("ToolList");
                },
            )
            .await;
            measured.add(&round);
        }
        measured.server_peak_rss_kb = home.peak_rss_kb();
        self.rows.push(Row::of("grpc-noop", &measured));
        home.stop();
    }

    /// ThreadSend of 200-byte messages from `senders` clients: to busy threads (a durable
    /// append) and to idle `echo` threads (each send delivered, a turn started), in rounds
    /// interleaved with NATS JetStream publishes from as many clients.
    async fn send_durable(&mut self, senders: usize) {
        let scenario = format!("send-durable-{senders}");
        let busy_threads = senders.min(16);
        let home = KikiHome::start(&self.dir.join(&scenario), busy_threads, senders).await;
        let server =
            nats::Server::start(&self.nats(), &self.dir.join(format!("{scenario}-nats")), "peer", "");
        let js = nats::connect(&server.url).await;
        nats::file_stream(&js, "BENCH", vec!["bench.>".into()]).await;
        let mut contexts = Vec::new();
        let mut kiki_clients = Vec::new();
        for _ in 0..senders {
            contexts.push(nats::connect(&server.url).await);
            kiki_clients.push(Client::connect(&home.socket()).await.expect("connect").threads());
        }
        let mut results = [
            Measured::new("kiki", "busy thread"),
            Measured::new("kiki", "idle echo thread"),
            Measured::new("NATS", "JetStream file, sync always"),
        ];
        let mut ratios = [Vec::new(), Vec::new()];
        let mut p50_ratio = Vec::new();
        for round in 0..self.rounds {
            let mut this = [None, None, None];
            for step in 0..3 {
                let which = (step + round) % 3;
                progress(
                    &scenario,
                    &format!("round {}/{}: {}", round + 1, self.rounds, results[which].variant),
                );
                settle().await;
                let measured = match which {
                    0 | 1 => {
                        let threads = if which == 0 { &home.busy } else { &home.idle };
                        let targets = threads.iter().map(|t| kiki_tests::local(t)).collect();
                        thread_sends(&kiki_clients, targets, format!("r{round}-{which}"), self.period, || {
                            home.cpu()
                        })
                        .await
                    }
                    _ => {
                        nats_publishes(
                            &contexts,
                            "bench",
                            format!("r{round}"),
                            self.period,
                            vec![server.pid()],
                        )
                        .await
                    }
                };
                results[which].add(&measured);
                this[which] = Some(measured);
            }
            let [Some(b), Some(i), Some(n)] = this else { unreachable!("every system ran") };
            ratios[0].push(b.throughput() / n.throughput());
            ratios[1].push(i.throughput() / n.throughput());
            p50_ratio.push(b.p50() / n.p50());
        }
        results[0].server_peak_rss_kb = home.peak_rss_kb();
        results[1].server_peak_rss_kb = home.peak_rss_kb();
        results[2].server_peak_rss_kb = peak_rss_kb_of(server.pid());
        let [busy_ratio, idle_ratio] = ratios.map(median);
        let p50_ratio = median(p50_ratio);
        let (target_busy, target_idle, met_busy, met_idle) = if senders == 1 {
            (
                format!("p50 ≤ NATS's (kiki ÷ NATS p50 {p50_ratio:.2}) and throughput ≥ 1.0×"),
                "throughput ≥ 1.0×".to_string(),
                p50_ratio <= 1.0 && busy_ratio >= 1.0,
                idle_ratio >= 1.0,
            )
        } else {
            ("≥ 2× NATS".to_string(), "≥ 2× NATS".to_string(), busy_ratio >= 2.0, idle_ratio >= 2.0)
        };
        let mut busy_row = Row::of(&scenario, &results[0]).with_target(&target_busy, Some(met_busy));
        busy_row.ratio = Some(busy_ratio);
        let mut idle_row = Row::of(&scenario, &results[1]).with_target(&target_idle, Some(met_idle));
        idle_row.ratio = Some(idle_ratio);
        self.rows.extend([busy_row, idle_row, Row::of(&scenario, &results[2])]);
        self.plots
            .push((format!("{scenario}: latency, kiki vs NATS JetStream"), results.into_iter().collect()));
        home.stop();
    }

    /// Sends to an idle `echo` thread, each with a ThreadWait parked on it: from the send's
    /// answer until the wait returns (its turn ended).
    async fn wait_wake(&mut self) {
        let home = KikiHome::start(&self.dir.join("wait-wake"), 0, 1).await;
        let mut wakes = Vec::new();
        for i in 0..(self.rounds * 100) {
            progress("wait-wake", &format!("wake {}/{}", i + 1, self.rounds * 100));
            let request = pb::ThreadSendRequest {
                target: Some(kiki_tests::local(&home.idle[0])),
                content: format!("wake {i}"),
                idempotency_key: format!("wake-{i}"),
                ..Default::default()
            };
            wakes.push(home.wake_round(request, &home.idle).await);
        }
        self.p50_within("wait-wake", "send answered → wait returns", &wakes, 150.0, "p50 ≤ 150 µs");
        home.stop();
    }

    /// 10,000 ThreadWaits parked on a busy thread over 100 connections: kikid's RSS before
    /// and while they wait.
    async fn wait_idle(&mut self) {
        let home = KikiHome::start(&self.dir.join("wait-idle"), 1, 0).await;
        progress("wait-idle-10k", "parking 10,000 ThreadWaits");
        let before = home.rss_kb();
        let mut connections = Vec::new();
        for _ in 0..100 {
            connections.push(Client::connect(&home.socket()).await.expect("connect"));
        }
        let mut parked = Vec::new();
        for i in 0..10_000 {
            let (mut threads, target) = (connections[i % connections.len()].threads(), home.busy[0].clone());
            parked.push(tokio::spawn(async move {
                let request = pb::ThreadWaitRequest {
                    targets: vec![kiki_tests::local(&target)],
                    timeout_ms: Some(60_000),
                    ..Default::default()
                };
                let _ = threads.thread_wait(request).await;
            }));
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
        let added_kb = home.rss_kb().saturating_sub(before);
        for task in &parked {
            task.abort();
        }
        let mut measured = Measured::new("kiki", "10,000 parked waits");
        measured.server_peak_rss_kb = home.peak_rss_kb();
        let row = Row::of("wait-idle-10k", &measured);
        let target = format!("≤ 50 MB extra RSS: {:.1} MB added", added_kb as f64 / 1024.0);
        self.rows.push(row.with_target(&target, Some(added_kb <= 50 * 1024)));
        home.stop();
    }

    /// The owner's post to a room hosted by a busy thread, mentioning six idle `echo`
    /// members: from its answer until the six turns ended.
    async fn room_post(&mut self) {
        let home = KikiHome::start(&self.dir.join("room-post"), 1, 6).await;
        let room = kiki_json(&home.home, &["room", "create", "--host", &home.busy[0], "--name", "bench"]);
        let room = room["room"]["id"].as_str().or(room["id"].as_str()).expect("room id").to_string();
        for member in &home.idle {
            kiki_json(&home.home, &["room", "add", &room, member]);
        }
        let mut wakes = Vec::new();
        for i in 0..(self.rounds * 40) {
            progress("room-post", &format!("post {}/{}", i + 1, self.rounds * 40));
            let request = pb::ThreadSendRequest {
                room: room.clone(),
                content: format!("post {i}"),
                idempotency_key: format!("post-{i}"),
                mentions: home.idle.clone(),
                ..Default::default()
            };
            wakes.push(home.wake_round(request, &home.idle).await);
        }
        self.p50_within("room-post", "post answered → six turns ended", &wakes, 5_000.0, "p50 ≤ 5 ms");
        home.stop();
    }

    /// ThreadSends to a busy thread through a warm `kiki mcp` session, alternately with the
    /// same send over the bench's gRPC connection.
    async fn mcp_send(&mut self) {
        let home = KikiHome::start(&self.dir.join("mcp-send"), 1, 0).await;
        let kiki = kiki_tests::binaries::binary("kiki");
        let (session, _) =
            kiki_tests::mcp::start(&kiki, Some(&home.home), &[], &[], false).await.expect("kiki mcp starts");
        let mut threads = home.client.threads();
        let (mut over_mcp, mut over_grpc) = (Vec::new(), Vec::new());
        let sends = self.rounds * 200;
        for i in 0..sends + 50 {
            progress("mcp-send", &format!("send {}/{}", i + 1, sends + 50));
            let arguments = serde_json::json!({
                "session_id": home.busy[0], "content": "x".repeat(200), "idempotency_key": format!("mcp-{i}"),
            });
            let t = Instant::now();
            let result = kiki_tests::mcp::call(&session, "ThreadSend", arguments).await.expect("answered");
            let mcp = t.elapsed();
            assert_ne!(result.is_error, Some(true), "{}", kiki_tests::mcp::text(&result));
            let request = pb::ThreadSendRequest {
                target: Some(kiki_tests::local(&home.busy[0])),
                content: "x".repeat(200),
                idempotency_key: format!("grpc-{i}"),
                ..Default::default()
            };
            let t = Instant::now();
            threads.thread_send(request).await.expect("send");
            if i >= 50 {
                over_mcp.push(mcp);
                over_grpc.push(t.elapsed());
            }
        }
        let _ = session.cancel().await;
        let (mut through, mut direct) =
            (Measured::new("kiki", "through kiki mcp"), Measured::new("kiki", "over gRPC"));
        through.add(&round_of(&over_mcp));
        direct.add(&round_of(&over_grpc));
        let (a, b) = (Row::of("mcp-send", &through), Row::of("mcp-send", &direct));
        let extra = a.p50_us - b.p50_us;
        let target = format!("p50 − gRPC's < 0.3 ms: {:.3} ms", extra / 1000.0);
        self.rows.extend([a.with_target(&target, Some(extra < 300.0)), b]);
        home.stop();
    }

    /// Sends whose every second one repeats the key (and content) of the one before: the
    /// repeats are answered from the stored key. Reports the repeats' latency and the bytes
    /// kikid wrote while answering only repeats, beside a NATS publish of a seen message id.
    async fn send_dup(&mut self) {
        let home = KikiHome::start(&self.dir.join("send-dup"), 1, 0).await;
        let server = nats::Server::start(&self.nats(), &self.dir.join("send-dup-nats"), "peer", "");
        let js = nats::connect(&server.url).await;
        nats::file_stream(&js, "BENCH", vec!["bench.>".into()]).await;
        let mut threads = home.client.threads();
        let target = kiki_tests::local(&home.busy[0]);
        let sends = 2_000;
        progress("send-dup", "kiki: each send, then its repeat");
        let (mut new, mut repeats) =
            (Measured::new("kiki", "new keys"), Measured::new("kiki", "repeated keys"));
        let mut wrote_meanwhile = Vec::new();
        for i in 0..sends {
            let request = pb::ThreadSendRequest {
                target: Some(target.clone()),
                content: format!("{i:0200}"),
                idempotency_key: format!("dup-{i}"),
                ..Default::default()
            };
            let t = Instant::now();
            threads.thread_send(request.clone()).await.expect("send");
            new.add(&round_of(&[t.elapsed()]));
            let before = home.bytes_written();
            let t = Instant::now();
            let answer = threads.thread_send(request.clone()).await.expect("repeat").into_inner();
            repeats.add(&round_of(&[t.elapsed()]));
            if home.bytes_written() > before {
                wrote_meanwhile.push(request);
            }
            assert!(answer.replayed, "a repeat is answered from its key");
        }
        // The home's own background writes (its replica heartbeat) can land while a repeat is
        // under way: a repeat that wrote repeats it again, each time, so those are asked again.
        let mut written = 0;
        for request in wrote_meanwhile {
            let before = home.bytes_written();
            threads.thread_send(request).await.expect("repeat");
            written += home.bytes_written() - before;
        }
        progress("send-dup", "NATS: each publish, then its repeat");
        let mut nats_repeats = Measured::new("NATS", "repeated Nats-Msg-Id");
        let payload = bytes::Bytes::from(vec![b'x'; 200]);
        for i in 0..sends {
            nats::publish(&js, "bench.dup".into(), format!("dup-{i}"), payload.clone()).await;
            let t = Instant::now();
            let duplicate = nats::publish(&js, "bench.dup".into(), format!("dup-{i}"), payload.clone()).await;
            nats_repeats.add(&round_of(&[t.elapsed()]));
            assert!(duplicate, "NATS knows the id");
        }
        // Nothing written means no WAL frame, so no commit and no fsync.
        let target =
            format!("nothing stored, no fsync: {written} bytes written by kikid over {sends} repeats");
        self.rows.push(Row::of("send-dup", &new));
        self.rows.push(Row::of("send-dup", &repeats).with_target(&target, Some(written == 0)));
        self.rows.push(Row::of("send-dup", &nats_repeats));
        home.stop();
    }
}

/// A few seconds for the disk and the servers to settle between phases.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(300)).await;
}

fn round_of(times: &[Duration]) -> Round {
    let mut round = Round {
        latencies: super::report::histogram(),
        ops: times.len() as u64,
        seconds: times.iter().sum::<Duration>().as_secs_f64(),
        server_cpu: Duration::ZERO,
    };
    for t in times {
        super::report::record(&mut round.latencies, *t);
    }
    round
}

/// The progress line: which scenario, and where it is.
pub fn progress(scenario: &str, what: &str) {
    eprint!("\r\x1b[2K{scenario}: {what}");
    let _ = std::io::stderr().flush();
}
