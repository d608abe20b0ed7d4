//! Request bodies under a deadline and a minimum rate, and refused bodies drained instead of
//! reset.
//!
//! Every request body is wrapped in a [`GuardedBody`] before routing:
//! - the whole body must arrive within `--body-timeout-s` of the request head, and from
//!   `--body-grace-s` on at `--min-body-bytes-per-s` on average (`pace.rs`), or reading it fails
//!   with [`BodyTimeout`] (the handler answers 408 and hyper closes the connection), so a stalled
//!   or dripping upload holds neither a connection nor an admission slot, nor delays shutdown,
//!   for longer than that;
//! - a body dropped unread (a request refused with 429, 413, 401, 503, 404 … before or while
//!   its body was read) is read and dropped in a task of its own, frame by frame, nothing kept,
//!   until its end, the same deadline and rate, a byte bound or shutdown. A client that sends
//!   its whole body before reading (`http.client`, `requests`) then reads its answer: closing a
//!   socket with unread bytes makes the kernel send a reset, which such a client sees as a
//!   broken pipe. There is no shared budget: each connection bounds itself (time, rate and
//!   bytes), so load cannot exhaust it;
//! - a client that sent `Expect: 100-continue` and whose body was never asked for is not told
//!   to send it: hyper sends `100 Continue` only when a body is first read, so such a refusal
//!   goes out at once, before the body, and the connection is then closed.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt;
use prometheus::{IntCounter, IntGauge};
use tokio::sync::watch;

use super::pace::Pace;
pub use super::pace::{BodyTimeout, PaceRules};

/// What every request body is held to, and the metrics that count it.
#[derive(Clone)]
pub struct BodyPolicy {
    pub pace: PaceRules,
    /// The most bytes of a refused body read and dropped.
    pub drain_max_bytes: usize,
    /// Set at shutdown: drains stop.
    pub shutdown: watch::Receiver<bool>,
    /// Bodies being received, by a handler or a drain (`corrflow_request_bodies_open`).
    pub open: IntGauge,
    /// Bodies cut off under the minimum rate (`corrflow_request_bodies_too_slow_total`).
    pub too_slow: IntCounter,
}

/// Counts one body in `open` while it lives.
struct OpenBody(IntGauge);

impl OpenBody {
    fn new(gauge: &IntGauge) -> Self {
        gauge.inc();
        Self(gauge.clone())
    }
}

impl Drop for OpenBody {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// A request body with a deadline and a minimum rate that drains itself when dropped
/// unfinished (module docs).
pub struct GuardedBody {
    inner: Body,
    pace: Pace,
    /// Bytes handed out so far.
    seen: usize,
    /// Whether anyone asked for a frame (then hyper has sent `100 Continue` if it was expected).
    polled: bool,
    /// The body ended, failed or timed out: nothing left to drain.
    finished: bool,
    expect_continue: bool,
    policy: BodyPolicy,
    open: Option<OpenBody>,
}

impl GuardedBody {
    pub fn new(inner: Body, expect_continue: bool, policy: BodyPolicy) -> Self {
        let open = (!inner.is_end_stream()).then(|| OpenBody::new(&policy.open));
        let pace = Pace::new(policy.pace);
        Self { inner, pace, seen: 0, polled: false, finished: false, expect_continue, policy, open }
    }

