//! How long a run is and why: the last step of its epochs, or `train.max_steps` when that comes
//! first. A `max_steps` the epochs do not reach is a surprise to anyone used to trainers where
//! it overrides the epochs, so it is said plainly (a warning and the summary), not silently cut.

use serde::{Deserialize, Serialize};

/// Which bound ends a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndsAt {
    /// The last step of the last epoch.
    #[default]
    Epochs,
    /// `train.max_steps`, within the epochs.
    MaxSteps,
}

/// A run's length: its epochs, their steps, the step cap and which of them ends it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunLength {
    pub epochs: usize,
    pub steps_per_epoch: u64,
    /// `train.max_steps` (0: none).
    pub max_steps: u64,
    pub ends_at: EndsAt,
}

impl RunLength {
    pub fn new(epochs: usize, steps_per_epoch: u64, max_steps: u64) -> Self {
        let epoch_steps = steps_per_epoch * epochs as u64;
        let ends_at = if max_steps > 0 && max_steps < epoch_steps { EndsAt::MaxSteps } else { EndsAt::Epochs };
        Self { epochs, steps_per_epoch, max_steps, ends_at }
    }

    /// Optimiser steps of the whole run.
    pub fn total(&self) -> u64 {
        match self.ends_at {
            EndsAt::Epochs => self.steps_per_epoch * self.epochs as u64,
            EndsAt::MaxSteps => self.max_steps,
        }
    }

    /// The epochs that would reach `max_steps`.
    fn epochs_for_max_steps(&self) -> u64 {
        self.max_steps.div_ceil(self.steps_per_epoch.max(1))
    }

    /// Why the run has the length it has, for the human summary.
    pub fn describe(&self) -> String {
        let plural = |n: u64, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
        match self.ends_at {
            EndsAt::MaxSteps => format!(
                "ends at train.max_steps {} of {} × {}",
                self.max_steps,
                plural(self.epochs as u64, "epoch"),
                plural(self.steps_per_epoch, "step")
            ),
            EndsAt::Epochs => format!(
                "ends after {} of {}",
                plural(self.epochs as u64, "epoch"),
                plural(self.steps_per_epoch, "step")
            ),
        }
    }

    /// The warning for a `max_steps` beyond the epochs' last step, naming the `--epochs` that
    /// would reach it.
    pub fn unreached_max_steps(&self) -> Option<String> {
        (self.max_steps > self.total()).then(|| {
            format!(
                "train.max_steps (--max-steps) is {} but train.epochs = {} gives only {} steps ({} per epoch): the run \
                 ends after its epochs; pass --epochs {} (or set train.epochs) to reach {} steps",
                self.max_steps,
                self.epochs,
                self.total(),
                self.steps_per_epoch,
                self.epochs_for_max_steps(),
                self.max_steps
            )
        })
    }
}

/// What a reader of a run's summary should not miss: a `max_steps` the epochs do not reach, and
/// a held-out accuracy at or below the unigram baseline (the model predicts masked genes no
/// better than their frequencies do).
pub fn summary_warnings(limit: &RunLength, eval_accuracy: Option<f64>, unigram_accuracy: Option<f64>) -> Vec<String> {
    let mut w: Vec<String> = limit.unreached_max_steps().into_iter().collect();
    if let (Some(acc), Some(unigram)) = (eval_accuracy, unigram_accuracy) {
        if acc <= unigram {
            w.push(format!(
                "held-out accuracy {acc:.4} is not above the unigram baseline {unigram:.4} (predicting each masked \
                     gene by its frequency): the model has not learnt more than gene frequencies yet; train longer \
                     (--max-steps, --epochs) or on more cells"
            ));
        }
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_steps_within_the_epochs_ends_the_run() {
        let l = RunLength::new(3, 100, 250);
        assert_eq!((l.ends_at, l.total()), (EndsAt::MaxSteps, 250));
        assert!(l.unreached_max_steps().is_none());
        assert!(l.describe().contains("max_steps 250"), "{}", l.describe());
    }

    #[test]
    fn max_steps_beyond_the_epochs_is_named_with_the_epochs_that_reach_it() {
        let l = RunLength::new(1, 120, 400);
        assert_eq!((l.ends_at, l.total()), (EndsAt::Epochs, 120));
        let w = l.unreached_max_steps().unwrap();
        assert!(w.contains("--epochs 4") && w.contains("only 120 steps"), "{w}");
        assert_eq!(l.describe(), "ends after 1 epoch of 120 steps");
        assert_eq!(RunLength::new(2, 50, 0).total(), 100);
        assert!(RunLength::new(2, 50, 0).unreached_max_steps().is_none());
    }
}
