//! kiki's test support: the in-process [`TestHome`] harness, the store conformance suite
//! ([`conformance`]), helpers for bridges between homes ([`bridges`]), for threads as agent
//! sessions ([`sessions`]) and for the smoke tier that runs the real binaries
//! ([`binaries`]). The suites themselves are one test binary, `tests/tests/it/` (a module per
//! topic); the benchmarks are in `tests/benches/`.

pub mod binaries;
pub mod bridges;
pub mod conformance;
pub mod flood;
pub mod mcp;
pub mod measure;
pub mod otlp;
pub mod postgres;
pub mod sessions;
pub mod sshd;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kiki_client::Client;
use kiki_daemon::config::{Config, ExecutorKind, ProfileConfig};
use kiki_daemon::time::Clock;
use kiki_daemon::{Daemon, DaemonHandle};
use kiki_proto as pb;
use tempfile::TempDir;
use tonic::Code;

/// How long helpers wait for something that should happen in milliseconds.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// `KIKI_TEST_STORE=postgres` runs every [`TestHome`] on a Postgres database of its own
/// (tests/run-all.sh runs the mailbox, rooms, bridges and sessions suites so, beside their
/// default run on SQLite).
pub const STORE_ENV: &str = "KIKI_TEST_STORE";

/// A home running in this process, in its own temporary directory.
pub struct TestHome {
    dir: TempDir,
    /// The home's Postgres database, when the suite runs on Postgres (see [`STORE_ENV`]).
    database: Option<postgres::TestDatabase>,
    config: Config,
    transport: Option<kiki_daemon::TransportFactory>,
    clock: Clock,
    handle: DaemonHandle,
    client: Client,
}

pub struct TestHomeBuilder {
    config: Config,
    transport: Option<kiki_daemon::TransportFactory>,
    clock: Clock,
    /// The identity key the home starts with (a replica's: its team home's), if not its own.
    identity: Option<PathBuf>,
}

/// A manual clock at the wall clock's time, for homes whose timings a test moves on with
/// [`Clock::advance`] instead of waiting (several homes may share one).
pub fn manual_clock() -> Clock {
    Clock::manual(kiki_daemon::time::now_ms())
}

impl TestHomeBuilder {
    /// Adds an `exec` profile running `sh -c SCRIPT`.
    pub fn shell_profile(mut self, name: &str, script: &str) -> Self {
        self.config.profiles.insert(
            name.to_string(),
            ProfileConfig {
                executor: ExecutorKind::Exec,
                command: vec!["sh".into(), "-c".into(), script.into()],
                default: false,
                enabled: true,
                thread_communication: None,
                allowed_tools: Vec::new(),
                max_cost_usd: None,
            },
        );
        self
    }

    /// Bridges over `network` (deterministic, in memory) instead of QUIC.
    pub fn memory_network(mut self, network: &std::sync::Arc<kiki_bridge::memory::MemoryNetwork>) -> Self {
        let network = network.clone();
        self.transport = Some(std::sync::Arc::new(move |home_id: &str| {
            network.endpoint(home_id) as std::sync::Arc<dyn kiki_bridge::Transport>
        }));
        self
    }

    /// The clock the home reads and sleeps on (default: the system's); see [`manual_clock`].
    pub fn clock(mut self, clock: &Clock) -> Self {
        self.clock = clock.clone();
        self
    }

    pub fn config(mut self, edit: impl FnOnce(&mut Config)) -> Self {
        edit(&mut self.config);
        self
    }

    /// Another replica of `home` (a team home on Postgres): its store and its identity key.
    pub fn replica_of(mut self, home: &TestHome) -> Self {
        assert!(home.config.store.url.is_some(), "a replica shares its home's Postgres store");
        self.config.store = home.config.store.clone();
        self.identity = Some(home.dir().join("identity.key"));
        self
    }

