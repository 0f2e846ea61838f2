//! kiki-daemon: one kiki **home** — its identity, store, threads, executors and the gRPC API
//! on an owner-only Unix socket. The `kikid` binary is a thin wrapper around [`Daemon`].
//!
//! # Layout
//!
//! - `boot`: the steps and components of a start, stopped in reverse.
//! - [`caller`]: who makes a call (the owner, or a turn by its token).
//! - [`config`]: typed `config.toml`, layered defaults → file → env → code.
//! - [`identity`]: the home's key and the home id derived from it.
//! - [`logging`]: kikid's log as `[log]` says (filter, text or JSON, stderr or a daily file).
//! - [`store`]: the [`store::Store`] trait and its two backends, SQLite (a home of its own)
//!   and Postgres (a team home, served by several replicas), each with its migrations.
//! - `replica`: this kikid as one of its home's replicas (its heartbeat, taking over what a
//!   replica gone left running, which replica works the outbox).
//! - [`migrate`]: `kiki store migrate`, a stopped home's store copied to the other backend.
//! - [`threads`]: thread rules (limits, cursors, content refs, switches) and the turn runner.
//! - [`executors`]: `echo`, `exec`, `claude`, `codex` and `acp`, which run one turn.
//! - [`mailbox`]: sends to this home's threads (group commit, idempotency) and switches;
//!   ThreadWait, attention and a turn's inbox; permission requests.
//! - [`rooms`]: rooms of this home, and its threads' places in rooms of other homes.
//! - [`bridges`]: pairing and calls between homes over `kiki-bridge`'s QUIC endpoint.
//! - [`messaging`]: the one entry point for ThreadSend, routing local or across a bridge.
//! - [`tools`]: the session tools a home runs in its threads' workspaces (files, search,
//!   Bash and its background tasks, TodoList, Cron): one registry, approval, every call
//!   recorded; the tasks and the cron scheduler.
//! - [`observe`]: what the home tells its operator as it runs: metrics, the event feed
//!   (`kiki events`), its background workers (`kiki status --workers`), traces across homes.
//! - [`doctor`], [`backup`]: `kiki doctor` and `kiki backup`.
//! - [`grpc`]: the `kiki.v1` services and the one error → status mapping.
//! - [`convert`]: records ↔ `kiki.v1` messages, for the two protobuf edges (gRPC, the bridge
//!   wire codec).
//! - [`error`]: the domain's errors, which the gRPC layer maps to statuses.
//! - [`sync`], [`time`]: small helpers.
//! - [`runtime`]: the tokio runtime kikid runs on (no LIFO slot, so answers are flushed in batches).
//!
//! # Boot and shutdown
//!
//! [`DaemonBuilder::start`] reads like a startup script: open and lock the home (config,
//! identity), open the store (failing turns a crash interrupted), assemble the threads and
//! their services, start turns (the queued ones at once), the session tools' tasks and crons,
//! the bridges, the replica's heartbeat, the metrics endpoint (with `[metrics] listen`) and
//! key pruning, bind the socket (0600) and serve. Each part started is a component that says
//! what it stops; [`DaemonHandle::shutdown`] stops them in reverse: the calls (in-flight ones
//! finish within a grace period), key pruning, the metrics endpoint, the heartbeat, the
//! bridge endpoint, background tasks and the cron scheduler, running turns (recorded as
//! failed), the store, then the socket and the lock.

pub mod backup;
mod boot;
pub use boot::read_config;
pub mod bridges;
pub mod caller;
pub mod config;
pub mod convert;
pub mod doctor;
pub mod error;
pub mod executors;
pub mod grpc;
pub mod identity;
pub mod logging;
pub mod mailbox;
pub mod messaging;
pub mod migrate;
pub mod observe;
mod replica;
pub mod rooms;
pub mod runtime;
pub mod store;
pub mod sync;
pub mod threads;
pub mod time;
pub mod tools;

use std::path::PathBuf;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use config::{Config, ConfigError};
use identity::{Identity, IdentityError};
use kiki_proto::home::{LockError, Untrusted};
use store::StoreError;

