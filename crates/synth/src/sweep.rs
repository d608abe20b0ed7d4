//! The modularity sweep: for each background reading, γ and trial, one data set and one run per
//! masking strategy (paired: same data, same initial weights); accuracies summarised per γ.
//!
//! The full sweep is 100 runs of minutes each, so finished runs go to a journal (one JSON line
//! each, appended as they finish): the same command started again skips them.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::modularity::generate;
use super::pretrain::{run, RunOutcome, Strategy};
use super::{mean_sd, Background, ModularityParams};
use corrflow_io::error::{IoContext, Result};

/// Mean ± sample standard deviation of the test accuracy over trials.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub struct MeanSd {
    pub mean: f64,
    pub sd: f64,
}

/// One line of the table.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SweepRow {
    pub background: Background,
    pub gamma: f64,
    pub random: MeanSd,
    pub correlation: MeanSd,
    /// Mean over trials of (correlation − random) on the same data, and its sd.
    pub gain: MeanSd,
}

/// One trained model.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunRecord {
    pub background: Background,
    pub gamma: f64,
    pub trial: usize,
    pub seed: u64,
    pub strategy: Strategy,
    #[serde(flatten)]
    pub outcome: RunOutcome,
}

/// The summary of `synth modularity`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SweepReport {
    pub experiment: String,
    pub rows: Vec<SweepRow>,
    pub runs: Vec<RunRecord>,
    pub seeds: usize,
    pub epochs: usize,
    pub threads: usize,
    /// Runs taken from the journal rather than trained by this invocation.
    pub resumed: usize,
    pub seconds: f64,
    pub json: Option<String>,
    pub plot: Option<String>,
}

/// A journal line: a run and the fingerprint of the settings it was trained with.
#[derive(Serialize, Deserialize)]
struct JournalLine {
    settings: String,
    #[serde(flatten)]
    run: RunRecord,
}

/// sha256 of every setting that decides one run's outcome; which runs are made (backgrounds,
/// γs, trials) and how many at once do not, so a journal serves any sweep that overlaps it.
fn settings_fingerprint(p: &ModularityParams) -> String {
    let q = ModularityParams { backgrounds: vec![], gammas: vec![], seeds: 0, seed: 0, threads: 0, ..p.clone() };
    hex::encode(Sha256::digest(serde_json::to_vec(&q).expect("serialisable")))
}

/// The journal of finished runs: one JSON line per run, appended (and synced) as runs finish.
struct Journal {
    path: PathBuf,
    settings: String,
    file: Mutex<std::fs::File>,
}

impl Journal {
    /// Opens (creating) the journal and returns the runs it holds that were made with
    /// `settings`. A line cut short by an interrupted run is skipped and terminated, so that the
    /// next run's line starts clean.
    fn open(path: &Path, settings: String) -> Result<(Self, Vec<RunRecord>)> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).at(dir)?;
        }
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e).at(path),
        };
        let mut runs = Vec::new();
        for (n, line) in text.lines().enumerate() {
            match serde_json::from_str::<JournalLine>(line) {
                Ok(l) if l.settings == settings => runs.push(l.run),
                Ok(_) => {}
                Err(e) => tracing::warn!("{}: line {} skipped (incomplete run record: {e})", path.display(), n + 1),
            }
        }
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path).at(path)?;
        if !text.is_empty() && !text.ends_with('\n') {
            file.write_all(b"\n").at(path)?;
        }
        Ok((Self { path: path.to_path_buf(), settings, file: Mutex::new(file) }, runs))
    }

    fn append(&self, run: &RunRecord) -> Result<()> {
        let line = JournalLine { settings: self.settings.clone(), run: run.clone() };
        let mut bytes = serde_json::to_vec(&line).expect("serialisable");
        bytes.push(b'\n');
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        file.write_all(&bytes).and_then(|()| file.sync_data()).at(&self.path)
    }
}

/// A run still to do: background, γ, trial, strategy.
type Job = (Background, f64, usize, Strategy);

