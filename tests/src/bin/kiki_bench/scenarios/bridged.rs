//! Scenarios across two homes: sends over a bridge, and a bridge healing after a partition.

use super::*;

impl Bench {
    /// Cross-home ThreadSends of 200-byte messages from `senders` clients of home A to busy
    /// threads of home B over a `send` bridge (each answered once B holds it: B's commit, A's
    /// record of the answer), in rounds interleaved with publishes to a NATS server whose
    /// stream lives on a second server joined to it by a leaf node (each answered once the
    /// second stored and synced it).
    pub(super) async fn bridge_send(&mut self, senders: usize) {
        let scenario = format!("bridge-send-{senders}");
        let source = KikiHome::start(&self.dir.join(format!("{scenario}-a")), 0, 0).await;
        let target = KikiHome::start(&self.dir.join(format!("{scenario}-b")), senders.min(16), 0).await;
        source.bridge_to(&target, "b", "send");
        let nats = self.nats();
        let leaf_port = nats::free_tcp_port();
        let hub = nats::Server::start_hub(&nats, &self.dir.join(format!("{scenario}-nats-a")), leaf_port);
        let store = nats::Server::start(
            &nats,
            &self.dir.join(format!("{scenario}-nats-b")),
            "store",
            &format!("leafnodes {{ remotes: [ {{ url: \"nats-leaf://127.0.0.1:{leaf_port}\" }} ] }}\n"),
        );
        nats::file_stream(&nats::connect(&store.url).await, "BRIDGE", vec!["bridge.>".into()]).await;
        let mut contexts = Vec::new();
        let mut kiki_clients = Vec::new();
        for _ in 0..senders {
            contexts.push(nats::connect(&hub.url).await);
            kiki_clients.push(Client::connect(&source.socket()).await.expect("connect").threads());
        }
        // The leaf node has carried the stream's interest to the hub once a publish is stored.
        nats::publish(&contexts[0], "bridge.warm".into(), "warm".into(), bytes::Bytes::from_static(b"w"))
            .await;
        let cpu = || source.cpu() + target.cpu();
        let mut results =
            [Measured::new("kiki", "two homes, a bridge"), Measured::new("NATS", "two servers, a leaf node")];
        let mut ratios = Vec::new();
        for round in 0..self.rounds {
            let mut this = [None, None];
            for step in 0..2 {
                let which = (step + round) % 2;
                progress(
                    &scenario,
                    &format!(
                        "round {}/{}: {} {}",
                        round + 1,
                        self.rounds,
                        results[which].system,
                        results[which].variant
                    ),
                );
                settle().await;
                let measured = if which == 0 {
                    let targets = target
                        .busy
                        .iter()
                        .map(|t| pb::ThreadRef {
                            host_id: "b".into(),
                            workspace_id: String::new(),
                            session_id: t.clone(),
                        })
                        .collect();
                    thread_sends(&kiki_clients, targets, format!("r{round}"), self.period, cpu).await
                } else {
                    let pids = vec![hub.pid(), store.pid()];
                    nats_publishes(&contexts, "bridge", format!("r{round}"), self.period, pids).await
                };
                results[which].add(&measured);
                this[which] = Some(measured);
            }
            let [Some(k), Some(n)] = this else { unreachable!("both ran") };
            ratios.push(k.throughput() / n.throughput());
        }
        results[0].server_peak_rss_kb = source.peak_rss_kb() + target.peak_rss_kb();
        results[1].server_peak_rss_kb = peak_rss_kb_of(hub.pid()) + peak_rss_kb_of(store.pid());
        let ratio = median(ratios);
        let floors = |name: &str, variant: &str| {
            self.rows.iter().find(|r| r.scenario == name && r.variant == variant).map(|r| r.p50_us)
        };
        let mut row = Row::of(&scenario, &results[0]);
        row.ratio = Some(ratio);
        let row = if senders == 1 {
            let bound = floors("floor-fsync", "4 KiB page")
                .zip(floors("floor-rtt", "UDP"))
                .map(|(f, r)| 2.0 * f + r + 500.0);
            let target = match bound {
                Some(bound) => format!("p50 ≤ 2 fsyncs + 1 round trip + 0.5 ms = {:.2} ms", bound / 1000.0),
                None => "p50 ≤ 2 fsyncs + 1 round trip + 0.5 ms (run floor-fsync and floor-rtt first)".into(),
            };
            let met = bound.map(|b| row.p50_us <= b);
            row.with_target(&target, met)
        } else {
            row.with_target("≥ 2× the NATS pair", Some(ratio >= 2.0))
        };
        self.rows.extend([row, Row::of(&scenario, &results[1])]);
        self.plots.push((
            format!("{scenario}: latency across two homes, kiki vs two NATS servers"),
            results.into_iter().collect(),
        ));
        source.stop();
        target.stop();
    }

    /// A send over a bridge whose link is cut (a UDP relay on the path drops every datagram)
    /// for 5 s: from the heal until the target's `echo` turn for it ended.
    pub(super) async fn bridge_heal(&mut self) {
        let source = KikiHome::start(&self.dir.join("bridge-heal-a"), 0, 0).await;
        let target = KikiHome::start(&self.dir.join("bridge-heal-b"), 0, 1).await;
        let listen =
            kiki_json(&target.home, &["status"])["bridge_listen"].as_str().expect("listen").to_string();
        let relay = kiki_tests::UdpRelay::start(listen.parse().expect("an address")).await;
        source.bridge_via(&target, &relay.addr.to_string(), "b", "send,wake");
        let thread = target.idle[0].clone();
        let newest = || {
            let mut threads = target.client.threads();
            let request = pb::ThreadReadRequest {
                target: Some(kiki_tests::local(&thread)),
                last: Some(1),
                ..Default::default()
            };
            async move {
                threads
                    .thread_read(request)
                    .await
                    .expect("read")
                    .into_inner()
                    .turns
                    .last()
                    .map_or(0, |t| t.seq)
            }
        };
        let mut heals = Vec::new();
        for round in 0..self.rounds.min(3) {
            progress(
                "bridge-heal",
                &format!("round {}/{}: partitioned for 5 s", round + 1, self.rounds.min(3)),
            );
            let before = newest().await;
            relay.partition(true);
            let mut threads = source.client.threads();
            let request = pb::ThreadSendRequest {
                target: Some(pb::ThreadRef {
                    host_id: "b".into(),
                    workspace_id: String::new(),
                    session_id: thread.clone(),
                }),
                content: format!("sent during partition {round}"),
                idempotency_key: format!("heal-{round}"),
                ..Default::default()
            };
            let sending = tokio::spawn(async move { threads.thread_send(request).await.map(drop) });
            tokio::time::sleep(Duration::from_secs(5)).await;
            relay.partition(false);
            let healed = Instant::now();
            progress(
                "bridge-heal",
                &format!("round {}/{}: healed, waiting for the delivery", round + 1, self.rounds.min(3)),
            );
            loop {
                if newest().await > before {
                    break;
                }
                assert!(healed.elapsed() < Duration::from_secs(120), "no delivery within 2 min of the heal");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            heals.push(healed.elapsed());
            let _ = sending.await;
        }
        let bound = "≤ the backoff cap (30 s) + 1 s";
        self.p50_within("bridge-heal", "heal → delivered, turn ended", &heals, 31_000_000.0, bound);
        source.stop();
        target.stop();
    }
}
