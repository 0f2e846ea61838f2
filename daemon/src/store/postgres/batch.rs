//! Group commit on PostgreSQL: the writes that come while one is under way share its
//! transaction, its write lock and its commit, as the SQLite writer's batches do.
//!
//! Every write of a home holds the home's write lock (an advisory lock) until it commits, so
//! one at a time commits and each pays a whole WAL flush: about a millisecond each, however
//! many wait. Here the first write of a batch begins the transaction and takes the lock; the
//! writes that arrive meanwhile join it (up to [`MOST_WRITES`]) and take turns with it, each
//! inside a savepoint of its own (set in the round trip that begins its turn); the last to
//! finish commits them all, and each is answered once that commit is done. A write that
//! fails, or whose caller goes away, is rolled back to its savepoint and the others keep
//! theirs. Each write still sees everything the writes before it did, committed or earlier
//! in its batch — the same order and rules as one write at a time — and none is answered
//! before it is durable.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::{OwnedMutexGuard, watch};

use super::*;
use crate::sync::lock;

/// The most writes one transaction carries: each is a subtransaction, and PostgreSQL keeps
/// 64 of a transaction's in shared memory before every snapshot on the server slows down.
const MOST_WRITES: usize = 60;

/// How a batch's first write begins: its transaction, the home's write lock (an advisory
/// lock held until the transaction ends; any fixed number: kiki's database is its own) and
/// the write's savepoint, in one round trip.
const BEGIN_FIRST_WRITE: &str = "BEGIN; SELECT pg_advisory_xact_lock(1802071913); SAVEPOINT w1";

/// The home's writes in this process: the batch that new writes join.
pub(super) struct Writes {
    open: Mutex<Option<Arc<Batch>>>,
    changes: Arc<Publisher>,
    notifier: Arc<notify::Notifier>,
}

/// Writes sharing one transaction.
struct Batch {
    members: Mutex<Members>,
    shared: Arc<tokio::sync::Mutex<Shared>>,
    /// The commit's outcome, once it is known.
    outcome: watch::Sender<Option<StoreResult<()>>>,
}

struct Members {
    joined: usize,
    finished: usize,
}

impl Members {
    /// Whether writes may still join: until the last joined one finished (then none can
    /// join, so it stays closed).
    fn open(&self) -> bool {
        self.finished < self.joined
    }
}

/// The transaction, which the batch's writes use one at a time.
#[derive(Default)]
struct Shared {
    tx: Option<sqlx::Transaction<'static, Postgres>>,
    /// Why the transaction could not begin or went wrong: every write of the batch fails.
    failed: Option<StoreError>,
    /// A write given up on (an error, or its caller gone): rolled back to its savepoint
    /// before the transaction is used again.
    undo: Option<u64>,
    savepoints: u64,
    /// The changes of the writes kept, published after the commit.
    noted: Vec<Change>,
    kept: usize,
    began: Option<Instant>,
}

/// A write under way: its turn with its batch's transaction (holding the home's write
/// lock), inside a savepoint of its own.
pub(super) struct Tx {
    /// First: dropped before `member`, whose drop may need the transaction.
    shared: OwnedMutexGuard<Shared>,
    /// Taken by the commit.
    member: Option<Member>,
    savepoint: u64,
    /// Where this write's changes begin in the batch's.
    noted_from: usize,
    clock: Clock,
    /// Released into its batch: nothing to undo when dropped.
    kept: bool,
    /// The write's span, from asking for the lock to its turn's end.
    _span: tracing::Span,
}

impl Tx {
    /// The connection to run the write's statements on.
    pub(super) fn conn(&mut self) -> &mut PgConnection {
        self.shared.tx.as_mut().expect("a write's transaction has begun")
    }

    /// Notes that this write makes `change` (published after commit).
    pub(super) fn note(&mut self, change: Change) {
        self.shared.noted.push(change);
    }

    /// The time this write decides what is overdue by (see [`write_time`]), for a write
    /// asked for at `asked`.
    pub(super) fn time(&self, asked: Millis) -> Millis {
        write_time(&self.clock, asked)
    }
}

impl Drop for Tx {
    /// A write left without committing (an error, or its caller gone) is undone; its
    /// batch goes on without it (see [`Member`]'s drop).
    fn drop(&mut self) {
        if !self.kept {
            self.shared.undo = Some(self.savepoint);
            let from = self.noted_from;
            self.shared.noted.truncate(from);
        }
    }
}

/// A write's place in its batch, from joining it until it is done with the transaction: the
/// batch commits once every member is.
struct Member {
    writes: Arc<Writes>,
    batch: Arc<Batch>,
    finished: bool,
}

impl Member {
    /// Done with the transaction; answers with the batch's commit.
    async fn finish(mut self) -> StoreResult<()> {
        self.finished = true;
        self.writes.finish(&self.batch).await
    }
}

impl Drop for Member {
    /// A write whose caller went away (waiting for its turn, or amid its statements) is done
    /// too, or its batch would wait for it forever.
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let (writes, batch) = (self.writes.clone(), self.batch.clone());
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = writes.finish(&batch).await;
            });
        }
    }
}

