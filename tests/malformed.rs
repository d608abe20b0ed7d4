//! The malformed-input suite: well over 100 damaged inputs generated from the good fixtures
//! (truncations and corrupted blocks of every HDF5 layout, hand-broken MatrixMarket
//! directories, broken configs). Each must end with either a complete, verified atlas (a
//! corruption that leaves valid data) or a clear error: exit status 1 (never a panic or a
//! signal), a message naming the file, and nothing in the corpus that looks complete. The
//! MatrixMarket and config cases are bad by construction and must all be refused.

use crate::common;

use std::io::Write;
use std::path::{Path, PathBuf};

use common::*;
use rand::{Rng, SeedableRng};

/// What a case must end with.
#[derive(Clone, Copy, PartialEq)]
enum Expect {
    /// Refused with a message containing the needle.
    Refused(&'static str),
    /// Either refused cleanly or ingested completely (a corruption that leaves valid data).
    RefusedOrComplete,
}

struct Case {
    name: String,
    input: PathBuf,
    args: Vec<String>,
    expect: Expect,
}

/// Binary damage of an HDF5 file: truncations and blocks overwritten with 0xFF.
fn binary_cases(good: &Path, out: &Path, rng: &mut rand_chacha::ChaCha8Rng) -> Vec<Case> {
    let mut cases = Vec::new();
    for (file, extra) in [
        ("csr.h5ad", vec!["--gene-column", "gene_ids"]),
        ("csc.h5ad", vec!["--gene-column", "gene_ids"]),
        ("dense.h5ad", vec!["--gene-column", "gene_ids"]),
        ("legacy.h5ad", vec!["--gene-column", "gene_ids", "--obs-columns", "cell_type"]),
        ("tenx_v3.h5", vec![]),
    ] {
        let bytes = std::fs::read(good.join(file)).unwrap();
        let mut variants: Vec<(String, Vec<u8>)> = [0.001, 0.05, 0.2, 0.4, 0.6, 0.8, 0.95, 0.999]
            .iter()
            .map(|f| {
                (format!("{file}: truncated to {:.1}%", f * 100.0), bytes[..(bytes.len() as f64 * f) as usize].to_vec())
            })
            .collect();
        for _ in 0..10 {
            let at = rng.random_range(0..bytes.len());
            let mut b = bytes.clone();
            let end = (at + 16).min(b.len());
            b[at..end].fill(0xff);
            variants.push((format!("{file}: 16 bytes at {at} overwritten"), b));
        }
        for (i, (name, b)) in variants.into_iter().enumerate() {
            let input = out.join(format!("{i}-{file}"));
            std::fs::write(&input, b).unwrap();
            let args = extra.iter().map(|s| s.to_string()).collect();
            cases.push(Case { name, input, args, expect: Expect::RefusedOrComplete });
        }
    }
    cases
}

/// Hand-broken MatrixMarket directories (plain text, Cell Ranger layout).
fn mtx_cases(out: &Path) -> Vec<Case> {
    let header = "%%MatrixMarket matrix coordinate integer general\n";
    let features = "ENSG00000187634\tSAMD11\tGene Expression\nENSG00000188976\tNOC2L\tGene Expression\nENSG00000187961\tKLHL17\tGene Expression\n";
    let barcodes = "AAAC-1\nAAAG-1\n";
    let good_matrix = format!("{header}3 2 3\n1 1 5\n2 1 3\n3 2 7\n");
    let broken: Vec<(&str, String, &str, &str, &'static str)> = vec![
        (
            "more entries than the header says",
            format!("{header}3 2 2\n1 1 5\n2 1 3\n3 2 7\n"),
            features,
            barcodes,
            "entries",
        ),
        ("fewer entries than the header says", format!("{header}3 2 5\n1 1 5\n2 1 3\n"), features, barcodes, "entries"),
        ("row index 0", format!("{header}3 2 1\n0 1 5\n"), features, barcodes, "outside"),
        ("row index past the rows", format!("{header}3 2 1\n4 1 5\n"), features, barcodes, "outside"),
        ("column index past the columns", format!("{header}3 2 1\n1 3 5\n"), features, barcodes, "outside"),
        ("negative count", format!("{header}3 2 1\n1 1 -5\n"), features, barcodes, "negative"),
        ("non-numeric count", format!("{header}3 2 1\n1 1 five\n"), features, barcodes, "matrix.mtx"),
        (
            "NaN count",
            "%%MatrixMarket matrix coordinate real general\n3 2 1\n1 1 nan\n".into(),
            features,
            barcodes,
            "finite",
        ),
        ("no banner", "3 2 1\n1 1 5\n".into(), features, barcodes, "MatrixMarket"),
        (
            "complex field",
            "%%MatrixMarket matrix coordinate complex general\n3 2 1\n1 1 5 0\n".into(),
            features,
            barcodes,
            "complex",
        ),
        (
            "array format",
            "%%MatrixMarket matrix array integer general\n3 2\n1\n2\n3\n4\n5\n6\n".into(),
            features,
            barcodes,
            "coordinate",
        ),
        ("empty matrix file", String::new(), features, barcodes, "matrix.mtx"),
        ("size line missing", header.to_string(), features, barcodes, "matrix.mtx"),
        ("size line not numbers", format!("{header}three 2 1\n1 1 5\n"), features, barcodes, "matrix.mtx"),
        ("entry with two fields", format!("{header}3 2 1\n1 1\n"), features, barcodes, "matrix.mtx"),
        (
            "fewer features than rows",
            good_matrix.clone(),
            "ENSG00000187634\tSAMD11\tGene Expression\n",
            barcodes,
            "features",
        ),
        ("more barcodes than columns", good_matrix.clone(), features, "A-1\nB-1\nC-1\n", "barcodes"),
        ("fewer barcodes than columns", good_matrix.clone(), features, "A-1\n", "barcodes"),
        ("empty features file", good_matrix.clone(), "", barcodes, "features"),
        ("integer count with a fraction", format!("{header}3 2 1\n1 1 2.5\n"), features, barcodes, "non-integer"),
    ];
    let mut cases = Vec::new();
    for (i, (name, matrix, feats, codes, needle)) in broken.into_iter().enumerate() {
        let dir = out.join(format!("mtx-{i}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("matrix.mtx"), matrix).unwrap();
        std::fs::write(dir.join("features.tsv"), feats).unwrap();
        std::fs::write(dir.join("barcodes.tsv"), codes).unwrap();
        cases.push(Case { name: format!("mtx: {name}"), input: dir, args: vec![], expect: Expect::Refused(needle) });
    }
    // Missing files, and a gzip stream that is damaged.
    for (i, missing) in ["barcodes.tsv", "features.tsv", "matrix.mtx"].iter().enumerate() {
        let dir = out.join(format!("mtx-missing-{i}"));
        std::fs::create_dir_all(&dir).unwrap();
        for (f, text) in [("matrix.mtx", good_matrix.as_str()), ("features.tsv", features), ("barcodes.tsv", barcodes)]
        {
            if f != *missing {
                std::fs::write(dir.join(f), text).unwrap();
            }
        }
        let needle = if *missing == "matrix.mtx" { "matrix.mtx" } else { missing.trim_end_matches(".tsv") };
        cases.push(Case {
            name: format!("mtx: no {missing}"),
            input: dir,
            args: vec![],
            expect: Expect::Refused(needle),
        });
    }
    let dir = out.join("mtx-gz");
    std::fs::create_dir_all(&dir).unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(format!("{header}3 2 3\n1 1 5\n2 1 3\n3 2 7\n").as_bytes()).unwrap();
    let mut bytes = gz.finish().unwrap();
    let mid = bytes.len() / 2;
    bytes[mid..mid + 4].fill(0xff);
    std::fs::write(dir.join("matrix.mtx.gz"), bytes).unwrap();
    std::fs::write(dir.join("features.tsv"), features).unwrap();
    std::fs::write(dir.join("barcodes.tsv"), barcodes).unwrap();
    cases.push(Case {
        name: "mtx: damaged gzip".into(),
        input: dir,
        args: vec![],
        expect: Expect::Refused("matrix.mtx.gz"),
    });
    cases
}

/// Configs that must be refused before any work, naming the key.
fn config_cases(good: &Path, out: &Path) -> Vec<Case> {
    [
        ("unknown key", "[ingest]\nchunk_celss = 10\n", "chunk_celss"),
        ("unknown section", "[ingestt]\nchunk_cells = 10\n", "ingestt"),
        ("zero chunk", "[ingest]\nchunk_cells = 0\n", "chunk_cells"),
        ("absurd chunk", "[ingest]\nchunk_cells = 10000000000\n", "chunk_cells"),
        ("zstd level", "[ingest]\nzstd_level = 99\n", "zstd_level"),
        ("absurd hidden", "[model]\nhidden = 1000000\n", "model.hidden"),
        ("absurd layers", "[model]\nlayers = 100000\n", "model.layers"),
        ("absurd batch", "[train]\nbatch_size = 100000000\n", "batch_size"),
        ("absurd shuffle buffer", "[train]\nshuffle_buffer = 10000000000\n", "train.shuffle_buffer"),
        ("no masking worker", "[train]\nmask_workers = 0\n", "train.mask_workers"),
        ("absurd fine-tuning batch", "[finetune]\nbatch_size = 100000000\n", "finetune.batch_size"),
        ("string for a number", "[ingest]\nchunk_cells = \"many\"\n", "chunk_cells"),
        ("not TOML", "[ingest\nchunk_cells = 1\n", "config"),
        ("negative lr", "[train]\nlr = -1.0\n", "lr"),
        ("dropout 1", "[model]\ndropout = 1.0\n", "dropout"),
        ("heads do not divide hidden", "[model]\nhidden = 64\nheads = 5\n", "heads"),
        ("mask p", "[mask]\np = 1.5\n", "p"),
        ("finetune fractions", "[finetune]\nvalidation_fraction = 0.9\n", "validation_fraction"),
    ]
    .into_iter()
    .enumerate()
    .map(|(i, (name, text, needle))| {
        let cfg = out.join(format!("config-{i}.toml"));
        std::fs::write(&cfg, text).unwrap();
        Case {
            name: format!("config: {name}"),
            input: good.join("csr.h5ad"),
            args: vec!["--config".into(), cfg.display().to_string(), "--gene-column".into(), "gene_ids".into()],
            expect: Expect::Refused(needle),
        }
    })
    .collect()
}

fn looks_complete(corpus: &Path) -> bool {
    corpus.join("atlases/a/manifest.json").exists()
}

#[test]
fn every_malformed_input_gets_a_clear_error_or_a_complete_atlas_and_never_a_crash() {
    let Some(fx) = fixtures() else { return };
    let good = fx.join("good");
    let tmp = tempfile::tempdir().unwrap();
    let inputs = tmp.path().join("inputs");
    std::fs::create_dir_all(&inputs).unwrap();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(28);
    let mut cases = binary_cases(&good, &inputs, &mut rng);
    cases.extend(mtx_cases(&inputs));
    cases.extend(config_cases(&good, &inputs));
    assert!(cases.len() >= 100, "{} cases", cases.len());
    let (mut refused, mut accepted, mut problems) = (0, 0, Vec::new());
    for (i, case) in cases.iter().enumerate() {
        let corpus = tmp.path().join(format!("corpus-{i}"));
        let (c, input) = (corpus.display().to_string(), case.input.display().to_string());
        let mut args = vec!["ingest", "--atlas", "a", "--out", c.as_str()];
        args.extend(case.args.iter().map(String::as_str));
        args.push(input.as_str());
        let o = corrflow(&args);
        let err = stderr(&o);
        match o.status.code() {
            Some(0) => {
                accepted += 1;
                if let Expect::Refused(_) = case.expect {
                    problems.push(format!("{}: accepted", case.name));
                } else if !looks_complete(&corpus) {
                    problems.push(format!("{}: exit 0 without a complete atlas", case.name));
                } else {
                    let index = corrflow::corpus::CorpusIndex::open(&corpus, &["a".into()]);
                    if let Err(e) = index.and_then(|i| {
                        i.shards.iter().try_for_each(|s| corrflow::corpus::verify_shard(&s.path, s.bytes, &s.sha256))
                    }) {
                        problems.push(format!("{}: accepted but the atlas does not verify: {e}", case.name));
                    }
                }
            }
            Some(1) => {
                refused += 1;
                let file = case.input.file_name().unwrap().to_string_lossy().into_owned();
                let names_input = err.contains(&file) || case.name.starts_with("config");
                let needle_ok = match case.expect {
                    Expect::Refused(needle) => err.contains(needle),
                    Expect::RefusedOrComplete => true,
                };
                if !names_input || !needle_ok || err.contains("panicked") || !err.contains("error") {
                    problems.push(format!("{}: unclear error: {}", case.name, err.trim()));
                }
                if looks_complete(&corpus) {
                    problems.push(format!("{}: refused but left a complete-looking atlas", case.name));
                }
            }
            other => problems.push(format!("{}: crashed ({other:?}): {}", case.name, err.trim())),
        }
    }
    eprintln!("{} malformed inputs: {refused} refused clearly, {accepted} accepted as valid data", cases.len());
    assert!(problems.is_empty(), "{} of {} cases:\n{}", problems.len(), cases.len(), problems.join("\n"));
}