    fn finish(&mut self) {
        self.finished = true;
        self.open = None;
    }
}

impl HttpBody for GuardedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        if this.finished {
            return Poll::Ready(None);
        }
        this.polled = true;
        // The clock first: a body trickling in byte by byte never returns Pending for long.
        if let Poll::Ready(why) = this.pace.poll_expired(cx, this.seen) {
            if matches!(why, BodyTimeout::TooSlow { .. }) {
                this.policy.too_slow.inc();
            }
            this.finish();
            return Poll::Ready(Some(Err(axum::Error::new(why))));
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                this.seen += frame.data_ref().map_or(0, Bytes::len);
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                this.finish();
                Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(None) => {
                this.finish();
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.finished || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for GuardedBody {
    fn drop(&mut self) {
        if self.finished || self.inner.is_end_stream() || (self.expect_continue && !self.polled) {
            return;
        }
        // Dropped outside the runtime (not the case for request bodies): hyper closes instead.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let body = std::mem::replace(&mut self.inner, Body::empty());
        let drain = Drain {
            pace: Pace::since(self.pace.start(), self.pace.rules()),
            seen: self.seen,
            policy: self.policy.clone(),
            _open: self.open.take(),
        };
        runtime.spawn(drain.run(body));
    }
}

/// A refused body being read and dropped (it keeps its request's clock and its place in
/// `open`).
struct Drain {
    pace: Pace,
    seen: usize,
    policy: BodyPolicy,
    _open: Option<OpenBody>,
}

impl Drain {
    /// Reads `body` and drops every frame until it ends, its clock runs out, the byte bound or
    /// shutdown, whichever comes first; then the body is dropped and hyper closes the
    /// connection if the body had not ended.
    async fn run(self, mut body: Body) {
        let Drain { mut pace, mut seen, policy, _open } = self;
        let mut shutdown = policy.shutdown.clone();
        let read = async {
            loop {
                let so_far = seen;
                tokio::select! {
                    frame = body.frame() => match frame {
                        Some(Ok(frame)) => {
                            seen += frame.data_ref().map_or(0, Bytes::len);
                            if seen > policy.drain_max_bytes {
                                break;
                            }
                        }
                        _ => break,
                    },
                    why = std::future::poll_fn(|cx| pace.poll_expired(cx, so_far)) => {
                        if matches!(why, BodyTimeout::TooSlow { .. }) {
                            policy.too_slow.inc();
                        }
                        break;
                    }
                }
            }
        };
        tokio::select! {
            _ = read => {}
            _ = shutdown.wait_for(|&stopping| stopping) => {}
        }
    }
}

/// How reading a whole body failed.
pub enum ReadError {
    /// Over `limit` bytes (the rest is drained when the body is dropped).
    TooLarge,
    TimedOut(String),
    /// Malformed (e.g. a bad chunked encoding) or cut off.
    Broken(String),
}

/// A whole request body. One that declares at least [`MAPPED_BYTES`] is held in an anonymous
/// mapping of its own, returned to the system when it is dropped. From the heap, glibc kept the
/// freed 16 MiB bodies of an overload in its arenas (it raises its mmap threshold after the
/// first large free) and the server's RSS peaked 190 MB above the bodies it held
/// (BENCHMARKS.md, "Server overload"). Only these buffers are mapped: a fixed mmap threshold
/// for every allocation served 25% fewer requests (`memory.rs`).
pub enum BodyBytes {
    Heap(Vec<u8>),
    Mapped { map: memmap2::MmapMut, len: usize },
}

/// Declared bodies from this size on get a mapping of their own.
pub const MAPPED_BYTES: usize = 1 << 20;

impl std::ops::Deref for BodyBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Self::Heap(v) => v,
            Self::Mapped { map, len } => &map[..*len],
        }
    }
}

impl BodyBytes {
    fn with_capacity(bytes: usize) -> Self {
        if bytes >= MAPPED_BYTES {
            if let Ok(map) = memmap2::MmapMut::map_anon(bytes) {
                return Self::Mapped { map, len: 0 };
            }
        }
        Self::Heap(Vec::with_capacity(bytes))
    }

    fn extend(&mut self, data: &[u8]) {
        match self {
            Self::Heap(v) => v.extend_from_slice(data),
            Self::Mapped { map, len } if *len + data.len() <= map.len() => {
                map[*len..*len + data.len()].copy_from_slice(data);
                *len += data.len();
            }
            // More than the declared length (hyper refuses that; a safe fallback all the same).
            Self::Mapped { .. } => {
                let mut v = self.to_vec();
                v.extend_from_slice(data);
                *self = Self::Heap(v);
            }
        }
    }
}

