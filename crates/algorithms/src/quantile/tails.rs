//! Folding a sketch's outermost pages into counts of the values below and above its window.
//!
//! A gene's buckets keep widening as cells reach rarer values at the edges of its range, so
//! memory that follows the buckets grows with the cells (BENCHMARKS "Atlas scale", session 49).
//! The median needs only the buckets of the middle ranks: the values at the edges matter by
//! their number alone. So an end page whose values all rank below the lower middle rank (or above
//! the upper one) can be replaced by a count without changing the median, as long as later values
//! do not move the median into it. Whether they did is known exactly at the end
//! ([`LogQuantileSketch::median_folded`]); a caller then counts that sketch again in full.

use super::{LogQuantileSketch, PAGE};

/// An end of a sketch's window.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Side {
    Low,
    High,
}

impl LogQuantileSketch {
    /// Values counted below and above the window (folded out of the buckets).
    pub fn folded(&self) -> (u64, u64) {
        (self.below, self.above)
    }

    /// Whether a middle rank lies in a folded tail, so [`Self::median`] has no estimate.
    pub fn median_folded(&self) -> bool {
        self.count > 0 && !(self.in_window((self.count - 1) / 2) && self.in_window(self.count / 2))
    }

    /// How far the end page on `side` lies from the middle ranks: the number of values between
    /// its values and the nearest middle rank, when all of them rank strictly beyond it (so
    /// [`Self::fold_end_page`] keeps the median); `None` when there is no such page.
    pub fn end_page_margin(&self, side: Side) -> Option<u64> {
        let (_, values) = self.end_page(side)?;
        match side {
            // The folded values would rank below + values − 1 at most; the lower middle rank
            // must stay above that.
            Side::Low => ((self.count - 1) / 2).checked_sub(self.below + values),
            // They would rank count − above − values at least; the upper middle rank below that.
            Side::High => (self.count - self.above).checked_sub(values + self.count / 2 + 1),
        }
    }

    /// Folds the end page on `side` (and any overflow key beyond its inner edge) into the
    /// count below or above the window. Returns false when there is no page to fold.
    pub fn fold_end_page(&mut self, side: Side) -> bool {
        let Some((edge, _)) = self.end_page(side) else { return false };
        match side {
            Side::Low => self.fold_below(edge),
            Side::High => self.fold_above(edge),
        }
        true
    }

    /// The page on `side` that folding would remove: the inner edge of the window it leaves
    /// (the first key kept for `Low`, the last for `High`) and how many values would fold.
    fn end_page(&self, side: Side) -> Option<(i32, u64)> {
        let i = match side {
            Side::Low => self.pages.iter().position(Option::is_some)?,
            Side::High => self.pages.iter().rposition(Option::is_some)?,
        };
        let first = (self.first_page + i as i32) * PAGE;
        let in_page: u64 = self.pages[i].as_ref().map_or(0, |p| p.iter().map(|&n| u64::from(n)).sum());
        let (edge, overflow) = match side {
            Side::Low => {
                let edge = first + PAGE;
                (edge, self.overflow.range(..edge).map(|(_, &n)| n).sum::<u64>())
            }
            Side::High => {
                let edge = first - 1;
                (edge, self.overflow.range(first..).map(|(_, &n)| n).sum::<u64>())
            }
        };
        Some((edge, in_page + overflow))
    }

    /// Counts every bucket with a key below `key` in `below` instead, and keeps counting such
    /// keys there.
    pub(super) fn fold_below(&mut self, key: i32) {
        if key <= self.window.0 {
            return;
        }
        self.window.0 = key;
        let kept = self.overflow.split_off(&key);
        self.below += std::mem::replace(&mut self.overflow, kept).into_values().sum::<u64>();
        for (i, slot) in self.pages.iter_mut().enumerate() {
            let first = (self.first_page + i as i32) * PAGE;
            if first >= key {
                break;
            }
            let Some(page) = slot else { continue };
            let cut = ((key - first) as usize).min(PAGE as usize);
            self.below += page[..cut].iter().map(|&n| u64::from(n)).sum::<u64>();
            page[..cut].fill(0);
            if cut == PAGE as usize {
                *slot = None;
                self.held -= 1;
            }
        }
        let empty = self.pages.iter().take_while(|p| p.is_none()).count();
        self.pages.drain(..empty);
        self.first_page += empty as i32;
    }

