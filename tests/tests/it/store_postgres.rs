//! The store conformance suite against the Postgres backend, on a real server (a database
//! per test: `kiki_tests::postgres`), and what only a shared database does.

use std::sync::Arc;

use kiki_daemon::store::{Change, CronRecord, PostgresStore, Store, ThreadStore, ToolStore};
use kiki_tests::postgres::TestDatabase;

async fn postgres() -> (Arc<dyn Store>, TestDatabase) {
    let database = TestDatabase::create().await;
    let store = PostgresStore::open(&database.options).await.expect("open");
    (Arc::new(store), database)
}

kiki_tests::store_conformance!(postgres());

/// What one process commits reaches the listeners of another on the same database (a team
/// home's replicas), through the coalesced notifications: a thread's changes, the crons'.
#[tokio::test]
async fn committed_changes_reach_another_process_on_the_database() {
    let database = TestDatabase::create().await;
    let (writer, other, mut hearing) = two_processes(&database).await;
    writer
        .create_thread(&kiki_tests::conformance::new_thread("th_far", "ws", 1), None)
        .await
        .expect("create");
    until(&mut hearing, Change::Thread("th_far".into())).await;
    let cron = CronRecord {
        id: "cr_far".into(),
        thread_id: "th_far".into(),
        cron: "*/5 * * * *".into(),
        prompt: "p".into(),
        recurring: true,
        created_at: 1,
        next_fire_at: 100,
    };
    assert!(writer.add_cron(&cron, 1).await.expect("add"));
    until(&mut hearing, Change::Crons).await;
    writer.close().await;
    other.close().await;
}

/// Writes that come together share one transaction and one commit (group commit); one that
/// fails (a duplicate thread id) or whose caller goes away takes none of the others with it,
/// and each is answered once it is durable.
#[tokio::test]
async fn writes_that_come_together_commit_together_and_a_failed_one_alone() {
    let database = TestDatabase::create().await;
    let store = Arc::new(PostgresStore::open(&database.options).await.expect("open"));
    let batches = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = batches.clone();
    store.changes().on_commit(Arc::new(move |writes, _| seen.lock().expect("batches").push(writes)));
    let thread = |id: &str| kiki_tests::conformance::new_thread(id, "ws", 1);
    store.create_thread(&thread("th_0"), None).await.expect("first");
    let mut writes = tokio::task::JoinSet::new();
    for n in 0..40 {
        let store = store.clone();
        // Every fourth asks for a thread that exists: refused, alone.
        let id = if n % 4 == 0 { "th_0".to_string() } else { format!("th_{n}") };
        writes.spawn(async move { (n, store.create_thread(&thread(&id), None).await.map(|t| t.id)) });
    }
    // Callers that give up at once, in the middle of the others.
    for n in 40..45 {
        let store = store.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(
                std::time::Duration::ZERO,
                store.create_thread(&thread(&format!("th_{n}")), None),
            )
            .await;
        });
    }
    while let Some(done) = writes.join_next().await {
        let (n, created) = done.expect("write");
        match n % 4 {
            0 => assert!(
                matches!(created, Err(kiki_daemon::store::StoreError::Conflict(_))),
                "{n}: {created:?}"
            ),
            _ => assert_eq!(created.expect("created"), format!("th_{n}")),
        }
    }
    for n in (1..40).filter(|n| n % 4 != 0) {
        assert!(store.thread(&format!("th_{n}")).await.expect("read").is_some(), "th_{n} committed");
    }
    store.create_thread(&thread("th_after"), None).await.expect("the store goes on");
    let batches = batches.lock().expect("batches").clone();
    assert!(batches.iter().any(|&writes| writes > 1), "some writes shared a commit: {batches:?}");
    assert!(batches.iter().sum::<usize>() >= 32, "every kept write counted once: {batches:?}");
}

/// Two stores on `database`, as two processes would have, and what the second hears.
async fn two_processes(database: &TestDatabase) -> (PostgresStore, PostgresStore, Hearing) {
    let writer = PostgresStore::open(&database.options).await.expect("open");
    let other = PostgresStore::open(&database.options).await.expect("open again");
    let (heard, hearing) = tokio::sync::mpsc::unbounded_channel();
    other.changes().listen(Arc::new(move |changes: &[Change]| {
        let _ = heard.send(changes.to_vec());
    }));
    (writer, other, hearing)
}

