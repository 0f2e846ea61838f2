//! Group commit: concurrent writes of one kind (local sends, outbox entries) are gathered
//! into one store transaction, so one fsync serves many callers. The queue is bounded; when
//! it is full a caller is refused with "busy" (RESOURCE_EXHAUSTED) instead of queueing
//! without limit — it retries with the same idempotency key, which is harmless.

use std::future::Future;

use tokio::sync::{mpsc, oneshot};
use tracing::error;

use crate::store::{StoreError, StoreResult};

/// Writes waiting for the committer. At ~1 ms per commit this is far more than a second of
/// backlog, enough to absorb bursts without holding unbounded memory.
const QUEUE: usize = 4096;
/// The most writes one transaction carries; bounds a commit's latency.
const MAX_BATCH: usize = 256;

type Reply<O> = oneshot::Sender<StoreResult<O>>;

/// A committer for items `I` whose batch write answers one `O` per item, in order.
pub struct GroupCommit<I, O> {
    queue: mpsc::Sender<(I, Reply<O>)>,
}

impl<I, O> Clone for GroupCommit<I, O> {
    fn clone(&self) -> Self {
        Self { queue: self.queue.clone() }
    }
}

/// Why a write was not committed.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    #[error("the mailbox is busy; retry with the same idempotency key")]
    Busy,
    #[error("the mailbox is shutting down")]
    Closed,
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl<I: Send + 'static, O: Send + 'static> GroupCommit<I, O> {
    /// Starts the committer task around `write` (one transaction per batch); the task ends
    /// when every handle is dropped.
    pub fn start<W, Fut>(write: W) -> Self
    where
        W: Fn(Vec<I>) -> Fut + Send + 'static,
        Fut: Future<Output = StoreResult<Vec<O>>> + Send,
    {
        let (queue, mut rx) = mpsc::channel::<(I, Reply<O>)>(QUEUE);
        tokio::spawn(async move {
            let mut batch = Vec::with_capacity(MAX_BATCH);
            while rx.recv_many(&mut batch, MAX_BATCH).await > 0 {
                let (items, replies): (Vec<I>, Vec<Reply<O>>) = batch.drain(..).unzip();
                let count = items.len();
                match write(items).await {
                    Ok(outcomes) => {
                        for (reply, outcome) in replies.into_iter().zip(outcomes) {
                            let _ = reply.send(Ok(outcome));
                        }
                    }
                    Err(e) => {
                        error!(error = %e, writes = count, "group commit failed; nothing was written");
                        for reply in replies {
                            let _ = reply.send(Err(StoreError::Backend(e.to_string())));
                        }
                    }
                }
            }
        });
        Self { queue }
    }

    /// Commits `item` together with whatever else is waiting.
    pub async fn commit(&self, item: I) -> Result<O, CommitError> {
        let (reply, answer) = oneshot::channel();
        self.queue.try_send((item, reply)).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => CommitError::Busy,
            mpsc::error::TrySendError::Closed(_) => CommitError::Closed,
        })?;
        Ok(answer.await.map_err(|_| CommitError::Closed)??)
    }
}
