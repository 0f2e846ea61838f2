//! The home's metrics, in the Prometheus text format on `[metrics] listen` (OpenMetrics):
//! counters and histograms kept as things happen (see [`super::Observer`]). One per home
//! (a process may run several in tests).

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::error::Error;
use crate::mailbox::Sent;
use crate::store::{MessageStatus, TurnStatus, TurnUsage};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Outcome {
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Reason {
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TurnLabels {
    executor: String,
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Executor {
    executor: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TokenLabels {
    profile: String,
    kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Profile {
    profile: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Peer {
    peer: String,
}

/// Every metric of a home.
pub struct Metrics {
    registry: Registry,
    sends: Family<Outcome, Counter>,
    rejections: Family<Reason, Counter>,
    deliveries: Counter,
    turns: Family<TurnLabels, Counter>,
    turn_seconds: Family<Executor, Histogram>,
    tokens: Family<TokenLabels, Counter>,
    cost_micro_usd: Family<Profile, Counter>,
    room_posts: Counter,
    room_wakes: Counter,
    loop_guard_trips: Counter,
    loop_guard_holds: Counter,
    outbox_attempts: Family<Outcome, Counter>,
    link_rtt_seconds: Family<Peer, Gauge<f64, std::sync::atomic::AtomicU64>>,
    outbox_pending: Family<Peer, Gauge>,
    outbox_oldest_seconds: Family<Peer, Gauge<f64, std::sync::atomic::AtomicU64>>,
    permission_requests_waiting: Gauge,
    waiters_parked: Gauge,
    expirations: Counter,
    trace_spans_dropped: Counter,
    commit_seconds: Histogram,
    commit_writes: Histogram,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("kiki");
        let sends = Family::<Outcome, Counter>::default();
        registry.register(
            "sends",
            "ThreadSends and room posts taken by this home, by outcome (delivered, pending, undeliverable, replayed, refused)",
            sends.clone(),
        );
        let rejections = Family::<Reason, Counter>::default();
        registry.register(
            "rejections",
            "Sends refused or made undeliverable, by reason (permission_denied, bridge_revoked, expired, …)",
            rejections.clone(),
        );
        let deliveries = Counter::default();
        registry.register(
            "deliveries",
            "Messages delivered to a thread by their own send's commit",
            deliveries.clone(),
        );
        let turns = Family::<TurnLabels, Counter>::default();
        registry.register("turns", "Turns ended, by executor and outcome", turns.clone());
        let turn_seconds = Family::<Executor, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.01, 4.0, 10))
        });
        registry.register("turn_duration_seconds", "How long turns ran, by executor", turn_seconds.clone());
        let tokens = Family::<TokenLabels, Counter>::default();
        registry.register(
            "agent_tokens",
            "Tokens agents reported, by profile and kind (input, output)",
            tokens.clone(),
        );
        let cost_micro_usd = Family::<Profile, Counter>::default();
        registry.register(
            "agent_cost_micro_usd",
            "What agents reported spending, by profile, in millionths of a dollar",
            cost_micro_usd.clone(),
        );
        let room_posts = Counter::default();
        registry.register("room_posts", "Posts to rooms of this home", room_posts.clone());
        let room_wakes = Counter::default();
        registry.register("room_wakes", "Members woken by room posts", room_wakes.clone());
        let loop_guard_trips = Counter::default();
        registry.register("loop_guard_trips", "Rooms paused by the loop guard", loop_guard_trips.clone());
        let loop_guard_holds = Counter::default();
        registry.register(
            "loop_guard_holds",
            "Messages between two threads' agents held without waking, past `[threads] max_agent_wakes`",
            loop_guard_holds.clone(),
        );
        let outbox_attempts = Family::<Outcome, Counter>::default();
        registry.register(
            "outbox_attempts",
            "Attempts to reach another home with a pending send, by outcome (answered, retry)",
            outbox_attempts.clone(),
        );
        let link_rtt_seconds = Family::<Peer, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
        registry.register(
            "link_rtt_seconds",
            "The last call's round trip to each peer home this home calls",
            link_rtt_seconds.clone(),
        );
        let outbox_pending = Family::<Peer, Gauge>::default();
        registry.register(
            "outbox_pending",
            "Messages to each peer home not acknowledged yet (at the scrape)",
            outbox_pending.clone(),
        );
        let outbox_oldest_seconds = Family::<Peer, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
        registry.register(
            "outbox_oldest_seconds",
            "How long the oldest message to each peer home not acknowledged yet has waited (at the scrape)",
            outbox_oldest_seconds.clone(),
        );
        let permission_requests_waiting = Gauge::default();
        registry.register(
            "permission_requests_waiting",
            "Agents' permission requests waiting for the owner (at the scrape)",
            permission_requests_waiting.clone(),
        );
        let waiters_parked = Gauge::default();
        registry.register(
            "waiters_parked",
            "Calls parked waiting for a change: ThreadWaits, sends waiting for delivery, followers (at the scrape)",
            waiters_parked.clone(),
        );
        let expirations = Counter::default();
        registry.register(
            "expirations",
            "Messages from other homes that expired here unanswered at the end of their window",
            expirations.clone(),
        );
        let trace_spans_dropped = Counter::default();
        registry.register(
            "trace_spans_dropped",
            "Spans not exported because the export queue was full (`[otel] endpoint` down or slow)",
            trace_spans_dropped.clone(),
        );
        let commit_seconds = Histogram::new(exponential_buckets(0.000_1, 2.0, 16));
        registry.register(
            "store_commit_seconds",
            "How long the store's commits took (SQLite: a batch's writes and its fsync; Postgres: a batch from taking the write lock to its commit)",
            commit_seconds.clone(),
        );
        let commit_writes = Histogram::new(exponential_buckets(1.0, 2.0, 10));
        registry.register(
            "store_commit_writes",
            "How many writes each commit carried (the store's group commit)",
            commit_writes.clone(),
        );
        Self {
            registry,
            trace_spans_dropped,
            commit_seconds,
            commit_writes,
            expirations,
            outbox_pending,
            outbox_oldest_seconds,
            permission_requests_waiting,
            waiters_parked,
            sends,
            rejections,
            deliveries,
            turns,
            turn_seconds,
            tokens,
            cost_micro_usd,
            room_posts,
            room_wakes,
            loop_guard_trips,
            loop_guard_holds,
            outbox_attempts,
            link_rtt_seconds,
        }
    }
}

impl Metrics {
    /// A send's answer (or refusal), counted by outcome and, when refused or undeliverable,
    /// by reason.
    pub fn sent(&self, answer: &Result<Sent, Error>) {
        let (outcome, reason) = match answer {
            Ok(sent) if sent.replayed => ("replayed", None),
            Ok(sent) => match sent.status {
                MessageStatus::Delivered => {
                    self.deliveries.inc();
                    ("delivered", None)
                }
                MessageStatus::Undeliverable => ("undeliverable", Some(sent.reason.clone())),
                _ => ("pending", None),
            },
            Err(e) => return self.refused(&reason_of(e)),
        };
        self.sends.get_or_create(&Outcome { outcome: outcome.into() }).inc();
        if let Some(reason) = reason {
            self.rejections.get_or_create(&Reason { reason }).inc();
        }
    }

    /// A send refused for `reason` (a refusal's word: `permission_denied`, …).
    pub fn refused(&self, reason: &str) {
        self.sends.get_or_create(&Outcome { outcome: "refused".into() }).inc();
        self.rejections.get_or_create(&Reason { reason: reason.into() }).inc();
    }

    /// A turn that ended.
    pub fn turn_ended(
        &self,
        executor: &str,
        profile: &str,
        status: TurnStatus,
        ran: Duration,
        usage: Option<TurnUsage>,
    ) {
        let labels = TurnLabels { executor: executor.into(), outcome: status.as_str().into() };
        self.turns.get_or_create(&labels).inc();
        self.turn_seconds.get_or_create(&Executor { executor: executor.into() }).observe(ran.as_secs_f64());
        if let Some(usage) = usage {
            for (kind, n) in [("input", usage.input_tokens), ("output", usage.output_tokens)] {
                self.tokens
                    .get_or_create(&TokenLabels { profile: profile.into(), kind: kind.into() })
                    .inc_by(n);
            }
            let micro = (usage.cost_usd * 1e6).round().max(0.0) as u64;
            self.cost_micro_usd.get_or_create(&Profile { profile: profile.into() }).inc_by(micro);
        }
    }

    /// A room post taken, the members it woke, and whether it tripped the loop guard.
    pub fn room_post(&self, woke: usize, paused: bool) {
        self.room_posts.inc();
        self.room_wakes.inc_by(woke as u64);
        if paused {
            self.loop_guard_trips.inc();
        }
    }

    /// A message between two threads' agents held by the loop guard.
    pub fn held_by_loop_guard(&self) {
        self.loop_guard_holds.inc();
    }

    /// An outbox attempt at a peer: answered, or to be retried.
    pub fn outbox_attempt(&self, answered: bool) {
        let outcome = if answered { "answered" } else { "retry" };
        self.outbox_attempts.get_or_create(&Outcome { outcome: outcome.into() }).inc();
    }

    /// A call to `peer` answered after `rtt`.
    pub fn link_rtt(&self, peer: &str, rtt: Duration) {
        self.link_rtt_seconds.get_or_create(&Peer { peer: peer.into() }).set(rtt.as_secs_f64());
    }

    /// A store commit of `writes` writes that took `took`.
    pub fn committed(&self, writes: usize, took: Duration) {
        self.commit_seconds.observe(took.as_secs_f64());
        self.commit_writes.observe(writes as f64);
    }

    /// `n` bridged messages expired at their deadline.
    pub fn expired(&self, n: u64) {
        self.expirations.inc_by(n);
    }

    /// Sets the gauges read at a scrape: how much waits, now.
    pub fn sampled(&self, outbox: &[OutboxBacklog], permissions_waiting: usize, parked: usize) {
        for backlog in outbox {
            let peer = Peer { peer: backlog.peer.clone() };
            self.outbox_pending.get_or_create(&peer).set(backlog.pending as i64);
            self.outbox_oldest_seconds.get_or_create(&peer).set(backlog.oldest.as_secs_f64());
        }
        self.permission_requests_waiting.set(permissions_waiting as i64);
        self.waiters_parked.set(parked as i64);
        let dropped = super::traces::dropped_spans();
        self.trace_spans_dropped.inc_by(dropped.saturating_sub(self.trace_spans_dropped.get()));
    }

    /// The metrics in the text format.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut text, &self.registry) {
            warn!(error = %e, "cannot encode the metrics");
        }
        text
    }
}

