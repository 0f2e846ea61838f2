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

/// Every metric of a home, registered by subject in the order the text lists them.
pub struct Metrics {
    registry: Registry,
    sends: SendMetrics,
    turns: TurnMetrics,
    rooms: RoomMetrics,
    outbox: OutboxMetrics,
    home: HomeMetrics,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("kiki");
        let sends = SendMetrics::register(&mut registry);
        let turns = TurnMetrics::register(&mut registry);
        let rooms = RoomMetrics::register(&mut registry);
        let outbox = OutboxMetrics::register(&mut registry);
        let home = HomeMetrics::register(&mut registry);
        Self { registry, sends, turns, rooms, outbox, home }
    }
}

/// Registers `metric` as `name` and keeps a handle to it (the registry holds another).
fn register<M>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M
where
    M: prometheus_client::registry::Metric + Clone,
{
    registry.register(name, help, metric.clone());
    metric
}

/// Sends to this home's threads and rooms, and what became of them.
struct SendMetrics {
    taken: Family<Outcome, Counter>,
    rejections: Family<Reason, Counter>,
    deliveries: Counter,
}

impl SendMetrics {
    fn register(registry: &mut Registry) -> Self {
        Self {
            taken: register(
                registry,
                "sends",
                "ThreadSends and room posts taken by this home, by outcome (delivered, pending, undeliverable, replayed, refused)",
                Family::default(),
            ),
            rejections: register(
                registry,
                "rejections",
                "Sends refused or made undeliverable, by reason (permission_denied, bridge_revoked, expired, …)",
                Family::default(),
            ),
            deliveries: register(
                registry,
                "deliveries",
                "Messages delivered to a thread by their own send's commit",
                Counter::default(),
            ),
        }
    }
}

/// Turns, and what their agents reported using.
struct TurnMetrics {
    ended: Family<TurnLabels, Counter>,
    turn_seconds: Family<Executor, Histogram>,
    tokens: Family<TokenLabels, Counter>,
    cost_micro_usd: Family<Profile, Counter>,
}

impl TurnMetrics {
    fn register(registry: &mut Registry) -> Self {
        let durations = Family::<Executor, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.01, 4.0, 10))
        });
        Self {
            ended: register(registry, "turns", "Turns ended, by executor and outcome", Family::default()),
            turn_seconds: register(
                registry,
                "turn_duration_seconds",
                "How long turns ran, by executor",
                durations,
            ),
            tokens: register(
                registry,
                "agent_tokens",
                "Tokens agents reported, by profile and kind (input, output)",
                Family::default(),
            ),
            cost_micro_usd: register(
                registry,
                "agent_cost_micro_usd",
                "What agents reported spending, by profile, in millionths of a dollar",
                Family::default(),
            ),
        }
    }
}

/// Room posts, and the loop guards between agents.
struct RoomMetrics {
    posts: Counter,
    wakes: Counter,
    loop_guard_trips: Counter,
    loop_guard_holds: Counter,
}

impl RoomMetrics {
    fn register(registry: &mut Registry) -> Self {
        Self {
            posts: register(registry, "room_posts", "Posts to rooms of this home", Counter::default()),
            wakes: register(registry, "room_wakes", "Members woken by room posts", Counter::default()),
            loop_guard_trips: register(
                registry,
                "loop_guard_trips",
                "Rooms paused by the loop guard",
                Counter::default(),
            ),
            loop_guard_holds: register(
                registry,
                "loop_guard_holds",
                "Messages between two threads' agents held without waking, past `[threads] max_agent_wakes`",
                Counter::default(),
            ),
        }
    }
}

/// Sends to other homes: the outbox's attempts and backlog, the links' round trips.
struct OutboxMetrics {
    attempts: Family<Outcome, Counter>,
    link_rtt_seconds: Family<Peer, Gauge<f64, std::sync::atomic::AtomicU64>>,
    pending: Family<Peer, Gauge>,
    oldest_seconds: Family<Peer, Gauge<f64, std::sync::atomic::AtomicU64>>,
}

impl OutboxMetrics {
    fn register(registry: &mut Registry) -> Self {
        Self {
            attempts: register(
                registry,
                "outbox_attempts",
                "Attempts to reach another home with a pending send, by outcome (answered, retry)",
                Family::default(),
            ),
            link_rtt_seconds: register(
                registry,
                "link_rtt_seconds",
                "The last call's round trip to each peer home this home calls",
                Family::default(),
            ),
            pending: register(
                registry,
                "outbox_pending",
                "Messages to each peer home not acknowledged yet (at the scrape)",
                Family::default(),
            ),
            oldest_seconds: register(
                registry,
                "outbox_oldest_seconds",
                "How long the oldest message to each peer home not acknowledged yet has waited (at the scrape)",
                Family::default(),
            ),
        }
    }
}

/// What waits at the home, what expired, and how its store and traces keep up.
struct HomeMetrics {
    permission_requests_waiting: Gauge,
    waiters_parked: Gauge,
    expirations: Counter,
    trace_spans_dropped: Counter,
    commit_seconds: Histogram,
    commit_writes: Histogram,
}

