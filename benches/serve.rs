//! Inference benchmarks of an exported model:
//! 1. burn's CPU forward vs ONNX Runtime on the same model and batch (8 cells × 256 tokens);
//! 2. offline throughput: every cell of a corpus through the runtime in token-budget batches
//!    (what `embed --model` does after tokenizing);
//! 3. the server on loopback under a bounded closed-loop load: C clients, each sending one
//!    request of 8 cells as soon as its previous one is answered, for SECONDS per level;
//!    throughput (cells/s) and latency percentiles.
//!
//! cargo bench --bench serve -- CKPT MODEL.onnx CORPUS [SECONDS [C1,C2,...|forward]]
//! (`forward`: part 1 only, burn and ONNX Runtime alternating for 11 rounds)

use std::path::PathBuf;
use std::time::{Duration, Instant};

use corrflow::embed::Pooling;
use corrflow::runtime::{plan_batches, OrtEncoder, PaddedBatch, RuntimeOptions};
use corrflow::server::batcher::BatchConfig;
use corrflow::server::{serve, ServeOptions};
use corrflow::train::CpuBackend;

const TOKEN_BUDGET: usize = 16384;
const MAX_ROWS: usize = 64;
const CELLS_PER_REQUEST: usize = 8;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    anyhow::ensure!(args.len() >= 3, "usage: cargo bench --bench serve -- CKPT MODEL.onnx CORPUS [SECONDS [C1,C2,..]]");
    let (ckpt, model, corpus) = (PathBuf::from(&args[0]), PathBuf::from(&args[1]), PathBuf::from(&args[2]));
    let secs: f64 = args.get(3).map_or(Ok(10.0), |s| s.parse())?;
    let forward_only = args.get(4).is_some_and(|a| a == "forward");
    let levels: Vec<usize> = match args.get(4) {
        _ if forward_only => Vec::new(),
        None => vec![1, 2, 4, 8, 16],
        Some(s) => s.split(',').map(str::parse).collect::<Result<_, _>>()?,
    };

    let mut encoder = OrtEncoder::open(&model, &RuntimeOptions::default())?;
    let cells = first_cells(&corpus, encoder.meta.tokenize_layout().max_genes)?;
    let mean_len = cells.iter().map(Vec::len).sum::<usize>() as f64 / cells.len() as f64;
    println!(
        "model {} ({} layers, hidden {}), {} cells, mean length {mean_len:.0}, runtime {}",
        model.display(),
        encoder.meta.model.layers,
        encoder.meta.model.hidden,
        cells.len(),
        encoder.library.display()
    );
    forward(&ckpt, &mut encoder, &cells, secs, forward_only)?;
    if forward_only {
        return Ok(());
    }
    let offline = offline_rate(&mut encoder, &cells)?;
    drop(encoder);
    under_load(&model, &cells, secs, &levels, offline)
}

/// The corpus's first 4,000 cells, each cut to the model's gene budget.
fn first_cells(corpus: &std::path::Path, keep: usize) -> anyhow::Result<Vec<Vec<u32>>> {
    let opened = corrflow::corpus::Corpus::open(corpus)?;
    let index = opened.index(&[])?;
    let mut cells: Vec<Vec<u32>> = Vec::new();
    index.for_each_cell_block(opened.vocab.len(), |b| {
        cells.extend((0..b.len()).map(|i| b.cell(i).iter().take(keep).copied().collect::<Vec<u32>>()));
        Ok(())
    })?;
    cells.truncate(4000);
    Ok(cells)
}