/// The reason word of a refusal: the leading `word:` of its message when it has one
/// (`communication_disabled: …`), else its kind.
fn reason_of(e: &Error) -> String {
    let (kind, message) = match e {
        Error::InvalidArgument { .. } => ("invalid_argument", ""),
        Error::NotFound(m) => ("not_found", m.as_str()),
        Error::Conflict(m) => ("conflict", m.as_str()),
        Error::FailedPrecondition(m) => ("failed_precondition", m.as_str()),
        Error::PermissionDenied(m) => ("permission_denied", m.as_str()),
        Error::Unimplemented(m) => ("unimplemented", m.as_str()),
        Error::Unavailable(m) => ("unavailable", m.as_str()),
        Error::Store(_) => ("store", ""),
    };
    match message.split_once(':') {
        Some((word, _)) if !word.is_empty() && word.chars().all(|c| c.is_ascii_lowercase() || c == '_') => {
            word.to_string()
        }
        _ => kind.to_string(),
    }
}

/// Serves the home's metrics at `GET /metrics` (any path, in fact) on `listener` until `stop`.
pub async fn serve(
    listener: tokio::net::TcpListener,
    observer: Arc<super::Observer>,
    sample: Sampler,
    stop: CancellationToken,
) {
    info!(listen = %listener.local_addr().map(|a| a.to_string()).unwrap_or_default(), "metrics listening");
    loop {
        let (stream, _) = tokio::select! {
            () = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    warn!(error = %e, "cannot accept a metrics connection");
                    continue;
                }
            },
        };
        let (observer, sample) = (observer.clone(), sample.clone());
        tokio::spawn(async move {
            let answer =
                hyper::service::service_fn(move |_request: hyper::Request<hyper::body::Incoming>| {
                    let (observer, sample) = (observer.clone(), sample.clone());
                    async move {
                        sample.sample(observer.metrics()).await;
                        let body = observer.metrics().encode();
                        hyper::Response::builder()
                            .header(
                                "content-type",
                                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                            )
                            .body(http_body_util::Full::new(hyper::body::Bytes::from(body)))
                    }
                });
            let io = hyper_util::rt::TokioIo::new(stream);
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(io, answer).await;
        });
    }
}

