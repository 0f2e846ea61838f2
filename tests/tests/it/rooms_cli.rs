//! `kiki room …` end to end: the real `kikid` and `kiki` binaries (build them first with
//! `cargo build --workspace --bins`), a room hosted by an `echo` thread, posts by the owner,
//! and what an answered post is after `kill -9` of kikid.

use std::path::Path;
use std::time::{Duration, Instant};

use kiki_tests::binaries::{Down, kiki, kiki_fails, kiki_json, kill_9, new_home, pid_of, wait_for_turns};

/// A new, empty thread of the home on the `echo` profile: its id.
fn echo_thread(home: &Path, title: &str) -> String {
    let created = kiki_json(home, &["thread", "create", "--profile", "echo", "--title", title]);
    created["id"].as_str().expect("thread id").to_string()
}

/// A room hosted by `host`, named `name`: its id.
fn room(home: &Path, host: &str, name: &str) -> String {
    let created = kiki_json(home, &["room", "create", "--host", host, "--name", name]);
    assert_eq!(created["room"]["host"], host, "{created}");
    assert_eq!(created["room"]["name"], name, "{created}");
    created["room"]["id"].as_str().expect("room id").to_string()
}

/// The roster ids a send (or an entry) woke.
fn woke(value: &serde_json::Value) -> Vec<String> {
    value["woke"]
        .as_array()
        .map(|ids| ids.iter().filter_map(|id| id.as_str().map(String::from)).collect())
        .unwrap_or_default()
}

/// The owner's post wakes the host unless it mentions someone, a member joins once, and the
/// log reads back in one order with the roster.
#[test]
fn owner_posts_wake_the_host_or_whom_they_mention_in_one_order() {
    let (_dir, home) = new_home();
    let _down = Down(&home);
    kiki_json(&home, &["up"]);
    let host = echo_thread(&home, "host");
    let member = echo_thread(&home, "member");
    let room = room(&home, &host, "review");

    assert_eq!(kiki_json(&home, &["room", "add", &room, &member])["added"], true);
    assert_eq!(kiki_json(&home, &["room", "add", &room, &member])["added"], false, "already in the room");

    // No mention: the owner's post wakes the host. No key given: one is made and returned.
    let first = kiki_json(&home, &["room", "send", &room, "--content", "hello room"]);
    assert_eq!(first["room_seq"], 1, "{first}");
    assert_eq!(woke(&first), vec![host.clone()], "{first}");
    assert_eq!(first["status"], "delivered", "{first}");
    assert_eq!(first["replayed"], false, "{first}");
    let key = first["idempotency_key"].as_str().expect("key").to_string();
    assert!(!key.is_empty(), "a key is made for a room send without one: {first}");

    // A mention wakes whom it names (not the host).
    let second = kiki_json(
        &home,
        &["room", "send", &room, "--content", "over to you", "--mention", &member, "--key", "k2"],
    );
    assert_eq!(second["room_seq"], 2, "{second}");
    assert_eq!(woke(&second), vec![member.clone()], "{second}");
    assert_eq!(second["idempotency_key"], "k2", "{second}");

    // The same key and content again: the original entry, replayed, nothing posted twice.
    let again = kiki_json(&home, &["room", "send", &room, "--content", "hello room", "--key", &key]);
    assert_eq!(again["replayed"], true, "{again}");
    assert_eq!(again["message_id"], first["message_id"], "{again}");
    assert_eq!(again["room_seq"], 1, "{again}");

    let read = kiki_json(&home, &["room", "read", &room]);
    assert_eq!(read["room"], room.as_str(), "{read}");
    assert_eq!(read["name"], "review", "{read}");
    assert_eq!(read["host"], host.as_str(), "{read}");
    assert_eq!(read["paused"], false, "{read}");
    assert_eq!(read["archived"], false, "{read}");
    let members = read["members"].as_array().expect("members");
    assert_eq!(members.len(), 2, "{read}");
    assert_eq!((&members[0]["id"], &members[0]["role"]), (&host.as_str().into(), &"host".into()), "{read}");
    assert_eq!(
        (&members[1]["id"], &members[1]["role"]),
        (&member.as_str().into(), &"member".into()),
        "{read}"
    );
    assert_eq!(members[1]["kind"], "thread", "{read}");
    let entries = read["entries"].as_array().expect("entries");
    assert_eq!(entries.len(), 2, "both entries, the replay not again: {read}");
    assert_eq!((&entries[0]["seq"], &entries[0]["content"]), (&1.into(), &"hello room".into()), "{read}");
    assert_eq!((&entries[1]["seq"], &entries[1]["content"]), (&2.into(), &"over to you".into()), "{read}");
    assert_eq!(entries[0]["author"], "", "the owner's post has no author thread: {read}");
    assert_eq!(entries[0]["id"], first["message_id"], "{read}");
    assert_eq!(woke(&entries[0]), vec![host.clone()], "{read}");
    assert_eq!(entries[1]["mentions"], serde_json::json!([member]), "{read}");
    assert_eq!(woke(&entries[1]), vec![member.clone()], "{read}");

    // The cursor is always given: nothing comes after the last entry yet.
    let next = read["next_cursor"].as_str().expect("next_cursor is always set").to_string();
    let after = kiki_json(&home, &["room", "read", &room, "--after-id", &next]);
    assert_eq!(after["entries"], serde_json::json!([]), "{after}");
    let paged = kiki_json(&home, &["room", "read", &room, "--limit", "1"]);
    assert_eq!(paged["entries"].as_array().map(Vec::len), Some(1), "{paged}");
    let cursor = paged["next_cursor"].as_str().expect("next_cursor").to_string();
    let rest = kiki_json(&home, &["room", "read", &room, "--after-id", &cursor]);
    assert_eq!(rest["entries"][0]["seq"], 2, "{rest}");

    // Each woken echo thread ran a turn that took the post.
    let host_turn = &wait_for_turns(&home, &host, 1)["turns"][0];
    assert!(host_turn["output"].as_str().unwrap_or_default().contains("hello room"), "{host_turn}");
    let member_turn = &wait_for_turns(&home, &member, 1)["turns"][0];
    assert!(member_turn["output"].as_str().unwrap_or_default().contains("over to you"), "{member_turn}");
}

