//! `vocab build` medians stay within their documented relative error (alpha) of the exact
//! numpy medians of the nonzero normalized expression, on real data.

use crate::common;

use common::*;

#[test]
fn streaming_medians_are_within_alpha_of_exact_medians() {
    let Some(py) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("vocab");
    let b = bundled();
    let s = ok_json(&corrflow(&[
        "vocab",
        "build",
        "--json",
        "--alpha",
        "0.001",
        "--gene-column",
        "gene_ids",
        "--out",
        out.to_str().unwrap(),
        b.to_str().unwrap(),
    ]));
    assert!(s["genes"].as_u64().unwrap() > 10_000, "{s}");
    let script = r#"
import sys, csv, numpy as np, anndata as ad, scipy.sparse as sp
a = ad.read_h5ad(sys.argv[1]); X = sp.csr_matrix(a.X, dtype=np.float64)
n = np.asarray(X.sum(axis=1)).ravel()
N = sp.diags(1e4 / n) @ X
N = N.tocsc()
ids = list(a.var["gene_ids"])
est = {g: float(m) for g, m in list(csv.reader(open(sys.argv[2] + "/gene_median_dictionary.tsv"), delimiter="\t"))[1:]}
worst, checked = 0.0, 0
for j, g in enumerate(ids):
    v = N.data[N.indptr[j]:N.indptr[j + 1]]
    v = v[v > 0]
    if len(v) == 0:
        assert g not in est, g
        continue
    exact = float(np.median(v)); checked += 1
    worst = max(worst, abs(est[g] - exact) / exact)
print(checked, worst)
assert checked == len(est), (checked, len(est))
assert worst <= 0.001 * (1 + 1e-9), worst
"#;
    let o = std::process::Command::new(py)
        .args(["-c", script, b.to_str().unwrap(), out.to_str().unwrap()])
        .output()
        .unwrap();
    println!("genes checked, worst relative error: {}", stdout(&o));
    assert!(o.status.success(), "{}", stderr(&o));
    // The built vocabulary tokenizes the same file.
    let corpus = tmp.path().join("c");
    ok_json(&corrflow(&[
        "ingest",
        "--json",
        "--vocab",
        out.to_str().unwrap(),
        "--gene-column",
        "gene_ids",
        "--atlas",
        "a",
        "--out",
        corpus.to_str().unwrap(),
        b.to_str().unwrap(),
    ]));
}

/// `--two-pass` (a coarse pass, then fine counts inside each gene's median buckets) writes the
/// one-pass vocabulary byte for byte, on real data, and says it read the inputs twice.
#[test]
fn two_passes_write_the_one_pass_vocabulary() {
    let tmp = tempfile::tempdir().unwrap();
    let b = bundled();
    let build = |dir: &str, extra: &[&str]| {
        let out = tmp.path().join(dir);
        let mut args = vec![
            "vocab",
            "build",
            "--json",
            "--name",
            "v",
            "--gene-column",
            "gene_ids",
            "--out",
            out.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        args.push(b.to_str().unwrap());
        (out.clone(), ok_json(&corrflow(&args)))
    };
    let (one, s1) = build("one", &[]);
    let (two, s2) = build("two", &["--two-pass"]);
    assert_eq!((s1["passes"].as_u64(), s2["passes"].as_u64()), (Some(1), Some(2)), "{s1} {s2}");
    assert_eq!((&s1["genes"], &s1["cells"], &s1["hash"]), (&s2["genes"], &s2["cells"], &s2["hash"]));
    for f in ["gene_median_dictionary.tsv", "token_dictionary.tsv"] {
        assert_eq!(std::fs::read(one.join(f)).unwrap(), std::fs::read(two.join(f)).unwrap(), "{f}");
    }
    // At an alpha as coarse as the first pass, one pass already is the bound: it reads once.
    let (_, s3) = build("coarse", &["--two-pass", "--alpha", "0.1"]);
    assert_eq!(s3["passes"].as_u64(), Some(1), "{s3}");
}

/// A sketch memory budget far below what Kang's 14k cells reach folds their tails and counts
/// again, in a second read, the genes whose medians moved into them (here both happen): the
/// vocabulary's files are still the unbounded one pass's, byte for byte, and `--json` says so.
#[test]
fn a_sketch_memory_budget_folds_tails_and_keeps_the_medians() {
    let (Some(ctrl), Some(stim)) = (data("kang_ctrl.h5ad"), data("kang_stim.h5ad")) else { return };
    let tmp = tempfile::tempdir().unwrap();
    let build = |dir: &str, mib: &str| {
        let out = tmp.path().join(dir);
        let args = [
            "vocab",
            "build",
            "--json",
            "--name",
            "v",
            "--sketch-memory-mb",
            mib,
            "--out",
            out.to_str().unwrap(),
            ctrl.to_str().unwrap(),
            stim.to_str().unwrap(),
        ];
        (out.clone(), ok_json(&corrflow(&args)))
    };
    let (whole, s0) = build("whole", "0");
    let (folded, s1) = build("folded", "1");
    assert_eq!((s0["pages_folded"].as_u64(), s0["passes"].as_u64()), (Some(0), Some(1)), "{s0}");
    assert!(s1["pages_folded"].as_u64().unwrap() > 0, "{s1}");
    assert!(s1["genes_recounted"].as_u64().unwrap() > 0, "{s1}");
    assert_eq!(s1["passes"].as_u64(), Some(2), "{s1}");
    assert_eq!((&s0["genes"], &s0["cells"], &s0["hash"]), (&s1["genes"], &s1["cells"], &s1["hash"]));
    for f in ["gene_median_dictionary.tsv", "token_dictionary.tsv"] {
        assert_eq!(std::fs::read(whole.join(f)).unwrap(), std::fs::read(folded.join(f)).unwrap(), "{f}");
    }
}
