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
        let mut measured = Measured::new("kiki", "send answered → wait returns");
        measured.add(&round_of(&wakes));
        let row = Row::of("wait-wake", &measured);
        let met = row.p50_us <= 150.0;
        self.rows.push(row.with_target("p50 ≤ 150 µs", Some(met)));
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
        let mut measured = Measured::new("kiki", "post answered → six turns ended");
        measured.add(&round_of(&wakes));
        let row = Row::of("room-post", &measured);
        let met = row.p50_us <= 5_000.0;
        self.rows.push(row.with_target("p50 ≤ 5 ms", Some(met)));
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

    /// Pages of 100 ended turns from a thread of `TURNS` (1,000,000), seeded into the stopped
    /// home's SQLite file in one statement (a million turns through the API would measure
    /// agents, not reads): walking forward from the first page by cursor, and the newest page.
    async fn read_page(&mut self) {
        let turns = kiki_tests::measure::setting("TURNS", 1_000_000) as i64;
        let mut home = KikiHome::start(&self.dir.join("read-page"), 0, 1).await;
        let thread = home.idle[0].clone();
        progress("read-page", &format!("seeding {turns} turns"));
        kiki_json(&home.home, &["down"]);
        let db = rusqlite::Connection::open(home.home.join("kiki.db")).expect("the store");
        db.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?2)
             INSERT INTO turns (id, thread_id, seq, status, input, output, started_at, ended_at)
             SELECT printf('tu_seed%08d', i), ?1, i, 'completed',
                    printf('input %d: about as long as a short request to an agent, a line or two.', i),
                    printf('output %d: about as long as a short answer from an agent, a line or two.', i),
                    1700000000000 + 2 * i, 1700000000001 + 2 * i FROM n",
            rusqlite::params![thread, turns],
        )
        .expect("seed turns");
        db.execute("UPDATE threads SET turn_count = ?2 WHERE id = ?1", rusqlite::params![thread, turns])
            .expect("turn count");
        drop(db);
        home.up().await;
        let mut threads = home.client.threads();
        let (mut forward, mut newest) =
            (Measured::new("kiki", "pages walking forward"), Measured::new("kiki", "the newest page"));
        let mut cursor = String::new();
        for i in 0..(self.rounds * 200) {
            progress("read-page", &format!("page {}/{}", i + 1, self.rounds * 200));
            let request = pb::ThreadReadRequest {
                target: Some(kiki_tests::local(&thread)),
                limit: Some(100),
                cursor: cursor.clone(),
                ..Default::default()
            };
            let t = Instant::now();
            let page = threads.thread_read(request).await.expect("a page").into_inner();
            forward.add(&round_of(&[t.elapsed()]));
            assert_eq!(page.turns.len(), 100, "a full page");
            cursor = page.next_cursor.unwrap_or_default();
            let request = pb::ThreadReadRequest {
                target: Some(kiki_tests::local(&thread)),
                last: Some(100),
                ..Default::default()
            };
            let t = Instant::now();
            let page = threads.thread_read(request).await.expect("the newest").into_inner();
            newest.add(&round_of(&[t.elapsed()]));
            assert_eq!(page.turns.last().map(|t| t.seq), Some(turns as u64));
        }
        for measured in [&forward, &newest] {
            let row = Row::of("read-page", measured);
            let met = row.p99_us <= 2_000.0;
            self.rows.push(row.with_target("p99 ≤ 2 ms", Some(met)));
        }
        home.stop();
    }

    /// A send over a bridge whose link is cut (a UDP relay on the path drops every datagram)
    /// for 5 s: from the heal until the target's `echo` turn for it ended.
    async fn bridge_heal(&mut self) {
        let source = KikiHome::start(&self.dir.join("bridge-heal-a"), 0, 0).await;
        let target = KikiHome::start(&self.dir.join("bridge-heal-b"), 0, 1).await;
        let listen =
            kiki_json(&target.home, &["status"])["bridge_listen"].as_str().expect("listen").to_string();
        let relay = kiki_tests::UdpRelay::start(listen.parse().expect("an address")).await;
        source.bridge_via(&target, &relay.addr.to_string(), "b", "send,wake");
        let thread = target.idle[0].clone();
        let newest = || {
            let mut threads = target.client.threads();
            let request = pb::ThreadReadRequest {
                target: Some(kiki_tests::local(&thread)),
                last: Some(1),
                ..Default::default()
            };
            async move {
                threads
                    .thread_read(request)
                    .await
                    .expect("read")
                    .into_inner()
                    .turns
                    .last()
                    .map_or(0, |t| t.seq)
            }
        };
        let mut heals = Vec::new();
        for round in 0..self.rounds.min(3) {
            progress(
                "bridge-heal",
                &format!("round {}/{}: partitioned for 5 s", round + 1, self.rounds.min(3)),
            );
            let before = newest().await;
            relay.partition(true);
            let mut threads = source.client.threads();
            let request = pb::ThreadSendRequest {
                target: Some(pb::ThreadRef {
                    host_id: "b".into(),
                    workspace_id: String::new(),
                    session_id: thread.clone(),
                }),
                content: format!("sent during partition {round}"),
                idempotency_key: format!("heal-{round}"),
                ..Default::default()
            };
            let sending = tokio::spawn(async move { threads.thread_send(request).await.map(drop) });
            tokio::time::sleep(Duration::from_secs(5)).await;
            relay.partition(false);
            let healed = Instant::now();
            progress(
                "bridge-heal",
                &format!("round {}/{}: healed, waiting for the delivery", round + 1, self.rounds.min(3)),
            );
            loop {
                if newest().await > before {
                    break;
                }
                assert!(healed.elapsed() < Duration::from_secs(120), "no delivery within 2 min of the heal");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            heals.push(healed.elapsed());
            let _ = sending.await;
        }
        let mut measured = Measured::new("kiki", "heal → delivered, turn ended");
        measured.add(&round_of(&heals));
        let row = Row::of("bridge-heal", &measured);

        let met = row.p50_us <= 31_000_000.0;
        self.rows.push(row.with_target("≤ the backoff cap (30 s) + 1 s", Some(met)));
        source.stop();
        target.stop();
    }

    /// Durable ThreadSends to busy threads of a home whose store is a database of the
    /// machine's PostgreSQL (`tests/postgres-up.sh`), in rounds alternating with `pgbench`
    /// running a single-row insert transaction of a 200-byte value against another database
    /// of the same server, from as many clients.
    async fn pg_send(&mut self, clients: usize) {
        use kiki_tests::postgres::{TestDatabase, pgbench, psql};
        let scenario = format!("pg-send-{clients}");
        progress(&scenario, "starting PostgreSQL (tests/postgres-up.sh)");
        let (floor_db, store_db) = (TestDatabase::create().await, TestDatabase::create().await);
        let dir = self.dir.join(&scenario);
        std::fs::create_dir_all(dir.join("home")).expect("home");
        let pass = dir.join("home/pg.pass");
        std::fs::write(&pass, store_db.options.password.clone().expect("password")).expect("password file");
        std::fs::set_permissions(&pass, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("chmod");
        let store = format!(
            "[store]\nurl = \"{}\"\npassword_file = \"pg.pass\"\npool_size = 16\n",
            store_db.options.url
        );
        let home = KikiHome::start_with(&dir, clients.min(16), 0, &store).await;
        let script = dir.join("insert.sql");
        std::fs::write(&script, format!("INSERT INTO floor (v) VALUES ('{}');\n", "x".repeat(200)))
            .expect("script");
        psql(
            &floor_db,
            "CREATE TABLE floor (id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v TEXT NOT NULL)",
        );
        let mut senders = Vec::new();
        for _ in 0..clients {
            senders.push(Client::connect(&home.socket()).await.expect("connect").threads());
        }
        let (mut kiki, mut floor) =
            (Measured::new("kiki", "Postgres store"), Measured::new("pgbench", "single-row insert"));
        let mut ratios = Vec::new();
        for round in 0..self.rounds {
            progress(&scenario, &format!("round {}/{}", round + 1, self.rounds));
            settle().await;
            let tps = pgbench(&floor_db, &script, clients, self.period.as_secs().max(1));
            let targets = home.busy.iter().map(|t| kiki_tests::local(t)).collect();
            let measured =
                thread_sends(&senders, targets, format!("r{round}"), self.period, || home.cpu()).await;
            ratios.push(measured.throughput() / tps);
            floor.ops += (tps * self.period.as_secs_f64()) as u64;
            floor.seconds += self.period.as_secs_f64();
            kiki.add(&measured);
        }
        kiki.server_peak_rss_kb = home.peak_rss_kb();
        let mut row = Row::of(&scenario, &kiki);
        row.ratio = Some(median(ratios));
        self.rows.push(row.with_target("kiki ÷ pgbench, reported (no target here)", None));
        self.rows.push(Row::of(&scenario, &floor));
        home.stop();
    }

    /// A home holding `MESSAGES` (1,000,000) delivered messages and `PENDING` (10,000)
    /// bridged sends not yet answered — seeded into its stopped store in two statements, the
    /// pending ones due at once — is started, killed with `kill -9`, and started again: the
    /// time from `kiki up` until it answers, and until its outbox drained into the peer.
    async fn restart_recover(&mut self) {
        let messages = kiki_tests::measure::setting("MESSAGES", 1_000_000) as i64;
        let pending = kiki_tests::measure::setting("PENDING", 10_000) as i64;
        let mut source = KikiHome::start(&self.dir.join("restart-a"), 0, 1).await;
        let target = KikiHome::start(&self.dir.join("restart-b"), 1, 0).await;
        source.bridge_to(&target, "b", "send");
        let peer = kiki_json(&target.home, &["status"])["home_id"].as_str().expect("id").to_string();
        let bridges = kiki_json(&source.home, &["bridge", "list"]);
        let bridge = bridges["bridges"]
            .as_array()
            .and_then(|all| all.iter().find(|b| b["direction"] == "outbound"))
            .and_then(|b| b["id"].as_str())
            .expect("the outbound bridge")
            .to_string();
        progress(
            "restart-recover",
            &format!("seeding {messages} messages and {pending} pending bridged sends"),
        );
        kiki_json(&source.home, &["down"]);
        let db = rusqlite::Connection::open(source.home.join("kiki.db")).expect("the store");
        db.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?2)
             INSERT INTO messages (id, target_thread, content, status, created_at, delivered_at)
             SELECT printf('msg_seed%08d', i), ?1, printf('message %d, about as long as a short note between agents.', i),
                    'delivered', 1700000000000 + i, 1700000000000 + i FROM n",
            rusqlite::params![source.idle[0], messages],
        )
        .expect("seed messages");
        let now = kiki_daemon::time::now_ms();
        db.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?4)
             INSERT INTO outbox (id, bridge_id, peer_home_id, target_session, content, key_scope, key,
                                 request_hash, status, next_attempt_at, created_at, updated_at)
             SELECT printf('msg_outbox%08d', i), ?1, ?2, ?3, printf('pending send %d', i), '', printf('seed-%d', i),
                    printf('%064d', i), 'pending', 0, ?5, ?5 FROM n",
            rusqlite::params![bridge, peer, target.busy[0], pending, now],
        )
        .expect("seed the outbox");
        drop(db);
        source.up().await;
        progress("restart-recover", "kill -9, then kiki up");
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(source.pid as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .expect("kill -9");
        tokio::time::sleep(Duration::from_millis(200)).await;
        let started = Instant::now();
        source.up().await;
        let serving = started.elapsed();
        let outbound_pending = || {
            let listed = kiki_json(&source.home, &["bridge", "list"]);
            listed["bridges"]
                .as_array()
                .and_then(|all| all.iter().find(|b| b["direction"] == "outbound"))
                .and_then(|b| b["pending"].as_u64())
                .unwrap_or(u64::MAX)
        };
        loop {
            let left = outbound_pending();
            progress("restart-recover", &format!("{left} bridged sends still pending"));
            if left == 0 {
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(600), "the outbox did not drain in 10 minutes");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let drained = started.elapsed();
        let mut up = Measured::new("kiki", "kiki up → answering");
        up.add(&round_of(&[serving]));
        let mut emptied = Measured::new("kiki", &format!("kiki up → {pending} bridged sends answered"));
        emptied.add(&round_of(&[drained]));
        let row = Row::of("restart-recover", &up);
        let met = row.p50_us <= 1_000_000.0;
        self.rows.push(row.with_target("serving within 1 s", Some(met)));
        self.rows.push(Row::of("restart-recover", &emptied));
        source.stop();
        target.stop();
    }

    /// Cross-home ThreadSends of 200-byte messages from `senders` clients of home A to busy
    /// threads of home B over a `send` bridge (each answered once B holds it: B's commit, A's
    /// record of the answer), in rounds interleaved with publishes to a NATS server whose
    /// stream lives on a second server joined to it by a leaf node (each answered once the
    /// second stored and synced it).
    async fn bridge_send(&mut self, senders: usize) {
        let scenario = format!("bridge-send-{senders}");
        let source = KikiHome::start(&self.dir.join(format!("{scenario}-a")), 0, 0).await;
        let target = KikiHome::start(&self.dir.join(format!("{scenario}-b")), senders.min(16), 0).await;
        source.bridge_to(&target, "b", "send");
        let nats = self.nats();
        let leaf_port = nats::free_tcp_port();
        let hub = nats::Server::start_hub(&nats, &self.dir.join(format!("{scenario}-nats-a")), leaf_port);
        let store = nats::Server::start(
            &nats,
            &self.dir.join(format!("{scenario}-nats-b")),
            "store",
            &format!("leafnodes {{ remotes: [ {{ url: \"nats-leaf://127.0.0.1:{leaf_port}\" }} ] }}\n"),
        );
        nats::file_stream(&nats::connect(&store.url).await, "BRIDGE", vec!["bridge.>".into()]).await;
        let mut contexts = Vec::new();
        let mut kiki_clients = Vec::new();
        for _ in 0..senders {
            contexts.push(nats::connect(&hub.url).await);
            kiki_clients.push(Client::connect(&source.socket()).await.expect("connect").threads());
        }
        // The leaf node has carried the stream's interest to the hub once a publish is stored.
        nats::publish(&contexts[0], "bridge.warm".into(), "warm".into(), bytes::Bytes::from_static(b"w"))
            .await;
        let cpu = || source.cpu() + target.cpu();
        let mut results =
            [Measured::new("kiki", "two homes, a bridge"), Measured::new("NATS", "two servers, a leaf node")];
        let mut ratios = Vec::new();
        for round in 0..self.rounds {
            let mut this = [None, None];
            for step in 0..2 {
                let which = (step + round) % 2;
                progress(
                    &scenario,
                    &format!(
                        "round {}/{}: {} {}",
                        round + 1,
                        self.rounds,
                        results[which].system,
                        results[which].variant
                    ),
                );
                settle().await;
                let measured = if which == 0 {
                    let targets = target
                        .busy
                        .iter()
                        .map(|t| pb::ThreadRef {
                            host_id: "b".into(),
                            workspace_id: String::new(),
                            session_id: t.clone(),
                        })
                        .collect();
                    thread_sends(&kiki_clients, targets, format!("r{round}"), self.period, cpu).await
                } else {
                    let pids = vec![hub.pid(), store.pid()];
                    nats_publishes(&contexts, "bridge", format!("r{round}"), self.period, pids).await
                };
                results[which].add(&measured);
                this[which] = Some(measured);
            }
            let [Some(k), Some(n)] = this else { unreachable!("both ran") };
            ratios.push(k.throughput() / n.throughput());
        }
        results[0].server_peak_rss_kb = source.peak_rss_kb() + target.peak_rss_kb();
        results[1].server_peak_rss_kb = peak_rss_kb_of(hub.pid()) + peak_rss_kb_of(store.pid());
        let ratio = median(ratios);
        let floors = |name: &str, variant: &str| {
            self.rows.iter().find(|r| r.scenario == name && r.variant == variant).map(|r| r.p50_us)
        };
        let mut row = Row::of(&scenario, &results[0]);
        row.ratio = Some(ratio);
        let row = if senders == 1 {
            let bound = floors("floor-fsync", "4 KiB page")
                .zip(floors("floor-rtt", "UDP"))
                .map(|(f, r)| 2.0 * f + r + 500.0);
            let target = match bound {
                Some(bound) => format!("p50 ≤ 2 fsyncs + 1 round trip + 0.5 ms = {:.2} ms", bound / 1000.0),
                None => "p50 ≤ 2 fsyncs + 1 round trip + 0.5 ms (run floor-fsync and floor-rtt first)".into(),
            };
            let met = bound.map(|b| row.p50_us <= b);
            row.with_target(&target, met)
        } else {
            row.with_target("≥ 2× the NATS pair", Some(ratio >= 2.0))
        };
        self.rows.extend([row, Row::of(&scenario, &results[1])]);
        self.plots.push((
            format!("{scenario}: latency across two homes, kiki vs two NATS servers"),
            results.into_iter().collect(),
        ));
        source.stop();
        target.stop();
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
        let mut written = 0;
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
            let answer = threads.thread_send(request).await.expect("repeat").into_inner();
            repeats.add(&round_of(&[t.elapsed()]));
            written += home.bytes_written() - before;
            assert!(answer.replayed, "a repeat is answered from its key");
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

/// A home on the release binaries with `busy` threads held by a sleeping agent and `idle`
/// `echo` threads; `delivery_wait = 0`, so a send to a busy thread answers once it is durable.
struct KikiHome {
    home: PathBuf,
    client: Client,
    pid: u32,
    busy: Vec<String>,
    idle: Vec<String>,
}

impl KikiHome {
    async fn start(dir: &Path, busy: usize, idle: usize) -> Self {
        Self::start_with(dir, busy, idle, "").await
    }

    /// [`KikiHome::start`] with more config (sections of its own: `[store]`).
    async fn start_with(dir: &Path, busy: usize, idle: usize, extra: &str) -> Self {
        let home = dir.join("home");
        std::fs::create_dir_all(&home).expect("home");
        std::fs::write(
            home.join("config.toml"),
            format!(
                "[mailbox]\ndelivery_wait = \"0s\"\n[thread_communication]\nenabled = true\n[bridge]\nlisten = \"127.0.0.1:{}\"\n\
                 [profiles.hold]\nexecutor = \"exec\"\ncommand = [\"sleep\", \"3600\"]\n{extra}",
                kiki_tests::binaries::free_udp_port()
            ),
        )
        .expect("config");
        let (client, pid) = serve(&home).await;
        let create = |profile: &str, prompt: Option<&str>| {
            let mut args = vec!["thread", "create", "--profile", profile];
            if let Some(prompt) = prompt {
                args.extend(["--prompt", prompt]);
            }
            kiki_json(&home, &args)["id"].as_str().expect("id").to_string()
        };
        let busy = (0..busy).map(|_| create("hold", Some("hold"))).collect();
        let idle = (0..idle).map(|_| create("echo", None)).collect();
        // The held agents have started: sends to their threads queue behind their turns.
        tokio::time::sleep(Duration::from_millis(300)).await;
        Self { home, client, pid, busy, idle }
    }

    /// A bridge from this home to `target` with `permissions`, named `alias` here.
    fn bridge_to(&self, target: &KikiHome, alias: &str, permissions: &str) {
        let status = kiki_json(&target.home, &["status"]);
        self.bridge_via(target, status["bridge_listen"].as_str().expect("listen"), alias, permissions);
    }

    /// [`KikiHome::bridge_to`] reaching `target` at `address` (a relay on the path).
    fn bridge_via(&self, target: &KikiHome, address: &str, alias: &str, permissions: &str) {
        let status = kiki_json(&target.home, &["status"]);
        let id = status["home_id"].as_str().expect("id");
        let requested = kiki_json(
            &self.home,
            &["bridge", "request", address, "--want", permissions, "--expect", id, "--name", alias],
        );
        let request = requested["request_id"].as_str().expect("request id");
        kiki_json(&target.home, &["bridge", "approve", request, "--allow", permissions]);
    }

    fn socket(&self) -> PathBuf {
        self.home.join("kikid.sock")
    }

    fn cpu(&self) -> Duration {
        process_cpu_time(self.pid)
    }

    fn peak_rss_kb(&self) -> u64 {
        peak_rss_kb_of(self.pid)
    }

    fn rss_kb(&self) -> u64 {
        kiki_tests::measure::rss_kb(self.pid)
    }

    /// ThreadWaits parked on `woken` (from their events so far), then `request` sent: from
    /// its answer until every wait returned (each thread's turn ended).
    async fn wake_round(&self, request: pb::ThreadSendRequest, woken: &[String]) -> Duration {
        let targets: Vec<pb::ThreadRef> = woken.iter().map(|t| kiki_tests::local(t)).collect();
        let now =
            pb::ThreadWaitRequest { targets: targets.clone(), timeout_ms: Some(0), ..Default::default() };
        let results = self.client.threads().thread_wait(now).await.expect("cursors").into_inner().results;
        let mut waits = Vec::new();
        for (thread, result) in woken.iter().zip(results) {
            let mut threads = self.client.threads();
            let request = pb::ThreadWaitRequest {
                targets: vec![kiki_tests::local(thread)],
                timeout_ms: Some(10_000),
                cursors: [(thread.clone(), result.cursor)].into_iter().collect(),
            };
            waits.push(tokio::spawn(async move {
                let answer = threads.thread_wait(request).await.expect("wait").into_inner();
                assert!(!answer.timed_out, "a woken thread's turn ended within 10 s");
                Instant::now()
            }));
        }
        tokio::time::sleep(Duration::from_millis(3)).await;
        self.client.threads().thread_send(request).await.expect("send");
        let answered = Instant::now();
        let mut last = Duration::ZERO;
        for wait in waits {
            last = last.max(wait.await.expect("a wait").saturating_duration_since(answered));
        }
        last
    }

    /// Bytes kikid has caused to be written to storage.
    fn bytes_written(&self) -> u64 {
        let io = std::fs::read_to_string(format!("/proc/{}/io", self.pid)).unwrap_or_default();
        io.lines()
            .find_map(|l| l.strip_prefix("write_bytes:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    }

    /// Starts the (stopped) home again and reconnects.
    async fn up(&mut self) {
        (self.client, self.pid) = serve(&self.home).await;
    }

    fn stop(self) {
        kiki_json(&self.home, &["down"]);
    }
}

/// `kiki up` on `home`: a connection to it, and kikid's pid.
async fn serve(home: &Path) -> (Client, u32) {
    kiki_json(home, &["up"]);
    let client = Client::connect(&home.join("kikid.sock")).await.expect("connect");
    let status = client.home().status(pb::StatusRequest::default()).await.expect("status").into_inner();
    (client, status.pid)
}
