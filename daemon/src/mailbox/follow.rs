//! ThreadFollow: a turn's progress as it happens — the parts the runner keeps while the
//! turn runs (see `threads::runner::record_live`), then its end.

use std::time::Duration;

use tokio::sync::mpsc;

use super::{Waits, park};
use crate::caller::Caller;
use crate::error::{Error, Result};
use crate::store::{TurnPart, TurnStatus};
use crate::threads::signals;

/// Parts read per look.
const PARTS_PER_READ: u32 = 100;
/// Followers' answers in flight: a follower that does not read stops the reader here.
const FOLLOW_BUFFER: usize = 64;

/// One thing a follower is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    Part { turn_id: String, part: TurnPart },
    End { turn_id: String, status: TurnStatus },
}

impl Waits {
    /// Follows `thread_id`'s turn `turn_id`, or the one running (waiting up to `wait_ms` for
    /// one to start). The receiver ends after the turn's end, when nothing started in time,
    /// or when kikid stops.
    pub async fn follow(
        &self,
        caller: &Caller,
        target: &kiki_proto::ThreadRef,
        turn_id: Option<String>,
        wait_ms: Option<u32>,
    ) -> Result<mpsc::Receiver<Result<Progress>>> {
        caller.owner_only("ThreadFollow")?;
        if self.threads.resolve_host(&target.host_id).is_err() {
            return Err(Error::invalid("target", "ThreadFollow follows threads of this home"));
        }
        let thread_id = self.threads.named(target).await?.id;
        let wait_ms = wait_ms.unwrap_or(kiki_proto::limits::WAIT_TIMEOUT_DEFAULT_MS);
        if wait_ms > kiki_proto::limits::WAIT_TIMEOUT_MAX_MS {
            return Err(Error::invalid(
                "wait_ms",
                format!("must be between 0 and {}, got {wait_ms}", kiki_proto::limits::WAIT_TIMEOUT_MAX_MS),
            ));
        }
        let wait = Duration::from_millis(wait_ms.into());
        if let Some(turn) = &turn_id
            && self.store.turn(&thread_id, turn).await?.is_none()
        {
            return Err(Error::NotFound(format!("thread {thread_id} has no turn {turn}")));
        }
        let (tx, rx) = mpsc::channel(FOLLOW_BUFFER);
        let waits = self.clone();
        tokio::spawn(async move {
            if let Err(e) = waits.follow_into(&thread_id, turn_id, wait, &tx).await {
                let _ = tx.send(Err(e)).await;
            }
        });
        Ok(rx)
    }

    async fn follow_into(
        &self,
        thread_id: &str,
        turn_id: Option<String>,
        wait: Duration,
        tx: &mpsc::Sender<Result<Progress>>,
    ) -> Result<()> {
        let subscription = self.signals.subscribe(vec![thread_id.to_string(), signals::parts(thread_id)]);
        let started_by = self.runner.clock().now_ms() + crate::time::ms(wait);
        let turn_id = match turn_id {
            Some(turn_id) => turn_id,
            None => loop {
                match self.store.latest_turn(thread_id).await? {
                    Some((turn_id, TurnStatus::Running)) => break turn_id,
                    _ if !self.park_while_followed(&subscription, started_by, tx).await => return Ok(()),
                    _ => {}
                }
            },
        };
        let mut after = 0;
        loop {
            // Whether it had ended before this look: then the look has every part.
            let ended = self
                .store
                .turn(thread_id, &turn_id)
                .await?
                .map(|t| t.status)
                .filter(|s| *s != TurnStatus::Running);
            let parts = self.store.turn_parts(&turn_id, after, PARTS_PER_READ).await?;
            let full = parts.len() as u32 == PARTS_PER_READ;
            for part in parts {
                after = part.seq;
                if tx.send(Ok(Progress::Part { turn_id: turn_id.clone(), part })).await.is_err() {
                    return Ok(()); // the follower went away
                }
            }
            if full {
                continue;
            }
            if let Some(status) = ended {
                let _ = tx.send(Ok(Progress::End { turn_id, status })).await;
                return Ok(());
            }
            // Until a part is kept or the turn ends (or kikid stops: the follower calls again).
            if !self
                .park_while_followed(
                    &subscription,
                    self.runner.clock().now_ms() + crate::time::ms(Duration::from_secs(3600)),
                    tx,
                )
                .await
                && (self.stopping.is_cancelled() || tx.is_closed())
            {
                return Ok(());
            }
        }
    }

    /// [`park`], ended early when the follower goes away.
    async fn park_while_followed(
        &self,
        subscription: &signals::Subscription,
        deadline: crate::time::Millis,
        tx: &mpsc::Sender<Result<Progress>>,
    ) -> bool {
        tokio::select! {
            parked = park(self.runner.clock(), subscription, deadline, &self.stopping) => parked,
            () = tx.closed() => false,
        }
    }
}
