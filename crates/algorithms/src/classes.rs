//! Supervised classification bookkeeping shared by fine-tuning and the embedding probes: a
//! seeded stratified train/validation/test split, class weights, and F1 scores.

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// Which part of a split an item is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Part {
    Train,
    Validation,
    Test,
}

/// Splits labelled items (`None`: unlabelled, left out) per class: a seeded shuffle of the
/// class, then `⌈f_val·n⌉` items to validation and `⌈f_test·n⌉` to test, the rest to training.
/// A class keeps at least one training item: classes of one item go to training only, and the
/// evaluation parts shrink (test first) when rounding up would take every item.
pub fn stratified_split(labels: &[Option<usize>], validation: f64, test: f64, seed: u64) -> Vec<Option<Part>> {
    let classes = labels.iter().flatten().max().map_or(0, |&c| c + 1);
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); classes];
    for (i, l) in labels.iter().enumerate() {
        if let Some(c) = l {
            members[*c].push(i);
        }
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut part = vec![None; labels.len()];
    for items in &mut members {
        items.shuffle(&mut rng);
        let n = items.len();
        let take = |f: f64| if f > 0.0 { (f * n as f64).ceil() as usize } else { 0 };
        let spare = n.saturating_sub(1);
        let n_val = take(validation).min(spare);
        let n_test = take(test).min(spare - n_val);
        for (j, &i) in items.iter().enumerate() {
            part[i] = Some(if j < n_val {
                Part::Validation
            } else if j < n_val + n_test {
                Part::Test
            } else {
                Part::Train
            });
        }
    }
    part
}

/// scikit-learn's "balanced" class weights, `n / (k·n_c)` over the `k` classes present; a class
/// without items gets weight 0 (it cannot appear in the loss).
pub fn balanced_weights(counts: &[usize]) -> Vec<f64> {
    let n: usize = counts.iter().sum();
    let k = counts.iter().filter(|&&c| c > 0).count();
    counts.iter().map(|&c| if c == 0 { 0.0 } else { n as f64 / (k as f64 * c as f64) }).collect()
}

/// Per-class F1 (NaN for classes without true items) and the number of true items per class.
pub fn f1_scores(truth: &[usize], pred: &[usize], classes: usize) -> (Vec<f64>, Vec<usize>) {
    let (mut tp, mut fp, mut fne, mut support) =
        (vec![0usize; classes], vec![0usize; classes], vec![0usize; classes], vec![0usize; classes]);
    for (&t, &p) in truth.iter().zip(pred) {
        support[t] += 1;
        if t == p {
            tp[t] += 1;
        } else {
            fp[p] += 1;
            fne[t] += 1;
        }
    }
    let f1 = (0..classes)
        .map(|c| {
            let d = 2 * tp[c] + fp[c] + fne[c];
            if support[c] == 0 {
                f64::NAN
            } else if d == 0 {
                0.0
            } else {
                2.0 * tp[c] as f64 / d as f64
            }
        })
        .collect();
    (f1, support)
}

/// The index of the largest value (the first on ties): the predicted class of a row of
/// probabilities.
pub fn argmax(row: &[f32]) -> usize {
    row.iter().enumerate().fold(0, |best, (c, &p)| if p > row[best] { c } else { best })
}

/// The mean of the defined (non-NaN) values: macro-F1 over the classes that occur.
pub fn macro_mean(values: &[f64]) -> f64 {
    let defined: Vec<f64> = values.iter().copied().filter(|v| !v.is_nan()).collect();
    if defined.is_empty() {
        f64::NAN
    } else {
        defined.iter().sum::<f64>() / defined.len() as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_is_per_class_disjoint_seeded_and_keeps_a_training_item_per_class() {
        let labels: Vec<Option<usize>> =
            (0..200).map(|i| if i % 10 == 9 { None } else { Some(usize::from(i % 3 == 0)) }).collect();
        let a = stratified_split(&labels, 0.1, 0.2, 7);
        assert_eq!(a, stratified_split(&labels, 0.1, 0.2, 7));
        assert_ne!(a, stratified_split(&labels, 0.1, 0.2, 8));
        for c in 0..2 {
            let of = |p: Part| (0..200).filter(|&i| labels[i] == Some(c) && a[i] == Some(p)).count();
            let n = labels.iter().filter(|l| **l == Some(c)).count();
            assert_eq!(of(Part::Validation), (0.1 * n as f64).ceil() as usize);
            assert_eq!(of(Part::Test), (0.2 * n as f64).ceil() as usize);
            assert_eq!(of(Part::Train) + of(Part::Validation) + of(Part::Test), n);
        }
        assert!((0..200).all(|i| labels[i].is_some() == a[i].is_some()));
        // A singleton class trains only; a pair gives one item to validation.
        let small = stratified_split(&[Some(0), Some(1), Some(1)], 0.5, 0.5, 1);
        assert_eq!(small[0], Some(Part::Train));
        let mut pair = vec![small[1].unwrap(), small[2].unwrap()];
        pair.sort_by_key(|p| *p as u8);
        assert_eq!(pair, vec![Part::Train, Part::Validation]);
    }

    #[test]
    fn balanced_weights_equalise_class_totals() {
        let w = balanced_weights(&[30, 10, 0]);
        assert!((w[0] * 30.0 - w[1] * 10.0).abs() < 1e-12 && w[2] == 0.0);
        assert!((w[0] * 30.0 + w[1] * 10.0 - 40.0).abs() < 1e-9);
    }

    #[test]
    fn f1_counts_false_positives_against_the_predicted_class_and_skips_untested_classes() {
        let (f1, support) = f1_scores(&[0, 0, 1, 1], &[0, 1, 1, 1], 3);
        assert_eq!(support, vec![2, 2, 0]);
        assert!((f1[0] - 2.0 / 3.0).abs() < 1e-12 && (f1[1] - 0.8).abs() < 1e-12 && f1[2].is_nan());
        assert!((macro_mean(&f1) - (2.0 / 3.0 + 0.8) / 2.0).abs() < 1e-12);
    }
}
