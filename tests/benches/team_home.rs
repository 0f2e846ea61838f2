//! A team home's numbers: two kikid replicas (the release binaries) on one database of the
//! machine's PostgreSQL (`tests/postgres-up.sh`, run by the bench), sharing one identity
//! (never asserted):
//!
//! ```sh
//! cargo build --release --workspace --bins && cargo bench -p kiki-tests --bench team_home
//! ```
//!
//! - a wake across replicas: a send through one replica answered → a ThreadWait parked on
//!   the other returns (the send's turn ended), next to the same wake with the waiter on the
//!   sender's replica, alternately (target p50 < 5 ms);
//! - durable sends from 64 clients, all through one replica and spread over both, in rounds
//!   that alternate which goes first, to 16 busy threads (target: both ÷ one ≥ 0.9);
//! - takeover: a replica running a turn is killed with `kill -9`; the time until the other
//!   has failed its turn as interrupted (target ≤ the lease + 1 s).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kiki_client::Client;
use kiki_proto as pb;
use kiki_tests::binaries::{kiki_json, kill_9, pid_of};
use kiki_tests::local;
use kiki_tests::measure::{durable_sends, ms, percentile, setting, us};
use kiki_tests::postgres::TestDatabase;

const LEASE: Duration = Duration::from_secs(2);

