//! SQLite connections on threads of their own. An async caller hands a closure to a
//! connection's thread and awaits its answer: one thread hop per store operation, however
//! many statements the operation runs (an async driver that hops per statement pays that
//! hop — two context switches — for every `BEGIN`, query and `COMMIT`).
//!
//! One writer thread owns the only read-write connection, so writes are serialised in the
//! process instead of fighting over SQLite's write lock, and it **group-commits**: whatever
//! writes are queued when it looks runs as one transaction, one fsync, each write inside its
//! own savepoint (a write that fails is rolled back alone). Nobody is answered before the
//! commit, so an answered write is durable. A few reader threads share a queue of read-only
//! work and never wait for a write (WAL).

use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};
use tokio::sync::oneshot;
use tracing::error;

use crate::store::{StoreError, StoreResult};
use crate::sync::lock;

/// Runs on a connection; says whether it succeeded and how to answer its caller.
type Job = Box<dyn FnOnce(&mut Connection) -> (bool, Answer) + Send>;
/// Answers a caller: with its own result, or with the failure of the commit that carried it.
type Answer = Box<dyn FnOnce(Option<&str>) + Send>;

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

pub struct Connections {
    writer: Mutex<Option<mpsc::SyncSender<Job>>>,
    readers: Mutex<Option<mpsc::Sender<Job>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Connections {
    /// Opens the database at `path` (creating it), runs `setup` on the writer connection
    /// (migrations) and starts the threads. Blocking: call it off the async runtime.
    pub fn open(
        path: &Path,
        readers: usize,
        setup: impl FnOnce(&mut Connection) -> StoreResult<()>,
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
        let (write_queue, write_jobs) = mpsc::sync_channel::<Job>(WRITE_QUEUE);
        threads.push(spawn("kiki-store-writer", move || serve_writes(writer, &write_jobs)));
        let (read_queue, read_jobs) = mpsc::channel::<Job>();
        let read_jobs = Arc::new(Mutex::new(read_jobs));
        for n in 0..readers {
            let reader = Connection::open_with_flags(
                path,
                OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )?;
            configure(&reader)?;
            let jobs = read_jobs.clone();
            // Readers take turns at the shared queue: the one holding the lock waits for the
            // next job, the others wait for the lock.
            let next = move || lock(&jobs).recv().ok();
            threads.push(spawn(&format!("kiki-store-reader-{n}"), move || serve_reads(reader, next)));
        }
        Ok(Self {
            writer: Mutex::new(Some(write_queue)),
            readers: Mutex::new(Some(read_queue)),
            threads: Mutex::new(threads),
        })
    }

    /// Runs `work` on the writer connection, atomically (all of its writes or none), and
    /// answers once they are committed.
    pub async fn write<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Connection) -> StoreResult<T> + Send + 'static,
    ) -> StoreResult<T> {
        let (job, answer) = job(work);
        let queued = match &*lock(&self.writer) {
            Some(queue) => queue.try_send(job).map_err(|e| match e {
                mpsc::TrySendError::Full(_) => StoreError::Busy,
                mpsc::TrySendError::Disconnected(_) => closed(),
            }),
            None => Err(closed()),
        };
        queued?;
        answer.await.map_err(|_| abandoned())?
    }

    /// Runs `work` on a read-only connection.
    pub async fn read<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Connection) -> StoreResult<T> + Send + 'static,
    ) -> StoreResult<T> {
        let (job, answer) = job(work);
        let queued = match &*lock(&self.readers) {
            Some(queue) => queue.send(job).map_err(|_| closed()),
            None => Err(closed()),
        };
        queued?;
        answer.await.map_err(|_| abandoned())?
    }

    /// Lets queued work finish, closes every connection (the last one checkpoints the WAL)
    /// and joins the threads. Later calls fail.
    pub async fn close(&self) {
        lock(&self.writer).take();
        lock(&self.readers).take();
        let threads = std::mem::take(&mut *lock(&self.threads));
        let joined = tokio::task::spawn_blocking(move || {
            for thread in threads {
                let _ = thread.join();
            }
        });
        let _ = joined.await;
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

fn spawn(name: &str, body: impl FnOnce() + Send + 'static) -> JoinHandle<()> {
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(body)
        .unwrap_or_else(|e| panic!("cannot start the store thread {name}: {e}"))
}

fn closed() -> StoreError {
    StoreError::Backend("the store is closed".into())
}

fn abandoned() -> StoreError {
    StoreError::Backend("a store operation was abandoned; see the daemon log".into())
}

/// Wraps `work` into a job, and the receiver of its answer.
fn job<T: Send + 'static>(
    work: impl FnOnce(&mut Connection) -> StoreResult<T> + Send + 'static,
) -> (Job, oneshot::Receiver<StoreResult<T>>) {
    let (reply, answer) = oneshot::channel();
    let job: Job = Box::new(move |conn| {
        let result = work(conn);
        let ok = result.is_ok();
        let answer: Answer = Box::new(move |commit_failed| {
            let _ = reply.send(match commit_failed {
                Some(why) => Err(StoreError::Backend(format!("commit failed: {why}"))),
                None => result,
            });
        });
        (ok, answer)
    });
    (job, answer)
}

