//! ThreadRead across a bridge: the same page shapes as at home.

use kiki_proto as pb;
use kiki_tests::TestHome;
use kiki_tests::bridges::remote;
use tonic::Code;

/// `last` goes over the bridge: the target answers with its newest turns, oldest first,
/// with coverage and no cursor; a combination it refuses is refused before the call.
#[tokio::test]
async fn the_newest_turns_are_read_across_a_bridge() {
    let (a, b) = (TestHome::builder().start().await, TestHome::builder().start().await);
    a.bridge_to(&b, "read").await;
    let t = b.thread("echo", Some("m1")).await;
    b.wait_turns(&t.id, 1).await;
    for i in 2..=4 {
        b.say(&t.id, &format!("m{i}")).await.expect("say");
        b.wait_turns(&t.id, i).await;
    }
    let read =
        pb::ThreadReadRequest { target: Some(remote("bee", &t.id)), last: Some(2), ..Default::default() };
    let page = a.client().threads().thread_read(read.clone()).await.expect("remote read").into_inner();
    assert_eq!(page.turns.iter().map(|t| t.output.as_str()).collect::<Vec<_>>(), ["echo: m3", "echo: m4"]);
    assert!(page.next_cursor.is_none());
    let coverage = page.coverage.expect("coverage");
    assert_eq!(
        (coverage.turns_total, coverage.first_seq, coverage.last_seq, coverage.complete),
        (4, 3, 4, true)
    );

    let both = pb::ThreadReadRequest { limit: Some(2), ..read };
    let err = a.client().threads().thread_read(both).await.expect_err("last with limit");
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().starts_with("last: does not go with limit"), "{}", err.message());
}