/// The whole body, read into one buffer sized from the declared length (no second copy), or
/// why not.
pub async fn read_to_vec(mut body: Body, declared: Option<usize>, limit: usize) -> Result<BodyBytes, ReadError> {
    let mut buf = BodyBytes::with_capacity(declared.unwrap_or(0).min(limit));
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| match find_cause::<BodyTimeout>(&e) {
            Some(t) => ReadError::TimedOut(t.to_string()),
            None => ReadError::Broken(e.to_string()),
        })?;
        if let Ok(data) = frame.into_data() {
            if buf.len() + data.len() > limit {
                return Err(ReadError::TooLarge);
            }
            buf.extend(&data);
        }
    }
    Ok(buf)
}

/// The first error of type `T` in `e`'s chain of causes.
fn find_cause<'a, T: std::error::Error + 'static>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a T> {
    let mut cause = Some(e);
    while let Some(c) = cause {
        if let Some(t) = c.downcast_ref::<T>() {
            return Some(t);
        }
        cause = c.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn policy(timeout: Duration) -> (watch::Sender<bool>, BodyPolicy) {
        let (tx, rx) = watch::channel(false);
        let policy = BodyPolicy {
            pace: PaceRules { timeout, grace: timeout, min_rate: 0 },
            drain_max_bytes: 1 << 20,
            shutdown: rx,
            open: IntGauge::new("open", "open").unwrap(),
            too_slow: IntCounter::new("slow", "slow").unwrap(),
        };
        (tx, policy)
    }

    #[tokio::test]
    async fn a_body_that_stalls_fails_with_the_timeout_after_its_deadline() {
        let (_tx, policy) = policy(Duration::from_millis(200));
        // A body that sends one frame and then nothing.
        let (mut sender, inner) = channel_body();
        sender.send(Bytes::from_static(b"{\"input_ids\"")).await.unwrap();
        let body = Body::new(GuardedBody::new(inner, false, policy));
        let start = std::time::Instant::now();
        match read_to_vec(body, Some(100), 1000).await {
            Err(ReadError::TimedOut(m)) => assert!(m.contains("--body-timeout-s"), "{m}"),
            _ => panic!("a stalled body must time out"),
        }
        assert!(start.elapsed() >= Duration::from_millis(200));
        drop(sender);
    }

    #[tokio::test]
    async fn a_whole_body_is_read_and_an_oversized_one_refused() {
        let (_tx, policy) = policy(Duration::from_secs(5));
        let body = Body::new(GuardedBody::new(Body::from("0123456789"), false, policy.clone()));
        assert_eq!(&*read_to_vec(body, Some(10), 10).await.ok().unwrap(), b"0123456789");
        let body = Body::new(GuardedBody::new(Body::from("0123456789"), false, policy));
        assert!(matches!(read_to_vec(body, None, 9).await, Err(ReadError::TooLarge)));
    }

    #[tokio::test]
    async fn a_large_declared_body_is_read_into_its_own_mapping() {
        let (_tx, policy) = policy(Duration::from_secs(5));
        let text: Vec<u8> = (0..MAPPED_BYTES + 3).map(|i| b'a' + (i % 26) as u8).collect();
        let body = Body::new(GuardedBody::new(Body::from(text.clone()), false, policy));
        let read = read_to_vec(body, Some(text.len()), 2 * text.len()).await.ok().unwrap();
        assert!(matches!(read, BodyBytes::Mapped { .. }));
        assert_eq!(&*read, &text[..]);
        // A body longer than its mapping (hyper refuses one over its declared length) still reads.
        let mut short = BodyBytes::with_capacity(MAPPED_BYTES);
        short.extend(&text);
        assert!(matches!(short, BodyBytes::Heap(_)));
        assert_eq!(&*short, &text[..]);
    }

    #[tokio::test]
    async fn a_dropped_body_is_drained_unless_its_client_waits_for_100_continue() {
        for (expect_continue, drained) in [(false, true), (true, false)] {
            let (_tx, policy) = policy(Duration::from_secs(5));
            let (mut sender, inner) = channel_body();
            drop(GuardedBody::new(inner, expect_continue, policy));
            // A drained body keeps taking frames; an abandoned one refuses the next.
            let sent = tokio::time::timeout(Duration::from_secs(5), async {
                for _ in 0..4 {
                    if sender.send(Bytes::from(vec![b' '; 1024])).await.is_err() {
                        return false;
                    }
                }
                true
            })
            .await
            .unwrap();
            assert_eq!(sent, drained, "expect_continue {expect_continue}");
        }
    }

    #[tokio::test]
    async fn shutdown_stops_a_drain() {
        let (tx, policy) = policy(Duration::from_secs(60));
        let (mut sender, inner) = channel_body();
        drop(GuardedBody::new(inner, false, policy));
        sender.send(Bytes::from_static(b"x")).await.unwrap();
        tx.send(true).unwrap();
        let closed = tokio::time::timeout(Duration::from_secs(5), async {
            while sender.send(Bytes::from_static(b"x")).await.is_ok() {
                tokio::task::yield_now().await;
            }
        })
        .await;
        assert!(closed.is_ok(), "the drain did not stop at shutdown");
    }

    /// Issue 51: a body dripping under the minimum rate is cut off once the grace period is over,
    /// long before the body timeout, whether a handler reads it or it is being drained.
    #[tokio::test]
    async fn a_body_under_the_minimum_rate_is_cut_off_after_the_grace_period() {
        let (_tx, mut policy) = policy(Duration::from_secs(600));
        policy.pace =
            PaceRules { timeout: Duration::from_secs(600), grace: Duration::from_millis(100), min_rate: 1000 };
        let (mut sender, inner) = channel_body();
        sender.send(Bytes::from_static(b"{\"input_ids\"")).await.unwrap();
        let body = Body::new(GuardedBody::new(inner, false, policy.clone()));
        assert_eq!(policy.open.get(), 1);
        match tokio::time::timeout(Duration::from_secs(60), read_to_vec(body, Some(1000), 1000)).await {
            Ok(Err(ReadError::TimedOut(m))) => assert!(m.contains("--min-body-bytes-per-s"), "{m}"),
            Ok(_) => panic!("a dripping body must be cut off"),
            Err(_) => panic!("the minimum rate was not enforced (still reading after 60 s)"),
        }
        assert_eq!((policy.too_slow.get(), policy.open.get()), (1, 0));

        // Dropped unread: the drain stops at the same rule, and the sender sees it closed.
        let (mut sender, inner) = channel_body();
        drop(GuardedBody::new(inner, false, policy.clone()));
        let closed = tokio::time::timeout(Duration::from_secs(60), async {
            while sender.send(Bytes::from_static(b"x")).await.is_ok() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
        assert!(closed.is_ok(), "the drain of a dripping body did not stop");
        assert_eq!((policy.too_slow.get(), policy.open.get()), (2, 0));
    }

    /// A body fed from a channel of capacity one (a sender waits until the frame is taken;
    /// sending fails once the body is dropped).
    fn channel_body() -> (ChannelSender, Body) {
        let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(1);
        (ChannelSender(tx), Body::new(ChannelBody(rx)))
    }

    struct ChannelSender(tokio::sync::mpsc::Sender<Bytes>);

    impl ChannelSender {
        async fn send(&mut self, b: Bytes) -> Result<(), ()> {
            self.0.send(b).await.map_err(|_| ())
        }
    }

    struct ChannelBody(tokio::sync::mpsc::Receiver<Bytes>);

    impl HttpBody for ChannelBody {
        type Data = Bytes;
        type Error = std::convert::Infallible;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
        }
    }
}
