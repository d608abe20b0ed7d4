//! Requests that hyper refuses before they reach the router get the JSON error body every
//! other 4xx has (issue 51). A malformed head (conflicting or invalid `Content-Length`, a
//! `Transfer-Encoding` not ending in chunked, a bad method, URI, version or header) is answered
//! by hyper itself with a bare `400` (or `414`, `431`) and an empty body, after which it closes
//! the connection; it has no setting or hook for that answer. So each connection's I/O is
//! wrapped ([`JsonErrors`]):
//! - reading, the bytes of the request head are kept as they arrive (the head only, at most
//!   [`HEAD_LIMIT`], from the first byte read after a response was started);
//! - writing, hyper's bare answer is recognised (a 400, 414 or 431 head with
//!   `content-length: 0` and no `content-type`, which no handler writes: every handler answer
//!   has a body) and written instead as the same status with
//!   `{"error": {"status", "message"}}`, the message saying what is wrong with the head kept.
//!
//! When the kept bytes are not that head (a pipelined client whose next request was read before
//! the answer), the message names the usual causes instead.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The most head bytes kept for the message (longer heads are answered with the usual causes).
pub const HEAD_LIMIT: usize = 16 << 10;

/// The connection's I/O, answering hyper's refusals of malformed requests with a JSON body.
pub struct JsonErrors<T> {
    inner: T,
    head: Vec<u8>,
    /// The head kept is complete (or at the limit): later bytes are the body.
    head_done: bool,
    /// The JSON answer being written in place of hyper's.
    replacing: Option<Replacement>,
}

struct Replacement {
    bytes: Vec<u8>,
    written: usize,
    /// The length of hyper's answer, reported written once ours is.
    replaces: usize,
}

impl<T> JsonErrors<T> {
    pub fn new(inner: T) -> Self {
        Self { inner, head: Vec::new(), head_done: false, replacing: None }
    }

    fn keep(&mut self, read: &[u8]) {
        if self.head_done || read.is_empty() {
            return;
        }
        let from = self.head.len().saturating_sub(3);
        let take = read.len().min(HEAD_LIMIT - self.head.len());
        self.head.extend_from_slice(&read[..take]);
        if let Some(end) = find(&self.head[from..], b"\r\n\r\n") {
            self.head.truncate(from + end + 4);
            self.head_done = true;
        } else if self.head.len() >= HEAD_LIMIT {
            self.head_done = true;
        }
    }
}

impl<T: AsyncWrite + Unpin> JsonErrors<T> {
    /// Writes what is left of the replacement; ready with hyper's length once all is written.
    fn poll_replacement(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let Some(r) = self.replacing.as_mut() else { return Poll::Ready(Ok(0)) };
        while r.written < r.bytes.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &r.bytes[r.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            r.written += n;
        }
        let replaces = r.replaces;
        self.replacing = None;
        Poll::Ready(Ok(replaces))
    }

