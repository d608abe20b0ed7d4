//! One safe entry to an f32 product over strided views, run by the `gemm` or the
//! `matrixmultiply` crate, whichever is faster on this CPU (the kernels are parallel over
//! independent units, so most products run on one thread).

use rayon::prelude::*;

/// A strided view of a matrix inside a slice: element `(i, j)` is at `offset + i * rs + j * cs`.
#[derive(Clone, Copy)]
pub(crate) struct View {
    pub offset: usize,
    pub rs: usize,
    pub cs: usize,
}

impl View {
    /// A row-major block starting at `offset` with row stride `ld`.
    pub fn rows(offset: usize, ld: usize) -> Self {
        View { offset, rs: ld, cs: 1 }
    }

    /// The transpose of a row-major block starting at `offset` with row stride `ld`.
    pub fn transposed(offset: usize, ld: usize) -> Self {
        View { offset, rs: 1, cs: ld }
    }

    fn last(&self, rows: usize, cols: usize) -> usize {
        self.offset + rows.saturating_sub(1) * self.rs + cols.saturating_sub(1) * self.cs
    }
}

/// The f32 GEMM implementation behind [`matmul`]. Chosen once per process at run time (see
/// [`GemmKernels::current`]), so it never changes between the steps of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemmKernels {
    /// The `gemm` crate: its AVX-512 kernels run near the machine's peak (368–384 GFLOP/s on a
    /// 2-core Xeon against torch.mm's 394–406).
    Gemm,
    /// The `matrixmultiply` crate: on an AVX2-only AMD EPYC (Zen 1) its FMA kernel runs the
    /// trainer's shapes at 30–34 GFLOP/s per core against the `gemm` crate's 22–23
    /// (MKL: 37–39), so machines without AVX-512 use it.
    MatrixMultiply,
}

impl GemmKernels {
    /// `CORRFLOW_GEMM=gemm` or `=matrixmultiply` when set (to compare the two on one machine);
    /// otherwise `gemm` where the CPU has AVX-512 or is not x86, `matrixmultiply` elsewhere.
    pub fn current() -> Self {
        static CHOSEN: std::sync::OnceLock<GemmKernels> = std::sync::OnceLock::new();
        *CHOSEN.get_or_init(|| match std::env::var("CORRFLOW_GEMM").as_deref() {
            Ok("gemm") => GemmKernels::Gemm,
            Ok("matrixmultiply") => GemmKernels::MatrixMultiply,
            _ => Self::for_this_cpu(),
        })
    }

    /// The name `CORRFLOW_GEMM` takes, and the training summary records.
    pub fn name(self) -> &'static str {
        match self {
            GemmKernels::Gemm => "gemm",
            GemmKernels::MatrixMultiply => "matrixmultiply",
        }
    }

    fn for_this_cpu() -> Self {
        #[cfg(target_arch = "x86_64")]
        if !std::arch::is_x86_feature_detected!("avx512f") {
            return GemmKernels::MatrixMultiply;
        }
        GemmKernels::Gemm
    }
}

/// Rows of one thread's share in a split product: a multiple of every `matrixmultiply` kernel's
/// row tile, so a row sits in the same tile, and is computed the same way, however the rows are
/// split (a partial tile goes through a separately rounded path).
const ROW_BLOCK: usize = 64;

/// `dst[m × n] = (accumulate ? dst : 0) + scale · a[m × k] · b[k × n]`, on this thread.
#[allow(clippy::too_many_arguments)]
pub(crate) fn matmul(
    shape: (usize, usize, usize),
    dst: &mut [f32],
    d: View,
    accumulate: bool,
    a: &[f32],
    av: View,
    b: &[f32],
    bv: View,
    scale: f32,
) {
    product(GemmKernels::current(), 1, shape, dst, d, accumulate, (a, av), (b, bv), scale);
}

/// [`matmul`] spread over rayon's threads. Both implementations split the output, never the
/// inner dimension, so each element's sum runs in the same order whatever the thread count.
#[allow(clippy::too_many_arguments)]
pub(crate) fn matmul_parallel(
    shape: (usize, usize, usize),
    dst: &mut [f32],
    d: View,
    accumulate: bool,
    a: &[f32],
    av: View,
    b: &[f32],
    bv: View,
) {
    let threads = rayon::current_num_threads();
    product(GemmKernels::current(), threads, shape, dst, d, accumulate, (a, av), (b, bv), 1.0);
}

#[allow(clippy::too_many_arguments)]
fn product(
    kernels: GemmKernels,
    threads: usize,
    (m, n, k): (usize, usize, usize),
    dst: &mut [f32],
    d: View,
    accumulate: bool,
    (a, av): (&[f32], View),
    (b, bv): (&[f32], View),
    scale: f32,
) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            for i in 0..m {
                for j in 0..n {
                    dst[d.offset + i * d.rs + j * d.cs] = 0.0;
                }
            }
        }
        return;
    }
    assert!(d.last(m, n) < dst.len(), "gemm destination out of bounds");
    assert!(av.last(m, k) < a.len(), "gemm lhs out of bounds");
    assert!(bv.last(k, n) < b.len(), "gemm rhs out of bounds");
    let (a, b) = ((a, av), (b, bv));
    match kernels {
        // SAFETY (both calls): the asserts keep every element read or written inside the slices,
        // and `dst` does not alias `a` or `b` (distinct borrows).
        GemmKernels::Gemm => unsafe { gemm_crate(threads, (m, n, k), dst, d, accumulate, a, b, scale) },
        GemmKernels::MatrixMultiply if threads > 1 && d.cs == 1 && d.rs >= n && m >= 2 * ROW_BLOCK => {
            // Row-major output: each thread takes whole rows, in blocks of ROW_BLOCK.
            let rows = m.div_ceil(threads).next_multiple_of(ROW_BLOCK);
            let (dst, a) = (&mut dst[d.offset..], &a.0[av.offset..]);
            dst.par_chunks_mut(rows * d.rs).enumerate().for_each(|(c, part)| {
                let i0 = c * rows;
                if i0 < m {
                    let av = View { offset: i0 * av.rs, ..av };
                    let shape = (rows.min(m - i0), n, k);
                    product(kernels, 1, shape, part, View { offset: 0, ..d }, accumulate, (a, av), b, scale);
                }
            });
        }
        GemmKernels::MatrixMultiply => unsafe { matrixmultiply_sgemm((m, n, k), dst, d, accumulate, a, b, scale) },
    }
}

