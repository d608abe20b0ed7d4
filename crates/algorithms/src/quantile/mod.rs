//! Streaming quantiles with a relative-error guarantee (log-bucket sketch, as in DDSketch).
//!
//! A positive value `x` falls in bucket `k = ⌈ln x / ln γ⌉`, with `γ = (1 + α) / (1 − α)`;
//! the bucket `(γ^(k−1), γ^k]` is represented by `2γ^k / (γ + 1)`, which is within a relative
//! error `α` of every value in the bucket. So the value returned for the element of rank `r`
//! is within `α·x_r` of the true `x_r`, whatever the data and however many values were added.
//! Exact-rank queries let [`LogQuantileSketch::median`] average the two middle elements as
//! `numpy.median` does, and keep the same `α` bound. Sketches merge exactly (bucket counts add),
//! so partial sketches from workers or atlases combine without loss.
//!
//! A sketch may also fold the buckets at either end of its range into a count of the values
//! below or above its window ([`tails`]), so that many sketches fit a fixed memory budget; a rank
//! that falls in a folded tail then has no estimate, and the caller counts that sketch again.

use std::collections::BTreeMap;

mod tails;
pub use tails::Side;

/// Consecutive bucket keys per page of counts. Pages of 32 were tried (session 49): `vocab
/// build` took 7% less memory at 65k cells but 1% more at 1M and 6% more at 4.2M, where most of
/// each gene's range is reached and the smaller pages' own overhead counts (BENCHMARKS "Atlas
/// scale").
const PAGE: i32 = 128;

/// Bytes of counts in one page, what [`LogQuantileSketch::pages`] counts in.
pub const PAGE_BYTES: usize = PAGE as usize * std::mem::size_of::<u32>();

/// Widest page table, in pages: 131,072 buckets, at alpha 0.001 values over a factor of e^262
/// (normalized expression spans ~e^21: counts ≥ 1 of totals ≤ 10^9, up to 10^4). Keys beyond
/// it (a far smaller alpha, or values from other scales) are counted in the overflow map.
const MAX_PAGES: i64 = 1 << 10;

/// The smallest `alpha` whose bucket keys fit an i32 for every finite positive f64
/// (|ln x| ≤ 745 over ln γ ≈ 2α).
pub const MIN_ALPHA: f64 = 1e-6;

/// Streaming quantile sketch of positive values with relative error `alpha`.
///
/// Bucket counts live in pages of [`PAGE`] consecutive keys, allocated when a key in them is
/// first added: a gene's buckets fill a contiguous middle range as cells arrive, so a page
/// holds them at 4 bytes each, where a map spent ~20 bytes per bucket and a tree descent per
/// add (half of `vocab build`'s time, and its memory grew with the cells until every bucket
/// of the range was present; measured in BENCHMARKS "Atlas scale").
#[derive(Clone, Debug)]
pub struct LogQuantileSketch {
    ln_gamma: f64,
    /// Page `i` holds keys `(first_page + i) * PAGE ..`; `None` where no key was added.
    pages: Vec<Option<Box<[u32; PAGE as usize]>>>,
    first_page: i32,
    /// Counts that did not fit a page: past a u32 (4.29 billion values in one bucket) or
    /// beyond [`MAX_PAGES`].
    overflow: BTreeMap<i32, u64>,
    /// Pages allocated (the `Some` entries of `pages`).
    held: usize,
    /// Values in keys below `window.0` and above `window.1`, folded out of the buckets.
    below: u64,
    above: u64,
    /// Keys counted in buckets: `window.0 ..= window.1` (the whole i32 range until folded).
    window: (i32, i32),
    count: u64,
}

impl PartialEq for LogQuantileSketch {
    /// Equal alpha and equal counts in every bucket, however they are stored.
    fn eq(&self, other: &Self) -> bool {
        self.ln_gamma == other.ln_gamma
            && self.count == other.count
            && (self.below, self.above, self.window) == (other.below, other.above, other.window)
            && self.buckets().eq(other.buckets())
    }
}

