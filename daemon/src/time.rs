//! Time: the [`Clock`] a home reads and sleeps on, and wall-clock helpers (the store keeps
//! milliseconds since the epoch, the API shows RFC 3339).
//!
//! Every product timing (retry windows, backoff, follow-ups, expiry of requests and
//! messages, wait and permission timeouts, a turn's limits, sweeps) reads the home's clock,
//! so the in-process suites run them on a [`Clock::manual`] that moves only when a test says
//! so. Transport-level timers (QUIC's inside quinn, socket and dial bounds, a process's kill
//! grace) stay on real time: they bound what the operating system does, not what kiki
//! promises. See docs/design/clock.md.

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch: how the store keeps every time.
pub type Millis = i64;

/// The wall clock. Only for what is meant to be wall time whatever the home's clock (a log
/// line, a backup's name); a home's timings read its [`Clock`].
pub fn now_ms() -> Millis {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as Millis).unwrap_or(0)
}

/// `1732934987123` → `"2024-11-30T02:49:47.123Z"`.
pub fn rfc3339(ms: Millis) -> String {
    let t = UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_millis(t).to_string()
}

/// A duration in whole milliseconds, for arithmetic on [`Millis`].
pub fn ms(d: Duration) -> Millis {
    d.as_millis().min(i64::MAX as u128) as Millis
}

/// The time a home reads and sleeps on. Cheap to clone. [`Clock::system`] (the default) is
/// the wall clock with tokio's timers; [`Clock::manual`] moves only by [`Clock::advance`].
#[derive(Clone, Default)]
pub struct Clock(Kind);

#[derive(Clone, Default)]
enum Kind {
    #[default]
    System,
    Manual(Arc<Manual>),
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Kind::System => f.write_str("Clock::system"),
            Kind::Manual(m) => write!(f, "Clock::manual(at {})", lock(&m.state).now),
        }
    }
}

/// A timeout ran out (see [`Clock::timeout`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("deadline has elapsed")]
pub struct Elapsed;

impl Clock {
    /// Wall time, and tokio's timers.
    pub fn system() -> Self {
        Self(Kind::System)
    }

    /// A clock at `start` that moves only when [`Clock::advance`] moves it (tests).
    pub fn manual(start: Millis) -> Self {
        let state = State { now: start, next_id: 0, sleepers: BTreeMap::new(), woken: HashSet::new() };
        Self(Kind::Manual(Arc::new(Manual { state: Mutex::new(state) })))
    }

    pub fn is_manual(&self) -> bool {
        matches!(self.0, Kind::Manual(_))
    }

    /// Milliseconds since the epoch, by this clock.
    pub fn now_ms(&self) -> Millis {
        match &self.0 {
            Kind::System => now_ms(),
            Kind::Manual(m) => lock(&m.state).now,
        }
    }

    /// Sleeps for `d` of this clock's time.
    pub fn sleep(&self, d: Duration) -> Sleep {
        match &self.0 {
            Kind::System => Sleep(SleepKind::System(Box::pin(tokio::time::sleep(d)))),
            Kind::Manual(m) => {
                let deadline = lock(&m.state).now.saturating_add(ms(d));
                Sleep(SleepKind::Manual(ManualSleep { clock: m.clone(), deadline, id: None }))
            }
        }
    }

    /// Sleeps until this clock reads `at` (at once if it does already).
    pub fn sleep_until(&self, at: Millis) -> Sleep {
        match &self.0 {
            Kind::System => self.sleep(Duration::from_millis((at - now_ms()).max(0) as u64)),
            Kind::Manual(m) => {
                Sleep(SleepKind::Manual(ManualSleep { clock: m.clone(), deadline: at, id: None }))
            }
        }
    }

    /// `fut`, unless `d` of this clock's time passes first.
    pub async fn timeout<F: Future>(&self, d: Duration, fut: F) -> Result<F::Output, Elapsed> {
        match &self.0 {
            Kind::System => tokio::time::timeout(d, fut).await.map_err(|_| Elapsed),
            Kind::Manual(_) => self.timeout_at(self.now_ms().saturating_add(ms(d)), fut).await,
        }
    }

    /// `fut`, unless this clock reaches `at` first (an `at` passed already lets `fut` be
    /// polled once).
    pub async fn timeout_at<F: Future>(&self, at: Millis, fut: F) -> Result<F::Output, Elapsed> {
        if let Kind::System = self.0 {
            // tokio's own timeout polls `fut` first too, and costs no allocation: waits park
            // on it at every call.
            let left = Duration::from_millis((at - now_ms()).max(0) as u64);
            return tokio::time::timeout(left, fut).await.map_err(|_| Elapsed);
        }
        tokio::select! {
            biased;
            out = fut => Ok(out),
            () = self.sleep_until(at) => Err(Elapsed),
        }
    }

