//! The rooms' numbers, each printed next to a floor or a peer measured in the same run
//! (never asserted). Run with a release build of the binaries:
//!
//! ```sh
//! cargo build --release --workspace --bins && cargo bench -p kiki-tests --bench rooms
//! ```
//!
//! - a post by the owner mentioning six idle members starts their six turns (target p50 < 5
//!   ms from the post's answer), seen two ways: six `echo` turns ended (a parked ThreadWait
//!   returns for each; a turn ends after it started), and six agent processes running (an
//!   `exec` agent, `date +%s%N`, prints the moment it started); the floor of each is a plain
//!   ThreadSend waking one idle thread, and of the agents also the bench spawning `date`
//! - 64 concurrent posters over 16 rooms vs 64 concurrent plain ThreadSends to busy threads
//!   (target ≥ 0.8×): the posts are the owner's and mention nobody, so each wakes its room's
//!   host, which is busy, and queues one input for it, as each plain send does for its target
//! - RoomRead, a page of 50 from a room of 1,000,000 entries (target p99 < 2 ms), next to the
//!   same page from a room of 100
//!
//! Settings: `ROUNDS` (100 wake rounds of each kind), `PER` (300 requests per sender and
//! load round), `ENTRIES` (1,000,000), `READS` (2,000 of each kind).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kiki_client::Client;
use kiki_daemon::threads::cursor;
use kiki_proto as pb;
use kiki_tests::binaries::kiki_json;
use kiki_tests::local;
use kiki_tests::measure::{fsync_floor, ms, percentile, process_cpu_time, rss_kb, setting};

/// A room's members beside its host.
const MEMBERS: usize = 6;
/// Wake rounds run (of each kind) before the measured ones.
const WARMUP: usize = 5;
const SENDERS: usize = 64;
/// Busy threads the plain sends go to; rooms the posts go to (one busy host each).
const ROOMS: usize = 16;
/// Load rounds of each kind, alternating sends and posts.
const LOAD_ROUNDS: usize = 3;
const SMALL_ROOM: i64 = 100;
const PAGE: u32 = 50;

/// `[mailbox] delivery_wait = 0` answers a queued send once it is durable (as the mailbox
/// bench); `hold` keeps a thread busy; `clock`'s agent prints when it started.
const CONFIG: &str = "[mailbox]\ndelivery_wait = \"0s\"\n\
                      [profiles.hold]\nexecutor = \"exec\"\ncommand = [\"sleep\", \"600\"]\n\
                      [profiles.clock]\nexecutor = \"exec\"\ncommand = [\"date\", \"+%s%N\"]\n";

/// A started home on the release binaries.
struct Home {
    home: PathBuf,
    client: Client,
    /// kikid's pid.
    pid: u32,
}

impl Home {
    /// `kiki up` in `home` (writing `config` first, if any).
    async fn up(home: &Path, config: Option<&str>) -> Self {
        std::fs::create_dir_all(home).expect("home");
        if let Some(config) = config {
            std::fs::write(home.join("config.toml"), config).expect("config");
        }
        kiki_json(home, &["up"]);
        let client = Client::connect(&home.join("kikid.sock")).await.expect("connect");
        let status = client.home().status(pb::StatusRequest::default()).await.expect("status").into_inner();
        Self { home: home.to_path_buf(), client, pid: status.pid }
    }

    fn down(self) {
        drop(self.client);
        kiki_json(&self.home, &["down"]);
    }

    /// A new top-level thread on `profile`; `prompt` starts its first turn.
    async fn thread(&self, profile: &str, title: &str, prompt: Option<&str>) -> String {
        let request = pb::ThreadCreateRequest {
            cwd: Some(self.home.display().to_string()),
            profile: Some(profile.into()),
            prompt: prompt.map(str::to_string),
            title: Some(title.into()),
            resume_agent_session: None,
        };
        self.client.threads().thread_create(request).await.expect("thread create").into_inner().id
    }

