//! A team home: several kikid processes (replicas) serving one home from one Postgres
//! database, through the real binaries on the tests' real server.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use kiki_proto as pb;

use kiki_tests::binaries::{Down, free_udp_port, kiki, kiki_json, kiki_with_env, kill_9, new_home, pid_of};
use kiki_tests::postgres::{TestCluster, TestDatabase};

/// A replica's config: the team's database at `url` (its password, if any, in an
/// owner-only file), a short lease, a fixed bridge port, peer messages taken, and a profile
/// whose agent leaves its token in its home and holds its turn until it is stopped.
fn replica_at(home: &Path, url: &str, password: Option<&str>) {
    std::fs::create_dir_all(home).expect("home");
    let mut config = format!("[store]\nurl = \"{url}\"\nlease = \"2s\"\n");
    if let Some(password) = password {
        let file = home.join("pg.pass");
        std::fs::write(&file, password).expect("password file");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        config.push_str("password_file = \"pg.pass\"\n");
    }
    config.push_str(&format!(
        "\n[bridge]\nlisten = \"127.0.0.1:{}\"\n[mailbox]\ndelivery_wait = \"200ms\"\n\
         [thread_communication]\nenabled = true\n\n\
         [profiles.hold]\nexecutor = \"exec\"\n\
         command = [\"sh\", \"-c\", \"echo $KIKI_TOKEN > $KIKI_HOME/token; cat > /dev/null; exec sleep 60\"]\n",
        free_udp_port()
    ));
    std::fs::write(home.join("config.toml"), config).expect("config");
}

/// [`replica_at`] on a test database.
fn replica_of(home: &Path, database: &TestDatabase) {
    replica_at(home, &database.options.url, database.options.password.as_deref());
}

/// Gives the replica in `home` the identity of the one in `first` (every replica of a home
/// has the same key), as an operator copies the key or mounts it as a secret.
fn same_identity(first: &Path, home: &Path) {
    let key = home.join("identity.key");
    std::fs::copy(first.join("identity.key"), &key).expect("copy the key");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).expect("chmod");
}

/// Two replicas of one home on `database`, both up, the second with the first's key.
fn two_replicas(database: &TestDatabase, a: &Path, b: &Path) {
    replica_of(a, database);
    replica_of(b, database);
    both_up(a, b);
}

/// Starts the replica configured in `a`, then the one in `b` with `a`'s key.
fn both_up(a: &Path, b: &Path) {
    kiki_json(a, &["up"]);
    same_identity(a, b);
    kiki_json(b, &["up"]);
}