    pub async fn start(mut self) -> TestHome {
        let dir = tempfile::Builder::new().prefix("kiki-test-").tempdir().expect("temp dir");
        let database = match std::env::var(STORE_ENV).as_deref() {
            Ok("postgres") if self.config.store.url.is_none() => Some(postgres::TestDatabase::create().await),
            Ok("postgres" | "sqlite") | Err(_) => None,
            Ok(other) => panic!("{STORE_ENV}={other}: expected sqlite or postgres"),
        };
        if let Some(database) = &database {
            self.config.store.url = Some(database.url_with_password());
        }
        if let Some(key) = &self.identity {
            let copy = dir.path().join("identity.key");
            std::fs::copy(key, &copy).expect("the home's identity key");
            std::fs::set_permissions(&copy, std::os::unix::fs::PermissionsExt::from_mode(0o600))
                .expect("chmod");
        }
        let (handle, client) =
            boot(dir.path(), self.config.clone(), self.transport.clone(), self.clock.clone()).await;
        let (config, transport, clock) = (self.config, self.transport, self.clock);
        TestHome { dir, database, config, transport, clock, handle, client }
    }
}

async fn boot(
    dir: &Path,
    config: Config,
    transport: Option<kiki_daemon::TransportFactory>,
    clock: Clock,
) -> (DaemonHandle, Client) {
    let mut builder = Daemon::builder().home(dir).config(config).clock(clock);
    if let Some(transport) = transport {
        builder = builder.bridge_transport(transport);
    }
    let handle = builder.start().await.expect("home starts");
    let client = Client::connect(&handle.socket_path()).await.expect("client connects");
    (handle, client)
}

impl TestHome {
    pub fn builder() -> TestHomeBuilder {
        TestHomeBuilder { config: Config::default(), transport: None, clock: Clock::system(), identity: None }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The clock the home runs on.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    pub fn handle(&self) -> &DaemonHandle {
        &self.handle
    }

    /// The home's store, reached directly (past the API), whichever backend it is on.
    pub fn store(&self) -> StoreAccess {
        match &self.database {
            Some(database) => StoreAccess::Postgres(database.url_with_password()),
            None => StoreAccess::Sqlite(self.dir.path().join("kiki.db")),
        }
    }

    /// A directory inside the home's temp dir, for threads to work in.
    pub fn workdir(&self, name: &str) -> PathBuf {
        let dir = self.dir.path().join("work").join(name);
        std::fs::create_dir_all(&dir).expect("workdir");
        dir.canonicalize().expect("canonical workdir")
    }

    /// Stops the daemon cleanly and starts it again on the same directory.
    pub async fn restart(&mut self) {
        self.restart_with(async |_| {}).await;
    }

    /// Stops the daemon cleanly, runs `between` on its home directory while it is down,
    /// and starts it again.
    pub async fn restart_with(&mut self, between: impl AsyncFnOnce(&Path)) {
        self.handle.shutdown();
        self.handle.stopped().await;
        between(self.dir.path()).await;
        let (handle, client) =
            boot(self.dir.path(), self.config.clone(), self.transport.clone(), self.clock.clone()).await;
        self.handle = handle;
        self.client = client;
    }

    pub async fn create(
        &self,
        request: pb::ThreadCreateRequest,
    ) -> Result<pb::ThreadCreateResponse, tonic::Status> {
        self.client.threads().thread_create(request).await.map(|r| r.into_inner())
    }

    /// Creates a thread in a fresh workdir with `profile` and optional prompt.
    pub async fn thread(&self, profile: &str, prompt: Option<&str>) -> pb::ThreadCreateResponse {
        self.create(pb::ThreadCreateRequest {
            cwd: Some(self.workdir("default").display().to_string()),
            profile: Some(profile.into()),
            prompt: prompt.map(str::to_string),
            title: None,
            resume_agent_session: None,
        })
        .await
        .expect("thread created")
    }

    /// The address this home's bridge endpoint listens on.
    pub async fn bridge_listen(&self) -> String {
        self.client.bridges().bridge_list(pb::BridgeListRequest {}).await.expect("list").into_inner().listen
    }

    pub async fn say(&self, thread_id: &str, content: &str) -> Result<pb::ThreadSayResponse, tonic::Status> {
        let request = pb::ThreadSayRequest { target: Some(local(thread_id)), content: content.into() };
        self.client.home().thread_say(request).await.map(|r| r.into_inner())
    }

    pub async fn send(
        &self,
        request: pb::ThreadSendRequest,
    ) -> Result<pb::ThreadSendResponse, tonic::Status> {
        self.client.threads().thread_send(request).await.map(|r| r.into_inner())
    }

    pub async fn read(
        &self,
        request: pb::ThreadReadRequest,
    ) -> Result<pb::ThreadReadResponse, tonic::Status> {
        self.client.threads().thread_read(request).await.map(|r| r.into_inner())
    }

    /// All ended turns of a thread, following cursors.
    pub async fn all_turns(&self, thread_id: &str) -> Vec<pb::Turn> {
        read_all_turns(&self.client, thread_id).await
    }

    /// Waits until the thread has `n` ended turns and is idle; returns them.
    pub async fn wait_turns(&self, thread_id: &str, n: usize) -> Vec<pb::Turn> {
        wait_turns(&self.client, thread_id, n).await
    }

    /// A room hosted by `host` and named `name` (the owner's RoomCreate).
    pub async fn create_room(&self, host: impl Into<String>, name: &str) -> pb::Room {
        let request = pb::RoomCreateRequest { host: host.into(), name: name.into() };
        let created = self.client.rooms().room_create(request).await.expect("room created").into_inner();
        created.room.expect("room")
    }

    pub async fn thread_record(&self, thread_id: &str) -> pb::Thread {
        let page = self
            .read(pb::ThreadReadRequest {
                target: Some(local(thread_id)),
                limit: Some(1),
                ..Default::default()
            })
            .await
            .expect("read");
        page.thread.expect("thread in read response")
    }
}

/// A home's store reached directly, for a test that sets up what the API cannot (a rewound
/// outbox entry, a forgotten key) or counts rows: plain SQL that both backends take.
#[derive(Debug, Clone)]
pub enum StoreAccess {
    Sqlite(PathBuf),
    Postgres(String),
}

impl StoreAccess {
    /// Runs `statement`; the rows it changed.
    pub async fn execute(&self, statement: &str) -> u64 {
        match self {
            Self::Sqlite(path) => {
                let db = rusqlite::Connection::open(path).expect("open the store");
                db.busy_timeout(Duration::from_secs(10)).expect("busy timeout");
                db.execute(statement, []).unwrap_or_else(|e| panic!("{statement}: {e}")) as u64
            }
            Self::Postgres(url) => {
                let mut db = postgres(url).await;
                sqlx::query(statement)
                    .execute(&mut db)
                    .await
                    .unwrap_or_else(|e| panic!("{statement}: {e}"))
                    .rows_affected()
            }
        }
    }

