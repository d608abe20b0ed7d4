//! A process of a timely cluster that dies (killed, its host down, the network cut) makes timely's
//! communication threads panic on the closed socket, and then every worker and the main thread
//! panic in turn ("MergeQueue poisoned", "Send thread panic"): exit 101 and pages of backtraces.
//! [`guarded`] runs a cluster's dataflow with those panics caught and silenced, and turns them into
//! one error that says what happened and what to do. The process is not recoverable (timely has
//! no reconnection), and nothing has been written yet: process 0 writes the graph after the
//! dataflow, so a rerun of every process recomputes it from the corpus.

use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use corrflow_io::error::{Error, Result};

/// Runs `run` (the dataflow of process `process` of a cluster of `processes`) with panics
/// caught: a lost peer becomes [`Error::Remote`] naming this process, the cluster and timely's
/// own message.
pub fn guarded<T>(process: usize, processes: usize, run: impl FnOnce() -> Result<T>) -> Result<T> {
    if processes <= 1 {
        return run();
    }
    // The panic hook is process-wide: while the cluster runs, panics are recorded (the first
    // communication error, else the first panic) instead of printed, then the hook is restored.
    let first: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
    let sink = first.clone();
    let previous = panic::take_hook();
    panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| info.payload().downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a worker panicked".into());
        let mut slot = sink.lock().unwrap_or_else(|p| p.into_inner());
        let communication = msg.contains("communication error");
        if slot.is_none() || (communication && !slot.as_deref().unwrap_or("").contains("communication error")) {
            *slot = Some(msg);
        }
    }));
    let outcome = panic::catch_unwind(AssertUnwindSafe(run));
    let _ours = panic::take_hook();
    panic::set_hook(previous);
    let lost = first.lock().unwrap_or_else(|p| p.into_inner()).take();
    match (outcome, lost) {
        (Ok(Ok(v)), _) => Ok(v),
        (Ok(Err(e)), None) => Err(e),
        (_, lost) => Err(Error::Remote(format!(
            "process {} of the {}-process cluster lost its connection to another process ({}); \
             the graph was not written. Start every process again: the rerun recomputes it from the corpus",
            process,
            processes,
            lost.unwrap_or_else(|| "a worker panicked".into())
        ))),
    }
}
