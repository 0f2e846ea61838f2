//! SQLite connections on threads of their own. An async caller hands a closure to a
//! connection's thread and awaits its answer: one thread hop per store operation, however
//! many statements the operation runs (an async driver that hops per statement pays that
//! hop — two context switches — for every `BEGIN`, query and `COMMIT`).
//!
//! One writer thread owns the only read-write connection, so writes are serialised in the
//! process instead of fighting over SQLite's write lock; a few reader threads share a queue
//! of read-only work and never wait for a write (WAL).

use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};
use tokio::sync::oneshot;
use tracing::error;

use crate::store::{StoreError, StoreResult};

type Job = Box<dyn FnOnce(&mut Connection) + Send>;

/// Prepared statements kept per connection; more than the store has distinct statements.
const STATEMENT_CACHE: usize = 128;
/// How long a connection waits for SQLite's lock (a checkpoint, another process) before
/// failing the operation.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

pub struct Connections {
    writer: Mutex<Option<mpsc::Sender<Job>>>,
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
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_CREATE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
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
        let (write_queue, write_jobs) = mpsc::channel::<Job>();
        threads.push(spawn("kiki-store-writer", move || serve(writer, || write_jobs.recv().ok())));
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
            let next = move || jobs.lock().unwrap_or_else(PoisonError::into_inner).recv().ok();
            threads.push(spawn(&format!("kiki-store-reader-{n}"), move || serve(reader, next)));
        }
        Ok(Self {
            writer: Mutex::new(Some(write_queue)),
            readers: Mutex::new(Some(read_queue)),
            threads: Mutex::new(threads),
        })
    }

    /// Runs `work` on the writer connection.
    pub async fn write<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Connection) -> StoreResult<T> + Send + 'static,
    ) -> StoreResult<T> {
        run(&self.writer, work).await
    }

    /// Runs `work` on a read-only connection.
    pub async fn read<T: Send + 'static>(
        &self,
        work: impl FnOnce(&mut Connection) -> StoreResult<T> + Send + 'static,
    ) -> StoreResult<T> {
        run(&self.readers, work).await
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

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn configure(conn: &Connection) -> StoreResult<()> {
    conn.busy_timeout(BUSY_TIMEOUT)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    conn.execute_batch("PRAGMA foreign_keys = ON;")?;
    Ok(())
}

fn spawn(name: &str, body: impl FnOnce() + Send + 'static) -> JoinHandle<()> {
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(body)
        .unwrap_or_else(|e| panic!("cannot start the store thread {name}: {e}"))
}

/// A connection's thread: runs jobs until the queue closes. A job that panics fails only
/// its own caller (its transaction, if any, rolls back when dropped).
fn serve(mut conn: Connection, mut next: impl FnMut() -> Option<Job>) {
    while let Some(job) = next() {
        if std::panic::catch_unwind(AssertUnwindSafe(|| job(&mut conn))).is_err() {
            error!("a store operation panicked; it was abandoned");
        }
    }
}

async fn run<T: Send + 'static>(
    queue: &Mutex<Option<mpsc::Sender<Job>>>,
    work: impl FnOnce(&mut Connection) -> StoreResult<T> + Send + 'static,
) -> StoreResult<T> {
    let (reply, answer) = oneshot::channel();
    let job: Job = Box::new(move |conn| {
        let _ = reply.send(work(conn));
    });
    let sent = match &*lock(queue) {
        Some(queue) => queue.send(job).is_ok(),
        None => false,
    };
    if !sent {
        return Err(StoreError::Backend("the store is closed".into()));
    }
    answer.await.map_err(|_| StoreError::Backend("a store operation was abandoned".into()))?
}
