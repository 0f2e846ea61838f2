//! ThreadRead: turns paged in order, the newest last, and output past the page's limit read
//! back exactly through content refs.

use kiki_proto as pb;
use kiki_proto::Word;
use kiki_tests::{TestHome, assert_invalid, local};
use tonic::Code;

#[tokio::test]
async fn read_pages_turns_in_chronological_order() {
    let home = TestHome::builder().start().await;
    let t = home.thread("echo", Some("m0")).await;
    home.wait_turns(&t.id, 1).await;
    for i in 1..25 {
        home.say(&t.id, &format!("m{i}")).await.expect("say");
        home.wait_turns(&t.id, i + 1).await;
    }
    let read = |limit: Option<u32>, cursor: String| {
        home.read(pb::ThreadReadRequest {
            target: Some(local(&t.id)),
            limit,
            cursor,
            content_ref: String::new(),
            last: None,
            tool_calls: false,
        })
    };
    let first = read(None, String::new()).await.expect("read");
    assert_eq!(first.turns.len(), 20, "default limit");
    assert_eq!(first.turns[0].output, "echo: m0", "oldest first");
    let second = read(None, first.next_cursor.clone().expect("more")).await.expect("read");
    assert_eq!(second.turns.iter().map(|t| t.seq).collect::<Vec<_>>(), (21..=25).collect::<Vec<_>>());
    assert!(second.next_cursor.is_none());
    // Each page says what it covers of the thread's completed turns.
    let covered = |page: &pb::ThreadReadResponse| {
        let c = page.coverage.as_ref().expect("coverage");
        (c.turns_total, c.first_seq, c.last_seq, c.complete)
    };
    assert_eq!(covered(&first), (25, 1, 20, false));
    assert_eq!(covered(&second), (25, 21, 25, true));

    assert_invalid(read(Some(0), String::new()).await, "limit", "between 1 and 100");
    assert_invalid(read(Some(101), String::new()).await, "limit", "between 1 and 100");
    assert_invalid(read(None, "garbage".into()).await, "cursor", "restart from the first page");
    let other = home.thread("echo", None).await;
    let foreign = home
        .read(pb::ThreadReadRequest {
            target: Some(local(&other.id)),
            cursor: first.next_cursor.expect("cursor"),
            ..Default::default()
        })
        .await;
    assert_invalid(foreign, "cursor", "another thread");

    let missing =
        home.read(pb::ThreadReadRequest { target: Some(local("th_nope")), ..Default::default() }).await;
    assert_eq!(missing.expect_err("missing").code(), Code::NotFound);
    let mut elsewhere = local(&t.id);
    elsewhere.host_id = "some-other-home".into();
    let remote = home.read(pb::ThreadReadRequest { target: Some(elsewhere), ..Default::default() }).await;
    assert_eq!(remote.expect_err("no bridge").code(), Code::NotFound);
    let mut wrong_ws = local(&t.id);
    wrong_ws.workspace_id = "ws_0000000000000000".into();
    let wrong = home.read(pb::ThreadReadRequest { target: Some(wrong_ws), ..Default::default() }).await;
    assert_eq!(wrong.expect_err("wrong workspace").code(), Code::NotFound);
}

