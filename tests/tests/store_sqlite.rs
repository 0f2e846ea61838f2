//! The store conformance suite against the embedded SQLite backend.

use std::sync::Arc;

use kiki_daemon::store::{SqliteStore, Store};
use tempfile::TempDir;

async fn sqlite() -> (Arc<dyn Store>, TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteStore::open_path(&dir.path().join("kiki.db")).await.expect("open");
    (Arc::new(store), dir)
}

kiki_tests::store_conformance!(sqlite());

#[tokio::test]
async fn data_survives_reopening_and_migrations_run_once() {
    let (store, dir) = sqlite().await;
    store
        .create_thread(
            &kiki_daemon::store::NewThread {
                id: "th_a".into(),
                workspace_id: "ws".into(),
                cwd: "/".into(),
                title: "t".into(),
                profile: "echo".into(),
                communication: kiki_daemon::store::CommunicationSetting::Default,
                now: 1,
            },
            None,
        )
        .await
        .expect("create");
    store.close().await;
    let reopened = SqliteStore::open_path(&dir.path().join("kiki.db")).await.expect("reopen");
    assert!(reopened.thread("th_a").await.expect("read").is_some());
}

#[tokio::test]
async fn only_sqlite_urls_are_accepted() {
    let err = SqliteStore::open("postgres://localhost/kiki").await.expect_err("not sqlite");
    assert!(err.to_string().contains("unsupported store url"), "{err}");
}
