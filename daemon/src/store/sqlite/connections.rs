//! SQLite connections on threads of their own. An async caller hands a closure to a
//! connection's thread and awaits its answer: one thread hop per store operation, however
//! many statements the operation runs (an async driver that hops per statement pays that
//! hop — two context switches — for every `BEGIN`, query and `COMMIT`).
//!
//! One writer thread owns the only read-write connection, so writes are serialised in the
//! process instead of fighting over SQLite's write lock, and it **group-commits**: whatever
//! writes are queued when it looks runs as one transaction, one fsync. The batch runs
//! optimistically, without savepoints (a savepoint copies every page its write touches:
//! ~30% of the writer's time at 64 concurrent senders). If one write fails, the batch is
//! rolled back and runs again with each write in its own savepoint, so the failure is rolled
//! back alone — which is why a write's work may run more than once. Nobody is answered before
//! the commit, so an answered write is durable. A few reader threads share a queue of
//! read-only work and never wait for a write (WAL).
//!
//! A **lookup** (a row by its key, or a thread's next few events: a few cached pages,
//! microseconds) runs on the caller's own thread instead, on a read-only connection from a
//! small pool: handing it to a reader would cost two context switches, more than the lookup. A WAL reader does not wait for
//! the writer. When SQLite would make it wait for a lock through its busy handler (another
//! process holding the database, say), the lookup is handed to the readers rather than
//! blocking an async worker; the few waits SQLite makes without asking (a read racing a WAL
//! reset retries for microseconds) stay here.

use std::cell::Cell;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};
use tokio::sync::oneshot;
use tracing::{Instrument, error};

use crate::store::{StoreError, StoreResult};
use crate::sync::lock;

/// A caller's store operation, queued for a connection's thread.
trait Job: Send {
    /// Runs the work (again, if it ran before); whether it succeeded.
    fn run(&mut self, conn: &mut Connection) -> bool;
    /// Answers the caller with the last run's result, or with the failure of the commit
    /// that carried it.
    fn answer(self: Box<Self>, commit_failed: Option<&StoreError>);
}

struct Queued<T, F> {
    work: F,
    /// The last run's result; `None` before a run and after one that panicked.
    result: Option<StoreResult<T>>,
    reply: oneshot::Sender<StoreResult<T>>,
}

impl<T, F> Job for Queued<T, F>
where
    T: Send,
    F: Fn(&mut Connection) -> StoreResult<T> + Send,
{
    fn run(&mut self, conn: &mut Connection) -> bool {
        self.result = None;
        match std::panic::catch_unwind(AssertUnwindSafe(|| (self.work)(conn))) {
            Ok(result) => {
                let ok = result.is_ok();
                self.result = Some(result);
                ok
            }
            Err(_) => {
                error!("a store operation panicked; it was abandoned");
                false
            }
        }
    }

    fn answer(self: Box<Self>, commit_failed: Option<&StoreError>) {
        let answer = match (commit_failed, self.result) {
            // A full disk or a damaged file keeps its kind: the caller acts on it.
            (Some(e @ (StoreError::DiskFull(_) | StoreError::Corrupt { .. })), _) => Err(e.clone()),
            (Some(why), _) => Err(StoreError::Backend(format!("commit failed: {why}"))),
            (None, Some(result)) => result,
            (None, None) => Err(abandoned()),
        };
        let _ = self.reply.send(answer);
    }
}

/// Prepared statements kept per connection; more than the store has distinct statements.
const STATEMENT_CACHE: usize = 128;
/// How long a connection waits for SQLite's lock (a checkpoint, another process) before
/// failing the operation.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);
/// Writes waiting for the writer. At well under a millisecond per commit this is seconds of
/// backlog: enough to absorb bursts without holding unbounded memory. Beyond it a write is
/// refused as busy, and its caller retries (sends with the same idempotency key).
const WRITE_QUEUE: usize = 4096;
/// The most writes one transaction carries; bounds a commit's latency.
const MAX_BATCH: usize = 256;
/// Idle lookup connections kept, at least: about one per thread that looks up at the same
/// time, and the async runtime runs a worker per core (see `Connections::lookups_kept`).
const LOOKUP_CONNECTIONS: usize = 8;

