//! A real PostgreSQL for the Postgres store's tests: the machine's server, started (and
//! installed) by `tests/postgres-up.sh` once per test process, and a database of its own for
//! each test, dropped when the test ends. Tests log in over TCP with a password given apart
//! from the URL, as a team home's `[store] password_file` gives it.

use std::sync::OnceLock;

use kiki_daemon::store::PostgresOptions;
use sqlx::Connection;

/// The password of the role the tests log in as (`tests/postgres-up.sh`): not its name, so a
/// test finding the password in a file finds it and not the URL's user.
const PASSWORD: &str = "not-the-role-name";

/// The server's maintenance database URL (no password), once the server is up.
fn server() -> &'static str {
    static SERVER: OnceLock<String> = OnceLock::new();
    SERVER.get_or_init(|| {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/postgres-up.sh");
        let out = std::process::Command::new("bash").arg(script).output().expect("run tests/postgres-up.sh");
        assert!(
            out.status.success(),
            "tests/postgres-up.sh failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let url = String::from_utf8(out.stdout)
            .expect("utf-8")
            .trim()
            .lines()
            .last()
            .expect("the server's URL")
            .to_string();
        // On a thread: this may run inside a test's runtime.
        let swept = url.clone();
        std::thread::spawn(move || sweep(&swept)).join().expect("sweep");
        url
    })
}

/// A fresh, empty database for one test; dropped with it.
pub struct TestDatabase {
    name: String,
    /// How a store reaches it: the URL names no password, `password` holds it.
    pub options: PostgresOptions,
}

impl TestDatabase {
    pub async fn create() -> Self {
        let server = server();
        let name = format!("kiki_t_{}", unique_suffix());
        let mut admin = connect(server).await;
        sqlx::query(&format!("CREATE DATABASE {name}")).execute(&mut admin).await.expect("create database");
        let url = format!("{}/{name}", server.rsplit_once('/').expect("a database in the URL").0);
        Self { name, options: PostgresOptions { url, password: Some(PASSWORD.into()), pool_size: 4 } }
    }

    /// The database's URL with the password in it (`kiki store migrate --to URL`).
    pub fn url_with_password(&self) -> String {
        self.options.url.replacen("://kiki_test@", &format!("://kiki_test:{PASSWORD}@"), 1)
    }

    /// Ends the connections listening for the database's change notifications, as a
    /// network cut or a server restart does.
    pub async fn end_listeners(&self) {
        let mut admin = connect(server()).await;
        sqlx::query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND query LIKE 'LISTEN%'",
        )
        .bind(&self.name)
        .execute(&mut admin)
        .await
        .expect("end the listening connections");
    }

    /// Cuts every process off the database (its connections ended, new ones refused), as a
    /// server going down does for it, or lets them in again. The server itself, shared by
    /// the tests running beside this one, goes on.
    pub async fn reachable(&self, reachable: bool) {
        let mut admin = connect(server()).await;
        let name = &self.name;
        sqlx::query(&format!("ALTER DATABASE {name} ALLOW_CONNECTIONS {reachable}"))
            .execute(&mut admin)
            .await
            .expect("allow or refuse connections");
        if !reachable {
            sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1")
                .bind(name)
                .execute(&mut admin)
                .await
                .expect("end the database's connections");
        }
    }
}

impl Drop for TestDatabase {
    /// Drops the database on a thread of its own, not waited for: the test's runtime may hold
    /// a connection to it midway through logging in, which only that runtime can finish (or
    /// end, when it stops), and `DROP DATABASE` waits for it. A database left behind by a
    /// process that ended first is dropped by the next test process ([`sweep`]).
    fn drop(&mut self) {
        let name = self.name.clone();
        std::thread::spawn(move || {
            let dropped = block_on(async {
                let mut admin = connect(server()).await;
                sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).execute(&mut admin).await
            });
            if let Err(e) = dropped {
                eprintln!("cannot drop the test database {name}: {e}");
            }
        });
    }
}

/// Drops the test databases of test processes that are gone (`kiki_t_PID_…`).
fn sweep(server: &str) {
    block_on(async {
        let mut admin = connect(server).await;
        let names: Vec<String> =
            sqlx::query_scalar("SELECT datname FROM pg_database WHERE datname LIKE 'kiki\\_t\\_%'")
                .fetch_all(&mut admin)
                .await
                .expect("list test databases");
        for name in names {
            let pid = name.split('_').nth(2).unwrap_or_default();
            if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .execute(&mut admin)
                    .await;
            }
        }
    });
}

/// Runs `work` on a runtime of its own (for tests that are not async).
pub fn block_on<T>(work: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime").block_on(work)
}

async fn connect(url: &str) -> sqlx::PgConnection {
    let options: sqlx::postgres::PgConnectOptions = url.parse().expect("the server's URL");
    sqlx::PgConnection::connect_with(&options.password(PASSWORD)).await.expect("connect to the test server")
}

