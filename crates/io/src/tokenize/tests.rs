use super::*;
use crate::vocab::BUILTIN;

pub(super) fn chunk(rows: &[&[(u32, f64)]]) -> CellChunk {
    let mut c = CellChunk { indptr: vec![0], ..Default::default() };
    for (i, r) in rows.iter().enumerate() {
        for &(g, v) in *r {
            c.genes.push(g);
            c.values.push(v);
        }
        c.indptr.push(c.genes.len());
        c.cell_ids.push(format!("c{i}"));
    }
    c
}

pub(super) fn v1() -> TokenizeOptions {
    TokenizeOptions { layout: SequenceLayout::v1(), allow_normalized: false, transform: ValueTransform::None }
}

#[test]
fn duplicate_genes_are_summed_and_unknown_genes_count_only_in_total() {
    let vocab = Vocabulary::resolve(BUILTIN).unwrap();
    // Column 0 and 1 are the same gene; column 2 is unknown; column 3 another gene.
    let genes: Vec<String> =
        ["ENSG00000000003", "ENSG00000000003.7", "nope", "ENSG00000000005"].map(String::from).to_vec();
    let mapper = GeneMapper::new(&vocab, &genes);
    assert_eq!(mapper.stats.duplicate_columns, 1);
    assert_eq!(mapper.stats.not_in_vocabulary, 1);
    let c = chunk(&[&[(0, 1.0), (1, 1.0), (2, 100.0), (3, 2.0)]]);
    let t = tokenize_chunk(Path::new("x"), &c, &genes, &mapper, &vocab, &v1()).unwrap();
    let n = 104.0;
    let x3 = normalized_expression(2.0, n, vocab.median(2).unwrap());
    let x5 = normalized_expression(2.0, n, vocab.median(3).unwrap());
    let expected = if x3 >= x5 { vec![2, 3] } else { vec![3, 2] };
    assert_eq!(t.tokens, expected);
}

#[test]
fn named_cells_tokenize_exactly_as_ingest_does() {
    let vocab = Vocabulary::resolve(BUILTIN).unwrap();
    let genes: Vec<String> =
        ["ENSG00000000003", "ENSG00000000003.7", "nope", "ENSG00000000005", "TSPAN6", "ENSG00000000419"]
            .map(String::from)
            .to_vec();
    let counts = [1.0, 1.0, 100.0, 2.0, 0.0, 7.0];
    let mapper = GeneMapper::new(&vocab, &genes);
    let row: Vec<(u32, f64)> = counts.iter().enumerate().map(|(i, &c)| (i as u32, c)).collect();
    let c = chunk(&[&row]);
    let t = tokenize_chunk(Path::new("x"), &c, &genes, &mapper, &vocab, &v1()).unwrap();
    let named = tokenize_named_cell(&vocab, &SequenceLayout::v1(), &genes, &counts).unwrap();
    assert_eq!(named.tokens, t.tokens);
    assert_eq!(named.unknown_genes, 1);
    let short = SequenceLayout { max_genes: 1, ..SequenceLayout::v1() };
    assert_eq!(tokenize_named_cell(&vocab, &short, &genes, &counts).unwrap().tokens, t.tokens[..1]);
}

#[test]
fn named_cells_reject_mismatched_lengths_and_bad_counts_and_allow_empty_results() {
    let vocab = Vocabulary::resolve(BUILTIN).unwrap();
    let g = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let v1 = SequenceLayout::v1();
    assert!(tokenize_named_cell(&vocab, &v1, &g(&["A", "B"]), &[1.0]).unwrap_err().contains("2 genes but 1"));
    for bad in [-1.0, f64::NAN, f64::INFINITY] {
        let e = tokenize_named_cell(&vocab, &v1, &g(&["TSPAN6"]), &[bad]).unwrap_err();
        assert!(e.contains("TSPAN6") && e.contains("finite"), "{e}");
    }
    let none = tokenize_named_cell(&vocab, &v1, &g(&["nope", "TSPAN6"]), &[3.0, 0.0]).unwrap();
    assert_eq!((none.tokens.len(), none.unknown_genes), (0, 1));
}

#[test]
fn cells_without_vocabulary_genes_are_dropped_and_counted() {
    let vocab = Vocabulary::resolve(BUILTIN).unwrap();
    let genes: Vec<String> = ["nope", "ENSG00000000003"].map(String::from).to_vec();
    let mapper = GeneMapper::new(&vocab, &genes);
    let c = chunk(&[&[(0, 5.0)], &[(1, 1.0)], &[]]);
    let t = tokenize_chunk(Path::new("x"), &c, &genes, &mapper, &vocab, &v1()).unwrap();
    assert_eq!(t.kept, vec![1]);
    assert_eq!(t.dropped_no_vocab_genes, 2);
}

#[test]
fn bad_values_are_errors_naming_file_cell_and_gene() {
    let vocab = Vocabulary::resolve(BUILTIN).unwrap();
    let genes: Vec<String> = vec!["ENSG00000000003".into()];
    let mapper = GeneMapper::new(&vocab, &genes);
    for (v, needle) in [(-1.0, "negative"), (f64::NAN, "non-finite"), (1.5, "non-integer")] {
        let c = chunk(&[&[(0, v)]]);
        let e = tokenize_chunk(Path::new("f.h5ad"), &c, &genes, &mapper, &vocab, &v1()).unwrap_err().to_string();
        assert!(e.contains("f.h5ad") && e.contains("c0") && e.contains("ENSG00000000003") && e.contains(needle), "{e}");
    }
    let lenient = TokenizeOptions { allow_normalized: true, ..v1() };
    let c = chunk(&[&[(0, 1.5)]]);
    assert!(tokenize_chunk(Path::new("f"), &c, &genes, &mapper, &vocab, &lenient).is_ok());
}

