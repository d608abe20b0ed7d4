//! Measures the machine's dense GEMM rate with the `gemm` crate (the statistics step's kernel)
//! and the `matrixmultiply` crate (the trainer's on CPUs without AVX-512):
//! `cargo run --release -p corrflow-algorithms --example gemm_peak`

/// GFLOP/s of `AᵀA` for an `k × m` row-major `a`, over `reps` repetitions.
fn rate<T: Copy + 'static>(a: &[T], m: usize, k: usize, zero: T, one: T, threads: usize) -> f64 {
    let mut c = vec![zero; m * m];
    let reps = 5;
    let t = std::time::Instant::now();
    for _ in 0..reps {
        // SAFETY: pointers and strides describe live buffers of the right sizes.
        unsafe {
            gemm::gemm(
                m,
                m,
                k,
                c.as_mut_ptr(),
                1,
                m as isize,
                false,
                a.as_ptr(),
                m as isize,
                1,
                a.as_ptr(),
                1,
                m as isize,
                zero,
                one,
                false,
                false,
                false,
                gemm::Parallelism::Rayon(threads),
            );
        }
    }
    2.0 * (m * m * k * reps) as f64 / t.elapsed().as_secs_f64() / 1e9
}

/// GFLOP/s of `AᵀA` in f32 with `matrixmultiply` on one thread (the trainer splits rows across
/// threads itself, so twice this is its 2-thread rate).
fn rate_matrixmultiply(a: &[f32], m: usize, k: usize) -> f64 {
    let mut c = vec![0f32; m * m];
    let reps = 5;
    let t = std::time::Instant::now();
    for _ in 0..reps {
        // SAFETY: pointers and strides describe live buffers of the right sizes.
        unsafe {
            matrixmultiply::sgemm(
                m,
                k,
                m,
                1.0,
                a.as_ptr(),
                1,
                m as isize,
                a.as_ptr(),
                m as isize,
                1,
                0.0,
                c.as_mut_ptr(),
                m as isize,
                1,
            );
        }
    }
    2.0 * (m * m * k * reps) as f64 / t.elapsed().as_secs_f64() / 1e9
}

fn main() {
    let threads = rayon::current_num_threads();
    for &(m, k) in &[(2000usize, 4096usize), (1024, 4096)] {
        let a64: Vec<f64> = (0..m * k).map(|i| (i % 7) as f64).collect();
        let a32: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32).collect();
        let (r64, r32) = (rate(&a64, m, k, 0.0, 1.0, threads), rate(&a32, m, k, 0.0, 1.0, threads));
        println!("AᵀA {m}×{k}: f64 {r64:.1} GFLOP/s, f32 {r32:.1} GFLOP/s on {threads} threads");
        let mm = rate_matrixmultiply(&a32, m, k);
        println!("AᵀA {m}×{k}: f32 {mm:.1} GFLOP/s with matrixmultiply on 1 thread");
    }
}
