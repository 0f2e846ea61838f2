//! The daemon's bridge logic over the in-memory network (the transport seam): deterministic
//! partitions between homes, no sockets.

use kiki_bridge::memory::MemoryNetwork;
use kiki_daemon::time::Clock;
use kiki_proto as pb;
use kiki_proto::Word;
use kiki_tests::bridges::{list_via, receipt_no_longer, receipts, remote_send};
use kiki_tests::{TestHome, TestHomeBuilder};

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// A home on `network` whose threads accept peer messages.
fn open_home_on(network: &std::sync::Arc<MemoryNetwork>) -> TestHomeBuilder {
    TestHome::builder().memory_network(network).config(|c| {
        c.thread_communication.enabled = Some(true);
        c.mailbox.delivery_wait = std::time::Duration::from_millis(300);
    })
}

async fn home(network: &std::sync::Arc<MemoryNetwork>) -> TestHome {
    open_home_on(network).start().await
}

/// A small seeded generator (xorshift64*): the same seed replays the same fault schedule.
struct Schedule(u64);

impl Schedule {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn one_in(&mut self, n: u64) -> bool {
        self.next().is_multiple_of(n)
    }
}

#[tokio::test]
async fn pairing_sending_and_a_partition_over_the_simulated_network() {
    let network = MemoryNetwork::new();
    let (a, b) = (home(&network).await, home(&network).await);
    let (a_id, b_id) = (a.handle().home_id().to_string(), b.handle().home_id().to_string());
    let listen = b.bridge_listen().await;
    assert!(
        listen.starts_with("10.0.") && listen.ends_with(":7443"),
        "the simulated network, not a UDP socket: {listen}"
    );
    a.bridge_to(&b, "read,send,wake").await;

    let t = b.thread("echo", None).await;
    let listed = a.client().threads().thread_list(list_via("bee")).await.expect("list").into_inner();
    assert_eq!(listed.threads.len(), 1);
    let sent = a.send(remote_send("bee", &t.id, "first", "k1")).await.expect("send");
    assert_eq!(sent.status(), pb::SendStatus::Delivered);

    network.partition(&a_id, &b_id, true);
    let sent = a.send(remote_send("bee", &t.id, "second", "k2")).await.expect("send");
    assert_eq!(sent.status(), pb::SendStatus::Pending, "durable at the source while cut off");
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(b.all_turns(&t.id).await.len(), 1, "nothing crossed the partition");
    network.partition(&a_id, &b_id, false);
    let turns = b.wait_turns(&t.id, 2).await;
    assert_eq!(turns[1].output, "echo: second");
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(b.all_turns(&t.id).await.len(), 2, "delivered once");
}

/// Messages that entered the thread's turns, per source home; no message twice.
async fn arrivals(target: &TestHome, thread: &str, seed: u64) -> HashMap<String, usize> {
    let mut per_source: HashMap<String, usize> = HashMap::new();
    let mut ids = HashSet::new();
    for turn in target.all_turns(thread).await {
        for input in turn.inputs.iter().filter(|i| !i.message_id.is_empty()) {
            assert!(ids.insert(input.message_id.clone()), "seed {seed:#x}: a message entered a turn twice");
            let from = input.source.as_ref().map(|s| s.host_id.clone()).unwrap_or_default();
            *per_source.entry(from).or_default() += 1;
        }
    }
    per_source
}

