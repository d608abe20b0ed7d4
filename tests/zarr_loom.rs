//! AnnData zarr stores (formats 2 and 3, sharded, CSR/CSC/dense X, raw, layers) and loom files
//! written by anndata / loompy (tests/python/make_zarr_loom.py) give exactly the tokens of the
//! h5ad of the same cells; obs columns in every encoding pass through as from the h5ad; cells
//! whose `filter_pass` is not 1 are left out unless --ignore-filter-pass. Cell names of looms
//! written by anndata, the readers' messages, and a short run of the zarr and loom fuzz targets
//! (benches/fuzz.rs runs them long).

use crate::common;
#[path = "../benches/fuzz/mutate.rs"]
mod mutate;
#[path = "../benches/fuzz/readers.rs"]
mod readers;

use std::path::{Path, PathBuf};

use common::*;

fn ingest(corpus: &Path, atlas: &str, extra: &[&str], file: &Path) -> serde_json::Value {
    let c = corpus.to_str().unwrap();
    let mut args = vec!["ingest", "--json", "--config", "configs/tiny.toml", "--atlas", atlas, "--out", c];
    args.extend_from_slice(extra);
    args.push(file.to_str().unwrap());
    ok_json(&corrflow(&args))
}

/// The fixtures' csr.h5ad and its zarr/loom variants, written once per test binary (the tests
/// run in parallel and would otherwise write the same files at once).
fn variants() -> Option<(PathBuf, PathBuf)> {
    static V: std::sync::OnceLock<Option<(PathBuf, PathBuf)>> = std::sync::OnceLock::new();
    V.get_or_init(|| {
        let fx = fixtures()?;
        let py = python()?;
        let out = fx.join("zarr_loom");
        let o = run_python(&py, "make_zarr_loom.py", &[fx.join("good").to_str().unwrap(), out.to_str().unwrap()]);
        assert!(o.status.success(), "make_zarr_loom.py: {}", stderr(&o));
        eprintln!("writers: {}", stdout(&o));
        Some((fx.join("good"), out))
    })
    .clone()
}

