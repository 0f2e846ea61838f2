//! kiki-daemon: one kiki **home** — its identity, store, threads, executors and the gRPC API
//! on an owner-only Unix socket. The `kikid` binary is a thin wrapper around [`Daemon`].
//!
//! # Layout
//!
//! - [`config`]: typed `config.toml`, layered defaults → file → env → code.
//! - [`identity`]: the home's key and the home id derived from it.
//! - [`store`]: the [`store::Store`] trait and its SQLite backend, with migrations.
//! - [`threads`]: thread rules (limits, cursors, content refs) and the turn runner.
//! - [`executors`]: `echo`, `exec`, `claude`, `codex` and `acp`, which run one turn.
//! - [`mailbox`]: sends to this home's threads (group commit, idempotency), ThreadWait,
//!   switches, attention.
//! - [`bridges`]: pairing and calls between homes over `kiki-bridge`'s QUIC endpoint.
//! - [`messaging`]: the one entry point for ThreadSend, routing local or across a bridge.
//! - [`doctor`], [`backup`]: `kiki doctor` and `kiki backup`.
//! - [`grpc`]: the `kiki.v1` services and the one error → status mapping.
//! - [`convert`]: records ↔ `kiki.v1` messages, for the two protobuf edges (gRPC, the bridge
//!   wire codec).
//! - [`hex`], [`sync`], [`time`]: small helpers.
//! - [`runtime`]: the tokio runtime kikid runs on (no LIFO slot, so answers are flushed in batches).
//!
//! # Boot and shutdown
//!
//! [`DaemonBuilder::start`] reads like a startup script: create and lock the home, load the
//! config, load the identity, open the store, fail turns a crash interrupted, start the
//! runner and queued turns, bind the socket (0600), serve. [`DaemonHandle::shutdown`] stops
//! in reverse: stop accepting calls and let in-flight ones finish, stop running turns
//! (recorded as failed), close the store, remove the socket, release the lock.