/// Four homes: three send to the fourth while each link is, round by round on a seeded
/// schedule, healthy, cut, or losing the target's answers (the target accepts, the source
/// hears a failure and retries what the target already has), and callers now and then retry a
/// send with its key. Every message must arrive exactly once, and a retried send must get its
/// first answer's message id.
#[tokio::test]
async fn three_homes_send_through_flapping_links_and_each_message_arrives_once() {
    const ROUNDS: usize = 25;
    // `KIKI_SEED=0x…` replays another schedule (say, in a loop hunting for one that fails).
    let seed = std::env::var("KIKI_SEED")
        .ok()
        .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
        .unwrap_or(0x5eed_0004);
    let mut schedule = Schedule(seed);
    let network = MemoryNetwork::new();
    let target = home(&network).await;
    let mut sources = Vec::new();
    for _ in 0..3 {
        let source = home(&network).await;
        source.bridge_to(&target, "send,wake").await;
        sources.push(source);
    }
    let target_id = target.handle().home_id().to_string();
    let inbox = target.thread("echo", None).await;
    // (source, key) → the message id the first answer gave.
    let mut first_answers: HashMap<(usize, String), String> = HashMap::new();
    let mut held_back = 0;
    for round in 0..ROUNDS {
        // Each link this round: healthy, cut, or losing the target's answers.
        for source in &sources {
            let fault = schedule.next() % 3;
            network.partition(source.handle().home_id(), &target_id, fault == 1);
            network.lose_answers(source.handle().home_id(), &target_id, fault == 2);
        }
        let mut calls = Vec::new();
        for (n, source) in sources.iter().enumerate() {
            let mut threads = source.client().threads();
            let key = format!("m{round}");
            // Now and then the caller also retries an earlier send (same key, same content).
            let retry =
                (round > 0 && schedule.one_in(3)).then(|| format!("m{}", schedule.next() as usize % round));
            let session = inbox.id.clone();
            calls.push(tokio::spawn(async move {
                let mut answers = Vec::new();
                for key in std::iter::once(key).chain(retry) {
                    let request = remote_send("bee", &session, &format!("from {n}: {key}"), &key);
                    let answer = threads.thread_send(request).await.expect("send").into_inner();
                    assert_ne!(answer.status(), pb::SendStatus::Undeliverable, "{answer:?}");
                    let pending = answer.status() == pb::SendStatus::Pending;
                    answers.push((key, answer.message_id, pending));
                }
                (n, answers)
            }));
        }
        for call in calls {
            let (n, answers) = call.await.expect("sender");
            for (key, id, pending) in answers {
                held_back += usize::from(pending);
                let first = first_answers.entry((n, key.clone())).or_insert_with(|| id.clone());
                assert_eq!(
                    *first, id,
                    "seed {seed:#x}: a retry of {key} from source {n} got another message"
                );
            }
        }
    }
    assert!(
        held_back > 10,
        "seed {seed:#x}: the schedule cut links during sends ({held_back} answered pending)"
    );
    for source in &sources {
        network.partition(source.handle().home_id(), &target_id, false);
        network.lose_answers(source.handle().home_id(), &target_id, false);
    }

    let expected = sources.len() * ROUNDS;
    let started = Instant::now();
    while arrivals(&target, &inbox.id, seed).await.values().sum::<usize>() < expected
        && started.elapsed() < Duration::from_secs(60)
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Late duplicates would show up now.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let delivered = arrivals(&target, &inbox.id, seed).await;
    for source in &sources {
        assert_eq!(
            delivered.get(source.handle().home_id()).copied().unwrap_or(0),
            ROUNDS,
            "seed {seed:#x}: every message of {} arrives exactly once",
            source.handle().home_id()
        );
    }
}

/// The receipt of the send with `key` over "bee" at `home`, once it says `delivered`.
async fn delivered_receipt(home: &TestHome, key: &str) -> pb::Receipt {
    kiki_tests::eventually_on(home.clock(), "the source's receipt to say delivered", || async {
        receipts(home, "bee")
            .await
            .into_iter()
            .find(|r| r.idempotency_key == key && r.status().word() == "delivered")
    })
    .await
}

/// Two homes on `network`: `a` paired to `b` as "bee" with `permissions`, and an echo thread
/// on `b`.
struct Paired {
    a: TestHome,
    b: TestHome,
    a_id: String,
    b_id: String,
    thread: String,
}

async fn paired(network: &std::sync::Arc<MemoryNetwork>, permissions: &str) -> Paired {
    paired_with_window(network, permissions, Duration::from_secs(15 * 60)).await
}

/// [`paired`], `a` retrying its sends for `window`.
async fn paired_with_window(
    network: &std::sync::Arc<MemoryNetwork>,
    permissions: &str,
    window: Duration,
) -> Paired {
    paired_on_clock(network, permissions, window, &Clock::system()).await
}

/// [`paired_with_window`], both homes on `clock`.
async fn paired_on_clock(
    network: &std::sync::Arc<MemoryNetwork>,
    permissions: &str,
    window: Duration,
    clock: &Clock,
) -> Paired {
    let a = open_home_on(network).clock(clock).config(move |c| c.bridge.retry_window = window).start().await;
    let b = open_home_on(network).clock(clock).start().await;
    let (a_id, b_id) = (a.handle().home_id().to_string(), b.handle().home_id().to_string());
    a.bridge_to(&b, permissions).await;
    let thread = b.thread("echo", None).await.id;
    Paired { a, b, a_id, b_id, thread }
}