/// Why a daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot create the home {path}: {source}")]
    Home { path: String, source: std::io::Error },
    #[error(transparent)]
    Untrusted(#[from] Untrusted),
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Identity(#[from] IdentityError),
    #[error("cannot open the store: {0}")]
    Store(#[from] StoreError),
    #[error("bridge endpoint: {0}")]
    Bridge(#[from] kiki_bridge::EndpointError),
    #[error("cannot listen on {path}: {source}")]
    Listen { path: String, source: std::io::Error },
}

impl StartError {
    /// kikid's exit status for this failure, from `kiki`'s table (README, "Exit codes"), so
    /// `kiki up` can say what kind of failure stopped the daemon: 2 bad config, 6 the home is
    /// in a state that forbids starting (served already, its key lost), 7 not allowed (files
    /// another user could write), 8 out of disk space, 9 a damaged store, 1 anything else.
    pub fn exit_code(&self) -> u8 {
        match self {
            StartError::Config(_) => 2,
            StartError::Lock(LockError::Held { .. })
            | StartError::Identity(IdentityError::Missing { .. } | IdentityError::OtherHome { .. }) => 6,
            StartError::Untrusted(_)
            | StartError::Identity(IdentityError::Untrusted(_) | IdentityError::Exposed { .. }) => 7,
            StartError::Store(StoreError::DiskFull(_)) => 8,
            StartError::Store(StoreError::Corrupt { .. }) => 9,
            _ => 1,
        }
    }
}

/// How long a stopping daemon lets in-flight calls finish before it closes them. Parked
/// ThreadWait/ThreadSend calls answer at once on shutdown, so this only bounds slow ones.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Entry point: `Daemon::builder().home(dir).start().await`.
#[derive(Debug)]
pub struct Daemon;

impl Daemon {
    pub fn builder() -> DaemonBuilder {
        DaemonBuilder::default()
    }
}

/// Makes the bridge transport for a home id (tests: an in-memory network).
pub type TransportFactory = Arc<dyn Fn(&str) -> Arc<dyn kiki_bridge::Transport> + Send + Sync>;

#[derive(Default)]
pub struct DaemonBuilder {
    home: Option<PathBuf>,
    config: Option<Config>,
    config_file: Option<PathBuf>,
    transport: Option<TransportFactory>,
    new_identity: bool,
    clock: time::Clock,
}

impl std::fmt::Debug for DaemonBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DaemonBuilder").field("home", &self.home).finish_non_exhaustive()
    }
}

impl DaemonBuilder {
    /// The home directory (default: `KIKI_HOME`, else `~/.kiki`).
    pub fn home(mut self, dir: impl Into<PathBuf>) -> Self {
        self.home = Some(dir.into());
        self
    }

    /// Use this config instead of reading a file (tests build config in code).
    pub fn config(mut self, config: Config) -> Self {
        self.config = Some(config);
        self
    }

    /// Use this bridge transport instead of a QUIC endpoint on `[bridge] listen`.
    pub fn bridge_transport(mut self, factory: TransportFactory) -> Self {
        self.transport = Some(factory);
        self
    }

    /// Create a new identity key even though the home has a store (its old key was lost):
    /// every bridge must then be paired again. Without it such a home refuses to start.
    pub fn new_identity(mut self, new: bool) -> Self {
        self.new_identity = new;
        self
    }

    /// The clock the home reads and sleeps on for its timings (default: the system's; tests
    /// give a [`time::Clock::manual`] one, see [`time`]).
    pub fn clock(mut self, clock: time::Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Read this file instead of `HOME/config.toml`; it must exist.
    pub fn config_file(mut self, file: impl Into<PathBuf>) -> Self {
        self.config_file = Some(file.into());
        self
    }

    /// Starts the home: open it, open its store, assemble its threads and services, start
    /// turns, bridges and key pruning, then serve its API. Each part started is a
    /// [`boot::Component`], stopped in reverse order when the home stops.
    pub async fn start(self) -> Result<DaemonHandle, StartError> {
        let home = boot::open_home(self.home, self.config, self.config_file, self.new_identity)?;
        let (config, home_id) = (home.config.clone(), home.identity.home_id().to_string());
        let shutdown = CancellationToken::new();
        let mut started: Vec<Box<dyn boot::Component>> = Vec::new();

        let clock = self.clock.clone();
        let mut replica = replica::this_replica(&home.dir, &clock);
        let store = boot::open_store(&home, self.new_identity, &clock, &replica, config.store.lease).await?;
        let socket = home.dir.socket();
        started.push(Box::new(boot::HomeHeld { lock: home.lock, socket: socket.clone() }));
        started.push(Box::new(boot::StoreComponent(store.clone())));
        let domain = boot::Domain::assemble(
            store.clone(),
            config.clone(),
            &home.dir,
            &home_id,
            &shutdown,
            clock.clone(),
            &replica.id,
        );
        started.push(Box::new(domain.start_turns().await?));
        started.push(Box::new(boot::SessionWork::start(&domain, &shutdown)));
        let transport = match &self.transport {
            Some(factory) => factory(&home_id),
            None => {
                bridges::quic_transport(&home.identity.key().serialize_pem(), config.bridge.listen).await?
            }
        };
        let bridges = bridges::Bridges::start(domain.bridge_parts(&store, &config), transport, &shutdown);
        info!(listen = %bridges.listen_addr(), "bridge endpoint listening");
        started.push(Box::new(bridges.clone()));
        replica.bridge_listen = bridges.listen_addr();
        let replica_id = replica.id.clone();
        let lease = config.store.lease;
        started.push(Box::new(
            replica::heartbeat(
                store.clone(),
                replica,
                lease,
                domain.runner.clone(),
                domain.outbox_duty.clone(),
                shutdown.clone(),
            )
            .await,
        ));
        if let Some(listen) = config.metrics.listen {
            let observer = domain.threads.observer().clone();
            let sample = observe::metrics::Sampler {
                store: store.clone(),
                signals: domain.signals.clone(),
                clock: clock.clone(),
            };
            started.push(Box::new(boot::serve_metrics(listen, observer, sample, shutdown.clone()).await?));
        }
        started.push(Box::new(boot::prune_keys(
            store.clone(),
            config.mailbox.key_retention,
            clock.clone(),
            shutdown.clone(),
            domain.threads.observer().worker("key pruning"),
        )));

        let listener = boot::bind_owner_only(&socket)?;
        let info = Arc::new(grpc::HomeInfo {
            home_id: home_id.clone(),
            home: home.dir.root().display().to_string(),
            socket: socket.display().to_string(),
            store: store.describe(),
            started_at: time::rfc3339(clock.now_ms()),
            default_profile: config.default_profile().to_string(),
            profiles: config.profile_names(),
            bridge_listen: bridges.listen_addr(),
            thread_communication: config.thread_communication.describe().to_string(),
            config_file: home.config_file,
            store_location: home.store,
            replica_id,
            lease: config.store.lease,
        });
        let signals = domain.signals.clone();
        let services = domain.services(bridges, info.clone());
        started.push(Box::new(serve_api(listener, services, shutdown.clone())));
        info!(socket = %info.socket, "kikid is serving");

        let stopped = CancellationToken::new();
        tokio::spawn({
            let (shutdown, stopped) = (shutdown.clone(), stopped.clone());
            async move {
                shutdown.cancelled().await;
                boot::stop_all(started).await;
                info!("home stopped");
                stopped.cancel();
            }
        });
        let handle = HandleInner { shutdown, stopped, info, identity: home.identity, signals };
        Ok(DaemonHandle { inner: Arc::new(handle) })
    }
}

/// Serves the API until the home's shutdown, then lets in-flight calls finish for up to
/// [`SHUTDOWN_GRACE`] before closing them.
fn serve_api(
    listener: tokio::net::UnixListener,
    services: grpc::Services,
    shutdown: CancellationToken,
) -> boot::Task {
    let handle = tokio::spawn(async move {
        let serving = grpc::serve(listener, services, shutdown.clone().cancelled_owned(), shutdown.clone());
        // Real time: a bound on the server's shutdown, not a timing of the home's.
        let grace = async {
            shutdown.cancelled().await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        };
        tokio::select! {
            result = serving => if let Err(e) = result {
                tracing::error!(error = %e, "gRPC server failed");
            },
            () = grace => warn!(grace = ?SHUTDOWN_GRACE, "calls still in flight after the grace period; closing them"),
        }
    });
    boot::Task { name: "calls (the API)", handle }
}

/// A running home. Cheap to clone.
#[derive(Clone)]
pub struct DaemonHandle {
    inner: Arc<HandleInner>,
}

struct HandleInner {
    shutdown: CancellationToken,
    stopped: CancellationToken,
    info: Arc<grpc::HomeInfo>,
    identity: Identity,
    signals: threads::signals::Signals,
}

impl std::fmt::Debug for DaemonHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DaemonHandle").field("home_id", &self.inner.info.home_id).finish_non_exhaustive()
    }
}

impl DaemonHandle {
    pub fn home_id(&self) -> &str {
        self.inner.identity.home_id()
    }

    pub fn socket_path(&self) -> PathBuf {
        PathBuf::from(&self.inner.info.socket)
    }

    pub fn home_dir(&self) -> PathBuf {
        PathBuf::from(&self.inner.info.home)
    }

    /// How many threads have callers parked on them (waits, sends waiting for delivery,
    /// inboxes): a call that ended parks nothing.
    pub fn parked_threads(&self) -> usize {
        self.inner.signals.watched_threads()
    }

    /// Asks the daemon to stop; returns at once. See [`DaemonHandle::stopped`].
    pub fn shutdown(&self) {
        self.inner.shutdown.cancel();
    }

    /// Resolves once the daemon has fully stopped (store closed, lock released).
    pub async fn stopped(&self) {
        self.inner.stopped.cancelled().await;
    }
}