/// The `gemm` crate's product, on `threads` of rayon's threads.
///
/// # Safety
/// Every element the views address lies inside its slice (checked by [`product`]).
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_crate(
    threads: usize,
    (m, n, k): (usize, usize, usize),
    dst: &mut [f32],
    d: View,
    accumulate: bool,
    (a, av): (&[f32], View),
    (b, bv): (&[f32], View),
    scale: f32,
) {
    let par = if threads > 1 { gemm::Parallelism::Rayon(threads) } else { gemm::Parallelism::None };
    gemm::gemm(
        m,
        n,
        k,
        dst.as_mut_ptr().add(d.offset),
        d.cs as isize,
        d.rs as isize,
        accumulate,
        a.as_ptr().add(av.offset),
        av.cs as isize,
        av.rs as isize,
        b.as_ptr().add(bv.offset),
        bv.cs as isize,
        bv.rs as isize,
        1.0,
        scale,
        false,
        false,
        false,
        par,
    );
}

/// `matrixmultiply`'s product, on this thread.
///
/// # Safety
/// As for [`gemm_crate`].
unsafe fn matrixmultiply_sgemm(
    (m, n, k): (usize, usize, usize),
    dst: &mut [f32],
    d: View,
    accumulate: bool,
    (a, av): (&[f32], View),
    (b, bv): (&[f32], View),
    scale: f32,
) {
    matrixmultiply::sgemm(
        m,
        k,
        n,
        scale,
        a.as_ptr().add(av.offset),
        av.rs as isize,
        av.cs as isize,
        b.as_ptr().add(bv.offset),
        bv.rs as isize,
        bv.cs as isize,
        if accumulate { 1.0 } else { 0.0 },
        dst.as_mut_ptr().add(d.offset),
        d.rs as isize,
        d.cs as isize,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOTH: [GemmKernels; 2] = [GemmKernels::Gemm, GemmKernels::MatrixMultiply];

    fn values(len: usize, seed: u32) -> Vec<f32> {
        (0..len as u32).map(|i| ((i.wrapping_mul(2_654_435_761) ^ seed) % 1000) as f32 / 250.0 - 2.0).collect()
    }

    #[test]
    fn strided_product_equals_naive_loops_with_either_implementation() {
        let (m, n, k) = (5, 7, 3);
        let a: Vec<f32> = (0..m * k).map(|i| i as f32 * 0.5 - 2.0).collect();
        let b: Vec<f32> = (0..n * k).map(|i| (i % 5) as f32 - 1.0).collect(); // stored as n × k
        for kernels in BOTH {
            for accumulate in [false, true] {
                let mut dst = vec![1.0f32; m * n];
                let (av, bv) = (View::rows(0, k), View::transposed(0, k));
                product(kernels, 1, (m, n, k), &mut dst, View::rows(0, n), accumulate, (&a, av), (&b, bv), 2.0);
                for i in 0..m {
                    for j in 0..n {
                        let sum: f32 = (0..k).map(|t| a[i * k + t] * b[j * k + t]).sum();
                        let want = if accumulate { 1.0 } else { 0.0 } + 2.0 * sum;
                        assert!((dst[i * n + j] - want).abs() < 1e-5, "{kernels:?} {accumulate}");
                    }
                }
            }
        }
    }

    #[test]
    fn implementations_agree_on_a_transposed_lhs() {
        // dW = xᵀ · dy, the dense layer's weight gradient, with rows past one tile.
        let (m, n, k) = (70, 33, 129);
        let (x, dy) = (values(k * m, 1), values(k * n, 2));
        let run = |kernels| {
            let mut dst = vec![0f32; m * n];
            let (av, bv) = (View::transposed(0, m), View::rows(0, n));
            product(kernels, 2, (m, n, k), &mut dst, View::rows(0, n), false, (&x, av), (&dy, bv), 1.0);
            dst
        };
        for (g, mm) in run(GemmKernels::Gemm).iter().zip(run(GemmKernels::MatrixMultiply)) {
            assert!((g - mm).abs() <= 1e-4 * (1.0 + g.abs()), "{g} vs {mm}");
        }
    }

    #[test]
    fn a_split_product_has_the_same_bits_for_any_thread_count() {
        // 301 rows: several blocks of ROW_BLOCK and a partial row tile at the end.
        let (m, n, k) = (301, 37, 300);
        let (a, b) = (values(m * k, 3), values(k * n, 4));
        let start = values(m * n, 5);
        for kernels in BOTH {
            let run = |threads| {
                let mut dst = start.clone();
                let (av, bv) = (View::rows(0, k), View::rows(0, n));
                product(kernels, threads, (m, n, k), &mut dst, View::rows(0, n), true, (&a, av), (&b, bv), 1.0);
                dst
            };
            let one = run(1);
            for threads in [2, 3, 8] {
                assert_eq!(one, run(threads), "{kernels:?} with {threads} threads");
            }
        }
    }
}