/// `PID_NANOS_N`: unique among this machine's test processes, the process id first (the
/// sweep reads it).
fn unique_suffix() -> String {
    use std::time::{SystemTime, UNIX_EPOCH};
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).expect("time").as_nanos();
    format!("{}_{}_{}", std::process::id(), nanos, NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
}

/// A PostgreSQL server of one test's own — a cluster made by `initdb` in a temporary
/// directory, on a free port, trusting local logins — that the test may stop and start
/// again: a restart of the shared server would fail the tests running beside it.
pub struct TestCluster {
    dir: tempfile::TempDir,
    bin: std::path::PathBuf,
    pub port: u16,
}

impl TestCluster {
    /// Makes the cluster and starts it (PostgreSQL is installed by `tests/postgres-up.sh`).
    pub fn start() -> Self {
        server();
        let version = std::fs::read_dir("/usr/lib/postgresql")
            .expect("PostgreSQL is installed")
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .max()
            .expect("a PostgreSQL version");
        let bin = std::path::PathBuf::from(format!("/usr/lib/postgresql/{version}/bin"));
        let dir = tempfile::Builder::new().prefix("kiki-pg-").tempdir().expect("temp dir");
        // The server runs as `postgres`, which must reach and own its directory.
        std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
        run("chown", &["postgres:postgres", &dir.path().display().to_string()]);
        let port = crate::binaries::free_tcp_port();
        let cluster = Self { dir, bin, port };
        cluster.as_postgres(
            "initdb",
            &["--auth=trust", "--username=postgres", "--no-sync", "-D", &cluster.data()],
        );
        cluster.start_again();
        cluster
    }

    /// Its URL (no password: it trusts local logins).
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Stops the server at once, as a crash does (`pg_ctl stop -m immediate`): what it
    /// acknowledged is in its log, and comes back with recovery when it starts again.
    pub fn crash(&self) {
        self.as_postgres("pg_ctl", &["-D", &self.data(), "-m", "immediate", "-w", "stop"]);
    }

    /// Starts the server (again), and returns once it takes connections.
    pub fn start_again(&self) {
        let options =
            format!("-p {} -k {} -c listen_addresses=127.0.0.1", self.port, self.dir.path().display());
        let log = self.dir.path().join("server.log").display().to_string();
        self.as_postgres("pg_ctl", &["-D", &self.data(), "-o", &options, "-l", &log, "-w", "start"]);
    }

    fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    fn as_postgres(&self, program: &str, args: &[&str]) {
        let program = self.bin.join(program).display().to_string();
        let mut all = vec!["-u", "postgres", "--", program.as_str()];
        all.extend_from_slice(args);
        run("runuser", &all);
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        let data = self.data();
        let program = self.bin.join("pg_ctl").display().to_string();
        let _ = std::process::Command::new("runuser")
            .args(["-u", "postgres", "--", &program, "-D", &data, "-m", "immediate", "-w", "stop"])
            .output();
    }
}

fn run(program: &str, args: &[&str]) {
    let out = std::process::Command::new(program).args(args).output().expect("run");
    assert!(
        out.status.success(),
        "{program} {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// pgbench's transactions a second (without connection time).
pub fn pgbench(database: &TestDatabase, script: &std::path::Path, clients: usize, seconds: u64) -> f64 {
    let (host, port, name) = parts(database);
    let out = std::process::Command::new("pgbench")
        .args(["-n", "-h", &host, "-p", &port, "-U", "kiki_test", "-T", &seconds.to_string()])
        .args(["-c", &clients.to_string(), "-j", &clients.min(2).to_string(), "-f"])
        .arg(script)
        .arg(&name)
        .env("PGPASSWORD", database.options.password.as_deref().expect("password"))
        .output()
        .expect("pgbench (postgresql-contrib)");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "pgbench failed: {said}{}", String::from_utf8_lossy(&out.stderr));
    said.lines()
        .find_map(|line| line.strip_prefix("tps = "))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|tps| tps.parse().ok())
        .unwrap_or_else(|| panic!("no tps in pgbench's output: {said}"))
}

pub fn psql(database: &TestDatabase, sql: &str) {
    let (host, port, name) = parts(database);
    let ok = std::process::Command::new("psql")
        .args(["-q", "-h", &host, "-p", &port, "-U", "kiki_test", "-d", &name, "-c", sql])
        .env("PGPASSWORD", database.options.password.as_deref().expect("password"))
        .status()
        .expect("psql")
        .success();
    assert!(ok, "psql {sql}");
}

/// Host, port and database of a test database's URL (`postgres://user@host:port/name`).
fn parts(database: &TestDatabase) -> (String, String, String) {
    let rest = database.options.url.split_once('@').expect("user@").1;
    let (address, name) = rest.split_once('/').expect("/database");
    let (host, port) = address.rsplit_once(':').unwrap_or((address, "5432"));
    (host.to_string(), port.to_string(), name.to_string())
}