    /// The rows of `query`, its first column as text and its second as an integer (or 0).
    pub async fn rows(&self, query: &str) -> Vec<(String, i64)> {
        match self {
            Self::Sqlite(path) => {
                let db = rusqlite::Connection::open(path).expect("open the store");
                let mut statement = db.prepare(query).unwrap_or_else(|e| panic!("{query}: {e}"));
                let two = statement.column_count() > 1;
                statement
                    .query_map([], |row| {
                        let first: rusqlite::types::Value = row.get(0)?;
                        let first = match first {
                            rusqlite::types::Value::Text(text) => text,
                            rusqlite::types::Value::Integer(n) => n.to_string(),
                            other => format!("{other:?}"),
                        };
                        Ok((first, if two { row.get(1)? } else { 0 }))
                    })
                    .and_then(Iterator::collect)
                    .unwrap_or_else(|e| panic!("{query}: {e}"))
            }
            Self::Postgres(url) => {
                use sqlx::Row;
                let mut db = postgres(url).await;
                let rows =
                    sqlx::query(query).fetch_all(&mut db).await.unwrap_or_else(|e| panic!("{query}: {e}"));
                rows.iter()
                    .map(|row| {
                        let first = row
                            .try_get::<String, _>(0)
                            .or_else(|_| row.try_get::<i64, _>(0).map(|n| n.to_string()))
                            .unwrap_or_else(|e| panic!("{query}: {e}"));
                        (first, if row.len() > 1 { row.try_get(1).unwrap_or(0) } else { 0 })
                    })
                    .collect()
            }
        }
    }

