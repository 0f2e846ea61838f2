//! The session tools' records: the call history, the todo list's revisions, crons (at most
//! so many per thread; a fire committed with its input, once).

use kiki_daemon::store::{CronRecord, Store, ToolCallRecord, ToolOutcome};

use super::{new_thread, user};

fn call(thread: &str, name: &str, outcome: ToolOutcome) -> ToolCallRecord {
    ToolCallRecord {
        seq: 0,
        thread_id: thread.into(),
        turn_id: None,
        name: name.into(),
        arguments: "{}".into(),
        outcome,
        result: "r".into(),
        duration_ms: 3,
        at: 7,
    }
}

/// Calls are numbered per thread from 1 and read in pages after a seq.
pub async fn tool_calls_are_numbered_per_thread_and_paged(store: &dyn Store) {
    for thread in ["th_a", "th_b"] {
        store.create_thread(&new_thread(thread, "ws", 1), None).await.expect("create");
    }
    assert_eq!(store.record_tool_call(&call("th_a", "Read", ToolOutcome::Ok)).await.expect("kept"), 1);
    assert_eq!(store.record_tool_call(&call("th_a", "Bash", ToolOutcome::Denied)).await.expect("kept"), 2);
    assert_eq!(store.record_tool_call(&call("th_b", "Edit", ToolOutcome::Error)).await.expect("kept"), 1);
    let mut with_turn = call("th_a", "Write", ToolOutcome::Ok);
    with_turn.turn_id = Some("tu_1".into());
    store.record_tool_call(&with_turn).await.expect("kept");
    let all = store.tool_calls("th_a", 0, 10).await.expect("read");
    assert_eq!(
        all.iter().map(|c| (c.seq, c.name.as_str())).collect::<Vec<_>>(),
        [(1, "Read"), (2, "Bash"), (3, "Write")]
    );
    assert_eq!(all[1], ToolCallRecord { seq: 2, ..call("th_a", "Bash", ToolOutcome::Denied) });
    assert_eq!(all[2].turn_id.as_deref(), Some("tu_1"));
    let page = store.tool_calls("th_a", 1, 1).await.expect("read");
    assert_eq!(page.iter().map(|c| c.seq).collect::<Vec<_>>(), [2]);
}

/// A todo write names the revision it read: the first wins, a stale one writes nothing.
pub async fn a_todo_write_on_a_stale_revision_writes_nothing(store: &dyn Store) {
    store.create_thread(&new_thread("th_a", "ws", 1), None).await.expect("create");
    assert_eq!(store.todo("th_a").await.expect("read"), None);
    assert!(store.put_todo("th_a", 0, "one").await.expect("write"));
    assert!(!store.put_todo("th_a", 0, "again from nothing").await.expect("write"));
    assert!(store.put_todo("th_a", 1, "two").await.expect("write"));
    assert!(!store.put_todo("th_a", 1, "stale").await.expect("write"));
    let stored = store.todo("th_a").await.expect("read").expect("there");
    assert_eq!((stored.revision, stored.body.as_str()), (2, "two"));
}

fn cron(id: &str, thread: &str, next: i64) -> CronRecord {
    CronRecord {
        id: id.into(),
        thread_id: thread.into(),
        cron: "*/5 * * * *".into(),
        prompt: "p".into(),
        recurring: true,
        created_at: 1,
        next_fire_at: next,
    }
}

/// Crons are kept in the order they were made, at most `max` a thread; a fire queues its
/// input and moves the cron on in one step, and only the first fire at a time counts.
pub async fn a_cron_fires_once_per_time_and_a_thread_holds_so_many(store: &dyn Store) {
    for thread in ["th_a", "th_b"] {
        store.create_thread(&new_thread(thread, "ws", 1), None).await.expect("create");
    }
    assert!(store.add_cron(&cron("cr_1", "th_a", 100), 2).await.expect("add"));
    assert!(store.add_cron(&cron("cr_2", "th_a", 200), 2).await.expect("add"));
    assert!(!store.add_cron(&cron("cr_3", "th_a", 300), 2).await.expect("add"), "full");
    assert!(store.add_cron(&cron("cr_4", "th_b", 50), 2).await.expect("add"), "another thread's");
    let ids = |crons: Vec<CronRecord>| crons.into_iter().map(|c| c.id).collect::<Vec<_>>();
    assert_eq!(ids(store.crons(Some("th_a")).await.expect("list")), ["cr_1", "cr_2"]);
    assert_eq!(ids(store.crons(None).await.expect("list")), ["cr_1", "cr_2", "cr_4"]);

    let due = cron("cr_1", "th_a", 100);
    assert!(store.fire_cron(&due, &user("in_f1", "fire"), Some(400)).await.expect("fire"));
    assert!(
        !store.fire_cron(&due, &user("in_f2", "fire again"), Some(400)).await.expect("fire"),
        "fired once"
    );
    assert_eq!(store.threads_with_queued_input().await.expect("queued"), ["th_a"]);
    assert_eq!(store.crons(Some("th_a")).await.expect("list")[0].next_fire_at, 400);
    // A last fire deletes it; a delete of what is gone says so.
    assert!(store.fire_cron(&cron("cr_1", "th_a", 400), &user("in_f3", "last"), None).await.expect("fire"));
    assert_eq!(ids(store.crons(Some("th_a")).await.expect("list")), ["cr_2"]);
    assert!(store.delete_cron("th_a", "cr_2").await.expect("delete"));
    assert!(!store.delete_cron("th_a", "cr_2").await.expect("delete"));
    assert!(!store.delete_cron("th_a", "cr_4").await.expect("delete"), "another thread's stays");
}

/// Each commit that changes the crons (one made, fired, deleted) publishes it, so the
/// scheduler of every replica looks again; a write that changed none publishes nothing.
pub async fn every_change_to_the_crons_is_published(store: &dyn Store) {
    use kiki_daemon::store::Change;
    store.create_thread(&new_thread("th_a", "ws", 1), None).await.expect("create");
    let heard = std::sync::Arc::new(std::sync::Mutex::new(Vec::<Change>::new()));
    let listener = heard.clone();
    store.changes().listen(std::sync::Arc::new(move |changes: &[Change]| {
        listener.lock().expect("lock").extend_from_slice(changes);
    }));
    let crons_changed = || std::mem::take(&mut *heard.lock().expect("lock")).contains(&Change::Crons);
    assert!(store.add_cron(&cron("cr_1", "th_a", 100), 1).await.expect("add"));
    assert!(crons_changed(), "made");
    assert!(!store.add_cron(&cron("cr_2", "th_a", 100), 1).await.expect("add"), "full");
    assert!(!crons_changed(), "none made");
    let due = cron("cr_1", "th_a", 100);
    assert!(store.fire_cron(&due, &user("in_f1", "fire"), Some(400)).await.expect("fire"));
    assert!(crons_changed(), "moved on by its fire");
    assert!(!store.fire_cron(&due, &user("in_f2", "fire again"), Some(400)).await.expect("fire"));
    assert!(!crons_changed(), "fired once");
    assert!(!store.delete_cron("th_a", "cr_9").await.expect("delete"));
    assert!(!crons_changed(), "none deleted");
    assert!(store.delete_cron("th_a", "cr_1").await.expect("delete"));
    assert!(crons_changed(), "deleted");
}
