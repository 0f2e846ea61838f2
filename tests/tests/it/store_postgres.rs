//! The store conformance suite against the Postgres backend, on a real server (a database
//! per test: `kiki_tests::postgres`), and what only a shared database does.

use std::sync::Arc;

use kiki_daemon::store::{PostgresStore, Store};
use kiki_tests::postgres::TestDatabase;

async fn postgres() -> (Arc<dyn Store>, TestDatabase) {
    let database = TestDatabase::create().await;
    let store = PostgresStore::open(&database.options).await.expect("open");
    (Arc::new(store), database)
}

kiki_tests::store_conformance!(postgres());