#[test]
fn finite_counts_whose_total_overflows_are_refused_from_files_and_requests() {
    // Each value is finite and an integer, but the total is infinite: every gene would
    // normalize to 0 and the tokens would come out in tie order.
    let vocab = Vocabulary::resolve(BUILTIN).unwrap();
    let genes: Vec<String> = ["ENSG00000000003", "ENSG00000000005"].map(String::from).to_vec();
    let mapper = GeneMapper::new(&vocab, &genes);
    let c = chunk(&[&[(0, 1e308), (1, 1e308)]]);
    let e = tokenize_chunk(Path::new("f.h5ad"), &c, &genes, &mapper, &vocab, &v1()).unwrap_err().to_string();
    assert!(e.contains("f.h5ad") && e.contains("c0") && e.contains("largest float64"), "{e}");
    let e = tokenize_named_cell(&vocab, &SequenceLayout::v1(), &genes, &[1e308, 1e308]).unwrap_err();
    assert!(e.contains("largest float64"), "{e}");
    let e = named_cell_expression(&vocab, &genes, &[1e308, 1e308]).unwrap_err();
    assert!(e.contains("largest float64"), "{e}");
}

#[test]
fn scaled_counts_are_recognised_within_float32_rounding_and_continuous_values_are_not() {
    let scale = 1e4 / 2_345.0;
    let counts = [1.0, 2.0, 7.0, 130.0, 4_096.0];
    let scaled: Vec<f64> = counts.iter().map(|c| f64::from((c * scale) as f32)).collect();
    let logged: Vec<f64> = scaled.iter().map(|v| f64::from((*v as f32).ln_1p()).exp_m1()).collect();
    for values in [&scaled, &logged] {
        let unit = count_unit(values[0], values).expect("scaled counts");
        let back: Vec<f64> = values.iter().map(|v| (v / unit).round()).collect();
        assert_eq!(back, counts);
    }
    assert_eq!(count_unit(0.5, &[0.5, 1.0, 1.3]), None);
    assert_eq!(count_unit(0.0, &[0.0]), None);
}

#[test]
fn float32_normalized_counts_give_the_tokens_of_the_raw_counts_even_at_near_ties() {
    // Two genes whose normalized counts tie exactly (2/median 1 and 4/median 2 in effect):
    // float32 rounding of the scaled values must not break the tie differently.
    let vocab = Vocabulary::resolve(BUILTIN).unwrap();
    let genes: Vec<String> = (2..200).map(|t| vocab.token(t).unwrap().to_string()).collect();
    let mapper = GeneMapper::new(&vocab, &genes);
    let counts: Vec<(u32, f64)> = (0..198).map(|g| (g, f64::from((g * 37 + 11) % 23 + 1))).collect();
    let total: f64 = counts.iter().map(|c| c.1).sum();
    let a = tokenize_chunk(Path::new("x"), &chunk(&[&counts]), &genes, &mapper, &vocab, &v1()).unwrap();
    let f32_of = |v: f64| f64::from(v as f32);
    let norm: Vec<(u32, f64)> = counts.iter().map(|&(g, c)| (g, f32_of(c * 1e4 / total))).collect();
    let logs: Vec<(u32, f64)> = norm.iter().map(|&(g, v)| (g, f64::from((v as f32).ln_1p()))).collect();
    let normalized = TokenizeOptions { allow_normalized: true, ..v1() };
    let b = tokenize_chunk(Path::new("x"), &chunk(&[&norm]), &genes, &mapper, &vocab, &normalized).unwrap();
    let opts = TokenizeOptions { allow_normalized: true, transform: ValueTransform::Expm1, ..v1() };
    let c = tokenize_chunk(Path::new("x"), &chunk(&[&logs]), &genes, &mapper, &vocab, &opts).unwrap();
    assert_eq!(a.tokens, b.tokens);
    assert_eq!(a.tokens, c.tokens);
}

#[test]
fn expm1_of_log1p_values_gives_the_tokens_of_the_counts() {
    let vocab = Vocabulary::resolve(BUILTIN).unwrap();
    let genes: Vec<String> = (2..40).map(|t| vocab.token(t).unwrap().to_string()).collect();
    let mapper = GeneMapper::new(&vocab, &genes);
    let counts: Vec<(u32, f64)> = (0..38).map(|g| (g, f64::from(g % 7 + 1))).collect();
    let logs: Vec<(u32, f64)> = counts.iter().map(|&(g, v)| (g, (v / 3.0).ln_1p())).collect();
    let a = tokenize_chunk(Path::new("x"), &chunk(&[&counts]), &genes, &mapper, &vocab, &v1()).unwrap();
    let opts = TokenizeOptions { allow_normalized: true, transform: ValueTransform::Expm1, ..v1() };
    let b = tokenize_chunk(Path::new("x"), &chunk(&[&logs]), &genes, &mapper, &vocab, &opts).unwrap();
    assert_eq!(a.tokens, b.tokens);
}
