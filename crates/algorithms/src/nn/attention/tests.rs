use super::*;

/// Deterministic pseudo-random values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// Attention written out element by element in f64: output, and the input gradients for `dout`.
fn naive(
    s: &AttentionShape,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    valid: &[bool],
    drop: Option<DropoutKey>,
    dout: &[f32],
) -> (Vec<f64>, [Vec<f64>; 3]) {
    let (len, d, w) = (s.len, s.head_dim, s.heads * s.head_dim);
    let scale = 1.0 / (d as f64).sqrt();
    let at = |b: usize, i: usize, h: usize, c: usize| (b * len + i) * w + h * d + c;
    let mut out = vec![0f64; s.elements()];
    let (mut dq, mut dk, mut dv) = (vec![0f64; s.elements()], vec![0f64; s.elements()], vec![0f64; s.elements()]);
    for b in 0..s.batch {
        let keys: Vec<usize> = (0..len).filter(|&j| valid[b * len + j]).collect();
        for h in 0..s.heads {
            for &i in &keys {
                let sc: Vec<f64> = keys
                    .iter()
                    .map(|&j| {
                        scale * (0..d).map(|c| f64::from(q[at(b, i, h, c)]) * f64::from(k[at(b, j, h, c)])).sum::<f64>()
                    })
                    .collect();
                let m = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = sc.iter().map(|x| (x - m).exp()).sum();
                let p: Vec<f64> = sc.iter().map(|x| (x - m).exp() / z).collect();
                let f: Vec<f64> = keys
                    .iter()
                    .map(|&j| drop.map_or(1.0, |dk| f64::from(dk.factor(s.dropout_row(b, h, i), j as u32))))
                    .collect();
                for c in 0..d {
                    out[at(b, i, h, c)] =
                        keys.iter().enumerate().map(|(t, &j)| p[t] * f[t] * f64::from(v[at(b, j, h, c)])).sum();
                }
                let dpd: Vec<f64> = keys
                    .iter()
                    .map(|&j| (0..d).map(|c| f64::from(dout[at(b, i, h, c)]) * f64::from(v[at(b, j, h, c)])).sum())
                    .collect();
                let dp: Vec<f64> = dpd.iter().zip(&f).map(|(a, b)| a * b).collect();
                let delta: f64 = p.iter().zip(&dp).map(|(a, b)| a * b).sum();
                for (t, &j) in keys.iter().enumerate() {
                    let ds = p[t] * (dp[t] - delta);
                    for c in 0..d {
                        dv[at(b, j, h, c)] += p[t] * f[t] * f64::from(dout[at(b, i, h, c)]);
                        dq[at(b, i, h, c)] += scale * ds * f64::from(k[at(b, j, h, c)]);
                        dk[at(b, j, h, c)] += scale * ds * f64::from(q[at(b, i, h, c)]);
                    }
                }
            }
        }
    }
    (out, [dq, dk, dv])
}

fn assert_close(got: &[f32], want: &[f64], what: &str) {
    let norm = want.iter().map(|x| x * x).sum::<f64>().sqrt().max(1e-12);
    let err = got.iter().zip(want).map(|(g, w)| (f64::from(*g) - w).powi(2)).sum::<f64>().sqrt();
    assert!(err / norm < 1e-5, "{what}: relative error {}", err / norm);
    for (g, w) in got.iter().zip(want) {
        assert!(
            (f64::from(*g) - w).abs() <= 1e-4 * w.abs().max(norm / (want.len() as f64).sqrt()),
            "{what}: {g} vs {w}"
        );
    }
}

fn case(shape: AttentionShape, valid: Vec<bool>, drop: Option<DropoutKey>, seed: u64) {
    let n = shape.elements();
    let (q, k, v, dout) = (values(n, seed), values(n, seed + 1), values(n, seed + 2), values(n, seed + 3));
    let fwd = attention_forward(shape, &q, &k, &v, &valid, drop);
    let grads = attention_backward(shape, &q, &k, &v, &fwd, &dout, &valid, drop);
    let (out, [dq, dk, dv]) = naive(&shape, &q, &k, &v, &valid, drop, &dout);
    assert_close(&fwd.out, &out, "output");
    assert_close(&grads.q, &dq, "dq");
    assert_close(&grads.k, &dk, "dk");
    assert_close(&grads.v, &dv, "dv");
}

