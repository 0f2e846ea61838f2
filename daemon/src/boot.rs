//! The steps [`crate::DaemonBuilder::start`] is written in, and the components it starts:
//! each component says what it stops, and a home stops them in the reverse of the order it
//! started them (the calls it serves first, the home's lock last), logging each step.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use kiki_proto::home::{HomeDir, HomeLock};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::StartError;
use crate::config::Config;
use crate::executors::desk::Desk;
use crate::identity::{Creation, Identity, IdentityError};
use crate::mailbox::{Mailbox, PermissionRequests, TurnDesk, Waits};
use crate::rooms::Rooms;
use crate::store::{ReplicaRecord, SqliteStore, Store, StoreLocation};
use crate::sync::KeyLocks;
use crate::threads::Threads;
use crate::threads::runner::TurnRunner;
use crate::threads::signals::Signals;
use crate::time::{self, Clock};

/// Something a running home started, which it stops when it stops.
#[async_trait]
pub(crate) trait Component: Send + Sync {
    /// What it is, for the log of a stop.
    fn name(&self) -> &'static str;
    /// Stops it; the home's shutdown has been asked for already.
    async fn stop(self: Box<Self>);
}

/// The home directory, locked for this daemon, with its config and identity.
pub(crate) struct OpenedHome {
    pub dir: HomeDir,
    pub lock: HomeLock,
    pub config: Arc<Config>,
    /// The config file kikid read (or would have: it may not exist).
    pub config_file: PathBuf,
    pub store: StoreLocation,
    pub identity: Identity,
}

/// The config a start of the home at `home` will run with (`config_file`, else the home's
/// `config.toml`; a file another user could have written is refused), and the home's
/// directory: read before the daemon starts, so that `[log]` decides kikid's log.
pub fn read_config(
    home: Option<PathBuf>,
    config_file: Option<PathBuf>,
) -> Result<(HomeDir, Config), StartError> {
    let dir = HomeDir::resolve(home).map_err(|source| StartError::Home { path: "(unset)".into(), source })?;
    let must_exist = config_file.is_some();
    let config_file = config_file.unwrap_or_else(|| dir.config_file());
    kiki_proto::home::trusted_if_present(&config_file, "config file")?;
    let config = Config::load(&config_file, must_exist)?;
    Ok((dir, config))
}

/// Creates (or checks) and locks the home, reads its config and its identity. A config
/// or store file another user could have written is refused: a config names the programs
/// kikid runs, a store its identity's history.
pub(crate) fn open_home(
    home: Option<PathBuf>,
    config: Option<Config>,
    config_file: Option<PathBuf>,
    new_identity: bool,
) -> Result<OpenedHome, StartError> {
    let dir = HomeDir::resolve(home).map_err(|source| StartError::Home { path: "(unset)".into(), source })?;
    dir.create()?;
    let lock = dir.lock()?;
    let must_exist = config_file.is_some();
    let config_file = config_file.unwrap_or_else(|| dir.config_file());
    let config = match config {
        Some(config) => {
            config.validate()?;
            config
        }
        None => {
            kiki_proto::home::trusted_if_present(&config_file, "config file")?;
            Config::load(&config_file, must_exist)?
        }
    };
    let store = config.store.location(&dir)?;
    if let Some(file) = store.sqlite_file() {
        for file in SqliteStore::files(file) {
            kiki_proto::home::trusted_if_present(&file, "store file")?;
        }
    }
    // A key is made for a new home only: one with a store lost its key, and a new key
    // would make it another home to every peer it has a bridge with. (A database server's
    // store is not looked into before it is opened: its home keeps its key file.)
    let has_store = store.sqlite_file().is_some_and(Path::exists);
    let creation = if has_store && !new_identity { Creation::Refused } else { Creation::Allowed };
    let identity = Identity::load_or_create(&dir.identity_file(), creation, &store.describe())?;
    info!(home_id = identity.home_id(), home = %dir.root().display(), store = %store.describe(), "home identity loaded");
    Ok(OpenedHome { dir, lock, config: Arc::new(config), config_file, store, identity })
}

