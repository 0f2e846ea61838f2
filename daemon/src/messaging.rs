//! One entry point for ThreadSend, wherever its target lives: a thread of this home goes to
//! the mailbox, a thread behind a bridge (`HOST/SESSION`) to the bridges' outbox. The gRPC
//! handler only translates the request and the answer.

use kiki_proto::ThreadRef;

use crate::bridges::Bridges;
use crate::error::Result;
use crate::mailbox::{Mailbox, Sent};
use crate::threads::Threads;
use crate::threads::runner::TurnCaller;

/// Routes each send to the home its target is on. Cheap to clone.
#[derive(Clone)]
pub struct Messaging {
    threads: Threads,
    mailbox: Mailbox,
    bridges: Bridges,
}

impl Messaging {
    pub fn new(threads: Threads, mailbox: Mailbox, bridges: Bridges) -> Self {
        Self { threads, mailbox, bridges }
    }

    /// ThreadSend from `caller` (a turn's thread, or an external client) to `target`.
    pub async fn send(
        &self,
        caller: Option<&TurnCaller>,
        target: &ThreadRef,
        content: &str,
        key: &str,
    ) -> Result<Sent> {
        if self.threads.resolve_host(&target.host_id).is_ok() {
            return self.mailbox.send(caller, target, content, key).await;
        }
        let source_thread = match self.mailbox.sender(caller).await {
            Ok(source) => source.map(|s| s.thread_id),
            // A switch turned off since the first send does not turn its retry away.
            Err(refusal) => {
                let scope = caller.map(|c| c.thread_id.as_str()).unwrap_or_default();
                let (host, session) = (&target.host_id, &target.session_id);
                let replay = self.bridges.replay_remote(scope, host, session, content, key).await?;
                return replay.ok_or(refusal);
            }
        };
        self.bridges.send_remote(source_thread, &target.host_id, &target.session_id, content, key).await
    }
}
