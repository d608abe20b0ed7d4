//! Sparse matrices as scipy defines them, in every reader (issue 51): a gene listed twice within
//! a cell is summed, giving the tokens of scipy's `sum_duplicates()` canonical form (h5ad CSR,
//! CSC and legacy, 10x, MatrixMarket, zarr CSR and CSC; fixtures by
//! tests/python/make_csr_cases.py, and a proptest over random small matrices written here as
//! h5ad and zarr); index pointers that scipy's `check_format` refuses are refused naming the file
//! and the array; a missing chunk of a zarr sparse matrix is refused naming the array and the
//! chunk, while the all-zero `indptr` chunk zarr-python leaves out is read.

use crate::common;

use std::path::{Path, PathBuf};

use common::*;

/// The cases of make_csr_cases.py, written once per test binary.
fn cases() -> Option<PathBuf> {
    static C: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    C.get_or_init(|| {
        let fx = fixtures()?;
        let py = python()?;
        let out = fx.join("csr_cases");
        let o = run_python(&py, "make_csr_cases.py", &[fx.join("good").to_str().unwrap(), out.to_str().unwrap()]);
        assert!(o.status.success(), "make_csr_cases.py: {}", stderr(&o));
        let info: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
        assert!(info["dup_entries"].as_u64() > info["canonical_entries"].as_u64(), "no repeated genes: {info}");
        Some(out)
    })
    .clone()
}

fn ingest(corpus: &Path, atlas: &str, extra: &[&str], file: &Path) -> Vec<(String, Vec<u32>)> {
    let c = corpus.to_str().unwrap();
    let mut args = vec!["ingest", "--json", "--config", "configs/tiny.toml", "--atlas", atlas, "--out", c];
    args.extend_from_slice(extra);
    args.push(file.to_str().unwrap());
    ok_json(&corrflow(&args));
    atlas_tokens(corpus, atlas)
}

/// The message of an ingest of `file` that must be refused (exit 1, no panic).
fn refused(extra: &[&str], file: &Path) -> String {
    let tmp = tempfile::tempdir().unwrap();
    let c = tmp.path().join("c");
    let mut args = vec!["ingest", "--atlas", "x", "--out", c.to_str().unwrap()];
    args.extend_from_slice(extra);
    args.push(file.to_str().unwrap());
    let o = corrflow(&args);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{} was not refused cleanly: {e}", file.display());
    assert!(!e.contains("panicked"), "{e}");
    e
}

#[test]
fn a_gene_listed_twice_in_a_cell_is_summed_as_scipys_sum_duplicates() {
    let Some(c) = cases() else { return };
    let dup = c.join("dup");
    let tmp = tempfile::tempdir().unwrap();
    let ids = ["--gene-column", "gene_ids"];
    let reference = ingest(tmp.path(), "canonical", &ids, &dup.join("canonical.h5ad"));
    assert_eq!(reference.len(), 64);
    for (file, extra) in [
        ("csr.h5ad", &ids[..]),
        ("csc.h5ad", &ids[..]),
        ("legacy.h5ad", &ids[..]),
        ("v2.zarr", &ids[..]),
        ("v3.zarr", &ids[..]),
        ("v3_csc.zarr", &ids[..]),
        ("tenx.h5", &[][..]),
        ("mtx", &[][..]),
    ] {
        let atlas = file.replace('.', "_");
        let tokens = ingest(tmp.path(), &atlas, extra, &dup.join(file));
        assert_eq!(tokens, reference, "{file}: not the tokens of scipy's canonical form");
    }
}

#[test]
fn index_pointers_scipy_refuses_are_refused_naming_the_file_and_the_array() {
    let Some(c) = cases() else { return };
    let bad = c.join("indptr");
    let ids = ["--gene-column", "gene_ids"];
    let start = "X/indptr: index pointer should start with 0, found 5";
    let last = "X/indptr: last value of index pointer should be";
    let decreasing = "X/indptr: index pointer values must form a non-decreasing sequence, entry 10 is";
    for (file, extra, want) in [
        ("h5ad_start.h5ad", &ids[..], start),
        ("h5ad_last.h5ad", &ids[..], last),
        ("h5ad_decreasing.h5ad", &ids[..], decreasing),
        ("zarr_start.zarr", &ids[..], start),
        ("zarr_last.zarr", &ids[..], last),
        ("zarr_decreasing.zarr", &ids[..], decreasing),
        ("legacy_start.h5ad", &ids[..], start),
        ("csc_start.h5ad", &ids[..], start),
        ("zarr_csc_start.zarr", &ids[..], start),
        ("tenx_start.h5", &[][..], "matrix/indptr: index pointer should start with 0, found 5"),
    ] {
        let e = refused(extra, &bad.join(file));
        assert!(e.contains(file) && e.contains(want), "{file}: {e}");
    }
}

