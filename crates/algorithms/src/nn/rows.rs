//! The element-wise row passes of fused attention (softmax with dropout forward; probabilities
//! and score gradients backward), compiled for AVX-512, AVX2 + FMA or baseline x86-64 and chosen
//! at run time. Reductions use 16 fixed lanes, so the order of a sum depends only on the row.

use super::dropout::{element_hash, DropoutKey};

const LANES: usize = 16;

/// `exp(x)` for `x ≤ 0` in branch-free arithmetic that vectorizes (Cody–Waite reduction and a
/// degree-6 polynomial; relative error below 4e-7 on `[-87, 0]`, inputs below −87 give ~1e-38).
#[inline(always)]
fn exp_nonpositive(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    const ROUND: f32 = 12_582_912.0; // 1.5 · 2^23: adding and subtracting rounds to an integer
    let x = x.clamp(-87.0, 0.0);
    let n = (x * LOG2E + ROUND) - ROUND;
    let r = (x - n * LN2_HI) - n * LN2_LO;
    let p = 1.0 + r * (1.0 + r * (0.5 + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0))))));
    let scale = f32::from_bits(((n as i32 + 127) << 23) as u32);
    p * scale
}

#[inline(always)]
fn lane_max(row: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    let chunks = row.chunks_exact(LANES);
    let tail = chunks.remainder();
    for c in chunks {
        for l in 0..LANES {
            acc[l] = acc[l].max(c[l]);
        }
    }
    tail.iter().fold(acc.iter().fold(f32::NEG_INFINITY, |m, &a| m.max(a)), |m, &a| m.max(a))
}

#[inline(always)]
fn lane_sum(row: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let chunks = row.chunks_exact(LANES);
    let tail = chunks.remainder();
    for c in chunks {
        for l in 0..LANES {
            acc[l] += c[l];
        }
    }
    acc.iter().sum::<f32>() + tail.iter().sum::<f32>()
}

/// The dropout of one row: its seed and the original column of each packed column.
pub(crate) struct RowDropout<'a> {
    pub key: DropoutKey,
    pub seed: u32,
    pub cols: &'a [u32],
}

#[inline(always)]
fn factor(drop: &Option<RowDropout<'_>>, j: usize) -> f32 {
    match drop {
        None => 1.0,
        Some(d) => {
            if element_hash(d.seed, d.cols[j]) < d.key.threshold() {
                0.0
            } else {
                d.key.keep_scale()
            }
        }
    }
}

/// Scores → dropped-out probabilities in place; returns the row's log-sum-exp.
#[inline(always)]
fn softmax_dropout_body(s: &mut [f32], drop: &Option<RowDropout<'_>>) -> f32 {
    let max = lane_max(s);
    for v in s.iter_mut() {
        *v = exp_nonpositive(*v - max);
    }
    let sum = lane_sum(s);
    let inv = 1.0 / sum;
    match drop {
        None => s.iter_mut().for_each(|v| *v *= inv),
        Some(_) => s.iter_mut().enumerate().for_each(|(j, v)| *v *= inv * factor(drop, j)),
    }
    max + sum.ln()
}

/// Scores → probabilities `p = exp(s − lse)` in `s`, and dropped-out probabilities in `pd`.
#[inline(always)]
fn probs_body(s: &mut [f32], pd: &mut [f32], lse: f32, drop: &Option<RowDropout<'_>>) {
    for v in s.iter_mut() {
        *v = exp_nonpositive(*v - lse);
    }
    match drop {
        None => pd.copy_from_slice(s),
        Some(_) => pd.iter_mut().zip(s.iter()).enumerate().for_each(|(j, (o, &p))| *o = p * factor(drop, j)),
    }
}

/// Gradient of the dropped-out probabilities → gradient of the scores, in place:
/// `ds = p · (dpd · m − delta)` where `delta = Σ dO · O` of the row.
#[inline(always)]
fn score_grad_body(p: &[f32], dp: &mut [f32], delta: f32, drop: &Option<RowDropout<'_>>) {
    match drop {
        None => dp.iter_mut().zip(p).for_each(|(g, &p)| *g = p * (*g - delta)),
        Some(_) => dp.iter_mut().zip(p).enumerate().for_each(|(j, (g, &p))| *g = p * (*g * factor(drop, j) - delta)),
    }
}

/// `x ← exp(x)` over a row of non-positive values; returns the row's sum.
#[inline(always)]
fn exp_row_body(row: &mut [f32]) -> f32 {
    for v in row.iter_mut() {
        *v = exp_nonpositive(*v);
    }
    lane_sum(row)
}

macro_rules! dispatched {
    ($name:ident, $body:ident, ($($arg:ident: $ty:ty),*) -> $ret:ty) => {
        pub(crate) fn $name($($arg: $ty),*) -> $ret {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx2,fma")]
                unsafe fn avx512($($arg: $ty),*) -> $ret { $body($($arg),*) }
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2($($arg: $ty),*) -> $ret { $body($($arg),*) }
                if std::arch::is_x86_feature_detected!("avx512f") {
                    // SAFETY: the CPU has the features the function is compiled for.
                    return unsafe { avx512($($arg),*) };
                }
                if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
                    // SAFETY: as above.
                    return unsafe { avx2($($arg),*) };
                }
            }
            $body($($arg),*)
        }
    };
}

dispatched!(softmax_dropout, softmax_dropout_body, (s: &mut [f32], drop: &Option<RowDropout<'_>>) -> f32);
dispatched!(probs, probs_body, (s: &mut [f32], pd: &mut [f32], lse: f32, drop: &Option<RowDropout<'_>>) -> ());
dispatched!(score_grad, score_grad_body, (p: &[f32], dp: &mut [f32], delta: f32, drop: &Option<RowDropout<'_>>) -> ());

dispatched!(exp_nonpositive_row, exp_row_body, (row: &mut [f32]) -> f32);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_exp_is_within_4e7_relative_of_std() {
        let mut worst = 0f32;
        for i in 0..=870_000 {
            let x = -(i as f32) * 1e-4;
            let rel = (exp_nonpositive(x) - x.exp()).abs() / x.exp();
            worst = worst.max(rel);
        }
        assert!(worst < 4e-7, "worst relative error {worst}");
    }

    #[test]
    fn softmax_row_sums_to_one_and_returns_log_sum_exp() {
        let mut s: Vec<f32> = (0..37).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
        let want_lse = s.iter().map(|v| f64::from(*v).exp()).sum::<f64>().ln();
        let lse = softmax_dropout(&mut s, &None);
        assert!((f64::from(lse) - want_lse).abs() < 1e-5);
        assert!((s.iter().sum::<f32>() - 1.0).abs() < 1e-5);
    }
}
