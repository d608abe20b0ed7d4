//! Geneformer's pickled dictionaries (`token_dictionary*.pkl`, `gene_median_dictionary*.pkl`,
//! `gene_name_id_dict*.pkl`, `ensembl_mapping_dict*.pkl`, as they ship with its models) read
//! into the text of the three tables a [`super::Vocabulary`] is built from. The Ensembl mapping
//! dictionary (other ids → the vocabulary's id, Geneformer V2's collapse) is added to the name
//! table, so a gene given by a mapped id finds its token the way a symbol does.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_pickle::{DeOptions, HashableValue, Value};

use crate::error::{Error, IoContext, Result};

/// Whether `dir` holds Geneformer's pickled token dictionary.
pub fn has_pickles(dir: &Path) -> bool {
    find(dir, "token_dictionary").is_some()
}

/// `(tokens, medians, names)` TSV text from the pickles in `dir`.
pub fn tables_from_pickles(dir: &Path) -> Result<(String, String, Option<String>)> {
    let tokens_path = find(dir, "token_dictionary")
        .ok_or_else(|| Error::format(dir, "no token_dictionary*.pkl (Geneformer's token dictionary)"))?;
    let medians_path = find(dir, "gene_median_dictionary")
        .ok_or_else(|| Error::format(dir, "no gene_median_dictionary*.pkl (Geneformer's gene medians)"))?;
    let mut tokens: Vec<(String, i64)> = read_dict(&tokens_path)?
        .into_iter()
        .map(|(k, v)| Ok((k, int(&v).ok_or_else(|| Error::format(&tokens_path, "token ids must be integers"))?)))
        .collect::<Result<_>>()?;
    tokens.sort_by_key(|t| t.1);
    check_token_ids(&tokens_path, &tokens)?;
    let mut t = String::from("token\tid\n");
    for (name, id) in &tokens {
        let _ = writeln!(t, "{name}\t{id}");
    }
    let mut m = String::from("ensembl_id\tmedian\n");
    for (gene, v) in read_dict(&medians_path)? {
        check_key(&medians_path, "gene", &gene)?;
        let median = float(&v).ok_or_else(|| {
            Error::format(
                &medians_path,
                format!("the median of {gene} is not a number (numpy scalars: re-pickle with float())"),
            )
        })?;
        let _ = writeln!(m, "{gene}\t{median:?}");
    }
    let mut names = String::new();
    if let Some(p) = find(dir, "gene_name_id") {
        for (symbol, v) in read_dict(&p)? {
            if let Value::String(id) = v {
                if symbol.is_empty() || id.is_empty() {
                    continue; // nothing to look up
                }
                check_key(&p, "symbol", &symbol)?;
                check_key(&p, "gene id", &id)?;
                let _ = writeln!(names, "{symbol}\t{id}");
            }
        }
    }
    if let Some(p) = find(dir, "ensembl_mapping_dict") {
        for (from, v) in read_dict(&p)? {
            if let Value::String(to) = v {
                if from.is_empty() || to.is_empty() {
                    continue;
                }
                check_key(&p, "gene id", &from)?;
                check_key(&p, "gene id", &to)?;
                if from != to {
                    let _ = writeln!(names, "{from}\t{to}");
                }
            }
        }
    }
    let names = (!names.is_empty()).then(|| format!("symbol\tensembl_id\n{names}"));
    Ok((t, m, names))
}

/// The token dictionary's ids (sorted) must run 0..N-1, one token each, and its tokens must be
/// names a table can hold: the pickle's entry is named, not a line of the tables made from it.
fn check_token_ids(path: &Path, tokens: &[(String, i64)]) -> Result<()> {
    let n = tokens.len();
    for (i, (name, id)) in tokens.iter().enumerate() {
        check_key(path, "token", name)?;
        if i > 0 && tokens[i - 1].1 == *id {
            return Err(Error::format(
                path,
                format!("tokens {:?} and {name:?} both have id {id}: each id must name one token", tokens[i - 1].0),
            ));
        }
        if *id != i as i64 {
            let why = if *id < 0 {
                format!("token {name:?} has id {id}")
            } else {
                format!("no token has id {i} (the next is {name:?} with id {id})")
            };
            return Err(Error::format(
                path,
                format!("{why}: the {n} token ids must run 0..{} without gaps", n.max(1) - 1),
            ));
        }
    }
    Ok(())
}

