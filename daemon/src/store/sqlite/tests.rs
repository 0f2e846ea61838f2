//! Unit tests of the SQLite backend: statement plans, migrations, the writer's batches.

use super::*;
use rusqlite::StatementStatus;

#[test]
fn a_page_is_cut_in_order_without_re_preparing_its_statement() {
    let mut conn = Connection::open_in_memory().expect("open");
    migrate(&mut conn).expect("migrate");
    for _ in 0..5 {
        conn.execute("INSERT INTO events (thread_id, kind, at) VALUES ('t', 'lifecycle', 0)", [])
            .expect("event");
    }
    let sql = "SELECT seq FROM events WHERE thread_id = ? AND seq > ? ORDER BY seq";
    for (after, limit, expected) in [(0, 2, vec![1, 2]), (1, 3, vec![2, 3, 4]), (3, 10, vec![4, 5])] {
        let seqs =
            page(&conn, sql, params!["t", after], limit, |row| Ok(row.get::<_, i64>(0)?)).expect("page");
        assert_eq!(seqs, expected, "after {after}, limit {limit}");
    }
    let statement = conn.prepare_cached(sql).expect("cached");
    assert_eq!(statement.get_status(StatementStatus::RePrepare), 0);
    // What `page` avoids: a bound LIMIT re-prepares at every execution.
    let mut limited = conn.prepare_cached(&format!("{sql} LIMIT ?")).expect("limited");
    for limit in [1, 2] {
        limited.query_map(params!["t", 0, limit], |_| Ok(())).expect("query").for_each(drop);
    }
    assert!(limited.get_status(StatementStatus::RePrepare) > 0);
}

/// `EXPLAIN QUERY PLAN` of `sql`, its steps joined by "; ".
fn query_plan(conn: &Connection, sql: &str) -> String {
    let mut statement = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).expect("plan");
    let n = statement.parameter_count();
    let rows = statement
        .query_map(rusqlite::params_from_iter(std::iter::repeat_n("x", n)), |row| row.get::<_, String>(3))
        .expect("rows");
    rows.collect::<Result<Vec<_>, _>>().expect("plan rows").join("; ")
}

#[test]
fn undelivering_and_unqueueing_messages_search_indexes_instead_of_scanning_history() {
    let mut conn = Connection::open_in_memory().expect("open");
    migrate(&mut conn).expect("migrate");
    let plan = |sql: &str| query_plan(&conn, sql);
    let undeliver = plan(undeliver_turn_messages_sql());
    assert!(!undeliver.contains("SCAN"), "{undeliver}");
    assert!(undeliver.contains("inputs_by_turn"), "{undeliver}");
    let thread = plan(UNQUEUE_THREAD_MESSAGES);
    assert!(thread.contains("inputs_queued (thread_id=?)"), "{thread}");
    // One pass over the queued input, whichever index it walks.
    let peer = plan(UNQUEUE_PEER_MESSAGES);
    assert!(peer.contains("turn_id=?") || peer.contains("inputs_queued"), "{peer}");
    // Overdue messages: a thread's among its pending ones, all of them by deadline.
    let thread_overdue = plan(overdue_thread_messages_sql());
    assert!(thread_overdue.contains("messages_pending_by_target (target_thread=?)"), "{thread_overdue}");
    let overdue = plan(overdue_messages_sql());
    assert!(overdue.starts_with("SEARCH messages USING INDEX messages_by_deadline"), "{overdue}");
}

