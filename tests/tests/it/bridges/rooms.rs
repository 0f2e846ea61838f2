//! Rooms across homes: a member in another home is woken through the room's home's bridge
//! to it (once, however the link fails meanwhile), and posts and reads from its own turn
//! through its home's bridge back; each bridge's grant decides, at the home it leads to.
//! Members run the real `kiki` in their turns (`cargo build --workspace --bins` first).

use std::time::Duration;

use kiki_proto as pb;
use kiki_proto::Word;
use kiki_proto::bridge::v1 as wire;
use kiki_tests::bridges::{link_as, open_home, raw_call, raw_send, receipts};
use kiki_tests::{TestHome, binaries::binary, eventually};
use tonic::Code;
use wire::bridge_call::Call;
use wire::bridge_reply::Reply;

/// A member's agent: takes the entry, then posts a reply to the room named in its header
/// (or in a `room: ROOM` line the owner says) and reads the room, printing what each
/// answered.
fn member_script() -> String {
    let kiki = binary("kiki");
    let kiki = kiki.display();
    format!(
        "input=$(cat); printf '%s\\n' \"$input\"; \
         room=$(printf '%s\\n' \"$input\" | sed -n -e 's/^\\[kiki room \\([^ ]*\\) entry .*/\\1/p' -e 's/^room: //p' | head -n 1); \
         {kiki} room send \"$room\" --content \"reply from $KIKI_THREAD_ID\" --key \"reply-$room-$$\" >/dev/null 2>post.err \
           && echo 'post: ok' || echo \"post: $(cat post.err)\"; \
         {kiki} --json room read \"$room\" >read.out 2>read.err \
           && echo \"read: ok $(grep -c '\"seq\"' read.out)\" || echo \"read: $(cat read.err)\""
    )
}

/// An agent that posts to the room named in a `room: ROOM` line of its input, mentioning
/// the member named in a `mention: ID` line.
fn mentioner_script() -> String {
    let kiki = binary("kiki");
    let kiki = kiki.display();
    format!(
        "input=$(cat);          room=$(printf '%s\n' \"$input\" | sed -n 's/^room: //p' | head -n 1);          who=$(printf '%s\n' \"$input\" | sed -n 's/^mention: //p' | head -n 1);          {kiki} room send \"$room\" --content \"over to you\" --mention \"$who\" --key \"mention-$$\" >/dev/null 2>post.err \
           && echo 'post: ok' || echo \"post: $(cat post.err)\""
    )
}

/// A home open to peers, with the member agent as profile `member` and the one that
/// mentions as `mentioner`.
async fn member_home() -> TestHome {
    TestHome::builder()
        .open_to_peers(Duration::from_secs(60))
        .shell_profile("member", &member_script())
        .shell_profile("mentioner", &mentioner_script())
        .start()
        .await
}

async fn add(home: &TestHome, room: &str, member: &str) -> Result<bool, tonic::Status> {
    let request = pb::RoomAddRequest { room: room.into(), session_id: member.into() };
    home.client().threads().room_add(request).await.map(|r| r.into_inner().added)
}

async fn post(home: &TestHome, room: &str, content: &str, mentions: &[&str]) -> pb::ThreadSendResponse {
    let request = pb::ThreadSendRequest {
        room: room.into(),
        content: content.into(),
        mentions: mentions.iter().map(|m| m.to_string()).collect(),
        ..Default::default()
    };
    home.client().threads().thread_send(request).await.expect("posted").into_inner()
}

async fn read(home: &TestHome, room: &str) -> pb::RoomReadResponse {
    let request = pb::RoomReadRequest { room: room.into(), ..Default::default() };
    home.client().threads().room_read(request).await.expect("read").into_inner()
}

