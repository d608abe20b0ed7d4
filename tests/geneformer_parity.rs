//! Tokens equal Geneformer V1's tokenizer (an independent numpy reference of its code, see
//! tests/python/geneformer_reference.py) on real data, read back both from the Parquet shards
//! with pyarrow and from the Hugging Face export with `datasets.load_from_disk`.

use crate::common;

use std::path::Path;

use common::*;

fn check(h5ad: &Path, gene_column: Option<&str>) {
    let Some(py) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("c");
    let hf = tmp.path().join("hf");
    let mut args =
        vec!["ingest", "--json", "--atlas", "a", "--out", corpus.to_str().unwrap(), "--hf", hf.to_str().unwrap()];
    if let Some(g) = gene_column {
        args.extend(["--gene-column", g]);
    }
    args.push(h5ad.to_str().unwrap());
    ok_json(&corrflow(&args));
    let atlas = corpus.join("atlases/a");
    let mut pargs =
        vec!["--h5ad", h5ad.to_str().unwrap(), "--atlas-dir", atlas.to_str().unwrap(), "--hf", hf.to_str().unwrap()];
    if let Some(g) = gene_column {
        pargs.extend(["--gene-column", g]);
    }
    let o = run_python(&py, "geneformer_reference.py", &pargs);
    println!("{}", stdout(&o));
    assert!(o.status.success(), "tokens differ from Geneformer's: {}{}", stdout(&o), stderr(&o));
}

#[test]
fn bundled_pbmc1k_matches_geneformer() {
    check(&bundled(), Some("gene_ids"));
}

#[test]
fn pbmc3k_legacy_anndata_matches_geneformer() {
    if let Some(p) = data("pbmc3k.h5ad") {
        check(&p, Some("gene_ids"));
    }
}

#[test]
fn kang_ctrl_gene_symbols_match_geneformer() {
    if let Some(p) = data("kang_ctrl.h5ad") {
        check(&p, None);
    }
}
