//! Closed-loop load: `clients` senders, each with its own connection, each sending its next
//! operation when the last was answered, for a period; every answer timed.

use std::future::Future;
use std::time::{Duration, Instant};

use super::report::{Round, histogram, record};

/// Runs `op(sender, client, n)` in a loop on every sender for `period`; the server's CPU
/// (`cpu`, read before and after) is charged to the round.
pub async fn closed_loop<S, F, Fut>(
    senders: &[S],
    period: Duration,
    cpu: impl Fn() -> Duration,
    op: F,
) -> Round
where
    S: Clone + Send + 'static,
    F: Fn(S, usize, usize) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let cpu_before = cpu();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (c, sender) in senders.iter().enumerate() {
        let (sender, op) = (sender.clone(), op.clone());
        tasks.push(tokio::spawn(async move {
            let mut latencies = histogram();
            let mut n = 0;
            while started.elapsed() < period {
                let t = Instant::now();
                op(sender.clone(), c, n).await;
                record(&mut latencies, t.elapsed());
                n += 1;
            }
            (n, latencies)
        }));
    }
    let mut round = Round { latencies: histogram(), ops: 0, seconds: 0.0, server_cpu: Duration::ZERO };
    for task in tasks {
        let (n, latencies) = task.await.expect("a sender");
        round.ops += n as u64;
        round.latencies.add(&latencies).expect("same bounds");
    }
    round.seconds = started.elapsed().as_secs_f64();
    round.server_cpu = cpu().saturating_sub(cpu_before);
    round
}

/// `n` operations one after another, each timed (a floor, a probe).
pub async fn one_by_one<F, Fut>(n: usize, mut op: F) -> Round
where
    F: FnMut(usize) -> Fut,
    Fut: Future<Output = ()>,
{
    let mut round = Round { latencies: histogram(), ops: n as u64, seconds: 0.0, server_cpu: Duration::ZERO };
    let started = Instant::now();
    for i in 0..n {
        let t = Instant::now();
        op(i).await;
        record(&mut round.latencies, t.elapsed());
    }
    round.seconds = started.elapsed().as_secs_f64();
    round
}

/// Durable ThreadSends of 200 bytes for `period`, sender `c` to `targets[c % len]`, keys
/// `KEY-c-n` (a round's own `key`, so rounds never replay each other).
pub async fn thread_sends(
    senders: &[kiki_client::ThreadClient],
    targets: Vec<kiki_proto::ThreadRef>,
    key: String,
    period: Duration,
    cpu: impl Fn() -> Duration,
) -> Round {
    let targets = std::sync::Arc::new(targets);
    closed_loop(senders, period, cpu, move |mut threads, c, n| {
        let request = kiki_proto::ThreadSendRequest {
            target: Some(targets[c % targets.len()].clone()),
            content: "x".repeat(200),
            idempotency_key: format!("{key}-{c}-{n}"),
            ..Default::default()
        };
        async move {
            threads.thread_send(request).await.expect("send");
        }
    })
    .await
}

/// Durable JetStream publishes of 200 bytes for `period`, sender `c` to `PREFIX.c`, message
/// ids `KEY-c-n`; the CPU is that of the servers `pids`.
pub async fn nats_publishes(
    senders: &[async_nats::jetstream::Context],
    prefix: &str,
    key: String,
    period: Duration,
    pids: Vec<u32>,
) -> Round {
    let (payload, prefix) = (bytes::Bytes::from(vec![b'x'; 200]), prefix.to_string());
    let cpu = || pids.iter().map(|pid| kiki_tests::measure::process_cpu_time(*pid)).sum();
    closed_loop(senders, period, cpu, move |js, c, n| {
        let (subject, id, payload) = (format!("{prefix}.{c}"), format!("{key}-{c}-{n}"), payload.clone());
        async move {
            super::nats::publish(&js, subject, id, payload).await;
        }
    })
    .await
}