/// What waits in the outbox for one peer.
pub struct OutboxBacklog {
    pub peer: String,
    pub pending: u64,
    /// How long the oldest has waited (zero when none waits).
    pub oldest: Duration,
}

/// What a scrape reads of the home besides the counters: the store's outbox and open
/// permission requests, and the callers parked.
#[derive(Clone)]
pub struct Sampler {
    pub store: Arc<dyn crate::store::Store>,
    pub signals: crate::threads::signals::Signals,
    pub clock: crate::time::Clock,
}

impl Sampler {
    async fn sample(&self, metrics: &Metrics) {
        use crate::store::Direction;
        let mut pending = Vec::new();
        match self.store.bridges().await {
            Ok(bridges) => {
                for bridge in bridges.iter().filter(|b| b.direction == Direction::Outbound) {
                    let peer = &bridge.peer_home_id;
                    let counted = self.store.outbox_pending(peer, &bridge.id, &[]).await;
                    let oldest = self.store.outbox_oldest_pending(peer).await;
                    match (counted, oldest) {
                        (Ok(n), Ok(oldest)) => pending.push(OutboxBacklog {
                            peer: peer.clone(),
                            pending: n,
                            oldest: oldest.map_or(Duration::ZERO, |at| {
                                Duration::from_millis((self.clock.now_ms() - at).max(0) as u64)
                            }),
                        }),
                        (Err(e), _) | (_, Err(e)) => {
                            warn!(error = %e, "cannot read the outbox for the metrics")
                        }
                    }
                }
            }
            Err(e) => warn!(error = %e, "cannot read the bridges for the metrics"),
        }
        let waiting = match self.store.open_attention(10_000).await {
            Ok(open) => open.iter().filter(|e| e.request_id.is_some()).count(),
            Err(e) => {
                warn!(error = %e, "cannot read the open permission requests for the metrics");
                0
            }
        };
        metrics.sampled(&pending, waiting, self.signals.parked());
    }
}
