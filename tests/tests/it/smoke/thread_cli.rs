//! The thread commands end to end, as a person reads them: the newest turns first, paging
//! hints on stderr, whole oversized fields, `create --wait`, and the communication switch in
//! force with its reason.

use kiki_tests::binaries::{Down, kiki, kiki_json, new_home, paired_homes, wait_for_turns};

#[test]
fn thread_commands_end_to_end() {
    let (dir, home) = new_home();
    let _down = Down(&home);
    kiki_json(&home, &["up"]);
    let prompt_file = dir.path().join("prompt.txt");
    std::fs::write(&prompt_file, "from a file\nline two").expect("prompt");
    let created =
        kiki_json(&home, &["thread", "create", "--prompt-file", prompt_file.to_str().expect("utf8")]);
    let id = created["id"].as_str().expect("id").to_string();
    assert_eq!(created["title"], "from a file");
    assert_eq!(created["prompt_started"], true);
    assert_eq!(created["cwd"], std::env::current_dir().expect("cwd").display().to_string());
    let page = wait_for_turns(&home, &id, 1);
    assert_eq!(page["turns"][0]["output"], "echo: from a file\nline two");
    assert_eq!(page["turns"][0]["status"], "completed");

    let said = kiki_json(&home, &["thread", "say", &id, "second"]);
    assert_eq!(said["turn_started"], true);
    wait_for_turns(&home, &id, 2);
    let text = kiki(&home, &["thread", "read", &id]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("echo: second"), "{text}");

    let list = kiki_json(&home, &["thread", "list"]);
    assert_eq!(list["threads"][0]["id"], id.as_str());
    assert_eq!(list["threads"][0]["state"], "idle");
    // A directory names its workspace, a relative one too (the thread's cwd is this one).
    let here = kiki_json(&home, &["thread", "list", "--workspace", "."]);
    assert_eq!(here["threads"][0]["id"], id.as_str());
    let archived = kiki_json(&home, &["thread", "archive", &id]);
    assert_eq!(archived["changed"], true);
    assert_eq!(kiki_json(&home, &["thread", "list"])["threads"].as_array().map(Vec::len), Some(0));
    kiki_json(&home, &["thread", "unarchive", &id]);
    assert_eq!(kiki_json(&home, &["thread", "list"])["threads"].as_array().map(Vec::len), Some(1));
}

/// The `seq` of each turn a text `kiki thread read` printed, from its `── turn N · …` lines.
fn shown_turns(stdout: &[u8]) -> Vec<u64> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("── turn ")?.split(' ').next()?.parse().ok())
        .collect()
}

/// `kiki thread read REF` shows a person the end of a thread: its newest 20 turns, oldest
/// first, and on stderr how to read the older ones (`--last N` for another number). With
/// `--json` and no flags the API's default stands (from the oldest turn), so scripts see
/// no change; `--limit` and `--cursor` page from the oldest as before.
#[test]
fn thread_read_shows_a_person_the_newest_turns() {
    let (_dir, home) = new_home();
    let _down = Down(&home);
    kiki_json(&home, &["up"]);
    let created = kiki_json(&home, &["thread", "create", "--prompt", "t1", "--wait"]);
    let id = created["thread"]["id"].as_str().expect("id").to_string();
    for i in 2..=22 {
        kiki_json(&home, &["thread", "say", &id, &format!("t{i}")]);
        wait_for_turns(&home, &id, i);
    }

    let out = kiki(&home, &["thread", "read", &id]);
    assert!(out.status.success());
    assert_eq!(shown_turns(&out.stdout), (3..=22).collect::<Vec<_>>(), "the newest 20, oldest first");
    assert!(String::from_utf8_lossy(&out.stdout).ends_with("echo: t22\n"), "ends with the newest turn");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "older: --limit 2\n", "the older ones, on stderr");
    let out = kiki(&home, &["thread", "read", &id, "--last", "5"]);
    assert_eq!(shown_turns(&out.stdout), (18..=22).collect::<Vec<_>>());
    assert_eq!(String::from_utf8_lossy(&out.stderr), "older: --limit 17\n");
    let out = kiki(&home, &["thread", "read", &id, "--last", "50"]);
    assert_eq!(shown_turns(&out.stdout), (1..=22).collect::<Vec<_>>());
    assert_eq!(String::from_utf8_lossy(&out.stderr), "", "nothing older");

    let page = kiki_json(&home, &["thread", "read", &id]);
    let seqs = |page: &serde_json::Value| -> Vec<u64> {
        page["turns"].as_array().expect("turns").iter().filter_map(|t| t["seq"].as_u64()).collect()
    };
    assert_eq!(seqs(&page), (1..=20).collect::<Vec<_>>(), "--json keeps the API's default order");
    assert!(page["next_cursor"].is_string());
    let last = kiki_json(&home, &["thread", "read", &id, "--last", "5"]);
    assert_eq!(seqs(&last), (18..=22).collect::<Vec<_>>());
    assert!(last["next_cursor"].is_null(), "the page reaches the newest turn: {last}");
    assert_eq!(last["coverage"]["first_seq"], 18);

    // --limit pages from the oldest, its hint on stderr.
    let out = kiki(&home, &["thread", "read", &id, "--limit", "5"]);
    assert_eq!(shown_turns(&out.stdout), (1..=5).collect::<Vec<_>>());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let cursor = stderr.strip_prefix("more: --cursor ").expect("the hint on stderr").trim().to_string();
    assert!(!String::from_utf8_lossy(&out.stdout).contains("more:"), "stdout is the turns alone");
    let out = kiki(&home, &["thread", "read", &id, "--limit", "5", "--cursor", &cursor]);
    assert_eq!(shown_turns(&out.stdout), (6..=10).collect::<Vec<_>>());

    let out = kiki(&home, &["--json", "thread", "read", &id, "--last", "5", "--limit", "5"]);
    assert_eq!(out.status.code(), Some(2), "--last is a page of its own");
    let out = kiki(&home, &["--json", "thread", "read", &id, "--last", "0"]);
    assert_eq!(out.status.code(), Some(2));
    let error: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json error");
    assert_eq!(error["error"]["message"], "last: must be between 1 and 100, got 0");
}