/// Runs the sweep, resuming from `journal` when given; `progress` is called after each run
/// trained here with (done, total, record).
pub fn sweep(
    p: &ModularityParams,
    journal: Option<&Path>,
    progress: &(dyn Fn(usize, usize, &RunRecord) + Sync),
) -> Result<SweepReport> {
    p.validate().map_err(corrflow_io::Error::Usage)?;
    let start = std::time::Instant::now();
    let (journal, journaled) = match journal {
        Some(path) => {
            let (j, runs) = Journal::open(path, settings_fingerprint(p))?;
            (Some(j), runs)
        }
        None => (None, Vec::new()),
    };
    let (mut runs, jobs) = plan_jobs(p, &journaled);
    let resumed = runs.len();
    let total = resumed + jobs.len();
    if resumed > 0 {
        tracing::info!("synth modularity: {resumed} of {total} runs from the journal");
    }
    // Dropout draws from the backend's process-wide RNG: with dropout, runs go one at a time
    // so that they stay deterministic.
    let threads = if p.model.dropout > 0.0 {
        1
    } else if p.threads == 0 {
        rayon::current_num_threads()
    } else {
        p.threads
    };
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| corrflow_io::Error::internal("synth modularity", format!("thread pool: {e}")))?;
    let (next, done) = (AtomicUsize::new(0), AtomicUsize::new(resumed));
    let one = |(background, gamma, trial, strategy): Job| -> Result<RunRecord> {
        let seed = p.seed + trial as u64;
        let data = generate(p, background, gamma, seed);
        let outcome = run(p, &data, strategy, seed)?;
        let rec = RunRecord { background, gamma, trial, seed, strategy, outcome };
        if let Some(j) = &journal {
            j.append(&rec)?;
        }
        progress(done.fetch_add(1, Ordering::Relaxed) + 1, total, &rec);
        Ok(rec)
    };
    let trained: Vec<Vec<RunRecord>> = pool.install(|| {
        (0..threads)
            .into_par_iter()
            .map(|_| {
                let mut mine = Vec::new();
                while let Some(&job) = jobs.get(next.fetch_add(1, Ordering::Relaxed)) {
                    match one(job) {
                        Ok(r) => mine.push(r),
                        Err(e) => {
                            next.store(jobs.len(), Ordering::Relaxed); // the others stop too
                            return Err(e);
                        }
                    }
                }
                Ok(mine)
            })
            .collect::<Result<_>>()
    })?;
    runs.extend(trained.into_iter().flatten());
    let rows = summarize(p, &mut runs);
    Ok(SweepReport {
        experiment: "modularity".into(),
        rows,
        runs,
        seeds: p.seeds,
        epochs: p.epochs,
        threads,
        resumed,
        seconds: start.elapsed().as_secs_f64(),
        json: None,
        plot: None,
    })
}

/// A sweep's runs taken from the journal, and the jobs still to run: trial-major, and taken
/// from the front by the workers, so a sweep stopped early leaves whole trials in the journal.
fn plan_jobs(p: &ModularityParams, journaled: &[RunRecord]) -> (Vec<RunRecord>, Vec<Job>) {
    let (mut runs, mut jobs) = (Vec::new(), Vec::new());
    for trial in 0..p.seeds {
        let seed = p.seed + trial as u64;
        for &background in &p.backgrounds {
            for &gamma in &p.gammas {
                for strategy in Strategy::BOTH {
                    let same = |r: &&RunRecord| {
                        (r.background, r.gamma, r.seed, r.strategy) == (background, gamma, seed, strategy)
                    };
                    match journaled.iter().find(same) {
                        Some(r) => runs.push(RunRecord { trial, ..r.clone() }),
                        None => jobs.push((background, gamma, trial, strategy)),
                    }
                }
            }
        }
    }
    (runs, jobs)
}

/// One row per (background, γ): the accuracies of both strategies and the paired gains. Sorts
/// the runs back into trial order first (the journal holds them in completion order), so that
/// the gains pair each trial's two runs.
fn summarize(p: &ModularityParams, runs: &mut [RunRecord]) -> Vec<SweepRow> {
    let bg = |b: Background| p.backgrounds.iter().position(|&x| x == b);
    runs.sort_by(|a, b| {
        bg(a.background)
            .cmp(&bg(b.background))
            .then(a.gamma.total_cmp(&b.gamma))
            .then((a.trial, a.strategy as u8).cmp(&(b.trial, b.strategy as u8)))
    });
    let ms = |v: &[f64]| {
        let (mean, sd) = mean_sd(v);
        MeanSd { mean, sd }
    };
    let mut rows = Vec::new();
    for &background in &p.backgrounds {
        for &gamma in &p.gammas {
            let acc = |s: Strategy| -> Vec<f64> {
                runs.iter()
                    .filter(|r| r.background == background && r.gamma == gamma && r.strategy == s)
                    .map(|r| r.outcome.accuracy)
                    .collect()
            };
            let (random, correlation) = (acc(Strategy::Random), acc(Strategy::Correlation));
            let gains: Vec<f64> = correlation.iter().zip(&random).map(|(c, r)| c - r).collect();
            rows.push(SweepRow {
                background,
                gamma,
                random: ms(&random),
                correlation: ms(&correlation),
                gain: ms(&gains),
            });
        }
    }
    rows
}

/// The table as Markdown: one line per (background, γ).
pub fn markdown_table(r: &SweepReport) -> String {
    let mut s = String::from(
        "| Exp(0.1) read as | γ | random masking | correlation masking | gain (paired) |\n|---|---|---|---|---|\n",
    );
    for row in &r.rows {
        let f = |m: MeanSd| format!("{:.2} ± {:.2}%", 100.0 * m.mean, 100.0 * m.sd);
        s.push_str(&format!(
            "| {} | {:.2} | {} | {} | {:+.2} ± {:.2} pp |\n",
            row.background.name(),
            row.gamma,
            f(row.random),
            f(row.correlation),
            100.0 * row.gain.mean,
            100.0 * row.gain.sd
        ));
    }
    s
}
