//! The retry delay every zkgate client uses between two attempts (`clients/CONFORMANCE.md`):
//! full jitter over an exponential ceiling — base 50 ms, doubling, capped at 2 s — reset once a
//! stream has been `queued`. Full jitter spreads a fleet of clients that all lost the same
//! gateway at the same moment over the whole interval instead of retrying in lockstep.

use std::time::Duration;

/// The first ceiling.
pub const BACKOFF_BASE: Duration = Duration::from_millis(50);
/// The largest ceiling.
pub const BACKOFF_CAP: Duration = Duration::from_secs(2);

/// Exponential backoff with full jitter.
#[derive(Debug, Clone)]
pub struct Backoff {
    attempt: u32,
    base: Duration,
    cap: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new(BACKOFF_BASE, BACKOFF_CAP)
    }
}

impl Backoff {
    pub fn new(base: Duration, cap: Duration) -> Self {
        Backoff {
            attempt: 0,
            base,
            cap,
        }
    }

    /// The ceiling of the next delay: `base × 2^attempt`, at most `cap`.
    pub fn ceiling(&self) -> Duration {
        let factor = 1u32 << self.attempt.min(20);
        self.base.saturating_mul(factor).min(self.cap)
    }

    /// The next delay: uniformly random in `[0, ceiling]`; the ceiling then doubles.
    pub fn next_delay(&mut self) -> Duration {
        let ceiling = self.ceiling();
        self.attempt = self.attempt.saturating_add(1);
        let nanos = u64::try_from(ceiling.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(rand::random_range(0..=nanos))
    }

    /// Back to the first ceiling (after a stream was `queued`: the gateway works).
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceilings_double_from_50ms_to_the_2s_cap() {
        let mut b = Backoff::default();
        let mut ceilings = Vec::new();
        for _ in 0..10 {
            ceilings.push(b.ceiling().as_millis());
            b.next_delay();
        }
        assert_eq!(
            ceilings,
            [50, 100, 200, 400, 800, 1600, 2000, 2000, 2000, 2000]
        );
        // Many attempts later, still capped (no overflow).
        for _ in 0..100 {
            b.next_delay();
        }
        assert_eq!(b.ceiling(), BACKOFF_CAP);
        b.reset();
        assert_eq!(b.ceiling(), BACKOFF_BASE);
    }

    #[test]
    fn delays_are_jittered_within_the_ceiling() {
        let mut b = Backoff::default();
        for _ in 0..8 {
            b.next_delay();
        }
        let samples: Vec<Duration> = (0..200)
            .map(|_| {
                let mut c = b.clone();
                c.next_delay()
            })
            .collect();
        assert!(samples.iter().all(|d| *d <= BACKOFF_CAP));
        // Full jitter: the samples spread over the interval, not one fixed value. (200 draws all
        // in one half has probability 2^-199.)
        assert!(samples.iter().any(|d| *d < BACKOFF_CAP / 2));
        assert!(samples.iter().any(|d| *d > BACKOFF_CAP / 2));
    }
}
