//! The modularity sweep: for each background reading, γ and trial, one data set and one run per
//! masking strategy (paired: same data, same initial weights); accuracies summarised per γ.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::modularity::generate;
use super::pretrain::{run, RunOutcome, Strategy};
use super::{mean_sd, Background, ModularityParams};
use crate::error::Result;

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
    pub incoherent: super::Incoherent,
    pub threads: usize,
    pub seconds: f64,
    pub json: Option<String>,
    pub plot: Option<String>,
}

/// Runs the sweep; `progress` is called after each finished run with (done, total, record).
pub fn sweep(p: &ModularityParams, progress: &(dyn Fn(usize, usize, &RunRecord) + Sync)) -> Result<SweepReport> {
    p.validate().map_err(crate::Error::Usage)?;
    let start = std::time::Instant::now();
    let mut jobs = Vec::new();
    for &background in &p.backgrounds {
        for &gamma in &p.gammas {
            for trial in 0..p.seeds {
                for strategy in Strategy::BOTH {
                    jobs.push((background, gamma, trial, strategy));
                }
            }
        }
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
        .map_err(|e| crate::Error::Usage(format!("synth modularity: thread pool: {e}")))?;
    let done = std::sync::atomic::AtomicUsize::new(0);
    let total = jobs.len();
    let runs: Vec<RunRecord> = pool.install(|| {
        jobs.par_iter()
            .map(|&(background, gamma, trial, strategy)| {
                let seed = p.seed + trial as u64;
                let data = generate(p, background, gamma, seed);
                let outcome = run(p, &data, strategy, seed)?;
                let rec = RunRecord { background, gamma, trial, seed, strategy, outcome };
                progress(done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1, total, &rec);
                Ok(rec)
            })
            .collect::<Result<Vec<_>>>()
    })?;
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
            let ms = |v: &[f64]| {
                let (mean, sd) = mean_sd(v);
                MeanSd { mean, sd }
            };
            rows.push(SweepRow {
                background,
                gamma,
                random: ms(&random),
                correlation: ms(&correlation),
                gain: ms(&gains),
            });
        }
    }
    Ok(SweepReport {
        experiment: "modularity".into(),
        rows,
        runs,
        seeds: p.seeds,
        epochs: p.epochs,
        incoherent: p.incoherent,
        threads,
        seconds: start.elapsed().as_secs_f64(),
        json: None,
        plot: None,
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tiny_sweep_has_one_row_per_background_and_gamma_and_paired_runs() {
        let p = ModularityParams {
            samples: 150,
            train_samples: 100,
            test_samples: 50,
            epochs: 1,
            seeds: 2,
            gammas: vec![0.0, 1.0],
            backgrounds: vec![Background::Mean],
            threads: 2,
            ..Default::default()
        };
        let r = sweep(&p, &|_, _, _| {}).unwrap();
        assert_eq!(r.rows.len(), 2);
        assert_eq!(r.runs.len(), 2 * 2 * 2);
        for row in &r.rows {
            assert!((0.0..=1.0).contains(&row.random.mean) && (0.0..=1.0).contains(&row.correlation.mean));
            assert!((row.gain.mean - (row.correlation.mean - row.random.mean)).abs() < 1e-12);
        }
        // Deterministic whatever the thread count.
        let q = ModularityParams { threads: 1, ..p };
        let again = sweep(&q, &|_, _, _| {}).unwrap();
        let accs = |r: &SweepReport| r.runs.iter().map(|x| x.outcome.accuracy).collect::<Vec<_>>();
        assert_eq!(accs(&r), accs(&again));
        assert!(markdown_table(&r).lines().count() == 4);
    }
}
