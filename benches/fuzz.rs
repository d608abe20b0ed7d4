//! Mutation fuzzing of the parsers that take user bytes (issue 28): the HTTP request decoder,
//! the TOML config, MatrixMarket directories and HDF5 (h5ad / 10x) files; and (issue 51) AnnData
//! zarr stores and loom files (`fuzz/readers.rs`). Each execution
//! mutates a valid seed input (bit flips, byte overwrites with boundary values, inserted and
//! deleted bytes, truncation, duplicated slices) and runs the parser under `catch_unwind`; a
//! panic is a failure, reported with the execution number to replay it (same seed, same
//! mutations). A crash in C code (HDF5) ends the process instead, the execution number printed
//! last tells which.
//!
//! ```sh
//! cargo bench --bench fuzz -- request 1000000
//! cargo bench --bench fuzz -- config 1000000
//! cargo bench --bench fuzz -- mtx 1000000
//! cargo bench --bench fuzz -- h5 1000000 FILE.h5ad [FILE.h5 ...]    # e.g. the test fixtures
//! cargo bench --bench fuzz -- h5 500000..1000000 FILE.h5ad ...        # a range, e.g. one per core
//! cargo bench --bench fuzz -- zarr 100000 STORE.zarr [STORE.zarr ...]  # e.g. make_zarr_loom.py's stores
//! cargo bench --bench fuzz -- loom 100000 FILE.loom [FILE.loom ...]
//! ```
//! Execution `i` draws its mutations from its own stream of one seeded generator, so a range
//! replays exactly the executions of the same numbers in a whole run.
//! Prints one JSON line: target, executions, seconds, outcomes (ok / clean errors), panics.

#[path = "fuzz/mutate.rs"]
mod mutate;
#[path = "fuzz/readers.rs"]
mod readers;

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Instant;

use rand_chacha::ChaCha8Rng;

use mutate::{execution_rng, guarded, mutate, read_all};

struct Tally {
    ok: u64,
    errors: u64,
    panics: Vec<String>,
}

fn run(target: &str, range: Range<u64>, mut exec: impl FnMut(u64, &mut ChaCha8Rng) -> Result<bool, String>) -> Tally {
    let mut t = Tally { ok: 0, errors: 0, panics: Vec::new() };
    let start = Instant::now();
    let first = range.start;
    for i in range.clone() {
        let mut rng = execution_rng(i);
        match exec(i, &mut rng) {
            Ok(true) => t.ok += 1,
            Ok(false) => t.errors += 1,
            Err(p) => t.panics.push(format!("execution {i}: {p}")),
        }
        let done = i + 1 - first;
        if done.is_multiple_of(100_000) {
            eprintln!("{target}: {done} executions, {:.0}/s", done as f64 / start.elapsed().as_secs_f64());
        }
    }
    println!(
        "{}",
        serde_json::json!({"target": target, "executions": range.end - range.start, "first": first,
            "seconds": start.elapsed().as_secs_f64(),
            "ok": t.ok, "clean_errors": t.errors, "panics": t.panics.len(), "first_panics": &t.panics[..t.panics.len().min(5)]})
    );
    t
}

fn request(n: Range<u64>) -> Tally {
    use corrflow::server::api::{parse_embed_request, InputRules};
    let vocab = corrflow::vocab::Vocabulary::resolve(corrflow::vocab::BUILTIN).unwrap();
    let rules = InputRules {
        layout: corrflow::algorithms::SequenceLayout::v1(),
        vocab_size: vocab.len(),
        max_positions: 2048,
        max_cells: 64,
        allow_normalized: false,
    };
    let seeds = [
        r#"{"cells":[{"genes":["CD74","HLA-DRA","MS4A1","ENSG00000000419.12"],"counts":[12,7,3,1]}]}"#.as_bytes(),
        br#"{"input_ids":[[5,6,7,8],[9,10]]}"#,
        br#"{"cells":[{"genes":["TSPAN6"],"counts":[2.5e0]},{"genes":[],"counts":[]}]}"#,
    ];
    run("request", n, |i, rng| {
        let body = mutate(seeds[i as usize % seeds.len()], rng, false);
        guarded(|| match parse_embed_request(&body, &vocab, &rules) {
            Ok(_) => true,
            Err(e) => {
                assert!(matches!(e.status, 413 | 422) && !e.message.is_empty(), "{e:?}");
                false
            }
        })
    })
}

fn config(n: Range<u64>) -> Tally {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("configs");
    let seeds: Vec<Vec<u8>> =
        ["default.toml", "tiny.toml", "paper.toml"].iter().map(|f| std::fs::read(root.join(f)).unwrap()).collect();
    run("config", n, |i, rng| {
        let text = mutate(&seeds[i as usize % seeds.len()], rng, false);
        let text = String::from_utf8_lossy(&text).into_owned();
        guarded(|| corrflow::config::Config::parse(&text).is_ok())
    })
}

