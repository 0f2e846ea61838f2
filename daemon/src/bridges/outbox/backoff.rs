//! The pause before an outbox entry's next attempt.

use std::time::Duration;

use rand::Rng;

/// The longest pause between two attempts.
pub(super) const BACKOFF_CAP: Duration = Duration::from_secs(30);
const BACKOFF_FIRST: Duration = Duration::from_millis(250);

/// The pause before the next attempt at a peer that has been `silent` that long (since its
/// last answer, or since the message if that is later): as long again, from 250 ms up to
/// 30 s — so the pauses double while the peer stays silent and start over as soon as it
/// answers — with jitter (−20 %…+20 %, and only downwards at the cap) so many sources do not
/// retry in lockstep.
pub fn backoff(silent: Duration) -> Duration {
    let base = silent.clamp(BACKOFF_FIRST, BACKOFF_CAP);
    if base >= BACKOFF_CAP {
        return BACKOFF_CAP.mul_f64(rand::rng().random_range(0.8..1.0));
    }
    base.mul_f64(rand::rng().random_range(0.8..1.2)).min(BACKOFF_CAP)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_the_silence_so_far_with_jitter_from_250_ms_to_30_s() {
        for ms in [0, 100, 250, 1_000, 7_000, 29_000, 30_000, 600_000] {
            let silent = Duration::from_millis(ms);
            let d = backoff(silent);
            let base = silent.clamp(BACKOFF_FIRST, BACKOFF_CAP);
            assert!(d <= BACKOFF_CAP, "{ms}: {d:?}");
            assert!(d >= base.mul_f64(0.8) && d <= base.mul_f64(1.2), "{ms}: {d:?} around {base:?}");
        }
        // Each pause as long as the silence before it: attempts at 0.25, 0.5, 1, 2, 4 s …
        let (mut at, mut pauses) = (Duration::ZERO, Vec::new());
        while at < Duration::from_secs(60) {
            let pause = backoff(at);
            pauses.push(pause);
            at += pause;
        }
        assert!(pauses.len() < 12, "doubling reaches the cap quickly: {pauses:?}");
        assert!(pauses.last().is_some_and(|p| *p >= BACKOFF_CAP.mul_f64(0.8)), "{pauses:?}");
    }
}
