//! Committed changes between the processes on one database (a team home's replicas).
//!
//! A `NOTIFY` inside a committing transaction takes a global lock at commit, which serialises
//! every notifying commit (and has a ceiling of a few hundred such commits a second). So no
//! write notifies: each commit hands its changes to one task here, which sends what has
//! gathered as one `pg_notify` of its own, after the commits, with one in flight at a time:
//! under load, one notify carries many commits' changes. The other processes `LISTEN` and
//! publish what they hear to their own listeners, which read the store again (see
//! [`Change`]). A process that dies between its commit and its notify leaves the others to
//! learn of that commit by their next look. While this process's own listening connection
//! is cut off (and for a few seconds after it is back), notifies sent meanwhile are lost:
//! then every listener here is told to look again ([`Change::Missed`]) once a second —
//! the only time kiki looks without being told, and never more often.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::*;
use crate::sync::lock;

/// The channel every process on the database listens on.
const CHANNEL: &str = "kiki_changes";
/// A notify's payload must stay under 8000 bytes; changes beyond this go in the next one.
const PAYLOAD_MAX: usize = 7_000;
/// How often listeners look again while notifications may be lost.
const LOOK_EVERY: Duration = Duration::from_secs(1);
/// How long after the listening connection was last found cut off listeners go on looking
/// (it reconnects by itself meanwhile, and a notify sent before it listens again is lost).
const LOOK_AFTER_A_CUT: Duration = Duration::from_secs(5);

pub(super) struct Notifier {
    /// This process, so that it skips its own notifies (it published them at commit).
    origin: String,
    pending: Mutex<BTreeSet<Change>>,
    wake: Arc<Notify>,
    /// Hearing and telling; ended when the store is dropped (they hold no store).
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl Drop for Notifier {
    fn drop(&mut self) {
        for task in lock(&self.tasks).iter() {
            task.abort();
        }
    }
}

impl Notifier {
    /// Listens on the database for the other processes' changes (published to `changes`),
    /// and starts the task that tells them this one's.
    pub(super) async fn start(pool: PgPool, changes: Arc<Publisher>) -> StoreResult<Arc<Self>> {
        let notifier = Arc::new(Self {
            origin: ulid::Ulid::new().to_string(),
            pending: Mutex::default(),
            wake: Arc::new(Notify::new()),
            tasks: Mutex::default(),
        });
        let mut listener = PgListener::connect_with(&pool).await?;
        listener.listen(CHANNEL).await?;
        // Until when (ms on the wall clock) listeners look again on their own.
        let cut_until = Arc::new(AtomicI64::new(0));
        let heard = tokio::spawn(hear(listener, notifier.origin.clone(), changes.clone(), cut_until.clone()));
        let looked = tokio::spawn(look_while_cut(changes, cut_until));
        let told = tokio::spawn(tell(pool, Arc::downgrade(&notifier), notifier.wake.clone()));
        lock(&notifier.tasks).extend([heard, looked, told]);
        Ok(notifier)
    }

    /// Hands a commit's changes to the task that sends them.
    pub(super) fn committed(&self, changes: &[Change]) {
        lock(&self.pending).extend(changes.iter().cloned());
        self.wake.notify_one();
    }