type Hearing = tokio::sync::mpsc::UnboundedReceiver<Vec<Change>>;

/// While a process's listening connection is cut off, what others commit may go unheard:
/// its listeners are told to look again (and go on being told, once a second, for a while
/// after), and once it listens again it hears the others' commits as before.
#[tokio::test]
async fn listeners_look_again_while_the_notifications_are_cut_off() {
    let database = TestDatabase::create().await;
    let (writer, other, mut hearing) = two_processes(&database).await;
    // Both processes' listening connections are cut (the database's admin ends them).
    database.end_listeners().await;
    until(&mut hearing, Change::Missed).await;
    let looked_again = std::time::Instant::now();
    until(&mut hearing, Change::Missed).await;
    assert!(looked_again.elapsed() >= std::time::Duration::from_millis(500), "about once a second");
    writer
        .create_thread(&kiki_tests::conformance::new_thread("th_after", "ws", 1), None)
        .await
        .expect("create");
    until(&mut hearing, Change::Thread("th_after".into())).await;
    writer.close().await;
    other.close().await;
}

/// Waits until `wanted` is among the changes heard.
async fn until(hearing: &mut Hearing, wanted: Change) {
    tokio::time::timeout(kiki_tests::PATIENCE, async {
        while !hearing.recv().await.expect("listening").contains(&wanted) {}
    })
    .await
    .unwrap_or_else(|_| panic!("never heard {wanted:?}"))
}

mod home {
    //! A home on Postgres through the real binaries: config, password file, status,
    //! doctor, backup and `kiki store migrate` both ways.

    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;

    use kiki_daemon::store::{OutboxStore as _, SqliteStore, Store as _};
    use kiki_tests::StoreAccess;
    use kiki_tests::binaries::{Down, kiki, kiki_json, new_home, wait_for_turns};
    use kiki_tests::postgres::TestDatabase;