/// Opens the store and puts right what the replicas gone before left running (see
/// [`crate::replica::take_over`]): the earlier kikids of this very home on this machine are gone for sure
/// (this one holds the home's lock), others once their heartbeat is older than the lease.
pub(crate) async fn open_store(
    home: &OpenedHome,
    new_identity: bool,
    clock: &Clock,
    replica: &ReplicaRecord,
    lease: Duration,
) -> Result<Arc<dyn Store>, StartError> {
    let store = home.store.open(clock).await?;
    belongs_to_home(&*store, home, new_identity).await?;
    // The spans' home is known now: their export may begin.
    crate::observe::traces::begin(home.identity.home_id());
    for gone in store.replicas().await? {
        if gone.host == replica.host && gone.home == replica.home && gone.id != replica.id {
            store.retire_replica(&gone.id).await?;
        }
    }
    // On the record before this replica claims anything, so that no other takes its turns.
    store.heartbeat(replica, 0).await?;
    crate::replica::take_over(&*store, clock, clock.now_ms() - time::ms(lease)).await?;
    Ok(store)
}

/// Checks that the store is this identity's home (recording it when the store is new to
/// one): a replica of a team home started with another key is refused, and the key this
/// start made for it removed again, leaving no trace.
async fn belongs_to_home(store: &dyn Store, home: &OpenedHome, new_identity: bool) -> Result<(), StartError> {
    let ours = home.identity.home_id();
    let recorded = store.claim_home(ours, new_identity).await?;
    if recorded == ours {
        return Ok(());
    }
    let path = home.dir.identity_file();
    if home.identity.created()
        && let Err(e) = std::fs::remove_file(&path)
    {
        warn!(error = %e, path = %path.display(), "cannot remove the identity key made for this start");
    }
    Err(IdentityError::OtherHome {
        path: path.display().to_string(),
        store: store.describe(),
        recorded,
        ours: ours.to_string(),
    }
    .into())
}

/// The home's threads and what acts on them, wired together: the turn runner, the
/// mailbox's parts, rooms.
pub(crate) struct Domain {
    pub signals: Signals,
    pub runner: TurnRunner,
    pub threads: Threads,
    pub mailbox: Mailbox,
    pub waits: Waits,
    pub permissions: PermissionRequests,
    pub rooms: Rooms,
    /// One send at a time per sender's key, shared by local and cross-home sends.
    pub send_keys: Arc<KeyLocks>,
    /// Rung by whatever writes outbox entries (cross-home sends, room posts waking members
    /// of other homes): the outbox worker looks again.
    pub outbox_work: Arc<tokio::sync::Notify>,
    /// Whether this replica works the outbox (decided by its heartbeat).
    pub outbox_duty: Arc<crate::replica::OutboxDuty>,
    /// The session tools (files, shell, todo, cron), their tasks and their cron scheduler.
    pub tools: crate::tools::SessionTools,
    pub tasks: crate::tools::shell::Tasks,
    pub crons: crate::tools::cron::Scheduler,
}

