//! The daemon's bridge logic over the in-memory network (the transport seam): deterministic
//! partitions between homes, no sockets.

use kiki_bridge::memory::MemoryNetwork;
use kiki_proto as pb;
use kiki_tests::TestHome;

async fn home(network: &std::sync::Arc<MemoryNetwork>) -> TestHome {
    TestHome::builder()
        .memory_network(network)
        .config(|c| {
            c.thread_communication.enabled = Some(true);
            c.mailbox.delivery_wait = std::time::Duration::from_millis(300);
        })
        .start()
        .await
}

fn send(session: &str, content: &str, key: &str) -> pb::ThreadSendRequest {
    pb::ThreadSendRequest {
        target: Some(pb::ThreadRef {
            host_id: "bee".into(),
            workspace_id: String::new(),
            session_id: session.into(),
        }),
        content: content.into(),
        idempotency_key: key.into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn pairing_sending_and_a_partition_over_the_simulated_network() {
    let network = MemoryNetwork::new();
    let (a, b) = (home(&network).await, home(&network).await);
    let (a_id, b_id) = (a.handle().home_id().to_string(), b.handle().home_id().to_string());
    let listen =
        b.client().bridges().bridge_list(pb::BridgeListRequest {}).await.expect("list").into_inner().listen;
    assert!(listen.starts_with("10.0.0.1:"), "the simulated network, not a UDP socket: {listen}");
    let request = pb::BridgeRequestRequest {
        address: listen,
        want: vec!["read,send,wake".into()],
        expect: b_id.clone(),
        name: "bee".into(),
    };
    let id = a.client().bridges().bridge_request(request).await.expect("request").into_inner().request_id;
    let approve =
        pb::BridgeApproveRequest { request_id: id, allow: vec!["read,send,wake".into()], workspaces: vec![] };
    b.client().bridges().bridge_approve(approve).await.expect("approve");

    let t = b.thread("echo", None).await;
    let list = pb::ThreadListRequest { bridge: "bee".into(), ..Default::default() };
    let listed = a.client().threads().thread_list(list).await.expect("list").into_inner();
    assert_eq!(listed.threads.len(), 1);
    let sent = a.client().threads().thread_send(send(&t.id, "first", "k1")).await.expect("send").into_inner();
    assert_eq!(sent.status(), pb::SendStatus::Delivered);

    network.partition(&a_id, &b_id, true);
    let sent =
        a.client().threads().thread_send(send(&t.id, "second", "k2")).await.expect("send").into_inner();
    assert_eq!(sent.status(), pb::SendStatus::Pending, "durable at the source while cut off");
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(b.all_turns(&t.id).await.len(), 1, "nothing crossed the partition");
    network.partition(&a_id, &b_id, false);
    let turns = b.wait_turns(&t.id, 2).await;
    assert_eq!(turns[1].output, "echo: second");
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(b.all_turns(&t.id).await.len(), 2, "delivered once");
}