    /// Writes the home's config for `database`, its password in an owner-only file.
    fn on_postgres(home: &Path, database: &TestDatabase) {
        std::fs::create_dir_all(home).expect("home");
        let password = home.join("pg.pass");
        std::fs::write(&password, format!("{}\n", database.options.password.as_deref().expect("password")))
            .expect("password file");
        std::fs::set_permissions(&password, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let config = format!(
            "# the team's database\n[store]\nurl = \"{}\"\npassword_file = \"pg.pass\"\n",
            database.options.url
        );
        std::fs::write(home.join("config.toml"), config).expect("config");
    }

    /// While its database cannot be reached a home answers at once that it is unavailable,
    /// naming the database (never a hang past the client's bound, never the password), and
    /// once it can be reached again the home serves by itself, nothing answered lost.
    #[tokio::test]
    async fn a_home_whose_database_goes_away_says_so_and_comes_back_by_itself() {
        let database = TestDatabase::create().await;
        let (_dir, home) = new_home();
        let _down = Down(&home);
        on_postgres(&home, &database);
        kiki_json(&home, &["up"]);
        let created = kiki_json(&home, &["thread", "create", "--prompt", "before", "--wait"]);
        let id = created["thread"]["id"].as_str().expect("id").to_string();

        database.reachable(false).await;
        let started = std::time::Instant::now();
        let out = kiki(&home, &["--json", "thread", "say", &id, "meanwhile"]);
        assert!(!out.status.success(), "nothing can be stored meanwhile");
        let error: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json error");
        let message = error["error"]["message"].as_str().unwrap_or_default();
        assert_eq!(error["error"]["code"], "unavailable", "{error}");
        assert!(message.contains(&database.options.url) && message.contains("reconnects"), "{message}");
        let password = database.options.password.as_deref().expect("password");
        assert!(!message.contains(password), "{message}");
        assert!(started.elapsed() < std::time::Duration::from_secs(5), "answered in {:?}", started.elapsed());

        database.reachable(true).await;
        kiki_json(&home, &["thread", "say", &id, "after"]);
        let page = wait_for_turns(&home, &id, 2);
        let mut inputs: Vec<&str> =
            page["turns"].as_array().expect("turns").iter().filter_map(|t| t["input"].as_str()).collect();
        inputs.sort_unstable();
        assert_eq!(inputs, ["after", "before"], "the refused input was never stored: {page}");
    }

    #[tokio::test]
    async fn a_home_runs_on_postgres_and_never_shows_its_password() {
        let database = TestDatabase::create().await;
        let (_dir, home) = new_home();
        let _down = Down(&home);
        on_postgres(&home, &database);
        let password = database.options.password.clone().expect("password");

        // A password file others may read is refused, naming the key.
        std::fs::set_permissions(home.join("pg.pass"), std::fs::Permissions::from_mode(0o644))
            .expect("chmod");
        let out = kiki(&home, &["up"]);
        assert!(!out.status.success(), "a readable password file is refused");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(said.contains("store.password_file") && said.contains("chmod 600"), "{said}");
        std::fs::set_permissions(home.join("pg.pass"), std::fs::Permissions::from_mode(0o600))
            .expect("chmod");

        kiki_json(&home, &["up"]);
        let status = kiki_json(&home, &["status"]);
        assert_eq!(status["store"], database.options.url, "the store, without a password");
        let created = kiki_json(&home, &["thread", "create", "--prompt", "hello", "--wait"]);
        let id = created["thread"]["id"].as_str().expect("id").to_string();
        kiki_json(&home, &["thread", "say", &id, "again"]);
        wait_for_turns(&home, &id, 2);
        let doctor = kiki_json(&home, &["doctor"]);
        let store =
            doctor["findings"].as_array().expect("findings").iter().find(|f| f["check"] == "store").cloned();
        let store = store.expect("a store finding");
        assert_eq!(store["ok"], true, "{store}");
        assert!(store["message"].as_str().expect("message").contains("every migration applied"), "{store}");
        let backup = kiki(&home, &["backup", &home.join("..").join("copy").display().to_string()]);
        assert!(!backup.status.success(), "kiki backup does not copy a database server's store");
        assert!(String::from_utf8_lossy(&backup.stderr).contains("pg_dump"), "says what to run instead");

        // kill -9: what was answered is there when the home comes back.
        let pid = kiki_tests::binaries::pid_of(&home);
        kiki_tests::binaries::kill_9(&pid);
        kiki_json(&home, &["up"]);
        let read = kiki_json(&home, &["thread", "read", &id]);
        assert_eq!(read["turns"].as_array().expect("turns").len(), 2, "{read}");
        kiki_json(&home, &["down"]);
        let check = std::process::Command::new(kiki_tests::binaries::binary("kikid"))
            .arg("--home")
            .arg(&home)
            .arg("--check")
            .output()
            .expect("kikid --check");
        let findings = String::from_utf8_lossy(&check.stdout);
        assert!(check.status.success(), "kikid --check on a stopped Postgres home: {findings}");
        assert!(findings.contains("every migration applied"), "{findings}");

        for file in std::fs::read_dir(&home).expect("home").flatten() {
            let text = std::fs::read(file.path()).unwrap_or_default();
            let shown = String::from_utf8_lossy(&text);
            if file.file_name() != "pg.pass" {
                assert!(!shown.contains(&password), "{} shows the password", file.path().display());
            }
        }
    }

    /// Every table of both schemas is copied, every column of it — the session tools'
    /// records, the home's identity, an outbox entry's trace — and the copy holds what its
    /// source did, row for row, both ways.
    #[tokio::test]
    async fn a_store_migrates_to_postgres_and_back_with_every_row() {
        let database = TestDatabase::create().await;
        let (dir, home) = new_home();
        let _down = Down(&home);
        kiki_json(&home, &["up"]);
        let created = kiki_json(&home, &["thread", "create", "--prompt", "one", "--wait"]);
        let id = created["thread"]["id"].as_str().expect("id").to_string();
        kiki_json(&home, &["thread", "say", &id, "two"]);
        wait_for_turns(&home, &id, 2);
        let room = kiki_json(&home, &["room", "create", "--host", &id, "--name", "r"]);
        assert!(room["room"]["id"].is_string(), "{room}");
        let todo = r#"{"todos": [{"title": "copy every table", "status": "in_progress"}]}"#;
        kiki_json(&home, &["tool", "call", "TodoList", todo, "--thread", &id]);
        let cron = r#"{"action": "create", "cron": "0 3 * * *", "prompt": "nightly"}"#;
        let cron = kiki_json(&home, &["tool", "call", "Cron", cron, "--thread", &id]);
        let cron: serde_json::Value =
            serde_json::from_str(cron["structured"].as_str().expect("made")).expect("json");
        let cron = cron["id"].as_str().expect("its id").to_string();

        let to = database.url_with_password();
        let running = kiki(&home, &["store", "migrate", "--to", &to]);
        assert!(!running.status.success(), "a running home's store is not copied");
        assert!(String::from_utf8_lossy(&running.stderr).contains("kiki down"), "{running:?}");
        kiki_json(&home, &["down"]);
        // A send to another home still pending, in the trace of the call that made it.
        let file = home.join("kiki.db");
        let store = SqliteStore::open_path(&file).await.expect("the home's store");
        let pending = kiki_tests::conformance::outbox_entry("msg_away", "k_away", i64::MAX - 1);
        store.outbox_insert(&pending).await.expect("an outbox entry");
        store.close().await;
        let source = StoreAccess::Sqlite(file).dump().await;
        for (table, rows) in [("tool_calls", 2), ("todo_lists", 1), ("crons", 1), ("home", 1), ("outbox", 1)]
        {
            assert_eq!(source[table].len(), rows, "{table}: {:?}", source[table]);
        }
        assert!(source["outbox"][0].contains(&pending.trace), "{:?}", source["outbox"]);

        let migrated = kiki_json(&home, &["store", "migrate", "--to", &to]);
        assert_eq!(migrated["to"], database.options.url, "named without its password: {migrated}");
        let rows = migrated["rows"].clone();
        for (table, copied) in &source {
            assert_eq!(rows[table], copied.len(), "{table} counted: {migrated}");
        }
        let on_postgres = StoreAccess::Postgres(to.clone());
        assert_eq!(on_postgres.dump().await, source, "the copy on Postgres holds what the file did");
        let again = kiki(&home, &["store", "migrate", "--to", &to]);
        assert!(!again.status.success(), "a target with data is refused");
        assert!(String::from_utf8_lossy(&again.stderr).contains("not empty"), "{again:?}");

        // The home on its copy, then copied back into a new SQLite file.
        super::home::on_postgres(&home, &database);
        kiki_json(&home, &["up"]);
        let read = kiki_json(&home, &["thread", "read", &id]);
        assert_eq!(read["turns"].as_array().expect("turns").len(), 2, "{read}");
        kiki_json(&home, &["thread", "say", &id, "three"]);
        wait_for_turns(&home, &id, 3);
        let listed = kiki_json(&home, &["tool", "call", "Cron", r#"{"action": "list"}"#, "--thread", &id]);
        assert!(
            listed["structured"].as_str().is_some_and(|s| s.contains(&cron)),
            "the cron came along: {listed}"
        );
        kiki_json(&home, &["down"]);
        let back = dir.path().join("back.db");
        let migrated = kiki_json(&home, &["store", "migrate", "--to", &back.display().to_string()]);
        assert_eq!(migrated["rows"]["turns"], 3, "{migrated}");
        let copied_back = StoreAccess::Sqlite(back.clone()).dump().await;
        assert_eq!(copied_back, on_postgres.dump().await, "the file copied back holds what Postgres did");
        std::fs::write(home.join("config.toml"), format!("[store]\nurl = \"sqlite://{}\"\n", back.display()))
            .expect("config");
        kiki_json(&home, &["up"]);
        kiki_json(&home, &["thread", "say", &id, "four"]);
        let turns = wait_for_turns(&home, &id, 4);
        assert_eq!(turns["turns"].as_array().expect("turns").len(), 4, "{turns}");
    }
}