/// The target accepted a message but its answer was lost, and before the source retried,
/// the target's owner turned the thread's communication off. The retry gets the original
/// answer (the key decides before the switch), so the source records the message as
/// accepted, not refused, and the message waits at the target, deleted by nothing.
#[tokio::test]
async fn a_retry_after_the_target_closed_its_switch_gets_the_original_answer() {
    let network = MemoryNetwork::new();
    let Paired { a, b, a_id, b_id, thread: t } = paired(&network, "send").await;
    network.lose_answers(&a_id, &b_id, true);
    let sent = a.send(remote_send("bee", &t, "held", "k1")).await.expect("send");
    assert_eq!(sent.status(), pb::SendStatus::Pending);
    let off = pb::ThreadSetRequest {
        target: Some(kiki_tests::local(&t)),
        communication: pb::Communication::Off as i32,
    };
    b.client().home().thread_set(off).await.expect("switch off");
    network.lose_answers(&a_id, &b_id, false);

    let settled = receipt_no_longer(&a, "bee", "k1", "pending").await;
    assert_eq!((settled.status().word().as_str(), settled.reason.as_str()), ("accepted", ""), "{settled:?}");
    let new = a.send(remote_send("bee", &t, "new", "k2")).await;
    let refused = new.expect_err("a new key is refused by the switch");
    assert!(refused.message().contains("communication_disabled"), "{}", refused.message());
    b.say(&t, "the user speaks").await.expect("say");
    let turn = b.wait_turns(&t, 1).await.remove(0);
    assert_eq!(turn.output, "echo: the user speaks", "held back while communication is off");
}

/// [`paired_with_window`], every answer from `b` to `a` lost, and a send of `content` with
/// the key `k1` that hears none (it is pending).
async fn sent_unanswered(
    network: &std::sync::Arc<MemoryNetwork>,
    permissions: &str,
    window: Duration,
    content: &str,
) -> Paired {
    // On a manual clock: the window ends as the test's looks move the clock on.
    let paired = paired_on_clock(network, permissions, window, &kiki_tests::manual_clock()).await;
    network.lose_answers(&paired.a_id, &paired.b_id, true);
    let sent = paired.a.send(remote_send("bee", &paired.thread, content, "k1")).await.expect("send");
    assert_eq!(sent.status(), pb::SendStatus::Pending, "no answer came");
    paired
}

/// The target refused a send for good but its answer was lost: the source's retry is
/// refused again, with the same reason, and the target's receipts still say so once.
#[tokio::test]
async fn a_refusal_whose_answer_was_lost_is_written_once_at_the_target() {
    let network = MemoryNetwork::new();
    let Paired { a, b, a_id, b_id, .. } = paired(&network, "send").await;
    network.lose_answers(&a_id, &b_id, true);
    let sent = a.send(remote_send("bee", "th_nope", "lost", "k1")).await.expect("send");
    assert_eq!(sent.status(), pb::SendStatus::Pending);
    network.lose_answers(&a_id, &b_id, false);

    let settled = receipt_no_longer(&a, "bee", "k1", "pending").await;
    assert_eq!((settled.status().word().as_str(), settled.reason.as_str()), ("rejected", "thread_not_found"));
    let at_target = receipts(&b, &a_id).await;
    let refusals: Vec<_> = at_target.iter().filter(|r| r.idempotency_key == "k1").collect();
    assert_eq!(refusals.len(), 1, "{refusals:?}");
    assert_eq!(
        (refusals[0].status().word().as_str(), refusals[0].reason.as_str()),
        ("rejected", "thread_not_found")
    );
}