/// A replica started with another identity than the home's is refused, before it serves
/// anything, saying which key is whose, and the key it made for itself is gone again.
#[test]
fn a_replica_with_another_identity_is_refused() {
    let database = kiki_tests::postgres::block_on(TestDatabase::create());
    let ((_a_dir, a), (_b_dir, b)) = (new_home(), new_home());
    let (_down_a, _down_b) = (Down(&a), Down(&b));
    replica_of(&a, &database);
    replica_of(&b, &database);
    kiki_json(&a, &["up"]);
    let home_id = kiki_json(&a, &["status"])["home_id"].as_str().expect("home id").to_string();
    let out = kiki(&b, &["up"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(6), "{said}");
    assert!(said.contains(&format!("belongs to home {home_id}")), "{said}");
    assert!(said.contains("same identity.key"), "{said}");
    assert!(!b.join("identity.key").exists(), "the key made for the refused start is removed");
    assert_eq!(kiki_json(&a, &["status"])["replicas"].as_array().map(Vec::len), Some(1));

    // With the home's key it serves the same home.
    same_identity(&a, &b);
    kiki_json(&b, &["up"]);
    assert_eq!(kiki_json(&b, &["status"])["home_id"], home_id);
}

/// The thread `id` as ThreadList shows it through `home`.
fn listed(home: &Path, id: &str) -> serde_json::Value {
    let list = kiki_json(home, &["thread", "list"]);
    list["threads"].as_array().expect("threads").iter().find(|t| t["id"] == id).cloned().expect("listed")
}

/// A turn runs on the replica that claimed it while that replica's heartbeat is fresh: the
/// other replica leaves it alone however long it runs, and knows the turn's token (an
/// agent's call reaching it acts as that turn). Once that replica is killed, the other
/// takes its turn over within the lease (failed as interrupted, never re-run, its agent
/// stopped; its token no longer works) and the thread goes on there.
#[test]
fn a_killed_replicas_turn_is_taken_over_after_its_lease_and_never_before() {
    let database = kiki_tests::postgres::block_on(TestDatabase::create());
    let ((_a_dir, a), (_b_dir, b)) = (new_home(), new_home());
    let (_down_a, _down_b) = (Down(&a), Down(&b));
    two_replicas(&database, &a, &b);
    let status = kiki_json(&b, &["status"]);
    let replicas = status["replicas"].as_array().expect("replicas");
    assert_eq!(replicas.len(), 2, "both replicas are on record: {status}");
    // One works the outbox: a, the longest running.
    let working: Vec<&serde_json::Value> = replicas.iter().filter(|r| r["works_outbox"] == true).collect();
    assert_eq!(working.len(), 1, "{status}");
    assert_eq!(working[0]["pid"], kiki_json(&a, &["status"])["pid"], "{status}");

    let created = kiki_json(&a, &["thread", "create", "--profile", "hold", "--prompt", "hold on"]);
    let id = created["id"].as_str().expect("id").to_string();
    // Longer than the lease, with both replicas beating: the turn stays a's.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(listed(&b, &id)["state"], "running", "b leaves a live replica's turn alone");
    let ended = kiki_json(&b, &["thread", "read", &id, "--limit", "10"]);
    assert_eq!(ended["turns"].as_array().map(Vec::len), Some(0), "{ended}");
    // The agent's token, made by a, is known at b: an agent's `kiki down` is refused there
    // as not the owner's, not as an unknown token.
    let token = std::fs::read_to_string(a.join("token")).expect("the agent's token");
    let as_agent = |home: &Path| {
        let out = kiki_with_env(home, &["--json", "down"], &[("KIKI_TOKEN", token.trim())]);
        let said: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        said["error"]["code"].as_str().unwrap_or_default().to_string()
    };
    assert_eq!(as_agent(&b), "permission_denied", "b knows a's turn by its token");

    kill_9(&pid_of(&a));
    let killed = Instant::now();
    let page = loop {
        let page = kiki_json(&b, &["thread", "read", &id, "--limit", "10"]);
        if page["turns"].as_array().is_some_and(|turns| !turns.is_empty()) {
            break page;
        }
        assert!(killed.elapsed() < Duration::from_secs(10), "never taken over: {page}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let took = killed.elapsed();
    // Within the lease, plus a heartbeat's period for b to look, plus a second.
    assert!(took < Duration::from_millis(2_000 + 667 + 1_000), "taken over after {took:?}");
    let turn = &page["turns"][0];
    assert_eq!(turn["status"], "failed", "{turn}");
    assert!(turn["error"].as_str().unwrap_or_default().contains("not re-run"), "{turn}");
    assert_eq!(listed(&b, &id)["state"], "idle");
    assert_eq!(as_agent(&b), "unauthenticated", "the token ended with its turn");
    // And b works the outbox now.
    let status = kiki_json(&b, &["status"]);
    let this = status["replicas"].as_array().expect("replicas").iter().find(|r| r["this"] == true).cloned();
    assert_eq!(this.expect("b itself")["works_outbox"], true, "{status}");

    // The thread goes on, on the replica that is left.
    kiki_json(&b, &["thread", "say", &id, "again"]);
    let started = Instant::now();
    while listed(&b, &id)["state"] != "running" {
        assert!(started.elapsed() < Duration::from_secs(10), "b never ran the next turn");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// 64 senders, half through each replica, every message sent through both with one key:
/// each is taken by exactly one turn, whichever replica claimed it, and the thread's turns
/// never overlap.
#[tokio::test]
async fn sends_through_two_replicas_run_each_message_once_one_turn_at_a_time() {
    let database = TestDatabase::create().await;
    let ((_a_dir, a), (_b_dir, b)) = (new_home(), new_home());
    let (_down_a, _down_b) = (Down(&a), Down(&b));
    two_replicas(&database, &a, &b);
    let created = kiki_json(&a, &["thread", "create", "--title", "shared"]);
    let id = created["id"].as_str().expect("id").to_string();

    const SENDERS: usize = 64;
    let mut sends = Vec::new();
    for i in 0..SENDERS {
        // Through one replica, and again (same key) through the other, at once.
        for home in [&a, &b] {
            let (socket, id) = (home.join("kikid.sock"), id.clone());
            sends.push(tokio::spawn(async move {
                let mut threads = kiki_client::Client::connect(&socket).await.expect("connect").threads();
                let request = pb::ThreadSendRequest {
                    target: Some(kiki_tests::local(&id)),
                    content: format!("message {i:02}"),
                    idempotency_key: format!("k{i}"),
                    ..Default::default()
                };
                threads.thread_send(request).await.expect("send").into_inner().message_id
            }));
        }
    }
    let mut ids = Vec::new();
    for send in sends {
        ids.push(send.await.expect("sender"));
    }
    for pair in ids.chunks(2) {
        assert_eq!(pair[0], pair[1], "one key, one message, whichever replica was asked");
    }

    // Every message ends up in exactly one turn.
    let started = Instant::now();
    let turns = loop {
        let page = kiki_json(&b, &["thread", "read", &id, "--limit", "100"]);
        let turns = page["turns"].as_array().cloned().unwrap_or_default();
        let taken = turns
            .iter()
            // The messages' own lines, not the headers that name them (`[kiki message …]`).
            .map(|t| {
                t["input"].as_str().unwrap_or_default().lines().filter(|l| l.starts_with("message ")).count()
            })
            .sum::<usize>();
        if taken >= SENDERS && listed(&b, &id)["state"] == "idle" {
            break turns;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "not all taken: {page}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let inputs: String = turns.iter().filter_map(|t| t["input"].as_str()).collect::<Vec<_>>().join("\n");
    for i in 0..SENDERS {
        let once = inputs.lines().filter(|l| *l == format!("message {i:02}")).count();
        assert_eq!(once, 1, "message {i:02} once: {inputs}");
    }
    // One turn at a time: each started after the one before it ended.
    for pair in turns.windows(2) {
        let (before, after) = (&pair[0], &pair[1]);
        assert!(
            before["ended_at"].as_str() <= after["started_at"].as_str(),
            "turns overlap: {before} / {after}"
        );
    }
}

/// The messages `home`'s thread `id` took into its turns, by their content's first word
/// (an `m…` each): panics on one taken twice.
fn taken_once(home: &Path, id: &str) -> Vec<String> {
    let page = kiki_json(home, &["thread", "read", id, "--limit", "100"]);
    let mut taken: Vec<String> = page["turns"]
        .as_array()
        .expect("turns")
        .iter()
        .flat_map(|t| t["input"].as_str().unwrap_or_default().lines().map(str::to_string).collect::<Vec<_>>())
        .filter(|line| line.starts_with('m'))
        .collect();
    taken.sort();
    let all = taken.len();
    taken.dedup();
    assert_eq!(all, taken.len(), "no message twice: {taken:?}");
    taken
}

/// A peer's bridge to a team home lists both replicas' addresses. The request, filed through
/// the first, is approved through the second, and access turned off and on through the
/// second holds at once at the first, where the peer's calls go. Then the replica the peer's
/// connection goes to is killed mid-stream: the peer's sends go on through the other, and
/// every message is taken by a turn exactly once.
#[test]
fn a_peer_sends_through_whichever_replica_answers_and_each_message_arrives_once() {
    let database = kiki_tests::postgres::block_on(TestDatabase::create());
    let ((_a_dir, a), (_b_dir, b), (_p_dir, p)) = (new_home(), new_home(), new_home());
    let (_down_a, _down_b, _down_p) = (Down(&a), Down(&b), Down(&p));
    two_replicas(&database, &a, &b);
    std::fs::create_dir_all(&p).expect("peer home");
    std::fs::write(p.join("config.toml"), format!("[bridge]\nlisten = \"127.0.0.1:{}\"\n", free_udp_port()))
        .expect("peer config");
    kiki_json(&p, &["up"]);
    let (a_status, b_status) = (kiki_json(&a, &["status"]), kiki_json(&b, &["status"]));
    let home_id = a_status["home_id"].as_str().expect("home id").to_string();
    let addresses = format!(
        "{},{}",
        a_status["bridge_listen"].as_str().expect("a"),
        b_status["bridge_listen"].as_str().expect("b")
    );
    let requested = kiki_json(
        &p,
        &["bridge", "request", &addresses, "--want", "send,wake", "--expect", &home_id, "--name", "team"],
    );
    let request = requested["request_id"].as_str().expect("request id").to_string();
    let pending = kiki_json(&b, &["bridge", "pending"]);
    assert!(pending.to_string().contains(&request), "a request filed through a is pending at b: {pending}");
    kiki_json(&b, &["bridge", "approve", &request, "--allow", "send,wake"]);
    let target =
        kiki_json(&a, &["thread", "create", "--title", "inbox"])["id"].as_str().expect("id").to_string();
    let send = |key: &str| {
        kiki_json(&p, &["thread", "send", &format!("team/{target}"), "--key", key, "--content", key])
    };
    assert_eq!(send("m00")["status"], "delivered", "approved through b, served by a");

    let peer_id = kiki_json(&p, &["status"])["home_id"].as_str().expect("peer id").to_string();
    kiki_json(&b, &["bridge", "disable", &peer_id]);
    let held = send("m01");
    assert_eq!(held["status"], "pending", "turned off through b, refused by a at once: {held}");
    kiki_json(&b, &["bridge", "enable", &peer_id]);
    let started = Instant::now();
    while taken_once(&b, &target).len() < 2 {
        assert!(started.elapsed() < Duration::from_secs(30), "the held message never came");
        std::thread::sleep(Duration::from_millis(100));
    }

    const MESSAGES: usize = 20;
    let answered = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let sender = {
        let (p, target, answered) = (p.clone(), target.clone(), answered.clone());
        std::thread::spawn(move || {
            for i in 2..MESSAGES {
                let key = format!("m{i:02}");
                kiki_json(
                    &p,
                    &["thread", "send", &format!("team/{target}"), "--key", &key, "--content", &key],
                );
                answered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        })
    };
    let started = Instant::now();
    while answered.load(std::sync::atomic::Ordering::SeqCst) < 3 {
        assert!(!sender.is_finished(), "the sender stopped early");
        assert!(started.elapsed() < Duration::from_secs(60), "three sends not answered in 60 s");
        std::thread::sleep(Duration::from_millis(5));
    }
    kill_9(&pid_of(&a));
    sender.join().expect("every send answered (durable at the peer)");
    let started = Instant::now();
    loop {
        let taken = taken_once(&b, &target);
        if taken.len() == MESSAGES {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "only {} of {MESSAGES} arrived: {taken:?}",
            taken.len()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// PostgreSQL crashes and comes back while senders go through both replicas. Meanwhile the
/// sends fail with UNAVAILABLE (naming the database once it is found down); the replicas reconnect by themselves
/// and sends go through both again; and every send that was answered — before, during or
/// after — is there: sent again with its key, it is replayed, never made anew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_restarted_under_load_loses_nothing_acknowledged() {
    let cluster =
        Arc::new(tokio::task::spawn_blocking(TestCluster::start).await.expect("the test's own server"));
    let ((_a_dir, a), (_b_dir, b)) = (new_home(), new_home());
    let (_down_a, _down_b) = (Down(&a), Down(&b));
    replica_at(&a, &cluster.url(), None);
    replica_at(&b, &cluster.url(), None);
    both_up(&a, &b);
    let thread =
        kiki_json(&a, &["thread", "create", "--title", "load"])["id"].as_str().expect("id").to_string();

    let (stop, answers) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicUsize::new(0)));
    let senders: Vec<_> = (0..8)
        .map(|i| {
            let socket = if i % 2 == 0 { a.join("kikid.sock") } else { b.join("kikid.sock") };
            tokio::spawn(send_until_stopped(i, socket, thread.clone(), stop.clone(), answers.clone()))
        })
        .collect();
    let answered_by = |n: usize| {
        let answers = answers.clone();
        async move {
            let started = Instant::now();
            while answers.load(Ordering::Acquire) < n {
                assert!(started.elapsed() < Duration::from_secs(30), "sends stopped going through");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    answered_by(50).await;
    tokio::task::spawn_blocking({
        let cluster = cluster.clone();
        move || cluster.crash()
    })
    .await
    .expect("crash");
    // Longer than a call waits for a connection (3 s), so that calls fail meanwhile.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let before_restart = answers.load(Ordering::Acquire);
    tokio::task::spawn_blocking({
        let cluster = cluster.clone();
        move || cluster.start_again()
    })
    .await
    .expect("start");
    answered_by(before_restart + 100).await;
    stop.store(true, Ordering::Release);

    let database = format!("127.0.0.1:{}", cluster.port);
    let (mut all_failed, mut named) = (0, 0);
    for sender in senders {
        let sent = sender.await.expect("sender");
        all_failed += sent.failed.len();
        named += sent.failures_naming(&database);
        sent.every_answer_replays(&thread).await;
    }
    assert!(all_failed > 0 && named > 0, "the sends met the server down: {named} of {all_failed} named it");
}

/// What one sender of the load saw through one replica's socket: the sends answered (key,
/// message id) and the calls that failed.
struct Sent {
    socket: PathBuf,
    answered: Vec<(String, String)>,
    failed: Vec<tonic::Status>,
}

/// Sender `i`: sends to `thread` through `socket` until `stop`, each with a key of its own,
/// counting what was answered in `answers` (a failed call is retried after 50 ms).
async fn send_until_stopped(
    i: usize,
    socket: PathBuf,
    thread: String,
    stop: Arc<AtomicBool>,
    answers: Arc<AtomicUsize>,
) -> Sent {
    let mut threads = kiki_client::Client::connect(&socket).await.expect("connect").threads();
    let (mut answered, mut failed) = (Vec::new(), Vec::new());
    for n in 0.. {
        if stop.load(Ordering::Acquire) {
            break;
        }
        let key = format!("s{i}-{n}");
        let request = pb::ThreadSendRequest {
            target: Some(kiki_tests::local(&thread)),
            content: key.clone(),
            idempotency_key: key.clone(),
            ..Default::default()
        };
        match threads.thread_send(request).await {
            Ok(sent) => {
                answered.push((key, sent.into_inner().message_id));
                answers.fetch_add(1, Ordering::AcqRel);
            }
            Err(e) => {
                failed.push(e);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    Sent { socket, answered, failed }
}

impl Sent {
    /// How many failed calls named the `database` (`host:port`). A call that found the
    /// server down names it; one cut off mid-statement says what broke. Either is to be
    /// retried, and says so.
    fn failures_naming(&self, database: &str) -> usize {
        let mut named = 0;
        for e in &self.failed {
            assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
            assert!(e.message().contains("is unavailable; kikid reconnects by itself: retry"), "{e:?}");
            named += usize::from(e.message().contains(database));
        }
        named
    }

    /// Every answered send, sent again with its key, is replayed: none was made anew.
    async fn every_answer_replays(self, thread: &str) {
        assert!(
            self.answered.len() > 5,
            "{} answered through {}",
            self.answered.len(),
            self.socket.display()
        );
        let mut threads = kiki_client::Client::connect(&self.socket).await.expect("connect").threads();
        for (key, message_id) in self.answered {
            let again = pb::ThreadSendRequest {
                target: Some(kiki_tests::local(thread)),
                content: key.clone(),
                idempotency_key: key.clone(),
                ..Default::default()
            };
            let replay = threads.thread_send(again).await.expect("sent again").into_inner();
            assert!(
                replay.replayed && replay.message_id == message_id,
                "{key}: {replay:?} after {message_id}"
            );
        }
    }
}