/// Every paging hint (`more: --cursor C`, `older: --cursor C`, `more: --content-ref …`) is
/// on stderr, whatever the command: stdout holds the result alone.
#[test]
fn paging_hints_go_to_stderr() {
    let pair = paired_homes();
    let (a, target) = (pair.a.as_path(), format!("bee/{}", pair.target));
    kiki_json(a, &["thread", "create", "--title", "one"]);
    kiki_json(a, &["thread", "create", "--title", "two"]);
    let out = kiki(a, &["thread", "list", "--limit", "1"]);
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(stdout.lines().count(), 1, "one thread and nothing else: {stdout}");
    assert!(stdout.contains("two"), "{stdout}");
    assert!(stderr.starts_with("more: --limit 1 --cursor "), "{stderr}");

    for key in ["k1", "k2"] {
        kiki_json(a, &["thread", "send", &target, "--key", key, "--content", "hi"]);
    }
    let out = kiki(a, &["bridge", "receipts", "bee", "--limit", "1"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!stdout.contains("older:"), "{stdout}");
    assert!(stderr.starts_with("older: --cursor "), "{stderr}");
}

/// `--content-ref R --all` reads every segment of an oversized field and prints it whole,
/// once; with `--json`, one document in a segment's shape with the whole text and no
/// `next`. (The echo profile answers `echo: ` + the prompt: a prompt over 16,384 UTF-16
/// units makes an oversized output.)
#[test]
fn a_whole_oversized_field_is_read_with_all() {
    let (dir, home) = new_home();
    let _down = Down(&home);
    kiki_json(&home, &["up"]);
    let mut prompt = String::new();
    while prompt.chars().count() < 40_000 {
        prompt.push_str("kiki 😀 ünïcode ");
    }
    let prompt_file = dir.path().join("prompt.txt");
    std::fs::write(&prompt_file, &prompt).expect("prompt");
    let created = kiki_json(
        &home,
        &["thread", "create", "--prompt-file", prompt_file.to_str().expect("utf8"), "--wait"],
    );
    let id = created["thread"]["id"].as_str().expect("id").to_string();
    assert_eq!(created["turn"]["output_truncated"], true);
    let output = format!("echo: {prompt}");
    let content_ref = format!("{}.output", created["turn"]["id"].as_str().expect("turn id"));

    let out = kiki(&home, &["thread", "read", &id, "--content-ref", &content_ref, "--all"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout) == output, "the whole field, once");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "", "no hint: nothing more to read");
    // Without --all, one segment and the hint for the next.
    let out = kiki(&home, &["thread", "read", &id, "--content-ref", &content_ref]);
    assert!(out.stdout.len() < output.len() && output.as_bytes().starts_with(&out.stdout));
    let hint = format!("\nmore: --content-ref {content_ref} --cursor ");
    assert!(String::from_utf8_lossy(&out.stderr).starts_with(&hint));

    let whole = kiki_json(&home, &["thread", "read", &id, "--content-ref", &content_ref, "--all"]);
    let segment = &whole["segment"];
    assert!(segment["text"] == output.as_str(), "the whole text in one document");
    assert_eq!(segment["offset"], 0);
    assert_eq!(segment["utf16_length"], output.encode_utf16().count());
    assert_eq!(segment["content_ref"], content_ref.as_str());
    assert!(segment["next"].is_null(), "no next");
    assert_eq!(whole["thread"]["id"], id.as_str());

    let out = kiki(&home, &["--json", "thread", "read", &id, "--all"]);
    assert_eq!(out.status.code(), Some(2), "--all needs --content-ref");
    let out = kiki(
        &home,
        &["--json", "thread", "read", &id, "--content-ref", &content_ref, "--all", "--cursor", "c"],
    );
    assert_eq!(out.status.code(), Some(2), "--all reads from the start");
}

