//! `kiki doctor` over the links: a running home pings each of its bridges' peers, and says
//! what is wrong with each in words — a peer that does not answer, one whose owner revoked
//! the bridge, a clock too far off — and looks at its own turns running too long.

use std::time::Duration;

use kiki_proto as pb;
use kiki_tests::TestHome;
use kiki_tests::bridges::open_home;

async fn doctor(home: &TestHome) -> Vec<pb::DoctorFinding> {
    home.client().home().doctor(pb::DoctorRequest {}).await.expect("doctor").into_inner().findings
}

fn found<'a>(findings: &'a [pb::DoctorFinding], check: &str, says: &str) -> &'a pb::DoctorFinding {
    findings
        .iter()
        .find(|f| f.check == check && f.message.contains(says))
        .unwrap_or_else(|| panic!("no {check} finding saying {says:?} in {findings:#?}"))
}

#[tokio::test]
async fn doctor_flags_a_stopped_peer_a_revoked_bridge_a_skewed_clock_and_a_long_turn() {
    let a = open_home().await;
    let well = open_home().await;
    let stopped = open_home().await;
    let revoking = open_home().await;
    // Ten seconds ahead of everyone else.
    let skewed_clock = kiki_daemon::time::Clock::manual(kiki_daemon::time::now_ms() + 10_000);
    let skewed =
        TestHome::builder().open_to_peers(Duration::from_secs(60)).clock(&skewed_clock).start().await;
    a.bridge_named(&well, "well", "send").await;
    a.bridge_named(&stopped, "gone", "send").await;
    a.bridge_named(&revoking, "revoker", "send").await;
    a.bridge_named(&skewed, "skewed", "send").await;
    stopped.handle().shutdown();
    stopped.handle().stopped().await;
    let theirs =
        revoking.client().bridges().bridge_list(pb::BridgeListRequest {}).await.expect("list").into_inner();
    let theirs = theirs.bridges.into_iter().next().expect("its inbound bridge");
    revoking
        .client()
        .bridges()
        .bridge_revoke(pb::BridgeRevokeRequest { bridge: theirs.id })
        .await
        .expect("revoke");

    let findings = doctor(&a).await;
    let ok = found(&findings, "bridge", "bridge well");
    assert!(ok.ok && ok.message.contains("answered in"), "{ok:?}");
    let gone = found(&findings, "bridge", "bridge gone");
    assert!(!gone.ok && gone.fix.contains("running"), "{gone:?}");
    let revoker = found(&findings, "bridge", "bridge revoker");
    assert!(!revoker.ok && revoker.message.contains("revoked"), "{revoker:?}");
    let clock = found(&findings, "clock", skewed.handle().home_id());
    assert!(!clock.ok && clock.message.contains("ahead of this one's"), "{clock:?}");
    assert!(
        !findings.iter().any(|f| f.check == "clock" && !f.message.contains(skewed.handle().home_id())),
        "only the skewed peer's clock: {findings:#?}"
    );

    // A turn running for hours, on a home whose clock the test moves on.
    let clock = kiki_tests::manual_clock();
    let busy = TestHome::builder()
        .shell_profile("hold", "cat > /dev/null; exec sleep 60")
        .clock(&clock)
        .start()
        .await;
    let thread = busy.thread("hold", Some("go")).await.id;
    busy.wait_running(&thread).await;
    assert!(!doctor(&busy).await.iter().any(|f| f.check == "turns"), "not long yet");
    clock.advance(Duration::from_secs(2 * 3600)).await;
    let findings = doctor(&busy).await;
    let long = found(&findings, "turns", &thread);
    assert!(
        !long.ok && long.message.contains("has run for 2.0 h") && long.fix.contains("kiki thread stop"),
        "{long:?}"
    );
    busy.stop(&thread).await.expect("stop");
}

/// A message to a peer that does not answer, waiting more than half its retry window, is
/// flagged with the bridge it waits on.
#[tokio::test]
async fn doctor_flags_a_message_waiting_past_half_its_window() {
    let clock = kiki_tests::manual_clock();
    let a = TestHome::builder().open_to_peers(Duration::from_secs(60)).clock(&clock).start().await;
    let b = open_home().await;
    a.bridge_named(&b, "bee", "send").await;
    let target = b.thread("echo", None).await.id;
    b.handle().shutdown();
    b.handle().stopped().await;
    let request = pb::ThreadSendRequest {
        target: Some(pb::ThreadRef { host_id: "bee".into(), session_id: target, ..Default::default() }),
        content: "anyone?".into(),
        idempotency_key: "k1".into(),
        ..Default::default()
    };
    a.client().threads().thread_send(request).await.expect("pending at the source");
    assert!(!doctor(&a).await.iter().any(|f| f.check == "outbox"), "not waited long yet");
    clock.advance(Duration::from_secs(40)).await;
    let findings = doctor(&a).await;
    let waiting = found(&findings, "outbox", "bridge bee");
    assert!(!waiting.ok && waiting.message.contains("of its 1m retry window"), "{waiting:?}");
}