#[test]
fn zarr_and_loom_give_the_tokens_and_obs_of_the_h5ad() {
    let Some((good, v)) = variants() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let obs = ["--obs-columns", "cell_type,score,batch,flag"];
    let ids = ["--gene-column", "gene_ids"];
    ingest(tmp.path(), "h5ad", &[&ids[..], &obs[..]].concat(), &good.join("csr.h5ad"));
    let reference = atlas_tokens(tmp.path(), "h5ad");
    assert_eq!(reference.len(), 64);
    let cases: &[(&str, &[&str], &str, &str)] = &[
        ("v2", &[], "v2.zarr", "zarr (csr)"),
        ("v3", &[], "v3.zarr", "zarr (csr)"),
        ("v3_sharded", &[], "v3_sharded.zarr", "zarr (csr)"),
        ("v3_csc", &[], "v3_csc.zarr", "zarr (csc)"),
        ("v2_dense", &[], "v2_dense.zarr", "zarr (dense)"),
        ("raw", &["--counts", "raw"], "v3_raw_layers.zarr", "zarr (csr)"),
        ("layer", &["--counts", "layer:counts"], "v3_raw_layers.zarr", "zarr (csr)"),
    ];
    for (atlas, extra, file, format) in cases {
        if !v.join(file).exists() {
            missing(&format!("{file} (this anndata cannot write it)"));
            continue;
        }
        let s = ingest(tmp.path(), atlas, &[&ids[..], &obs[..], extra].concat(), &v.join(file));
        assert_eq!(atlas_tokens(tmp.path(), atlas), reference, "{atlas} ({file}) differs from the h5ad");
        let m = corrflow::corpus::AtlasManifest::load(&corrflow::corpus::atlas_dir(tmp.path(), atlas)).unwrap();
        assert_eq!(m.inputs[0].format, *format, "{s}");
    }
    // Loom: genes by Geneformer's `ensembl_id` row attribute without any flag; with or without
    // a /layers group.
    ingest(tmp.path(), "loom", &[], &v.join("cells.loom"));
    assert_eq!(atlas_tokens(tmp.path(), "loom"), reference, "loom differs from the h5ad");
    ingest(tmp.path(), "loom_no_layers", &[], &v.join("no_layers.loom"));
    assert_eq!(atlas_tokens(tmp.path(), "loom_no_layers"), reference, "a loom without /layers");
    // obs columns (categorical, float, int, bool) are the h5ad's, type for type.
    let Some(py) = python() else { return };
    let script = r#"
import sys, pyarrow.parquet as pq
d = sys.argv[1]
# Every column but `atlas`, which names the atlas.
read = lambda atlas: pq.read_table(f"{d}/atlases/{atlas}/shard-00000.parquet").drop_columns(["atlas"])
ref = read("h5ad")
for atlas in ["v2", "v3", "v3_csc", "v2_dense"]:
    t = read(atlas)
    assert t.schema == ref.schema, (atlas, t.schema, ref.schema)
    assert t.equals(ref), atlas
print("ok")
"#;
    let o = std::process::Command::new(py).args(["-c", script, tmp.path().to_str().unwrap()]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn obs_columns_in_every_zarr_encoding_are_read() {
    let Some((_, v)) = variants() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let cols = ["--obs-columns", "label,n_int,n_bool,cell_type", "--gene-column", "gene_ids"];
    ingest(tmp.path(), "h5", &[&cols[..], &["--ignore-filter-pass"]].concat(), &v.join("filter_pass.h5ad"));
    ingest(tmp.path(), "z", &cols, &v.join("v3.zarr"));
    ingest(tmp.path(), "z2", &cols, &v.join("v2.zarr"));
    let Some(py) = python() else { return };
    let script = r#"
import sys, pyarrow.parquet as pq
d = sys.argv[1]
# Every column but `atlas`, which names the atlas.
read = lambda atlas: pq.read_table(f"{d}/atlases/{atlas}/shard-00000.parquet").drop_columns(["atlas"])
h5 = read("h5")
for atlas in ["z", "z2"]:
    t = read(atlas)
    assert str(t.schema.field("n_int").type) == "int64" and str(t.schema.field("n_bool").type) == "bool", t.schema
    assert t.schema == h5.schema and t.equals(h5), atlas
    n_int, n_bool = t["n_int"].to_pylist(), t["n_bool"].to_pylist()
    assert len(n_int) == 64
    for i in range(len(n_int)):
        assert n_int[i] == (None if i % 5 == 0 else i), (atlas, i, n_int[i])
        assert n_bool[i] == (None if i % 7 == 0 else i % 2 == 0), (atlas, i, n_bool[i])
    assert t["label"].to_pylist() == t["cell_type"].to_pylist()
print("ok")
"#;
    let o = std::process::Command::new(py).args(["-c", script, tmp.path().to_str().unwrap()]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn cells_failing_filter_pass_are_left_out_unless_told_otherwise() {
    let Some((good, v)) = variants() else { return };
    let tmp = tempfile::tempdir().unwrap();
    ingest(tmp.path(), "all", &["--gene-column", "gene_ids"], &good.join("csr.h5ad"));
    let all = atlas_tokens(tmp.path(), "all");
    // filter_pass = i % 2: the odd cells pass.
    let odd: Vec<_> = all.iter().skip(1).step_by(2).cloned().collect();
    assert_eq!(odd.len(), 32);
    for (atlas, extra, file) in [
        ("h5ad", &["--gene-column", "gene_ids"][..], "filter_pass.h5ad"),
        ("zarr", &["--gene-column", "gene_ids"][..], "v3_filter_pass.zarr"),
        ("loom", &[][..], "filter_pass.loom"),
    ] {
        let s = ingest(tmp.path(), atlas, extra, &v.join(file));
        assert_eq!(atlas_tokens(tmp.path(), atlas), odd, "{atlas}: {s}");
        let every = format!("{atlas}_every");
        ingest(tmp.path(), &every, &[extra, &["--ignore-filter-pass"]].concat(), &v.join(file));
        assert_eq!(atlas_tokens(tmp.path(), &every), all, "{atlas} --ignore-filter-pass");
    }
    // vocab build counts the same cells as ingest: the loom's vocabulary is the h5ad's, and
    // reading every cell gives other medians.
    let vocab = |name: &str, extra: &[&str], file: &Path| {
        let out = tmp.path().join(name);
        let mut args = vec!["vocab", "build", "--json", "--out", out.to_str().unwrap()];
        args.extend_from_slice(extra);
        args.push(file.to_str().unwrap());
        ok_json(&corrflow(&args));
        ["token_dictionary.tsv", "gene_median_dictionary.tsv"].map(|f| std::fs::read_to_string(out.join(f)).unwrap())
    };
    let h = vocab("vh", &["--gene-column", "gene_ids"], &v.join("filter_pass.h5ad"));
    let l = vocab("vl", &[], &v.join("filter_pass.loom"));
    let z = vocab("vz", &["--gene-column", "gene_ids"], &v.join("v3_filter_pass.zarr"));
    assert!(h == l && h == z, "vocab build of the loom or zarr differs from the h5ad's");
    let every = vocab("ve", &["--gene-column", "gene_ids", "--ignore-filter-pass"], &v.join("filter_pass.h5ad"));
    assert_ne!(h[1], every[1], "--ignore-filter-pass gave the medians of the filtered cells");
}

#[test]
fn zarr_and_loom_errors_name_what_is_wrong() {
    let Some((_, v)) = variants() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("c");
    let run = |extra: &[&str], file: &Path| {
        let (c, f) = (corpus.display().to_string(), file.display().to_string());
        let mut args = vec!["ingest", "--atlas", "x", "--out", c.as_str()];
        args.extend_from_slice(extra);
        args.push(f.as_str());
        let o = corrflow(&args);
        assert!(!o.status.success(), "{f} was accepted");
        stderr(&o)
    };
    let e = run(&[], &v.join("plain.zarr"));
    assert!(e.contains("plain.zarr") && e.contains("not an AnnData one") && !e.contains("matrix.mtx"), "{e}");
    let e = run(&["--counts", "layer:spliced"], &v.join("v3_raw_layers.zarr"));
    assert!(e.contains("no layer 'spliced' (layers: counts)"), "{e}");
    let e = run(&["--counts", "raw"], &v.join("v3.zarr"));
    assert!(e.contains("--counts raw: the store has no raw/X"), "{e}");
    let e = run(&["--gene-column", "nope"], &v.join("cells.loom"));
    assert!(e.contains("--gene-column nope: no such row attribute") && e.contains("ensembl_id"), "{e}");
    let e = run(&["--counts", "raw"], &v.join("cells.loom"));
    assert!(e.contains("a loom file has no raw matrix"), "{e}");
    // A directory of neither kind lists what corrflow reads.
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let e = run(&[], &empty);
    assert!(e.contains("AnnData zarr") && e.contains("MatrixMarket") && e.contains("loom"), "{e}");
}

#[test]
fn loom_cell_names_are_found_where_anndatas_write_loom_puts_them() {
    let Some((good, v)) = variants() else { return };
    if !v.join("wl_named.loom").exists() {
        return missing("loompy (anndata's write_loom needs it)");
    }
    let tmp = tempfile::tempdir().unwrap();
    ingest(tmp.path(), "h5ad", &["--gene-column", "gene_ids"], &good.join("csr.h5ad"));
    let reference = atlas_tokens(tmp.path(), "h5ad");
    // Genes from the row attribute gene_ids (write_loom's copy of the var column), cells from
    // obs_names (an unnamed index) or from the only column attribute of distinct strings
    // (an index named 'cell'), without any flag.
    for file in ["wl_unnamed.loom", "wl_named.loom"] {
        let atlas = file.replace('.', "_");
        ingest(tmp.path(), &atlas, &[], &v.join(file));
        assert_eq!(atlas_tokens(tmp.path(), &atlas), reference, "{file}");
    }
    // Two such attributes: cells by position, with a warning naming both and the flag...
    let c = tmp.path().display().to_string();
    let two = v.join("wl_two.loom").display().to_string();
    let o = corrflow(&["ingest", "--json", "--atlas", "two", "--out", &c, &two]);
    let e = stderr(&o);
    ok_json(&o);
    assert!(e.contains("barcode, cell") && e.contains("--loom-cell-names"), "{e}");
    assert_eq!(atlas_tokens(tmp.path(), "two")[1].0, "1");
    // ...and the flag chooses.
    ingest(tmp.path(), "chosen", &["--loom-cell-names", "cell"], &v.join("wl_two.loom"));
    assert_eq!(atlas_tokens(tmp.path(), "chosen"), reference);
    let o = corrflow(&["ingest", "--atlas", "nope", "--out", &c, "--loom-cell-names", "nope", &two]);
    let e = stderr(&o);
    assert!(!o.status.success() && e.contains("--loom-cell-names nope: no such column attribute"), "{e}");
    assert!(e.contains("barcode, cell, cell_type"), "{e}");
}

#[test]
fn loom_and_zarr_messages_name_the_array_and_what_is_wrong() {
    let Some((good, v)) = variants() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("c");
    let run = |extra: &[&str], file: &Path| {
        let (c, f) = (corpus.display().to_string(), file.display().to_string());
        let mut args = vec!["ingest", "--atlas", "x", "--out", c.as_str()];
        args.extend_from_slice(extra);
        args.push(f.as_str());
        let o = corrflow(&args);
        assert_eq!(o.status.code(), Some(1), "{f}: {}", stderr(&o));
        stderr(&o)
    };
    let e = run(&[], &v.join("matrix_1d.loom"));
    assert!(e.contains("matrix has 1 dimensions") && e.contains("a loom file's matrix has 2"), "{e}");
    let e = run(&[], &v.join("matrix_3d.loom"));
    assert!(e.contains("matrix has 3 dimensions (shape [3000, 64, 2])"), "{e}");
    let e = run(&["--counts", "layer:spliced"], &v.join("layer_short.loom"));
    assert!(
        e.contains("layers/spliced has shape [3000, 61] but matrix has [3000, 64]") && !e.contains("CellID"),
        "{e}"
    );
    // No gene of the vocabulary: the loom's row attribute is named, not a "var index".
    let e = run(&[], &v.join("no_vocab_genes.loom"));
    assert!(e.contains("genes in row attribute 'Gene' is in vocabulary") && !e.contains("var index"), "{e}");
    assert!(e.contains("pick another row attribute with --gene-column"), "{e}");
    // zarr: a store cut short, a complex data type, a chunk that does not decompress.
    let damaged = |name: &str, edit: &dyn Fn(&Path)| {
        let dir = tmp.path().join(name);
        copy_dir(&v.join("v3.zarr"), &dir);
        edit(&dir);
        dir
    };
    let cut = damaged("cut.zarr", &|d| {
        let f = d.join("X/indices/zarr.json");
        let text = std::fs::read(&f).unwrap();
        std::fs::write(&f, &text[..text.len() / 2]).unwrap();
    });
    let e = run(&["--gene-column", "gene_ids"], &cut);
    assert!(e.contains("X/indices/zarr.json: not valid JSON") && !e.contains("has no 'indices' array"), "{e}");
    let complex = damaged("complex.zarr", &|d| {
        let f = d.join("X/data/zarr.json");
        std::fs::write(&f, std::fs::read_to_string(&f).unwrap().replace("\"float32\"", "\"complex64\"")).unwrap();
    });
    let e = run(&["--gene-column", "gene_ids"], &complex);
    assert!(e.contains("X/data: zarr data type 'complex64' is not one AnnData writes") && !e.contains("fill"), "{e}");
    let garbage = damaged("garbage.zarr", &|d| std::fs::write(d.join("X/data/c/0"), b"not zstd at all").unwrap());
    let e = run(&["--gene-column", "gene_ids"], &garbage);
    assert!(e.contains("X/data: chunk 0 (key X/data/c/0) cannot be decoded"), "{e}");
    // Normalized values in X: the store's other matrices are named, as for h5ad.
    let e = run(&["--gene-column", "gene_ids"], &v.join("v3_raw_layers.zarr"));
    assert!(e.contains("a non-integer count") && e.contains("--counts raw, --counts layer:counts"), "{e}");
    // Genes matched by symbol: the zarr store's var column of Ensembl ids is suggested, as for h5ad.
    let s = ingest(tmp.path(), "symbols", &[], &v.join("v3.zarr"));
    let w = s["warnings"].to_string();
    assert!(w.contains("pass --gene-column gene_ids"), "{s}");
    let s = ingest(tmp.path(), "symbols_h5ad", &[], &good.join("csr.h5ad"));
    assert!(s["warnings"].to_string().contains("pass --gene-column gene_ids"), "{s}");
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let t = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &t);
        } else {
            std::fs::copy(e.path(), t).unwrap();
        }
    }
}

/// The bounded run of benches/fuzz.rs' `zarr` and `loom` targets (the long run is documented in
/// docs/testing.md): damaged stores and loom files are read or refused, never a panic.
#[test]
fn a_short_fuzz_of_the_zarr_and_loom_readers_finds_no_panic() {
    let Some((_, v)) = variants() else { return };
    let scratch = tempfile::tempdir().unwrap();
    let stores: Vec<readers::Store> = ["v2.zarr", "v3.zarr", "v3_sharded.zarr", "v3_csc.zarr"]
        .iter()
        .filter(|s| v.join(s).exists())
        .map(|s| readers::Store::copy(&v.join(s), scratch.path(), s))
        .collect();
    let looms: Vec<Vec<u8>> =
        ["cells.loom", "wl_named.loom"].iter().filter_map(|f| std::fs::read(v.join(f)).ok()).collect();
    let opts = readers::options(scratch.path());
    let (mut read, mut refused, mut panics) = (0, 0, Vec::new());
    let mut tally = |target: &str, i: u64, r: readers::Outcome| match r {
        Ok(None) => read += 1,
        Ok(Some(e)) => {
            assert!(!e.trim().is_empty(), "{target} execution {i}: an empty message");
            refused += 1
        }
        Err(p) => panics.push(format!("{target} execution {i}: {p}")),
    };
    for i in 0..300 {
        tally("zarr", i, readers::zarr(i, &mut mutate::execution_rng(i), &stores, &opts));
    }
    let loom = scratch.path().join("case.loom");
    for i in 0..40 {
        tally("loom", i, readers::loom(i, &mut mutate::execution_rng(i), &looms, &loom, &opts));
    }
    eprintln!("fuzz: {read} read, {refused} refused, {} panics", panics.len());
    assert!(panics.is_empty(), "{panics:#?}");
}
