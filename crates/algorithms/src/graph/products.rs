//! Dense matrix products (`Aᵀ B` of row-major matrices, via the `gemm` crate): the one kernel
//! behind the pair statistics and the screening correlations.

/// `out = Aᵀ A` (row-major `cols × cols`) from upper-triangle blocks of 256 columns, mirrored:
/// about 0.56 of the full product's work.
pub(crate) fn gram_upper(a: &[f64], rows: usize, cols: usize, out: &mut [f64], threads: usize) {
    const BLOCK: usize = 256;
    let g = cols;
    for b0 in (0..g).step_by(BLOCK) {
        let m = (b0 + BLOCK).min(g) - b0;
        let n = g - b0;
        at_b(m, n, rows, &mut out[b0 * g + b0..], g, &a[b0..], &a[b0..], g, threads);
    }
    for u in 0..g {
        for v in 0..u {
            out[u * g + v] = out[v * g + u];
        }
    }
}

/// `out = Aᵀ B` for row-major `rows × cols` matrices `a`, `b` (out is `cols × cols`, row-major).
pub(crate) fn cross(a: &[f64], b: &[f64], rows: usize, cols: usize, out: &mut [f64], threads: usize) {
    at_b(cols, cols, rows, out, cols, a, b, cols, threads);
}

/// `dst[i, j] = Σ_k a[k·ld + i] · b[k·ld + j]` for `i < m`, `j < n`, `k < k_len`, with `dst`
/// row-major of row stride `dst_rs`: the product of column blocks of two row-major matrices
/// (`Aᵀ B`), the one kernel behind every statistic here.
#[allow(clippy::too_many_arguments)]
pub(crate) fn at_b<T: Scalar>(
    m: usize,
    n: usize,
    k_len: usize,
    dst: &mut [T],
    dst_rs: usize,
    a: &[T],
    b: &[T],
    ld: usize,
    threads: usize,
) {
    at_b_strided(m, n, k_len, dst, dst_rs, a, ld, b, ld, threads);
}

/// [`at_b`] for row-major `a` and `b` of different row strides (`lda`, `ldb`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn at_b_strided<T: Scalar>(
    m: usize,
    n: usize,
    k_len: usize,
    dst: &mut [T],
    dst_rs: usize,
    a: &[T],
    lda: usize,
    b: &[T],
    ldb: usize,
    threads: usize,
) {
    let k1 = k_len.max(1) - 1;
    assert!(m <= lda && n <= ldb && a.len() >= k1 * lda + m && b.len() >= k1 * ldb + n);
    assert!(dst.len() >= (m.max(1) - 1) * dst_rs + n, "destination too small");
    let par = if threads > 1 { gemm::Parallelism::Rayon(threads) } else { gemm::Parallelism::None };
    // SAFETY: the asserts above keep every element (i, k) of a, (k, j) of b and (i, j) of dst
    // that gemm touches inside the slices.
    unsafe {
        gemm::gemm(
            m,
            n,
            k_len,
            dst.as_mut_ptr(),
            1,
            dst_rs as isize,
            false,
            a.as_ptr(),
            lda as isize,
            1,
            b.as_ptr(),
            1,
            ldb as isize,
            T::ZERO,
            T::ONE,
            false,
            false,
            false,
            par,
        );
    }
}

/// The element types the products run in.
pub(crate) trait Scalar: Copy + 'static {
    const ZERO: Self;
    const ONE: Self;
}

impl Scalar for f32 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
}

impl Scalar for f64 {
    const ZERO: Self = 0.0;
    const ONE: Self = 1.0;
}