pub mod backup;
pub mod bridges;
pub mod caller;
pub mod config;
pub mod convert;
pub mod doctor;
pub mod error;
pub mod executors;
pub mod grpc;
pub mod hex;
pub mod identity;
pub mod mailbox;
pub mod messaging;
pub mod rooms;
pub mod runtime;
pub mod store;
pub mod sync;
pub mod threads;
pub mod time;

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use config::{Config, ConfigError};
use executors::agent::Agent;
use identity::{Creation, Identity, IdentityError};
use kiki_proto::home::{HomeDir, LockError, Untrusted};
use store::{SqliteStore, Store, StoreError};
use threads::Threads;
use threads::runner::{INTERRUPTED, TurnRunner};

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
            | StartError::Identity(IdentityError::Missing { .. }) => 6,
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

    /// Read this file instead of `HOME/config.toml`; it must exist.
    pub fn config_file(mut self, file: impl Into<PathBuf>) -> Self {
        self.config_file = Some(file.into());
        self
    }

    pub async fn start(self) -> Result<DaemonHandle, StartError> {
        let home = HomeDir::resolve(self.home)
            .map_err(|source| StartError::Home { path: "(unset)".into(), source })?;
        home.create()?;
        let lock = home.lock()?;

        let config_file = self.config_file.clone().unwrap_or_else(|| home.config_file());
        let config = match self.config {
            Some(config) => {
                config.validate()?;
                config
            }
            None => {
                let (file, must_exist) = (config_file.clone(), self.config_file.is_some());
                // A config names the programs kikid runs: only its user's own is read.
                kiki_proto::home::trusted_if_present(&file, "config file")?;
                Config::load(&file, must_exist)?
            }
        };
        let config = Arc::new(config);

        let store_path = match &config.store.url {
            Some(url) => SqliteStore::path_of(url, home.root())?,
            None => home.sqlite_file(),
        };
        for file in SqliteStore::files(&store_path) {
            kiki_proto::home::trusted_if_present(&file, "store file")?;
        }
        // A key is made for a new home only: one with a store lost its key, and a new key
        // would make it another home to every peer it has a bridge with.
        let creation =
            if store_path.exists() && !self.new_identity { Creation::Refused } else { Creation::Allowed };
        let identity =
            Identity::load_or_create(&home.identity_file(), creation, &store_path.display().to_string())?;
        info!(home_id = identity.home_id(), home = %home.root().display(), "home identity loaded");

        let store: Arc<dyn Store> = Arc::new(SqliteStore::open_path(&store_path).await?);
        recover_interrupted_turns(store.as_ref()).await?;
        let interrupted = store.fail_interrupted_turns(INTERRUPTED, time::now_ms()).await?;
        if !interrupted.is_empty() {
            warn!(turns = interrupted.len(), "marked turns interrupted by the last stop as failed");
        }

        let signals = threads::signals::Signals::default();
        let room_signals = signals.clone();
        let handle_signals = signals.clone();
        let runner =
            TurnRunner::new(store.clone(), config.clone(), home.root().to_path_buf(), signals.clone());
        let threads =
            Threads::new(store.clone(), config.clone(), runner.clone(), identity.home_id().to_string());
        let shutdown = CancellationToken::new();
        let send_keys = Arc::new(sync::KeyLocks::default());
        let mailbox = mailbox::Mailbox::new(
            threads.clone(),
            config.clone(),
            signals.clone(),
            send_keys.clone(),
            shutdown.clone(),
        );
        let waits = mailbox::Waits::new(threads.clone(), config.clone(), signals.clone(), shutdown.clone());
        let permissions = mailbox::PermissionRequests::new(
            &threads,
            config.threads.permission_timeout,
            signals.clone(),
            shutdown.clone(),
        );
        // Kept by the serving task below while turns may run; the runner holds it weakly.
        let desk: Arc<dyn executors::desk::Desk> =
            Arc::new(mailbox::TurnDesk { waits: waits.clone(), permissions: permissions.clone() });
        runner.set_desk(Arc::downgrade(&desk));
        for thread_id in store.threads_with_queued_input().await? {
            runner.kick(&thread_id);
        }

        let transport = match &self.transport {
            Some(factory) => factory(identity.home_id()),
            None => bridges::quic_transport(&identity.key().serialize_pem(), config.bridge.listen).await?,
        };
        // Rung by whatever writes outbox entries: cross-home sends, and room posts waking
        // members of other homes.
        let outbox_work = Arc::new(tokio::sync::Notify::new());
        let rooms = rooms::Rooms::new(
            threads.clone(),
            mailbox.clone(),
            room_signals,
            config.clone(),
            outbox_work.clone(),
        );
        let parts = bridges::HomeParts {
            store: store.clone(),
            threads: threads.clone(),
            config: config.clone(),
            mailbox: mailbox.clone(),
            waits: waits.clone(),
            rooms: rooms.clone(),
            send_keys,
            outbox_work,
        };
        let bridges = bridges::Bridges::start(parts, transport, &shutdown);
        info!(listen = %bridges.listen_addr(), "bridge endpoint listening");

        let socket = home.socket();
        let listener = bind_owner_only(&socket)?;
        let info = Arc::new(grpc::HomeInfo {
            home_id: identity.home_id().to_string(),
            home: home.root().display().to_string(),
            socket: socket.display().to_string(),
            store: store.describe(),
            started_at: time::rfc3339(time::now_ms()),
            default_profile: config.default_profile().to_string(),
            profiles: config.profile_names(),
            bridge_listen: bridges.listen_addr(),
            thread_communication: match config.thread_communication.enabled {
                Some(false) => "off for every thread ([thread_communication] enabled = false)",
                Some(true) => "on by default ([thread_communication] enabled = true)",
                None => "off by default: threads opt in (kiki thread set REF --communication on)",
            }
            .to_string(),
            config_file: config_file.clone(),
            store_path: store_path.clone(),
        });

        let stopped = CancellationToken::new();
        let pruning = tokio::spawn(prune_keys(store.clone(), config.mailbox.key_retention, shutdown.clone()));
        let serving = {
            let shutdown = shutdown.clone();
            let stopped = stopped.clone();
            let info = info.clone();
            tokio::spawn(async move {
                let endpoint = bridges.clone();
                let serving = grpc::serve(
                    listener,
                    grpc::Services { threads, mailbox, waits, permissions, bridges, rooms, info },
                    shutdown.clone().cancelled_owned(),
                    shutdown.clone(),
                );
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
                info!("closing the bridge endpoint");
                endpoint.close().await;
                drop(endpoint);
                info!("stopped accepting calls; stopping turns");
                runner.shutdown().await;
                drop(desk);
                // Between chunks it sees the shutdown; its last write lands before the close.
                let _ = pruning.await;
                info!("closing the store");
                store.close().await;
                let _ = std::fs::remove_file(&socket);
                drop(lock);
                info!("home stopped");
                stopped.cancel();
            })
        };
        drop(serving);
        info!(socket = %info.socket, "kikid is serving");
        Ok(DaemonHandle {
            inner: Arc::new(HandleInner { shutdown, stopped, info, identity, signals: handle_signals }),
        })
    }
}

