//! Small shared pieces of the files in and out: CSV and Parquet output, shard writeback,
//! cancellation, process memory. Atomic writes, locks and checksums are `corrflow-fs`'s.

pub mod csv;
pub mod parquet_out;
pub mod writeback;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::error::Result;

/// The memory the kernel says is available to new allocations (`MemAvailable`), when it says.
pub fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
}

/// A flag a caller sets to stop long work at its next safe point (between chunks); cloning it
/// shares it. Work that sees it set returns [`crate::Error::Interrupted`].
#[derive(Clone, Debug, Default)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// `Err(Interrupted)` naming `what` once cancelled.
    pub fn check(&self, what: &str) -> Result<()> {
        if self.is_cancelled() {
            Err(crate::Error::Interrupted(what.to_string()))
        } else {
            Ok(())
        }
    }
}

/// Peak resident memory of this process in bytes (Linux `VmHWM`), if known.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