impl LogQuantileSketch {
    /// A sketch whose quantiles are within relative error `alpha` ([`MIN_ALPHA`] ≤ alpha < 1).
    pub fn new(alpha: f64) -> Self {
        assert!((MIN_ALPHA..1.0).contains(&alpha), "alpha must be in [{MIN_ALPHA}, 1)");
        let ln_gamma = ((1.0 + alpha) / (1.0 - alpha)).ln();
        Self {
            ln_gamma,
            pages: Vec::new(),
            first_page: 0,
            overflow: BTreeMap::new(),
            held: 0,
            below: 0,
            above: 0,
            window: (i32::MIN, i32::MAX),
            count: 0,
        }
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

    /// Pages of counts allocated, each [`PAGE_BYTES`] bytes: the memory that grows with the
    /// range the values reach.
    pub fn pages(&self) -> usize {
        self.held
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
        if n == 0 {
            return;
        }
        self.count += n;
        if key < self.window.0 {
            self.below += n;
            return;
        }
        if key > self.window.1 {
            self.above += n;
            return;
        }
        let paged = self.slot(key).and_then(|slot| {
            let sum = u32::try_from(n).ok().and_then(|n| slot.checked_add(n))?;
            *slot = sum;
            Some(())
        });
        if paged.is_none() {
            *self.overflow.entry(key).or_insert(0) += n;
        }
    }

    /// The count of bucket `key` in its page, allocated (and the page table widened) if
    /// needed; `None` when that would take the table past [`MAX_PAGES`].
    fn slot(&mut self, key: i32) -> Option<&mut u32> {
        let page = key.div_euclid(PAGE);
        if self.pages.is_empty() {
            self.first_page = page;
        }
        let last = self.first_page + self.pages.len().max(1) as i32 - 1;
        let (first, last) = (self.first_page.min(page), last.max(page));
        if i64::from(last) - i64::from(first) >= MAX_PAGES {
            return None;
        }
        if page < self.first_page {
            let before = (self.first_page - page) as usize;
            self.pages.splice(0..0, std::iter::repeat_with(|| None).take(before));
            self.first_page = page;
        }
        let i = (page - self.first_page) as usize;
        if i >= self.pages.len() {
            self.pages.resize_with(i + 1, || None);
        }
        if self.pages[i].is_none() {
            self.held += 1;
        }
        let counts = self.pages[i].get_or_insert_with(|| Box::new([0; PAGE as usize]));
        Some(&mut counts[key.rem_euclid(PAGE) as usize])
    }

    /// (key, count) of every non-empty bucket, in key order: the pages' and the overflow's,
    /// summed where both hold a key.
    fn buckets(&self) -> impl Iterator<Item = (i32, u64)> + '_ {
        let paged =
            self.pages.iter().enumerate().filter_map(|(i, p)| p.as_ref().map(|p| (i, p))).flat_map(move |(i, p)| {
                let first = (self.first_page + i as i32) * PAGE;
                p.iter().enumerate().filter(|(_, &n)| n > 0).map(move |(j, &n)| (first + j as i32, u64::from(n)))
            });
        let (mut paged, mut overflow) = (paged.peekable(), self.overflow.iter().map(|(&k, &n)| (k, n)).peekable());
        std::iter::from_fn(move || match (paged.peek().copied(), overflow.peek().copied()) {
            (Some((a, n)), Some((b, m))) if a == b => {
                paged.next();
                overflow.next();
                Some((a, n + m))
            }
            (Some((a, _)), Some((b, _))) if b < a => overflow.next(),
            (Some(_), _) => paged.next(),
            (None, _) => overflow.next(),
        })
    }

    /// Adds all of `other`'s values. Both sketches must share `alpha`. Where `other` has folded
    /// a tail, this sketch folds the same keys first, so the result is exact.
    pub fn merge(&mut self, other: &Self) {
        assert!((self.ln_gamma - other.ln_gamma).abs() < 1e-15, "cannot merge sketches with different alpha");
        self.fold_below(other.window.0);
        self.fold_above(other.window.1);
        self.below += other.below;
        self.above += other.above;
        self.count += other.below + other.above;
        for (k, n) in other.buckets() {
            self.add_to_bucket(k, n);
        }
    }

