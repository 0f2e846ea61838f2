//! Group commit for ThreadSend: concurrent sends are gathered into one store transaction,
//! so one fsync serves many senders. The queue is bounded; when it is full a send is
//! refused with "busy" (RESOURCE_EXHAUSTED) instead of queueing without limit — the caller
//! retries with the same key, which is harmless.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};
use tracing::error;

use crate::store::{NewMessage, SendOutcome, Store, StoreError, StoreResult};

/// Sends waiting for the committer. At ~1 ms per commit this is far more than a second of
/// backlog, enough to absorb bursts without holding unbounded memory.
const QUEUE: usize = 4096;
/// The most sends one transaction carries; bounds a commit's latency.
const MAX_BATCH: usize = 256;

type Reply = oneshot::Sender<StoreResult<SendOutcome>>;

#[derive(Clone)]
pub struct GroupCommit {
    queue: mpsc::Sender<(NewMessage, Reply)>,
}

/// Why a send was not committed.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    #[error("the mailbox is busy; retry with the same idempotency key")]
    Busy,
    #[error("the mailbox is shutting down")]
    Closed,
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl GroupCommit {
    /// Starts the committer task; it ends when every handle is dropped.
    pub fn start(store: Arc<dyn Store>) -> Self {
        let (queue, mut rx) = mpsc::channel::<(NewMessage, Reply)>(QUEUE);
        tokio::spawn(async move {
            let mut batch = Vec::with_capacity(MAX_BATCH);
            while rx.recv_many(&mut batch, MAX_BATCH).await > 0 {
                let (messages, replies): (Vec<NewMessage>, Vec<Reply>) = batch.drain(..).unzip();
                match store.accept_messages(&messages).await {
                    Ok(outcomes) => {
                        for (reply, outcome) in replies.into_iter().zip(outcomes) {
                            let _ = reply.send(Ok(outcome));
                        }
                    }
                    Err(e) => {
                        error!(error = %e, sends = messages.len(), "group commit failed; nothing was written");
                        for reply in replies {
                            let _ = reply.send(Err(StoreError::Backend(e.to_string())));
                        }
                    }
                }
            }
        });
        Self { queue }
    }

    /// Commits `message` together with whatever else is waiting.
    pub async fn commit(&self, message: NewMessage) -> Result<SendOutcome, CommitError> {
        let (reply, answer) = oneshot::channel();
        self.queue.try_send((message, reply)).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => CommitError::Busy,
            mpsc::error::TrySendError::Closed(_) => CommitError::Closed,
        })?;
        Ok(answer.await.map_err(|_| CommitError::Closed)??)
    }
}