/// The room lives in R; its host is R's, one member is in X and one in Y. R's owner posts
/// mentioning X's member while the link to X is cut: the post is `delivered` (the log has
/// it) and the member's delivery pending; once the link heals the member is woken exactly
/// once, sees the room, the entry and its author, posts back and reads the room — both
/// through X's own bridge to R, attributed there to X's thread. Y's member, not
/// mentioned, is never woken.
#[tokio::test]
async fn a_mention_wakes_a_member_in_another_home_once_across_a_cut_link() {
    let (r, x, y) = (open_home().await, member_home().await, member_home().await);
    let host = r.thread("echo", None).await.id;
    let tx = x.thread("member", None).await.id;
    let ty = y.thread("member", None).await.id;
    let relay = r.bridge_through_relay(&x, "xx", "send,wake").await;
    r.bridge_named(&y, "yy", "send,wake").await;
    x.bridge_named(&r, "rr", "send,read").await;
    y.bridge_named(&r, "rr", "send,read").await;
    let (r_id, x_id, y_id) = (r.handle().home_id(), x.handle().home_id(), y.handle().home_id());

    let room = r.create_room(&host, "team").await.id;
    assert!(add(&r, &room, &format!("xx/{tx}")).await.expect("X's member joins"));
    assert!(add(&r, &room, &format!("yy/{ty}")).await.expect("Y's member joins"));
    assert!(!add(&r, &room, &format!("xx/{tx}")).await.expect("again"), "already a member");
    let x_member = format!("{x_id}/{tx}");
    let roster: Vec<(String, String)> =
        read(&r, &room).await.members.iter().map(|m| (m.id.clone(), m.kind().word())).collect();
    assert_eq!(
        roster,
        [
            (host.clone(), "thread".to_string()),
            (x_member.clone(), "remote".to_string()),
            (format!("{y_id}/{ty}"), "remote".to_string())
        ],
        "the roster names members of other homes by home id"
    );

    relay.partition(true);
    let posted = post(&r, &room, "over to X", &[&x_member]).await;
    assert_eq!(posted.status(), pb::SendStatus::Delivered, "the log has it: {posted:?}");
    assert_eq!(posted.woke, std::slice::from_ref(&x_member));
    let log = read(&r, &room).await;
    assert_eq!(log.entries[0].deliveries.len(), 1, "{log:?}");
    assert_eq!(log.entries[0].deliveries[0].status().word(), "pending", "{log:?}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(x.all_turns(&tx).await.is_empty(), "nothing crosses the cut");

    relay.partition(false);
    let turn = x.wait_turns(&tx, 1).await.remove(0);
    let entry = &log.entries[0];
    assert!(
        turn.output.starts_with(&format!(
            "[kiki room {room} entry {} from the owner of home {r_id}]\nover to X",
            entry.id
        )),
        "{}",
        turn.output
    );
    assert_eq!(turn.inputs[0].room, room);
    assert_eq!(turn.inputs[0].room_entry, entry.id);
    assert!(turn.output.contains("post: ok"), "{}", turn.output);
    assert!(turn.output.contains("read: ok 2"), "the member read both entries: {}", turn.output);

    let log = eventually("the reply in R's log and the delivery confirmed", || async {
        let log = read(&r, &room).await;
        (log.entries.len() == 2 && log.entries[0].deliveries[0].status().word() == "delivered").then_some(log)
    })
    .await;
    let reply = &log.entries[1];
    assert_eq!(reply.author, x_member, "attributed to X's thread by X's bridge identity");
    assert_eq!(reply.content, format!("reply from {tx}"));
    assert!(reply.woke.is_empty(), "an unmentioned agent post wakes nobody");

    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(x.all_turns(&tx).await.len(), 1, "woken once");
    assert!(y.all_turns(&ty).await.is_empty(), "Y's member was not mentioned");
    assert!(r.all_turns(&host).await.is_empty(), "the owner mentioned someone: the host sleeps");
}

/// Each bridge's grant decides at the home it leads to: a member's home must know the
/// thread and grant `send` before it joins; without `read` on X's bridge to R, X's member
/// posts but cannot read; a thread of X that is not in the room is refused by R; revoking
/// R's bridge to X leaves a later entry for X's member undeliverable in R's log, and
/// revoking X's bridge to R stops the member's posts with the reason.
#[tokio::test]
async fn each_bridge_grant_decides_room_traffic_at_its_target() {
    let (r, x) = (open_home().await, member_home().await);
    let host = r.thread("echo", None).await.id;
    let tx = x.thread("member", None).await.id;
    let stranger = x.thread("member", None).await.id;

    let room = r.create_room(&host, "team").await.id;
    let refused = add(&r, &room, &format!("xx/{tx}")).await.expect_err("no bridge to X yet");
    assert!(refused.message().contains("xx"), "{refused:?}");
    r.bridge_named(&x, "xx", "send,wake").await;
    x.bridge_named(&r, "rr", "send").await;
    let missing = add(&r, &room, "xx/th_nobody").await.expect_err("no such thread at X");
    assert_eq!(missing.code(), Code::NotFound, "{missing:?}");
    assert!(read(&r, &room).await.members.len() == 1, "nothing was added");
    assert!(add(&r, &room, &format!("xx/{tx}")).await.expect("joins"));
    let x_member = format!("{}/{tx}", x.handle().home_id());

    post(&r, &room, "hello X", &[&x_member]).await;
    let woken = x.wait_turns(&tx, 1).await.remove(0).output;
    assert!(woken.contains("hello X") && woken.contains("post: ok"), "{woken}");
    assert!(woken.contains("read: ") && woken.contains("does not grant \"read\""), "{woken}");

    // A thread of X outside the room: X forwards, R refuses.
    x.say(&stranger, &format!("room: {room}")).await.expect("say");
    let outside = x.wait_turns(&stranger, 1).await.remove(0).output;
    assert!(outside.contains("post: ") && outside.contains("not in room"), "{outside}");
    assert_eq!(read(&r, &room).await.entries.len(), 2, "the hello and X's member's reply only");

    // R revokes its bridge to X: a later entry for X's member is kept, undeliverable.
    r.client()
        .bridges()
        .bridge_revoke(pb::BridgeRevokeRequest { bridge: "xx".into() })
        .await
        .expect("revoke");
    let later = post(&r, &room, "anyone at X?", &[&x_member]).await;
    assert_eq!(later.woke, std::slice::from_ref(&x_member));
    let log = read(&r, &room).await;
    let deliveries = &log.entries[2].deliveries;
    assert_eq!(deliveries[0].status().word(), "undeliverable", "{log:?}");
    assert!(deliveries[0].reason.contains("no bridge"), "{log:?}");

    // X revokes its bridge to R: its member's posts stop, saying why.
    x.client()
        .bridges()
        .bridge_revoke(pb::BridgeRevokeRequest { bridge: "rr".into() })
        .await
        .expect("revoke");
    x.say(&tx, &format!("room: {room}")).await.expect("say");
    let cut = x.wait_turns(&tx, 2).await.remove(1).output;
    assert!(cut.contains("post: ") && cut.contains("revoked"), "{cut}");
    assert_eq!(read(&r, &room).await.entries.len(), 3, "nothing more reached R");
}

/// A room is bound at a member's home to the home that added its thread, and no other peer
/// can move it. A (the room's home) adds B's thread to room R; P, a peer granted `send` into
/// B, then tells B that B's thread joined "R" of P, and sends B's thread an "entry" of R: B
/// refuses both, and its member's posts and reads of R still go to A. Nor can P claim a room
/// of B's own.
#[tokio::test]
async fn a_peer_cannot_take_over_a_room_another_home_added_a_member_to() {
    let (a, b, p) = (open_home().await, member_home().await, open_home().await);
    let host = a.thread("echo", None).await.id;
    let xb = b.thread("member", None).await.id;
    a.bridge_named(&b, "bb", "send,wake").await;
    b.bridge_named(&a, "aa", "send,read").await;
    p.bridge_named(&b, "bb", "send,wake").await;
    let room = a.create_room(&host, "team").await.id;
    assert!(add(&a, &room, &format!("bb/{xb}")).await.expect("B's thread joins A's room"));

    let (_endpoint, link) = link_as(&p, &b).await;
    let join = Call::RoomJoin(wire::RoomJoinCall { room_id: room.clone(), session: xb.clone() });
    match raw_call(&link, join).await {
        Reply::Error(e) => {
            assert_eq!(e.code(), wire::Refusal::PermissionDenied, "{e:?}");
            assert!(e.message.contains(a.handle().home_id()), "names the home it is bound to: {e:?}");
        }
        other => panic!("P joined B's thread to A's room: {other:?}"),
    }
    let mut entry = raw_send(&xb, "P speaking for room R".into(), "forged-entry");
    entry.room = Some(wire::RoomTag {
        room_id: room.clone(),
        entry_id: "msg_01forged".into(),
        author_host: String::new(),
        author_thread: String::new(),
    });
    match raw_call(&link, Call::ThreadSend(entry)).await {
        Reply::ThreadSend(sent) => {
            assert_eq!(sent.status(), wire::SendStatus::Undeliverable, "{sent:?}");
            assert_eq!(sent.reason, "permission_denied", "{sent:?}");
        }
        other => panic!("unexpected answer: {other:?}"),
    }
    let b_room = b.create_room(&xb, "team").await.id;
    let claim = Call::RoomJoin(wire::RoomJoinCall { room_id: b_room.clone(), session: xb.clone() });
    assert!(matches!(raw_call(&link, claim).await, Reply::Error(_)), "P claimed B's own room {b_room}");

    // B's member still posts to and reads A's room, and nothing of P's reached it.
    b.say(&xb, &format!("room: {room}")).await.expect("say");
    let turn = b.wait_turns(&xb, 1).await.remove(0).output;
    assert!(turn.contains("post: ok") && turn.contains("read: ok 1"), "{turn}");
    assert!(!turn.contains("P speaking"), "{turn}");
    let log = read(&a, &room).await;
    assert_eq!(log.entries.len(), 1, "{log:?}");
    assert_eq!(log.entries[0].author, format!("{}/{xb}", b.handle().home_id()));
    let p_receipts = receipts(&b, p.handle().home_id()).await;
    assert!(
        p_receipts.iter().any(|r| r.idempotency_key == "forged-entry" && r.reason == "permission_denied"),
        "{p_receipts:?}"
    );
}

/// A member in one home wakes a member in a third: in A's room with members in B and C
/// (and no bridge between B and C), B's member mentions C's; A carries the entry to C over
/// its own bridge, and C checks that bridge, not one from the author's home. C's member
/// is woken with the entry shown as B's member's.
#[tokio::test]
async fn a_member_wakes_a_member_of_a_third_home_through_the_rooms_home() {
    let (a, b, c) = (open_home().await, member_home().await, member_home().await);
    let host = a.thread("echo", None).await.id;
    let xb = b.thread("mentioner", None).await.id;
    let xc = c.thread("member", None).await.id;
    for (member, alias) in [(&b, "bb"), (&c, "cc")] {
        a.bridge_named(member, alias, "send,wake").await;
        member.bridge_named(&a, "aa", "send,read").await;
    }
    let room = a.create_room(&host, "team").await.id;
    assert!(add(&a, &room, &format!("bb/{xb}")).await.expect("B's member joins"));
    assert!(add(&a, &room, &format!("cc/{xc}")).await.expect("C's member joins"));
    let (b_id, c_id) = (b.handle().home_id().to_string(), c.handle().home_id().to_string());

    b.say(&xb, &format!("room: {room}\nmention: {c_id}/{xc}")).await.expect("say");
    let said = b.wait_turns(&xb, 1).await.remove(0).output;
    assert!(said.contains("post: ok"), "{said}");
    let woken = c.wait_turns(&xc, 1).await.remove(0).output;
    assert!(woken.contains("over to you"), "{woken}");
    assert!(woken.contains(&b_id) && woken.contains(&xb), "the author is B's member: {woken}");
    let log = eventually("C's delivery confirmed in A's log", || async {
        let log = read(&a, &room).await;
        log.entries
            .iter()
            .find(|e| e.content == "over to you")
            .filter(|e| e.deliveries.first().is_some_and(|d| d.status().word() == "delivered"))
            .cloned()
    })
    .await;
    assert_eq!(log.woke, vec![format!("{c_id}/{xc}")]);
}

/// A mention right after the bridges were approved (nothing listed them since, so the
/// room's home has not yet heard of the approval) wakes the member: the room add over the
/// bridge tells the home it is active, and the delivery goes through the outbox whatever
/// the home last heard.
#[tokio::test]
async fn a_mention_right_after_approval_wakes_the_member() {
    let (a, b) = (open_home().await, member_home().await);
    let host = a.thread("echo", None).await.id;
    let xb = b.thread("member", None).await.id;
    a.bridge_named(&b, "hb", "read,send,wake,wait").await;
    let room = a.create_room(&host, "team").await.id;
    assert!(add(&a, &room, &format!("hb/{xb}")).await.expect("joins"));
    let member = format!("{}/{xb}", b.handle().home_id());
    let posted = post(&a, &room, "wake up", &[&member]).await;
    assert_eq!(posted.woke, std::slice::from_ref(&member));
    let turn = b.wait_turns(&xb, 1).await.remove(0).output;
    assert!(turn.contains("wake up"), "{turn}");
}

/// A room entry's delivery to a member in another home is a bridged send like any other:
/// while the member's home is away it is `pending`, in the room's log and in the bridge's
/// receipts, and tried again and again; the home stays away past the retry window and it
/// ends `expired`, the receipt saying so. (On a manual clock, moved on by the test.)
#[tokio::test]
async fn a_room_delivery_to_a_home_away_past_the_window_expires_with_a_receipt() {
    // Long enough for a second attempt whatever the first took (an attempt's bound is 5 s,
    // the pause after it about as long as the silence so far).
    let window = Duration::from_secs(20);
    let clock = kiki_tests::manual_clock();
    let a = TestHome::builder()
        .clock(&clock)
        .open_to_peers(window)
        .config(|c| c.bridge.connect_timeout = Duration::from_millis(200))
        .start()
        .await;
    let b = TestHome::builder().clock(&clock).open_to_peers(Duration::from_secs(60)).start().await;
    let host = a.thread("echo", None).await.id;
    let xb = b.thread("echo", None).await.id;
    a.bridge_named(&b, "bb", "send,wake").await;
    let room = a.create_room(&host, "team").await.id;
    assert!(add(&a, &room, &format!("bb/{xb}")).await.expect("joins"));
    // The join told `a` its bridge was approved (the next test covers a home that has not
    // heard yet).
    let store = a.store();
    eventually("a to record its bridge active", || async {
        let states = store.rows("SELECT state, 0 FROM bridges WHERE direction = 'outbound'").await;
        (states == [("active".to_string(), 0)]).then_some(())
    })
    .await;
    b.handle().shutdown();
    b.handle().stopped().await;

    let member = format!("{}/{xb}", b.handle().home_id());
    let started = clock.now_ms();
    let posted = post(&a, &room, "anyone there?", &[&member]).await;
    assert_eq!(posted.woke, std::slice::from_ref(&member));
    let delivery = async || {
        let log = read(&a, &room).await;
        let delivery = &log.entries[0].deliveries[0];
        (log.entries[0].id.clone(), delivery.status().word(), delivery.reason.clone())
    };
    let (entry, status, _) = delivery().await;
    assert_eq!(status, "pending");
    let key = format!("room:{entry}:{xb}");
    let receipt = |status: &'static str| {
        let key = key.clone();
        let a = &a;
        async move {
            receipts(a, "bb")
                .await
                .into_iter()
                .find(|r| r.idempotency_key == key && r.status().word() == status)
        }
    };
    assert!(receipt("pending").await.is_some(), "{:?}", receipts(&a, "bb").await);

    let (expired, _) =
        kiki_tests::eventually_advancing(&clock, STEP, LIMIT, "the delivery to expire", || {
            receipt("expired")
        })
        .await;
    assert_eq!(expired.reason, "expired", "{expired:?}");
    assert!(expired.attempts >= 2, "retried within the window: {expired:?}");
    let took = Duration::from_millis((clock.now_ms() - started) as u64);
    assert!(took >= window, "expired after {took:?}, before the window ended");
    assert_eq!(delivery().await, (entry, "expired".to_string(), "expired".to_string()));
}