fn mtx(n: Range<u64>) -> Tally {
    let dir = scratch().join("mtx");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("features.tsv"), "ENSG00000187634\tSAMD11\tGene Expression\nENSG00000188976\tNOC2L\tGene Expression\nENSG00000187961\tKLHL17\tGene Expression\n").unwrap();
    std::fs::write(dir.join("barcodes.tsv"), "AAAC-1\nAAAG-1\nAAAT-1\n").unwrap();
    let seed =
        b"%%MatrixMarket matrix coordinate integer general\n% a comment\n3 3 5\n1 1 5\n2 1 3\n3 2 7\n1 3 2\n3 3 1\n";
    let opts = corrflow::formats::ReadOptions { chunk_cells: 2, scratch_dir: scratch(), ..Default::default() };
    run("mtx", n, |_, rng| {
        std::fs::write(dir.join("matrix.mtx"), mutate(seed, rng, false)).unwrap();
        guarded(|| read_all(&dir, &opts).is_ok())
    })
}

fn h5(n: Range<u64>, files: &[PathBuf]) -> Tally {
    let seeds: Vec<(Vec<u8>, String)> = files
        .iter()
        .map(|f| (std::fs::read(f).unwrap(), f.extension().unwrap_or_default().to_string_lossy().into_owned()))
        .collect();
    // libhdf5 loops forever on some damaged heaps; the open guard refuses those after its
    // patience, kept short here so that each costs seconds, not minutes.
    let opts = corrflow::formats::ReadOptions {
        gene_column: None,
        chunk_cells: 32,
        scratch_dir: scratch(),
        open_patience: Some(std::time::Duration::from_secs(2)),
        ..Default::default()
    };
    let mut hangs = Vec::new();
    let tally = run("h5", n, |i, rng| {
        let (seed, ext) = &seeds[i as usize % seeds.len()];
        // A new name each time: nothing cached about an earlier file applies.
        let path = scratch().join(format!("case-{}.{ext}", i % 2));
        let _ = std::fs::remove_file(&path);
        std::fs::write(&path, mutate(seed, rng, true)).unwrap();
        if i % 1000 == 0 {
            eprintln!("h5: execution {i}");
        }
        guarded(|| match read_all(&path, &opts) {
            Ok(()) => true,
            Err(e) => {
                if e.contains("did not finish opening") {
                    hangs.push(i);
                }
                false
            }
        })
    });
    println!(
        "{}",
        serde_json::json!({"target": "h5", "hangs_refused": hangs.len(), "first_hangs": &hangs[..hangs.len().min(20)]})
    );
    tally
}

fn zarr(n: Range<u64>, seeds: &[PathBuf]) -> Tally {
    assert!(
        !seeds.is_empty(),
        "zarr: give the seed stores (e.g. tests/python/make_zarr_loom.py's v2.zarr v3.zarr ...)"
    );
    let stores: Vec<readers::Store> = seeds
        .iter()
        .enumerate()
        .map(|(k, s)| readers::Store::copy(s, &scratch(), &format!("store-{k}.zarr")))
        .collect();
    let opts = readers::options(&scratch());
    run("zarr", n, |i, rng| readers::zarr(i, rng, &stores, &opts).map(|refused| refused.is_none()))
}

fn loom(n: Range<u64>, seeds: &[PathBuf]) -> Tally {
    assert!(!seeds.is_empty(), "loom: give the seed files (e.g. tests/python/make_zarr_loom.py's cells.loom ...)");
    let seeds: Vec<Vec<u8>> = seeds.iter().map(|f| std::fs::read(f).unwrap()).collect();
    let opts = readers::options(&scratch());
    let mut hangs = Vec::new();
    let tally = run("loom", n, |i, rng| {
        // A new name each time: nothing cached about an earlier file applies.
        let path = scratch().join(format!("case-{}.loom", i % 2));
        if i % 1000 == 0 {
            eprintln!("loom: execution {i}");
        }
        let r = readers::loom(i, rng, &seeds, &path, &opts);
        if matches!(&r, Ok(Some(e)) if e.contains("did not finish opening")) {
            hangs.push(i);
        }
        r.map(|refused| refused.is_none())
    });
    println!(
        "{}",
        serde_json::json!({"target": "loom", "hangs_refused": hangs.len(), "first_hangs": &hangs[..hangs.len().min(20)]})
    );
    tally
}

fn scratch() -> PathBuf {
    let base = if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
    let p = base.join(format!("corrflow-fuzz-{}", std::process::id()));
    std::fs::create_dir_all(&p).unwrap();
    p
}

/// `N` (executions 0..N) or `START..END`.
fn parse_range(s: &str) -> Range<u64> {
    let num = |t: &str| t.parse::<u64>().unwrap_or_else(|_| panic!("not an execution count or range: {s}"));
    match s.split_once("..") {
        Some((a, b)) => num(a)..num(b),
        None => 0..num(s),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let target = args.first().map(String::as_str).unwrap_or("request");
    let n = args.get(1).map_or(0..100_000, |s| parse_range(s));
    // Library panics are caught and counted; their default message would flood the output.
    std::panic::set_hook(Box::new(|_| {}));
    let tally = match target {
        "request" => request(n),
        "config" => config(n),
        "mtx" => mtx(n),
        "h5" => h5(n, &args[2..].iter().map(PathBuf::from).collect::<Vec<_>>()),
        "zarr" => zarr(n, &args[2..].iter().map(PathBuf::from).collect::<Vec<_>>()),
        "loom" => loom(n, &args[2..].iter().map(PathBuf::from).collect::<Vec<_>>()),
        other => panic!("unknown target {other} (request, config, mtx, h5, zarr, loom)"),
    };
    let _ = std::fs::remove_dir_all(scratch());
    std::process::exit(i32::from(!tally.panics.is_empty()));
}