    /// Every row of every table of the home's data (not the migrations each store applied,
    /// nor the processes serving it), each as its columns by name with their values, sorted:
    /// two stores that hold the same data, whatever their backends, dump the same. The
    /// tables are the live schema's, so a table a migration adds is in it.
    pub async fn dump(&self) -> std::collections::BTreeMap<String, Vec<String>> {
        const NOT_DATA: &[&str] = &["schema_migrations", "replicas"];
        let mut dump = std::collections::BTreeMap::new();
        match self {
            Self::Sqlite(path) => {
                use rusqlite::types::Value;
                let db = rusqlite::Connection::open(path).expect("open the store");
                let tables: Vec<String> = db
                    .prepare(
                        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'",
                    )
                    .and_then(|mut s| s.query_map([], |row| row.get(0))?.collect())
                    .expect("tables");
                for table in tables.into_iter().filter(|t| !NOT_DATA.contains(&t.as_str())) {
                    let mut statement = db.prepare(&format!("SELECT * FROM {table}")).expect("select");
                    let names: Vec<String> = statement.column_names().iter().map(|n| n.to_string()).collect();
                    let rows = statement
                        .query_map([], |row| {
                            let cells = (0..names.len()).map(|i| {
                                Ok(match row.get::<_, Value>(i)? {
                                    Value::Null => "NULL".to_string(),
                                    Value::Integer(n) => n.to_string(),
                                    Value::Real(x) => format!("{x:?}"),
                                    Value::Text(text) => format!("{text:?}"),
                                    Value::Blob(bytes) => format!("{bytes:?}"),
                                })
                            });
                            Ok(dumped_row(&names, cells.collect::<rusqlite::Result<Vec<_>>>()?))
                        })
                        .and_then(Iterator::collect::<rusqlite::Result<Vec<String>>>)
                        .unwrap_or_else(|e| panic!("{table}: {e}"));
                    dump.insert(table, sorted(rows));
                }
            }
            Self::Postgres(url) => {
                use sqlx::{Column, Row, TypeInfo, ValueRef};
                let mut db = postgres(url).await;
                let tables: Vec<String> = sqlx::query_scalar(
                    "SELECT tablename::TEXT FROM pg_tables WHERE schemaname = current_schema()",
                )
                .fetch_all(&mut db)
                .await
                .expect("tables");
                for table in tables.into_iter().filter(|t| !NOT_DATA.contains(&t.as_str())) {
                    let rows = sqlx::query(&format!("SELECT * FROM {table}"))
                        .fetch_all(&mut db)
                        .await
                        .unwrap_or_else(|e| panic!("{table}: {e}"));
                    let rows: Vec<String> = rows
                        .iter()
                        .map(|row| {
                            let names: Vec<String> =
                                row.columns().iter().map(|c| c.name().to_string()).collect();
                            let cells = (0..row.len()).map(|i| {
                                let raw = row.try_get_raw(i).expect("cell");
                                if raw.is_null() {
                                    return "NULL".to_string();
                                }
                                let kind = raw.type_info().name().to_string();
                                match kind.as_str() {
                                    "INT8" => row.get::<i64, _>(i).to_string(),
                                    "INT4" => row.get::<i32, _>(i).to_string(),
                                    // As SQLite keeps a switch.
                                    "BOOL" => i64::from(row.get::<bool, _>(i)).to_string(),
                                    "FLOAT8" => format!("{:?}", row.get::<f64, _>(i)),
                                    "TEXT" | "VARCHAR" => format!("{:?}", row.get::<String, _>(i)),
                                    other => panic!("{table}: a column of type {other}"),
                                }
                            });
                            dumped_row(&names, cells.collect())
                        })
                        .collect();
                    dump.insert(table, sorted(rows));
                }
            }
        }
        dump
    }