impl HomeMetrics {
    fn register(registry: &mut Registry) -> Self {
        Self {
            permission_requests_waiting: register(
                registry,
                "permission_requests_waiting",
                "Agents' permission requests waiting for the owner (at the scrape)",
                Gauge::default(),
            ),
            waiters_parked: register(
                registry,
                "waiters_parked",
                "Calls parked waiting for a change: ThreadWaits, sends waiting for delivery, followers (at the scrape)",
                Gauge::default(),
            ),
            expirations: register(
                registry,
                "expirations",
                "Messages from other homes that expired here unanswered at the end of their window",
                Counter::default(),
            ),
            trace_spans_dropped: register(
                registry,
                "trace_spans_dropped",
                "Spans not exported because the export queue was full (`[otel] endpoint` down or slow)",
                Counter::default(),
            ),
            commit_seconds: register(
                registry,
                "store_commit_seconds",
                "How long the store's commits took (SQLite: a batch's writes and its fsync; Postgres: a batch from taking the write lock to its commit)",
                Histogram::new(exponential_buckets(0.000_1, 2.0, 16)),
            ),
            commit_writes: register(
                registry,
                "store_commit_writes",
                "How many writes each commit carried (the store's group commit)",
                Histogram::new(exponential_buckets(1.0, 2.0, 10)),
            ),
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
                    self.sends.deliveries.inc();
                    ("delivered", None)
                }
                MessageStatus::Undeliverable => ("undeliverable", Some(sent.reason.clone())),
                _ => ("pending", None),
            },
            Err(e) => return self.refused(&reason_of(e)),
        };
        self.sends.taken.get_or_create(&Outcome { outcome: outcome.into() }).inc();
        if let Some(reason) = reason {
            self.sends.rejections.get_or_create(&Reason { reason }).inc();
        }
    }

    /// A send refused for `reason` (a refusal's word: `permission_denied`, …).
    pub fn refused(&self, reason: &str) {
        self.sends.taken.get_or_create(&Outcome { outcome: "refused".into() }).inc();
        self.sends.rejections.get_or_create(&Reason { reason: reason.into() }).inc();
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
        self.turns.ended.get_or_create(&labels).inc();
        self.turns
            .turn_seconds
            .get_or_create(&Executor { executor: executor.into() })
            .observe(ran.as_secs_f64());
        if let Some(usage) = usage {
            for (kind, n) in [("input", usage.input_tokens), ("output", usage.output_tokens)] {
                self.turns
                    .tokens
                    .get_or_create(&TokenLabels { profile: profile.into(), kind: kind.into() })
                    .inc_by(n);
            }
            let micro = (usage.cost_usd * 1e6).round().max(0.0) as u64;
            self.turns.cost_micro_usd.get_or_create(&Profile { profile: profile.into() }).inc_by(micro);
        }
    }

    /// A room post taken, the members it woke, and whether it tripped the loop guard.
    pub fn room_post(&self, woke: usize, paused: bool) {
        self.rooms.posts.inc();
        self.rooms.wakes.inc_by(woke as u64);
        if paused {
            self.rooms.loop_guard_trips.inc();
        }
    }

    /// A message between two threads' agents held by the loop guard.
    pub fn held_by_loop_guard(&self) {
        self.rooms.loop_guard_holds.inc();
    }

    /// An outbox attempt at a peer: answered, or to be retried.
    pub fn outbox_attempt(&self, answered: bool) {
        let outcome = if answered { "answered" } else { "retry" };
        self.outbox.attempts.get_or_create(&Outcome { outcome: outcome.into() }).inc();
    }

    /// A call to `peer` answered after `rtt`.
    pub fn link_rtt(&self, peer: &str, rtt: Duration) {
        self.outbox.link_rtt_seconds.get_or_create(&Peer { peer: peer.into() }).set(rtt.as_secs_f64());
    }

    /// A store commit of `writes` writes that took `took`.
    pub fn committed(&self, writes: usize, took: Duration) {
        self.home.commit_seconds.observe(took.as_secs_f64());
        self.home.commit_writes.observe(writes as f64);
    }

    /// `n` bridged messages expired at their deadline.
    pub fn expired(&self, n: u64) {
        self.home.expirations.inc_by(n);
    }

    /// Sets the gauges read at a scrape: how much waits, now.
    pub fn sampled(&self, outbox: &[OutboxBacklog], permissions_waiting: usize, parked: usize) {
        for backlog in outbox {
            let peer = Peer { peer: backlog.peer.clone() };
            self.outbox.pending.get_or_create(&peer).set(backlog.pending as i64);
            self.outbox.oldest_seconds.get_or_create(&peer).set(backlog.oldest.as_secs_f64());
        }
        self.home.permission_requests_waiting.set(permissions_waiting as i64);
        self.home.waiters_parked.set(parked as i64);
        let dropped = super::traces::dropped_spans();
        self.home.trace_spans_dropped.inc_by(dropped.saturating_sub(self.home.trace_spans_dropped.get()));
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
