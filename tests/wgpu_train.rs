//! `train --device wgpu`: the trainer on burn's wgpu backend with the CubeCL kernels (attention,
//! LayerNorm, decoder loss, clipping and AdamW; padding to length buckets of 64), here on Mesa's
//! software Vulkan driver. Started from the same weights without dropout, its losses follow the
//! CPU trainer's step by step. Built only with `--features wgpu` (`make test` runs it).
#![cfg(feature = "wgpu")]

use crate::common;

use std::path::Path;

use common::*;

fn losses(run: &Path) -> Vec<(u64, f64)> {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter_map(|v| Some((v["step"].as_u64()?, v["loss"].as_f64()?)))
        .collect()
}

#[test]
fn training_on_the_cubecl_kernels_follows_the_cpu_trainer() {
    let tmp = tempfile::tempdir().unwrap();
    let (corpus, graph) = bundled_corpus_and_graph(tmp.path());
    // The tiny preset without dropout: the backends draw different random numbers.
    let config = preset_with(tmp.path(), "tiny.toml", "dropout = 0.02", "dropout = 0.0", "tiny-no-dropout.toml");
    let p = |p: &Path| p.display().to_string();
    let train = |out: &Path, device: &str, steps: &str, init: Option<&Path>| {
        let (c, g, o, cfg) = (p(&corpus), p(&graph), p(out), p(&config));
        let mut args = vec!["--config", &cfg, "train", "--corpus", &c, "--graph", &g, "--out", &o];
        args.extend(["--device", device, "--max-steps", steps]);
        let init = init.map(p);
        if let Some(i) = &init {
            args.extend(["--init-from", i.as_str()]);
        }
        let o = corrflow(&args);
        assert!(o.status.success(), "{device}: {}", stderr(&o));
    };
    // One set of starting weights for both (the backends' initialisers draw differently).
    let start = tmp.path().join("start");
    train(&start, "cpu", "1", None);
    let (cpu, gpu) = (tmp.path().join("cpu"), tmp.path().join("wgpu"));
    train(&cpu, "cpu", "4", Some(&start));
    train(&gpu, "wgpu", "4", Some(&start));
    let (a, b) = (losses(&cpu), losses(&gpu));
    assert_eq!(a.len(), 4, "{a:?}");
    assert_eq!(a.iter().map(|s| s.0).collect::<Vec<_>>(), b.iter().map(|s| s.0).collect::<Vec<_>>());
    for ((step, x), (_, y)) in a.iter().zip(&b) {
        let rel = (x - y).abs() / x.abs();
        eprintln!("step {step}: CPU loss {x}, wgpu loss {y}, relative difference {rel:.2e}");
        assert!(rel < 1e-5, "step {step}: CPU loss {x}, wgpu loss {y} (relative difference {rel})");
    }
}