pub struct Connections {
    path: PathBuf,
    writer: Mutex<Option<mpsc::SyncSender<Box<dyn Job>>>>,
    readers: Mutex<Option<mpsc::Sender<Box<dyn Job>>>>,
    /// Idle lookup connections; `None` once closed.
    lookups: Mutex<Option<Vec<Connection>>>,
    /// How many idle lookup connections to keep: one per core (the runtime's workers), at
    /// least [`LOOKUP_CONNECTIONS`], so a busy many-core home does not open one per lookup.
    lookups_kept: usize,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

thread_local! {
    /// Set by a lookup connection's busy handler: SQLite would have made this thread wait.
    static LOOKUP_WOULD_WAIT: Cell<bool> = const { Cell::new(false) };
}

impl Connections {
    /// Opens the database at `path` (creating it), runs `setup` on the writer connection
    /// (migrations) and starts the threads. Blocking: call it off the async runtime.
    /// `committed` runs on the writer's thread after each successful commit (also after a
    /// lone failing write's rollback), before the writes in it are answered; never after a
    /// failed commit.
    pub fn open(
        path: &Path,
        readers: usize,
        setup: impl FnOnce(&mut Connection) -> StoreResult<()>,
        committed: impl Fn(usize, std::time::Duration) + Send + 'static,
    ) -> StoreResult<Self> {
        let mut writer = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        configure(&writer)?;
        let mode: String = writer.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Backend(format!("the database refused WAL mode (it is in {mode} mode)")));
        }
        // `FULL`: a commit is on disk when it returns, so an answered call survives a crash.
        writer.pragma_update(None, "synchronous", "FULL")?;
        setup(&mut writer)?;
        let mut threads = Vec::with_capacity(readers + 1);
        let (write_queue, write_jobs) = mpsc::sync_channel::<Box<dyn Job>>(WRITE_QUEUE);
        threads.push(spawn("kiki-store-writer", move || serve_writes(writer, &write_jobs, committed)));
        let (read_queue, read_jobs) = mpsc::channel::<Box<dyn Job>>();
        let read_jobs = Arc::new(Mutex::new(read_jobs));
        for n in 0..readers {
            let reader = open_read_only(path)?;
            configure(&reader)?;
            let jobs = read_jobs.clone();
            // Readers take turns at the shared queue: the one holding the lock waits for the
            // next job, the others wait for the lock.
            let next = move || lock(&jobs).recv().ok();
            threads.push(spawn(&format!("kiki-store-reader-{n}"), move || serve_reads(reader, next)));
        }
        // Two to start with (opened here, off the async workers); more as lookups overlap.
        let lookups = (0..2).map(|_| open_lookup(path)).collect::<StoreResult<Vec<_>>>()?;
        Ok(Self {
            path: path.to_path_buf(),
            writer: Mutex::new(Some(write_queue)),
            readers: Mutex::new(Some(read_queue)),
            lookups: Mutex::new(Some(lookups)),
            lookups_kept: std::thread::available_parallelism()
                .map_or(LOOKUP_CONNECTIONS, |n| n.get().max(LOOKUP_CONNECTIONS)),
            threads: Mutex::new(threads),
        })
    }

    /// Runs `work` on the writer connection, atomically (all of its writes or none), and
    /// answers once they are committed. `work` may run more than once (see the module
    /// docs): only its last run is kept, so it must do nothing but its reads and writes.
    pub async fn write<T: Send + 'static>(
        &self,
        work: impl Fn(&mut Connection) -> StoreResult<T> + Send + 'static,
    ) -> StoreResult<T> {
        let (job, answer) = job(work);
        let queued = match &*lock(&self.writer) {
            Some(queue) => queue.try_send(job).map_err(|e| match e {
                mpsc::TrySendError::Full(_) => StoreError::Busy,
                mpsc::TrySendError::Disconnected(_) => StoreError::Closed,
            }),
            None => Err(StoreError::Closed),
        };
        queued?;
        // From the queue to the commit's answer: the wait for the writer and the group's fsync.
        let committed = answer.instrument(tracing::debug_span!("store write"));
        committed.await.map_err(|_| abandoned())?.map_err(|e| e.at(&self.path))
    }

    /// Runs `work` on a read-only connection.
    pub async fn read<T: Send + 'static>(
        &self,
        work: impl Fn(&mut Connection) -> StoreResult<T> + Send + 'static,
    ) -> StoreResult<T> {
        let (job, answer) = job(work);
        let queued = match &*lock(&self.readers) {
            Some(queue) => queue.send(job).map_err(|_| StoreError::Closed),
            None => Err(StoreError::Closed),
        };
        queued?;
        answer.await.map_err(|_| abandoned())?.map_err(|e| e.at(&self.path))
    }

    /// Runs `work`, a lookup (see the module docs), on this thread; on a reader if SQLite
    /// would make it wait here.
    pub async fn lookup<T: Send + 'static>(
        &self,
        work: impl Fn(&mut Connection) -> StoreResult<T> + Send + 'static,
    ) -> StoreResult<T> {
        match self.lookup_here(&work) {
            Some(result) => result.map_err(|e| e.at(&self.path)),
            None => self.read(work).await,
        }
    }

    /// `work`'s result on a pooled lookup connection; `None` if it would have waited.
    fn lookup_here<T>(&self, work: &impl Fn(&mut Connection) -> StoreResult<T>) -> Option<StoreResult<T>> {
        let pooled = match &mut *lock(&self.lookups) {
            Some(idle) => idle.pop(),
            None => return Some(Err(StoreError::Closed)),
        };
        let mut conn = match pooled.map_or_else(|| open_lookup(&self.path), Ok) {
            Ok(conn) => conn,
            Err(e) => return Some(Err(e)),
        };
        LOOKUP_WOULD_WAIT.set(false);
        let result = std::panic::catch_unwind(AssertUnwindSafe(|| work(&mut conn)));
        let waited = LOOKUP_WOULD_WAIT.get();
        if let Ok(result) = result {
            // Back to the pool, unless closed meanwhile (or the pool is full).
            if let Some(idle) = &mut *lock(&self.lookups)
                && idle.len() < self.lookups_kept
            {
                idle.push(conn);
            }
            if !waited {
                return Some(result);
            }
        } else {
            error!("a store lookup panicked; it runs again on a reader");
        }
        None
    }

    /// Lets queued work finish, closes every connection and joins the threads. Later calls
    /// fail. The writer closes last, after checkpointing the WAL into the database and
    /// emptying it (see `serve_writes`): a read-only connection closing last could not, and
    /// committed data would stay in the WAL alone, where a copy of the database file misses it.
    pub async fn close(&self) {
        lock(&self.lookups).take();
        lock(&self.readers).take();
        let mut threads = std::mem::take(&mut *lock(&self.threads));
        // The writer is the first thread started; the readers go first.
        let writer = (!threads.is_empty()).then(|| threads.remove(0));
        let writer_queue = &self.writer;
        let readers_joined = tokio::task::spawn_blocking(move || {
            for thread in threads {
                let _ = thread.join();
            }
        });
        let _ = readers_joined.await;
        lock(writer_queue).take();
        if let Some(writer) = writer {
            let _ = tokio::task::spawn_blocking(move || writer.join()).await;
        }
    }
}