#[tokio::main]
async fn main() {
    let wakes = setting("WAKES", 200) as usize;
    let rounds = setting("ROUNDS", 3) as usize;
    let seconds = setting("SECONDS", 5);
    let database = TestDatabase::create().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let a = replica(dir.path(), "a", &database, None);
    let b = replica(dir.path(), "b", &database, Some(&a));

    // Wakes: the waiter on the other replica, then on the sender's, alternately.
    let echo =
        kiki_json(&a, &["thread", "create", "--title", "echo"])["id"].as_str().expect("id").to_string();
    let (on_a, on_b) = (connect(&a).await, connect(&b).await);
    let (mut across, mut same) = (Vec::new(), Vec::new());
    for i in 0..wakes {
        let waiter = if i % 2 == 0 { &on_b } else { &on_a };
        let took = wake(&on_a, waiter, &echo, i).await;
        if i % 2 == 0 { across.push(took) } else { same.push(took) }
    }
    across.sort();
    same.sort();
    println!("team home: two replicas on one PostgreSQL database, lease {}", ms(LEASE));
    println!(
        "  wake, send answered -> ThreadWait returns: other replica p50 {:>8} p99 {:>8}   same replica p50 {:>8} p99 {:>8}",
        us(percentile(&across, 0.5)),
        us(percentile(&across, 0.99)),
        us(percentile(&same, 0.5)),
        us(percentile(&same, 0.99))
    );
    println!("cross-replica wake p50: {} (target < 5 ms)", us(percentile(&across, 0.5)));

    // Durable sends from 64 clients to 16 busy threads: through one replica, then both.
    let held: Vec<String> = (0..16)
        .map(|_| {
            kiki_json(&a, &["thread", "create", "--profile", "hold", "--prompt", "x"])["id"]
                .as_str()
                .expect("id")
                .to_string()
        })
        .collect();
    let held: Vec<_> = held.iter().map(|h| kiki_tests::local(h)).collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut ratios = Vec::new();
    for round in 0..rounds {
        // The order flipped every round: the store grows as the run goes on, and the phase
        // run second would pay for it every time.
        let period = Duration::from_secs(seconds);
        let (one, both) = if round % 2 == 0 {
            let one = durable_sends(&[&a], &held, 64, period, &format!("one-{round}")).await;
            (one, durable_sends(&[&a, &b], &held, 64, period, &format!("both-{round}")).await)
        } else {
            let both = durable_sends(&[&a, &b], &held, 64, period, &format!("both-{round}")).await;
            (durable_sends(&[&a], &held, 64, period, &format!("one-{round}")).await, both)
        };
        ratios.push(both / one);
        println!(
            "  64 clients, round {}: one replica {one:>7.0} sends/s   both {both:>7.0} sends/s   both ÷ one {:.2}",
            round + 1,
            both / one
        );
    }
    ratios.sort_by(f64::total_cmp);
    println!("two replicas ÷ one at 64 senders, median {:.2} (target ≥ 0.9)", ratios[ratios.len() / 2]);

    // Takeover: a replica running a turn killed; b fails the turn as interrupted.
    let mut takeovers = Vec::new();
    for round in 0..rounds {
        let doomed = replica(dir.path(), &format!("doomed-{round}"), &database, Some(&a));
        let created = kiki_json(&doomed, &["thread", "create", "--profile", "hold", "--prompt", "x"]);
        let thread = created["id"].as_str().expect("id").to_string();
        tokio::time::sleep(Duration::from_millis(300)).await;
        kill_9(&pid_of(&doomed));
        let killed = Instant::now();
        loop {
            let page = on_b
                .threads()
                .thread_read(pb::ThreadReadRequest { target: Some(local(&thread)), ..Default::default() })
                .await
                .expect("read")
                .into_inner();
            if !page.turns.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        takeovers.push(killed.elapsed());
        println!("  takeover, round {}: {}", round + 1, ms(killed.elapsed()));
    }
    takeovers.sort();
    println!(
        "takeover after kill -9, median {} (target ≤ lease + 1 s = {})",
        ms(takeovers[takeovers.len() / 2]),
        ms(LEASE + Duration::from_secs(1))
    );
    for home in [&a, &b] {
        kiki_json(home, &["down"]);
    }
}

/// A replica in `dir/name` on `database` (with `first`'s key when given), started.
fn replica(dir: &Path, name: &str, database: &TestDatabase, first: Option<&Path>) -> PathBuf {
    let home = dir.join(name);
    std::fs::create_dir_all(&home).expect("home");
    let private = |path: &Path| {
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("chmod");
    };
    let pass = home.join("pg.pass");
    std::fs::write(&pass, database.options.password.as_deref().expect("password")).expect("password");
    private(&pass);
    let config = format!(
        "[store]\nurl = \"{}\"\npassword_file = \"pg.pass\"\npool_size = 16\nlease = \"{}s\"\n\
         [mailbox]\ndelivery_wait = \"0s\"\n[profiles.hold]\nexecutor = \"exec\"\ncommand = [\"sleep\", \"600\"]\n",
        database.options.url,
        LEASE.as_secs()
    );
    std::fs::write(home.join("config.toml"), config).expect("config");
    if let Some(first) = first {
        std::fs::copy(first.join("identity.key"), home.join("identity.key")).expect("the home's key");
        private(&home.join("identity.key"));
    }
    kiki_json(&home, &["up"]);
    home
}

async fn connect(home: &Path) -> Client {
    Client::connect(&home.join("kikid.sock")).await.expect("connect")
}

/// One wake: a ThreadWait on `waiter` parked on the echo thread, a send through `sender`;
/// from the send's answer until the wait returns.
async fn wake(sender: &Client, waiter: &Client, echo: &str, i: usize) -> Duration {
    let target = || vec![local(echo)];
    let cursor = waiter
        .threads()
        .thread_wait(pb::ThreadWaitRequest { targets: target(), timeout_ms: Some(0), ..Default::default() })
        .await
        .expect("cursor")
        .into_inner()
        .results[0]
        .cursor
        .clone();
    let mut parked = waiter.threads();
    let request = pb::ThreadWaitRequest {
        targets: target(),
        timeout_ms: Some(10_000),
        cursors: [(echo.to_string(), cursor)].into_iter().collect(),
    };
    let wait = tokio::spawn(async move {
        parked.thread_wait(request).await.expect("wait");
        Instant::now()
    });
    tokio::time::sleep(Duration::from_millis(5)).await;
    let send = pb::ThreadSendRequest {
        target: Some(local(echo)),
        content: format!("wake {i}"),
        idempotency_key: format!("wake-{i}"),
        ..Default::default()
    };
    sender.threads().thread_send(send).await.expect("send");
    let answered = Instant::now();
    wait.await.expect("waiter").saturating_duration_since(answered)
}
