//! How the binary shows the libraries' progress events: on a terminal, an indicatif bar per
//! task; anywhere else (a batch job's log, a SLURM output file, a pipe) a line every few seconds
//! (`INFO progress: ...`, through `tracing`, target `progress`): position, share done, rate and
//! time left.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use corrflow::progress::{Event, ProgressSink, TaskInfo};
use indicatif::{ProgressBar, ProgressStyle};

/// Seconds between progress lines off a terminal; the environment variable overrides it.
pub const EVERY_ENV: &str = "CORRFLOW_PROGRESS_SECS";
const DEFAULT_EVERY: Duration = Duration::from_secs(10);

/// Installs the sink for this process: bars on a terminal, periodic log lines elsewhere.
pub fn install() {
    let sink: Arc<dyn ProgressSink> = if std::io::stderr().is_terminal() {
        Arc::new(Bars::default())
    } else {
        Arc::new(LogLines { every: every(), tasks: Mutex::default() })
    };
    corrflow::progress::set_sink(Some(sink));
}

/// The interval between progress lines: [`EVERY_ENV`] (seconds, > 0) or 10 s.
fn every() -> Duration {
    std::env::var(EVERY_ENV)
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|s| *s > 0.0 && s.is_finite())
        .map_or(DEFAULT_EVERY, Duration::from_secs_f64)
}

/// One indicatif bar per running task.
#[derive(Default)]
struct Bars {
    bars: Mutex<HashMap<u64, ProgressBar>>,
}

impl ProgressSink for Bars {
    fn event(&self, e: Event<'_>) {
        let mut bars = self.bars.lock().unwrap_or_else(|e| e.into_inner());
        match e {
            Event::Started { task, position } => {
                let bar = ProgressBar::new(task.total.unwrap_or(0)).with_style(style(task));
                bar.set_position(position);
                // Drawn from the start and kept moving while one long batch runs.
                bar.enable_steady_tick(Duration::from_millis(500));
                bars.insert(task.id, bar);
            }
            Event::Advanced { task, position, message } => {
                if let Some(bar) = bars.get(&task.id) {
                    bar.set_position(position);
                    if bar.message() != message {
                        bar.set_message(message.to_string());
                    }
                }
            }
            Event::Finished { task, .. } => {
                if let Some(bar) = bars.remove(&task.id) {
                    bar.finish_and_clear();
                }
            }
        }
    }
}

fn style(task: &TaskInfo) -> ProgressStyle {
    let (name, unit) = (&task.name, task.unit);
    let template = if unit == "steps" {
        format!("{name} {{bar:30}} {{pos}}/{{len}} steps {{msg}} (eta {{eta}})")
    } else {
        format!("{name} {{bar:40}} {{pos}}/{{len}} {unit} ({{per_sec}}, eta {{eta}}) {{msg}}")
    };
    ProgressStyle::with_template(&template).unwrap_or_else(|_| ProgressStyle::default_bar())
}

/// A progress line per task every `every`, written when the task moves.
struct LogLines {
    every: Duration,
    tasks: Mutex<HashMap<u64, Logged>>,
}

struct Logged {
    /// The rate is measured from the task's start (a resumed run's position included).
    start: (Instant, u64),
    next: Instant,
}

impl ProgressSink for LogLines {
    fn event(&self, e: Event<'_>) {
        let mut tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        match e {
            Event::Started { task, position } => {
                tasks.insert(task.id, Logged { start: (now, position), next: now + self.every });
            }
            Event::Advanced { task, position, message } => {
                let Some(t) = tasks.get_mut(&task.id) else { return };
                if now < t.next {
                    return;
                }
                t.next = now + self.every;
                let (t0, p0) = t.start;
                let rate = position.saturating_sub(p0) as f64 / now.duration_since(t0).as_secs_f64().max(1e-9);
                let line = progress_line(&task.name, task.unit, position, task.total, rate, message);
                tracing::info!(target: "progress", "{line}");
            }
            Event::Finished { task, .. } => {
                tasks.remove(&task.id);
            }
        }
    }
}

/// `ingest: 12,000/50,000 cells (24%), 1,200 cells/s, eta 32s; MESSAGE`.
pub fn progress_line(what: &str, unit: &str, pos: u64, total: Option<u64>, rate: f64, msg: &str) -> String {
    let mut line = format!("{what}: {}", thousands(pos));
    if let Some(t) = total.filter(|&t| t > 0) {
        line.push_str(&format!("/{} {unit} ({:.0}%)", thousands(t), 100.0 * pos as f64 / t as f64));
        line.push_str(&format!(", {} {unit}/s", rate_text(rate)));
        let eta = if rate > 0.0 { clock(t.saturating_sub(pos) as f64 / rate) } else { "unknown".into() };
        line.push_str(&format!(", eta {eta}"));
    } else {
        line.push_str(&format!(" {unit}, {} {unit}/s", rate_text(rate)));
    }
    if !msg.is_empty() {
        line.push_str(&format!("; {msg}"));
    }
    line
}

fn rate_text(rate: f64) -> String {
    if rate >= 100.0 {
        thousands(rate.round() as u64)
    } else {
        format!("{rate:.2}")
    }
}

fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `1h02m`, `3m05s` or `42s`.
fn clock(seconds: f64) -> String {
    let s = seconds.round().max(0.0) as u64;
    match (s / 3600, (s % 3600) / 60, s % 60) {
        (0, 0, sec) => format!("{sec}s"),
        (0, m, sec) => format!("{m}m{sec:02}s"),
        (h, m, _) => format!("{h}h{m:02}m"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_progress_line_has_the_share_done_the_rate_and_the_time_left() {
        let l = progress_line("ingest", "cells", 12_000, Some(50_000), 1_200.0, "");
        assert_eq!(l, "ingest: 12,000/50,000 cells (24%), 1,200 cells/s, eta 32s");
        let l = progress_line("train", "steps", 10, Some(400), 0.5, "loss 7.1");
        assert_eq!(l, "train: 10/400 steps (2%), 0.50 steps/s, eta 13m00s; loss 7.1");
        assert_eq!(clock(3.0 * 3600.0 + 125.0), "3h02m");
        assert!(progress_line("x", "cells", 0, Some(5), 0.0, "").ends_with("eta unknown"));
    }
}