/// A room delivery waits for a member's home that is away, whatever the room's home last
/// heard of its bridge there: it posts while the member's home is stopped and while it still
/// holds that bridge `requested` (as when the member's home went away before the join's
/// answer could teach it the approval: its record is set back so while it is stopped), and
/// the delivery is `pending`, not given up; the member's home comes back within the window
/// and its member is woken, once.
#[tokio::test]
async fn a_room_delivery_wakes_a_member_whose_home_is_back_within_the_window() {
    let (mut a, mut b) = (open_home().await, open_home().await);
    let host = a.thread("echo", None).await.id;
    let xb = b.thread("echo", None).await.id;
    a.bridge_named(&b, "bb", "send,wake").await;
    let room = a.create_room(&host, "team").await.id;
    assert!(add(&a, &room, &format!("bb/{xb}")).await.expect("joins"));
    b.handle().shutdown();
    b.handle().stopped().await;
    let store = a.store();
    a.restart_with(async |_| {
        let sql = "UPDATE bridges SET state = 'requested' WHERE direction = 'outbound'";
        assert_eq!(store.execute(sql).await, 1, "set back");
    })
    .await;

    let member = format!("{}/{xb}", b.handle().home_id());
    let posted = post(&a, &room, "wake up when you are back", &[&member]).await;
    assert_eq!(posted.woke, std::slice::from_ref(&member));
    let log = read(&a, &room).await;
    assert_eq!(log.entries[0].deliveries[0].status().word(), "pending", "{log:?}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(read(&a, &room).await.entries[0].deliveries[0].status().word(), "pending");

    b.restart().await;
    let turn = b.wait_turns(&xb, 1).await.remove(0);
    assert!(turn.output.contains("wake up when you are back"), "{}", turn.output);
    eventually("the delivery confirmed in the room's log", || async {
        let log = read(&a, &room).await;
        (log.entries[0].deliveries[0].status().word() == "delivered").then_some(())
    })
    .await;
    let receipt = receipts(&a, "bb").await.pop().expect("the delivery's receipt");
    assert_eq!(receipt.status().word(), "delivered", "{receipt:?}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(b.all_turns(&xb).await.len(), 1, "woken once");
}

/// How far a test moves a manual clock between looks, and at most in all.
const STEP: Duration = Duration::from_millis(100);
const LIMIT: Duration = Duration::from_secs(120);

/// A team room: the room lives on a team home served by two replicas sharing one Postgres
/// store and identity, its members in three personal homes, each bridged both ways with the
/// team home (their bridges to it list both replicas, approved through the second). The
/// room is made through one replica and its members added through either. A member's post
/// mentioning a member of another home, and the owner's post through the other replica,
/// each wake whom they mention, once, and both replicas read one log. With the first
/// replica stopped, the second carries the next wake.
#[tokio::test]
async fn a_team_room_on_two_replicas_wakes_members_of_three_homes() {
    let database = kiki_tests::postgres::TestDatabase::create().await;
    let url = database.url_with_password();
    let r1 = TestHome::builder()
        .open_to_peers(Duration::from_secs(60))
        .config(|c| {
            c.store.url = Some(url);
            c.store.lease = Duration::from_secs(2);
        })
        .start()
        .await;
    let r2 = TestHome::builder().open_to_peers(Duration::from_secs(60)).replica_of(&r1).start().await;
    assert_eq!(r1.handle().home_id(), r2.handle().home_id());
    let (p1, p2, p3) = (member_home().await, member_home().await, member_home().await);
    let host = r1.thread("echo", None).await.id;
    let x1 = p1.thread("mentioner", None).await.id;
    let x2 = p2.thread("member", None).await.id;
    let x3 = p3.thread("member", None).await.id;
    for (member, alias) in [(&p1, "m1"), (&p2, "m2"), (&p3, "m3")] {
        r1.bridge_named(member, alias, "send,wake").await;
        member.bridge_to_replicas(&[&r1, &r2], "team", "send,read").await;
    }
    let room = r2.create_room(&host, "team").await.id;
    assert!(add(&r1, &room, &format!("m1/{x1}")).await.expect("p1's member joins through r1"));
    assert!(add(&r2, &room, &format!("m2/{x2}")).await.expect("p2's member joins through r2"));
    assert!(add(&r1, &room, &format!("m3/{x3}")).await.expect("p3's member joins through r1"));
    let member = |home: &TestHome, thread: &str| format!("{}/{thread}", home.handle().home_id());

    p1.say(&x1, &format!("room: {room}\nmention: {}", member(&p3, &x3))).await.expect("say");
    let said = p1.wait_turns(&x1, 1).await.remove(0).output;
    assert!(said.contains("post: ok"), "{said}");
    let woken = p3.wait_turns(&x3, 1).await.remove(0).output;
    assert!(woken.contains("over to you") && woken.contains(&member(&p1, &x1)), "{woken}");
    assert!(woken.contains("post: ok"), "p3's member posts back: {woken}");

    let posted = post(&r2, &room, "your turn", &[&member(&p2, &x2)]).await;
    assert_eq!(posted.woke, [member(&p2, &x2)]);
    let woken = p2.wait_turns(&x2, 1).await.remove(0).output;
    assert!(woken.contains("your turn"), "{woken}");
    let contents = |log: pb::RoomReadResponse| log.entries.into_iter().map(|e| e.content).collect::<Vec<_>>();
    let through_r1 = eventually("p2's reply in the log", || async {
        let log = contents(read(&r1, &room).await);
        (log.len() == 4).then_some(log)
    })
    .await;
    assert_eq!(through_r1, contents(read(&r2, &room).await), "one log, whichever replica reads it");
    assert_eq!(through_r1[..2], ["over to you".to_string(), format!("reply from {x3}")]);

    r1.handle().shutdown();
    r1.handle().stopped().await;
    let posted = post(&r2, &room, "still here", &[&member(&p1, &x1)]).await;
    assert_eq!(posted.woke, [member(&p1, &x1)]);
    let woken = p1.wait_turns(&x1, 2).await.remove(1).input;
    assert!(woken.contains("still here"), "{woken}");
    // Each woken once: one turn per mention.
    assert_eq!((p2.all_turns(&x2).await.len(), p3.all_turns(&x3).await.len()), (1, 1));
}
