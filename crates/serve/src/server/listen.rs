//! The accept loop: hyper's HTTP/1 connections with a header read timeout, and a graceful
//! shutdown. `axum::serve` has neither timeouts nor settings ("use hyper or hyper-util if you
//! need configuration"), and without a header timeout a client that stops halfway through its
//! headers held its connection, and shutdown, forever. Each connection's I/O is wrapped so that
//! the requests hyper refuses itself get a JSON error body (`malformed.rs`).

use std::future::Future;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::malformed::JsonErrors;

/// Serves `router` on `listener` until `shutdown` resolves; then stops accepting, asks every
/// connection to close after its request in flight (idle ones close at once), and returns once
/// all are closed. A request's head must arrive within `header_timeout` (hyper's timer; the body
/// has its own deadline, `body::GuardedBody`), so every wait at shutdown is bounded.
pub async fn serve_connections(
    listener: TcpListener,
    router: Router,
    header_timeout: Duration,
    shutdown: impl Future<Output = ()>,
) {
    let (stop_tx, stop_rx) = watch::channel(());
    // Every connection task holds a receiver; `closed()` resolves when the last one is gone.
    let (open_tx, open_rx) = watch::channel(());
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors and the like: wait rather than spin.
                    tracing::warn!("accepting a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone());
        let (mut stop, open) = (stop_rx.clone(), open_rx.clone());
        tokio::spawn(async move {
            let mut builder = http1::Builder::new();
            // A 64 KiB read buffer (hyper's default grows to ~400 KiB): under overload every
            // refused upload is being read and dropped at once, and 64 connections at 400 KiB
            // each cost RSS for no speed (loopback segments are 64 KiB).
            builder.timer(TokioTimer::new()).header_read_timeout(header_timeout).max_buf_size(64 << 10);
            let conn = builder.serve_connection(TokioIo::new(JsonErrors::new(stream)), service);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = stop.changed() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
            drop(open);
        });
    }
    drop(listener);
    drop((stop_tx, stop_rx, open_rx));
    open_tx.closed().await;
}