/// A key or value that becomes a field of the TSV tables: not empty, no tab or line break.
fn check_key(path: &Path, what: &str, key: &str) -> Result<()> {
    if key.is_empty() || key.contains(['\t', '\n', '\r']) {
        return Err(Error::format(path, format!("the {what} {key:?} is empty or holds a tab or line break")));
    }
    Ok(())
}

fn find(dir: &Path, stem: &str) -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(stem) && n.ends_with(".pkl")))
        .collect();
    found.sort();
    found.into_iter().next()
}

fn read_dict(path: &Path) -> Result<BTreeMap<String, Value>> {
    let bytes = std::fs::read(path).at(path)?;
    let value = serde_pickle::value_from_slice(&bytes, DeOptions::new().replace_unresolved_globals())
        .map_err(|e| Error::format(path, format!("not a readable pickle: {e}")))?;
    let Value::Dict(d) = value else { return Err(Error::format(path, "the pickle is not a dictionary")) };
    d.into_iter()
        .map(|(k, v)| match k {
            HashableValue::String(s) => Ok((s, v)),
            other => Err(Error::format(path, format!("a key is not a string: {other:?}"))),
        })
        .collect()
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::I64(i) => Some(*i),
        _ => None,
    }
}

fn float(v: &Value) -> Option<f64> {
    match v {
        Value::F64(f) => Some(*f),
        Value::I64(i) => Some(*i as f64),
        _ => None,
    }
}

/// The file names [`write_pickles`] writes, as Geneformer V1's model repository names them.
pub const PICKLE_FILES: [&str; 3] = ["token_dictionary.pkl", "gene_median_dictionary.pkl", "gene_name_id_dict.pkl"];

/// Writes the vocabulary as Geneformer's pickled dictionaries (plain dicts: token → id, gene →
/// median, symbol → gene), each atomically; returns the paths written. The name table holds
/// whatever the vocabulary's does (an imported Ensembl mapping included: Geneformer keeps that
/// in a fourth file, which corrflow cannot tell apart once merged). Without a name table the
/// third file is not written.
pub fn write_pickles(vocab: &super::Vocabulary, dir: &Path) -> Result<Vec<PathBuf>> {
    let s = |v: &str| HashableValue::String(v.to_string());
    let tokens: BTreeMap<HashableValue, Value> =
        vocab.tokens.iter().enumerate().map(|(id, t)| (s(t), Value::I64(id as i64))).collect();
    let medians: BTreeMap<HashableValue, Value> = vocab
        .medians
        .iter()
        .enumerate()
        .filter_map(|(id, m)| m.map(|m| (s(&vocab.tokens[id]), Value::F64(m))))
        .collect();
    let names: BTreeMap<HashableValue, Value> =
        vocab.symbols.iter().map(|(sym, gene)| (s(sym), Value::String(gene.to_string()))).collect();
    let mut written = Vec::new();
    for (file, dict) in PICKLE_FILES.iter().zip([tokens, medians, names]) {
        if dict.is_empty() {
            continue;
        }
        let path = dir.join(file);
        let bytes = serde_pickle::value_to_vec(&Value::Dict(dict), serde_pickle::SerOptions::new())
            .map_err(|e| Error::format(&path, format!("pickling failed: {e}")))?;
        corrflow_fs::atomic::write_atomic(&path, &bytes)?;
        written.push(path);
    }
    Ok(written)
}
