//! Giving memory back after a burst. Request bodies are large and short-lived; glibc's malloc
//! keeps freed heap memory in its arenas, and raises its mmap threshold after large frees so
//! that later large bodies come from the heap too: a server that took a burst stayed near its
//! peak RSS (344 MB against 76 MB idle, BENCHMARKS.md). So the heap is trimmed once the server
//! is idle after traffic. (Mapping every large allocation instead, a fixed mmap threshold, also
//! returned the memory but served 25% fewer requests under the same load.)

use std::sync::Arc;
use std::time::Duration;

use super::AppState;

/// Returns the free memory of every malloc arena to the system.
fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim is thread-safe and frees nothing in use.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Every `every`, while no request is in flight, trims the heap for the first few idle ticks
/// after traffic (memory freed late, as connections wind down, is returned too). Runs until
/// the server stops.
pub async fn trim_when_idle(state: Arc<AppState>, every: Duration) {
    const IDLE_TRIMS: u32 = 3;
    let mut seen = state.admission.attempts();
    let mut left = 0u32;
    loop {
        tokio::time::sleep(every).await;
        let attempts = state.admission.attempts();
        if attempts != seen {
            seen = attempts;
            left = IDLE_TRIMS;
        }
        if left > 0 && state.admission.idle() {
            left -= 1;
            let _ = tokio::task::spawn_blocking(trim).await;
        }
    }
}
