//! One safe entry to the `gemm` crate's single-threaded f32 product over strided views
//! (the kernels are parallel over independent units, so each product runs on one thread).

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
    matmul_on(shape, dst, d, accumulate, a, av, b, bv, scale, gemm::Parallelism::None);
}

/// [`matmul`] spread over rayon's threads. The gemm crate splits the output, not the inner
/// dimension, so each element's sum runs in the same order whatever the thread count.
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
    let par = if threads > 1 { gemm::Parallelism::Rayon(threads) } else { gemm::Parallelism::None };
    matmul_on(shape, dst, d, accumulate, a, av, b, bv, 1.0, par);
}

#[allow(clippy::too_many_arguments)]
fn matmul_on(
    (m, n, k): (usize, usize, usize),
    dst: &mut [f32],
    d: View,
    accumulate: bool,
    a: &[f32],
    av: View,
    b: &[f32],
    bv: View,
    scale: f32,
    par: gemm::Parallelism,
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
    // SAFETY: the asserts keep every element gemm reads or writes inside the slices, and `dst`
    // does not alias `a` or `b` (distinct borrows).
    unsafe {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strided_product_equals_naive_loops() {
        let (m, n, k) = (5, 7, 3);
        let a: Vec<f32> = (0..m * k).map(|i| i as f32 * 0.5 - 2.0).collect();
        let b: Vec<f32> = (0..n * k).map(|i| (i % 5) as f32 - 1.0).collect(); // stored as n × k
        let mut dst = vec![1.0f32; m * n];
        matmul((m, n, k), &mut dst, View::rows(0, n), true, &a, View::rows(0, k), &b, View::transposed(0, k), 2.0);
        for i in 0..m {
            for j in 0..n {
                let want: f32 = 1.0 + 2.0 * (0..k).map(|t| a[i * k + t] * b[j * k + t]).sum::<f32>();
                assert!((dst[i * n + j] - want).abs() < 1e-5);
            }
        }
    }
}
