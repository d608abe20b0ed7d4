//! `corrflow.set_progress`: the library's progress events handed to a Python callable, as the
//! binary draws them as bars (`tqdm` on the Python side, or the user's own callback).

use std::sync::Arc;

use corrflow_io::progress::{set_sink, Event, ProgressSink};
use pyo3::prelude::*;

/// Calls `callback(kind, task_id, name, unit, position, total, message)` for every event;
/// `kind` is `"start"`, `"advance"` or `"finish"`. Events come from the library's worker
/// threads: the GIL is taken for each call, and an exception in the callback is printed, not
/// raised into the work that reported progress.
struct PythonSink {
    callback: Py<PyAny>,
}

impl ProgressSink for PythonSink {
    fn event(&self, e: Event<'_>) {
        let (kind, task, position, message) = match e {
            Event::Started { task, position } => ("start", task, position, ""),
            Event::Advanced { task, position, message } => ("advance", task, position, message),
            Event::Finished { task, position } => ("finish", task, position, ""),
        };
        Python::attach(|py| {
            let args = (kind, task.id, task.name.as_str(), task.unit, position, task.total, message);
            if let Err(err) = self.callback.call1(py, args) {
                err.print(py);
            }
        });
    }
}

/// Installs `callback` as the receiver of progress events (`None` stops them).
#[pyfunction]
#[pyo3(signature = (callback=None))]
pub(crate) fn set_progress(callback: Option<Py<PyAny>>) {
    set_sink(callback.map(|callback| Arc::new(PythonSink { callback }) as Arc<dyn ProgressSink>));
}
