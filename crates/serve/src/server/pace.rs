//! The clock a request body runs against: the whole body within `--body-timeout-s` of the
//! request head, and from `--body-grace-s` on an average of at least `--min-body-bytes-per-s`
//! since the head. A client dripping its body (a slow-upload attack: a few bytes now and then,
//! each under any idle timeout) holds its connection, and an admission slot when it declared a
//! large body; the rate cuts it off at the grace period instead of the body timeout.
//!
//! The rate is checked lazily: the timer is set to the moment the bytes seen so far would fall
//! under the rate, and moved on when it fires in time. A body that keeps up wakes the timer a
//! logarithmic number of times, not once per frame.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

/// The deadline and the minimum rate (0: no minimum).
#[derive(Clone, Copy, Debug)]
pub struct PaceRules {
    pub timeout: Duration,
    pub grace: Duration,
    /// Bytes per second, on average since the request head; 0 turns the check off.
    pub min_rate: u64,
}

/// Why a body was cut off.
#[derive(Debug, thiserror::Error)]
pub enum BodyTimeout {
    #[error("the request body was not received within {} s (the server's --body-timeout-s)", .0.as_secs())]
    Total(Duration),
    #[error(
        "the request body arrived too slowly: {seen} bytes in {:.1} s, under the server's minimum of {rate} \
         bytes/s on average (--min-body-bytes-per-s, checked from --body-grace-s on)",
        .elapsed.as_secs_f64()
    )]
    TooSlow { seen: usize, elapsed: Duration, rate: u64 },
}

/// One body's clock, started at the request head.
pub struct Pace {
    start: Instant,
    rules: PaceRules,
    timer: Pin<Box<Sleep>>,
}

impl Pace {
    pub fn new(rules: PaceRules) -> Self {
        Self::since(Instant::now(), rules)
    }

    /// A clock started at `start` (a drained body keeps its request's clock).
    pub fn since(start: Instant, rules: PaceRules) -> Self {
        let mut pace = Self { start, rules, timer: Box::pin(tokio::time::sleep_until(start)) };
        let first = pace.wake_at(0);
        pace.timer.as_mut().reset(first);
        pace
    }

    pub fn start(&self) -> Instant {
        self.start
    }

    pub fn rules(&self) -> PaceRules {
        self.rules
    }

    /// When `seen` bytes stop being enough: the body timeout, or the moment the average since
    /// the head falls under the rate, but not before the grace period.
    fn wake_at(&self, seen: usize) -> Instant {
        let timeout = self.rules.timeout;
        if self.rules.min_rate == 0 {
            return self.start + timeout;
        }
        let covered = (seen as f64 / self.rules.min_rate as f64).min(timeout.as_secs_f64());
        self.start + timeout.min(self.rules.grace.max(Duration::from_secs_f64(covered)))
    }

    /// Ready with the reason once the body, having delivered `seen` bytes, is past its
    /// deadline or under the minimum rate.
    pub fn poll_expired(&mut self, cx: &mut Context<'_>, seen: usize) -> Poll<BodyTimeout> {
        loop {
            if self.timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let now = Instant::now();
            let elapsed = now.saturating_duration_since(self.start);
            if elapsed >= self.rules.timeout {
                return Poll::Ready(BodyTimeout::Total(self.rules.timeout));
            }
            let next = self.wake_at(seen);
            if next <= now {
                return Poll::Ready(BodyTimeout::TooSlow { seen, elapsed, rate: self.rules.min_rate });
            }
            self.timer.as_mut().reset(next);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(timeout_ms: u64, grace_ms: u64, min_rate: u64) -> PaceRules {
        PaceRules { timeout: Duration::from_millis(timeout_ms), grace: Duration::from_millis(grace_ms), min_rate }
    }

    async fn expired(pace: &mut Pace, seen: usize) -> BodyTimeout {
        std::future::poll_fn(|cx| pace.poll_expired(cx, seen)).await
    }

    #[test]
    fn the_check_starts_after_the_grace_period_and_ends_at_the_timeout() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        rt.block_on(async {
            let pace = Pace::new(rules(10_000, 300, 1000));
            // Nothing seen: due at the grace period, not at once.
            assert_eq!(pace.wake_at(0), pace.start + Duration::from_millis(300));
            // 2,000 bytes cover 2 s at 1,000 bytes/s.
            assert_eq!(pace.wake_at(2000), pace.start + Duration::from_secs(2));
            // Never past the body timeout, whatever was seen.
            assert_eq!(pace.wake_at(usize::MAX), pace.start + Duration::from_secs(10));
            let off = Pace::new(rules(10_000, 300, 0));
            assert_eq!(off.wake_at(0), off.start + Duration::from_secs(10));
        });
    }

    #[test]
    fn a_body_under_the_rate_is_cut_off_and_a_stalled_one_without_a_rate_times_out() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        rt.block_on(async {
            // 10 bytes against 1,000 bytes/s: too slow once the 100 ms grace is over.
            let mut pace = Pace::new(rules(60_000, 100, 1000));
            match expired(&mut pace, 10).await {
                BodyTimeout::TooSlow { seen: 10, rate: 1000, elapsed } => {
                    assert!(elapsed >= Duration::from_millis(100))
                }
                other => panic!("{other:?}"),
            }
            let mut pace = Pace::new(rules(150, 100, 0));
            assert!(matches!(expired(&mut pace, 10).await, BodyTimeout::Total(_)));
            let message = BodyTimeout::TooSlow { seen: 10, elapsed: Duration::from_secs(5), rate: 1024 }.to_string();
            assert!(message.contains("--min-body-bytes-per-s") && message.contains("10 bytes in 5.0 s"), "{message}");
        });
    }
}