/// Moves a file away while `f` runs (the fixture is shared by the test binary's other tests,
/// none of which reads these stores).
fn without(file: &Path, f: impl FnOnce()) {
    let away = file.with_extension("away");
    std::fs::rename(file, &away).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    std::fs::rename(&away, file).unwrap();
    if let Err(p) = r {
        std::panic::resume_unwind(p);
    }
}

#[test]
fn a_missing_chunk_of_a_zarr_sparse_matrix_is_refused_naming_the_array_and_the_chunk() {
    let Some(c) = cases() else { return };
    let ch = c.join("chunks");
    let ids = ["--gene-column", "gene_ids"];
    let cases: &[(&str, &str, &str, &[&str])] = &[
        // store, array, chunk key (below the array), extra flags
        ("v2.zarr", "X/data", "3", &[]),
        ("v2.zarr", "X/indices", "7", &[]),
        ("v2.zarr", "X/indptr", "0", &[]),
        ("v2.zarr", "raw/X/data", "2", &["--counts", "raw"]),
        ("v3.zarr", "X/data", "c/3", &[]),
        ("v3.zarr", "X/indices", "c/160", &[]),
        ("v3.zarr", "X/indptr", "c/0", &[]),
        ("v3.zarr", "layers/counts/indices", "c/5", &["--counts", "layer:counts"]),
        // Sharded: a whole shard.
        ("v3_sharded.zarr", "X/data", "c/1", &[]),
        ("v3_sharded.zarr", "X/indptr", "c/0", &[]),
        ("v3_sharded.zarr", "raw/X/indices", "c/0", &["--counts", "raw"]),
    ];
    for (store, array, key, extra) in cases {
        let file = ch.join(store).join(array).join(key);
        let chunk = key.trim_start_matches("c/");
        let sep = if key.starts_with("c/") { "/c/" } else { "/" };
        let want = format!("{array}: chunk {chunk} (key {array}{sep}{chunk}) is missing");
        without(&file, || {
            let e = refused(&[&ids[..], extra].concat(), &ch.join(store));
            assert!(e.contains(store) && e.contains(&want) && e.contains("write_empty_chunks"), "{store} {key}: {e}");
        });
    }
    // Each store reads when whole, with the tokens of X from every matrix.
    let tmp = tempfile::tempdir().unwrap();
    let reference = ingest(tmp.path(), "v2", &ids, &ch.join("v2.zarr"));
    for (atlas, extra) in [("raw", &["--counts", "raw"][..]), ("layer", &["--counts", "layer:counts"][..])] {
        assert_eq!(ingest(tmp.path(), atlas, &[&ids[..], extra].concat(), &ch.join("v3_sharded.zarr")), reference);
    }
    // An inner chunk zarr left out of a shard (explicit zeros): refused too, naming it.
    let e = refused(&ids, &ch.join("zeros_sharded.zarr"));
    assert!(e.contains("X/data: inner chunk 1 of chunk 0 (key X/data/c/0) is missing"), "{e}");
    // The all-zero indptr chunk of leading empty cells, which zarr-python leaves out, is read.
    assert!(!ch.join("leading_empty.zarr/X/indptr/c/0").exists(), "zarr wrote the all-zero chunk");
    let h5ad = ingest(tmp.path(), "lead_h5ad", &ids, &ch.join("leading_empty.h5ad"));
    assert_eq!(ingest(tmp.path(), "lead_zarr", &ids, &ch.join("leading_empty.zarr")), h5ad);
}

/// Random small CSR matrices (repeated genes, empty cells, unsorted genes, explicit zeros),
/// written by this test as h5ad and as zarr (chunks of a few entries), read back through
/// `formats::open` in chunks of a few cells: the tokens are those of the scipy canonical form
/// (each cell's genes sorted, repeats summed) tokenized from memory.
mod canonical_form {
    use std::path::Path;

    use corrflow::formats::{open, CellChunk, ChunkValues, ReadOptions};
    use corrflow::tokenize::{tokenize_chunk, GeneMapper, TokenizeOptions, ValueTransform};
    use corrflow::vocab::{Vocabulary, BUILTIN};
    use hdf5::types::VarLenUnicode;
    use proptest::prelude::*;

    const GENES: usize = 24;

    /// Cells as (gene, count) lists in stored order.
    type Cells = Vec<Vec<(u32, f32)>>;

    fn gene_ids(vocab: &Vocabulary) -> Vec<String> {
        // Every sixth gene is outside the vocabulary.
        (0..GENES)
            .map(
                |g| {
                    if g % 6 == 5 {
                        format!("NOTAGENE{g}")
                    } else {
                        vocab.token(2 + 7 * g as u32).unwrap().to_string()
                    }
                },
            )
            .collect()
    }