/// Runs a job; `None` if it panicked (its caller then hears that it was abandoned).
fn attempt(conn: &mut Connection, job: Job) -> Option<(bool, Answer)> {
    let done = std::panic::catch_unwind(AssertUnwindSafe(|| job(conn)));
    if done.is_err() {
        error!("a store operation panicked; it was abandoned");
    }
    done.ok()
}

/// A reader's thread: runs jobs until the queue closes.
fn serve_reads(mut conn: Connection, mut next: impl FnMut() -> Option<Job>) {
    while let Some(job) = next() {
        if let Some((_, answer)) = attempt(&mut conn, job) {
            answer(None);
        }
    }
}

/// The writer's thread: takes every queued write (up to [`MAX_BATCH`]), runs each in a
/// savepoint of one transaction, commits once, then answers them all. A write alone needs no
/// savepoint: the transaction is its own.
fn serve_writes(mut conn: Connection, jobs: &mpsc::Receiver<Job>) {
    while let Ok(first) = jobs.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH
            && let Ok(job) = jobs.try_recv()
        {
            batch.push(job);
        }
        if let Err(e) = execute(&conn, "BEGIN IMMEDIATE") {
            // Not run: their callers hear that they were abandoned.
            error!(error = %e, writes = batch.len(), "cannot begin a write transaction");
            continue;
        }
        let (answers, keep): (Vec<Answer>, bool) = if batch.len() == 1 {
            let done = batch.pop().and_then(|job| attempt(&mut conn, job));
            let ok = matches!(done, Some((true, _)));
            (done.map(|(_, answer)| answer).into_iter().collect(), ok)
        } else {
            (batch.into_iter().filter_map(|job| in_savepoint(&mut conn, job)).collect(), true)
        };
        let failure = if keep {
            let committed = execute(&conn, "COMMIT");
            if committed.is_err() {
                let _ = execute(&conn, "ROLLBACK");
            }
            committed.err().map(|e| e.to_string())
        } else {
            // A write alone failed: nothing to keep, and its caller hears its own error.
            if let Err(e) = execute(&conn, "ROLLBACK") {
                error!(error = %e, "cannot roll back a failed write");
            }
            None
        };
        for answer in answers {
            answer(failure.as_deref());
        }
    }
}

/// Runs a job of a batch in its own savepoint, rolled back alone if it fails.
fn in_savepoint(conn: &mut Connection, job: Job) -> Option<Answer> {
    if let Err(e) = execute(conn, "SAVEPOINT write") {
        error!(error = %e, "cannot open a savepoint; the write was abandoned");
        return None;
    }
    let done = attempt(conn, job);
    let closed = if matches!(done, Some((true, _))) {
        execute(conn, "RELEASE write")
    } else {
        execute(conn, "ROLLBACK TO write").and_then(|()| execute(conn, "RELEASE write"))
    };
    if let Err(e) = closed {
        error!(error = %e, "cannot close a savepoint");
    }
    done.map(|(_, answer)| answer)
}

/// Runs one statement through the connection's statement cache: the writer runs its
/// transaction and savepoint statements thousands of times a second.
fn execute(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(drop)
}