#[test]
fn the_outbox_statements_by_peer_walk_its_entries_in_flight() {
    let mut conn = Connection::open_in_memory().expect("open");
    migrate(&mut conn).expect("migrate");
    for (sql, walk) in [
        (format!("SELECT * {}", outbox_due_sql()), "outbox_due (peer_home_id=? AND next_attempt_at<?)"),
        (
            format!("SELECT * {}", outbox_unsettled_sql()),
            "outbox_unsettled (peer_home_id=? AND next_attempt_at<?)",
        ),
        (outbox_pending_sql().to_string(), "outbox_due (peer_home_id=?)"),
        // Not the entries no longer followed up (due at i64::MAX), however many there are.
        (
            outbox_retry_now_sql().to_string(),
            "outbox_due (peer_home_id=? AND next_attempt_at>? AND next_attempt_at<?)",
        ),
        (outbox_defer_sql().to_string(), "outbox_due (peer_home_id=? AND next_attempt_at<?)"),
        (outbox_next_due_sql().to_string(), "outbox_due (peer_home_id=? AND next_attempt_at>?)"),
        (outbox_next_unsettled_sql().to_string(), "outbox_unsettled (peer_home_id=? AND next_attempt_at>?"),
    ] {
        let plan = query_plan(&conn, &sql);
        // (A covering index serves a MIN from the index alone.)
        assert!(plan.contains(&format!("INDEX {walk}")), "{sql}: {plan}");
    }
}

#[test]
fn a_message_is_not_copied_into_its_input_and_its_turn_still_gets_its_content() {
    let mut conn = Connection::open_in_memory().expect("open");
    migrate(&mut conn).expect("migrate");
    conn.execute_batch(
        "INSERT INTO threads (id, workspace_id, cwd, title, profile, created_at, updated_at)
         VALUES ('th_a', 'w', '/', 't', 'p', 0, 0)",
    )
    .expect("thread");
    let content = "a long message ".repeat(1_000);
    let message = NewMessage {
        room: None,
        id: "msg_1".into(),
        target_thread: "th_a".into(),
        source: None,
        content: content.clone(),
        key_scope: String::new(),
        key: "k".into(),
        request_hash: "h".into(),
        wake: true,
        claim: None,
        receipt: None,
        deadline: None,
        max_agent_wakes: None,
        now: 1,
    };
    accept_message(&conn, &message, &Clock::system()).expect("accept");
    let copies: i64 = conn
        .query_row("SELECT COUNT(*) FROM inputs WHERE content <> ''", [], |row| row.get(0))
        .expect("inputs");
    assert_eq!(copies, 0, "the queued input refers to the message");
    let claim = TurnClaim {
        turn_id: "tu_1".into(),
        take_messages: true,
        render: |_| String::new(),
        exec: false,
        budget: None,
        replica: String::new(),
        token_hash: String::new(),
    };
    let claimed =
        claim_turn(&conn, "th_a", &claim, 2, None, &Clock::system()).expect("claim").expect("a turn");
    assert_eq!(claimed.inputs.len(), 1);
    assert_eq!(claimed.inputs[0].content, content, "the turn gets the message's content");
}

