//! Long calls that a Ctrl-C stops. Python only raises `KeyboardInterrupt` when it runs Python
//! code, so a call into Rust would otherwise run to its end: these helpers run the work on a
//! thread with the GIL released, wake every few tens of milliseconds to let Python look at its
//! signals, and on a Ctrl-C set the work's [`Cancel`] flag and wait for it to stop at its next
//! safe point (between chunks: what was committed stays, nothing is half-written).

use std::time::Duration;

use corrflow_io::util::Cancel;
use pyo3::prelude::*;

/// How often a waiting call looks at Python's signals.
const POLL: Duration = Duration::from_millis(50);

/// Runs `work` with the GIL released, cancelling it on Ctrl-C; the work's own error (an
/// `Interrupted` one after a Ctrl-C) is raised.
pub(crate) fn run<T: Send>(
    py: Python<'_>,
    cancel: &Cancel,
    work: impl FnOnce() -> corrflow_io::Result<T> + Send,
) -> PyResult<T> {
    std::thread::scope(|s| {
        let (tx, rx) = crossbeam_channel::bounded(1);
        s.spawn(move || {
            let _ = tx.send(work());
        });
        let mut interrupted: Option<PyErr> = None;
        loop {
            match py.detach(|| rx.recv_timeout(POLL)) {
                Ok(result) => {
                    return match (result, interrupted) {
                        // A Ctrl-C that came when the work had already finished is raised.
                        (_, Some(err)) => Err(err),
                        (result, None) => result.map_err(crate::py_err),
                    };
                }
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                    if interrupted.is_none() {
                        if let Err(err) = py.check_signals() {
                            cancel.cancel();
                            interrupted = Some(err);
                        }
                    }
                }
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                    return Err(crate::CorrflowError::new_err("internal error: a worker thread panicked"));
                }
            }
        }
    })
}
