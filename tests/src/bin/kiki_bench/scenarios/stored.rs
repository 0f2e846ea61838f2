//! Scenarios about what the store holds: pages of a thread of a million turns, a restart
//! after kill -9 with a million messages, and the Postgres store beside pgbench.

use super::*;

impl Bench {
    /// Pages of 100 ended turns from a thread of `TURNS` (1,000,000), seeded into the stopped
    /// home's SQLite file in one statement (a million turns through the API would measure
    /// agents, not reads): walking forward from the first page by cursor, and the newest page.
    pub(super) async fn read_page(&mut self) {
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

    /// A home holding `MESSAGES` (1,000,000) delivered messages and `PENDING` (10,000)
    /// bridged sends not yet answered — seeded into its stopped store in two statements, the
    /// pending ones due at once — is started, killed with `kill -9`, and started again: the
    /// time from `kiki up` until it answers, and until its outbox drained into the peer.
    pub(super) async fn restart_recover(&mut self) {
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

    /// Durable ThreadSends to busy threads of a home whose store is a database of the
    /// machine's PostgreSQL (`tests/postgres-up.sh`), in rounds alternating with `pgbench`
    /// running a single-row insert transaction of a 200-byte value against another database
    /// of the same server, from as many clients.
    pub(super) async fn pg_send(&mut self, clients: usize) {
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
}