#[test]
fn a_send_that_starts_its_turn_is_written_taken_and_one_that_may_not_be_taken_waits_queued() {
    let mut conn = Connection::open_in_memory().expect("open");
    migrate(&mut conn).expect("migrate");
    conn.execute_batch(
        "INSERT INTO threads (id, workspace_id, cwd, title, profile, created_at, updated_at)
         VALUES ('th_a', 'w', '/', 't', 'p', 0, 0)",
    )
    .expect("thread");
    let send = |id: &str, from: Option<&str>, take_messages: bool| NewMessage {
        room: None,
        id: id.into(),
        target_thread: "th_a".into(),
        source: from.map(|t| SourceRef {
            host_id: String::new(),
            thread_id: t.into(),
            workspace_id: String::new(),
        }),
        content: format!("content of {id}"),
        key_scope: String::new(),
        key: id.into(),
        request_hash: "h".into(),
        wake: true,
        claim: Some(TurnClaim {
            turn_id: format!("tu_{id}"),
            take_messages,
            render: |items| items.iter().map(|i| i.content.as_str()).collect::<Vec<_>>().join("|"),
            exec: false,
            budget: None,
            replica: String::new(),
            token_hash: String::new(),
        }),
        receipt: None,
        deadline: None,
        max_agent_wakes: None,
        now: 1,
    };
    let state = |conn: &Connection, id: &str| -> (String, Option<String>, Option<String>) {
        conn.query_row(
            "SELECT m.status, m.turn_id, i.turn_id FROM messages m JOIN inputs i ON i.message_id = m.id
             WHERE m.id = ?",
            [id],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
        )
        .expect("message")
    };
    // A peer message while the thread's communication is off: queued, no turn.
    let SendOutcome::Accepted { turn: None, .. } =
        accept_message(&conn, &send("msg_1", Some("th_peer"), false), &Clock::system()).expect("accept")
    else {
        panic!("a peer message started a turn with communication off")
    };
    assert_eq!(state(&conn, "msg_1"), ("pending".into(), None, None));
    // An external send starts the turn and takes the queued one first (communication on
    // now), in one transaction: both delivered by that turn.
    let SendOutcome::Accepted { turn: Some(claimed), .. } =
        accept_message(&conn, &send("msg_2", None, true), &Clock::system()).expect("accept")
    else {
        panic!("an idle thread did not start a turn")
    };
    assert_eq!(claimed.turn.input, "content of msg_1|content of msg_2");
    let taken = Some("tu_msg_2".to_string());
    assert_eq!(state(&conn, "msg_1"), ("delivered".into(), taken.clone(), taken.clone()));
    assert_eq!(state(&conn, "msg_2"), ("delivered".into(), taken.clone(), taken));
    // The thread runs now: the next send waits queued.
    let SendOutcome::Accepted { turn: None, .. } =
        accept_message(&conn, &send("msg_3", None, true), &Clock::system()).expect("accept")
    else {
        panic!("a running thread started another turn")
    };
    assert_eq!(state(&conn, "msg_3"), ("pending".into(), None, None));
    // Idle again, with msg_3 queued: a peer message while communication is off starts
    // the turn for msg_3 alone, and waits queued itself (its sender hears `pending`).
    conn.execute_batch("UPDATE threads SET running = 0").expect("turn ended");
    let SendOutcome::Accepted { delivered: false, turn: Some(claimed), .. } =
        accept_message(&conn, &send("msg_4", Some("th_peer"), false), &Clock::system()).expect("accept")
    else {
        panic!("the queued send did not start its turn, or the peer message was taken")
    };
    assert_eq!(claimed.turn.input, "content of msg_3");
    let taken = Some("tu_msg_4".to_string());
    assert_eq!(state(&conn, "msg_3"), ("delivered".into(), taken.clone(), taken));
    assert_eq!(state(&conn, "msg_4"), ("pending".into(), None, None));
}

#[tokio::test]
async fn the_outbox_keys_filter_holds_what_the_outbox_held_at_open_and_every_key_since() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("kiki.db");
    let entry = |id: &str, key: &str| OutboxRecord {
        room: None,
        id: id.into(),
        bridge_id: "br_1".into(),
        peer_home_id: "PEER".into(),
        target_session: "th_far".into(),
        source_thread: None,
        source_workspace: String::new(),
        content: "hello".into(),
        key_scope: String::new(),
        key: key.into(),
        request_hash: "h".into(),
        status: OutboxStatus::Pending,
        reason: String::new(),
        remote_message_id: String::new(),
        attempts: 1,
        next_attempt_at: 1,
        created_at: 1,
        updated_at: 1,
        trace: String::new(),
    };
    let first = SqliteStore::open_path(&path).await.expect("open");
    assert_eq!(first.outbox_insert(&entry("msg_1", "old")).await.expect("insert"), None);
    // A second store on the file finds the entry written before it opened, from its
    // filter once filled (a probe reads the outbox until then).
    let store = SqliteStore::open_path(&path).await.expect("open again");
    for _ in 0..500 {
        if !store.outbox_keys.may_hold("", "never used") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(!store.outbox_keys.may_hold("", "never used"), "filled");
    let found = store.outbox_by_key("PEER", "", "old").await.expect("probe");
    assert_eq!(found.map(|e| e.id).as_deref(), Some("msg_1"));
    assert_eq!(store.outbox_insert(&entry("msg_2", "new")).await.expect("insert"), None);
    let found = store.outbox_by_key("PEER", "", "new").await.expect("probe");
    assert_eq!(found.map(|e| e.id).as_deref(), Some("msg_2"), "a key written since");
    assert_eq!(store.outbox_by_key("PEER", "", "never used").await.expect("probe"), None);
}

