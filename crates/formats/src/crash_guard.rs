//! The HDF5 1.10 library crashes (SIGSEGV) on some damaged files instead of returning an
//! error, for instance when a variable-length string attribute points into a damaged global
//! heap (the fuzzer in `benches/fuzz.rs` finds such files within a few executions). String
//! datasets are checked before they are read (`vlen_heap`), but attributes cannot be reached
//! that way. So what opening an HDF5 input reads (attributes, obs and var tables) is first read
//! in a forked child: a child killed by a signal means the file would
//! have killed this process, and becomes a clear error naming the file. The same library also
//! loops forever on some damaged global heaps (`H5HG_read` → `H5C_protect`, found by the
//! fuzzer): a child that does not finish within its patience is killed and the file refused,
//! rather than letting this process hang on the same read.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// How long opening may take by default: opening reads attributes and the obs/var tables, a
/// few seconds even for atlases of millions of cells; the allowance per byte covers slow disks.
pub fn default_patience(file_bytes: u64) -> Duration {
    Duration::from_secs(120) + Duration::from_secs(file_bytes / (50 << 20))
}

/// Runs `probe` in a forked child; errors when the child dies of a signal or has not finished
/// after `patience`. A failure to fork leaves the decision to the normal read.
pub fn probe(path: &Path, patience: Duration, probe: impl FnOnce()) -> Result<()> {
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the child only runs `probe` (reads of the file) and leaves with _exit, without
    // running destructors or flushing the parent's buffers.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Ok(());
    }
    if pid == 0 {
        // The child must not keep this process's directory locks, nor outlive it (a probe
        // looping in libhdf5 would otherwise run on after this process is killed).
        corrflow_fs::lock::close_inherited_locks();
        // SAFETY: asks the kernel to kill this child when its parent ends; then checks that
        // the parent did not end before the request.
        unsafe {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if libc::getppid() != parent {
                libc::_exit(1);
            }
        }
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
        if start.elapsed() > patience {
            // SAFETY: ends and reaps our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return Err(Error::format(
                path,
                format!(
                    "the HDF5 library did not finish opening this file in {} s (it loops on damaged metadata): \
                     the file is damaged",
                    patience.as_secs_f64()
                ),
            ));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_that_never_finishes_is_refused_after_its_patience() {
        let start = Instant::now();
        let err = probe(Path::new("loop.h5ad"), Duration::from_millis(200), || loop {
            std::thread::sleep(Duration::from_millis(10));
        })
        .unwrap_err()
        .to_string();
        assert!(err.contains("loop.h5ad") && err.contains("did not finish opening"), "{err}");
        assert!(start.elapsed() < Duration::from_secs(30));
    }

    #[test]
    fn a_probe_killed_by_a_signal_is_refused_and_a_clean_one_passes() {
        // An abort in the forked child only, as a crashing library's (Rust's own SIGSEGV handler
        // would swallow a raised SIGSEGV).
        let err =
            probe(Path::new("crash.h5ad"), Duration::from_secs(30), || std::process::abort()).unwrap_err().to_string();
        assert!(err.contains("crashes reading this file (signal 6)"), "{err}");
        probe(Path::new("fine.h5ad"), Duration::from_secs(30), || ()).unwrap();
    }
}