fn configure(conn: &Connection) -> StoreResult<()> {
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    // `temp_store = MEMORY` keeps the savepoints' sub-journal in memory instead of
    // spilling it to a temporary file once a batch of writes outgrows 64 KiB.
    conn.execute_batch("PRAGMA foreign_keys = ON; PRAGMA temp_store = MEMORY;")?;
    Ok(())
}

fn open_read_only(path: &Path) -> StoreResult<Connection> {
    Ok(Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)?)
}

/// A lookup connection: never waits for SQLite's lock, it notes that it would have.
fn open_lookup(path: &Path) -> StoreResult<Connection> {
    let conn = open_read_only(path)?;
    configure(&conn)?;
    conn.busy_handler(Some(|_| {
        LOOKUP_WOULD_WAIT.set(true);
        false
    }))?;
    Ok(conn)
}

fn spawn(name: &str, body: impl FnOnce() + Send + 'static) -> JoinHandle<()> {
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(body)
        .unwrap_or_else(|e| panic!("cannot start the store thread {name}: {e}"))
}

fn abandoned() -> StoreError {
    StoreError::Backend("a store operation was abandoned; see the daemon log".into())
}

/// Wraps `work` into a job, and the receiver of its answer.
fn job<T: Send + 'static>(
    work: impl Fn(&mut Connection) -> StoreResult<T> + Send + 'static,
) -> (Box<dyn Job>, oneshot::Receiver<StoreResult<T>>) {
    let (reply, answer) = oneshot::channel();
    (Box::new(Queued { work, result: None, reply }), answer)
}

/// A reader's thread: runs jobs until the queue closes.
fn serve_reads(mut conn: Connection, mut next: impl FnMut() -> Option<Box<dyn Job>>) {
    while let Some(mut job) = next() {
        job.run(&mut conn);
        job.answer(None);
    }
}

/// The writer's thread: takes every queued write (up to [`MAX_BATCH`]), commits them as
/// one transaction, then answers them all.
fn serve_writes(
    mut conn: Connection,
    jobs: &mpsc::Receiver<Box<dyn Job>>,
    committed: impl Fn(usize, std::time::Duration),
) {
    while let Ok(first) = jobs.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH
            && let Ok(job) = jobs.try_recv()
        {
            batch.push(job);
        }
        let started = std::time::Instant::now();
        let failure = commit(&mut conn, &mut batch).err().map(StoreError::from);
        if failure.is_none() {
            committed(batch.len(), started.elapsed());
        }
        for job in batch {
            job.answer(failure.as_ref());
        }
    }
    // Closing: everything committed moves into the database file and the WAL is emptied,
    // so the file alone holds the data (a backup of it, a copy of the home).
    match conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| row.get::<_, i64>(0)) {
        Ok(0) => {}
        // A reader of another process holds an old snapshot: its WAL frames stay.
        Ok(_) => error!("the WAL could not be emptied at close (a reader held it); the data is safe in it"),
        Err(e) => error!(error = %e, "cannot checkpoint the WAL at close; the data is safe in it"),
    }
}