    /// A room hosted by `host`, with `members` added.
    async fn room(&self, host: &str, members: &[String]) -> String {
        let request = pb::RoomCreateRequest { host: host.into(), name: String::new() };
        let room = self.client.rooms().room_create(request).await.expect("room create").into_inner();
        let room = room.room.expect("room").id;
        for member in members {
            let request = pb::RoomAddRequest { room: room.clone(), session_id: member.clone() };
            let added = self.client.threads().room_add(request).await.expect("room add").into_inner();
            assert!(added.added, "{member} joined {room}");
        }
        room
    }
}

/// A post by the owner (no token): `mentions` are woken, none wakes the host.
fn post(room: &str, content: String, key: String, mentions: &[String]) -> pb::ThreadSendRequest {
    pb::ThreadSendRequest {
        room: room.into(),
        content,
        idempotency_key: key,
        mentions: mentions.to_vec(),
        ..Default::default()
    }
}

fn send(target: &str, content: String, key: String) -> pb::ThreadSendRequest {
    pb::ThreadSendRequest { target: Some(local(target)), content, idempotency_key: key, ..Default::default() }
}

/// Each thread's wait cursor now (its events so far).
async fn cursors(client: &Client, threads: &[String]) -> Vec<String> {
    let request = pb::ThreadWaitRequest {
        targets: threads.iter().map(|t| local(t)).collect(),
        timeout_ms: Some(0),
        ..Default::default()
    };
    let results = client.threads().thread_wait(request).await.expect("cursors").into_inner().results;
    threads
        .iter()
        .map(|t| {
            let result = results.iter().find(|r| r.target.as_ref().is_some_and(|r| r.session_id == *t));
            result.expect("a result per target").cursor.clone()
        })
        .collect()
}

/// A ThreadWait parked on `thread` after `cursor`: when it returned (the turn ended).
fn park(client: &Client, thread: &str, cursor: String) -> tokio::task::JoinHandle<Instant> {
    let (mut threads, thread) = (client.threads(), thread.to_string());
    tokio::spawn(async move {
        let request = pb::ThreadWaitRequest {
            targets: vec![local(&thread)],
            timeout_ms: Some(10_000),
            cursors: [(thread.clone(), cursor)].into_iter().collect(),
        };
        let answer = threads.thread_wait(request).await.expect("wait").into_inner();
        let returned = Instant::now();
        assert!(!answer.timed_out, "no turn of {thread} ended within 10 s");
        returned
    })
}

/// When the agent of `thread`'s newest turn started, as it printed it (`date +%s%N`).
async fn agent_started(client: &Client, thread: &str) -> Duration {
    let request = pb::ThreadReadRequest { target: Some(local(thread)), last: Some(1), ..Default::default() };
    let read = client.threads().thread_read(request).await.expect("read").into_inner();
    let turn = read.turns.last().expect("a turn");
    assert_eq!(turn.status(), pb::TurnStatus::Completed, "{thread}'s turn: {}", turn.error);
    Duration::from_nanos(turn.output.trim().parse().expect("date +%s%N printed nanoseconds"))
}

/// p50 / p90 of the bench spawning `date +%s%N` itself until the time it prints: the floor of
/// an `exec` agent's start, with no daemon involved.
fn spawn_floor(samples: usize) -> String {
    let mut times = Vec::with_capacity(samples);
    for _ in 0..samples {
        let before = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock");
        let out = std::process::Command::new("date").arg("+%s%N").output().expect("date");
        let printed: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().expect("nanoseconds");
        times.push(Duration::from_nanos(printed).saturating_sub(before));
    }
    p50_p90(&mut times)
}

/// What a wake round times, from the send's (or post's) answer.
#[derive(Clone, Copy, PartialEq)]
enum Observe {
    /// Until the last woken thread's turn ended (its parked ThreadWait returned).
    TurnsEnded,
    /// Until the last woken thread's agent process started (the time it printed).
    AgentsRunning,
}

