//! Admission control: a bounded number of embed requests in flight (twice the queue: one
//! queue's worth waiting, one being computed) and a cap on the body bytes they declare. A
//! request over a limit gets 429 at once, so an overloaded server holds none of the bodies it
//! cannot serve (they are read and dropped, `body.rs`).
//!
//! Two ways in, so that slow uploads cannot take every slot (issue 51):
//! - a *large* body (declared over `--small-body-bytes`, or of undeclared length) is admitted
//!   before it is read, holding a request slot, its declared bytes and an upload slot; at most
//!   `--max-queue` uploads, half the request slots, are in flight at once, and the upload slot
//!   is given back once the body has arrived;
//! - a *small* body is read first (it costs no more than the connection's read buffer, under
//!   the same deadline and minimum rate) and only then takes a request slot. Clients dripping
//!   small bodies hold no slot at all, and a small request always finds the half of the slots
//!   that uploads cannot take, unless requests whose bodies have arrived fill it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::ServeOptions;

/// The budgets; a request holds its share until it is answered (an upload slot until its body
/// has arrived).
pub struct Admission {
    requests: Arc<Semaphore>,
    /// Large bodies admitted before they arrived and still arriving.
    uploads: Arc<Semaphore>,
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
    _bytes: Option<OwnedSemaphorePermit>,
    upload: Option<OwnedSemaphorePermit>,
}

impl Admitted {
    /// The body has arrived: its upload slot goes back (the request slot and bytes stay).
    pub fn arrived(&mut self) {
        self.upload = None;
    }
}

impl Admission {
    /// How many requests may be in flight at once.
    pub fn max_requests(options: &ServeOptions) -> usize {
        2 * options.max_queue.max(1)
    }

    pub fn new(options: &ServeOptions) -> Self {
        let requests = Self::max_requests(options);
        let max_kib = kib(options.max_inflight_bytes.max(options.max_body_bytes));
        Self {
            requests: Arc::new(Semaphore::new(requests)),
            uploads: Arc::new(Semaphore::new(options.max_queue.max(1))),
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

    /// Admits a large body before it is read, declaring `body_bytes` (or, when it declares
    /// none, the largest body allowed), or `None` when the server is full.
    pub fn try_admit_upload(&self, body_bytes: usize) -> Option<Admitted> {
        self.attempts.fetch_add(1, Ordering::Relaxed);
        let upload = self.uploads.clone().try_acquire_owned().ok()?;
        let request = self.requests.clone().try_acquire_owned().ok()?;
        let bytes = self.kib.clone().try_acquire_many_owned(kib(body_bytes).min(self.max_kib)).ok()?;
        Some(Admitted { _request: request, _bytes: Some(bytes), upload: Some(upload) })
    }

    /// Admits a request whose (small) body has been read, or `None` when the server is full.
    pub fn try_admit_arrived(&self) -> Option<Admitted> {
        self.attempts.fetch_add(1, Ordering::Relaxed);
        let request = self.requests.clone().try_acquire_owned().ok()?;
        Some(Admitted { _request: request, _bytes: None, upload: None })
    }
}

fn kib(bytes: usize) -> u32 {
    u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(max_queue: usize, max_body: usize, inflight: usize) -> ServeOptions {
        let mut o = ServeOptions::new(Default::default(), "127.0.0.1:0".parse().unwrap());
        o.max_queue = max_queue;
        o.max_body_bytes = max_body;
        o.max_inflight_bytes = inflight;
        o
    }

    #[test]
    fn requests_and_declared_bytes_are_both_bounded_and_released_when_answered() {
        let a = Admission::new(&options(4, 1 << 20, 7 << 19));
        // Four uploads of 1 MiB would fit the upload budget (4) but not the 3.5 MiB.
        let held: Vec<Admitted> = (0..3).map(|_| a.try_admit_upload(1 << 20).unwrap()).collect();
        assert!(a.try_admit_upload(1 << 20).is_none(), "byte cap");
        let small = a.try_admit_upload(10).expect("a small declared upload still fits both budgets");
        assert!(a.try_admit_upload(10).is_none(), "upload budget: 4 in flight");
        drop((held, small));
        let arrived: Vec<Admitted> = (0..8).map(|_| a.try_admit_arrived().unwrap()).collect();
        assert!(a.try_admit_arrived().is_none(), "request budget: 2 × 4");
        assert!(a.try_admit_upload(10).is_none(), "request budget");
        assert!(!a.idle());
        assert_eq!(a.in_flight(), 8);
        drop(arrived);
        assert!(a.idle());
        assert_eq!(a.attempts(), 16);
        assert!(a.try_admit_upload(1 << 20).is_some());
    }

    /// Issue 51: uploads whose bodies have not arrived take at most half the request slots; the
    /// other half stays for requests whose (small) bodies are in, and an upload whose body has
    /// arrived frees its upload slot.
    #[test]
    fn uploads_in_flight_leave_half_the_slots_to_requests_whose_bodies_have_arrived() {
        let a = Admission::new(&options(3, 1 << 20, 64 << 20));
        let mut uploads: Vec<Admitted> = (0..3).map(|_| a.try_admit_upload(1 << 20).unwrap()).collect();
        assert!(a.try_admit_upload(1 << 20).is_none(), "three uploads at most");
        let arrived: Vec<Admitted> = (0..3).map(|_| a.try_admit_arrived().expect("the reserved half")).collect();
        assert!(a.try_admit_arrived().is_none());
        drop(arrived);
        uploads[0].arrived();
        let next = a.try_admit_upload(1 << 20).expect("an arrived body gives its upload slot back");
        assert_eq!(a.in_flight(), 4);
        drop((uploads, next));
        assert!(a.idle());
    }

    #[test]
    fn the_byte_cap_always_admits_one_largest_body() {
        let a = Admission::new(&options(1, 16 << 20, 1 << 20));
        assert!(a.try_admit_upload(16 << 20).is_some());
        // An undeclared or oversized length counts as the cap (the body limit refuses it later).
        assert!(a.try_admit_upload(usize::MAX).is_some());
    }
}
