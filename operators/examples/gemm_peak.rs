//! Measures the machine's dense GEMM rate with the `gemm` crate (the statistics step's
//! kernel): `cargo run --release -p corrflow-operators --example gemm_peak`
fn main() {
    let threads = rayon::current_num_threads();
    for &(m, k) in &[(2000usize, 4096usize), (1024, 4096)] {
        let a64: Vec<f64> = (0..m * k).map(|i| (i % 7) as f64).collect();
        let mut c64 = vec![0f64; m * m];
        let a32: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32).collect();
        let mut c32 = vec![0f32; m * m];
        let reps = 5;
        let t = std::time::Instant::now();
        for _ in 0..reps {
            // SAFETY: pointers and strides describe live buffers of the right sizes.
            unsafe {
                gemm::gemm(
                    m,
                    m,
                    k,
                    c64.as_mut_ptr(),
                    1,
                    m as isize,
                    false,
                    a64.as_ptr(),
                    m as isize,
                    1,
                    a64.as_ptr(),
                    1,
                    m as isize,
                    0.0,
                    1.0,
                    false,
                    false,
                    false,
                    gemm::Parallelism::Rayon(threads),
                );
            }
        }
        let f64_rate = 2.0 * (m * m * k * reps) as f64 / t.elapsed().as_secs_f64() / 1e9;
        let t = std::time::Instant::now();
        for _ in 0..reps {
            // SAFETY: as above.
            unsafe {
                gemm::gemm(
                    m,
                    m,
                    k,
                    c32.as_mut_ptr(),
                    1,
                    m as isize,
                    false,
                    a32.as_ptr(),
                    m as isize,
                    1,
                    a32.as_ptr(),
                    1,
                    m as isize,
                    0.0,
                    1.0,
                    false,
                    false,
                    false,
                    gemm::Parallelism::Rayon(threads),
                );
            }
        }
        let f32_rate = 2.0 * (m * m * k * reps) as f64 / t.elapsed().as_secs_f64() / 1e9;
        println!("AᵀA {m}×{k}: f64 {f64_rate:.1} GFLOP/s, f32 {f32_rate:.1} GFLOP/s on {threads} threads");
    }
}