/// One round: waits parked on `woken`, `request` sent, then all their turns awaited.
async fn wake_round(
    client: &Client,
    request: pb::ThreadSendRequest,
    woken: &[String],
    observe: Observe,
) -> Duration {
    let parked: Vec<_> =
        woken.iter().zip(cursors(client, woken).await).map(|(t, c)| park(client, t, c)).collect();
    tokio::time::sleep(Duration::from_millis(3)).await;
    let is_post = !request.room.is_empty();
    let sent = client.threads().thread_send(request).await.expect("send").into_inner();
    let (answered, answered_at) = (Instant::now(), SystemTime::now());
    if is_post {
        assert_eq!(sent.woke.len(), woken.len(), "the post woke {:?}", sent.woke);
    }
    let mut ended = Duration::ZERO;
    for waiter in parked {
        ended = ended.max(waiter.await.expect("waiter").saturating_duration_since(answered));
    }
    if observe == Observe::TurnsEnded {
        return ended;
    }
    // An agent that started before the answer reached the bench counts as 0.
    let answered_at = answered_at.duration_since(UNIX_EPOCH).expect("clock");
    let mut running = Duration::ZERO;
    for thread in woken {
        running = running.max(agent_started(client, thread).await.saturating_sub(answered_at));
    }
    running
}

