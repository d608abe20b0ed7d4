//! Request bodies under a deadline, and refused bodies drained instead of reset.
//!
//! Every request body is wrapped in a [`GuardedBody`] before routing:
//! - the whole body must arrive within `--body-timeout-s` of the request head, or reading it
//!   fails with [`BodyTimeout`] (the handler answers 408 and hyper closes the connection), so a
//!   stalled upload holds neither a connection nor an admission slot, nor delays shutdown, for
//!   longer than that;
//! - a body dropped unread (a request refused with 429, 413, 401, 503, 404 … before or while
//!   its body was read) is read and dropped in a task of its own, frame by frame, nothing kept,
//!   until its end, the same deadline, a byte bound or shutdown. A client that sends its whole
//!   body before reading (`http.client`, `requests`) then reads its answer: closing a socket
//!   with unread bytes makes the kernel send a reset, which such a client sees as a broken pipe.
//!   There is no shared budget: each connection bounds itself (time and bytes), so load cannot
//!   exhaust it;
//! - a client that sent `Expect: 100-continue` and whose body was never asked for is not told
//!   to send it: hyper sends `100 Continue` only when a body is first read, so such a refusal
//!   goes out at once, before the body, and the connection is then closed.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt;
use tokio::sync::watch;
use tokio::time::{Instant, Sleep};

/// The body did not arrive within the body timeout.
#[derive(Debug, thiserror::Error)]
#[error("the request body was not received within {} s (the server's --body-timeout-s)", .0.as_secs())]
pub struct BodyTimeout(pub Duration);

/// What a dropped body may still cost: bytes read in all, and shutdown (which stops a drain).
#[derive(Clone)]
pub struct DrainLimits {
    pub max_bytes: usize,
    pub shutdown: watch::Receiver<bool>,
}

/// A request body with a deadline that drains itself when dropped unfinished (module docs).
pub struct GuardedBody {
    inner: Body,
    deadline: Pin<Box<Sleep>>,
    timeout: Duration,
    /// Bytes handed out so far.
    seen: usize,
    /// Whether anyone asked for a frame (then hyper has sent `100 Continue` if it was expected).
    polled: bool,
    /// The body ended, failed or timed out: nothing left to drain.
    finished: bool,
    expect_continue: bool,
    drain: DrainLimits,
}

impl GuardedBody {
    pub fn new(inner: Body, timeout: Duration, expect_continue: bool, drain: DrainLimits) -> Self {
        let deadline = Box::pin(tokio::time::sleep(timeout));
        Self { inner, deadline, timeout, seen: 0, polled: false, finished: false, expect_continue, drain }
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
        // The deadline first: a body trickling in byte by byte never returns Pending for long.
        if this.deadline.as_mut().poll(cx).is_ready() {
            this.finished = true;
            return Poll::Ready(Some(Err(axum::Error::new(BodyTimeout(this.timeout)))));
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                this.seen += frame.data_ref().map_or(0, Bytes::len);
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                this.finished = true;
                Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(None) => {
                this.finished = true;
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
        let left = self.drain.max_bytes.saturating_sub(self.seen);
        runtime.spawn(drain(body, self.deadline.deadline(), left, self.drain.shutdown.clone()));
    }
}

/// Reads `body` and drops every frame until it ends, `deadline`, `max_bytes` or shutdown,
/// whichever comes first; then the body is dropped and hyper closes the connection if the
/// body had not ended.
async fn drain(mut body: Body, deadline: Instant, max_bytes: usize, mut shutdown: watch::Receiver<bool>) {
    let read = async {
        let mut seen = 0usize;
        while let Some(Ok(frame)) = body.frame().await {
            seen += frame.data_ref().map_or(0, Bytes::len);
            if seen > max_bytes {
                break;
            }
        }
    };
    tokio::select! {
        _ = tokio::time::timeout_at(deadline, read) => {}
        _ = shutdown.wait_for(|&stopping| stopping) => {}
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
    use super::*;

    fn limits() -> (watch::Sender<bool>, DrainLimits) {
        let (tx, rx) = watch::channel(false);
        (tx, DrainLimits { max_bytes: 1 << 20, shutdown: rx })
    }

    #[tokio::test]
    async fn a_body_that_stalls_fails_with_the_timeout_after_its_deadline() {
        let (_tx, limits) = limits();
        // A body that sends one frame and then nothing.
        let (mut sender, inner) = channel_body();
        sender.send(Bytes::from_static(b"{\"input_ids\"")).await.unwrap();
        let body = Body::new(GuardedBody::new(inner, Duration::from_millis(200), false, limits));
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
        let (_tx, limits) = limits();
        let body = Body::new(GuardedBody::new(Body::from("0123456789"), Duration::from_secs(5), false, limits.clone()));
        assert_eq!(&*read_to_vec(body, Some(10), 10).await.ok().unwrap(), b"0123456789");
        let body = Body::new(GuardedBody::new(Body::from("0123456789"), Duration::from_secs(5), false, limits));
        assert!(matches!(read_to_vec(body, None, 9).await, Err(ReadError::TooLarge)));
    }

    #[tokio::test]
    async fn a_large_declared_body_is_read_into_its_own_mapping() {
        let (_tx, limits) = limits();
        let text: Vec<u8> = (0..MAPPED_BYTES + 3).map(|i| b'a' + (i % 26) as u8).collect();
        let body = Body::new(GuardedBody::new(Body::from(text.clone()), Duration::from_secs(5), false, limits));
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
            let (_tx, limits) = limits();
            let (mut sender, inner) = channel_body();
            drop(GuardedBody::new(inner, Duration::from_secs(5), expect_continue, limits));
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
        let (tx, limits) = limits();
        let (mut sender, inner) = channel_body();
        drop(GuardedBody::new(inner, Duration::from_secs(60), false, limits));
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
