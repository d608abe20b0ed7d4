//! Progress of long commands. On a terminal, an indicatif bar; anywhere else (a batch job's
//! log, a SLURM output file, a pipe) a bar draws nothing, so a log line is written every few
//! seconds instead (`INFO progress: ...`, through `tracing`, target `progress`): position, share
//! done, rate and time left.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Seconds between progress lines off a terminal; the environment variable overrides it.
pub const EVERY_ENV: &str = "CORRFLOW_PROGRESS_SECS";
const DEFAULT_EVERY: Duration = Duration::from_secs(10);

/// A progress bar over `total` `unit`s (hidden without `show`). `template` is indicatif's, for
/// the terminal; off a terminal the bar is not drawn and a thread logs it every
/// [`EVERY_ENV`] seconds (default 10) until it is finished or dropped.
pub fn bar(show: bool, total: u64, what: &str, unit: &'static str, template: &str) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    if std::io::stderr().is_terminal() {
        let bar = ProgressBar::new(total).with_style(ProgressStyle::with_template(template).expect("valid template")); // ok: invariant
                                                                                                                       // Drawn from the start and kept moving while one long batch runs.
        bar.enable_steady_tick(Duration::from_millis(500));
        return bar;
    }
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::hidden());
    spawn_logger(&bar, what.to_string(), unit, every());
    bar
}

/// The interval between progress lines: [`EVERY_ENV`] (seconds, > 0) or 10 s.
fn every() -> Duration {
    std::env::var(EVERY_ENV)
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|s| *s > 0.0 && s.is_finite())
        .map_or(DEFAULT_EVERY, Duration::from_secs_f64)
}

fn spawn_logger(bar: &ProgressBar, what: String, unit: &'static str, every: Duration) {
    let weak = bar.downgrade();
    let poll = every.min(Duration::from_millis(200));
    let spawned = std::thread::Builder::new().name("progress".into()).spawn(move || {
        // The rate is measured from the first poll: a resumed run's bar starts at its step.
        let mut base: Option<(Instant, u64)> = None;
        let mut next = Instant::now() + every;
        loop {
            std::thread::sleep(poll);
            let Some(bar) = weak.upgrade() else { return };
            if bar.is_finished() {
                return;
            }
            let (now, pos) = (Instant::now(), bar.position());
            let (t0, p0) = *base.get_or_insert((now, pos));
            if now < next {
                continue;
            }
            next = now + every;
            let rate = (pos.saturating_sub(p0)) as f64 / now.duration_since(t0).as_secs_f64().max(1e-9);
            let line = progress_line(&what, unit, pos, bar.length(), rate, &bar.message());
            tracing::info!(target: "progress", "{line}");
        }
    });
    if let Err(e) = spawned {
        tracing::debug!("no progress lines: {e}");
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