    fn csr(cells: &Cells) -> (Vec<i64>, Vec<i32>, Vec<f32>) {
        let mut indptr = vec![0i64];
        let (mut indices, mut data) = (Vec::new(), Vec::new());
        for c in cells {
            indices.extend(c.iter().map(|e| e.0 as i32));
            data.extend(c.iter().map(|e| e.1));
            indptr.push(indices.len() as i64);
        }
        (indptr, indices, data)
    }

    fn text(s: &str) -> VarLenUnicode {
        s.parse().unwrap()
    }

    fn write_h5ad(path: &Path, cells: &Cells, genes: &[String]) -> hdf5::Result<()> {
        // Unlocked: the other tests of this binary spawn processes, and a child forked while the
        // file is open inherits its descriptor and with it HDF5's exclusive lock, so the read
        // below failed with EAGAIN ("unable to lock file") while that child lived (CI, session 33).
        let f = hdf5::File::with_options().with_fapl(|p| p.file_locking(false)).create(path)?;
        let (indptr, indices, data) = csr(cells);
        let x = f.create_group("X")?;
        x.new_attr::<VarLenUnicode>().create("encoding-type")?.write_scalar(&text("csr_matrix"))?;
        x.new_attr::<i64>().shape(2).create("shape")?.write(&[cells.len() as i64, GENES as i64])?;
        x.new_dataset_builder().with_data(&data).create("data")?;
        x.new_dataset_builder().with_data(&indices).create("indices")?;
        x.new_dataset_builder().with_data(&indptr).create("indptr")?;
        let names: Vec<String> = (0..cells.len()).map(|i| format!("c{i}")).collect();
        for (frame, values) in [("obs", &names[..]), ("var", genes)] {
            let g = f.create_group(frame)?;
            g.new_attr::<VarLenUnicode>().create("_index")?.write_scalar(&text("_index"))?;
            let v: Vec<VarLenUnicode> = values.iter().map(|s| text(s)).collect();
            g.new_dataset_builder().with_data(&v).create("_index")?;
        }
        Ok(())
    }