#[test]
fn matches_elementwise_attention_with_padding_and_dropout() {
    // Two sequences, the second padded at the end and in the middle; rows span several tiles.
    let shape = AttentionShape { batch: 2, len: 150, heads: 3, head_dim: 8 };
    let mut valid = vec![true; 300];
    valid[150 + 120..].iter_mut().for_each(|x| *x = false);
    valid[150 + 7] = false;
    case(shape, valid.clone(), None, 1);
    case(shape, valid, Some(DropoutKey { p: 0.2, key: 99 }), 5);
}

#[test]
fn matches_elementwise_attention_on_a_real_cell_shape() {
    // Geneformer's head width (64) and a Kang-like cell length.
    let shape = AttentionShape { batch: 1, len: 97, heads: 2, head_dim: 64 };
    case(shape, vec![true; 97], Some(DropoutKey { p: 0.02, key: 3 }), 11);
}

#[test]
fn naive_gradients_match_finite_differences() {
    let shape = AttentionShape { batch: 1, len: 5, heads: 2, head_dim: 3 };
    let valid = vec![true, true, false, true, true];
    let n = shape.elements();
    let (q, k, v, dout) = (values(n, 21), values(n, 22), values(n, 23), values(n, 24));
    let drop = Some(DropoutKey { p: 0.3, key: 4 });
    let loss = |q: &[f32], k: &[f32], v: &[f32]| -> f64 {
        let (out, _) = naive(&shape, q, k, v, &valid, drop, &dout);
        out.iter().zip(&dout).map(|(o, g)| o * f64::from(*g)).sum()
    };
    let (_, grads) = naive(&shape, &q, &k, &v, &valid, drop, &dout);
    let eps = 1e-3f32;
    for (which, g) in grads.iter().enumerate() {
        for e in 0..n {
            let mut inputs = [q.clone(), k.clone(), v.clone()];
            inputs[which][e] += eps;
            let up = loss(&inputs[0], &inputs[1], &inputs[2]);
            inputs[which][e] -= 2.0 * eps;
            let down = loss(&inputs[0], &inputs[1], &inputs[2]);
            let fd = (up - down) / (2.0 * f64::from(eps));
            assert!((fd - g[e]).abs() < 1e-3, "input {which} element {e}: {fd} vs {}", g[e]);
        }
    }
}

#[test]
fn same_bits_with_one_or_three_threads() {
    let shape = AttentionShape { batch: 3, len: 70, heads: 2, head_dim: 16 };
    let n = shape.elements();
    let (q, k, v, dout) = (values(n, 31), values(n, 32), values(n, 33), values(n, 34));
    let valid = vec![true; 210];
    let drop = Some(DropoutKey { p: 0.1, key: 8 });
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        pool.install(|| {
            let f = attention_forward(shape, &q, &k, &v, &valid, drop);
            let g = attention_backward(shape, &q, &k, &v, &f, &dout, &valid, drop);
            (f.out, g.q, g.k, g.v)
        })
    };
    assert_eq!(run(1), run(3));
}

#[test]
fn padding_rows_get_zero_output_and_gradient() {
    let shape = AttentionShape { batch: 1, len: 6, heads: 1, head_dim: 4 };
    let valid = vec![true, true, true, true, false, false];
    let n = shape.elements();
    let (q, k, v, dout) = (values(n, 41), values(n, 42), values(n, 43), values(n, 44));
    let f = attention_forward(shape, &q, &k, &v, &valid, None);
    let g = attention_backward(shape, &q, &k, &v, &f, &dout, &valid, None);
    for t in [&f.out, &g.q, &g.k, &g.v] {
        assert!(t[16..].iter().all(|&x| x == 0.0));
    }
}