/// `last` reads the end of a long thread in one call: the newest turns, still oldest first,
/// with the usual coverage and no cursor (the page reaches the newest turn). It is a page of
/// its own: with limit, cursor or content_ref it is refused, naming them.
#[tokio::test]
async fn read_last_gives_the_newest_turns_oldest_first() {
    let home = TestHome::builder().start().await;
    let empty = home.thread("echo", None).await;
    let t = home.thread("echo", Some("m1")).await;
    home.wait_turns(&t.id, 1).await;
    for i in 2..=30 {
        home.say(&t.id, &format!("m{i}")).await.expect("say");
        home.wait_turns(&t.id, i).await;
    }
    let read = |thread: &str, last: Option<u32>| {
        home.read(pb::ThreadReadRequest { target: Some(local(thread)), last, ..Default::default() })
    };
    let seqs = |page: &pb::ThreadReadResponse| page.turns.iter().map(|t| t.seq).collect::<Vec<_>>();
    let covered = |page: &pb::ThreadReadResponse| {
        let c = page.coverage.as_ref().expect("coverage");
        (c.turns_total, c.first_seq, c.last_seq, c.complete)
    };

    let page = read(&t.id, Some(5)).await.expect("read");
    assert_eq!(seqs(&page), (26..=30).collect::<Vec<_>>(), "the newest five, oldest first");
    assert_eq!(page.turns[0].output, "echo: m26");
    assert_eq!(page.turns[4].output, "echo: m30");
    assert!(page.next_cursor.is_none(), "the page reaches the newest turn");
    assert_eq!(covered(&page), (30, 26, 30, true));
    assert_eq!(page.thread.as_ref().map(|t| t.id.as_str()), Some(t.id.as_str()));
    let all = read(&t.id, Some(100)).await.expect("read");
    assert_eq!(seqs(&all), (1..=30).collect::<Vec<_>>(), "more than there are: all of them");
    let empty_page = read(&empty.id, Some(5)).await.expect("read");
    assert!(empty_page.turns.is_empty());
    assert_eq!(covered(&empty_page), (0, 0, 0, true));
    // Without `last` the API's default order stands: the oldest first.
    let default = read(&t.id, None).await.expect("read");
    assert_eq!(seqs(&default), (1..=20).collect::<Vec<_>>());

    assert_invalid(read(&t.id, Some(0)).await, "last", "between 1 and 100");
    assert_invalid(read(&t.id, Some(101)).await, "last", "between 1 and 100");
    let with = |limit: Option<u32>, cursor: String, content_ref: &str| {
        home.read(pb::ThreadReadRequest {
            target: Some(local(&t.id)),
            limit,
            cursor,
            content_ref: content_ref.into(),
            last: Some(5),
            tool_calls: false,
        })
    };
    let cursor = default.next_cursor.expect("a cursor");
    assert_invalid(with(Some(5), String::new(), "").await, "last", "does not go with limit");
    assert_invalid(with(None, cursor.clone(), "").await, "last", "does not go with cursor");
    let content_ref = format!("{}.output", page.turns[0].id);
    assert_invalid(with(None, String::new(), &content_ref).await, "last", "does not go with content_ref");
    assert_invalid(with(Some(5), cursor, "").await, "last", "limit or cursor");
    let missing = home.read(pb::ThreadReadRequest {
        target: Some(local("th_nope")),
        last: Some(5),
        ..Default::default()
    });
    assert_eq!(missing.await.expect_err("missing").code(), Code::NotFound);
}

/// A 40,000-character output (with characters outside the BMP, two UTF-16 units each) comes
/// back as a preview plus a content ref whose segments reassemble it exactly.
#[tokio::test]
async fn oversized_output_is_read_back_exactly_through_content_refs() {
    let home = TestHome::builder().shell_profile("cat", "cat").start().await;
    let unit = "kiki 😀 ünïcode ";
    let mut text = String::new();
    while text.chars().count() < 40_000 {
        text.push_str(unit);
    }
    let text: String = text.chars().take(40_000).collect();
    let t = home.thread("cat", Some(&text)).await;
    let turns = home.wait_turns(&t.id, 1).await;
    let turn = &turns[0];
    assert_eq!(turn.status(), pb::TurnStatus::Completed, "{}", turn.error);
    assert!(turn.output_truncated && turn.input_truncated);
    assert!(turn.output.chars().count() < 16_384, "a preview only");
    assert!(text.starts_with(&turn.output));
    let output_ref = turn.content_refs.iter().find(|r| r.field().word() == "output").expect("output ref");
    let total_units = text.encode_utf16().count() as u64;
    assert_eq!(output_ref.utf16_length, total_units);

    let mut assembled = String::new();
    let mut cursor = String::new();
    let mut segments = 0;
    loop {
        let page = home
            .read(pb::ThreadReadRequest {
                target: Some(local(&t.id)),
                content_ref: output_ref.content_ref.clone(),
                cursor: cursor.clone(),
                limit: None,
                last: None,
                tool_calls: false,
            })
            .await
            .expect("segment");
        let segment = page.segment.expect("segment");
        assert!(segment.text.encode_utf16().count() <= 16_384, "segments are at most 16,384 UTF-16 units");
        assert_eq!(segment.offset, assembled.encode_utf16().count() as u64);
        assembled.push_str(&segment.text);
        segments += 1;
        match segment.next {
            Some(next) => cursor = next,
            None => break,
        }
    }
    assert_eq!(assembled, text, "reassembled exactly");
    assert!(segments >= 3);
    // The ref is stable: reading again gives the same first segment.
    let again = home
        .read(pb::ThreadReadRequest {
            target: Some(local(&t.id)),
            content_ref: output_ref.content_ref.clone(),
            ..Default::default()
        })
        .await
        .expect("segment");
    assert!(text.starts_with(&again.segment.expect("segment").text));

    let bad = home
        .read(pb::ThreadReadRequest {
            target: Some(local(&t.id)),
            content_ref: "tu_nope.output".into(),
            ..Default::default()
        })
        .await;
    assert_eq!(bad.expect_err("unknown ref").code(), Code::NotFound);
    let bad = home
        .read(pb::ThreadReadRequest {
            target: Some(local(&t.id)),
            content_ref: "nonsense".into(),
            ..Default::default()
        })
        .await;
    assert_invalid(bad, "content_ref", "not a content ref");
}