    /// A zarr format 2 store, uncompressed, its sparse arrays in chunks of `chunk` entries.
    fn write_zarr(dir: &Path, cells: &Cells, genes: &[String], chunk: usize, ptr_chunk: usize) {
        let json = |p: &Path, v: serde_json::Value| {
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, v.to_string()).unwrap();
        };
        let group = |key: &str, attrs: serde_json::Value| {
            json(&dir.join(key).join(".zgroup"), serde_json::json!({"zarr_format": 2}));
            json(&dir.join(key).join(".zattrs"), attrs);
        };
        let array = |key: &str, dtype: &str, len: usize, chunk: usize, bytes: Vec<Vec<u8>>, strings: bool| {
            let filters = if strings { serde_json::json!([{"id": "vlen-utf8"}]) } else { serde_json::Value::Null };
            let fill = if strings { serde_json::json!("") } else { serde_json::json!(0) };
            json(
                &dir.join(key).join(".zarray"),
                serde_json::json!({"zarr_format": 2, "shape": [len], "chunks": [chunk.max(1)], "dtype": dtype,
                    "compressor": null, "fill_value": fill, "order": "C", "filters": filters,
                    "dimension_separator": "."}),
            );
            for (k, b) in bytes.into_iter().enumerate() {
                std::fs::write(dir.join(key).join(k.to_string()), b).unwrap();
            }
        };
        // Fixed-width chunks of little-endian values; the last one padded.
        fn chunks<T: Copy + Default>(v: &[T], n: usize, le: impl Fn(T) -> Vec<u8>) -> Vec<Vec<u8>> {
            v.chunks(n.max(1))
                .map(|c| {
                    let mut c = c.to_vec();
                    c.resize(n.max(1), T::default());
                    c.into_iter().flat_map(&le).collect()
                })
                .collect()
        }
        fn vlen(v: &[String]) -> Vec<u8> {
            let mut b = (v.len() as u32).to_le_bytes().to_vec();
            for s in v {
                b.extend((s.len() as u32).to_le_bytes());
                b.extend(s.as_bytes());
            }
            b
        }
        let (indptr, indices, data) = csr(cells);
        group("", serde_json::json!({"encoding-type": "anndata", "encoding-version": "0.1.0"}));
        group(
            "X",
            serde_json::json!({"encoding-type": "csr_matrix", "encoding-version": "0.1.0",
            "shape": [cells.len(), GENES]}),
        );
        array("X/data", "<f4", data.len(), chunk, chunks(&data, chunk, |x: f32| x.to_le_bytes().to_vec()), false);
        array(
            "X/indices",
            "<i4",
            indices.len(),
            chunk,
            chunks(&indices, chunk, |x: i32| x.to_le_bytes().to_vec()),
            false,
        );
        array(
            "X/indptr",
            "<i8",
            indptr.len(),
            ptr_chunk,
            chunks(&indptr, ptr_chunk, |x: i64| x.to_le_bytes().to_vec()),
            false,
        );
        let names: Vec<String> = (0..cells.len()).map(|i| format!("c{i}")).collect();
        for (frame, values) in [("obs", &names[..]), ("var", genes)] {
            group(
                frame,
                serde_json::json!({"_index": "_index", "encoding-type": "dataframe",
                "encoding-version": "0.2.0", "column-order": []}),
            );
            array(&format!("{frame}/_index"), "|O", values.len(), values.len(), vec![vlen(values)], true);
        }
    }

    /// scipy's canonical form of `cells` as one chunk: genes sorted, repeats summed (in f32).
    fn canonical(cells: &Cells) -> CellChunk {
        let mut c = CellChunk { indptr: vec![0], values: ChunkValues::F32(Vec::new()), ..Default::default() };
        let ChunkValues::F32(values) = &mut c.values else { unreachable!() };
        for (i, cell) in cells.iter().enumerate() {
            let mut sorted = cell.clone();
            sorted.sort_by_key(|e| e.0);
            for (g, v) in sorted {
                if c.genes.len() > c.indptr[i] && *c.genes.last().unwrap() == g {
                    *values.last_mut().unwrap() += v;
                } else {
                    c.genes.push(g);
                    values.push(v);
                }
            }
            c.indptr.push(c.genes.len());
            c.cell_ids.push(format!("c{i}"));
        }
        c
    }

    /// (cell id, tokens) of the kept cells of `chunk`.
    fn tokens(chunk: &CellChunk, genes: &[String], vocab: &Vocabulary) -> Vec<(String, Vec<u32>)> {
        let opts = TokenizeOptions {
            layout: corrflow::algorithms::SequenceLayout::v1(),
            allow_normalized: false,
            transform: ValueTransform::None,
        };
        let mapper = GeneMapper::new(vocab, genes);
        let t = tokenize_chunk(Path::new("x"), chunk, genes, &mapper, vocab, &opts).unwrap();
        t.kept
            .iter()
            .enumerate()
            .map(|(k, &i)| (chunk.cell_ids[i].clone(), t.tokens[t.offsets[k]..t.offsets[k + 1]].to_vec()))
            .collect()
    }

    fn read_tokens(path: &Path, chunk_cells: usize, genes: &[String], vocab: &Vocabulary) -> Vec<(String, Vec<u32>)> {
        let opts = ReadOptions { chunk_cells, ..Default::default() };
        let mut src = open(path, &opts).unwrap_or_else(|e| panic!("{e}"));
        let n = src.n_cells();
        let mut out = Vec::new();
        for start in (0..n).step_by(chunk_cells) {
            let chunk = src.read_chunk(start..(start + chunk_cells).min(n)).unwrap_or_else(|e| panic!("{e}"));
            out.extend(tokens(&chunk, genes, vocab));
        }
        out
    }

    fn cells() -> impl Strategy<Value = Cells> {
        let entry = (0..GENES as u32, prop_oneof![Just(0.0f32), 1.0f32..40.0].prop_map(|v| v.floor()));
        prop::collection::vec(prop::collection::vec(entry, 0..14), 1..10)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 40, failure_persistence: None, ..ProptestConfig::default() })]

        #[test]
        fn any_csr_the_readers_accept_gives_the_tokens_of_its_canonical_form(
            cells in cells(),
            chunk in 1usize..9,
            ptr_chunk in 1usize..5,
            chunk_cells in 1usize..5,
        ) {
            let vocab = Vocabulary::resolve(BUILTIN).unwrap();
            let genes = gene_ids(&vocab);
            let expected = tokens(&canonical(&cells), &genes, &vocab);
            let tmp = tempfile::tempdir().unwrap();
            let h5ad = tmp.path().join("m.h5ad");
            write_h5ad(&h5ad, &cells, &genes).unwrap();
            prop_assert_eq!(&read_tokens(&h5ad, chunk_cells, &genes, &vocab), &expected, "h5ad");
            let zarr = tmp.path().join("m.zarr");
            write_zarr(&zarr, &cells, &genes, chunk, ptr_chunk);
            prop_assert_eq!(&read_tokens(&zarr, chunk_cells, &genes, &vocab), &expected, "zarr");
        }
    }
}
