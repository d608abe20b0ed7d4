//! Admission control before a request body is read: a bounded number of embed requests in
//! flight (twice the queue: one queue's worth waiting, one being computed) and a cap on the
//! body bytes they declare. A request over either limit gets 429 at once, so an overloaded
//! server holds none of the bodies it cannot serve (they are read and dropped, `body.rs`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::ServeOptions;

/// The two budgets; a request holds a share of each until it is answered.
pub struct Admission {
    requests: Arc<Semaphore>,
    /// In KiB, so that a semaphore's `u32` permit counts cover any body size.
    kib: Arc<Semaphore>,
    max_kib: u32,
    max_requests: usize,
    /// Requests that asked to be admitted (admitted or not), for the idle-time trim.
    attempts: AtomicU64,
}

/// What an admitted request holds (released when dropped).
pub struct Admitted {
    _request: OwnedSemaphorePermit,
    _bytes: OwnedSemaphorePermit,
}

impl Admission {
    pub fn new(options: &ServeOptions) -> Self {
        let requests = 2 * options.max_queue.max(1);
        let max_kib = kib(options.max_inflight_bytes.max(options.max_body_bytes));
        Self {
            requests: Arc::new(Semaphore::new(requests)),
            kib: Arc::new(Semaphore::new(max_kib as usize)),
            max_kib,
            max_requests: requests,
            attempts: AtomicU64::new(0),
        }
    }

    /// Requests that asked to be admitted so far.
    pub fn attempts(&self) -> u64 {
        self.attempts.load(Ordering::Relaxed)
    }

    /// Admitted requests not yet answered.
    pub fn in_flight(&self) -> usize {
        self.max_requests - self.requests.available_permits()
    }

    /// Whether no admitted request is in flight.
    pub fn idle(&self) -> bool {
        self.in_flight() == 0
    }

    /// Admits a request declaring `body_bytes` (or, when it declares none, the largest body
    /// allowed), or `None` when the server is full.
    pub fn try_admit(&self, body_bytes: usize) -> Option<Admitted> {
        self.attempts.fetch_add(1, Ordering::Relaxed);
        let request = self.requests.clone().try_acquire_owned().ok()?;
        let bytes = self.kib.clone().try_acquire_many_owned(kib(body_bytes).min(self.max_kib)).ok()?;
        Some(Admitted { _request: request, _bytes: bytes })
    }
}

fn kib(bytes: usize) -> u32 {
    u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(max_queue: usize, max_body: usize, inflight: usize) -> ServeOptions {
        ServeOptions {
            model: Default::default(),
            addr: "127.0.0.1:0".parse().unwrap(),
            runtime: Default::default(),
            batch: super::super::batcher::BatchConfig {
                token_budget: 1,
                max_rows: 1,
                max_wait: std::time::Duration::ZERO,
            },
            max_queue,
            max_body_bytes: max_body,
            max_inflight_bytes: inflight,
            max_cells_per_request: 1,
            bearer_token: None,
            body_timeout: std::time::Duration::from_secs(1),
            allow_normalized: false,
        }
    }

    #[test]
    fn requests_and_declared_bytes_are_both_bounded_and_released_when_answered() {
        let a = Admission::new(&options(2, 1 << 20, 7 << 19));
        // Four requests of 1 MiB would fit the request budget (2 × 2) but not the 3.5 MiB.
        let held: Vec<Admitted> = (0..3).map(|_| a.try_admit(1 << 20).unwrap()).collect();
        assert!(a.try_admit(1 << 20).is_none(), "byte cap");
        let small = a.try_admit(10).expect("a small body still fits both budgets");
        assert!(a.try_admit(10).is_none(), "request budget: 4 in flight");
        drop((held, small));
        let small: Vec<Admitted> = (0..4).map(|_| a.try_admit(10).unwrap()).collect();
        assert!(a.try_admit(10).is_none(), "request budget");
        assert!(!a.idle());
        assert_eq!(a.in_flight(), 4);
        drop(small);
        assert!(a.idle());
        assert_eq!(a.attempts(), 11);
        assert!(a.try_admit(1 << 20).is_some());
    }

    #[test]
    fn the_byte_cap_always_admits_one_largest_body() {
        let a = Admission::new(&options(1, 16 << 20, 1 << 20));
        assert!(a.try_admit(16 << 20).is_some());
        // An undeclared or oversized length counts as the cap (the body limit refuses it later).
        assert!(a.try_admit(usize::MAX).is_some());
    }
}
