//! Dense matrix products (`Aᵀ B` of row-major matrices, via the `gemm` crate): the one kernel
//! behind the pair statistics and the screening correlations.

/// Output rows of an upper-triangle product computed at a time (as 256-column blocks, about 0.56
/// of the whole product's work at 2,000 columns). A whole product is one call: in panels, `gemm`
/// would pack the right-hand matrix again for each of them.
const UPPER_PANEL: usize = 256;

/// `Aᵀ B` of row-major `rows × cols` matrices `a`, `b` into `scratch`, passed to `take(u0, m, n,
/// part)` in parts: rows `u0..u0 + m`, columns `cols − n..cols`, row-major `n` wide. With
/// `upper`, panels of [`UPPER_PANEL`] rows, each holding only the columns from its first row on
/// (`n = cols − u0`): the upper triangle of a symmetric `Aᵀ A` and a little of its lower one.
/// Otherwise one part, the whole product.
#[allow(clippy::too_many_arguments)]
pub(crate) fn at_b_panels(
    a: &[f64],
    b: &[f64],
    rows: usize,
    cols: usize,
    upper: bool,
    threads: usize,
    scratch: &mut Vec<f64>,
    mut take: impl FnMut(usize, usize, usize, &[f64]),
) {
    let panel = if upper { UPPER_PANEL } else { cols.max(1) };
    for u0 in (0..cols).step_by(panel) {
        let m = panel.min(cols - u0);
        let c0 = if upper { u0 } else { 0 };
        let n = cols - c0;
        scratch.resize(m * n, 0.0);
        at_b(m, n, rows, scratch, n, &a[u0..], &b[c0..], cols, threads);
        take(u0, m, n, &scratch[..m * n]);
    }
}

/// Copies the upper triangle of a row-major `g × g` matrix onto its lower one.
pub(crate) fn mirror_upper<T: Copy>(m: &mut [T], g: usize) {
    for u in 1..g {
        for v in 0..u {
            m[u * g + v] = m[v * g + u];
        }
    }
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
