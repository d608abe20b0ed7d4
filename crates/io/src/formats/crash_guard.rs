//! The HDF5 1.10 library crashes (SIGSEGV) on some damaged files instead of returning an
//! error, for instance when a variable-length string attribute points into a damaged global
//! heap (the fuzzer in `benches/fuzz.rs` finds such files within a few executions). String
//! datasets are checked before they are read (`vlen_heap`), but attributes cannot be reached
//! that way. So what opening an HDF5 input reads (attributes, obs and var tables) is first read
//! in a forked child: a child killed by a signal means the file would
//! have killed this process, and becomes a clear error naming the file.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// How long the child may take before the guard gives up on it (and the file is read without).
const PATIENCE: Duration = Duration::from_secs(120);

/// Runs `probe` in a forked child; errors when the child dies of a signal. A failure to fork,
/// or a child that does not finish in time, leaves the decision to the normal read.
pub fn probe(path: &Path, probe: impl FnOnce()) -> Result<()> {
    // SAFETY: the child only runs `probe` (reads of the file) and leaves with _exit, without
    // running destructors or flushing the parent's buffers.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Ok(());
    }
    if pid == 0 {
        let code = i32::from(catch_unwind(AssertUnwindSafe(probe)).is_err());
        // SAFETY: ends the child at once.
        unsafe { libc::_exit(code) }
    }
    let start = Instant::now();
    loop {
        let mut status = 0;
        // SAFETY: waits for our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            if libc::WIFSIGNALED(status) {
                let signal = libc::WTERMSIG(status);
                return Err(Error::format(
                    path,
                    format!("the HDF5 library crashes reading this file (signal {signal}): the file is damaged"),
                ));
            }
            return Ok(());
        }
        if r < 0 {
            return Ok(());
        }
        if start.elapsed() > PATIENCE {
            // SAFETY: ends and reaps our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}