impl Domain {
    pub(crate) fn assemble(
        store: Arc<dyn Store>,
        config: Arc<Config>,
        home: &HomeDir,
        home_id: &str,
        shutdown: &CancellationToken,
        clock: Clock,
        replica: &str,
    ) -> Self {
        let signals = Signals::default();
        let outbox_work = Arc::new(tokio::sync::Notify::new());
        store.changes().listen(crate::threads::signals::wake_on(signals.clone(), outbox_work.clone()));
        let crons = crate::tools::cron::Scheduler::listening(store.changes());
        let root = home.root().to_path_buf();
        let observer = Arc::new(crate::observe::Observer::new(clock.clone()));
        store.changes().on_commit({
            let observer = observer.clone();
            Arc::new(move |writes, took| observer.metrics().committed(writes, took))
        });
        let runner =
            TurnRunner::new(store.clone(), config.clone(), root, clock, replica.to_string(), observer);
        let threads = Threads::new(store, config.clone(), runner.clone(), home_id.to_string());
        let send_keys = Arc::new(KeyLocks::default());
        let mailbox = Mailbox::new(
            threads.clone(),
            config.clone(),
            signals.clone(),
            send_keys.clone(),
            shutdown.clone(),
        );
        let waits = Waits::new(threads.clone(), config.clone(), signals.clone(), shutdown.clone());
        let timeout = config.threads.permission_timeout;
        let permissions = PermissionRequests::new(&threads, timeout, signals.clone(), shutdown.clone());
        let tasks = crate::tools::shell::Tasks::new(
            home.root().join("tasks"),
            threads.clone(),
            config.background.clone(),
        );
        let tools = crate::tools::SessionTools::new(
            threads.clone(),
            permissions.clone(),
            config.clone(),
            tasks.clone(),
        );
        let rooms = Rooms::new(threads.clone(), mailbox.clone(), config);
        let outbox_duty = Arc::new(crate::replica::OutboxDuty::new(outbox_work.clone()));
        Self {
            signals,
            runner,
            threads,
            mailbox,
            waits,
            permissions,
            rooms,
            send_keys,
            outbox_work,
            outbox_duty,
            tools,
            tasks,
            crons,
        }
    }

    /// What the bridges work with.
    pub(crate) fn bridge_parts(
        &self,
        store: &Arc<dyn Store>,
        config: &Arc<Config>,
    ) -> crate::bridges::HomeParts {
        crate::bridges::HomeParts {
            store: store.clone(),
            threads: self.threads.clone(),
            config: config.clone(),
            mailbox: self.mailbox.clone(),
            waits: self.waits.clone(),
            rooms: self.rooms.clone(),
            send_keys: self.send_keys.clone(),
            outbox_work: self.outbox_work.clone(),
            outbox_duty: self.outbox_duty.clone(),
        }
    }

    /// What the API serves.
    pub(crate) fn services(
        self,
        bridges: crate::bridges::Bridges,
        info: Arc<crate::grpc::HomeInfo>,
    ) -> crate::grpc::Services {
        let Domain { threads, mailbox, waits, permissions, rooms, tools, .. } = self;
        crate::grpc::Services { threads, mailbox, waits, permissions, bridges, rooms, tools, info }
    }

    /// Starts running turns — the queued ones at once — with the turns' desk (what their
    /// executors ask of the home); stopping it stops the running turns.
    pub(crate) async fn start_turns(&self) -> Result<Turns, StartError> {
        let desk: Arc<dyn Desk> =
            Arc::new(TurnDesk { waits: self.waits.clone(), permissions: self.permissions.clone() });
        // The runner holds it weakly: kept here while turns may run.
        self.runner.set_desk(Arc::downgrade(&desk));
        for thread_id in self.threads.store().threads_with_queued_input().await? {
            self.runner.kick(&thread_id);
        }
        Ok(Turns { runner: self.runner.clone(), _desk: desk })
    }
}

/// The session tools' background work: the cron scheduler, and the tasks Bash started (ended
/// when the home stops).
pub(crate) struct SessionWork {
    pub tasks: crate::tools::shell::Tasks,
    pub scheduler: tokio::task::JoinHandle<()>,
}

impl SessionWork {
    pub(crate) fn start(domain: &Domain, shutdown: &CancellationToken) -> Self {
        let store = domain.threads.store().clone();
        let scheduler =
            tokio::spawn(domain.crons.clone().run(store, domain.threads.clone(), shutdown.clone()));
        Self { tasks: domain.tasks.clone(), scheduler }
    }
}

#[async_trait]
impl Component for SessionWork {
    fn name(&self) -> &'static str {
        "background tasks and crons"
    }
    async fn stop(self: Box<Self>) {
        self.tasks.stop_all().await;
        let _ = self.scheduler.await;
    }
}

/// Running turns: stopped (and recorded as failed) when the home stops.
pub(crate) struct Turns {
    runner: TurnRunner,
    _desk: Arc<dyn Desk>,
}