/// `kiki thread create --prompt P --wait` waits for the first turn and prints it as `kiki
/// thread read` would (an `exec` agent's too); with `--json`, one document `{"thread", "turn"}`.
/// The README's first command is this, between `kiki up` and `kiki down`.
#[test]
fn create_with_wait_prints_the_first_turn() {
    let (_dir, home) = new_home();
    let _down = Down(&home);
    std::fs::create_dir_all(&home).expect("home");
    std::fs::write(home.join("config.toml"), "[profiles.cat]\nexecutor = \"exec\"\ncommand = [\"cat\"]\n")
        .expect("config");
    let out = kiki(&home, &["up"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = kiki(&home, &["thread", "create", "--prompt", "hello, kiki", "--wait"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines[0].starts_with("th_") && lines[0].ends_with("  hello, kiki"), "{stdout}");
    assert!(lines.iter().any(|l| l.starts_with("── turn 1 · completed · ")), "{stdout}");
    assert_eq!(lines[lines.len() - 2..], ["> hello, kiki", "echo: hello, kiki"], "{stdout}");

    let out = kiki(&home, &["thread", "create", "--profile", "cat", "--prompt", "from an agent", "--wait"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.ends_with("> from an agent\nfrom an agent\n"), "the agent's output: {stdout}");

    let both = kiki_json(&home, &["thread", "create", "--profile", "cat", "--prompt", "json", "--wait"]);
    assert_eq!(both["thread"]["prompt_started"], true);
    assert_eq!(both["thread"]["profile"], "cat");
    assert_eq!(both["turn"]["seq"], 1);
    assert_eq!(both["turn"]["status"], "completed");
    assert_eq!(both["turn"]["output"], "json");
    let id = both["thread"]["id"].as_str().expect("id");
    let read = kiki_json(&home, &["thread", "read", id]);
    assert_eq!(read["turns"][0], both["turn"], "the turn as ThreadRead shows it");

    let out = kiki(&home, &["--json", "thread", "create", "--wait"]);
    assert_eq!(out.status.code(), Some(2), "--wait needs a prompt");
    assert_eq!(kiki_json(&home, &["status"])["threads"], 3, "nothing written");
    assert_eq!(kiki_json(&home, &["down"])["stopped"], true);
}

/// A thread's own switch is one of several: with the home's switch off, `thread set
/// --communication on` says the thread stays closed and why, and `thread list` and
/// `status` show what is in force.
#[test]
fn the_effective_communication_switch_is_shown_with_its_reason() {
    let (_dir, home) = new_home();
    let _down = Down(&home);
    std::fs::create_dir_all(&home).expect("home");
    std::fs::write(home.join("config.toml"), "[thread_communication]\nenabled = false\n").expect("config");
    kiki_json(&home, &["up"]);
    let status = kiki_json(&home, &["status"]);
    assert!(
        status["thread_communication"].as_str().unwrap_or_default().starts_with("off for every thread"),
        "{status}"
    );
    let thread =
        kiki_json(&home, &["thread", "create", "--title", "t"])["id"].as_str().expect("id").to_string();
    let set = kiki_json(&home, &["thread", "set", &thread, "--communication", "on"]);
    assert_eq!(set["thread"]["communication"], "on", "the thread's own switch");
    assert_eq!(set["thread"]["communication_open"], false, "yet closed: {set}");
    let why = set["thread"]["communication_why"].as_str().unwrap_or_default();
    assert!(why.contains("[thread_communication] enabled = false"), "{why}");
    let out = kiki(&home, &["thread", "set", &thread, "--communication", "on"]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("peer communication is closed: the home's [thread_communication] enabled = false"),
        "{said}"
    );
    let listed = kiki_json(&home, &["thread", "list"]);
    assert_eq!(listed["threads"][0]["communication_open"], false, "{listed}");
    let out = kiki(&home, &["thread", "list"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("peers off"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