/// The source's owner revokes its own outbound bridge while a send waits in the outbox for a
/// cut-off target: the send ends as rejected (`bridge_revoked`) instead of being retried.
#[tokio::test]
async fn revoking_at_the_source_ends_its_pending_sends() {
    let network = MemoryNetwork::new();
    let Paired { a, b, a_id, b_id, thread: t } = paired(&network, "send,wake").await;
    network.partition(&a_id, &b_id, true);
    let sent = a.send(remote_send("bee", &t, "stuck", "k1")).await.expect("send");
    assert_eq!(sent.status(), pb::SendStatus::Pending);
    a.client()
        .bridges()
        .bridge_revoke(pb::BridgeRevokeRequest { bridge: "bee".into() })
        .await
        .expect("revoke");
    let ended = receipt_no_longer(&a, "bee", "k1", "pending").await;
    assert_eq!((ended.status().word().as_str(), ended.reason.as_str()), ("rejected", "bridge_revoked"));
    // A retry with its key is answered from the outbox, as any replay; a new key is refused.
    let again = a.send(remote_send("bee", &t, "stuck", "k1")).await.expect("replay");
    assert_eq!(
        (again.status(), again.replayed, again.reason.as_str()),
        (pb::SendStatus::Undeliverable, true, "bridge_revoked")
    );
    let new = a.send(remote_send("bee", &t, "another", "k2")).await.expect_err("refused");
    assert!(new.message().contains("bridge_revoked"), "{}", new.message());
    network.partition(&a_id, &b_id, false);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(b.all_turns(&t).await.is_empty(), "nothing was delivered");
}

/// A follow-up that gets no answer asks again later: the source learns of the delivery once
/// the link is back, however long the target held the message.
#[tokio::test]
async fn follow_ups_outlast_a_partition() {
    let network = MemoryNetwork::new();
    let clock = kiki_tests::manual_clock();
    let window = Duration::from_secs(15 * 60);
    let Paired { a, b, a_id, b_id, thread: t } = paired_on_clock(&network, "send", window, &clock).await;
    let sent = a.send(remote_send("bee", &t, "held", "k1")).await.expect("send");
    assert_eq!(sent.status(), pb::SendStatus::Pending, "no wake: it waits at the target");
    assert_eq!(receipt_no_longer(&a, "bee", "k1", "pending").await.status().word(), "accepted");
    network.partition(&a_id, &b_id, true);
    b.say(&t, "the user speaks").await.expect("say");
    b.wait_turns(&t, 1).await;
    // Follow-ups fail meanwhile (their pauses grow with the message's age).
    kiki_tests::advance_in_steps(&clock, Duration::from_secs(5), Duration::from_millis(100)).await;
    assert_eq!(
        receipt_no_longer(&a, "bee", "k1", "pending").await.status().word(),
        "accepted",
        "the source cannot know yet"
    );
    network.partition(&a_id, &b_id, false);
    kiki_tests::eventually_on(&clock, "the source's receipt to say delivered", || async {
        (receipt_no_longer(&a, "bee", "k1", "pending").await.status().word() == "delivered").then_some(())
    })
    .await;
}

/// The target took a message but the source never heard (every answer lost) until its retry
/// window ended: the source declares it expired, and the target never delivers it — also
/// when the thread runs a turn later — but says so in its receipts.
#[tokio::test]
async fn a_message_its_source_gave_up_on_is_never_delivered() {
    let network = MemoryNetwork::new();
    let Paired { a, b, a_id, b_id, thread: t } =
        sent_unanswered(&network, "send", Duration::from_secs(3), "too late").await;
    let expired = receipt_no_longer(&a, "bee", "k1", "pending").await;
    assert_eq!((expired.status().word().as_str(), expired.reason.as_str()), ("expired", "expired"));
    // The target agrees without waiting for a turn of the thread.
    kiki_tests::eventually_on(b.clock(), "the target's receipt to say expired", || async {
        receipts(&b, &a_id).await.into_iter().find(|r| r.status().word() == "expired")
    })
    .await;
    network.lose_answers(&a_id, &b_id, false);

    b.say(&t, "the user speaks").await.expect("say");
    let turn = b.wait_turns(&t, 1).await.remove(0);
    assert_eq!(turn.output, "echo: the user speaks", "the expired message stays out of the prompt");
    let mut story: Vec<String> =
        receipts(&b, &a_id).await.iter().map(|r| format!("{}:{}", r.status().word(), r.reason)).collect();
    story.sort();
    assert_eq!(story, ["accepted:", "expired:expired"]);
    // A retry now hears the same.
    let again = a.send(remote_send("bee", &t, "too late", "k1")).await.expect("replay");
    assert_eq!((again.status(), again.reason.as_str()), (pb::SendStatus::Undeliverable, "expired"));
}

