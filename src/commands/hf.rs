//! `import hf` and `export hf-model`: models in and out of the Hugging Face format.

use std::path::{Path, PathBuf};

use anyhow::Result;

use super::print_summary;

/// The vocabulary of `import hf`: `--vocab` when given; else the one an exported model carries
/// (`vocab/` TSV tables, or Geneformer's pickles beside `config.json`); else the built-in.
fn import_vocab(model: &Path, vocab: Option<&str>) -> String {
    if let Some(v) = vocab {
        return v.to_string();
    }
    let tables = model.join(corrflow::export::hf::VOCAB_DIR);
    if tables.join(corrflow::vocab::TOKEN_FILE).is_file() {
        return tables.display().to_string();
    }
    if model.join("token_dictionary.pkl").is_file() {
        return model.display().to_string();
    }
    corrflow::vocab::BUILTIN.to_string()
}

pub(crate) fn import_hf(
    model: &Path,
    vocab: Option<&str>,
    version: corrflow::config::ModelVersion,
    out: &Path,
    json: bool,
) -> Result<()> {
    let vocab = import_vocab(model, vocab);
    super::ingest::vocab_input(super::overlap().input("--model", model), &vocab).output_dir("--out", out).check()?;
    let vocab = corrflow::vocab::Vocabulary::resolve(&vocab)?;
    let vocab = if version == corrflow::config::ModelVersion::V2 { vocab.with_v2_specials() } else { vocab };
    let s = corrflow::model::import::import_hf(model, &vocab, out)?;
    let mut human = format!(
        "imported {} ({} layers, hidden {}, {} positions, {} parameters, vocabulary {} of {} tokens) -> {}",
        s.architecture, s.layers, s.hidden, s.max_positions, s.parameters, s.vocab, s.vocab_size, s.checkpoint
    );
    let activation = format!("{:?}", s.mlm_activation).to_lowercase();
    human.push_str(&format!("\nMLM head: {activation} transform ({})", s.mlm_activation_from));
    let record = corrflow::model::import::RECORD_FILE;
    human.push_str(&match s.sha256_checked {
        Some(n) => format!("\nchecked: {n} files match the sha256 export hf-model recorded ({record})"),
        None => format!(
            "\nnot checked: no {record} (not written by export hf-model), so damaged weights cannot be told from trained ones"
        ),
    });
    if !s.not_imported.is_empty() {
        human.push_str(&format!(
            "\nnot imported (no place in a corrflow checkpoint; fine-tune for a task head): {}",
            s.not_imported.join(", ")
        ));
    }
    print_summary(json, &human, &s)
}

pub(crate) fn import_values(model: &Path, out: &Path, json: bool) -> Result<()> {
    super::overlap().input("--model", model).output_dir("--out", out).check()?;
    let s = corrflow::model::import::import_values(model, out)?;
    let mut human = format!(
        "imported a {} value model ({} input, {} layers, hidden {}, {} decoded genes, step {}, {} parameters{}) -> {}",
        s.objective,
        s.input,
        s.layers,
        s.hidden,
        s.decode_genes,
        s.step,
        s.parameters,
        if s.written_by.is_empty() { String::new() } else { format!(", written by {}", s.written_by) },
        s.checkpoint
    );
    let record = corrflow::model::import::RECORD_FILE;
    human.push_str(&match s.sha256_checked {
        Some(n) => format!("\nchecked: {n} files match their sha256 ({record})"),
        None => format!("\nnot checked: no {record}, so damaged weights cannot be told from trained ones"),
    });
    print_summary(json, &human, &s)
}

pub(crate) fn export_hf_model(checkpoint: PathBuf, out: PathBuf, json: bool) -> Result<()> {
    super::overlap().input("--checkpoint", &checkpoint).replaced_dir("--out", &out).check()?;
    let s = corrflow::export::hf::export_hf_model(&corrflow::export::hf::HfModelRequest { checkpoint, out })?;
    let mut human = format!(
        "exported step {} as {} ({} layers, hidden {}, {} parameters, vocabulary {} of {} tokens) -> {}: {}",
        s.step,
        s.architecture,
        s.layers,
        s.hidden,
        s.parameters,
        s.vocab,
        s.vocab_size,
        s.out,
        s.files.join(", ")
    );
    for h in &s.heads {
        human.push_str(&format!(
            "\nnot in BERT, written to {}: {} ({}, {} outputs)",
            corrflow::export::hf::HEADS_FILE,
            h.name,
            h.role,
            h.outputs
        ));
    }
    for n in &s.notes {
        human.push_str(&format!("\nnote: {n}"));
    }
    print_summary(json, &human, &s)
}