    /// Estimate of the element of 0-based rank `rank` in sorted order (`None` when out of range).
    pub fn value_at_rank(&self, rank: u64) -> Option<f64> {
        let (key, _) = self.bucket_of_rank(rank)?;
        let gamma = self.ln_gamma.exp();
        Some(2.0 * (f64::from(key) * self.ln_gamma).exp() / (gamma + 1.0))
    }

    /// The bucket holding the element of 0-based rank `rank`, and how many values lie in the
    /// buckets before it (`None` when out of range, or in a folded tail). A second pass can then
    /// count finer buckets inside that one bucket only ([`Self::median_in`]).
    pub fn bucket_of_rank(&self, rank: u64) -> Option<(i32, u64)> {
        if !self.in_window(rank) {
            return None;
        }
        let mut seen = self.below;
        for (key, n) in self.buckets() {
            if seen + n > rank {
                return Some((key, seen));
            }
            seen += n;
        }
        None
    }

    /// Whether the element of 0-based rank `rank` is in the buckets, not out of range or in a
    /// folded tail ([`tails`]).
    fn in_window(&self, rank: u64) -> bool {
        rank >= self.below && rank < self.count - self.above
    }

    /// The buckets of the two middle ranks, ⌊(n−1)/2⌋ and ⌊n/2⌋, and how many values lie below
    /// the first (`None` when empty): where a second pass must count ([`Self::median_in`]).
    pub fn median_buckets(&self) -> Option<(i32, i32, u64)> {
        let (lo, below) = self.bucket_of_rank(self.count.checked_sub(1)? / 2)?;
        let (hi, _) = self.bucket_of_rank(self.count / 2)?;
        Some((lo, hi, below))
    }

    /// The median of `count` values, `below` of which lie under the values this sketch holds:
    /// the values of the middle ranks must be in it. Equal to [`Self::median`] of a sketch with
    /// the same alpha that holds all `count` values, since the element of each rank falls in the
    /// same bucket.
    pub fn median_in(&self, count: u64, below: u64) -> Option<f64> {
        if count == 0 {
            return None;
        }
        let lo = self.value_at_rank(((count - 1) / 2).checked_sub(below)?)?;
        let hi = self.value_at_rank((count / 2).checked_sub(below)?)?;
        Some((lo + hi) / 2.0)
    }