/// Paused: posts are kept and wake nobody; resumed: they wake again; archived: refused.
#[test]
fn a_paused_room_wakes_nobody_and_an_archived_one_takes_no_posts() {
    let (_dir, home) = new_home();
    let _down = Down(&home);
    kiki_json(&home, &["up"]);
    let host = echo_thread(&home, "host");
    let room = room(&home, &host, "quiet");

    let paused = kiki_json(&home, &["room", "pause", &room]);
    assert_eq!(paused["changed"], true, "{paused}");
    assert_eq!(paused["room"]["paused"], true, "{paused}");
    assert_eq!(kiki_json(&home, &["room", "pause", &room])["changed"], false, "already paused");
    let quiet = kiki_json(&home, &["room", "send", &room, "--content", "anyone?"]);
    assert_eq!(quiet["room_seq"], 1, "the post is kept: {quiet}");
    assert!(woke(&quiet).is_empty(), "a paused room wakes nobody: {quiet}");
    let read = kiki_json(&home, &["room", "read", &room]);
    assert_eq!(read["paused"], true, "{read}");
    assert_eq!(read["entries"].as_array().map(Vec::len), Some(1), "{read}");

    let resumed = kiki_json(&home, &["room", "resume", &room]);
    assert_eq!(resumed["changed"], true, "{resumed}");
    assert_eq!(resumed["room"]["paused"], false, "{resumed}");
    let awake = kiki_json(&home, &["room", "send", &room, "--content", "back"]);
    assert_eq!(awake["room_seq"], 2, "{awake}");
    assert_eq!(woke(&awake), vec![host.clone()], "{awake}");

    let archived = kiki_json(&home, &["room", "archive", &room]);
    assert_eq!(archived["changed"], true, "{archived}");
    assert_eq!(archived["room"]["archived"], true, "{archived}");
    let (code, error) = kiki_fails(&home, &["room", "send", &room, "--content", "too late"]);
    assert_eq!(code, Some(6), "wrong state: {error}");
    assert_eq!(error["error"]["code"], "failed_precondition", "{error}");
    assert!(error["error"]["message"].as_str().unwrap_or_default().contains("archived"), "{error}");
    // Still readable, with what it held.
    let read = kiki_json(&home, &["room", "read", &room]);
    assert_eq!(read["archived"], true, "{read}");
    assert_eq!(read["entries"].as_array().map(Vec::len), Some(2), "{read}");
}

