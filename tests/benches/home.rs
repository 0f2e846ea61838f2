//! A home's numbers (memory, start, ThreadList), measured and printed (never asserted: a
//! noisy machine must not fail a build). Run with a release build of the binaries:
//!
//! ```sh
//! cargo build --release --workspace --bins && cargo bench -p kiki-tests --bench home
//! ```
//!
//! - `kikid` idle RSS (target < 20 MB)
//! - `kiki up` to first answer, warm build, existing home (target < 300 ms)
//! - ThreadList, a page of 50 from a home with 100,000 threads (target p50 < 5 ms)

use std::path::Path;
use std::time::{Duration, Instant};

use kiki_client::Client;
use kiki_proto as pb;
use kiki_tests::binaries::kiki_ok as kiki;
use kiki_tests::measure::{ms, percentile, rss_kb};

const THREADS: i64 = 100_000;
const LIST_CALLS: usize = 2_000;
const UP_RUNS: usize = 10;

/// Seeds `n` threads straight into a stopped home's SQLite file (one statement: 100,000
/// creates through the API would measure fsyncs, not ThreadList).
fn seed(db: &Path, n: i64) {
    let conn = rusqlite::Connection::open(db).expect("open db");
    conn.execute(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
         INSERT INTO threads (id, workspace_id, cwd, title, profile, created_at, updated_at)
         SELECT printf('th_bench%08d', i), printf('ws_%04d', i % 1000), '/tmp', 'bench thread ' || i, 'echo',
                1700000000000 + i, 1700000000000 + i FROM n",
        [n],
    )
    .expect("seed");
}

#[tokio::main]
async fn main() {
    let dir = tempfile::tempdir().expect("temp dir");
    let home = dir.path().join("home");

    // First start creates the home (key, store, migrations); not the number we target.
    let t = Instant::now();
    kiki(&home, &["up"]);
    let first_up = t.elapsed();

    let client = Client::connect(&home.join("kikid.sock")).await.expect("connect");
    let status = client.home().status(pb::StatusRequest::default()).await.expect("status").into_inner();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle_rss = rss_kb(status.pid);
    drop(client);
    kiki(&home, &["down"]);

    let mut ups = Vec::new();
    for _ in 0..UP_RUNS {
        let t = Instant::now();
        kiki(&home, &["up"]);
        ups.push(t.elapsed());
        kiki(&home, &["down"]);
    }
    ups.sort();

    seed(&home.join("kiki.db"), THREADS);
    kiki(&home, &["up"]);
    let client = Client::connect(&home.join("kikid.sock")).await.expect("connect");
    let mut threads = client.threads();
    let mut first_page = Vec::with_capacity(LIST_CALLS);
    let mut deep_pages = Vec::with_capacity(LIST_CALLS);
    let mut cursor = String::new();
    for _ in 0..LIST_CALLS {
        let t = Instant::now();
        let page = threads
            .thread_list(pb::ThreadListRequest { limit: Some(50), ..Default::default() })
            .await
            .expect("list")
            .into_inner();
        first_page.push(t.elapsed());
        assert_eq!(page.threads.len(), 50);

        let t = Instant::now();
        let page = threads
            .thread_list(pb::ThreadListRequest {
                limit: Some(50),
                cursor: cursor.clone(),
                ..Default::default()
            })
            .await
            .expect("list")
            .into_inner();
        deep_pages.push(t.elapsed());
        cursor = page.next_cursor.unwrap_or_default();
    }
    first_page.sort();
    deep_pages.sort();
    let status = client.home().status(pb::StatusRequest::default()).await.expect("status").into_inner();
    let loaded_rss = rss_kb(status.pid);
    kiki(&home, &["down"]);

    println!("kiki home benchmark ({} threads seeded)", status.threads);
    println!("  kikid idle RSS                       {:>10} kB   (target < 20,000 kB)", idle_rss);
    println!("  kikid RSS after {LIST_CALLS}x2 ThreadList      {:>10} kB", loaded_rss);
    println!("  kiki up, first start (creates home)  {:>13}", ms(first_up));
    println!("  kiki up to first answer, p50         {:>13}   (target < 300 ms)", ms(percentile(&ups, 0.5)));
    println!("  kiki up to first answer, max         {:>13}", ms(*ups.last().expect("runs")));
    println!(
        "  ThreadList 50 of 100k, first page p50 {:>12}   (target < 5 ms)",
        ms(percentile(&first_page, 0.5))
    );
    println!("  ThreadList 50 of 100k, first page p99 {:>12}", ms(percentile(&first_page, 0.99)));
    println!(
        "  ThreadList 50 of 100k, keyset pages p50 {:>10}   (target < 5 ms)",
        ms(percentile(&deep_pages, 0.5))
    );
    println!("  ThreadList 50 of 100k, keyset pages p99 {:>10}", ms(percentile(&deep_pages, 0.99)));
}