/// Runs `batch` in one transaction and commits it. Optimistically first, every write
/// straight in the transaction; if one fails, the batch is undone and runs again with each
/// write in its own savepoint, so only the failures are rolled back. A failed write alone
/// is simply rolled back: its caller hears its own error. Whatever fails on the way, no
/// transaction is left open for the next batch.
fn commit(conn: &mut Connection, batch: &mut [Box<dyn Job>]) -> rusqlite::Result<()> {
    let done = run_and_commit(conn, batch);
    if done.is_err() && !conn.is_autocommit() {
        let _ = execute(conn, "ROLLBACK");
    }
    done
}

fn run_and_commit(conn: &mut Connection, batch: &mut [Box<dyn Job>]) -> rusqlite::Result<()> {
    execute(conn, "BEGIN IMMEDIATE")?;
    if !batch.iter_mut().all(|job| job.run(conn)) {
        execute(conn, "ROLLBACK")?;
        if batch.len() == 1 {
            return Ok(());
        }
        execute(conn, "BEGIN IMMEDIATE")?;
        for job in batch.iter_mut() {
            in_savepoint(conn, job.as_mut())?;
        }
    }
    execute(conn, "COMMIT")
}

/// Runs a write in its own savepoint, rolled back alone if it fails.
fn in_savepoint(conn: &mut Connection, job: &mut dyn Job) -> rusqlite::Result<()> {
    execute(conn, "SAVEPOINT write")?;
    if !job.run(conn) {
        execute(conn, "ROLLBACK TO write")?;
    }
    execute(conn, "RELEASE write")
}

/// Runs one statement through the connection's statement cache: the writer runs its
/// transaction and savepoint statements thousands of times a second.
fn execute(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn insert(conn: &mut Connection, name: &str) -> StoreResult<()> {
        conn.execute("INSERT INTO t (name) VALUES (?)", [name])?;
        Ok(())
    }

    #[tokio::test]
    async fn a_failing_write_in_a_batch_is_undone_alone_and_the_others_commit_once() {
        let dir = tempfile::tempdir().expect("dir");
        let db = Arc::new(
            Connections::open(
                &dir.path().join("t.db"),
                1,
                |conn| {
                    conn.execute_batch("CREATE TABLE t (name TEXT PRIMARY KEY)")?;
                    Ok(())
                },
                |_, _| {},
            )
            .expect("open"),
        );
        // The first write holds the writer while the next three queue up as one batch.
        let held = tokio::spawn({
            let db = db.clone();
            async move {
                db.write(|conn| {
                    std::thread::sleep(Duration::from_millis(200));
                    insert(conn, "first")
                })
                .await
            }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = |name: &'static str, fail: bool| {
            let (db, runs) = (db.clone(), runs.clone());
            async move {
                db.write(move |conn| {
                    runs.fetch_add(1, Ordering::SeqCst);
                    insert(conn, name)?;
                    if fail { Err(StoreError::Backend("refused after writing".into())) } else { Ok(()) }
                })
                .await
            }
        };
        let (a, b, c) = tokio::join!(counted("a", false), counted("b", true), counted("c", false));
        held.await.expect("task").expect("first");
        assert!(a.is_ok() && c.is_ok(), "{a:?} {c:?}");
        assert!(matches!(b, Err(StoreError::Backend(ref m)) if m.contains("refused")), "{b:?}");
        // a and b ran twice (the optimistic pass stopped at b), c once.
        assert_eq!(runs.load(Ordering::SeqCst), 5, "the batch was retried with savepoints");
        let names = db
            .read(|conn| {
                let mut statement = conn.prepare("SELECT name FROM t ORDER BY name")?;
                let names = statement.query_map([], |row| row.get::<_, String>(0))?;
                Ok(names.collect::<Result<Vec<_>, _>>()?)
            })
            .await
            .expect("read");
        assert_eq!(names, ["a", "c", "first"]);
    }

    #[tokio::test]
    async fn a_closed_store_answers_closed_to_every_kind_of_call() {
        let dir = tempfile::tempdir().expect("dir");
        let db = Connections::open(
            &dir.path().join("t.db"),
            1,
            |conn| {
                conn.execute_batch("CREATE TABLE t (name TEXT PRIMARY KEY)")?;
                Ok(())
            },
            |_, _| {},
        )
        .expect("open");
        db.write(|conn| insert(conn, "before")).await.expect("write before closing");
        db.close().await;
        let write = db.write(|conn| insert(conn, "after")).await;
        let read = db.read(|_| Ok(())).await;
        let lookup = db.lookup(|_| Ok(())).await;
        for answer in [write, read, lookup] {
            assert!(matches!(answer, Err(StoreError::Closed)), "{answer:?}");
        }
    }
}
