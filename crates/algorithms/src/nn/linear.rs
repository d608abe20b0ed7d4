//! A dense layer over all rows at once: `y = x W + b` with `x` `[rows, in]`, `W` `[in, out]`
//! (burn's `Linear` layout), as one AVX-512 GEMM of the `gemm` crate instead of burn-ndarray's
//! per-sequence products; backward `dx = dy Wᵀ`, `dW = xᵀ dy`, `db = Σ_rows dy`.

use rayon::prelude::*;

use super::gemm_f32::{matmul_parallel, View};

/// The shape of a dense-layer call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinearShape {
    pub rows: usize,
    pub inputs: usize,
    pub outputs: usize,
}

/// Gradients of the input, the weight and the bias.
pub struct LinearGrads {
    pub x: Vec<f32>,
    pub w: Vec<f32>,
    pub b: Vec<f32>,
}

fn check(s: &LinearShape, x: &[f32], w: &[f32]) {
    assert_eq!(x.len(), s.rows * s.inputs, "linear: input is not rows × inputs");
    assert_eq!(w.len(), s.inputs * s.outputs, "linear: weight is not inputs × outputs");
}

/// `x W + b`.
pub fn linear_forward(s: LinearShape, x: &[f32], w: &[f32], b: &[f32]) -> Vec<f32> {
    check(&s, x, w);
    assert_eq!(b.len(), s.outputs, "linear: bias is not outputs");
    let mut y = vec![0f32; s.rows * s.outputs];
    y.par_chunks_mut(s.outputs.max(1) * 256)
        .for_each(|rows| rows.chunks_exact_mut(s.outputs.max(1)).for_each(|r| r.copy_from_slice(b)));
    matmul_parallel(
        (s.rows, s.outputs, s.inputs),
        &mut y,
        View::rows(0, s.outputs),
        true,
        x,
        View::rows(0, s.inputs),
        w,
        View::rows(0, s.outputs),
    );
    y
}

/// The backward pass given the output's gradient `dy` (`[rows, outputs]`).
pub fn linear_backward(s: LinearShape, x: &[f32], w: &[f32], dy: &[f32]) -> LinearGrads {
    check(&s, x, w);
    assert_eq!(dy.len(), s.rows * s.outputs, "linear: gradient is not rows × outputs");
    let (i, o) = (s.inputs, s.outputs);
    let mut dx = vec![0f32; s.rows * i];
    matmul_parallel((s.rows, i, o), &mut dx, View::rows(0, i), false, dy, View::rows(0, o), w, View::transposed(0, o));
    let mut dw = vec![0f32; i * o];
    matmul_parallel((i, o, s.rows), &mut dw, View::rows(0, o), false, x, View::transposed(0, i), dy, View::rows(0, o));
    // Column sums in fixed blocks of columns, each summed over the rows in order.
    let mut db = vec![0f32; o];
    db.par_chunks_mut(16).enumerate().for_each(|(c, out)| {
        for row in dy.chunks_exact(o.max(1)) {
            out.iter_mut().zip(&row[c * 16..]).for_each(|(a, b)| *a += b);
        }
    });
    LinearGrads { x: dx, w: dw, b: db }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: u32) -> Vec<f32> {
        super::super::test_values(n, seed, 7_919, -0.5, 0.5)
    }

    #[test]
    fn matches_loops_forward_and_backward() {
        let s = LinearShape { rows: 37, inputs: 13, outputs: 21 };
        let (x, w, b, dy) = (values(37 * 13, 1), values(13 * 21, 2), values(21, 3), values(37 * 21, 4));
        let y = linear_forward(s, &x, &w, &b);
        let g = linear_backward(s, &x, &w, &dy);
        let close = |a: f32, b: f64| (f64::from(a) - b).abs() < 1e-5 * b.abs().max(1.0);
        for r in 0..37 {
            for c in 0..21 {
                let want =
                    f64::from(b[c]) + (0..13).map(|k| f64::from(x[r * 13 + k]) * f64::from(w[k * 21 + c])).sum::<f64>();
                assert!(close(y[r * 21 + c], want));
            }
            for k in 0..13 {
                let want: f64 = (0..21).map(|c| f64::from(dy[r * 21 + c]) * f64::from(w[k * 21 + c])).sum();
                assert!(close(g.x[r * 13 + k], want));
            }
        }
        for k in 0..13 {
            for c in 0..21 {
                let want: f64 = (0..37).map(|r| f64::from(x[r * 13 + k]) * f64::from(dy[r * 21 + c])).sum();
                assert!(close(g.w[k * 21 + c], want));
            }
        }
        for c in 0..21 {
            assert!(close(g.b[c], (0..37).map(|r| f64::from(dy[r * 21 + c])).sum()));
        }
    }

    #[test]
    fn same_bits_with_one_or_three_threads() {
        // Tall shapes like a training batch: the weight gradient's inner dimension is the rows.
        let s = LinearShape { rows: 3_001, inputs: 64, outputs: 96 };
        let (x, w, b, dy) = (values(3_001 * 64, 5), values(64 * 96, 6), values(96, 7), values(3_001 * 96, 8));
        let run = |threads| {
            rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap().install(|| {
                let g = linear_backward(s, &x, &w, &dy);
                (linear_forward(s, &x, &w, &b), g.x, g.w, g.b)
            })
        };
        assert_eq!(run(1), run(3));
    }
}