    /// The number `query` (a `SELECT COUNT(*) …`) answers.
    pub async fn count(&self, query: &str) -> i64 {
        let rows = self.rows(query).await;
        rows.first()
            .and_then(|(n, _)| n.parse().ok())
            .unwrap_or_else(|| panic!("{query}: no number in {rows:?}"))
    }
}

/// A row as [`StoreAccess::dump`] shows it: `column=value`, by column name.
fn dumped_row(names: &[String], cells: Vec<String>) -> String {
    let mut pairs: Vec<String> =
        names.iter().zip(cells).map(|(name, cell)| format!("{name}={cell}")).collect();
    pairs.sort();
    pairs.join(" ")
}

fn sorted(mut rows: Vec<String>) -> Vec<String> {
    rows.sort();
    rows
}

async fn postgres(url: &str) -> sqlx::PgConnection {
    use sqlx::Connection;
    sqlx::PgConnection::connect(url).await.expect("connect to the home's database")
}

/// A reference to a thread of the executing home.
pub fn local(thread_id: &str) -> pb::ThreadRef {
    pb::ThreadRef { host_id: String::new(), workspace_id: String::new(), session_id: thread_id.into() }
}

/// Asserts that a call was refused as an invalid argument, with a message that names the
/// `field` first and then the `limit` it broke.
pub fn assert_invalid<T: std::fmt::Debug>(result: Result<T, tonic::Status>, field: &str, limit: &str) {
    let status = result.expect_err("must be refused");
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    let message = status.message();
    assert!(message.starts_with(&format!("{field}:")), "names the field {field}: {message}");
    assert!(message.contains(limit), "names the limit {limit}: {message}");
}

pub async fn read_all_turns(client: &Client, thread_id: &str) -> Vec<pb::Turn> {
    let mut turns = Vec::new();
    let mut cursor = String::new();
    loop {
        let page = client
            .threads()
            .thread_read(pb::ThreadReadRequest {
                target: Some(local(thread_id)),
                limit: Some(100),
                cursor: cursor.clone(),
                ..Default::default()
            })
            .await
            .expect("read")
            .into_inner();
        turns.extend(page.turns);
        match page.next_cursor {
            Some(next) => cursor = next,
            None => return turns,
        }
    }
}

pub async fn wait_turns(client: &Client, thread_id: &str, n: usize) -> Vec<pb::Turn> {
    let started = Instant::now();
    loop {
        let turns = read_all_turns(client, thread_id).await;
        if turns.len() >= n {
            return turns;
        }
        assert!(
            started.elapsed() < PATIENCE,
            "thread {thread_id} has {} of {n} turns after {PATIENCE:?}",
            turns.len()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Polls `check` until it returns `Some`.
pub async fn eventually<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    eventually_within(what, PATIENCE, check).await
}

/// [`eventually`] for something that happens on a schedule of its own (a backoff that
/// may have grown to `patience`'s order while a loaded machine ran the test).
pub async fn eventually_within<T, F, Fut>(what: &str, patience: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(started.elapsed() < patience, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A real pause between steps of a manual clock: long enough for what the woken tasks do
/// beside the clock (a store write, a call over the memory network) to finish.
const STEP_PAUSE: Duration = Duration::from_millis(5);

/// Moves a manual `clock` on by `total`, `step` at a time, pausing briefly (real time)
/// between steps so the homes' work started at each step lands before the next.
pub async fn advance_in_steps(clock: &Clock, total: Duration, step: Duration) {
    let end = clock.now_ms() + kiki_daemon::time::ms(total);
    while clock.now_ms() < end {
        let left = Duration::from_millis((end - clock.now_ms()) as u64);
        clock.advance(step.min(left)).await;
        tokio::time::sleep(STEP_PAUSE).await;
    }
}

/// [`eventually`] on a manual `clock`: until `check` holds, moves the clock on by `step`
/// (with a brief real pause) between looks, for at most `limit` of clock time. Returns the
/// value and how much clock time passed.
pub async fn eventually_advancing<T, F, Fut>(
    clock: &Clock,
    step: Duration,
    limit: Duration,
    what: &str,
    mut check: F,
) -> (T, Duration)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let (started, real) = (clock.now_ms(), Instant::now());
    loop {
        if let Some(value) = check().await {
            return (value, Duration::from_millis((clock.now_ms() - started) as u64));
        }
        let passed = Duration::from_millis((clock.now_ms() - started) as u64);
        assert!(
            passed < limit && real.elapsed() < PATIENCE,
            "timed out waiting for {what} ({passed:?} passed)"
        );
        clock.advance(step).await;
        tokio::time::sleep(STEP_PAUSE).await;
    }
}

/// [`eventually`] on `clock`: on a manual one, moved on 100 ms at a time between looks (for
/// at most an hour of clock time); on the system clock, waited for.
pub async fn eventually_on<T, F, Fut>(clock: &Clock, what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    if clock.is_manual() {
        let (step, limit) = (Duration::from_millis(100), Duration::from_secs(3600));
        eventually_advancing(clock, step, limit, what, check).await.0
    } else {
        eventually(what, check).await
    }
}

/// A UDP relay between one client and one server, for partitions on loopback: while
/// partitioned, datagrams in both directions are discarded, as by a broken network; while
/// holding, they are kept (a stalled link) and all let through, in order, on release.
pub struct UdpRelay {
    pub addr: std::net::SocketAddr,
    dropping: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// The datagrams held so far (true: towards the server), while holding.
    held: Held,
    front: std::sync::Arc<tokio::net::UdpSocket>,
    back: std::sync::Arc<tokio::net::UdpSocket>,
    client: std::sync::Arc<std::sync::Mutex<Option<std::net::SocketAddr>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

type Held = std::sync::Arc<std::sync::Mutex<Option<Vec<(bool, Vec<u8>)>>>>;

impl UdpRelay {
    /// Relays datagrams arriving at a fresh loopback port to `server`.
    pub async fn start(server: std::net::SocketAddr) -> Self {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        let front = Arc::new(tokio::net::UdpSocket::bind("127.0.0.1:0").await.expect("relay front"));
        let back = Arc::new(tokio::net::UdpSocket::bind("127.0.0.1:0").await.expect("relay back"));
        back.connect(server).await.expect("relay connect");
        let addr = front.local_addr().expect("relay addr");
        let dropping = Arc::new(AtomicBool::new(false));
        let held: Held = Arc::default();
        let client: Arc<std::sync::Mutex<Option<std::net::SocketAddr>>> = Arc::default();
        // Whether a datagram goes on now: not while partitioned, nor while held (then kept).
        let passes = {
            let (dropping, held) = (dropping.clone(), held.clone());
            move |upstream: bool, datagram: &[u8]| {
                if let Some(held) = &mut *held.lock().unwrap_or_else(|p| p.into_inner()) {
                    held.push((upstream, datagram.to_vec()));
                    return false;
                }
                !dropping.load(Ordering::SeqCst)
            }
        };
        let upstream = {
            let (front, back, client, passes) = (front.clone(), back.clone(), client.clone(), passes.clone());
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                while let Ok((n, from)) = front.recv_from(&mut buf).await {
                    *client.lock().unwrap_or_else(|p| p.into_inner()) = Some(from);
                    if passes(true, &buf[..n]) {
                        let _ = back.send(&buf[..n]).await;
                    }
                }
            })
        };
        let downstream = {
            let (front, back, client) = (front.clone(), back.clone(), client.clone());
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                while let Ok(n) = back.recv(&mut buf).await {
                    let to = *client.lock().unwrap_or_else(|p| p.into_inner());
                    if let Some(to) = to
                        && passes(false, &buf[..n])
                    {
                        let _ = front.send_to(&buf[..n], to).await;
                    }
                }
            })
        };
        Self { addr, dropping, held, front, back, client, tasks: vec![upstream, downstream] }
    }

    /// Starts (true) or ends (false) a partition.
    pub fn partition(&self, on: bool) {
        self.dropping.store(on, std::sync::atomic::Ordering::SeqCst);
    }

    /// Starts holding datagrams (see [`UdpRelay::release`]).
    pub fn hold(&self) {
        *self.held.lock().unwrap_or_else(|p| p.into_inner()) = Some(Vec::new());
    }

    /// Ends the hold: lets every held datagram through, in the order they came, and says how
    /// many there were.
    pub async fn release(&self) -> usize {
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner()).take().unwrap_or_default();
        let client = *self.client.lock().unwrap_or_else(|p| p.into_inner());
        for (upstream, datagram) in &held {
            match (upstream, client) {
                (true, _) => drop(self.back.send(datagram).await),
                (false, Some(to)) => drop(self.front.send_to(datagram, to).await),
                (false, None) => {}
            }
        }
        held.len()
    }
}

impl Drop for UdpRelay {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// The metrics a home serves on `127.0.0.1:port` (`[metrics] listen`), in the text format.
pub fn scrape(port: u16) -> String {
    use std::io::{Read, Write};
    let mut http = std::net::TcpStream::connect(("127.0.0.1", port)).expect("the metrics' port");
    http.write_all(b"GET /metrics HTTP/1.1\r\nHost: kiki\r\nConnection: close\r\n\r\n").expect("ask");
    let mut answer = String::new();
    http.read_to_string(&mut answer).expect("read");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    answer
}

/// The value of the series `series` (`name{labels}`) in scraped metrics; 0 when absent.
pub fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.strip_prefix(' ')))
        .map_or(0.0, |v| v.trim().parse().expect("a number"))
}