/// Forgets idempotency keys older than the retention, hourly, until shutdown: a chunk at a
/// time, each its own short write, so a busy home's hour of keys holds up no send.
async fn prune_keys(store: Arc<dyn Store>, retention: std::time::Duration, shutdown: CancellationToken) {
    const EVERY: std::time::Duration = std::time::Duration::from_secs(3600);
    const CHUNK: u32 = 1000;
    loop {
        let before = time::now_ms() - retention.as_millis() as i64;
        let mut pruned = 0;
        loop {
            match store.prune_keys(before, CHUNK).await {
                Ok(n) => {
                    pruned += n;
                    // Until a window of the oldest keys holds none to forget (keys written
                    // while the clock ran ahead wait for it at the head of the order).
                    if n == 0 || shutdown.is_cancelled() {
                        break;
                    }
                }
                Err(e) => {
                    warn!(error = %e, "cannot prune idempotency keys");
                    break;
                }
            }
        }
        if pruned > 0 {
            info!(keys = pruned, "pruned expired idempotency keys");
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(EVERY) => {}
        }
    }
}

/// Binds the socket so that only the owner can connect: the home directory is 0700 and the
/// socket is made 0600 before the first call can be accepted. A stale socket left by a
/// crashed daemon is removed (we hold the home's lock, so nobody else serves it).
fn bind_owner_only(path: &std::path::Path) -> Result<tokio::net::UnixListener, StartError> {
    let err = |source| StartError::Listen { path: path.display().to_string(), source };
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(err(e)),
    }
    let listener = tokio::net::UnixListener::bind(path).map_err(err)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(err)?;
    Ok(listener)
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

/// Before the turns the last kikid left `running` are failed: an `exec` agent it left
/// running (killed with -9) would go on beside the turns that follow, so it is stopped; an
/// `exec` turn with no agent recorded never gave its agent the input (the agent is recorded
/// before it gets it), so its messages were not delivered after all.
async fn recover_interrupted_turns(store: &dyn Store) -> Result<(), StoreError> {
    let mut stopped = 0;
    for turn in store.interrupted_turns().await? {
        match turn.agent.as_deref() {
            // An exec agent never described never got its input: nothing was delivered.
            Some("") => {
                store.undeliver_turn_messages(&turn.turn_id, "kikid_stopped", time::now_ms()).await?;
            }
            Some(record) => stopped += usize::from(Agent::from_record(record).is_some_and(|a| a.stop())),
            None => {}
        }
    }
    if stopped > 0 {
        warn!(agents = stopped, "stopped agent processes left running by the last stop");
    }
    Ok(())
}