    /// Counts every bucket with a key above `key` in `above` instead, and keeps counting such
    /// keys there.
    pub(super) fn fold_above(&mut self, key: i32) {
        if key >= self.window.1 {
            return;
        }
        self.window.1 = key;
        let folded = self.overflow.split_off(&(key + 1));
        self.above += folded.into_values().sum::<u64>();
        for (i, slot) in self.pages.iter_mut().enumerate().rev() {
            let first = (self.first_page + i as i32) * PAGE;
            if first + PAGE - 1 <= key {
                break;
            }
            let Some(page) = slot else { continue };
            let keep = (key + 1 - first).clamp(0, PAGE) as usize;
            self.above += page[keep..].iter().map(|&n| u64::from(n)).sum::<u64>();
            page[keep..].fill(0);
            if keep == 0 {
                *slot = None;
                self.held -= 1;
            }
        }
        let empty = self.pages.iter().rev().take_while(|p| p.is_none()).count();
        self.pages.truncate(self.pages.len() - empty);
    }
}

#[cfg(test)]
mod tests {
    use super::super::PAGE_BYTES;
    use super::*;
    use proptest::prelude::*;

    fn sketch(values: &[f64], alpha: f64) -> LogQuantileSketch {
        let mut s = LogQuantileSketch::new(alpha);
        values.iter().for_each(|&x| s.add(x));
        s
    }

    #[test]
    fn a_page_holds_its_bytes_of_counts() {
        assert_eq!(PAGE_BYTES, 512);
        let s = sketch(&[1.0, 1.0001, 1e6], 0.001);
        assert_eq!(s.pages(), 2);
    }

    #[test]
    fn folding_the_tails_keeps_the_median_and_counts_what_it_folds() {
        // Values over six orders of magnitude: many pages at alpha 0.001.
        let values: Vec<f64> = (1..=2001).map(|i| 1e-3 * 1.01f64.powi(i)).collect();
        let whole = sketch(&values, 0.001);
        let mut s = whole.clone();
        let pages = s.pages();
        while s.end_page_margin(Side::Low).is_some() {
            assert!(s.fold_end_page(Side::Low));
        }
        while s.end_page_margin(Side::High).is_some() {
            assert!(s.fold_end_page(Side::High));
        }
        assert!(s.pages() < pages / 4, "{} of {pages} pages left", s.pages());
        let (below, above) = s.folded();
        assert!(below > 900 && above > 900, "{below} {above}");
        assert_eq!(s.count(), 2001);
        assert!(!s.median_folded());
        assert_eq!(s.median().map(f64::to_bits), whole.median().map(f64::to_bits));
    }

    #[test]
    fn a_median_that_moves_into_a_folded_tail_is_reported() {
        let mut s = sketch(&[1.0, 2.0, 3.0, 1000.0], 0.001);
        s.fold_end_page(Side::High); // 1000's page: its value ranks above both middle ranks
        assert_eq!(s.folded(), (0, 1));
        assert!(!s.median_folded());
        for _ in 0..10 {
            s.add(2000.0); // beyond the window: counted above, the median moves there
        }
        assert_eq!(s.folded(), (0, 11));
        assert!(s.median_folded());
        assert_eq!(s.median(), None);
    }

    #[test]
    fn merging_a_folded_sketch_folds_the_same_keys() {
        let values: Vec<f64> = (1..=600).map(|i| 1e-2 * 1.02f64.powi(i)).collect();
        let mut a = sketch(&values[..300], 0.001);
        a.fold_end_page(Side::Low);
        let b = sketch(&values[300..], 0.001);
        let mut merged = b.clone();
        merged.merge(&a);
        let mut folded_whole = sketch(&values, 0.001);
        folded_whole.fold_below(a.window.0);
        assert_eq!(merged, folded_whole);
        assert_eq!(merged.median(), sketch(&values, 0.001).median());
    }

    proptest! {
        /// Folding any end page whose margin allows it, in any order, leaves the median the
        /// unfolded sketch gives, bit for bit; more values added afterwards either keep it so
        /// or are reported as folded.
        #[test]
        fn folding_within_the_margins_never_changes_a_median(
            first in proptest::collection::vec(prop_oneof![1e-3f64..1e-1, 1e-1f64..1e3, 1e3f64..1e6], 1..300),
            later in proptest::collection::vec(prop_oneof![1e-3f64..1e-1, 1e-1f64..1e3, 1e3f64..1e6], 0..300),
            sides in proptest::collection::vec(prop_oneof![Just(Side::Low), Just(Side::High)], 0..40),
            alpha in prop_oneof![Just(1e-6), Just(0.001), Just(0.01)],
        ) {
            let mut s = sketch(&first, alpha);
            for side in sides {
                if s.end_page_margin(side).is_some() {
                    s.fold_end_page(side);
                }
            }
            prop_assert!(!s.median_folded());
            prop_assert_eq!(s.median().map(f64::to_bits), sketch(&first, alpha).median().map(f64::to_bits));
            later.iter().for_each(|&x| s.add(x));
            let all: Vec<f64> = first.iter().chain(&later).copied().collect();
            let whole = sketch(&all, alpha);
            prop_assert_eq!(s.count(), whole.count());
            if !s.median_folded() {
                prop_assert_eq!(s.median().map(f64::to_bits), whole.median().map(f64::to_bits));
            }
        }
    }
}
