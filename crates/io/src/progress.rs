//! Progress of long work as events. Libraries never draw: a stage starts a [`Task`] and moves
//! it; whoever installed a [`ProgressSink`] hears about it. The binary's sink draws a bar on a
//! terminal and prints a line every few seconds in a log; the Python package's drives tqdm or a
//! callback. With no sink installed (a library user, a test) tasks cost an atomic add.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// What a task is: its name (`ingest`, `train`), the unit it counts and how many there are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskInfo {
    /// Unique within the process: tasks may overlap (an `embed` tokenizes, then embeds).
    pub id: u64,
    pub name: String,
    pub unit: &'static str,
    pub total: Option<u64>,
}

/// One change of a task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event<'a> {
    /// The task begins (a resumed task at its position).
    Started { task: &'a TaskInfo, position: u64 },
    /// The task moved, or its message changed.
    Advanced { task: &'a TaskInfo, position: u64, message: &'a str },
    /// The task is done (or abandoned: dropped before its end).
    Finished { task: &'a TaskInfo, position: u64 },
}

/// Hears every task's events; called from whichever thread moves a task.
pub trait ProgressSink: Send + Sync {
    fn event(&self, event: Event<'_>);
}

static SINK: RwLock<Option<Arc<dyn ProgressSink>>> = RwLock::new(None);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Installs the process' sink (`None` removes it) and returns the previous one.
pub fn set_sink(sink: Option<Arc<dyn ProgressSink>>) -> Option<Arc<dyn ProgressSink>> {
    std::mem::replace(&mut *SINK.write().unwrap_or_else(|e| e.into_inner()), sink)
}

fn current_sink() -> Option<Arc<dyn ProgressSink>> {
    SINK.read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// A unit of long work whose progress is reported. Shared by reference between the threads
/// that move it; finished when [`Task::finish`] is called or it is dropped.
pub struct Task {
    info: TaskInfo,
    sink: Option<Arc<dyn ProgressSink>>,
    position: AtomicU64,
    message: Mutex<String>,
    finished: AtomicBool,
}

impl Task {
    /// Starts a task at `position` that reports when `show` and a sink is installed.
    pub fn start(show: bool, name: &str, unit: &'static str, total: Option<u64>, position: u64) -> Self {
        let sink = if show { current_sink() } else { None };
        let info = TaskInfo { id: NEXT_ID.fetch_add(1, Ordering::Relaxed), name: name.to_string(), unit, total };
        if let Some(s) = &sink {
            s.event(Event::Started { task: &info, position });
        }
        Self {
            info,
            sink,
            position: AtomicU64::new(position),
            message: Mutex::new(String::new()),
            finished: AtomicBool::new(false),
        }
    }

    /// A task nobody hears about.
    pub fn hidden() -> Self {
        Self::start(false, "", "", None, 0)
    }

    pub fn info(&self) -> &TaskInfo {
        &self.info
    }

    pub fn position(&self) -> u64 {
        self.position.load(Ordering::Relaxed)
    }

    pub fn inc(&self, n: u64) {
        let p = self.position.fetch_add(n, Ordering::Relaxed) + n;
        self.advanced(p);
    }

    pub fn set_position(&self, p: u64) {
        self.position.store(p, Ordering::Relaxed);
        self.advanced(p);
    }

    /// A short status shown beside the count (`loss 7.1`).
    pub fn set_message(&self, message: impl Into<String>) {
        if self.sink.is_some() {
            *self.message.lock().unwrap_or_else(|e| e.into_inner()) = message.into();
            self.advanced(self.position());
        }
    }

    fn advanced(&self, position: u64) {
        if let Some(s) = &self.sink {
            let message = self.message.lock().unwrap_or_else(|e| e.into_inner());
            s.event(Event::Advanced { task: &self.info, position, message: &message });
        }
    }

    pub fn finish(&self) {
        if !self.finished.swap(true, Ordering::Relaxed) {
            if let Some(s) = &self.sink {
                s.event(Event::Finished { task: &self.info, position: self.position() });
            }
        }
    }
}

impl Drop for Task {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Recorder(Mutex<Vec<String>>);

    impl ProgressSink for Recorder {
        fn event(&self, e: Event<'_>) {
            // Other tests of this crate run beside this one, under the same global sink.
            let (Event::Started { task, .. } | Event::Advanced { task, .. } | Event::Finished { task, .. }) = e;
            if !task.name.starts_with("progress-test") {
                return;
            }
            let line = match e {
                Event::Started { task, position } => format!("start {} {position}/{:?}", task.name, task.total),
                Event::Advanced { task, position, message } => format!("at {} {position} {message}", task.name),
                Event::Finished { task, position } => format!("end {} {position}", task.name),
            };
            self.0.lock().unwrap().push(line);
        }
    }

    #[test]
    fn a_sink_hears_a_tasks_start_moves_and_end_once_and_nothing_when_hidden() {
        let rec = Arc::new(Recorder(Mutex::new(Vec::new())));
        let previous = set_sink(Some(rec.clone()));
        {
            let t = Task::start(true, "progress-test", "cells", Some(10), 2);
            t.inc(3);
            t.set_message("half");
            t.set_position(10);
            t.finish();
            let quiet = Task::start(false, "progress-test-quiet", "cells", None, 0);
            quiet.inc(1);
        }
        set_sink(previous);
        let got = rec.0.lock().unwrap().clone();
        assert_eq!(
            got,
            [
                "start progress-test 2/Some(10)",
                "at progress-test 5 ",
                "at progress-test 5 half",
                "at progress-test 10 half",
                "end progress-test 10"
            ]
        );
    }
}
