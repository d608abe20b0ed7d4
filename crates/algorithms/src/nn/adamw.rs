//! AdamW over all of a model's parameters in one parallel pass, with the clipping by the global
//! gradient norm folded in: each element's gradient is read once, its two moments are updated in
//! place and its parameter written, instead of the dozen tensor operations (and temporaries) per
//! parameter of the composed update.
//!
//! The arithmetic is burn's `AdamW` step in the same order and the same `f32`/`f64` roundings,
//! so the fused update gives the composition's bits. Work is split into fixed chunks of
//! elements, each updated independently, and the squared norm is summed in fixed blocks whose
//! `f64` partials are added in order: no result depends on the thread count.

use rayon::prelude::*;

/// Elements per unit of parallel work in the update.
const CHUNK: usize = 16_384;
/// Elements per partial sum of the squared norm.
const BLOCK: usize = 8_192;

/// AdamW's hyper-parameters, as burn's `AdamWConfig` names them (its defaults).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamWHyper {
    pub beta_1: f32,
    pub beta_2: f32,
    pub epsilon: f32,
    pub weight_decay: f32,
}

impl Default for AdamWHyper {
    fn default() -> Self {
        AdamWHyper { beta_1: 0.9, beta_2: 0.999, epsilon: 1e-5, weight_decay: 1e-4 }
    }
}

/// The scalars of one parameter's update at one step, rounded as burn's composition rounds them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamWConstants {
    /// Multiplier of each gradient element (the clipping coefficient); `None`: not scaled.
    pub grad_scale: Option<f32>,
    pub beta_1: f32,
    pub beta_2: f32,
    pub factor_1: f32,
    pub factor_2: f32,
    /// Bias corrections `1 − βᵢᵗ`.
    pub correction_1: f32,
    pub correction_2: f32,
    pub epsilon: f32,
    /// `1 − lr · weight_decay`.
    pub decay: f32,
    pub lr: f32,
}

impl AdamWConstants {
    /// The constants for learning rate `lr` at the parameter's `time`-th update (1 for the first).
    pub fn new(h: &AdamWHyper, lr: f64, time: usize, grad_scale: Option<f64>) -> Self {
        let t = time.min(i32::MAX as usize) as i32;
        AdamWConstants {
            grad_scale: grad_scale.map(|s| s as f32),
            beta_1: h.beta_1,
            beta_2: h.beta_2,
            factor_1: 1.0 - h.beta_1,
            factor_2: 1.0 - h.beta_2,
            correction_1: 1f32 - h.beta_1.powi(t),
            correction_2: 1f32 - h.beta_2.powi(t),
            epsilon: h.epsilon,
            decay: (1.0 - lr * f64::from(h.weight_decay)) as f32,
            lr: lr as f32,
        }
    }
}

/// One parameter's update: its values and moments (updated in place) and its gradient. All four
/// have the parameter's length.
pub struct AdamWSegment<'a> {
    pub param: &'a mut [f32],
    pub grad: &'a [f32],
    pub moment_1: &'a mut [f32],
    pub moment_2: &'a mut [f32],
    pub constants: AdamWConstants,
}

/// Updates every segment's parameter and moments in place.
///
/// # Panics
/// If a segment's slices differ in length (a caller's bug, not input data).
pub fn adamw_update(segments: Vec<AdamWSegment<'_>>) {
    let mut units = Vec::new();
    for s in segments {
        let n = s.param.len();
        assert!(
            s.grad.len() == n && s.moment_1.len() == n && s.moment_2.len() == n,
            "adamw: a parameter's gradient or moments differ in length"
        );
        let pieces = s
            .param
            .chunks_mut(CHUNK)
            .zip(s.grad.chunks(CHUNK))
            .zip(s.moment_1.chunks_mut(CHUNK))
            .zip(s.moment_2.chunks_mut(CHUNK));
        units.extend(pieces.map(|(((p, g), m), v)| (p, g, m, v, s.constants)));
    }
    units.into_par_iter().for_each(|(p, g, m, v, k)| update_chunk(p, g, m, v, &k));
}

/// Disjoint mutable views of `buffer` at `(offset, len)` spans, in the order given.
///
/// # Panics
/// If a span overlaps another or ends past the buffer (a caller's bug, not input data).
pub fn split_spans<'a>(buffer: &'a mut [f32], spans: &[(usize, usize)]) -> Vec<&'a mut [f32]> {
    let mut order: Vec<usize> = (0..spans.len()).collect();
    order.sort_by_key(|&i| spans[i].0);
    let mut views: Vec<Option<&'a mut [f32]>> = spans.iter().map(|_| None).collect();
    let (mut rest, mut at) = (buffer, 0usize);
    for i in order {
        let (offset, len) = spans[i];
        assert!(offset >= at && offset - at + len <= rest.len(), "adamw: moment spans overlap or overrun the buffer");
        let (_, tail) = std::mem::take(&mut rest).split_at_mut(offset - at);
        let (view, tail) = tail.split_at_mut(len);
        views[i] = Some(view);
        rest = tail;
        at = offset + len;
    }
    views.into_iter().map(|v| v.unwrap_or_default()).collect()
}

fn update_chunk(p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32], k: &AdamWConstants) {
    for i in 0..p.len() {
        let g = match k.grad_scale {
            Some(s) => g[i] * s,
            None => g[i],
        };
        m[i] = m[i] * k.beta_1 + g * k.factor_1;
        v[i] = v[i] * k.beta_2 + (g * g) * k.factor_2;
        let step = (m[i] / k.correction_1) / ((v[i] / k.correction_2).sqrt() + k.epsilon);
        p[i] = p[i] * k.decay - step * k.lr;
    }
}

