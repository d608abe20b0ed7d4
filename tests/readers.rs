//! Every reader (h5ad CSR, CSC, dense, legacy, raw/layers, 10x h5, MatrixMarket) yields the
//! same tokens for the same cells, and obs columns pass through with their types.

use crate::common;

use common::*;

fn ingest(corpus: &std::path::Path, atlas: &str, extra: &[&str], file: &std::path::Path) -> serde_json::Value {
    let c = corpus.to_str().unwrap();
    let mut args = vec!["ingest", "--json", "--config", "configs/tiny.toml", "--atlas", atlas, "--out", c];
    args.extend_from_slice(extra);
    args.push(file.to_str().unwrap());
    let o =
        std::process::Command::new(env!("CARGO_BIN_EXE_corrflow")).current_dir(repo()).args(&args).output().unwrap();
    ok_json(&o)
}

#[test]
fn all_formats_give_identical_tokens() {
    let Some(fx) = fixtures() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let good = fx.join("good");
    ingest(tmp.path(), "csr", &["--gene-column", "gene_ids"], &good.join("csr.h5ad"));
    let reference = atlas_tokens(tmp.path(), "csr");
    assert_eq!(reference.len(), 64);
    let cases: &[(&str, &[&str], &str)] = &[
        ("csc", &["--gene-column", "gene_ids"], "csc.h5ad"),
        ("dense", &["--gene-column", "gene_ids"], "dense.h5ad"),
        ("legacy", &["--gene-column", "gene_ids"], "legacy.h5ad"),
        ("raw", &["--gene-column", "gene_ids", "--counts", "raw"], "raw_layers.h5ad"),
        ("layer", &["--gene-column", "gene_ids", "--counts", "layer:counts"], "raw_layers.h5ad"),
        ("log1p", &["--gene-column", "gene_ids", "--log1p"], "raw_layers.h5ad"),
        ("tenx", &[], "tenx_v3.h5"),
        ("tenx_v2_human", &["--genome", "GRCh38"], "tenx_v2_two_genomes.h5"),
        ("tenx_v3_human", &["--genome", "GRCh38"], "tenx_v3_two_genomes.h5"),
        ("mtx", &[], "mtx"),
    ];
    for (atlas, extra, file) in cases {
        ingest(tmp.path(), atlas, extra, &good.join(file));
        assert_eq!(atlas_tokens(tmp.path(), atlas), reference, "{atlas} ({file}) differs from csr");
    }
    // A v2 file of two genomes is refused without --genome, naming them; an unknown one too.
    for (extra, file, needle) in [
        (&[][..], "tenx_v2_two_genomes.h5", "2 genomes (GRCh38, mm10): choose one with --genome"),
        (&["--genome", "hg19"][..], "tenx_v2_two_genomes.h5", "no genome 'hg19' (genomes: GRCh38, mm10)"),
        (&["--genome", "hg19"][..], "tenx_v3_two_genomes.h5", "no genome 'hg19' (genomes: GRCh38, mm10)"),
    ] {
        let corpus = tmp.path().join("refused");
        let (c, f) = (corpus.display().to_string(), good.join(file).display().to_string());
        let mut args = vec!["ingest", "--atlas", "x", "--out", c.as_str()];
        args.extend(extra);
        args.push(f.as_str());
        let o = corrflow(&args);
        assert!(!o.status.success() && stderr(&o).contains(needle) && stderr(&o).contains(file), "{}", stderr(&o));
    }
    // Symbols map through gene_name_id.tsv; old symbols may miss, so only the mapping is checked.
    ingest(tmp.path(), "symbols", &[], &good.join("csr.h5ad"));
    let m = corrflow::corpus::AtlasManifest::load(&corrflow::corpus::atlas_dir(tmp.path(), "symbols")).unwrap();
    let g = &m.inputs[0].genes;
    assert!(g.matched_by_symbol > 2_500 && g.matched_by_id == 0, "{g:?}");
}