#[async_trait]
impl Component for Turns {
    fn name(&self) -> &'static str {
        "running turns"
    }
    async fn stop(self: Box<Self>) {
        self.runner.shutdown().await;
    }
}

/// The store: closed last but the lock, once nothing writes any more.
pub(crate) struct StoreComponent(pub Arc<dyn Store>);

#[async_trait]
impl Component for StoreComponent {
    fn name(&self) -> &'static str {
        "the store"
    }
    async fn stop(self: Box<Self>) {
        self.0.close().await;
    }
}

/// The home's lock and socket file: the socket removed, then the lock released.
pub(crate) struct HomeHeld {
    pub lock: HomeLock,
    pub socket: PathBuf,
}

#[async_trait]
impl Component for HomeHeld {
    fn name(&self) -> &'static str {
        "the home's socket and lock"
    }
    async fn stop(self: Box<Self>) {
        let _ = std::fs::remove_file(&self.socket);
        drop(self.lock);
    }
}

/// The bridges: their endpoint closed (calls under way fail at once), their tasks joined.
#[async_trait]
impl Component for crate::bridges::Bridges {
    fn name(&self) -> &'static str {
        "the bridge endpoint"
    }
    async fn stop(self: Box<Self>) {
        self.close().await;
    }
}

/// A background task that ends on the home's shutdown: its last write lands before the
/// store closes.
pub(crate) struct Task {
    pub name: &'static str,
    pub handle: tokio::task::JoinHandle<()>,
}

#[async_trait]
impl Component for Task {
    fn name(&self) -> &'static str {
        self.name
    }
    async fn stop(self: Box<Self>) {
        let _ = self.handle.await;
    }
}

/// Serves the home's metrics on `[metrics] listen` until shutdown.
pub(crate) async fn serve_metrics(
    listen: std::net::SocketAddr,
    observer: Arc<crate::observe::Observer>,
    sample: crate::observe::metrics::Sampler,
    shutdown: CancellationToken,
) -> Result<Task, StartError> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|source| StartError::Listen { path: format!("{listen} ([metrics] listen)"), source })?;
    let worker = observer.worker("metrics");
    let handle = tokio::spawn(async move {
        // Busy answering scrapes; it only fails to start.
        worker.busy();
        crate::observe::metrics::serve(listener, observer, sample, shutdown).await
    });
    Ok(Task { name: "metrics", handle })
}

/// Forgets idempotency keys older than the retention, hourly, until shutdown: a chunk at a
/// time, each its own short write, so a busy home's hour of keys holds up no send.
pub(crate) fn prune_keys(
    store: Arc<dyn Store>,
    retention: Duration,
    clock: Clock,
    shutdown: CancellationToken,
    worker: crate::observe::workers::Worker,
) -> Task {
    const EVERY: Duration = Duration::from_secs(3600);
    const CHUNK: u32 = 1000;
    let handle = tokio::spawn(async move {
        loop {
            worker.busy();
            let before = clock.now_ms() - time::ms(retention);
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
                        worker.failed(&e);
                        break;
                    }
                }
            }
            if pruned > 0 {
                info!(keys = pruned, "pruned expired idempotency keys");
            }
            worker.idle();
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = clock.sleep(EVERY) => {}
            }
        }
    });
    Task { name: "key pruning", handle }
}

/// Binds the socket so that only the owner can connect: the home directory is 0700 and the
/// socket is made 0600 before the first call can be accepted. A stale socket left by a
/// crashed daemon is removed (we hold the home's lock, so nobody else serves it).
pub(crate) fn bind_owner_only(path: &Path) -> Result<tokio::net::UnixListener, StartError> {
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

/// Stops `components` in the reverse of the order they started, logging each step.
pub(crate) async fn stop_all(mut components: Vec<Box<dyn Component>>) {
    while let Some(component) = components.pop() {
        info!("stopping {}", component.name());
        component.stop().await;
    }
}