/// `Σ x²` over all of `parts`, in `f64`: fixed blocks summed in parallel, their partials added
/// in order.
pub fn sum_of_squares(parts: &[&[f32]]) -> f64 {
    let blocks: Vec<&[f32]> = parts.iter().flat_map(|p| p.chunks(BLOCK)).collect();
    let partials: Vec<f64> =
        blocks.into_par_iter().map(|b| b.iter().map(|&x| f64::from(x) * f64::from(x)).sum::<f64>()).collect();
    partials.iter().sum()
}

/// The clipping coefficient for a global norm `√squares` and a maximum norm `max_norm`, as
/// PyTorch's `clip_grad_norm_` computes it; `None` when the gradients are left as they are.
pub fn clip_coefficient(squares: f64, max_norm: f64) -> Option<f64> {
    let coef = max_norm / (squares.sqrt() + 1e-6);
    (max_norm > 0.0 && coef < 1.0).then_some(coef)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: u32) -> Vec<f32> {
        super::super::test_values(n, seed, 97_531, -1.0, 1.0)
    }

    /// The update as separate whole-array passes, the way the tensor composition runs it.
    fn composed(p: &[f32], g: &[f32], m: &mut [f32], v: &mut [f32], k: &AdamWConstants) -> Vec<f32> {
        let g: Vec<f32> = g.iter().map(|&x| k.grad_scale.map_or(x, |s| x * s)).collect();
        let m1: Vec<f32> =
            m.iter().map(|x| x * k.beta_1).zip(g.iter().map(|x| x * k.factor_1)).map(|(a, b)| a + b).collect();
        let sq: Vec<f32> = g.iter().map(|x| x * x).collect();
        let m2: Vec<f32> =
            v.iter().map(|x| x * k.beta_2).zip(sq.iter().map(|x| x * k.factor_2)).map(|(a, b)| a + b).collect();
        m.copy_from_slice(&m1);
        v.copy_from_slice(&m2);
        let mh: Vec<f32> = m1.iter().map(|x| x / k.correction_1).collect();
        let vh: Vec<f32> = m2.iter().map(|x| (x / k.correction_2).sqrt() + k.epsilon).collect();
        let delta: Vec<f32> = mh.iter().zip(&vh).map(|(a, b)| a / b).collect();
        p.iter().map(|x| x * k.decay).zip(delta.iter().map(|d| d * k.lr)).map(|(a, b)| a - b).collect()
    }

    #[test]
    fn fused_update_gives_the_composed_bits_over_several_steps() {
        let h = AdamWHyper { weight_decay: 0.01, ..AdamWHyper::default() };
        let sizes = [1, 256, CHUNK + 3, 2 * CHUNK];
        let mut params: Vec<Vec<f32>> = sizes.iter().enumerate().map(|(i, &n)| values(n, i as u32)).collect();
        let mut reference = params.clone();
        let mut moments: Vec<(Vec<f32>, Vec<f32>)> = sizes.iter().map(|&n| (vec![0.0; n], vec![0.0; n])).collect();
        let mut ref_moments = moments.clone();
        for step in 1..=4 {
            let grads: Vec<Vec<f32>> =
                sizes.iter().enumerate().map(|(i, &n)| values(n, 100 * step as u32 + i as u32)).collect();
            let scale = (step % 2 == 0).then_some(0.37);
            let k = AdamWConstants::new(&h, 1e-3 * step as f64, step, scale);
            let segments = params
                .iter_mut()
                .zip(&grads)
                .zip(moments.iter_mut())
                .map(|((p, g), (m, v))| AdamWSegment { param: p, grad: g, moment_1: m, moment_2: v, constants: k })
                .collect();
            adamw_update(segments);
            for ((p, g), (m, v)) in reference.iter_mut().zip(&grads).zip(ref_moments.iter_mut()) {
                *p = composed(p, g, m, v, &k);
            }
            assert_eq!(params, reference, "step {step}");
            assert_eq!(moments, ref_moments, "step {step}");
        }
    }

    #[test]
    fn squared_norm_does_not_depend_on_the_thread_count() {
        let parts: Vec<Vec<f32>> =
            [7, BLOCK * 3 + 11, 100_000].iter().enumerate().map(|(i, &n)| values(n, i as u32)).collect();
        let slices: Vec<&[f32]> = parts.iter().map(|p| p.as_slice()).collect();
        let run = |threads| {
            rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap().install(|| sum_of_squares(&slices))
        };
        let one = run(1);
        assert_eq!(one.to_bits(), run(3).to_bits());
        let exact: f64 = parts.iter().flatten().map(|&x| f64::from(x).powi(2)).sum();
        assert!((one - exact).abs() <= 1e-12 * exact, "{one} vs {exact}");
    }

    #[test]
    fn spans_split_in_the_order_given() {
        let mut buffer: Vec<f32> = (0..10).map(|i| i as f32).collect();
        let views = split_spans(&mut buffer, &[(6, 3), (0, 2), (2, 4)]);
        assert_eq!(
            views.iter().map(|v| v.to_vec()).collect::<Vec<_>>(),
            [vec![6., 7., 8.], vec![0., 1.], vec![2., 3., 4., 5.]]
        );
    }

    #[test]
    #[should_panic(expected = "overlap")]
    fn overlapping_spans_are_refused() {
        let mut buffer = vec![0f32; 10];
        split_spans(&mut buffer, &[(0, 4), (3, 2)]);
    }

    #[test]
    fn clipping_applies_only_above_the_maximum_norm() {
        assert_eq!(clip_coefficient(0.25, 1.0), None);
        let c = clip_coefficient(16.0, 1.0).unwrap();
        assert!((c - 1.0 / (4.0 + 1e-6)).abs() < 1e-15);
        assert_eq!(clip_coefficient(16.0, 0.0), None);
    }
}