    pub(super) async fn stop(&self) {
        let tasks = std::mem::take(&mut *lock(&self.tasks));
        for task in tasks {
            task.abort();
            let _ = task.await;
        }
    }
}

/// Sends the gathered changes, one notify at a time, until the notifier is dropped.
async fn tell(pool: PgPool, notifier: std::sync::Weak<Notifier>, wake: Arc<Notify>) {
    loop {
        let Some((origin, pending)) =
            notifier.upgrade().map(|this| (this.origin.clone(), std::mem::take(&mut *lock(&this.pending))))
        else {
            return;
        };
        if pending.is_empty() {
            wake.notified().await;
            continue;
        }
        for payload in payloads(&origin, &pending) {
            if let Err(e) =
                sqlx::query("SELECT pg_notify($1, $2)").bind(CHANNEL).bind(payload).execute(&pool).await
            {
                // The other processes learn of these commits by their next look.
                tracing::warn!(error = %e, "cannot tell the other processes on the database of a commit");
            }
        }
    }
}

/// Publishes what the other processes say they changed. When the listening connection is
/// found cut off, notifies sent meanwhile are lost: listeners are told to look again, now
/// and (see [`look_while_cut`]) until a while after it is back.
async fn hear(mut listener: PgListener, origin: String, changes: Arc<Publisher>, cut_until: Arc<AtomicI64>) {
    let cut = |changes: &Publisher| {
        cut_until.store(crate::time::now_ms() + crate::time::ms(LOOK_AFTER_A_CUT), Ordering::Release);
        changes.publish(vec![Change::Missed]);
    };
    loop {
        match listener.try_recv().await {
            Ok(Some(notification)) => {
                // This process hears its own notifies too: those are left undecoded.
                let (from, heard) = decode(notification.payload());
                if from != origin {
                    changes.publish(heard.collect());
                }
            }
            // Cut off: the next call reconnects.
            Ok(None) => {
                tracing::warn!("lost the database's change notifications; reconnecting");
                cut(&changes);
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for the database's change notifications; retrying");
                cut(&changes);
                tokio::time::sleep(LOOK_EVERY).await;
            }
        }
    }
}

/// Tells listeners to look again once a second while notifications may be lost.
async fn look_while_cut(changes: Arc<Publisher>, cut_until: Arc<AtomicI64>) {
    loop {
        tokio::time::sleep(LOOK_EVERY).await;
        if crate::time::now_ms() < cut_until.load(Ordering::Acquire) {
            changes.publish(vec![Change::Missed]);
        }
    }
}

/// `origin` then one change per line (`T id`, `I id`, `P id`, `A id`, `O`, `B`, `C`), cut into
/// payloads that fit a notify.
fn payloads(origin: &str, changes: &BTreeSet<Change>) -> Vec<String> {
    let mut out = vec![origin.to_string()];
    for change in changes {
        let line = match change {
            Change::Thread(id) => format!("T {id}"),
            Change::Inbox(id) => format!("I {id}"),
            Change::Parts(id) => format!("P {id}"),
            Change::Answered(id) => format!("A {id}"),
            Change::Outbox => "O".to_string(),
            Change::Bridges => "B".to_string(),
            Change::Crons => "C".to_string(),
            // Only ever published here, never sent.
            Change::Missed => continue,
        };
        let last = out.last_mut().expect("one payload at least");
        if last.len() + 1 + line.len() > PAYLOAD_MAX {
            out.push(format!("{origin}\n{line}"));
        } else {
            last.push('\n');
            last.push_str(&line);
        }
    }
    out
}

/// The origin and changes of a payload (decoded as they are taken); lines this kikid does
/// not know are skipped.
fn decode(payload: &str) -> (&str, impl Iterator<Item = Change> + '_) {
    let mut lines = payload.lines();
    let origin = lines.next().unwrap_or_default();
    let changes = lines.filter_map(|line| {
        let (kind, id) = line.split_once(' ').unwrap_or((line, ""));
        Some(match kind {
            "T" => Change::Thread(id.to_string()),
            "I" => Change::Inbox(id.to_string()),
            "P" => Change::Parts(id.to_string()),
            "A" => Change::Answered(id.to_string()),
            "O" => Change::Outbox,
            "B" => Change::Bridges,
            "C" => Change::Crons,
            _ => return None,
        })
    });
    (origin, changes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_round_trip_through_payloads_that_fit_a_notify() {
        let changes: BTreeSet<Change> = (0..1000)
            .map(|i| Change::Thread(format!("th_{i:026}")))
            .chain([
                Change::Outbox,
                Change::Bridges,
                Change::Crons,
                Change::Inbox("a".into()),
                Change::Parts("b".into()),
                Change::Answered("c".into()),
            ])
            .collect();
        let payloads = payloads("me", &changes);
        assert!(payloads.len() > 1, "1000 ids do not fit one notify");
        let mut heard = BTreeSet::new();
        for payload in &payloads {
            assert!(payload.len() <= PAYLOAD_MAX, "{}", payload.len());
            let (origin, changes) = decode(payload);
            assert_eq!(origin, "me");
            heard.extend(changes);
        }
        assert_eq!(heard, changes);
    }
}