#[test]
fn a_failed_migration_says_why_in_one_line() {
    let mut conn = Connection::open_in_memory().expect("open");
    migrate(&mut conn).expect("migrate");
    conn.execute("DELETE FROM schema_migrations WHERE version = 16", []).expect("forget 16");
    conn.execute("CREATE TABLE outbox_new (x)", []).expect("in the way");
    let err = migrate(&mut conn).expect_err("fails").to_string();
    assert!(err.starts_with("migration 16") && err.contains("already exists"), "{err}");
    assert!(!err.contains('\n') && !err.contains("CREATE"), "{err}");
}

#[test]
fn a_database_from_a_newer_kikid_is_refused_untouched() {
    let mut conn = Connection::open_in_memory().expect("open");
    migrate(&mut conn).expect("migrate");
    conn.execute("INSERT INTO schema_migrations (version, name, applied_at) VALUES (99, 'future', 0)", [])
        .expect("a newer version");
    let refused = migrate(&mut conn).expect_err("refused");
    assert!(refused.to_string().contains("schema version 99"), "{refused}");
    let versions: i64 =
        conn.query_row("SELECT COUNT(*) FROM schema_migrations", [], |row| row.get(0)).expect("count");
    assert_eq!(versions as usize, MIGRATIONS.len() + 1, "nothing applied or removed");
}

#[test]
fn migration_9_places_each_threads_latest_turn_in_its_event_log() {
    let conn = Connection::open_in_memory().expect("open");
    let (before, nine): (Vec<_>, Vec<_>) = MIGRATIONS.iter().partition(|(version, _, _)| *version < 9);
    for (_, _, sql) in before {
        conn.execute_batch(sql).expect("migration");
    }
    conn.execute_batch(
        "INSERT INTO threads (id, workspace_id, cwd, title, profile, created_at, updated_at)
             VALUES ('a', 'w', '/', 't', 'p', 0, 0), ('b', 'w', '/', 't', 'p', 0, 0);
         INSERT INTO events (thread_id, kind, lifecycle, at) VALUES ('a', 'lifecycle', 'created', 0);  -- 1
         INSERT INTO events (thread_id, kind, lifecycle, at) VALUES ('b', 'lifecycle', 'created', 0);  -- 2
         INSERT INTO turns (id, thread_id, seq, status, input, started_at) VALUES
             ('a1', 'a', 1, 'completed', '', 0), ('a2', 'a', 2, 'running', '', 0),
             ('b1', 'b', 1, 'completed', '', 0);
         INSERT INTO events (thread_id, kind, turn_id, at) VALUES ('a', 'terminal', 'a1', 0);  -- 3
         INSERT INTO events (thread_id, kind, turn_id, at) VALUES ('b', 'terminal', 'b1', 0);  -- 4
         INSERT INTO events (thread_id, kind, lifecycle, at) VALUES ('a', 'lifecycle', 'archived', 0);  -- 5",
    )
    .expect("history");
    for (_, _, sql) in nine {
        conn.execute_batch(sql).expect("migration 9");
    }
    let placed: Vec<(String, Option<i64>)> = conn
        .prepare("SELECT id, events_before FROM turns ORDER BY id")
        .expect("query")
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .expect("rows")
        .collect::<Result<_, _>>()
        .expect("turns");
    let expected = [("a1", None), ("a2", Some(3)), ("b1", Some(2))];
    assert_eq!(placed, expected.map(|(id, at)| (id.to_string(), at)));
}