/// 1. burn vs ort on one batch of 8 cells × 256 tokens: medians of timed runs, or with
/// `alternating` 11 rounds of each in turn.
fn forward(
    ckpt: &std::path::Path,
    encoder: &mut OrtEncoder,
    cells: &[Vec<u32>],
    secs: f64,
    alternating: bool,
) -> anyhow::Result<()> {
    let long: Vec<&[u32]> = cells.iter().filter(|c| c.len() >= 256).take(8).map(|c| &c[..256]).collect();
    anyhow::ensure!(long.len() == 8, "need 8 cells with ≥ 256 tokens");
    let batch = PaddedBatch::new(long, encoder.vocab.pad);
    let device = Default::default();
    let loaded = corrflow::model::load_checkpoint::<CpuBackend>(ckpt, &device)?;
    let layers = loaded.state.model.layers;
    let burn_once = || {
        let (_, pooled) = loaded.forward(&batch, layers, Pooling::Mean);
        pooled.into_data().to_vec::<f32>().expect("f32")
    };
    if alternating {
        // Alternating rounds, so that both runtimes see the same phases of a shared machine.
        burn_once();
        encoder.embed(&batch).expect("ort run");
        let (mut burn_t, mut ort_t, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..11 {
            let t = Instant::now();
            burn_once();
            burn_t.push(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            encoder.embed(&batch).expect("ort run");
            ort_t.push(t.elapsed().as_secs_f64() * 1e3);
            ratios.push(burn_t.last().unwrap() / ort_t.last().unwrap());
        }
        let (b, o, r) = (median(&mut burn_t), median(&mut ort_t), median(&mut ratios));
        // `median` sorted the ratios: the ends are the range.
        let range = format!("{:.2}–{:.2}x", ratios[0], ratios[ratios.len() - 1]);
        println!("forward 8x256, 11 alternating rounds: burn (ndarray CPU) median {b:.1} ms, onnxruntime median {o:.1} ms; per-round ratio median {r:.2}x (range {range})");
        return Ok(());
    }
    let burn_ms = median_ms(5, 2.0 * secs.min(5.0), || {
        burn_once();
    });
    let ort_ms = median_ms(5, 2.0 * secs.min(5.0), || {
        encoder.embed(&batch).expect("ort run");
    });
    println!("forward 8x256: burn (ndarray CPU) {burn_ms:.1} ms, onnxruntime {ort_ms:.1} ms: {:.2}x", burn_ms / ort_ms);
    Ok(())
}

/// 2. Offline throughput (cells/s): every cell through the runtime in token-budget batches.
fn offline_rate(encoder: &mut OrtEncoder, cells: &[Vec<u32>]) -> anyhow::Result<f64> {
    let lengths: Vec<usize> = cells.iter().map(Vec::len).collect();
    let plan = plan_batches(&lengths, TOKEN_BUDGET, MAX_ROWS);
    let t = Instant::now();
    for rows in &plan {
        encoder.embed(&PaddedBatch::new(rows.iter().map(|&i| cells[i].as_slice()), encoder.vocab.pad))?;
    }
    let offline = cells.len() as f64 / t.elapsed().as_secs_f64();
    println!("offline: {offline:.0} cells/s ({} batches, budget {TOKEN_BUDGET} tokens)", plan.len());
    Ok(offline)
}

/// 3. The server on loopback, each level of clients for `secs`, one table row per level.
fn under_load(
    model: &std::path::Path,
    cells: &[Vec<u32>],
    secs: f64,
    levels: &[usize],
    offline: f64,
) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let options = ServeOptions {
        model: model.to_path_buf(),
        addr: "127.0.0.1:0".parse()?,
        runtime: RuntimeOptions::default(),
        batch: BatchConfig { token_budget: TOKEN_BUDGET, max_rows: MAX_ROWS, max_wait: Duration::from_millis(2) },
        max_queue: 1024,
        max_body_bytes: 64 << 20,
        max_inflight_bytes: 1 << 30,
        max_cells_per_request: 1024,
        bearer_token: None,
        body_timeout: Duration::from_secs(30),
        ..ServeOptions::new(model.to_path_buf(), "127.0.0.1:0".parse()?)
    };
    let server = std::thread::spawn(move || {
        rt.block_on(serve(
            options,
            async {
                let _ = stop_rx.await;
            },
            move |a| {
                let _ = addr_tx.send(a);
            },
        ))
    });
    let url = format!("http://{}", addr_rx.recv()?);
    let start = Instant::now();
    while ureq::get(&format!("{url}/health")).call().is_err() {
        anyhow::ensure!(start.elapsed() < Duration::from_secs(60), "server not ready");
        std::thread::sleep(Duration::from_millis(20));
    }
    let bodies: Vec<String> =
        cells.chunks(CELLS_PER_REQUEST).map(|c| serde_json::json!({ "input_ids": c }).to_string()).collect();
    println!("| clients | requests | cells/s | vs offline | p50 ms | p90 ms | p99 ms | max ms | non-200 |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for &c in levels {
        let (mut lat, done, failed) = closed_loop(&url, &bodies, c, secs);
        lat.sort_by(f64::total_cmp);
        let q = |p: f64| lat.get(((lat.len() as f64 - 1.0) * p).round() as usize).copied().unwrap_or(f64::NAN);
        let rate = done as f64 / secs;
        println!(
            "| {c} | {} | {rate:.0} | {:.0}% | {:.1} | {:.1} | {:.1} | {:.1} | {failed} |",
            lat.len(),
            100.0 * rate / offline,
            q(0.5),
            q(0.9),
            q(0.99),
            lat.last().copied().unwrap_or(f64::NAN)
        );
    }
    let _ = stop_tx.send(());
    server.join().expect("server thread")?;
    Ok(())
}

/// `clients` closed-loop clients for `secs`: the latencies (ms) of the answered requests, the
/// cells they carried, and the requests that failed.
fn closed_loop(url: &str, bodies: &[String], clients: usize, secs: f64) -> (Vec<f64>, usize, usize) {
    let until = Instant::now() + Duration::from_secs_f64(secs);
    let results: Vec<(Vec<f64>, usize, usize)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..clients)
            .map(|k| {
                s.spawn(move || {
                    let agent = ureq::AgentBuilder::new().build();
                    let (mut lat, mut cells_done, mut failed) = (Vec::new(), 0usize, 0usize);
                    let mut i = k;
                    while Instant::now() < until {
                        let t = Instant::now();
                        let r = agent
                            .post(&format!("{url}/v1/embed"))
                            .set("Content-Type", "application/json")
                            .send_string(&bodies[i % bodies.len()]);
                        match r {
                            Ok(resp) => {
                                let _ = resp.into_string();
                                lat.push(t.elapsed().as_secs_f64() * 1e3);
                                cells_done += CELLS_PER_REQUEST;
                            }
                            Err(_) => failed += 1,
                        }
                        i += clients;
                    }
                    (lat, cells_done, failed)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("client")).collect()
    });
    let lat = results.iter().flat_map(|r| r.0.iter().copied()).collect();
    (lat, results.iter().map(|r| r.1).sum(), results.iter().map(|r| r.2).sum())
}

/// Median of `v` (sorted in place).
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median wall time (ms) of `f` over at least `min_runs` runs and about `budget_s` seconds.
fn median_ms(min_runs: usize, budget_s: f64, mut f: impl FnMut()) -> f64 {
    f(); // warm-up
    let start = Instant::now();
    let mut times = Vec::new();
    while times.len() < min_runs || start.elapsed().as_secs_f64() < budget_s {
        let t = Instant::now();
        f();
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    median(&mut times)
}