/// `kiki room list`: newest first, each room with its host, roster, state and entry count.
#[test]
fn rooms_list_newest_first_with_their_state() {
    let (_dir, home) = new_home();
    let _down = Down(&home);
    kiki_json(&home, &["up"]);
    let host = echo_thread(&home, "host");
    let member = echo_thread(&home, "member");
    let older = room(&home, &host, "older");
    let newer = room(&home, &host, "newer");
    kiki_json(&home, &["room", "add", &newer, &member]);
    kiki_json(&home, &["room", "send", &newer, "--content", "one"]);
    kiki_json(&home, &["room", "pause", &older]);

    let list = kiki_json(&home, &["room", "list"]);
    let rooms = list["rooms"].as_array().expect("rooms");
    assert_eq!(rooms.len(), 2, "{list}");
    assert_eq!(rooms[0]["id"], newer.as_str(), "newest first: {list}");
    assert_eq!(rooms[1]["id"], older.as_str(), "{list}");
    assert_eq!(rooms[0]["host"], host.as_str(), "{list}");
    assert_eq!(rooms[0]["members"].as_array().map(Vec::len), Some(2), "the host and the member: {list}");
    assert_eq!(rooms[0]["entries"], 1, "{list}");
    assert_eq!(rooms[0]["paused"], false, "{list}");
    assert_eq!(rooms[1]["paused"], true, "{list}");
    assert_eq!(rooms[1]["entries"], 0, "{list}");

    // One per page: the cursor goes on to the older one.
    let first = kiki_json(&home, &["room", "list", "--limit", "1"]);
    assert_eq!(first["rooms"][0]["id"], newer.as_str(), "{first}");
    let cursor = first["next_cursor"].as_str().expect("next_cursor").to_string();
    let second = kiki_json(&home, &["room", "list", "--limit", "1", "--cursor", &cursor]);
    assert_eq!(second["rooms"][0]["id"], older.as_str(), "{second}");
}

