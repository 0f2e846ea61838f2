//! The Postgres store's durable sends next to `pgbench` on the same server, in one run
//! (never asserted). Run with a release build of the binaries and a server up
//! (`tests/postgres-up.sh`, which the bench runs itself):
//!
//! ```sh
//! cargo build --release --workspace --bins && cargo bench -p kiki-tests --bench postgres
//! ```
//!
//! The floor is pgbench running a single-row insert transaction of a 200-byte value (one
//! round trip and one commit each) at 1 and 16 clients; kiki's number is ThreadSend of
//! 200-byte messages to a busy thread (a durable append answered `pending`) from 1 and 16
//! clients on their own connections, the home's store on a database of the same server.
//! Rounds alternate pgbench and kiki; the ratio printed is kiki ÷ pgbench per round.

use std::time::Duration;

use kiki_tests::measure::{HeldHome, durable_sends};
use kiki_tests::postgres::{TestDatabase, pgbench, psql};

const ROUNDS: usize = 3;
const SECONDS: u64 = 5;

#[tokio::main]
async fn main() {
    let rounds = env_or("ROUNDS", ROUNDS);
    let seconds = env_or("SECONDS", SECONDS as usize) as u64;
    let floor_db = TestDatabase::create().await;
    let store_db = TestDatabase::create().await;
    let password = store_db.options.password.clone().expect("password");
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir_all(dir.path().join("home")).expect("home");
    let pass = dir.path().join("home").join("pg.pass");
    std::fs::write(&pass, &password).expect("password file");
    std::fs::set_permissions(&pass, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("chmod");
    let store =
        format!("[store]\nurl = \"{}\"\npassword_file = \"pg.pass\"\npool_size = 16\n", store_db.options.url);
    let HeldHome { home, held, .. } = HeldHome::start_with(dir.path(), &store).await;
    let script = dir.path().join("insert.sql");
    std::fs::write(&script, format!("INSERT INTO floor (v) VALUES ('{}');\n", "x".repeat(200)))
        .expect("script");
    psql(
        &floor_db,
        "CREATE TABLE floor (id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v TEXT NOT NULL)",
    );

    println!("postgres store: {rounds} rounds of {seconds} s per number, pgbench and kiki alternating");
    for clients in [1, 16] {
        let mut ratios = Vec::new();
        for round in 0..rounds {
            let floor = pgbench(&floor_db, &script, clients, seconds);
            let sends = durable_sends(
                &[&home],
                &[kiki_tests::local(&held)],
                clients,
                Duration::from_secs(seconds),
                &format!("r{round}"),
            )
            .await;
            ratios.push(sends / floor);
            println!(
                "  {clients:>2} client(s), round {}: pgbench {floor:>8.0} tx/s   kiki {sends:>8.0} sends/s   kiki ÷ pgbench {:.2}",
                round + 1,
                sends / floor
            );
        }
        ratios.sort_by(f64::total_cmp);
        println!("pg-send-{clients}: kiki ÷ pgbench, median {:.2} (target ≥ 0.8)", ratios[ratios.len() / 2]);
    }
    kiki_tests::binaries::kiki_json(&home, &["down"]);
}

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}