    /// Moves a manual clock `d` ahead: through each sleeper's deadline on the way, in order,
    /// waking the sleepers due then and letting them run (until each was polled, and a few
    /// yields more) before going on — so a task that sleeps again within `d` wakes again
    /// within it. Panics on the system clock.
    pub async fn advance(&self, d: Duration) {
        let Kind::Manual(m) = &self.0 else { panic!("only a manual clock can be advanced") };
        let target = lock(&m.state).now.saturating_add(ms(d));
        loop {
            let due = {
                let mut state = lock(&m.state);
                let Some(&(at, _)) = state.sleepers.keys().next().filter(|(at, _)| *at <= target) else {
                    state.now = state.now.max(target);
                    break;
                };
                state.now = state.now.max(at);
                state.wake_due()
            };
            due.into_iter().for_each(Waker::wake);
            m.settle().await;
        }
        m.settle().await;
    }
}

struct Manual {
    state: Mutex<State>,
}

struct State {
    now: Millis,
    next_id: u64,
    /// Sleepers not yet due, by (deadline, id).
    sleepers: BTreeMap<(Millis, u64), Waker>,
    /// Sleepers woken by `advance` that have not been polled since.
    woken: HashSet<u64>,
}

impl State {
    /// Takes the wakers of the sleepers due now, marking them woken.
    fn wake_due(&mut self) -> Vec<Waker> {
        let later = self.sleepers.split_off(&(self.now.saturating_add(1), 0));
        let due = std::mem::replace(&mut self.sleepers, later);
        due.into_iter()
            .map(|((_, id), waker)| {
                self.woken.insert(id);
                waker
            })
            .collect()
    }
}

impl Manual {
    /// Lets the woken sleepers run: until each was polled (for at most a second of real
    /// time), then a few yields more, so they reach their next await.
    async fn settle(&self) {
        let started = std::time::Instant::now();
        while !lock(&self.state).woken.is_empty() && started.elapsed() < Duration::from_secs(1) {
            tokio::task::yield_now().await;
        }
        for _ in 0..16 {
            tokio::task::yield_now().await;
        }
    }
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// [`Clock::sleep`]'s future.
pub struct Sleep(SleepKind);

enum SleepKind {
    System(Pin<Box<tokio::time::Sleep>>),
    Manual(ManualSleep),
}

struct ManualSleep {
    clock: Arc<Manual>,
    deadline: Millis,
    /// Its id once it registered as a sleeper.
    id: Option<u64>,
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match &mut self.0 {
            SleepKind::System(sleep) => sleep.as_mut().poll(cx),
            SleepKind::Manual(sleep) => sleep.poll(cx),
        }
    }
}

impl ManualSleep {
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = lock(&self.clock.state);
        if let Some(id) = self.id {
            state.woken.remove(&id);
            state.sleepers.remove(&(self.deadline, id));
        }
        if state.now >= self.deadline {
            self.id = None;
            return Poll::Ready(());
        }
        let id = *self.id.get_or_insert_with(|| {
            state.next_id += 1;
            state.next_id
        });
        state.sleepers.insert((self.deadline, id), cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for ManualSleep {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            let mut state = lock(&self.clock.state);
            state.woken.remove(&id);
            state.sleepers.remove(&(self.deadline, id));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_manual_clock_wakes_sleepers_in_deadline_order_only_when_advanced() {
        let clock = Clock::manual(1_000);
        let order = Arc::new(Mutex::new(Vec::new()));
        for (name, after) in [("late", 300u64), ("early", 100), ("middle", 200)] {
            let (clock, order) = (clock.clone(), order.clone());
            tokio::spawn(async move {
                clock.sleep(Duration::from_millis(after)).await;
                order.lock().expect("lock").push((name, clock.now_ms()));
            });
        }
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(order.lock().expect("lock").is_empty(), "real time moves no manual clock");
        clock.advance(Duration::from_millis(250)).await;
        assert_eq!(*order.lock().expect("lock"), [("early", 1_100), ("middle", 1_200)]);
        assert_eq!(clock.now_ms(), 1_250);
        clock.advance(Duration::from_millis(50)).await;
        assert_eq!(order.lock().expect("lock").len(), 3);
    }

    #[tokio::test]
    async fn a_sleeper_that_sleeps_again_within_an_advance_wakes_again() {
        let clock = Clock::manual(0);
        let ticks = Arc::new(Mutex::new(0));
        let (c, t) = (clock.clone(), ticks.clone());
        tokio::spawn(async move {
            loop {
                c.sleep(Duration::from_secs(1)).await;
                *t.lock().expect("lock") += 1;
            }
        });
        tokio::task::yield_now().await;
        clock.advance(Duration::from_millis(3_500)).await;
        assert_eq!(*ticks.lock().expect("lock"), 3);
        let timed_out = clock.timeout(Duration::from_secs(1), std::future::pending::<()>());
        let advance = clock.advance(Duration::from_secs(1));
        let (timed_out, ()) = tokio::join!(timed_out, advance);
        assert_eq!(timed_out, Err(Elapsed));
    }
}