/// As text: stdout holds the result, the made key and the next cursor go to stderr.
#[test]
fn room_text_output_puts_hints_on_stderr() {
    let (_dir, home) = new_home();
    let _down = Down(&home);
    kiki_json(&home, &["up"]);
    let host = echo_thread(&home, "host");
    let room = room(&home, &host, "text");

    let sent = kiki(&home, &["room", "send", &room, "--content", "hi"]);
    assert!(sent.status.success(), "{}", String::from_utf8_lossy(&sent.stderr));
    let stdout = String::from_utf8_lossy(&sent.stdout);
    let stderr = String::from_utf8_lossy(&sent.stderr);
    assert!(stdout.starts_with(&format!("{room} #1 ")), "{stdout}");
    assert!(stdout.contains(&format!("delivered (woke: {host})")), "{stdout}");
    assert!(stderr.starts_with("key: ") && stderr.contains("(repeat it to retry)"), "{stderr}");
    // Repeating the made key replays the post.
    let key = stderr["key: ".len()..].split_whitespace().next().expect("the key").to_string();
    let again = kiki(&home, &["room", "send", &room, "--content", "hi", "--key", &key]);
    let stdout = String::from_utf8_lossy(&again.stdout);
    assert!(stdout.contains(&format!("{room} #1 ")) && stdout.contains("(replayed)"), "{stdout}");
    assert!(again.stderr.is_empty(), "a key given is not printed again");

    let read = kiki(&home, &["room", "read", &room]);
    assert!(read.status.success(), "{}", String::from_utf8_lossy(&read.stderr));
    let stdout = String::from_utf8_lossy(&read.stdout);
    assert!(stdout.starts_with(&format!("{room}  text\n")), "{stdout}");
    assert!(stdout.contains(&format!("  {host}  host thread")), "{stdout}");
    assert!(stdout.contains("  owner  (woke: ") && stdout.contains("\nhi\n"), "{stdout}");
    assert!(String::from_utf8_lossy(&read.stderr).starts_with("next: --after-id "), "the cursor hint");

    let member = echo_thread(&home, "member");
    let added = kiki(&home, &["room", "add", &room, &member]);
    assert_eq!(String::from_utf8_lossy(&added.stdout), "added\n");
    let added = kiki(&home, &["room", "add", &room, &member]);
    assert_eq!(String::from_utf8_lossy(&added.stdout), "already in the room\n");
    let removed = kiki(&home, &["room", "remove", &room, &member]);
    assert_eq!(String::from_utf8_lossy(&removed.stdout), "removed\n");
    let removed = kiki(&home, &["room", "remove", &room, &member]);
    assert_eq!(String::from_utf8_lossy(&removed.stdout), "not a member\n");
    let persona =
        kiki(&home, &["room", "persona", &room, "critic", "--profile", "echo", "--instructions", "be brief"]);
    assert_eq!(
        String::from_utf8_lossy(&persona.stdout),
        "added\n",
        "{}",
        String::from_utf8_lossy(&persona.stderr)
    );
    let persona = kiki(&home, &["room", "persona", &room, "critic", "--profile", "echo"]);
    assert_eq!(String::from_utf8_lossy(&persona.stdout), "already in the room\n");
    let read = kiki(&home, &["room", "read", &room]);
    let stdout = String::from_utf8_lossy(&read.stdout);
    assert!(stdout.contains("  critic  member persona (profile echo, no thread yet)\n"), "{stdout}");
    let paused = kiki(&home, &["room", "pause", &room]);
    assert_eq!(String::from_utf8_lossy(&paused.stdout), format!("{room} paused\n"));
    let paused = kiki(&home, &["room", "pause", &room]);
    let stdout = String::from_utf8_lossy(&paused.stdout);
    assert!(stdout.starts_with(&format!("{room} paused (unchanged")), "{stdout}");
    let resumed = kiki(&home, &["room", "resume", &room]);
    assert_eq!(String::from_utf8_lossy(&resumed.stdout), format!("{room} active\n"));
}

/// The whole log of `room`, oldest first (at most 100 entries).
fn log(home: &Path, room: &str) -> Vec<serde_json::Value> {
    let read = kiki_json(home, &["room", "read", room, "--limit", "100"]);
    read["entries"].as_array().cloned().unwrap_or_default()
}

/// An answered post survives `kill -9` of kikid, once: after `kiki up` it is in the log,
/// and its key replays it instead of posting it again.
#[test]
fn an_answered_post_survives_kill_9_once() {
    let (_dir, home) = new_home();
    let _down = Down(&home);
    kiki_json(&home, &["up"]);
    let host = echo_thread(&home, "host");
    let room = room(&home, &host, "durable");
    let posted = kiki_json(&home, &["room", "send", &room, "--content", "kept", "--key", "durable"]);
    assert_eq!(posted["status"], "delivered", "{posted}");

    kill_9(&pid_of(&home));
    kiki_json(&home, &["up"]);
    let entries = log(&home, &room);
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!((&entries[0]["id"], &entries[0]["seq"]), (&posted["message_id"], &1.into()), "{entries:?}");
    assert_eq!(entries[0]["content"], "kept");

    let again = kiki_json(&home, &["room", "send", &room, "--content", "kept", "--key", "durable"]);
    assert_eq!((&again["replayed"], &again["message_id"]), (&true.into(), &posted["message_id"]), "{again}");
    let next = kiki_json(&home, &["room", "send", &room, "--content", "after"]);
    assert_eq!(next["room_seq"], 2, "{next}");
    assert_eq!(log(&home, &room).len(), 2);
}