impl Writes {
    pub(super) fn new(changes: Arc<Publisher>, notifier: Arc<notify::Notifier>) -> Arc<Self> {
        Arc::new(Self { open: Mutex::new(None), changes, notifier })
    }

    /// Starts a write: its turn with the open batch's transaction (begun here if it is the
    /// batch's first), in a savepoint of its own.
    pub(super) async fn begin(self: &Arc<Self>, store: &PostgresStore) -> StoreResult<Tx> {
        let span = tracing::debug_span!("store write");
        let member = Member { writes: self.clone(), batch: self.join(), finished: false };
        let mut shared = member.batch.shared.clone().lock_owned().await;
        match start(store, &mut shared).await {
            Ok(savepoint) => Ok(Tx {
                noted_from: shared.noted.len(),
                shared,
                member: Some(member),
                savepoint,
                clock: store.clock.clone(),
                kept: false,
                _span: span,
            }),
            Err(e) => {
                drop(shared);
                let _ = member.finish().await;
                Err(e)
            }
        }
    }

    /// Keeps `tx`'s writes in its batch, and answers once the batch has committed. (Its
    /// savepoint stays: only a later write's could be rolled back, never this one's.)
    pub(super) async fn commit(mut tx: Tx) -> StoreResult<()> {
        tx.shared.kept += 1;
        tx.kept = true;
        let member = tx.member.take().expect("a write commits once");
        drop(tx); // the next write's turn
        member.finish().await
    }

    /// The batch a new write joins: the open one, else a new one.
    fn join(&self) -> Arc<Batch> {
        let mut open = lock(&self.open);
        if let Some(batch) = open.as_ref() {
            let mut members = lock(&batch.members);
            if members.open() && members.joined < MOST_WRITES {
                members.joined += 1;
                return batch.clone();
            }
        }
        let batch = Arc::new(Batch {
            members: Mutex::new(Members { joined: 1, finished: 0 }),
            shared: Default::default(),
            outcome: watch::Sender::new(None),
        });
        *open = Some(batch.clone());
        batch
    }

    /// One of `batch`'s writes is done with the transaction; the last one commits them all.
    /// Answers with the commit's outcome.
    async fn finish(&self, batch: &Batch) -> StoreResult<()> {
        let last = {
            let mut members = lock(&batch.members);
            members.finished += 1;
            !members.open()
        };
        let mut outcome = batch.outcome.subscribe();
        if last {
            let committed = self.end(batch).await;
            batch.outcome.send_replace(Some(committed));
        }
        let answered = match outcome.wait_for(|outcome| outcome.is_some()).await {
            Ok(outcome) => outcome.clone(),
            Err(_) => None,
        };
        answered.unwrap_or(Err(StoreError::Closed))
    }

    /// Commits the batch and publishes what its writes changed.
    async fn end(&self, batch: &Batch) -> StoreResult<()> {
        let mut shared = batch.shared.lock().await;
        if let Some(failed) = shared.failed.take() {
            return Err(failed);
        }
        undo(&mut shared).await?;
        let Some(tx) = shared.tx.take() else { return Ok(()) };
        tx.commit().await?;
        let took = shared.began.map(|began| began.elapsed()).unwrap_or_default();
        self.changes.committed(shared.kept, took);
        let noted = std::mem::take(&mut shared.noted);
        if !noted.is_empty() {
            self.notifier.committed(&noted);
            self.changes.publish(noted);
        }
        Ok(())
    }
}

/// Readies the batch's transaction for one more write, in one round trip: begun with the
/// home's write lock and the first savepoint if this is the batch's first write; else a
/// given-up write rolled back, and the next savepoint. The savepoint's number.
async fn start(store: &PostgresStore, shared: &mut Shared) -> StoreResult<u64> {
    if let Some(failed) = &shared.failed {
        return Err(failed.clone());
    }
    shared.savepoints += 1;
    let savepoint = shared.savepoints;
    let Some(tx) = shared.tx.as_mut() else {
        return match store.pool.begin_with(BEGIN_FIRST_WRITE).await {
            Ok(tx) => {
                shared.tx = Some(tx);
                shared.began = Some(Instant::now());
                Ok(savepoint)
            }
            Err(e) => {
                let e = store.unreachable(e);
                shared.failed = Some(e.clone());
                Err(e)
            }
        };
    };
    let statement = match shared.undo.take() {
        Some(undone) => format!("ROLLBACK TO SAVEPOINT w{undone}; SAVEPOINT w{savepoint}"),
        None => format!("SAVEPOINT w{savepoint}"),
    };
    if let Err(e) = sqlx::Executor::execute(&mut **tx, statement.as_str()).await {
        let e = StoreError::from(e);
        shared.failed = Some(e.clone());
        return Err(e);
    }
    Ok(savepoint)
}

/// Rolls back the write given up on, if any.
async fn undo(shared: &mut Shared) -> StoreResult<()> {
    if let Some(savepoint) = shared.undo.take()
        && let Some(tx) = shared.tx.as_mut()
    {
        let statement = format!("ROLLBACK TO SAVEPOINT w{savepoint}");
        sqlx::Executor::execute(&mut **tx, statement.as_str()).await?;
    }
    Ok(())
}