/// `SENDERS` senders on their own connections, `per` requests each, to `targets` (threads, or
/// rooms for posts): requests per second, and kikid's CPU per request.
async fn load(home: &Home, targets: &[String], posts: bool, round: usize, per: usize) -> (f64, Duration) {
    let (t, cpu) = (Instant::now(), process_cpu_time(home.pid));
    let mut tasks = Vec::new();
    for s in 0..SENDERS {
        let (socket, target) = (home.home.join("kikid.sock"), targets[s % targets.len()].clone());
        tasks.push(tokio::spawn(async move {
            let mut threads = Client::connect(&socket).await.expect("connect").threads();
            for i in 0..per {
                let key = format!("load-{round}-{s}-{i}");
                let request = if posts {
                    post(&target, format!("post {key}"), key, &[])
                } else {
                    send(&target, format!("send {key}"), key)
                };
                let answer = threads.thread_send(request).await.expect("send").into_inner();
                if posts && i == 0 {
                    assert_eq!(answer.woke.len(), 1, "a post mentioning nobody wakes the host");
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("sender");
    }
    let n = (SENDERS * per) as f64;
    (n / t.elapsed().as_secs_f64(), (process_cpu_time(home.pid) - cpu).div_f64(n))
}

/// Seeds `n` entries of `room` straight into a stopped home's SQLite file, in one statement
/// (a million posts through the API would measure fsyncs, not RoomRead): odd ones by the
/// owner mentioning the host, even ones by the host, ~100 characters each.
fn seed(db: &Path, room: &str, host: &str, n: i64) {
    let conn = rusqlite::Connection::open(db).expect("open db");
    conn.execute_batch("PRAGMA synchronous = OFF; PRAGMA cache_size = -262144;").expect("pragmas");
    conn.execute(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?3)
         INSERT INTO room_entries (room_id, seq, id, author_host, author, content, mentions, woke,
                                   key_scope, key, request_hash, at)
         SELECT ?1, i, printf('msg_%s%012d', substr(?1, -14), i), '', CASE WHEN i % 2 = 0 THEN ?2 ELSE '' END,
                printf('entry %d of the bench room: about as long as a short chat message, mentioning the host.', i),
                CASE WHEN i % 2 = 1 THEN ?2 ELSE '' END, CASE WHEN i % 2 = 1 THEN ?2 ELSE '' END,
                CASE WHEN i % 2 = 0 THEN ?2 ELSE '' END, printf('key-%012d', i), hex(randomblob(32)),
                1700000000000 + i * 1000
         FROM n",
        rusqlite::params![room, host, n],
    )
    .expect("seed entries");
}

/// A RoomRead page of `PAGE` after entry `after` (0: from the first): how long it took.
async fn read_page(client: &Client, room: &str, after: i64) -> Duration {
    let after_id =
        if after == 0 { String::new() } else { cursor::encode("room", &[room, &after.to_string()]) };
    let request = pb::RoomReadRequest { room: room.into(), limit: Some(PAGE), after_id };
    let t = Instant::now();
    let page = client.threads().room_read(request).await.expect("room read").into_inner();
    let took = t.elapsed();
    assert_eq!(page.entries.len(), PAGE as usize, "a full page after {after}");
    assert_eq!(page.entries[0].seq, after as u64 + 1);
    took
}

/// xorshift64: random cursors without a dependency.
fn next(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

fn p50_p90(samples: &mut [Duration]) -> String {
    samples.sort();
    format!("{} / {}", ms(percentile(samples, 0.5)), ms(percentile(samples, 0.9)))
}

fn p50_p99(samples: &mut [Duration]) -> String {
    samples.sort();
    format!("{} / {}", ms(percentile(samples, 0.5)), ms(percentile(samples, 0.99)))
}

#[tokio::main]
async fn main() {
    let rounds = setting("ROUNDS", 100) as usize;
    let per = setting("PER", 300) as usize;
    let entries = setting("ENTRIES", 1_000_000) as i64;
    let reads = setting("READS", 2_000) as usize;
    let dir = tempfile::tempdir().expect("temp dir");
    let floor = fsync_floor(dir.path());
    let spawn_floor = spawn_floor(rounds);
    let home = Home::up(&dir.path().join("home"), Some(CONFIG)).await;
    let wakes = wakes(&home, rounds).await;
    let load = posts_against_sends(&home, per).await;
    home.down();
    let reads = room_reads(&dir.path().join("reads"), entries, reads).await;

    println!("kiki rooms benchmark");
    println!("  fsync floor (4 KiB write + fsync), p50 {}", ms(floor));
    wakes.print(rounds, spawn_floor);
    load.print(per);
    reads.print();
}

/// Prints `what`, its value right-aligned in `width`, and a note.
fn line(width: usize, what: &str, value: String, note: &str) {
    println!("{}", format!("    {what:<48} {value:>width$}   {note}").trim_end());
}

/// Wake rounds: how long from a send's (or post's) answer, each round.
struct Wakes {
    echo_posts: Vec<Duration>,
    echo_sends: Vec<Duration>,
    clock_posts: Vec<Duration>,
    clock_sends: Vec<Duration>,
}

/// Six idle members woken by one post. Rooms of echo members and of clock members (an
/// echo host, never woken); a lone echo and a lone clock thread for the plain-send floor.
async fn wakes(home: &Home, rounds: usize) -> Wakes {
    let host = home.thread("echo", "host", None).await;
    let mut echoes = Vec::new();
    let mut clocks = Vec::new();
    for i in 0..MEMBERS {
        echoes.push(home.thread("echo", &format!("echo {i}"), None).await);
        clocks.push(home.thread("clock", &format!("clock {i}"), None).await);
    }
    let echo_room = home.room(&host, &echoes).await;
    let clock_room = home.room(&host, &clocks).await;
    let lone_echo = vec![home.thread("echo", "lone echo", None).await];
    let lone_clock = vec![home.thread("clock", "lone clock", None).await];
    let mut wakes = Wakes {
        echo_posts: Vec::new(),
        echo_sends: Vec::new(),
        clock_posts: Vec::new(),
        clock_sends: Vec::new(),
    };
    let c = &home.client;
    for i in 0..WARMUP + rounds {
        let key = |kind: &str| format!("wake-{kind}-{i}");
        let echo_post = post(&echo_room, format!("round {i}"), key("echo-post"), &echoes);
        let echo_post = wake_round(c, echo_post, &echoes, Observe::TurnsEnded).await;
        let echo_send = send(&lone_echo[0], format!("round {i}"), key("echo-send"));
        let echo_send = wake_round(c, echo_send, &lone_echo, Observe::TurnsEnded).await;
        let clock_post = post(&clock_room, format!("round {i}"), key("clock-post"), &clocks);
        let clock_post = wake_round(c, clock_post, &clocks, Observe::AgentsRunning).await;
        let clock_send = send(&lone_clock[0], format!("round {i}"), key("clock-send"));
        let clock_send = wake_round(c, clock_send, &lone_clock, Observe::AgentsRunning).await;
        if i >= WARMUP {
            wakes.echo_posts.push(echo_post);
            wakes.echo_sends.push(echo_send);
            wakes.clock_posts.push(clock_post);
            wakes.clock_sends.push(clock_send);
        }
    }
    wakes
}

impl Wakes {
    fn print(mut self, rounds: usize, spawn_floor: String) {
        let line = |what: &str, value: String, note: &str| line(21, what, value, note);
        println!("  a post by the owner mentioning {MEMBERS} idle members, {rounds} rounds, p50 / p90:");
        let target = "(target p50 < 5 ms)";
        line(
            &format!("answer -> all {MEMBERS} agents running (exec: date)"),
            p50_p90(&mut self.clock_posts),
            target,
        );
        line("floor: plain send -> 1 agent running", p50_p90(&mut self.clock_sends), "");
        line("floor: the bench spawning date itself", spawn_floor, "");
        line(
            &format!("answer -> all {MEMBERS} echo turns ended (after start)"),
            p50_p90(&mut self.echo_posts),
            target,
        );
        line("floor: plain send -> 1 echo turn ended", p50_p90(&mut self.echo_sends), "");
    }
}

/// Load rounds: requests per second and kikid's CPU per request, each round.
struct Load {
    send_rates: Vec<f64>,
    post_rates: Vec<f64>,
    send_cpu: Vec<Duration>,
    post_cpu: Vec<Duration>,
}

/// 64 posters over 16 rooms vs 64 plain senders to 16 busy threads, alternating. Each
/// room's host is one of the busy threads, and a post by the owner that mentions nobody
/// wakes the host: like a plain send, each post queues one input for a busy thread.
async fn posts_against_sends(home: &Home, per: usize) -> Load {
    let mut busy = Vec::new();
    for i in 0..ROOMS {
        busy.push(home.thread("hold", &format!("busy {i}"), Some("hold")).await);
    }
    let mut rooms = Vec::new();
    for host in &busy {
        rooms.push(home.room(host, &[]).await);
    }
    tokio::time::sleep(Duration::from_millis(300)).await; // their agents started
    let mut measured =
        Load { send_rates: Vec::new(), post_rates: Vec::new(), send_cpu: Vec::new(), post_cpu: Vec::new() };
    for round in 0..LOAD_ROUNDS {
        let (rate, cpu) = load(home, &busy, false, round, per).await;
        measured.send_rates.push(rate);
        measured.send_cpu.push(cpu);
        let (rate, cpu) = load(home, &rooms, true, round, per).await;
        measured.post_rates.push(rate);
        measured.post_cpu.push(cpu);
    }
    measured
}

impl Load {
    fn print(&self, per: usize) {
        let sends = self.send_rates.iter().sum::<f64>() / self.send_rates.len() as f64;
        let posts = self.post_rates.iter().sum::<f64>() / self.post_rates.len() as f64;
        let rates = |rates: &[f64]| rates.iter().map(|r| format!("{r:.0}")).collect::<Vec<_>>().join(", ");
        let cpu = |cpu: &[Duration]| {
            cpu.iter().map(|c| format!("{:.0}", c.as_secs_f64() * 1e6)).collect::<Vec<_>>().join(", ")
        };
        let line = |what: &str, value: String, note: &str| line(10, what, value, note);
        println!(
            "  {SENDERS} concurrent clients on their own connections, {per} requests each, {LOAD_ROUNDS} rounds of each, alternating;"
        );
        println!("  each request queues one input for a busy thread (the posts': for the room's busy host):");
        line(
            &format!("plain ThreadSends to {ROOMS} busy threads, per s"),
            format!("{sends:.0}"),
            &format!("(rounds {})", rates(&self.send_rates)),
        );
        line(
            &format!("owner posts to {ROOMS} rooms mentioning nobody, per s"),
            format!("{posts:.0}"),
            &format!("(rounds {})", rates(&self.post_rates)),
        );
        line("ratio posts / plain sends", format!("{:.2} x", posts / sends), "(target >= 0.8x)");
        line("kikid CPU per send, µs", cpu(&self.send_cpu), "");
        line("kikid CPU per post, µs", cpu(&self.post_cpu), "");
    }
}

/// RoomRead pages: how long each took, and what the seeded store came to.
struct Reads {
    entries: i64,
    reads: usize,
    seeding: Duration,
    db_bytes: u64,
    rss_kb: u64,
    random: Vec<Duration>,
    tail: Vec<Duration>,
    first: Vec<Duration>,
    floor: Vec<Duration>,
}

/// RoomRead on a room of a million entries, in a home of its own at `home_path`.
async fn room_reads(home_path: &Path, entries: i64, reads: usize) -> Reads {
    let reads_home = Home::up(home_path, None).await;
    let host = reads_home.thread("echo", "host", None).await;
    let big = reads_home.room(&host, &[]).await;
    let small = reads_home.room(&host, &[]).await;
    reads_home.down();
    let t = Instant::now();
    let db = home_path.join("kiki.db");
    seed(&db, &big, &host, entries);
    seed(&db, &small, &host, SMALL_ROOM);
    let seeding = t.elapsed();
    let db_bytes = std::fs::metadata(&db).map(|m| m.len()).unwrap_or(0);
    let reads_home = Home::up(home_path, None).await;
    let c = &reads_home.client;
    let (mut random, mut tail, mut first, mut floor) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut state = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..reads {
        let after = (next(&mut state) % (entries - i64::from(PAGE)) as u64) as i64;
        random.push(read_page(c, &big, after).await);
        tail.push(read_page(c, &big, entries - i64::from(PAGE)).await);
        first.push(read_page(c, &big, 0).await);
        let after = (next(&mut state) % (SMALL_ROOM - i64::from(PAGE)) as u64) as i64;
        floor.push(read_page(c, &small, after).await);
    }
    let rss_kb = rss_kb(reads_home.pid);
    reads_home.down();
    Reads { entries, reads, seeding, db_bytes, rss_kb, random, tail, first, floor }
}

impl Reads {
    fn print(mut self) {
        let (entries, reads) = (self.entries, self.reads);
        println!(
            "  RoomRead, pages of {PAGE}, {reads} of each ({entries} entries seeded in {:.1} s, store {} MB, \
             kikid RSS after {} kB), p50 / p99:",
            self.seeding.as_secs_f64(),
            self.db_bytes / 1_000_000,
            self.rss_kb
        );
        let line = |what: &str, value: String, note: &str| line(21, what, value, note);
        let target = "(target p99 < 2 ms)";
        line(&format!("{entries} entries, after a random entry"), p50_p99(&mut self.random), target);
        line(&format!("{entries} entries, the last page"), p50_p99(&mut self.tail), target);
        line(&format!("{entries} entries, the first page"), p50_p99(&mut self.first), "");
        line(&format!("floor: a room of {SMALL_ROOM} entries"), p50_p99(&mut self.floor), "");
    }
}
