//! The synthetic experiments of the CorrMask paper (Appendix B): `corrflow synth structure`
//! (Fig. 2: does adjacency or co-occurrence of tokens recover gene modules?) and `corrflow synth
//! modularity` (Fig. 3: does correlation masking beat random masking as data gets modular?).
//!
//! Generators, the AUROC, and the masking rules are plain functions over plain data, seeded with
//! ChaCha8: the same seed gives the same bytes. [`sweep`] trains the small encoder of B.2 with
//! the trainer's model and MLM loss. The command (`src/commands/synth.rs`) lives in the binary.

pub use corrflow_algorithms::auroc;
pub mod modularity;
pub mod params;
pub mod plot;
pub mod pretrain;
pub mod structure;
pub mod sweep;

pub use params::{Background, ModularityParams, StructureParams, SynthConfig};

use rand::Rng;

/// The RNG of the synthetic generators.
pub type SynthRng = rand_chacha::ChaCha8Rng;

/// A seeded stream for `(seed, stream)`: distinct streams of one run never coincide.
pub fn rng(seed: u64, stream: u64) -> SynthRng {
    use rand::SeedableRng;
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    key[8..16].copy_from_slice(&stream.to_le_bytes());
    key[16..].copy_from_slice(b"corrflow-synth\0\0");
    SynthRng::from_seed(key)
}

/// A draw from Exp(rate) by inversion.
pub fn exponential(rng: &mut impl Rng, rate: f64) -> f64 {
    // 1 − U is in (0, 1], so the logarithm is finite.
    -(1.0 - rng.random::<f64>()).ln() / rate
}

/// A draw from N(mean, sd²) by Box–Muller (one of the pair; simple and portable).
pub fn normal(rng: &mut impl Rng, mean: f64, sd: f64) -> f64 {
    let u1 = 1.0 - rng.random::<f64>();
    let u2 = rng.random::<f64>();
    mean + sd * (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// Mean and sample standard deviation (n − 1; 0 for a single value).
pub fn mean_sd(values: &[f64]) -> (f64, f64) {
    let n = values.len() as f64;
    if values.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let mean = values.iter().sum::<f64>() / n;
    let var = if values.len() < 2 { 0.0 } else { values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0) };
    (mean, var.sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samplers_have_the_right_moments_and_repeat_by_seed() {
        let mut r = rng(7, 0);
        let n = 200_000;
        let e: Vec<f64> = (0..n).map(|_| exponential(&mut r, 0.1)).collect();
        let (m, sd) = mean_sd(&e);
        assert!((m - 10.0).abs() < 0.15 && (sd - 10.0).abs() < 0.2, "Exp(0.1): mean {m} sd {sd}");
        assert!(e.iter().all(|&x| x >= 0.0 && x.is_finite()));
        let z: Vec<f64> = (0..n).map(|_| normal(&mut r, 10.0, 2.0)).collect();
        let (m, sd) = mean_sd(&z);
        assert!((m - 10.0).abs() < 0.03 && (sd - 2.0).abs() < 0.03, "N(10, 2): mean {m} sd {sd}");
        let a: Vec<f64> = (0..5).map(|_| normal(&mut rng(3, 1), 0.0, 1.0)).collect();
        let b: Vec<f64> = (0..5).map(|_| normal(&mut rng(3, 1), 0.0, 1.0)).collect();
        assert_eq!(a, b);
        assert_ne!(rng(3, 1).random::<u64>(), rng(3, 2).random::<u64>());
    }

    #[test]
    fn mean_sd_is_the_sample_sd() {
        let (m, sd) = mean_sd(&[1.0, 2.0, 3.0, 4.0]);
        assert_eq!(m, 2.5);
        assert!((sd - 1.290_994_448_735_805_6).abs() < 1e-12);
        assert_eq!(mean_sd(&[0.5]), (0.5, 0.0));
    }
}