    /// `buf` starts a response: the next request's head is kept from here on; hyper's bare
    /// refusal becomes the replacement to write.
    fn starting(&mut self, buf: &[u8]) {
        if !buf.starts_with(b"HTTP/1.") {
            return;
        }
        if let Some((status, len)) = bare_refusal(buf) {
            let message = diagnose(status, if self.head_done { &self.head } else { &[] });
            self.replacing =
                Some(Replacement { bytes: json_answer(&buf[..len], status, &message), written: 0, replaces: len });
        }
        self.head.clear();
        self.head_done = false;
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for JsonErrors<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        ready!(Pin::new(&mut self.inner).poll_read(cx, buf))?;
        self.keep(&buf.filled()[before..]);
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for JsonErrors<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.replacing.is_none() {
            this.starting(buf);
        }
        if this.replacing.is_some() {
            return this.poll_replacement(cx);
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.replacing.is_none() {
            if let Some(first) = bufs.iter().find(|b| !b.is_empty()) {
                this.starting(first);
            }
        }
        if this.replacing.is_some() {
            return this.poll_replacement(cx);
        }
        Pin::new(&mut this.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_replacement(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_replacement(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The status and head length of hyper's own refusal of a malformed request, if `buf` starts
/// with one.
fn bare_refusal(buf: &[u8]) -> Option<(u16, usize)> {
    let len = find(buf, b"\r\n\r\n")? + 4;
    let head = std::str::from_utf8(&buf[..len]).ok()?;
    let mut lines = head.split("\r\n");
    let status: u16 = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    if !matches!(status, 400 | 414 | 431) {
        return None;
    }
    let (mut empty, mut typed) = (false, false);
    for line in lines {
        let line = line.to_ascii_lowercase();
        empty |= line.replace(' ', "") == "content-length:0";
        typed |= line.starts_with("content-type:");
    }
    (empty && !typed).then_some((status, len))
}

/// hyper's `head` (its status line and headers) with the JSON body and its headers.
fn json_answer(head: &[u8], status: u16, message: &str) -> Vec<u8> {
    let body = super::routes::error_body(status, message).to_string();
    let text = String::from_utf8_lossy(head);
    let mut out = String::new();
    for line in text.split("\r\n").filter(|l| !l.is_empty()) {
        let lower = line.to_ascii_lowercase();
        if !lower.starts_with("content-length:") && !lower.starts_with("connection:") {
            out.push_str(line);
            out.push_str("\r\n");
        }
    }
    out.push_str(&format!(
        "content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    ));
    out.into_bytes()
}

/// What is wrong with the request `head` (empty when it was not kept) that hyper refused
/// with `status`.
pub fn diagnose(status: u16, head: &[u8]) -> String {
    match status {
        431 => {
            return "the request head is too large (its line and headers must fit in 64 KiB, at most 100 headers)"
                .into()
        }
        414 => return "the request URI is too long".into(),
        _ => {}
    }
    let usual = "the request head is malformed (an invalid or conflicting Content-Length, a Transfer-Encoding \
                 that does not end in chunked, or a method, URI, version or header HTTP/1.1 does not allow)";
    let text = String::from_utf8_lossy(head);
    let mut lines = text.split("\r\n");
    let Some(request_line) = lines.next().filter(|l| !l.is_empty()) else { return usual.into() };
    let http10 = request_line.ends_with(" HTTP/1.0");
    let (mut lengths, mut chunked_last, mut te) = (Vec::<String>::new(), true, None);
    for line in lines.take_while(|l| !l.is_empty()) {
        let Some((name, value)) = line.split_once(':') else { continue };
        let value = value.trim();
        if name.eq_ignore_ascii_case("transfer-encoding") {
            te = Some(value.to_string());
            chunked_last = value.rsplit(',').next().is_some_and(|c| c.trim().eq_ignore_ascii_case("chunked"));
        } else if name.eq_ignore_ascii_case("content-length") && te.is_none() {
            if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
                return format!("Content-Length '{value}' is not a length: it must be a whole number of bytes");
            }
            if value.parse::<u64>().is_err() {
                return format!("Content-Length {value} is too large");
            }
            if !lengths.iter().any(|l| l == value) {
                lengths.push(value.to_string());
            }
        }
    }
    if lengths.len() > 1 {
        return format!("the request has conflicting Content-Length headers ({}): send one", lengths.join(", "));
    }
    match te {
        Some(_) if http10 => "Transfer-Encoding is not allowed in an HTTP/1.0 request".into(),
        Some(v) if !chunked_last => format!("Transfer-Encoding '{v}' does not end in chunked"),
        _ if request_line.split(' ').count() != 3 || !request_line.contains(" HTTP/1.") => {
            format!(
                "the request line '{}' is not 'METHOD /path HTTP/1.1'",
                request_line.chars().take(80).collect::<String>()
            )
        }
        _ => usual.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_names_what_is_wrong_with_the_head() {
        for (head, needle) in [
            (
                "POST /v1/embed HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
                "conflicting Content-Length headers (5, 6)",
            ),
            ("POST /v1/embed HTTP/1.1\r\nContent-Length: -1\r\n\r\n", "Content-Length '-1' is not a length"),
            ("POST /v1/embed HTTP/1.1\r\ncontent-length: 99999999999999999999999\r\n\r\n", "is too large"),
            ("POST /v1/embed HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", "'gzip' does not end in chunked"),
            ("POST /v1/embed HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", "not allowed in an HTTP/1.0"),
            ("POST /v1/embed\r\nHost: x\r\n\r\n", "is not 'METHOD /path HTTP/1.1'"),
            ("", "the request head is malformed"),
            // Equal duplicates are accepted by hyper, so they are not the reason given.
            ("POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\nBad Header: x\r\n\r\n", "is malformed"),
        ] {
            let message = diagnose(400, head.as_bytes());
            assert!(message.contains(needle), "{head:?}: {message}");
        }
        assert!(diagnose(431, b"").contains("too large"));
    }

    #[test]
    fn only_hypers_bare_refusal_is_replaced() {
        let bare = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\ndate: Sat, 28 Nov 2026 15:00:00 GMT\r\n\r\n";
        assert_eq!(bare_refusal(bare), Some((400, bare.len())));
        let ours = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(bare_refusal(ours), None);
        assert_eq!(bare_refusal(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"), None);
        assert_eq!(bare_refusal(b"HTTP/1.1 100 Continue\r\n\r\n"), None);
        let answer = String::from_utf8(json_answer(bare, 400, "why")).unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 400 Bad Request\r\n") && head.contains("date: "), "{head}");
        assert!(head.contains("content-type: application/json") && head.contains("connection: close"), "{head}");
        assert!(head.contains(&format!("content-length: {}", body.len())), "{head}");
        let body: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(body, serde_json::json!({"error": {"status": 400, "message": "why"}}));
    }

    /// Through the wrapper: the head read is kept, and hyper's bare answer goes out as JSON
    /// naming the problem, reported to the writer as written in full.
    #[test]
    fn a_bare_refusal_is_written_as_json_about_the_head_read() {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(async {
            let mut io = JsonErrors::new(Wire {
                input: b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\nbody".to_vec(),
                output: Vec::new(),
            });
            let mut storage = [0u8; 256];
            let mut buf = ReadBuf::new(&mut storage);
            std::future::poll_fn(|cx| Pin::new(&mut io).poll_read(cx, &mut buf)).await.unwrap();
            assert!(io.head_done && io.head.ends_with(b"-1\r\n\r\n"));
            let bare = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n";
            let n = std::future::poll_fn(|cx| Pin::new(&mut io).poll_write(cx, bare)).await.unwrap();
            assert_eq!(n, bare.len());
            let answer = String::from_utf8(io.inner.output.clone()).unwrap();
            assert!(answer.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{answer}");
            let body: serde_json::Value = serde_json::from_str(answer.split_once("\r\n\r\n").unwrap().1).unwrap();
            let message = "Content-Length '-1' is not a length: it must be a whole number of bytes";
            assert_eq!(body, serde_json::json!({"error": {"status": 400, "message": message}}));
            // Then the next response passes through untouched.
            let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
            let mut sent = 0;
            while sent < ok.len() {
                sent += std::future::poll_fn(|cx| Pin::new(&mut io).poll_write(cx, &ok[sent..])).await.unwrap();
            }
            assert!(io.inner.output.ends_with(ok));
        });
    }

    /// A connection that reads `input` and keeps what is written, a few bytes at a time.
    struct Wire {
        input: Vec<u8>,
        output: Vec<u8>,
    }

    impl AsyncRead for Wire {
        fn poll_read(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
            let n = self.input.len().min(buf.remaining());
            let taken: Vec<u8> = self.input.drain(..n).collect();
            buf.put_slice(&taken);
            Poll::Ready(Ok(()))
        }
    }

    impl AsyncWrite for Wire {
        fn poll_write(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
            let n = buf.len().min(7);
            self.output.extend_from_slice(&buf[..n]);
            Poll::Ready(Ok(n))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }
}
