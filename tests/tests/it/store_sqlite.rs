//! The store conformance suite against the embedded SQLite backend.

use std::sync::Arc;

use kiki_daemon::store::{SqliteStore, Store, ThreadStore};
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
                agent_session: None,
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

/// A relative store path is taken from the home (given here as `base`), never from the
/// directory kikid happens to run in.
#[tokio::test]
async fn a_relative_store_path_is_the_homes() {
    let dir = tempfile::tempdir().expect("dir");
    let store = SqliteStore::open("sqlite://sub.db", dir.path()).await.expect("open");
    drop(store);
    assert!(dir.path().join("sub.db").is_file());
    assert!(!std::path::Path::new("sub.db").exists());
}

#[tokio::test]
async fn only_sqlite_urls_are_accepted() {
    let err = SqliteStore::open("postgres://localhost/kiki", std::path::Path::new("/"))
        .await
        .expect_err("not sqlite");
    assert!(err.to_string().contains("unsupported store url"), "{err}");
}
