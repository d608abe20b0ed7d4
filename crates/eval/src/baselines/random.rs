//! The random-projection control: the cells through a seeded Gaussian matrix `N(0, 1/dim)`
//! (Johnson–Lindenstrauss). It keeps the input's coarse geometry and learns nothing, so a model
//! that does not beat it has learned less than chance structure.

use rand::{Rng, SeedableRng};

/// `x` (`rows × cols`, row-major) times a `cols × dim` Gaussian matrix of seed `seed`.
pub fn random_projection(x: &[f64], rows: usize, cols: usize, dim: usize, seed: u64) -> Vec<f64> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let sd = 1.0 / (dim.max(1) as f64).sqrt();
    // Box–Muller: two uniform draws per Gaussian value, one value kept (simple and seeded).
    let r: Vec<f64> = (0..cols * dim)
        .map(|_| {
            let (u, v): (f64, f64) = (rng.random::<f64>().max(f64::MIN_POSITIVE), rng.random());
            (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos() * sd
        })
        .collect();
    let mut out = vec![0.0; rows * dim];
    for i in 0..rows {
        let xi = &x[i * cols..(i + 1) * cols];
        let oi = &mut out[i * dim..(i + 1) * dim];
        for (g, &v) in xi.iter().enumerate() {
            if v != 0.0 {
                for (o, &w) in oi.iter_mut().zip(&r[g * dim..(g + 1) * dim]) {
                    *o += v * w;
                }
            }
        }
    }
    out
}