#[test]
fn obs_columns_pass_through_with_their_types() {
    let Some(fx) = fixtures() else { return };
    let Some(py) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let good = fx.join("good");
    ingest(
        tmp.path(),
        "new",
        &["--gene-column", "gene_ids", "--obs-columns", "cell_type,score,batch,flag"],
        &good.join("csr.h5ad"),
    );
    ingest(
        tmp.path(),
        "legacy",
        &["--gene-column", "gene_ids", "--obs-columns", "cell_type,score"],
        &good.join("legacy.h5ad"),
    );
    let script = r#"
import sys, anndata as ad, pyarrow.parquet as pq, numpy as np
a = ad.read_h5ad(sys.argv[1])
for atlas, cols in [("new", ["cell_type", "score", "batch", "flag"]), ("legacy", ["cell_type", "score"])]:
    t = pq.read_table(f"{sys.argv[2]}/atlases/{atlas}/shard-00000.parquet")
    assert t["cell_id"].to_pylist() == list(a.obs_names)
    assert t["cell_type"].to_pylist() == list(a.obs["cell_type"].astype(str)), atlas
    assert np.allclose(t["score"].to_pylist(), a.obs["score"].values, atol=1e-6 if atlas == "legacy" else 0), atlas
    if atlas == "new":
        assert str(t.schema.field("batch").type) == "int64" and t["batch"].to_pylist() == list(a.obs["batch"])
        assert str(t.schema.field("flag").type) == "bool" and t["flag"].to_pylist() == list(a.obs["flag"])
print("ok")
"#;
    let o = std::process::Command::new(py)
        .args(["-c", script, good.join("csr.h5ad").to_str().unwrap(), tmp.path().to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn csc_input_is_transposed_across_chunk_and_shard_boundaries() {
    let Some(fx) = fixtures() else { return };
    let tmp = tempfile::tempdir().unwrap();
    // 512 cells with 128-cell chunks and 256-cell shards: several buckets and two shards.
    let good = fx.join("good");
    ingest(tmp.path(), "csr", &["--gene-column", "gene_ids"], &good.join("repeat8.h5ad"));
    let s = ingest(tmp.path(), "csc", &["--gene-column", "gene_ids"], &good.join("repeat8_csc.h5ad"));
    assert_eq!(s["shards"], 2);
    let (csr, csc) = (atlas_tokens(tmp.path(), "csr"), atlas_tokens(tmp.path(), "csc"));
    assert_eq!(csr, csc);
    assert_eq!(csc.len(), 512);
    for (i, (_, t)) in csc.iter().enumerate() {
        assert_eq!(t, &csc[i % 64].1, "repeated cell {i} differs from its original");
    }
}

#[test]
fn cell_labels_follow_an_obs_column_by_cell_key_across_atlases() {
    use arrow_array::{Array, StringArray};
    use corrflow::corpus::{CellLabels, Corpus, NO_LABEL};
    let Some(fx) = fixtures() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let file = fx.join("good/csr.h5ad");
    for atlas in ["a", "b"] {
        ingest(tmp.path(), atlas, &["--gene-column", "gene_ids", "--obs-columns", "cell_type,batch"], &file);
    }
    let index = Corpus::open(tmp.path()).unwrap().index(&[]).unwrap();
    let labels = CellLabels::read(&index, "cell_type").unwrap();
    assert_eq!(labels.cells() as u64, index.cells);
    assert!(labels.names.windows(2).all(|w| w[0] < w[1]), "names are sorted and distinct");
    // Cell keys run over atlas a, then b: the label of key k is cell k's value in the shards.
    let mut values: Vec<String> = Vec::new();
    for atlas in ["a", "b"] {
        corrflow::corpus::for_each_batch(&corrflow::corpus::atlas_dir(tmp.path(), atlas), |rb| {
            let col = rb.column_by_name("cell_type").unwrap().as_any().downcast_ref::<StringArray>().unwrap();
            values.extend((0..col.len()).map(|i| col.value(i).to_string()));
            Ok(())
        })
        .unwrap();
    }
    assert_eq!(values.len() as u64, index.cells);
    for (k, v) in values.iter().enumerate() {
        let code = labels.code(k as u64);
        assert_ne!(code, NO_LABEL);
        assert_eq!(&labels.names[code as usize], v, "cell {k}");
    }
    assert_eq!(labels.code(index.cells), NO_LABEL, "keys past the corpus have no label");
    // Integer columns are labels by their text; token columns and unknown columns are refused.
    let batch = CellLabels::read(&index, "batch").unwrap();
    assert!(batch.names.iter().all(|n| n.parse::<i64>().is_ok()), "{:?}", batch.names);
    assert!(CellLabels::read(&index, "input_ids").is_err());
    let e = CellLabels::read(&index, "no_such_column").unwrap_err().to_string();
    assert!(e.contains("no_such_column") && e.contains("no atlas of the corpus (a, b)"), "{e}");
}

#[test]
fn nullable_integer_and_boolean_obs_keep_their_values_and_missing_entries_and_zero_cell_files_are_refused() {
    let Some(py) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let (nullable, zero) = (tmp.path().join("nullable.h5ad"), tmp.path().join("zero.h5ad"));
    // anndata writes pandas' nullable Int64/boolean as groups of values and a boolean mask.
    let make = r#"
import sys, anndata as ad, pandas as pd
a = ad.read_h5ad(sys.argv[1])[:40].copy()
a.obs["nint"] = pd.array([7, None, -3, None] * 10, dtype="Int64")
a.obs["nbool"] = pd.array([True, None, False, None] * 10, dtype="boolean")
a.write_h5ad(sys.argv[2])
a[:0].copy().write_h5ad(sys.argv[3])
"#;
    let o = std::process::Command::new(&py)
        .args(["-c", make, bundled().to_str().unwrap(), nullable.to_str().unwrap(), zero.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    ingest(tmp.path(), "n", &["--gene-column", "gene_ids", "--obs-columns", "nint,nbool"], &nullable);
    let check = r#"
import sys, pyarrow.parquet as pq
t = pq.read_table(f"{sys.argv[1]}/atlases/n/shard-00000.parquet")
assert t["nint"].to_pylist() == [7, None, -3, None] * 10, t["nint"].to_pylist()[:8]
assert t["nbool"].to_pylist() == [True, None, False, None] * 10, t["nbool"].to_pylist()[:8]
print("ok")
"#;
    let o = std::process::Command::new(&py).args(["-c", check, tmp.path().to_str().unwrap()]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let c = tmp.path().join("z");
    let o = corrflow(&[
        "ingest",
        "--atlas",
        "z",
        "--gene-column",
        "gene_ids",
        "--out",
        c.to_str().unwrap(),
        zero.to_str().unwrap(),
    ]);
    assert!(!o.status.success() && stderr(&o).contains("has no cells (0 rows)"), "{}", stderr(&o));
    assert!(!c.join("atlases/z").exists(), "no atlas is published");
}

/// Embeddings of 40 cells in two well-separated classes, as Parquet compressed with `codec`.
fn write_embeddings(path: &std::path::Path, codec: parquet::basic::Compression) {
    use std::sync::Arc;

    use arrow_array::{ArrayRef, FixedSizeListArray, Float32Array, RecordBatch, StringArray};
    use arrow_schema::{DataType, Field};

    let dim: usize = 4;
    let labels: Vec<&str> = (0..40).map(|i| if i % 2 == 0 { "T" } else { "B" }).collect();
    let values: Vec<f32> =
        (0..40 * dim).map(|k| if (k / dim) % 2 == (k % dim) % 2 { 1.0 } else { 0.0 } + (k % 7) as f32 * 0.01).collect();
    let item = Arc::new(Field::new("item", DataType::Float32, false));
    let emb = FixedSizeListArray::new(item, dim as i32, Arc::new(Float32Array::from(values)), None);
    let ids = StringArray::from_iter_values((0..40).map(|i| format!("c{i}")));
    let columns: Vec<(&str, ArrayRef)> = vec![
        ("cell_id", Arc::new(ids)),
        ("embedding", Arc::new(emb)),
        ("cell_type", Arc::new(StringArray::from(labels))),
    ];
    let batch = RecordBatch::try_from_iter(columns).unwrap();
    let props = parquet::file::properties::WriterProperties::builder().set_compression(codec).build();
    let mut w = parquet::arrow::ArrowWriter::try_new(std::fs::File::create(path).unwrap(), batch.schema(), Some(props))
        .unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

/// Issue 43: a Parquet file compressed with any codec pyarrow or polars writes by default
/// (snappy, zstd, lz4, gzip) is read, not refused as "damaged or not Parquet".
#[test]
fn parquet_inputs_with_the_usual_codecs_are_read() {
    use parquet::basic::{Compression, GzipLevel, ZstdLevel};

    let tmp = tempfile::tempdir().unwrap();
    let codecs = [
        ("snappy", Compression::SNAPPY),
        ("zstd", Compression::ZSTD(ZstdLevel::default())),
        ("lz4", Compression::LZ4),
        ("lz4_raw", Compression::LZ4_RAW),
        ("gzip", Compression::GZIP(GzipLevel::default())),
        ("none", Compression::UNCOMPRESSED),
    ];
    let mut files = Vec::new();
    for (name, codec) in codecs {
        let path = tmp.path().join(format!("{name}.parquet"));
        write_embeddings(&path, codec);
        files.push(path);
    }
    // pyarrow's own default (snappy) as well, when the test venv is there.
    if let Some(py) = python() {
        let path = tmp.path().join("pyarrow.parquet");
        let script =
            "import sys, pyarrow.parquet as pq; t = pq.read_table(sys.argv[1]); pq.write_table(t, sys.argv[2]); \
                      assert pq.ParquetFile(sys.argv[2]).metadata.row_group(0).column(0).compression == 'SNAPPY'";
        let o = std::process::Command::new(py).args(["-c", script]).arg(&files[5]).arg(&path).output().unwrap();
        assert!(o.status.success(), "pyarrow: {}", stderr(&o));
        files.push(path);
    }
    for f in &files {
        let args = ["eval", "probe", "--json", "--label", "cell_type", "--folds", "2", "--neighbours", "3"];
        let o = corrflow(&[&args[..], &["--embeddings", f.to_str().unwrap()]].concat());
        let s = ok_json(&o);
        assert_eq!(s["cells"], 40, "{}: {s}", f.display());
    }
}