    /// Estimate of the median, averaging the two middle elements for an even count
    /// (`numpy.median`'s definition); within relative error `alpha` of the exact median.
    /// `None` when empty or when a middle rank lies in a folded tail ([`Self::median_folded`]).
    pub fn median(&self) -> Option<f64> {
        self.median_in(self.count, 0)
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

    /// Every rank's value from a map of bucket counts, the representation the pages replaced.
    fn values_by_rank_of_a_map(s: &LogQuantileSketch, keys: &[(i32, u64)]) -> Vec<f64> {
        let mut map = BTreeMap::new();
        keys.iter().for_each(|&(k, n)| *map.entry(k).or_insert(0u64) += n);
        let gamma = s.ln_gamma.exp();
        map.iter()
            .flat_map(|(&k, &n)| {
                std::iter::repeat_n(2.0 * (f64::from(k) * s.ln_gamma).exp() / (gamma + 1.0), n as usize)
            })
            .collect()
    }

    #[test]
    fn counts_past_a_u32_and_keys_past_the_page_table_are_kept_exactly() {
        let mut s = LogQuantileSketch::new(0.001);
        let big = u64::from(u32::MAX);
        s.add_to_bucket(10, big);
        s.add_to_bucket(10, 5); // past the page's u32: the overflow map takes it
        s.add_to_bucket(-3, 2 * big); // more than a u32 at once
        let far = (MAX_PAGES as i32 + 2) * PAGE; // beyond the widest page table from key 10
        s.add_to_bucket(far, 1);
        s.add_to_bucket(-far, 1);
        assert_eq!(s.count(), 3 * big + 7);
        let keys: Vec<(i32, u64)> = s.buckets().collect();
        assert_eq!(keys, vec![(-far, 1), (-3, 2 * big), (10, big + 5), (far, 1)]);
        let at = |k: i32| 2.0 * (f64::from(k) * s.ln_gamma).exp() / (s.ln_gamma.exp() + 1.0);
        assert_eq!(s.value_at_rank(0), Some(at(-far)));
        assert_eq!(s.value_at_rank(2 * big), Some(at(-3)));
        assert_eq!(s.value_at_rank(2 * big + 1), Some(at(10)));
        assert_eq!(s.value_at_rank(3 * big + 6), Some(at(far)));
        assert_eq!(s.value_at_rank(3 * big + 7), None);
        let mut merged = LogQuantileSketch::new(0.001);
        merged.merge(&s);
        merged.merge(&s);
        let doubled: Vec<(i32, u64)> = keys.iter().map(|&(k, n)| (k, 2 * n)).collect();
        assert_eq!(merged.buckets().collect::<Vec<_>>(), doubled);
    }

    /// The two-pass median (`vocab build --two-pass`): a coarse sketch finds the buckets of
    /// the middle ranks, a fine one counts only the values in them.
    fn two_pass_median(values: &[f64], coarse_alpha: f64, alpha: f64) -> Option<f64> {
        let mut coarse = LogQuantileSketch::new(coarse_alpha);
        values.iter().for_each(|&x| coarse.add(x));
        let (lo, hi, below) = coarse.median_buckets()?;
        let mut fine = LogQuantileSketch::new(alpha);
        values.iter().filter(|&&x| coarse.bucket(x).is_some_and(|k| k == lo || k == hi)).for_each(|&x| fine.add(x));
        fine.median_in(coarse.count(), below)
    }

    #[test]
    fn bucket_of_rank_gives_the_bucket_and_the_count_below_it() {
        let mut s = LogQuantileSketch::new(0.05);
        [1.0, 1.0, 2.0, 50.0].iter().for_each(|&x| s.add(x));
        let (k1, k2, k50) = (s.bucket(1.0).unwrap(), s.bucket(2.0).unwrap(), s.bucket(50.0).unwrap());
        assert_eq!(s.bucket_of_rank(0), Some((k1, 0)));
        assert_eq!(s.bucket_of_rank(1), Some((k1, 0)));
        assert_eq!(s.bucket_of_rank(2), Some((k2, 2)));
        assert_eq!(s.bucket_of_rank(3), Some((k50, 3)));
        assert_eq!(s.bucket_of_rank(4), None);
        assert_eq!(LogQuantileSketch::new(0.05).median_in(0, 0), None);
    }

    proptest! {
        /// Two passes give the one-pass sketch's median bit for bit, for odd and even counts,
        /// middle elements in one coarse bucket or in two.
        #[test]
        fn the_two_pass_median_is_the_one_pass_median(
            values in proptest::collection::vec(prop_oneof![1e-3f64..1e-1, 1e-1f64..1e3, 1e3f64..1e6], 1..400),
            alpha in prop_oneof![Just(1e-6), Just(0.001), Just(0.01)],
        ) {
            let mut one = LogQuantileSketch::new(alpha);
            values.iter().for_each(|&x| one.add(x));
            let two = two_pass_median(&values, 0.05, alpha);
            prop_assert_eq!(two.map(f64::to_bits), one.median().map(f64::to_bits));
        }

        /// The pages (and, at a tiny alpha, the overflow map beside them) give every rank the
        /// value a map of bucket counts gives it, whatever order the values come in.
        #[test]
        fn pages_rank_every_value_as_a_map_of_buckets_does(
            values in proptest::collection::vec(prop_oneof![1e-6f64..1e-2, 1e-2f64..1e4, 1e4f64..1e9], 1..300),
            alpha in prop_oneof![Just(1e-6), Just(0.001), Just(0.05)],
        ) {
            let mut s = LogQuantileSketch::new(alpha);
            values.iter().for_each(|&x| s.add(x));
            let keys: Vec<(i32, u64)> = values.iter().map(|&x| (s.bucket(x).unwrap(), 1)).collect();
            let expected = values_by_rank_of_a_map(&s, &keys);
            let got: Vec<f64> = (0..s.count()).map(|r| s.value_at_rank(r).unwrap()).collect();
            prop_assert_eq!(got, expected);
        }

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
