//! Streaming quantiles with a relative-error guarantee (log-bucket sketch, as in DDSketch).
//!
//! A positive value `x` falls in bucket `k = ⌈ln x / ln γ⌉`, with `γ = (1 + α) / (1 − α)`;
//! the bucket `(γ^(k−1), γ^k]` is represented by `2γ^k / (γ + 1)`, which is within a relative
//! error `α` of every value in the bucket. So the value returned for the element of rank `r`
//! is within `α·x_r` of the true `x_r`, whatever the data and however many values were added.
//! Exact-rank queries let [`LogQuantileSketch::median`] average the two middle elements as
//! `numpy.median` does, and keep the same `α` bound. Sketches merge exactly (bucket counts add),
//! so partial sketches from workers or atlases combine without loss.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Streaming quantile sketch of positive values with relative error `alpha`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LogQuantileSketch {
    ln_gamma: f64,
    buckets: BTreeMap<i32, u64>,
    count: u64,
}

impl LogQuantileSketch {
    /// A sketch whose quantiles are within relative error `alpha` (0 < alpha < 1).
    pub fn new(alpha: f64) -> Self {
        assert!(alpha > 0.0 && alpha < 1.0, "alpha must be in (0, 1)");
        Self { ln_gamma: ((1.0 + alpha) / (1.0 - alpha)).ln(), buckets: BTreeMap::new(), count: 0 }
    }

    /// The relative error bound this sketch was built with.
    pub fn alpha(&self) -> f64 {
        let gamma = self.ln_gamma.exp();
        (gamma - 1.0) / (gamma + 1.0)
    }

    /// Number of values added.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Adds one value; values that are not finite and > 0 are ignored (they have no bucket).
    pub fn add(&mut self, x: f64) {
        if let Some(key) = self.bucket(x) {
            self.add_to_bucket(key, 1);
        }
    }

    /// The bucket `x` falls in (`None` when `x` is not finite and > 0). Equal for sketches
    /// that share `alpha`, so a caller can collect the buckets of many values and add each
    /// distinct one once ([`Self::add_to_bucket`]).
    pub fn bucket(&self, x: f64) -> Option<i32> {
        (x.is_finite() && x > 0.0).then(|| (x.ln() / self.ln_gamma).ceil() as i32)
    }

    /// Adds `n` values that fall in bucket `key` (from [`Self::bucket`] of a sketch with the
    /// same `alpha`).
    pub fn add_to_bucket(&mut self, key: i32, n: u64) {
        *self.buckets.entry(key).or_insert(0) += n;
        self.count += n;
    }

    /// Adds all of `other`'s values. Both sketches must share `alpha`.
    pub fn merge(&mut self, other: &Self) {
        assert!((self.ln_gamma - other.ln_gamma).abs() < 1e-15, "cannot merge sketches with different alpha");
        for (&k, &n) in &other.buckets {
            *self.buckets.entry(k).or_insert(0) += n;
        }
        self.count += other.count;
    }

    /// Estimate of the element of 0-based rank `rank` in sorted order (`None` when out of range).
    pub fn value_at_rank(&self, rank: u64) -> Option<f64> {
        if rank >= self.count {
            return None;
        }
        let mut seen = 0u64;
        for (&key, &n) in &self.buckets {
            seen += n;
            if seen > rank {
                let gamma = self.ln_gamma.exp();
                return Some(2.0 * (f64::from(key) * self.ln_gamma).exp() / (gamma + 1.0));
            }
        }
        None
    }

    /// Estimate of the median, averaging the two middle elements for an even count
    /// (`numpy.median`'s definition); within relative error `alpha` of the exact median.
    pub fn median(&self) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let lo = self.value_at_rank((self.count - 1) / 2)?;
        let hi = self.value_at_rank(self.count / 2)?;
        Some((lo + hi) / 2.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn exact_median(values: &mut [f64]) -> f64 {
        values.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let n = values.len();
        (values[(n - 1) / 2] + values[n / 2]) / 2.0
    }

    #[test]
    fn empty_sketch_has_no_median() {
        assert_eq!(LogQuantileSketch::new(0.01).median(), None);
    }

    #[test]
    fn ignores_zero_negative_and_non_finite_values() {
        let mut s = LogQuantileSketch::new(0.01);
        for x in [0.0, -1.0, f64::NAN, f64::INFINITY, 2.0] {
            s.add(x);
        }
        assert_eq!(s.count(), 1);
    }

    #[test]
    fn reports_its_alpha() {
        assert!((LogQuantileSketch::new(0.001).alpha() - 0.001).abs() < 1e-12);
    }

    #[test]
    fn merge_equals_adding_everything_to_one_sketch() {
        let (mut a, mut b, mut all) =
            (LogQuantileSketch::new(0.01), LogQuantileSketch::new(0.01), LogQuantileSketch::new(0.01));
        for i in 1..100 {
            let x = f64::from(i) * 0.37;
            if i % 3 == 0 {
                a.add(x)
            } else {
                b.add(x)
            }
            all.add(x);
        }
        a.merge(&b);
        assert_eq!(a, all);
    }

    #[test]
    fn adding_counted_buckets_equals_adding_the_values() {
        let (mut one_by_one, mut counted) = (LogQuantileSketch::new(0.001), LogQuantileSketch::new(0.001));
        let values: Vec<f64> = (0..300).map(|i| f64::from(i % 37) * 0.41 + 0.05).chain([0.0, -2.0, f64::NAN]).collect();
        let mut keys: Vec<i32> = values.iter().filter_map(|&x| counted.bucket(x)).collect();
        keys.sort_unstable();
        for run in keys.chunk_by(|a, b| a == b) {
            counted.add_to_bucket(run[0], run.len() as u64);
        }
        values.iter().for_each(|&x| one_by_one.add(x));
        assert_eq!(counted, one_by_one);
        assert_eq!(counted.count(), 300);
    }

    proptest! {
        #[test]
        fn median_is_within_relative_alpha_of_exact(
            values in proptest::collection::vec(1e-4f64..1e5, 1..500),
            alpha in prop_oneof![Just(0.001), Just(0.01), Just(0.05)],
        ) {
            let mut s = LogQuantileSketch::new(alpha);
            for &x in &values { s.add(x); }
            let exact = exact_median(&mut values.clone());
            let est = s.median().unwrap();
            prop_assert!((est - exact).abs() <= alpha * exact * (1.0 + 1e-9),
                "estimate {est} exact {exact} alpha {alpha}");
        }
    }
}