/// The target delivered a message into a prompt, but every answer saying so was lost until
/// the source's window ended: the source declares it expired then, asks again until the
/// target answers, and its receipt (and a retry) then says delivered.
#[tokio::test]
async fn a_message_delivered_before_its_window_ended_is_found_so_after_it_expired() {
    let network = MemoryNetwork::new();
    let Paired { a, b, a_id, b_id, thread: t } =
        sent_unanswered(&network, "send,wake", Duration::from_secs(2), "in time").await;
    let turn = b.wait_turns(&t, 1).await.remove(0);
    assert!(turn.output.contains("echo: in time"), "{}", turn.output);
    let expired = receipt_no_longer(&a, "bee", "k1", "pending").await;
    assert_eq!((expired.status().word().as_str(), expired.reason.as_str()), ("expired", "expired"));
    network.lose_answers(&a_id, &b_id, false);

    assert_eq!(delivered_receipt(&a, "k1").await.reason, "found_delivered");
    let again = a.send(remote_send("bee", &t, "in time", "k1")).await.expect("replay");
    assert_eq!((again.status(), again.reason.as_str()), (pb::SendStatus::Delivered, "found_delivered"));
    assert_eq!(b.wait_turns(&t, 1).await.len(), 1, "delivered once");
}

/// A message the source knows arrived (it heard `accepted`) is confirmed by its follow-up:
/// it waits at the target past the source's retry window, for a turn started by something
/// else, and is delivered then.
#[tokio::test]
async fn a_confirmed_message_waits_past_its_window() {
    let network = MemoryNetwork::new();
    let window = Duration::from_secs(2);
    let clock = kiki_tests::manual_clock();
    let Paired { a, b, thread: t, .. } = paired_on_clock(&network, "send", window, &clock).await;
    let sent = a.send(remote_send("bee", &t, "held", "k1")).await.expect("send");
    assert_eq!(sent.status(), pb::SendStatus::Pending, "no wake: it waits at the target");
    assert_eq!(receipt_no_longer(&a, "bee", "k1", "pending").await.status().word(), "accepted");
    // The source's follow-up confirms it within the window (the target drops its deadline);
    // the clock moves on only as fast as that happens, then past the window.
    let confirmed = "SELECT COUNT(*) FROM messages WHERE content = 'held' AND deadline IS NULL";
    let (_, passed) = kiki_tests::eventually_advancing(
        &clock,
        Duration::from_millis(100),
        window,
        "the follow-up to confirm the message",
        || async { (b.store().count(confirmed).await == 1).then_some(()) },
    )
    .await;
    kiki_tests::advance_in_steps(
        &clock,
        window + Duration::from_secs(2) - passed,
        Duration::from_millis(100),
    )
    .await;
    b.say(&t, "the user speaks").await.expect("say");
    let turn = b.wait_turns(&t, 1).await.remove(0);
    assert!(turn.output.contains("echo: held"), "{}", turn.output);
    delivered_receipt(&a, "k1").await;
}

/// A message its source could not confirm (the link cut once it arrived) expires at the
/// target when its deadline passes, and the target's metrics count it.
#[tokio::test]
async fn an_unconfirmed_message_expires_at_the_target_and_is_counted() {
    let network = MemoryNetwork::new();
    let window = Duration::from_secs(2);
    let clock = kiki_tests::manual_clock();
    let port = kiki_tests::binaries::free_tcp_port();
    let a =
        open_home_on(&network).clock(&clock).config(move |c| c.bridge.retry_window = window).start().await;
    let b = open_home_on(&network)
        .clock(&clock)
        .config(move |c| c.metrics.listen = Some(std::net::SocketAddr::from(([127, 0, 0, 1], port))))
        .start()
        .await;
    a.bridge_to(&b, "send").await;
    let t = b.thread("echo", None).await.id;
    let sent = a.send(remote_send("bee", &t, "unconfirmed", "k1")).await.expect("send");
    assert_eq!(sent.status(), pb::SendStatus::Pending, "no wake: it waits at the target");
    network.partition(a.handle().home_id(), b.handle().home_id(), true);
    let scrape =
        || async { tokio::task::spawn_blocking(move || kiki_tests::scrape(port)).await.expect("scrape") };
    assert_eq!(kiki_tests::metric(&scrape().await, "kiki_expirations_total"), 0.0);
    kiki_tests::advance_in_steps(&clock, window + Duration::from_secs(2), Duration::from_millis(100)).await;
    let a_id = a.handle().home_id().to_string();
    kiki_tests::eventually_on(&clock, "the target to expire it", || async {
        receipts(&b, &a_id).await.into_iter().find(|r| r.status().word() == "expired")
    })
    .await;
    assert_eq!(kiki_tests::metric(&scrape().await, "kiki_expirations_total"), 1.0);
}
