//! A classifier that has collapsed onto one class (or scores no better than always naming the
//! largest one) still reports an accuracy, often a fair-looking one on unbalanced labels; the
//! summary says so instead of leaving it to be found in the predictions.

/// Predicting one class for at least this share of the items is a collapse (unless about that
/// share of the items are that class).
const ONE_CLASS_SHARE: f64 = 0.9;
/// Macro-F1 within this factor of the constant predictor's is "near chance".
const NEAR_CHANCE: f64 = 1.1;

/// The warning for predictions `pred` of items of classes `truth` (`k` classes), when the
/// classifier predicts about one class only or its macro-F1 is near that of always predicting
/// the largest class.
pub(crate) fn collapse_warning(
    truth: &[usize],
    pred: &[usize],
    k: usize,
    classes: &[String],
    macro_f1: f64,
) -> Option<String> {
    let n = truth.len();
    if k < 2 || n == 0 {
        return None;
    }
    let count = |of: &[usize]| {
        let mut c = vec![0usize; k];
        of.iter().for_each(|&x| c[x.min(k - 1)] += 1);
        c
    };
    let (predicted, actual) = (count(pred), count(truth));
    let top = (0..k).max_by_key(|&c| predicted[c]).unwrap_or(0);
    let top_share = predicted[top] as f64 / n as f64;
    let top_truth = actual[top] as f64 / n as f64;
    // Macro-F1 of always predicting the largest class: its F1 is 2p/(1+p), every other class' 0.
    let p = *actual.iter().max().unwrap_or(&0) as f64 / n as f64;
    let chance = 2.0 * p / (1.0 + p) / k as f64;
    let one_class = top_share >= ONE_CLASS_SHARE && top_share - top_truth >= 0.1;
    let near_chance = macro_f1 <= NEAR_CHANCE * chance;
    (one_class || near_chance).then(|| {
        format!(
            "the classifier looks collapsed: it predicts '{}' for {:.0}% of the items (which are {:.0}% of them), \
             macro-F1 {macro_f1:.3} against {chance:.3} for always predicting the largest class; try \
             --class-weights, a lower --lr, more --epochs or fewer --freeze-layers",
            classes.get(top).map_or("?", String::as_str),
            100.0 * top_share,
            100.0 * top_truth
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(k: usize) -> Vec<String> {
        (0..k).map(|c| format!("c{c}")).collect()
    }

    #[test]
    fn one_class_for_every_item_is_flagged_and_a_working_classifier_is_not() {
        // Ten classes of ten items each, everything called class 0: macro-F1 (2·0.1/1.1)/10.
        let truth: Vec<usize> = (0..100).map(|i| i % 10).collect();
        let all_zero = vec![0; 100];
        let w = collapse_warning(&truth, &all_zero, 10, &names(10), 0.018).unwrap();
        assert!(w.contains("'c0' for 100%") && w.contains("which are 10%"), "{w}");
        // Right on 90% of items, spread over the classes.
        let good: Vec<usize> =
            truth.iter().enumerate().map(|(i, &t)| if i % 10 == 3 { (t + 1) % 10 } else { t }).collect();
        assert!(collapse_warning(&truth, &good, 10, &names(10), 0.9).is_none());
    }

    #[test]
    fn a_dominant_class_predicted_as_often_as_it_occurs_is_not_a_collapse() {
        // 95% of the items are class 0 and the classifier finds the rare class well.
        let truth: Vec<usize> = (0..100).map(|i| usize::from(i >= 95)).collect();
        assert!(collapse_warning(&truth, &truth, 2, &names(2), 1.0).is_none());
        // Macro-F1 near the constant predictor's, though predictions are spread: flagged.
        let spread: Vec<usize> = (0..100).map(|i| i % 2).collect();
        assert!(collapse_warning(&truth, &spread, 2, &names(2), 0.5).is_some());
    }
}