/// Posts with fixed keys, one after another, while kikid is killed with `kill -9`: every
/// answered post is in the log after `kiki up`, and once every key is sent again each is
/// there exactly once, in the order sent, with sequences 1..n.
#[test]
fn posts_with_fixed_keys_are_in_the_log_once_across_kill_9() {
    const POSTS: usize = 60;
    let (_dir, home) = new_home();
    let _down = Down(&home);
    kiki_json(&home, &["up"]);
    let host = echo_thread(&home, "host");
    let room = room(&home, &host, "stream");
    let pid = pid_of(&home);

    let answered_count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let poster = {
        let (home, room, count) = (home.clone(), room.clone(), answered_count.clone());
        std::thread::spawn(move || {
            let mut answered = Vec::new();
            for i in 1..=POSTS {
                let (content, key) = (format!("post {i}"), format!("key-{i}"));
                let out =
                    kiki(&home, &["--json", "room", "send", &room, "--content", &content, "--key", &key]);
                if !out.status.success() {
                    break; // kikid is gone
                }
                let sent: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
                answered.push((i, sent["message_id"].as_str().expect("id").to_string()));
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            answered
        })
    };
    let started = Instant::now();
    while answered_count.load(std::sync::atomic::Ordering::SeqCst) < 5 {
        assert!(started.elapsed() < Duration::from_secs(20), "the posts never got going");
        std::thread::sleep(Duration::from_millis(1));
    }
    kill_9(&pid);
    let answered = poster.join().expect("poster");
    assert!(answered.len() < POSTS, "kikid was killed mid-stream ({} answered)", answered.len());

    kiki_json(&home, &["up"]);
    let kept = log(&home, &room);
    for (i, id) in &answered {
        let found: Vec<&serde_json::Value> = kept.iter().filter(|e| e["id"] == id.as_str()).collect();
        assert_eq!(found.len(), 1, "answered post {i} ({id}) is in the log once: {kept:?}");
        assert_eq!(found[0]["content"], format!("post {i}"));
    }

    for i in 1..=POSTS {
        let (content, key) = (format!("post {i}"), format!("key-{i}"));
        let sent = kiki_json(&home, &["room", "send", &room, "--content", &content, "--key", &key]);
        if let Some((_, id)) = answered.iter().find(|(n, _)| *n == i) {
            assert_eq!(
                (&sent["replayed"], sent["message_id"].as_str()),
                (&true.into(), Some(id.as_str())),
                "{sent}"
            );
        }
        assert_eq!(sent["room_seq"], i, "key {key} has its place in the order sent: {sent}");
    }
    let entries = log(&home, &room);
    let seqs: Vec<u64> = entries.iter().filter_map(|e| e["seq"].as_u64()).collect();
    assert_eq!(seqs, (1..=POSTS as u64).collect::<Vec<u64>>(), "no gaps, no duplicates");
    let contents: Vec<String> =
        entries.iter().filter_map(|e| e["content"].as_str().map(String::from)).collect();
    let expected: Vec<String> = (1..=POSTS).map(|i| format!("post {i}")).collect();
    assert_eq!(contents, expected, "each key's post exactly once");
    let ids: std::collections::HashSet<&str> = entries.iter().filter_map(|e| e["id"].as_str()).collect();
    assert_eq!(ids.len(), POSTS, "distinct entries");
}
