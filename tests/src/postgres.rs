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
        String::from_utf8(out.stdout)
            .expect("utf-8")
            .trim()
            .lines()
            .last()
            .expect("the server's URL")
            .to_string()
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
        let name = format!("kiki_t_{}", kiki_ulid().to_lowercase());
        let mut admin = connect(server).await;
        sqlx::query(&format!("CREATE DATABASE {name}")).execute(&mut admin).await.expect("create database");
        let url = format!("{}/{name}", server.rsplit_once('/').expect("a database in the URL").0);
        Self { name, options: PostgresOptions { url, password: Some(PASSWORD.into()), pool_size: 4 } }
    }

    /// The database's URL with the password in it (`kiki store migrate --to URL`).
    pub fn url_with_password(&self) -> String {
        self.options.url.replacen("://kiki_test@", &format!("://kiki_test:{PASSWORD}@"), 1)
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let (server, name) = (server().to_string(), self.name.clone());
        // Drop runs inside the test's runtime: the drop goes on a thread of its own.
        let dropped = std::thread::spawn(move || {
            let runtime =
                tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            runtime.block_on(async {
                let mut admin = connect(&server).await;
                sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).execute(&mut admin).await
            })
        });
        if let Ok(Err(e)) = dropped.join() {
            eprintln!("cannot drop the test database {}: {e}", self.name);
        }
    }
}

async fn connect(url: &str) -> sqlx::PgConnection {
    let options: sqlx::postgres::PgConnectOptions = url.parse().expect("the server's URL");
    sqlx::PgConnection::connect_with(&options.password(PASSWORD)).await.expect("connect to the test server")
}

fn kiki_ulid() -> String {
    use std::time::{SystemTime, UNIX_EPOCH};
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).expect("time").as_nanos();
    format!("{}_{}_{}", std::process::id(), nanos, NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
}
